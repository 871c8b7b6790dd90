"""per_example_gradients against a Python loop of `tape.gradient` per example, for Keras 3
models and a tf.Module, with the fallback disabled (float32, relative error <= 1e-4)."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from vectorize.helpers.per_example import per_example_gradients

keras = tf.keras
RNG = np.random.default_rng(0)
TOL = 1e-4
N = 4


def _loop(loss_fn, variables, *batch):
  """The reference: one eager `tape.gradient` per example, stacked per variable."""
  per_example = []
  for i in range(N):
    with tf.GradientTape() as tape:
      loss = loss_fn(*tf.nest.map_structure(lambda t, i=i: t[i], batch))
    per_example.append(tape.gradient(loss, variables))
  return tf.nest.map_structure(lambda *gs: np.stack(gs), *per_example)


def _assert_close(actual, expected):
  tf.nest.assert_same_structure(actual, expected)
  for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
    a, e = np.asarray(a), np.asarray(e)
    assert a.shape == e.shape, f"shape {a.shape} != expected {e.shape}"
    scale = max(np.max(np.abs(e)), 1e-6)
    np.testing.assert_allclose(a / scale, e / scale, atol=TOL, rtol=0)


def _assert_no_fallback():
  assert vectorize.last_report().num_fallbacks == 0, vectorize.last_report().counts()


def _normal(shape):
  return tf.constant(RNG.standard_normal(shape), tf.float32)


def _classification_loss(model):
  def loss_fn(x, y):
    logits = model(x[None])
    return keras.losses.sparse_categorical_crossentropy(y[None], logits, from_logits=True)[0]
  return loss_fn


def _masked_lstm(unroll):
  keras.utils.set_random_seed(1)
  return keras.Sequential([keras.Input((6, 3)), keras.layers.Masking(0.0),
                           keras.layers.LSTM(5, unroll=unroll), keras.layers.Dense(2)])


def _padded_sequences(lengths=(6, 4, 2, 5)):
  """[N, 6, 3] sequences, zero (masked) after each example's own length."""
  sequences = RNG.standard_normal([N, 6, 3]).astype(np.float32)
  for k, length in enumerate(lengths):
    sequences[k, length:] = 0.0
  return tf.constant(sequences)


LABELS = tf.constant([0, 1, 1, 0])


class _Regression(tf.Module):

  def __init__(self):
    super().__init__()
    self.w = tf.Variable(RNG.standard_normal([3, 2]), dtype=tf.float32)
    self.b = tf.Variable(tf.zeros([2]))
    self.unused = tf.Variable(1.0)

  def __call__(self, x):
    return tf.tanh(tf.linalg.matvec(self.w, x, transpose_a=True) + self.b)


def test_keras_convnet_equals_the_loop():
  keras.utils.set_random_seed(0)
  model = keras.Sequential([
      keras.Input((8, 8, 1)), keras.layers.Conv2D(2, 3, activation="relu"),
      keras.layers.MaxPool2D(2), keras.layers.Flatten(), keras.layers.Dense(3)])
  loss_fn = _classification_loss(model)
  images = _normal([N, 8, 8, 1])
  actual = per_example_gradients(loss_fn, model, images, LABELS, fallback_to_while_loop=False)
  _assert_no_fallback()
  _assert_close(actual, _loop(loss_fn, list(model.trainable_variables), images, LABELS))


@pytest.mark.parametrize("unroll", [True, False], ids=["unrolled", "while_loop"])
def test_keras_masked_lstm_equals_the_loop(unroll):
  model = _masked_lstm(unroll=unroll)
  loss_fn = _classification_loss(model)
  sequences = _padded_sequences()
  actual = per_example_gradients(loss_fn, model, sequences, LABELS,
                                 fallback_to_while_loop=False)
  _assert_no_fallback()
  _assert_close(actual, _loop(loss_fn, list(model.trainable_variables), sequences, LABELS))


def test_module_equals_the_loop_with_none_for_unused_variables():
  module = _Regression()
  x = _normal([N, 3])

  def loss_fn(x):
    return tf.reduce_sum(module(x) ** 2)

  variables = {"w": module.w, "b": module.b, "unused": module.unused}
  actual = per_example_gradients(loss_fn, variables, x, fallback_to_while_loop=False)
  _assert_no_fallback()
  assert actual["unused"] is None
  del actual["unused"], variables["unused"]
  _assert_close(actual, _loop(loss_fn, variables, x))


def test_module_variables_come_as_its_trainable_variables():
  module = _Regression()
  x = _normal([N, 3])

  def loss_fn(x):
    return tf.reduce_sum(module(x))

  actual = per_example_gradients(loss_fn, module, x)
  assert [None if g is None else g.shape for g in actual] == [
      None if v is module.unused else [N] + v.shape for v in module.trainable_variables]


def test_nested_batch_and_chunks_equal_the_loop():
  w = tf.Variable(RNG.standard_normal([3, 2]), dtype=tf.float32)
  batch = {"x": _normal([N, 3]), "scale": _normal([N])}

  def loss_fn(example, target):
    return tf.reduce_sum((tf.linalg.matvec(w, example["x"], transpose_a=True) *
                          example["scale"] - target) ** 2)

  targets = _normal([N, 2])
  actual = per_example_gradients(loss_fn, [w], batch, targets, parallel_iterations=3,
                                 fallback_to_while_loop=False)
  _assert_close(actual, _loop(loss_fn, [w], batch, targets))


def test_repeated_calls_do_not_retrace():
  module = _Regression()
  calls = []

  def loss_fn(x):
    calls.append(1)
    return tf.reduce_sum(module(x) ** 2)

  traces = []
  for _ in range(3):
    x = _normal([N, 3])
    before = len(calls)
    actual = per_example_gradients(loss_fn, [module.w], x)
    traces.append(len(calls) - before)
    _assert_close(actual, _loop(loss_fn, [module.w], x))
  assert traces == [1, 0, 0]


def test_bad_arguments_raise():
  w = tf.Variable(1.0)
  with pytest.raises(ValueError, match="no variables"):
    per_example_gradients(lambda x: x, [], _normal([N]))
  with pytest.raises(ValueError, match="at least one batch element"):
    per_example_gradients(lambda: w, [w])
  with pytest.raises(ValueError, match="same leading dimension"):
    per_example_gradients(lambda x, y: w * x * y, [w], _normal([N]), _normal([N + 1]))
  with pytest.raises(ValueError, match="leading batch axis"):
    per_example_gradients(lambda x: w * x, [w], tf.constant(1.0))
