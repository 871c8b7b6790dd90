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


PARAMS = np.arange(24, dtype=np.float32).reshape(4, 3, 2)

# Bodies reading a captured tensor of unknown rank (a tf.function traced with
# TensorSpec(None)): indexing by the loop index, and gathers counted from the end.
READS = {
    "getitem": lambda x, i: x[i],
    "getitem_then_reduce": lambda x, i: tf.reduce_sum(x[i], axis=-1),
    "getitem_then_matmul": lambda x, i: tf.matmul(x[i], x[i], transpose_b=True),
    "gather_last_axis": lambda x, i: tf.gather(x, i % 2, axis=-1),
    "gather_last_axis_of_stacked": lambda x, i: tf.gather(x * tf.cast(i, tf.float32), 1,
                                                          axis=-1),
    "gather_last_axis_both_stacked": lambda x, i: tf.gather(x * tf.cast(i, tf.float32), i % 2,
                                                            axis=-1),
}


@pytest.mark.parametrize("name", sorted(READS))
def test_reads_of_unknown_rank(name):
  read = READS[name]

  @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
  def vectorized(x):
    return vectorize.pfor(lambda i: read(x, i), 4, fallback_to_while_loop=False)

  expected = np.stack([read(tf.constant(PARAMS), tf.constant(i)) for i in range(4)])
  np.testing.assert_allclose(vectorized(PARAMS), expected)


SHAPE_OPS = {
    "squeeze_every_unit_dim": lambda x, i: tf.squeeze(x[i][None, :, None]),
    "pad_with_a_per_iteration_value": lambda x, i: tf.pad(
        x[i], [[1, 0], [0, 1]], constant_values=tf.cast(i, tf.float32)),
    "one_hot_with_per_iteration_values": lambda x, i: tf.one_hot(
        tf.cast(x[i], tf.int32) % 3, 3, on_value=tf.cast(i, tf.float32), off_value=-1.0),
}


@pytest.mark.parametrize("name", sorted(SHAPE_OPS))
def test_shape_ops_of_unknown_rank(name):
  build = SHAPE_OPS[name]
  params = np.arange(24, dtype=np.float32).reshape(4, 3, 2) % 5

  @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
  def vectorized(x):
    return vectorize.pfor(lambda i: build(x, i), 4, fallback_to_while_loop=False)

  expected = np.stack([build(tf.constant(params), tf.constant(i)) for i in range(4)])
  np.testing.assert_allclose(vectorized(params), expected)
