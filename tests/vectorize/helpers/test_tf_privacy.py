"""`tf_privacy_layer_registry()`: TF Privacy's registry-function protocol for every layer.

The protocol (TF Privacy's layer_registry.py): `fn(layer, args, kwargs, tape,
num_microbatches)` returns (base_vars, outputs, sqr_norm_fn); with base_vars watched by the
tape and the loss summed over the batch (each microbatch's loss the mean of its examples'),
`sqr_norm_fn(tape.gradient(summed_loss, base_vars))` is each example's (microbatch's)
squared gradient norm over the layer's trainable variables. Checked here against a loop of
one tape per example, without TF Privacy installed; the DP Keras model run end to end is the
last test (skipped where TF Privacy is not installed).
"""

import importlib.util
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import vectorize

RNG = np.random.default_rng(0)
B = 6


def _normal(shape):
  return tf.constant(RNG.standard_normal(shape), tf.float32)


def _example_losses(outputs, weights):
  """A nonlinear per-example loss of the layer's outputs: [b]."""
  flat = tf.nest.flatten(outputs)
  return tf.add_n([tf.reduce_sum(tf.reshape(tf.tanh(o) * w, [tf.shape(o)[0], -1]), 1)
                   for o, w in zip(flat, weights)])


def _registry_squared_norms(layer, args, kwargs, weights, num_microbatches=None):
  fn = vectorize.tf_privacy_layer_registry().lookup(layer)
  with tf.GradientTape(persistent=True) as tape:
    base_vars, outputs, sqr_norm_fn = fn(layer, args, kwargs, tape, num_microbatches)
    losses = _example_losses(outputs, weights)
    if num_microbatches is not None:
      losses = tf.reduce_mean(tf.reshape(losses, [num_microbatches, -1]), 1)
    summed = tf.reduce_sum(losses)
  return sqr_norm_fn(tape.gradient(summed, base_vars))


def _looped_squared_norms(layer, args, kwargs, weights, groups):
  """Squared norms of each group's (mean) loss gradient, one tape per group."""
  out = []
  for rows in groups:
    take = lambda t: tf.gather(t, rows) if isinstance(t, tf.Tensor) and t.shape.rank else t  # pylint: disable=cell-var-from-loop
    with tf.GradientTape() as tape:
      outputs = layer(*tf.nest.map_structure(take, args), **tf.nest.map_structure(take, kwargs))
      loss = tf.reduce_mean(_example_losses(outputs, [tf.gather(w, rows) for w in weights]))
    grads = tape.gradient(loss, layer.trainable_variables)
    out.append(sum(float(tf.reduce_sum(tf.convert_to_tensor(g) ** 2)) for g in grads
                    if g is not None))
  return np.array(out)


def _case(name):
  keras.utils.set_random_seed(1)
  if name == "dense":
    layer, args, kwargs = keras.layers.Dense(4, activation="relu"), (_normal([B, 5]),), {}
  elif name == "dense_on_positions":
    layer, args, kwargs = keras.layers.Dense(3), (_normal([B, 7, 5]),), {}
  elif name == "conv2d":
    layer, args, kwargs = (keras.layers.Conv2D(6, 3, strides=2, padding="same"),
                           (_normal([B, 7, 7, 4]),), {})
  elif name == "depthwise":
    layer, args, kwargs = keras.layers.DepthwiseConv2D(2), (_normal([B, 5, 5, 3]),), {}
  elif name == "embedding":
    layer = keras.layers.Embedding(9, 4)
    args, kwargs = (tf.constant(RNG.integers(0, 3, [B, 5]), tf.int32),), {}
  elif name == "masked_lstm":
    layer = keras.layers.LSTM(4)
    mask = tf.constant(np.arange(5)[None, :] < RNG.integers(1, 6, [B, 1]))
    args, kwargs = (_normal([B, 5, 3]),), {"mask": mask}
  elif name == "gru_sequences":
    layer, args, kwargs = keras.layers.GRU(3, return_sequences=True), (_normal([B, 4, 2]),), {}
  elif name == "attention":
    layer = keras.layers.MultiHeadAttention(2, 3)
    args, kwargs = (_normal([B, 4, 6]), _normal([B, 5, 6])), {"training": True}
  elif name == "layer_norm":
    layer, args, kwargs = keras.layers.LayerNormalization(), (_normal([B, 3, 5]),), {}
  outputs = layer(*args, **kwargs)
  weights = [_normal(o.shape) for o in tf.nest.flatten(outputs)]
  return layer, args, kwargs, weights


CASES = ["dense", "dense_on_positions", "conv2d", "depthwise", "embedding", "masked_lstm",
         "gru_sequences", "attention", "layer_norm"]


@pytest.mark.parametrize("name", CASES)
def test_squared_norms_equal_the_loop(name):
  layer, args, kwargs, weights = _case(name)
  got = _registry_squared_norms(layer, args, kwargs, weights)
  want = _looped_squared_norms(layer, args, kwargs, weights, [[i] for i in range(B)])
  np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["dense", "conv2d", "masked_lstm"])
def test_microbatches_are_norms_of_their_mean_loss(name):
  layer, args, kwargs, weights = _case(name)
  got = _registry_squared_norms(layer, args, kwargs, weights, num_microbatches=3)
  want = _looped_squared_norms(layer, args, kwargs, weights, [[0, 1], [2, 3], [4, 5]])
  np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-6)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_run_time_batch_and_empty_batch_in_a_function(jit_compile):
  """(A dense layer: TensorFlow's CPU conv2d, given a run-time batch of 0, returns its
  input's shape, which breaks the caller's own forward pass before the registry runs.)"""
  layer, args, _, weights = _case("dense_on_positions")
  fn = tf.function(lambda x, w: _registry_squared_norms(layer, (x,), {}, [w]),
                   jit_compile=jit_compile,
                   input_signature=None if jit_compile else
                   [tf.TensorSpec([None, 7, 5]), tf.TensorSpec([None, 7, 3])])
  for b in (B, 0):
    got = fn(args[0][:b], weights[0][:b])
    want = _looped_squared_norms(layer, (args[0][:b],), {}, [weights[0][:b]],
                                 [[i] for i in range(b)])
    assert got.shape == [b]
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-6)


def test_every_layer_is_an_element_and_inserted_rules_are_kept():
  registry = vectorize.tf_privacy_layer_registry()
  assert registry.is_elem(keras.layers.Conv3D(2, 2)) and registry.is_elem(keras.layers.GRU(2))
  rule = lambda *args: None
  registry.insert(keras.layers.Dense, rule)
  assert registry.lookup(keras.layers.Dense(2)) is rule
  assert registry.lookup(keras.layers.Conv2D(2, 2)) is not rule


def test_per_example_gradient_norms_equal_clipped_gradient_sums_norms():
  keras.utils.set_random_seed(2)
  model = keras.Sequential([keras.Input((6, 6, 2)), keras.layers.Conv2D(3, 3),
                            keras.layers.Flatten(), keras.layers.Dense(2)])
  x, y = _normal([B, 6, 6, 2]), tf.constant(RNG.integers(0, 2, [B]), tf.int32)

  def loss_fn(x, y):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(y, model(x[None])[0])

  norms = vectorize.per_example_gradient_norms(loss_fn, model, x, y)
  grads = vectorize.per_example_gradients(loss_fn, model, x, y)
  want = np.sqrt(sum(np.sum(np.reshape(g, [B, -1]) ** 2, 1) for g in grads))
  np.testing.assert_allclose(norms, want, rtol=1e-5)


_DP_MODEL_SCRIPT = os.path.join(os.path.dirname(__file__), "tf_privacy_dp_model.py")


def test_tf_privacys_dp_model_trains_fast_on_every_layer():
  """TF Privacy's DPSequential / DPModel (tf_keras, its own process) with the registry: the
  fast path taken for convolutions, LSTM/GRU and attention, one SGD step equal to
  `clipped_gradient_sum`'s."""
  if importlib.util.find_spec("tensorflow_privacy") is None:
    pytest.skip("TF Privacy is not installed (its pins exclude numpy 2: pip install "
                "--no-deps tensorflow-privacy==0.9.0 to run this test)")
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(_DP_MODEL_SCRIPT))))
  done = subprocess.run([sys.executable, _DP_MODEL_SCRIPT], capture_output=True, text=True,
                        timeout=600, check=False,
                        env=dict(os.environ, PYTHONPATH=root + os.pathsep +
                                 os.environ.get("PYTHONPATH", "")))
  assert done.returncode == 0, done.stderr[-3000:]
  assert done.stdout.count("fast ok") == 4, done.stdout
