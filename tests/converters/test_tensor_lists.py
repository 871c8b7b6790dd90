"""converters/tensor_lists.py: regression tests (fuzz findings)."""

import numpy as np
import pytest
import tensorflow as tf

from tests import testing

X = tf.constant(np.random.default_rng(5).standard_normal([4, 3, 3]), tf.float32)


def _gradient_of_an_unstacked_array_read(i):
  """A tape in the body over TensorArray.unstack(...).read(2): its gradient stacks a list
  of as many items as the forward one (3), which no iteration gives at n = 0."""
  x = X[i]
  with tf.GradientTape() as tape:
    tape.watch(x)
    item = tf.TensorArray(tf.float32, 3).unstack(x).read(2)
    y = tf.reduce_sum(tf.square(item))
  return tape.gradient(y, x, unconnected_gradients=tf.UnconnectedGradients.ZERO)


@pytest.mark.parametrize("mode", ["function", "dynamic"])
def test_gradient_of_an_unstacked_array_at_n0(mode):
  """Fuzz seed 1240146: at n = 0 the stacked gradient list had capacity 0 where the graph
  stacks 3 items: 'produced shape (0, 0, 3) ... expected (0, 3, 3)'."""
  expected = testing.sequential(None, 0, testing.example_spec(_gradient_of_an_unstacked_array_read))
  got = testing.run_pfor(_gradient_of_an_unstacked_array_read, 0, mode=mode)
  assert got.shape == (0, 3, 3)
  testing.assert_allclose(got, expected)


def test_gradient_of_an_unstacked_array_at_n3():
  testing.check_against_loop(_gradient_of_an_unstacked_array_read, 3)
