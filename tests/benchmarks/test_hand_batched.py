"""The hand-batched baselines against the obvious references: a tape per example for
per-example gradients, `tape.jacobian` / `tape.batch_jacobian` as a loop of gradients
(`experimental_use_pfor=False`) for jacobians; eagerly and under XLA (float32, error <= 1e-4
of the largest entry)."""

import functools

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import hand_batched
from benchmarks import models

RNG = np.random.default_rng(0)
BATCH = 3
MODES = ("eager", "xla")

LSTM_PARAMS = models.lstm_params(input_size=5, state_size=6, num_classes=4)
SEQUENCES = tf.constant(RNG.standard_normal([BATCH, 4, 5]), tf.float32)
CONVNET_PARAMS = models.convnet_params(channels=(2, 3), hidden=8, image_size=8)
IMAGES = tf.constant(RNG.standard_normal([BATCH, 8, 8, 1]), tf.float32)
LABELS = tf.constant([3, 0, 1], tf.int32)
VGG_PARAMS = models.vgg_params(channels=(2, 3), image_size=12, outputs=5)
# 10 -> 5 -> 3: odd sizes, so SAME max pools pad their last row and column.
VGG_ODD_PARAMS = dict(models.vgg_params(channels=(2, 3), image_size=10, outputs=5),
                      dense=tf.constant(RNG.standard_normal([27, 5]), tf.float32))


def _run(fn, mode, *args):
  if mode == "xla":
    fn = tf.function(fn, jit_compile=True, autograph=False)
  return tf.nest.map_structure(np.asarray, fn(*args))


def _assert_close(actual, expected):
  assert actual.shape == expected.shape
  scale = max(np.max(np.abs(expected)), 1e-6)
  np.testing.assert_allclose(actual / scale, expected / scale, atol=1e-4, rtol=0)


def _per_example_reference(logits_fn, params, inputs):
  def loss(params, x, label):
    return models.softmax_loss(logits_fn(params, x[None]), label[None])

  grads = [models.gradients(loss, params, inputs[b], LABELS[b]) for b in range(BATCH)]
  return {k: np.stack([g[k] for g in grads]) for k in params}


@functools.lru_cache(maxsize=None)
def _reference(name):
  """References computed once per test session (they are the slow part)."""
  if name == "lstm_gradients":
    return _per_example_reference(models.lstm_unrolled_logits, LSTM_PARAMS, SEQUENCES)
  if name == "convnet_gradients":
    return _per_example_reference(models.convnet_logits, CONVNET_PARAMS, IMAGES)
  if name == "lstm_batch_jacobian":
    with tf.GradientTape(persistent=True) as tape:   # eager without pfor requires it
      tape.watch(SEQUENCES)
      logits = models.lstm_unrolled_logits(LSTM_PARAMS, SEQUENCES)
    return tape.batch_jacobian(logits, SEQUENCES, experimental_use_pfor=False).numpy()
  params, size = {"vgg": (VGG_PARAMS, 12), "vgg_odd": (VGG_ODD_PARAMS, 10)}[name]
  return _tape_jacobian(lambda x: models.vgg_outputs(params, x[None])[0], _image(size))


def _tape_jacobian(fn, x):
  with tf.GradientTape(persistent=True) as tape:     # eager without pfor requires it
    tape.watch(x)
    y = fn(x)
  return tape.jacobian(y, x, experimental_use_pfor=False).numpy()


def _image(size):
  return tf.constant(np.random.default_rng(size).standard_normal([size, size, 3]), tf.float32)


@pytest.mark.parametrize("mode", MODES)
def test_lstm_per_example_gradients(mode):
  actual = _run(hand_batched.lstm_per_example_gradients, mode, LSTM_PARAMS, SEQUENCES, LABELS)
  expected = _reference("lstm_gradients")
  assert actual.keys() == expected.keys()
  for k in expected:
    _assert_close(actual[k], expected[k])


@pytest.mark.parametrize("mode", MODES)
def test_convnet_per_example_gradients(mode):
  actual = _run(hand_batched.convnet_per_example_gradients, mode, CONVNET_PARAMS, IMAGES,
                LABELS)
  expected = _reference("convnet_gradients")
  assert actual.keys() == expected.keys()
  for k in expected:
    _assert_close(actual[k], expected[k])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["vgg", "vgg_odd"])
def test_vgg_jacobian(name, mode):
  params, size = {"vgg": (VGG_PARAMS, 12), "vgg_odd": (VGG_ODD_PARAMS, 10)}[name]
  actual = _run(hand_batched.vgg_jacobian, mode, params, _image(size))
  _assert_close(actual, _reference(name))


def test_max_pool_routing_breaks_ties_like_max_pool_grad():
  """Ties (here whole windows of equal values) go to the first maximum, as MaxPoolGrad."""
  x = tf.constant(RNG.integers(0, 2, [1, 5, 7, 3]), tf.float32)
  with tf.GradientTape() as tape:
    tape.watch(x)
    pooled = tf.nn.max_pool2d(x, 2, 2, "SAME")
  expected = tape.gradient(pooled, x)
  np.testing.assert_array_equal(hand_batched._max_pool_routing(x), expected)


@pytest.mark.parametrize("mode", MODES)
def test_lstm_jacobian(mode):
  actual = _run(hand_batched.lstm_jacobian, mode, LSTM_PARAMS, SEQUENCES[1])
  expected = _tape_jacobian(lambda x: models.lstm_unrolled_logits(LSTM_PARAMS, x[None])[0],
                            SEQUENCES[1])
  _assert_close(actual, expected)


@pytest.mark.parametrize("mode", MODES)
def test_lstm_batch_jacobian(mode):
  actual = _run(hand_batched.lstm_batch_jacobian, mode, LSTM_PARAMS, SEQUENCES)
  _assert_close(actual, _reference("lstm_batch_jacobian"))
