"""Keras 3 models as users write them (layers holding their weights in variables), and the
hand-batched per-example gradients the benchmarks compare vectorize against.

- `convnet(hidden)`: the paper's MNIST convnet in Keras layers (Conv2D, MaxPooling2D,
  Flatten, Dense), its weights those of `models.convnet_params`, so `hand_batched`'s
  hand-written backward pass serves it (`convnet_params_of`).
- `transformer(...)`: one Transformer encoder block (MultiHeadAttention, residuals,
  LayerNormalization, a Dense feed-forward) over a token sequence, mean-pooled to logits.
  `transformer_per_example_gradients` is its hand-batched per-example gradient: one batched
  forward and backward pass to the outputs of each linear map and normalization (examples are
  independent, so the batch's gradient there is each example's own), then each weight's
  gradient as a per-example contraction with that layer's input.
"""

import keras
import numpy as np
import tensorflow as tf

from benchmarks import models

_CONVNET_KEYS = ("conv1", "bias1", "conv2", "bias2", "dense1", "bias3", "dense2", "bias4")


def convnet(hidden=1024, seed=0, keras_api=keras):
  """The MNIST convnet of `models.convnet_logits` as a Keras model with the same weights."""
  model = keras_api.Sequential([
      keras_api.Input([28, 28, 1]),
      keras_api.layers.Conv2D(32, 5, padding="same", activation="relu"),
      keras_api.layers.MaxPooling2D(2, padding="same"),
      keras_api.layers.Conv2D(64, 5, padding="same", activation="relu"),
      keras_api.layers.MaxPooling2D(2, padding="same"),
      keras_api.layers.Flatten(),
      keras_api.layers.Dense(hidden, activation="relu"),
      keras_api.layers.Dense(10),
  ])
  params = models.convnet_params(hidden=hidden, seed=seed)
  model.set_weights([params[k].numpy() for k in _CONVNET_KEYS])
  return model


def convnet_params_of(model):
  """The Keras convnet's variables by `models.convnet_params`' names."""
  return dict(zip(_CONVNET_KEYS, (v.value for v in model.trainable_variables)))


def to_list(model, grads):
  """A dict of gradients by `models.convnet_params`' names, in the model's variable order."""
  return [grads[k] for k in _CONVNET_KEYS[:len(model.trainable_variables)]]


def transformer(tokens=32, width=64, heads=4, hidden=128, classes=10, seed=0, keras_api=keras):
  """One encoder block over [tokens, width] inputs, then mean pooling and a Dense to logits."""
  keras_api.utils.set_random_seed(seed)
  x = inputs = keras_api.Input([tokens, width])
  x = keras_api.layers.LayerNormalization(name="norm1")(
      x + keras_api.layers.MultiHeadAttention(heads, width // heads, name="attention")(x, x))
  ff = keras_api.layers.Dense(hidden, activation="relu", name="ff1")(x)
  x = keras_api.layers.LayerNormalization(name="norm2")(x + keras_api.layers.Dense(width,
                                                                           name="ff2")(ff))
  pooled = keras_api.layers.GlobalAveragePooling1D()(x)
  logits = keras_api.layers.Dense(classes, name="logits")(pooled)
  model = keras_api.Model(inputs, logits)
  rng = np.random.default_rng(seed)   # biases and norms off their zeros/ones, so all count
  model.set_weights([w + 0.1 * rng.standard_normal(w.shape).astype(np.float32)
                     for w in model.get_weights()])
  return model


def by_path(model, grads):
  """Gradients listed in the model's variable order, as {variable path: gradient}."""
  return {v.path: g for v, g in zip(model.trainable_variables, grads)}


def _norm(layer, x):
  """LayerNormalization (Keras' formula); returns (output, normalized input)."""
  mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
  normalized = (x - mean) * tf.math.rsqrt(variance + layer.epsilon)
  return normalized * layer.gamma.value + layer.beta.value, normalized


def transformer_per_example_gradients(model, inputs, labels):
  """Hand-batched per-example gradients of `transformer`'s softmax loss, as `by_path`."""
  attention = model.get_layer("attention")
  q_layer, k_layer, v_layer, o_layer = (attention.query_dense, attention.key_dense,
                                        attention.value_dense, attention.output_dense)
  norm1, norm2 = model.get_layer("norm1"), model.get_layer("norm2")
  ff1, ff2, head = model.get_layer("ff1"), model.get_layer("ff2"), model.get_layer("logits")
  key_dim = q_layer.kernel.shape[-1]
  taps = {}   # the outputs (before bias) whose per-example cotangents give weight gradients

  def tap(name, tape, y):
    tape.watch(y)
    taps[name] = y
    return y

  with tf.GradientTape() as tape:
    x = inputs
    q = tap("q", tape, tf.einsum("btd,dhk->bthk", x, q_layer.kernel.value)) + q_layer.bias.value
    k = tap("k", tape, tf.einsum("btd,dhk->bthk", x, k_layer.kernel.value)) + k_layer.bias.value
    v = tap("v", tape, tf.einsum("btd,dhk->bthk", x, v_layer.kernel.value)) + v_layer.bias.value
    scores = tf.einsum("bshk,bthk->bhts", k, q / np.sqrt(key_dim).astype(np.float32))
    mixed = tf.einsum("bhts,bshk->bthk", tf.nn.softmax(scores), v)
    o = tap("o", tape, tf.einsum("bthk,hkd->btd", mixed, o_layer.kernel.value))
    y1, n1 = _norm(norm1, x + o + o_layer.bias.value)
    tap("norm1", tape, y1)
    h = tf.nn.relu(tap("ff1", tape, tf.einsum("btd,df->btf", y1, ff1.kernel.value)) +
                   ff1.bias.value)
    f = tap("ff2", tape, tf.einsum("btf,fd->btd", h, ff2.kernel.value)) + ff2.bias.value
    y2, n2 = _norm(norm2, y1 + f)
    tap("norm2", tape, y2)
    pooled = tf.reduce_mean(y2, axis=1)
    logits = tap("logits", tape, tf.matmul(pooled, head.kernel.value)) + head.bias.value
    loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
  d = dict(zip(taps, tape.gradient(loss, list(taps.values()))))
  pairs = [
      (q_layer.kernel, tf.einsum("btd,bthk->bdhk", x, d["q"])),
      (q_layer.bias, tf.reduce_sum(d["q"], 1)),
      (k_layer.kernel, tf.einsum("btd,bthk->bdhk", x, d["k"])),
      (k_layer.bias, tf.reduce_sum(d["k"], 1)),
      (v_layer.kernel, tf.einsum("btd,bthk->bdhk", x, d["v"])),
      (v_layer.bias, tf.reduce_sum(d["v"], 1)),
      (o_layer.kernel, tf.einsum("bthk,btd->bhkd", mixed, d["o"])),
      (o_layer.bias, tf.reduce_sum(d["o"], 1)),
      (norm1.gamma, tf.reduce_sum(d["norm1"] * n1, 1)),
      (norm1.beta, tf.reduce_sum(d["norm1"], 1)),
      (ff1.kernel, tf.einsum("btd,btf->bdf", y1, d["ff1"])),
      (ff1.bias, tf.reduce_sum(d["ff1"], 1)),
      (ff2.kernel, tf.einsum("btf,btd->bfd", h, d["ff2"])),
      (ff2.bias, tf.reduce_sum(d["ff2"], 1)),
      (norm2.gamma, tf.reduce_sum(d["norm2"] * n2, 1)),
      (norm2.beta, tf.reduce_sum(d["norm2"], 1)),
      (head.kernel, pooled[:, :, None] * d["logits"][:, None, :]),
      (head.bias, d["logits"]),
  ]
  return {v.path: g for v, g in pairs}
