"""The two ways a conversion can fail.

`Unvectorizable` means "this op, with these inputs, has no vectorized form here": the walker
answers it with the sequential fallback (or a `ConversionError` when fallback is off).
`ConversionError` means a bug or invalid input; it is never swallowed. `CheckError`: the
checked mode found pfor's result differing from the loop's.
"""

import contextlib

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
