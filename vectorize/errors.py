"""The two ways a conversion can fail.

`Unvectorizable` means "this op, with these inputs, has no vectorized form here": the walker
answers it with the sequential fallback (or a `ConversionError` when fallback is off).
`ConversionError` means a bug or invalid input; it is never swallowed. `CheckError`: the
checked mode found pfor's result differing from the loop's. Every message names the user's
line (`user_location`): an op's traceback runs through TensorFlow, autograph, Keras and
vectorize itself, and the user's line is the last frame outside them.
"""

import contextlib
import os

import tensorflow as tf


class Unvectorizable(Exception):
  """Raised by a converter that cannot vectorize this instance; the walker falls back."""


class ConversionError(ValueError):
  """A conversion that cannot proceed: bad input, a disabled fallback, or a converter bug.

  A `ValueError`, as TF's pfor raises, so code catching that catches this.
  """

  # Autograph re-raises an error from a tf.function's user code with the same type only if
  # that type's __init__ is Exception's (ValueError's is not); otherwise a StagingError.
  __init__ = Exception.__init__


class CheckError(AssertionError):
  """In the checked mode (`vectorize.checked()`), pfor's result differs from the loop's."""

  __init__ = Exception.__init__   # kept by autograph, as ConversionError


CHECK_MARK = "vectorize checked mode"

# Why an Optional (a tf.cond's intermediate in a gradient) stops a conversion.
OPTIONALS = (
    "TensorFlow rewrote a tf.cond to pass its intermediates to a gradient as Optionals (as "
    "it does once a tape has differentiated a tf.function holding it eagerly, or where the "
    "branches could not be traced for the gradient without them). vectorize holds an "
    "Optional per iteration as its value (control_flow/optionals.py), but not its presence "
    "nor values of other types per branch, and an Optional cannot run in a sequential loop. To "
    "fix: give vectorize the undecorated function (`f.python_function`; a function loaded "
    "from a SavedModel has none: let vectorize trace it before a tape differentiates it "
    "eagerly, or load it again), or take the gradient outside the tf.cond (tf.where of "
    "both branches' values)")


@contextlib.contextmanager
def raising_check_errors():
  """A failed check is a graph assertion (InvalidArgumentError): eager callers get it as a
  CheckError, its message from the check."""
  try:
    yield
  except tf.errors.InvalidArgumentError as e:
    if CHECK_MARK not in e.message:
      raise
    message = e.message[e.message.index(CHECK_MARK):].split("\n\t [[")[0]
    message = message.rstrip().rstrip("]").replace("\\'", "'")
    raise CheckError(message) from None


# ----------------------------------------------------------------------------- locations

_LIBRARY_DIRS = tuple(os.path.dirname(os.path.abspath(f)) + os.sep for f in (
    tf.__file__, __file__, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "converters", "x")))


def _is_library_file(filename):
  """Frames of TensorFlow, vectorize itself, pytest or autograph's generated code."""
  return (filename.startswith(_LIBRARY_DIRS) or "__autograph_generated" in filename or
          os.sep + "_pytest" + os.sep in filename or os.sep + "keras" + os.sep in filename)


def user_location(op):
  """' created at file:line' for the user's line that created `op`, or ''."""
  tb = getattr(op, "traceback", None)
  frames = [f for f in tb or () if not _is_library_file(f.filename)]
  if not frames:
    return ""
  return f" created at {frames[-1].filename}:{frames[-1].lineno}"
