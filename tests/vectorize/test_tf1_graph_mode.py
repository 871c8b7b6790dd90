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


@pytest.mark.parametrize("n", [3, 0])
def test_gradients_over_the_trainable_variables_of_a_layer_built_in_the_body(n):
  """A Keras layer first called in the body: the body reads its variables back from the
  TF1 collection, as `tf.gradients(loss, tf.compat.v1.trainable_variables())` code does."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3))
    layer = tf.keras.layers.Dense(2, kernel_initializer="ones", bias_initializer="ones")

    def body(i):
      y = layer(tf.gather(x, i)[None])
      return tf.gradients(tf.reduce_sum(y * y), tf.compat.v1.trainable_variables())

    vectorized = vectorize.pfor(body, n)
    looped = [tf.stack(g)[:n] for g in zip(*[body(tf.constant(i)) for i in range(3)])]
    init = tf.compat.v1.global_variables_initializer()
  assert len(vectorized) == 2
  with tf.compat.v1.Session(graph=graph) as session:
    session.run(init)
    actual, expected = session.run([vectorized, looped])
  for a, e in zip(actual, expected):
    np.testing.assert_allclose(a, e, rtol=1e-6)
