"""Keras models and layers run per example through pfor / vectorized_map / per_example_gradients."""
import numpy as np
import pytest
import tensorflow as tf
import keras

import vectorize
from tests.users._util import assert_same, loop, rows

rng = np.random.default_rng(1)


def _x(*shape, dtype=np.float32):
  return tf.constant(rng.normal(size=shape).astype(dtype))


def test_dense_mlp_inference_vectorized_map():
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"),
                            keras.layers.Dense(3)])
  x = _x(5, 6)
  fn = lambda r: model(r[None])[0]
  assert_same(vectorize.vectorized_map(fn, x), rows(fn, x))


def test_conv2d_pool_model():
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((8, 8, 2)), keras.layers.Conv2D(4, 3, padding="same"),
                            keras.layers.MaxPooling2D(), keras.layers.Flatten(),
                            keras.layers.Dense(3)])
  x = _x(4, 8, 8, 2)
  fn = lambda i: model(x[i][None])[0]
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


def test_conv2d_xla():
  keras.utils.set_random_seed(0)
  conv = keras.layers.Conv2D(3, 3, strides=2, activation="tanh")
  x = _x(3, 9, 9, 2)
  conv(x[:1])
  fn = lambda i: conv(x[i][None])[0]
  f = tf.function(lambda: vectorize.pfor(fn, 3), jit_compile=True)
  assert_same(f(), loop(fn, 3))


def test_lstm_per_example():
  keras.utils.set_random_seed(0)
  lstm = keras.layers.LSTM(5, return_sequences=True)
  x = _x(4, 6, 3)
  lstm(x[:1])
  fn = lambda i: lstm(x[i][None])[0]
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


def test_gru_last_state_vectorized_map():
  keras.utils.set_random_seed(0)
  gru = keras.layers.GRU(4, return_state=True)
  x = _x(3, 5, 2)
  gru(x[:1])
  fn = lambda r: gru(r[None])[1][0]
  assert_same(vectorize.vectorized_map(fn, x), rows(fn, x))


def test_embedding_then_mean():
  keras.utils.set_random_seed(0)
  emb = keras.layers.Embedding(20, 4)
  ids = tf.constant(rng.integers(0, 20, size=[5, 7]), tf.int32)
  emb(ids[:1])
  fn = lambda i: tf.reduce_mean(emb(ids[i]), axis=0)
  assert_same(vectorize.pfor(fn, 5), loop(fn, 5))


def test_batchnorm_inference():
  keras.utils.set_random_seed(0)
  bn = keras.layers.BatchNormalization()
  x = _x(4, 3)
  bn(x, training=True)  # move stats
  fn = lambda i: bn(x[i][None], training=False)[0]
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


def test_batchnorm_training_updates_moving_stats():
  """In training mode each example is a batch of one, and each call updates the moving stats;
  the loop's final moving mean is what state the loop leaves."""
  keras.utils.set_random_seed(0)
  x = _x(4, 3)

  def make():
    bn = keras.layers.BatchNormalization(momentum=0.5)
    bn.build((None, 3))
    return bn

  bn_loop = make()
  ref = loop(lambda i: bn_loop(x[i][None], training=True)[0], 4)
  bn_vec = make()
  got = vectorize.pfor(lambda i: bn_vec(x[i][None], training=True)[0], 4)
  assert_same(got, ref)
  np.testing.assert_allclose(bn_vec.moving_mean.numpy(), bn_loop.moving_mean.numpy(), rtol=1e-5)


def test_dropout_training_shape_and_scale():
  keras.utils.set_random_seed(0)
  drop = keras.layers.Dropout(0.5)
  x = tf.ones([6, 50])
  got = vectorize.pfor(lambda i: drop(x[i], training=True), 6)
  assert got.shape == (6, 50)
  vals = np.unique(got.numpy())
  assert set(vals.tolist()) <= {0.0, 2.0}
  # different examples get different masks
  assert not np.all(got.numpy()[0] == got.numpy()[1])


def test_dropout_inference_identity():
  drop = keras.layers.Dropout(0.5)
  x = _x(4, 5)
  assert_same(vectorize.pfor(lambda i: drop(x[i], training=False), 4), x)


def test_multihead_attention_self():
  keras.utils.set_random_seed(0)
  mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=3)
  x = _x(3, 4, 6)
  mha(x[:1], x[:1])
  fn = lambda i: mha(x[i][None], x[i][None])[0]
  assert_same(vectorize.pfor(fn, 3), loop(fn, 3), rtol=1e-4, atol=1e-5)


def test_layernorm_and_attention_block_xla():
  keras.utils.set_random_seed(0)
  ln = keras.layers.LayerNormalization()
  att = keras.layers.Attention()
  x = _x(3, 4, 5)
  def fn(i):
    h = ln(x[i][None])
    return att([h, h])[0]
  fn(0)
  f = tf.function(lambda: vectorize.pfor(fn, 3), jit_compile=True)
  assert_same(f(), loop(fn, 3))


def test_per_example_gradients_keras_dense():
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, activation="tanh"),
                            keras.layers.Dense(3)])
  xs = _x(5, 4)
  ys = tf.constant(rng.integers(0, 3, size=[5]), tf.int32)

  def loss_fn(x, y):
    logits = model(x[None])[0]
    return tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits)

  got = vectorize.per_example_gradients(loss_fn, model, xs, ys)
  ref = []
  for v in model.trainable_variables:
    ref.append([])
  for b in range(5):
    with tf.GradientTape() as tape:
      loss = loss_fn(xs[b], ys[b])
    gs = tape.gradient(loss, model.trainable_variables)
    for k, g in enumerate(gs):
      ref[k].append(g)
  assert len(got) == len(ref)
  for g, r in zip(got, ref):
    assert_same(g, tf.stack(r))


def test_per_example_gradients_conv_in_tf_function():
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((6, 6, 1)), keras.layers.Conv2D(2, 3),
                            keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(2)])
  xs = _x(3, 6, 6, 1)
  ys = _x(3, 2)

  def loss_fn(x, y):
    return tf.reduce_sum((model(x[None])[0] - y) ** 2)

  got = tf.function(lambda: vectorize.per_example_gradients(loss_fn, model, xs, ys))()
  for k, v in enumerate(model.trainable_variables):
    ref = []
    for b in range(3):
      with tf.GradientTape() as tape:
        l = loss_fn(xs[b], ys[b])
      ref.append(tape.gradient(l, v))
    assert_same(got[k], tf.stack(ref))


def test_per_example_gradients_lstm_model():
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((5, 2)), keras.layers.LSTM(3), keras.layers.Dense(1)])
  xs = _x(3, 5, 2)
  ys = _x(3, 1)
  def loss_fn(x, y):
    return tf.reduce_mean((model(x[None])[0] - y) ** 2)
  got = vectorize.per_example_gradients(loss_fn, model, xs, ys)
  for k, v in enumerate(model.trainable_variables):
    ref = []
    for b in range(3):
      with tf.GradientTape() as tape:
        l = loss_fn(xs[b], ys[b])
      ref.append(tape.gradient(l, v))
    assert_same(got[k], tf.stack(ref), rtol=1e-4, atol=1e-5)


def test_per_example_gradients_unused_variable_is_none():
  a = tf.Variable([1.0, 2.0])
  b = tf.Variable(3.0)
  xs = _x(4, 2)
  got = vectorize.per_example_gradients(lambda x: tf.reduce_sum(a * x), {"a": a, "b": b}, xs)
  assert got["b"] is None
  assert_same(got["a"], xs)


def test_keras_preprocessing_random_flip_shapes():
  flip = keras.layers.RandomFlip("horizontal", seed=3)
  x = _x(4, 5, 5, 3)
  got = vectorize.vectorized_map(lambda im: flip(im, training=True), x)
  assert got.shape == (4, 5, 5, 3)
  # each image is either itself or mirrored
  for k in range(4):
    g = got[k].numpy()
    assert np.allclose(g, x[k].numpy()) or np.allclose(g, x[k].numpy()[:, ::-1])


def test_functional_model_two_inputs_two_outputs():
  keras.utils.set_random_seed(0)
  a = keras.Input((3,))
  b = keras.Input((2,), dtype="int32")
  e = keras.layers.Flatten()(keras.layers.Embedding(5, 2)(b))
  h = keras.layers.Concatenate()([a, e])
  o1 = keras.layers.Dense(2)(h)
  o2 = keras.layers.Dense(1, activation="sigmoid")(h)
  model = keras.Model([a, b], [o1, o2])
  xa = _x(4, 3)
  xb = tf.constant(rng.integers(0, 5, size=[4, 2]), tf.int32)
  fn = lambda e: [t[0] for t in model([e[0][None], e[1][None]])]
  assert_same(vectorize.vectorized_map(fn, (xa, xb)), rows(fn, (xa, xb)))


@pytest.mark.parametrize("jit", [False, True])
def test_masked_embedding_lstm(jit):
  keras.utils.set_random_seed(0)
  emb = keras.layers.Embedding(10, 3, mask_zero=True)
  lstm = keras.layers.LSTM(4)
  ids = tf.constant([[1, 2, 3, 0, 0], [4, 0, 0, 0, 0], [5, 6, 7, 8, 9]])
  lstm(emb(ids[:1]))
  fn = lambda i: lstm(emb(ids[i][None]))[0]
  got = tf.function(lambda: vectorize.pfor(fn, 3), jit_compile=jit)()
  assert_same(got, loop(fn, 3))
