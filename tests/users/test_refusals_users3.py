"""What the README says is refused: the documented error kind, naming the user's line."""
import pytest
import tensorflow as tf

import vectorize
from tests.users._util_users3 import plain_mode_users3  # noqa: F401 (autouse)
from tests.users._util_users3 import assert_same, in_function, loop, runtime_n

X = tf.constant([[3., 1., 2., 5.], [4., 4., 1., 0.], [2., -1., 7., 1.], [1., 1., 1., 1.]])
L = tf.constant([3, 0, 4, 2])
HERE = "test_refusals_users3.py"


def test_unique_under_jit_is_conversion_error_naming_line():
  def body(i):
    y, _ = tf.unique(X[i])
    return tf.reduce_sum(y)

  with pytest.raises(vectorize.ConversionError, match=HERE):
    in_function(body, 4, jit=True)
  # Without XLA it works.
  assert_same(vectorize.pfor(body, 4), loop(body, 4))


def test_ragged_prefix_under_jit_names_line():
  def body(i):
    return tf.reduce_sum(X[i, :L[i]] * 2.)

  with pytest.raises(vectorize.ConversionError, match=HERE):
    in_function(body, 4, jit=True)


def test_tensorarray_unstack_of_prefix_is_conversion_error():
  def body(i):
    ta = tf.TensorArray(tf.float32, size=L[i]).unstack(X[i, :L[i]])
    return ta.stack()

  with pytest.raises(vectorize.ConversionError, match=HERE) as e:
    vectorize.pfor(body, 4)
  assert "TensorArray" in str(e.value)


def test_repeat_by_per_example_count_on_later_axis_stops_naming_it():
  def body(i):
    return tf.repeat(tf.reshape(X[i], [2, 2]), L[i], axis=1)

  with pytest.raises(tf.errors.InvalidArgumentError, match=HERE):
    vectorize.pfor(body, 4, warn=False)


def test_bad_iters_and_mismatched_elems():
  with pytest.raises(ValueError, match="iters"):
    vectorize.pfor(lambda i: X[i], -1)
  with pytest.raises(ValueError, match="4.*3"):
    vectorize.vectorized_map(lambda a: a[0] + a[1], (X, tf.ones([3, 4])))
  with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="iters"):
    runtime_n(lambda i: X[i] * 2.)(tf.constant(-2))


def test_gradient_of_while_under_jit_needs_maximum_iterations():
  w = tf.Variable(1.5)

  def body(i):
    with tf.GradientTape() as tape:
      y = tf.while_loop(lambda t, a: t < L[i], lambda t, a: (t + 1, a * w),
                        (tf.constant(0), X[i, 0]))[1]
    return tape.gradient(y, w, unconnected_gradients=tf.UnconnectedGradients.ZERO)

  with pytest.raises(vectorize.ConversionError, match="maximum_iterations") as e:
    in_function(body, 4, jit=True)
  assert HERE in str(e.value)

  def bounded(i):
    with tf.GradientTape() as tape:
      y = tf.while_loop(lambda t, a: t < L[i], lambda t, a: (t + 1, a * w),
                        (tf.constant(0), X[i, 0]), maximum_iterations=4)[1]
    return tape.gradient(y, w, unconnected_gradients=tf.UnconnectedGradients.ZERO)

  want = loop(bounded, 4)
  assert_same(in_function(bounded, 4, jit=True), want)


def test_fallback_off_names_op_and_line():
  s = tf.constant([1, 2, 3, 4])
  with pytest.raises(vectorize.ConversionError, match=HERE) as e:
    vectorize.pfor(lambda i: X[i, ::s[i]], 4, fallback_to_while_loop=False)
  assert "fallback_to_while_loop" in str(e.value)
