"""Converters whose per-iteration input has a rank known only at run time (e.g. the gradient
of a Keras loss traced over symbolic inputs): they pad ranks at run time instead of falling
back, as TensorFlow's pfor does."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize

N = 3
X = np.random.default_rng(0).standard_normal([N, 2, 3]).astype(np.float32)


def _unknown_rank(t, shape):
  """`t` reshaped to `shape`, a tensor whose value (and so the result's rank) is unknown while
  tracing."""
  return tf.reshape(t, shape)


BODIES = {
    "broadcast_to": lambda x, shape: tf.broadcast_to(_unknown_rank(x, shape), [4, 2, 3]),
    "add_invariant": lambda x, shape: _unknown_rank(x, shape) + tf.ones([3]),
    "mul_known_rank": lambda x, shape: _unknown_rank(x, shape) * tf.ones([5, 2, 3]),
    "maximum_two_unknown": lambda x, shape: tf.maximum(_unknown_rank(x, shape),
                                                       _unknown_rank(x * 2.0, shape)),
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_unknown_rank(name):
  build = BODIES[name]

  @tf.function(input_signature=[tf.TensorSpec([N, 2, 3], tf.float32),
                                tf.TensorSpec([None], tf.int32)])
  def vectorized(x, shape):
    return vectorize.pfor(lambda i: build(x[i], shape), N, fallback_to_while_loop=False)

  shape = tf.constant([2, 3])
  expected = np.stack([build(X[i], shape) for i in range(N)])
  np.testing.assert_allclose(vectorized(X, shape), expected)
