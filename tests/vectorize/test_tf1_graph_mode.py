"""TF1 graph mode (placeholders, `tf.gradients`, Session), as older clients such as
differential-privacy optimizers use pfor: per-example gradients and jacobians with a batch
size (or rank) unknown until the Session runs."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize


@pytest.mark.parametrize("shape", [[None, 3], None], ids=["unknown_batch", "unknown_rank"])
def test_gradients_and_jacobians_of_unknown_shape(shape):
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, shape)
    y = tf.sin(x) * tf.reduce_sum(x, axis=1, keepdims=True)
    per_row = vectorize.pfor(lambda i: tf.gradients(tf.gather(y, i), x)[0], tf.shape(x)[0])
    batch_jacobian = vectorize.batch_jacobian(y, x)
    jacobian = vectorize.jacobian(y, x)
  value = np.random.default_rng(0).standard_normal([2, 3]).astype(np.float32)
  with tf.compat.v1.Session(graph=graph) as session:
    rows, batch, full = session.run([per_row, batch_jacobian, jacobian], {x: value})
  # d y[b, k] / d x[b, m] = cos(x[b, k]) s[b] [k == m] + sin(x[b, k]), s[b] = sum_m x[b, m]
  s = value.sum(axis=1)
  expected = (np.cos(value)[:, :, None] * s[:, None, None] * np.eye(3)[None] +
              np.sin(value)[:, :, None])
  np.testing.assert_allclose(batch, expected, rtol=1e-5)
  np.testing.assert_allclose(full[np.arange(2), :, np.arange(2)], expected, rtol=1e-5)
  np.testing.assert_allclose(full[0, :, 1], 0.0)
  # row i: the gradient of sum_k y[i, k], nonzero in example i only
  np.testing.assert_allclose(rows[np.arange(2), np.arange(2)], expected.sum(axis=1), rtol=1e-5)
  np.testing.assert_allclose(rows[0, 1], 0.0)
