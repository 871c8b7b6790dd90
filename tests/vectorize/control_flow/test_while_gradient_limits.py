"""A while loop differentiated inside the body under XLA needs `maximum_iterations` (as in
TensorFlow): without it, a ConversionError that names the loop's line and the fix."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

X = tf.constant(np.abs(np.random.default_rng(3).standard_normal([5, 3])) + 0.1, tf.float32)


def _gradient_of_a_loop(maximum_iterations):
  def body(i):
    x = X[i]
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = tf.while_loop(lambda k, y: tf.reduce_sum(y) < 10.,
                        lambda k, y: [k + 1, tf.sin(y) + y * 1.5], [0, x],
                        maximum_iterations=maximum_iterations)[1]
      loss = tf.reduce_sum(y * y)
    return tape.gradient(loss, x)
  return body


@pytest.mark.parametrize("fallback", [False, True])
@pytest.mark.parametrize("n", [5, 0])
def test_loop_gradient_without_maximum_iterations_under_xla_names_the_loop(n, fallback):
  with pytest.raises(vectorize.ConversionError,
                     match=r"while loop .* created at .*test_while_gradient_limits.py:\d+ "
                           r"under XLA.*pass maximum_iterations"):
    testing.run_pfor(_gradient_of_a_loop(None), n, mode="xla", fallback=fallback)


@pytest.mark.parametrize("mode", testing.MODES)
@pytest.mark.parametrize("n", [5, 0])
def test_loop_gradient_with_maximum_iterations(mode, n):
  body = _gradient_of_a_loop(30)
  testing.assert_allclose(testing.run_pfor(body, n, mode=mode),
                          testing.sequential(body, n, testing.output_spec(body)), 1e-4)


@pytest.mark.parametrize("mode", ["function", "dynamic", "eager"])
def test_loop_gradient_without_maximum_iterations_outside_xla(mode):
  body = _gradient_of_a_loop(None)
  testing.assert_allclose(testing.run_pfor(body, 5, mode=mode),
                          testing.sequential(body, 5, testing.output_spec(body)), 1e-4)


def _dynamic_size_array(i):
  def body(j, array):
    return j + 1, array.write(j, X[i, :2] * tf.cast(j, tf.float32))
  _, array = tf.while_loop(lambda j, _: j < tf.math.floormod(i, 3) + 1, body,
                           (0, tf.TensorArray(tf.float32, size=0, dynamic_size=True,
                                              element_shape=[2])))
  return tf.reduce_sum(array.concat(), 0)


def test_dynamic_size_array_grown_under_xla_names_the_write():
  """XLA cannot grow a TensorArray (its own loop silently drops the writes): an error
  naming the user's line and the fix, not a wrong answer or a shape error."""
  with pytest.raises(vectorize.ConversionError,
                     match=r"TensorListSetItem .* created at .*test_while_gradient_limits.py:"
                           r"\d+ under XLA.*a size that holds every write"):
    testing.run_pfor(_dynamic_size_array, 3, mode="xla")


@pytest.mark.parametrize("mode", ["function", "dynamic", "eager"])
def test_dynamic_size_array_grown_outside_xla(mode):
  testing.assert_allclose(testing.run_pfor(_dynamic_size_array, 3, mode=mode),
                          testing.sequential(_dynamic_size_array, 3))
