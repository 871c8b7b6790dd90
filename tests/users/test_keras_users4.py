"""Keras layers called per example inside the body: seeded randomness with training=True,
BatchNormalization's moving statistics, metrics, a small model's per-example gradients."""
import numpy as np
import pytest
import tensorflow as tf
import keras

import vectorize
from ._util_users4 import _no_checked_env, loop, assert_same, check_stateful  # noqa: F401

RS = np.random.RandomState(11)


def _seed_vars(layer):
  return [v for v in layer.variables if "seed" in v.path] or [
      layer.seed_generator.state]


def test_dropout_training_seeded_equals_loop():
  drop = keras.layers.Dropout(0.5, seed=3)
  x = tf.constant(RS.rand(4, 10).astype(np.float32) + 0.5)

  def body(i):
    return drop(x[i], training=True)

  check_stateful(body, 4, [drop.seed_generator.state], modes=("eager", "function"))


def test_dropout_masks_differ_between_iterations():
  drop = keras.layers.Dropout(0.5, seed=5)
  ones = tf.ones([64])
  got = vectorize.pfor(lambda i: drop(ones, training=True), 4).numpy()
  assert set(np.unique(got)) <= {0.0, 2.0}
  # the loop draws a new mask per call: no two rows are equal
  rows = {tuple(r) for r in got}
  assert len(rows) == 4


def test_gaussian_noise_training_seeded_equals_loop():
  noise = keras.layers.GaussianNoise(0.3, seed=9)
  x = tf.constant(RS.randn(3, 5).astype(np.float32))

  def body(i):
    return noise(x[i], training=True) - x[i]

  check_stateful(body, 3, [noise.seed_generator.state], modes=("eager",), rtol=1e-5, atol=1e-6)


def test_random_flip_augmentation_seeded_equals_loop():
  flip = keras.layers.RandomFlip("horizontal", seed=17)
  imgs = tf.constant(RS.rand(6, 4, 5, 1).astype(np.float32))

  def body(i):
    return flip(imgs[i], training=True)

  check_stateful(body, 6, [flip.generator.state], modes=("eager",))


def test_random_contrast_augmentation_seeded_equals_loop():
  con = keras.layers.RandomContrast(0.5, seed=21)
  imgs = tf.constant(RS.rand(3, 4, 4, 3).astype(np.float32) * 255.0)

  def body(i):
    return con(imgs[i], training=True)

  check_stateful(body, 3, [con.generator.state], modes=("eager",), rtol=1e-4, atol=1e-3)


def test_batchnorm_training_moving_stats_after_pfor():
  bn = keras.layers.BatchNormalization(momentum=0.8)
  bn.build((None, 3))
  x = tf.constant(RS.randn(4, 2, 3).astype(np.float32))

  def body(i):
    return bn(x[i], training=True)              # each example is a batch of 2 rows

  check_stateful(body, 4, [bn.moving_mean, bn.moving_variance], modes=("eager", "function"),
                 rtol=1e-4, atol=1e-5)


def test_metrics_mse_and_sum_in_body():
  mse = keras.metrics.MeanSquaredError()
  tot = keras.metrics.Sum()
  y = tf.constant(RS.randn(5, 3).astype(np.float32))
  p = tf.constant(RS.randn(5, 3).astype(np.float32))

  def body(i):
    mse.update_state(y[i][None], p[i][None])
    tot.update_state(tf.reduce_sum(y[i]))
    return mse.result(), tot.result()

  check_stateful(body, 5, list(mse.variables) + list(tot.variables), modes=("eager", "function"),
                 rtol=1e-5, atol=1e-6)


def test_keras_model_per_example_gradients_with_dropout_off():
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5, activation="relu"),
                            keras.layers.Dropout(0.3), keras.layers.Dense(2)])
  x = tf.constant(RS.randn(6, 4).astype(np.float32))
  y = tf.constant([0, 1, 1, 0, 1, 0])

  def loss_fn(xi, yi):
    logits = model(xi[None], training=False)
    return keras.losses.sparse_categorical_crossentropy(yi[None], logits, from_logits=True)[0]

  got = vectorize.per_example_gradients(loss_fn, model.trainable_variables, x, y)

  def ref(i):
    with tf.GradientTape() as tape:
      loss = loss_fn(x[i], y[i])
    return tape.gradient(loss, model.trainable_variables)

  assert_same(got, loop(ref, 6), rtol=1e-5, atol=1e-6)


def test_keras_dense_body_under_xla_and_runtime_n():
  dense = keras.layers.Dense(3, activation="tanh")
  dense.build((None, 4))
  x = tf.constant(RS.randn(5, 4).astype(np.float32))
  body = lambda i: dense(x[i][None])[0]
  want = loop(body, 5)
  assert_same(tf.function(lambda: vectorize.pfor(body, 5), jit_compile=True)(), want)
  f = tf.function(lambda k: vectorize.pfor(body, k), input_signature=[tf.TensorSpec([], tf.int32)])
  assert_same(f(tf.constant(5)), want)
  assert tuple(f(tf.constant(0)).shape) == (0, 3)


def test_dropout_seeded_under_xla():
  drop = keras.layers.Dropout(0.25, seed=4)
  x = tf.constant(RS.rand(5, 8).astype(np.float32))

  def body(i):
    return drop(x[i], training=True) * 2.0

  # XLA's stateless sampler draws other numbers than the CPU kernel: compare with the
  # loop compiled by XLA too, and the seed state with the loop's.
  st = drop.seed_generator.state
  init = st.numpy()
  want = tf.function(lambda: tf.stack([body(tf.constant(k)) for k in range(5)]),
                     jit_compile=True)().numpy()
  want_state = st.numpy()
  st.assign(init)
  got = tf.function(lambda: vectorize.pfor(body, 5), jit_compile=True)().numpy()
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(st.numpy(), want_state)


def test_random_rotation_seeded_equals_loop():
  rot = keras.layers.RandomRotation(0.2, fill_mode="constant", seed=2)
  imgs = tf.constant(RS.rand(3, 6, 6, 1).astype(np.float32))

  def body(i):
    return rot(imgs[i], training=True)

  check_stateful(body, 3, [rot.generator.state], modes=("eager",), rtol=1e-4, atol=1e-4)


def test_seed_generator_keras_random_normal_in_body():
  gen = keras.random.SeedGenerator(123)
  mu = tf.constant([[0.0, 1.0], [10.0, 11.0], [-5.0, 5.0]])

  def body(i):
    return mu[i] + keras.random.normal([2], seed=gen), keras.random.randint([], 0, 100, seed=gen)

  check_stateful(body, 3, [gen.state], modes=("eager", "function"), rtol=1e-5, atol=1e-5)


def test_dropout_and_metric_together_checked():
  drop = keras.layers.Dropout(0.5, seed=8)
  m = keras.metrics.Mean()
  x = tf.constant(RS.rand(4, 6).astype(np.float32))

  def body(i):
    h = drop(x[i], training=True)
    m.update_state(tf.reduce_sum(h))
    return h, m.result()

  st = [drop.seed_generator.state] + list(m.variables)
  init = [v.numpy() for v in st]
  want = loop(body, 4)
  want_state = [v.numpy() for v in st]
  for v, a in zip(st, init):
    v.assign(a)
  with vectorize.checked(sample=2):
    got = vectorize.pfor(body, 4)
  assert_same(got, want, rtol=1e-5)
  for v, a in zip(st, want_state):
    np.testing.assert_allclose(v.numpy(), a, rtol=1e-5)


def test_seed_generator_random_walk_in_while_loop():
  gen = keras.random.SeedGenerator(7)

  def body(i):
    def step(k, x):
      return k + 1, x + keras.random.normal([], seed=gen)
    return tf.while_loop(lambda k, x: k < 3, step, (0, tf.cast(i, tf.float32)))[1]

  check_stateful(body, 3, [gen.state], modes=("eager",))


def test_mc_dropout_samples_in_while_loop():
  drop = keras.layers.Dropout(0.5, seed=1)
  x = tf.ones([3, 6])

  def body(i):
    def step(k, acc):
      return k + 1, acc + drop(x[i], training=True)
    return tf.while_loop(lambda k, a: k < 2, step, (0, tf.zeros([6])))[1]

  check_stateful(body, 3, [drop.seed_generator.state], modes=("eager",))
