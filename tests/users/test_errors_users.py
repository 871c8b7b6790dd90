"""Bad inputs: a clear error naming the problem, no crash, hang or silent wrong answer."""
import numpy as np
import pytest
import tensorflow as tf

import vectorize

X = tf.constant(np.arange(15, dtype=np.float32).reshape(5, 3))


def test_conversion_error_is_value_error():
  assert issubclass(vectorize.ConversionError, ValueError)


def test_negative_iters():
  with pytest.raises(ValueError) as e:
    vectorize.pfor(lambda i: X[i], -1)
  assert "-1" in str(e.value) or "negative" in str(e.value).lower()


def test_float_iters():
  with pytest.raises((TypeError, ValueError)) as e:
    vectorize.pfor(lambda i: X[i], 2.5)
  assert "iters" in str(e.value).lower() or "int" in str(e.value).lower()


def test_too_large_iters():
  with pytest.raises(ValueError) as e:
    vectorize.pfor(lambda i: tf.constant(1.0), 2 ** 31)
  assert "2**31" in str(e.value) or "2147483648" in str(e.value) or "large" in str(e.value).lower()


def test_runtime_negative_iters():
  f = tf.function(lambda n: vectorize.pfor(lambda i: tf.cast(i, tf.float32), n),
                  input_signature=[tf.TensorSpec([], tf.int32)])
  with pytest.raises(tf.errors.InvalidArgumentError) as e:
    f(tf.constant(-2))
  assert "-2" in str(e.value) or "negative" in str(e.value).lower() or "non-negative" in str(e.value).lower()


def test_non_scalar_iters_tensor():
  with pytest.raises((TypeError, ValueError)):
    vectorize.pfor(lambda i: X[i], tf.constant([2, 3]))


def test_parallel_iterations_zero():
  with pytest.raises(ValueError) as e:
    vectorize.pfor(lambda i: X[i], 5, parallel_iterations=0)
  assert "parallel_iterations" in str(e.value)


def test_vectorized_map_mismatched_sizes_named():
  with pytest.raises(ValueError) as e:
    vectorize.vectorized_map(lambda e: e[0] + e[1][0], (tf.zeros([4, 2]), tf.zeros([3, 2])))
  assert "4" in str(e.value) and "3" in str(e.value)


def test_vectorized_map_scalar_elem():
  with pytest.raises(ValueError) as e:
    vectorize.vectorized_map(lambda e: e * 2, tf.constant(3.0))
  assert "scalar" in str(e.value).lower() or "rank" in str(e.value).lower()


def test_vectorized_map_runtime_mismatch():
  @tf.function(input_signature=[tf.TensorSpec([None, 2]), tf.TensorSpec([None, 2])])
  def f(a, b):
    return vectorize.vectorized_map(lambda e: e[0] + e[1], (a, b))
  with pytest.raises((tf.errors.InvalidArgumentError, ValueError)):
    f(tf.zeros([4, 2]), tf.zeros([3, 2]))


def test_map_fn_dtype_and_signature_both():
  with pytest.raises(ValueError):
    vectorize.map_fn(lambda r: r, X, dtype=tf.float32, fn_output_signature=tf.float32)


def test_map_fn_wrong_signature_dtype():
  with pytest.raises(TypeError) as e:
    vectorize.map_fn(lambda r: tf.cast(r, tf.int32), X, fn_output_signature=tf.float32)
  assert "int32" in str(e.value) and "float32" in str(e.value)


def test_map_fn_wrong_signature_structure():
  with pytest.raises((TypeError, ValueError)):
    vectorize.map_fn(lambda r: (r, r), X, fn_output_signature=tf.float32)


def test_fallback_off_names_op():
  fn = lambda i: tf.numpy_function(lambda v: v, [X[i]], tf.float32)
  with pytest.raises(vectorize.ConversionError) as e:
    vectorize.pfor(fn, 3, fallback_to_while_loop=False)
  assert "PyFunc" in str(e.value) or "numpy_function" in str(e.value)


def test_body_returns_python_string():
  with pytest.raises((TypeError, ValueError)):
    vectorize.pfor(lambda i: "hello", 3)


def test_body_error_propagates():
  def fn(i):
    raise RuntimeError("user bug 123")
  with pytest.raises(RuntimeError, match="user bug 123"):
    vectorize.pfor(fn, 3)


def test_index_out_of_range_not_silent():
  """The loop raises for X[5]; pfor must not return garbage for iteration 5."""
  with pytest.raises(tf.errors.InvalidArgumentError):
    loop_out = [X[i] for i in range(7)]
  with pytest.raises((tf.errors.InvalidArgumentError, ValueError)):
    vectorize.pfor(lambda i: X[i], 7)


def test_gather_out_of_range_not_silent():
  idx = tf.constant([0, 1, 9])
  with pytest.raises((tf.errors.InvalidArgumentError, ValueError)):
    vectorize.pfor(lambda i: tf.gather(X[0], idx[i]), 3)


def test_assert_in_body_fires_for_one_example():
  def fn(i):
    tf.debugging.assert_less(i, 3, message="i too big")
    return X[i]
  with pytest.raises(tf.errors.InvalidArgumentError, match="i too big"):
    vectorize.pfor(fn, 5)


def test_assert_in_body_passes():
  def fn(i):
    tf.debugging.assert_non_negative(X[i], message="neg")
    return X[i] * 2
  np.testing.assert_allclose(vectorize.pfor(fn, 5).numpy(), X.numpy() * 2)


def test_ensure_shape_mismatch_in_body():
  with pytest.raises((tf.errors.InvalidArgumentError, ValueError)):
    vectorize.pfor(lambda i: tf.ensure_shape(X[i], [4]), 3)


def test_check_numerics_in_body():
  x = tf.constant([1.0, 0.0, 2.0])
  with pytest.raises(tf.errors.InvalidArgumentError, match="bad value"):
    vectorize.pfor(lambda i: tf.debugging.check_numerics(1.0 / x[i], "bad value"), 3)


def test_int_division_by_zero_like_loop():
  a = tf.constant([4, 5, 6])
  b = tf.constant([2, 0, 3])
  with pytest.raises(tf.errors.InvalidArgumentError):
    [a[i] // b[i] for i in range(3)]
  with pytest.raises(tf.errors.InvalidArgumentError):
    vectorize.pfor(lambda i: a[i] // b[i], 3)


def test_per_example_gradients_no_batch():
  v = tf.Variable(1.0)
  with pytest.raises(ValueError):
    vectorize.per_example_gradients(lambda: v * 2.0, v)


def test_per_example_gradients_mismatched_batch():
  v = tf.Variable(1.0)
  with pytest.raises(ValueError) as e:
    vectorize.per_example_gradients(lambda a, b: v * a * b, v, tf.ones([3]), tf.ones([4]))
  assert "3" in str(e.value) and "4" in str(e.value)


def test_per_example_gradients_no_variables():
  with pytest.raises(ValueError):
    vectorize.per_example_gradients(lambda a: a * 2.0, [], tf.ones([3]))


def test_jacobian_eager_runtime_error():
  x = tf.ones([3])
  with pytest.raises(RuntimeError) as e:
    vectorize.jacobian(x * 2, x)
  assert "jacobian_fn" in str(e.value) or "eager" in str(e.value).lower()


def test_batch_jacobian_batch_mismatch():
  @tf.function
  def f(x):
    return vectorize.batch_jacobian(tf.concat([x, x], 0), x)
  with pytest.raises((ValueError, tf.errors.InvalidArgumentError)):
    f(tf.ones([3, 2]))


def test_xla_while_grad_without_max_iterations_names_line():
  w = tf.Variable(0.5)
  def fn(i):
    with tf.GradientTape() as t:
      y = tf.while_loop(lambda k, a: k < i, lambda k, a: (k + 1, a * w), (0, tf.constant(1.0)))[1]
    return t.gradient(y, w)
  f = tf.function(lambda: vectorize.pfor(fn, 3), jit_compile=True)
  with pytest.raises(vectorize.ConversionError) as e:
    f()
  assert "maximum_iterations" in str(e.value)


def test_unique_under_xla_refused():
  x = tf.constant([[1, 1, 2], [3, 3, 3]])
  f = tf.function(lambda: vectorize.pfor(lambda i: tf.unique(x[i])[0], 2), jit_compile=True)
  with pytest.raises(vectorize.ConversionError):
    f()


def test_order_dependent_variable_fallback_off_data():
  # An update before the first read was refused; the reads now see each element's running
  # sum, as .map().batch() gives, with the fallback off.
  v = tf.Variable(0, dtype=tf.int64)
  def fn(x):
    with tf.control_dependencies([v.assign_add(x)]):
      return x + v.read_value()
  ds = tf.data.Dataset.range(4)
  want = [b.numpy().tolist() for b in ds.map(fn).batch(2)]
  v.assign(0)
  got = [b.numpy().tolist() for b in
         ds.apply(vectorize.data.map_and_batch(fn, 2, fallback_to_while_loop=False))]
  assert want == [[0, 2], [5, 9]]
  assert got == want
  assert v.numpy() == 6
