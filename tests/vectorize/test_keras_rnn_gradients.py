"""Jacobians and per-example gradients through Keras RNN layers.

The gradient of a Keras RNN (a `tf.while_loop` reading a TensorArray) sums TensorList
cotangents with AddN; with a stacked cotangent those lists are DenseLists, summed by the
TensorList converters. Each helper must equal the tape's sequential answer and convert
with no fallback, eagerly, in `tf.function` and under XLA.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import vectorize

BATCH, STEPS, FEATURES = 3, 5, 2

LAYERS = {
    "lstm": lambda: keras.layers.LSTM(4),
    "gru": lambda: keras.layers.GRU(4),
    "simple_rnn": lambda: keras.layers.SimpleRNN(4),
    "bidirectional_lstm": lambda: keras.layers.Bidirectional(keras.layers.LSTM(3)),
}


def _layer(name):
  keras.utils.set_random_seed(0)
  layer = LAYERS[name]()
  layer(tf.zeros([BATCH, STEPS, FEATURES]))
  return layer


def _inputs():
  return tf.constant(np.random.default_rng(1).standard_normal([BATCH, STEPS, FEATURES]),
                     tf.float32)


def _run(fn, mode, *args):
  """`fn(*args)` eagerly, in a tf.function or under XLA; asserts no op fell back."""
  if mode != "eager":
    fn = tf.function(fn, jit_compile=(mode == "xla"), autograph=False)
  out = fn(*args)
  assert vectorize.last_report().num_fallbacks == 0, vectorize.last_report().counts()
  return out


def _tape_batch_jacobian(layer, x):
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(x)
    y = layer(x)
  return tape.batch_jacobian(y, x, experimental_use_pfor=False)


@pytest.mark.parametrize("mode", ["function", "xla"])
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_batch_jacobian(name, mode):
  layer, x = _layer(name), _inputs()

  def batch_jacobian(x):
    return vectorize.batch_jacobian(layer(x), x)

  np.testing.assert_allclose(_run(batch_jacobian, mode, x), _tape_batch_jacobian(layer, x),
                             atol=1e-5)


@pytest.mark.parametrize("mode", ["eager", "xla"])
@pytest.mark.parametrize("name", ["lstm", "bidirectional_lstm"])
def test_batch_jacobian_fn(name, mode):
  layer, x = _layer(name), _inputs()
  jacobian = vectorize.batch_jacobian_fn(layer)
  np.testing.assert_allclose(_run(jacobian, mode, x), _tape_batch_jacobian(layer, x),
                             atol=1e-5)


@pytest.mark.parametrize("mode", ["function", "xla"])
@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_jacobian(name, mode):
  layer, x = _layer(name), _inputs()
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(x)
    y = layer(x)
  expected = tape.jacobian(y, x, experimental_use_pfor=False)

  def jacobian(x):
    return vectorize.jacobian(layer(x), x)

  np.testing.assert_allclose(_run(jacobian, mode, x), expected, atol=1e-5)


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_per_example_gradients(name, mode):
  layer, x = _layer(name), _inputs()
  def loss(example):
    return tf.reduce_sum(tf.square(layer(example[None])))

  def per_example(x):
    return vectorize.per_example_gradients(loss, layer, x, fallback_to_while_loop=False)

  expected = []
  for b in range(BATCH):
    with tf.GradientTape() as tape:
      value = loss(x[b])
    expected.append(tape.gradient(value, layer.trainable_variables))
  actual = _run(per_example, mode, x)
  for k, variable in enumerate(layer.trainable_variables):
    np.testing.assert_allclose(actual[k], np.stack([e[k] for e in expected]), atol=1e-4,
                               err_msg=variable.name)


@pytest.mark.parametrize("mode", ["eager", "xla"])
@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_per_example_gradients_through_the_input_sequence(name, mode):
  """An Embedding under the RNN: its gradient flows back through the RNN's input
  TensorArray, whose read's gradient reserves a list as long as the one read (under XLA
  that list's capacity: a reserve of per-iteration size was refused)."""
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input([STEPS], dtype="int32"),
                            keras.layers.Embedding(11, FEATURES), LAYERS[name](),
                            keras.layers.Dense(2)])
  tokens = tf.constant(np.random.default_rng(2).integers(0, 11, [BATCH, STEPS]), tf.int32)

  def loss(example):
    return tf.reduce_sum(tf.square(model(example[None])))

  def per_example(tokens):
    return vectorize.per_example_gradients(loss, model.trainable_variables, tokens,
                                           fallback_to_while_loop=False)

  actual = _run(per_example, mode, tokens)
  for b in range(BATCH):
    with tf.GradientTape() as tape:
      value = loss(tokens[b])
    for k, g in enumerate(tape.gradient(value, model.trainable_variables)):
      np.testing.assert_allclose(actual[k][b], tf.convert_to_tensor(g), atol=1e-4,
                                 err_msg=model.trainable_variables[k].name)
