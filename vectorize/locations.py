"""Where the user wrote an op: the line an error, a warning or a report names.

An op's traceback runs through TensorFlow, autograph, Keras and vectorize itself; the user's
line is the last frame outside them.
"""

import os

import tensorflow as tf

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
