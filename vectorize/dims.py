"""Static dimensions as Python ints or None, under TF1 behaviour too.

With `tf.compat.v1.disable_v2_behavior()`, indexing or iterating a TensorShape gives
`Dimension`s: unhashable, never `is None` (an unknown one is `Dimension(None)`), not an
`int`, and `==` on an unknown one gives None. Our code reads dims as ints or None (sets of
leading dimensions, `shape[1] is None`, `isinstance(d, int)`), so it would crash or, worse,
take an unknown dim for a known one.

Two ways in, one rule (a dim is an int or None):
  * `dim(shape, k)` and `leading(t)` for the few reads outside a conversion (argument checks
    of pfor's callers, made before and around the user's code);
  * `ints()` around a conversion: no user code runs there (the body was traced before), and
    every converter then reads ints or None, as under TF2.

Tensors compare with `tf.equal` / `tf.not_equal`, never `==`: in a graph built outside a
function (TF1 code, a `tf.Graph().as_default()` block) `tensor == 0` is Python identity,
False, whatever the TF behaviour (tests/vectorize/test_tf1_graph_mode.py).
"""

import contextlib

import tensorflow as tf
from tensorflow.python.framework import tensor_shape


def dim(shape, k):
  """`shape[k]` as an int, or None where it or the rank is unknown."""
  shape = tf.TensorShape(shape)
  if shape.rank is None:
    return None
  return tf.compat.dimension_value(shape[k])


def leading(t):
  """The static leading dimension of `t` (a tensor, or anything with a `.shape`), or None."""
  return dim(t.shape, 0)


@contextlib.contextmanager
def ints():
  """TensorShapes index and iterate to ints or None while converting, as under TF2.

  TF's own graph-building code works with either kind of dim (TF2 runs it with ints); the
  setting is put back on exit, so the user's TF1 code after pfor sees Dimensions again.
  Process-wide while it lasts, as TF's setting is: another thread building a TF1 graph at
  the same time would read ints too.
  """
  if not hasattr(tensor_shape, "_TENSORSHAPE_V2_OVERRIDE"):   # a TF without the setting
    yield
    return
  previous = tensor_shape._TENSORSHAPE_V2_OVERRIDE  # pylint: disable=protected-access
  tensor_shape._TENSORSHAPE_V2_OVERRIDE = True  # pylint: disable=protected-access
  try:
    yield
  finally:
    tensor_shape._TENSORSHAPE_V2_OVERRIDE = previous  # pylint: disable=protected-access
