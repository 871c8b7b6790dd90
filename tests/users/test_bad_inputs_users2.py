"""Bad inputs: errors must name the problem (the argument, or the op and the user's line)."""
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from vectorize import data as vdata

X = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3))
THIS = "test_bad_inputs_users2.py"


def test_iters_string_names_iters():
  with pytest.raises((TypeError, ValueError), match="iters"):
    vectorize.pfor(lambda i: X[i], "4")


def test_parallel_iterations_negative_and_float():
  for bad in (-2, 1.5):
    with pytest.raises((TypeError, ValueError), match="parallel_iterations"):
      vectorize.pfor(lambda i: X[i], 4, parallel_iterations=bad)


def test_vectorized_map_empty_structure_names_elems():
  with pytest.raises((TypeError, ValueError), match="elems"):
    vectorize.vectorized_map(lambda x: x, [])


def test_map_and_batch_zero_batch_size():
  ds = tf.data.Dataset.from_tensor_slices(X)
  with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="(?i)batch.?size"):
    list(ds.apply(vdata.map_and_batch(lambda x: x * 2, 0)))


def test_fallback_off_xla_boolean_mask_names_user_line():
  body = lambda i: tf.reduce_sum(tf.boolean_mask(X[i], X[i] > 3))
  with pytest.raises(vectorize.ConversionError) as e:
    tf.function(lambda: vectorize.pfor(body, 4), jit_compile=True)()
  assert THIS in str(e.value), str(e.value)


def test_fallback_off_py_function_names_op_line_and_fix():
  body = lambda i: tf.py_function(lambda a: a * 2, [X[i]], tf.float32)
  with pytest.raises(vectorize.ConversionError) as e:
    vectorize.pfor(body, 4, fallback_to_while_loop=False)
  msg = str(e.value)
  assert "EagerPyFunc" in msg or "py_function" in msg.lower(), msg
  assert THIS in msg, msg
  assert "fallback" in msg, msg


def test_per_example_gradients_tensor_not_variable():
  """A plain tensor in place of a variable: either a clear error or the tape's answer."""
  w = tf.ones([3])
  try:
    got = vectorize.per_example_gradients(lambda x: tf.reduce_sum(x * w), [w], X)
  except (TypeError, ValueError) as e:
    assert "variable" in str(e).lower(), str(e)
    return
  np.testing.assert_allclose(got[0].numpy(), X.numpy())


def test_body_returns_mismatched_dtypes_in_cond_names_line():
  """A user error inside the body: TF's own message with the user's line comes through."""
  def body(i):
    return tf.cond(i > 1, lambda: X[i], lambda: tf.cast(X[i], tf.int32))
  with pytest.raises((TypeError, ValueError)) as e:
    vectorize.pfor(body, 4)
  assert THIS in str(e.value) or "cond" in str(e.value), str(e.value)


def test_ta_conversion_error_names_user_line_with_fallback_off():
  """README: a ConversionError names the op, the user's line and the fix."""
  def body(i):
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, infer_shape=False)
    def step(t, ta):
      return t + 1, ta.write(t, tf.range(tf.cast(t + 1, tf.float32)))
    return tf.while_loop(lambda t, ta: t < i + 1, step, (0, ta))[1].concat()
  try:
    vectorize.pfor(body, 3)
  except vectorize.ConversionError as e:
    assert THIS in str(e), str(e)
