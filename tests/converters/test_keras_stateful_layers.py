"""Keras layers that draw random numbers or update moving averages, as per-example bodies.

Each layer's seed generator (a state variable read, then assigned plus [0, 1]) and
BatchNormalization's moving averages are affine recurrences (converters/recurrences.py); the
stateless samplers with per-iteration seeds draw the kernels' streams at once
(converters/philox.py). So every example gets its own randomness, exactly the sequential
loop's with the same seed, and the layer's variables end where the loop leaves them; with the
fallback off.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

_L = keras.layers
_IMAGES = tf.constant(np.random.default_rng(0).uniform(0, 1, [5, 12, 10, 3]), tf.float32)
_NO_XLA_TRANSFORM = ("the loop under XLA has no ImageProjectiveTransformV3 kernel to compare with "
                     "(vectorized, it compiles: test_image.py)")

LAYERS = {
    "Dropout": (lambda: _L.Dropout(0.5, seed=3), True),
    "GaussianNoise": (lambda: _L.GaussianNoise(0.2, seed=3), True),
    "RandomFlip": (lambda: _L.RandomFlip(seed=3), True),
    "RandomContrast": (lambda: _L.RandomContrast(0.4, seed=3), True),
    "RandomBrightness": (lambda: _L.RandomBrightness(0.3, value_range=(0, 1), seed=3), True),
    "RandomRotation": (lambda: _L.RandomRotation(0.2, seed=3), _NO_XLA_TRANSFORM),
    "RandomZoom": (lambda: _L.RandomZoom(0.3, seed=3), _NO_XLA_TRANSFORM),
    "RandomTranslation": (lambda: _L.RandomTranslation(0.2, 0.2, seed=3), _NO_XLA_TRANSFORM),
    "BatchNormalization": (lambda: _L.BatchNormalization(momentum=0.8), True),
}


def _body(layer):
  return lambda i: layer(_IMAGES[i], training=True)


def _built(name):
  layer = LAYERS[name][0]()
  layer(_IMAGES[0], training=True)   # creates the variables
  return layer


def _loop(body, n, mode):
  if mode == "xla":   # XLA's stateless kernels draw other bits than the CPU kernels
    return tf.function(lambda: tf.stack([body(tf.constant(i)) for i in range(n)]),
                       jit_compile=True, autograph=False)().numpy()
  return testing.sequential(body, n, testing.output_spec(body))


def _check_against_loop(name, mode, n):
  layer = _built(name)
  initial = [v.numpy() for v in layer.variables]
  actual = testing.run_pfor(_body(layer), n, mode=mode)
  after = [v.numpy() for v in layer.variables]
  for v, value in zip(layer.variables, initial):
    v.assign(value)
  expected = _loop(_body(layer), n, mode)
  testing.assert_allclose(actual, expected, 1e-5)
  testing.assert_allclose(after, [v.numpy() for v in layer.variables], 1e-5)
  return actual, initial, after


# A caller's tf.function for a few layers: an eager pfor of a static n traces the same graph
# (seed reads and assignments included) in a tf.function of its own.
FUNCTION_MODE_LAYERS = {"Dropout", "RandomRotation", "BatchNormalization"}


@pytest.mark.parametrize("name,mode", [
    pytest.param(name, mode, id=f"{name}-{mode}") for name in sorted(LAYERS)
    for mode in ("eager", "function", "dynamic", "xla")
    if mode != "function" or name in FUNCTION_MODE_LAYERS])
def test_layer_equals_the_sequential_loop_with_the_same_seed(name, mode):
  if mode == "xla" and LAYERS[name][1] is not True:
    pytest.skip(LAYERS[name][1])
  actual, initial, after = _check_against_loop(name, mode, 5)
  if name != "BatchNormalization":   # each example its own draw
    assert len({row.tobytes() for row in actual}) == 5
  assert any(not np.array_equal(a, b) for a, b in zip(initial, after))


@pytest.mark.parametrize("name", ["Dropout", "BatchNormalization"])
def test_two_calls_continue_the_sequence_of_one_loop(name):
  """The eager cache converts once; each call reads the state the previous one left."""
  layer = _built(name)
  initial = [v.numpy() for v in layer.variables]
  body = _body(layer)
  actual = np.concatenate([vectorize.pfor(body, 5, fallback_to_while_loop=False).numpy()
                           for _ in range(2)])
  for v, value in zip(layer.variables, initial):
    v.assign(value)
  expected = np.concatenate([testing.sequential(body, 5) for _ in range(2)])
  testing.assert_allclose(actual, expected, 1e-5)


@pytest.mark.parametrize("name", ["Dropout", "RandomRotation", "BatchNormalization"])
def test_layer_with_no_iterations_keeps_its_variables(name):
  _, initial, after = _check_against_loop(name, "dynamic", 0)
  testing.assert_allclose(after, initial)


@pytest.mark.unchecked
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_converts_with_no_loop(name):
  layer = _built(name)
  graph = tf.function(lambda: vectorize.pfor(_body(layer), 5, fallback_to_while_loop=False),
                      autograph=False).get_concrete_function().graph
  assert not {"While", "StatelessWhile"} & set(testing.all_op_types(graph))


@pytest.mark.parametrize("name", ["Dropout", "RandomFlip", "RandomContrast", "RandomBrightness",
                                  "BatchNormalization"])
def test_layer_converts_with_no_loop_under_xla(name):
  """The uniform samplers follow XLA's own float and key derivation (GaussianNoise's normal
  samples of an image's rank run per iteration under XLA)."""
  layer = _built(name)
  graph = tf.function(lambda: vectorize.pfor(_body(layer), 5, fallback_to_while_loop=False),
                      jit_compile=True, autograph=False).get_concrete_function().graph
  assert not {"While", "StatelessWhile"} & set(testing.all_op_types(graph))


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
def test_model_of_stateful_layers_equals_the_loop(mode):
  """BatchNormalization's update depends on a Dropout before it: the update's values are
  converted early, reusing what is converted, the Dropout's seed reads included."""
  model = keras.Sequential([_L.RandomFlip(seed=1), _L.Conv2D(4, 3), _L.Dropout(0.3, seed=2),
                            _L.BatchNormalization(), _L.GaussianNoise(0.1, seed=5),
                            _L.Flatten(), _L.Dense(2)])
  model(_IMAGES[:1], training=True)
  initial = [v.numpy() for v in model.variables]
  body = lambda i: model(_IMAGES[i][tf.newaxis], training=True)[0]
  actual = testing.run_pfor(body, 5, mode=mode)
  after = [v.numpy() for v in model.variables]
  for v, value in zip(model.variables, initial):
    v.assign(value)
  testing.assert_allclose(actual, _loop(body, 5, mode), 1e-5)
  testing.assert_allclose(after, [v.numpy() for v in model.variables], 1e-5)


def test_augmentation_under_vectorized_map_equals_map_fn():
  def augmenter():
    return keras.Sequential([_L.RandomFlip(seed=1), _L.RandomRotation(0.1, seed=2),
                             _L.RandomContrast(0.3, seed=3)])

  augment = augmenter()
  augment(_IMAGES[0], training=True)
  initial = [v.numpy() for v in augment.variables]
  actual = tf.function(lambda x: vectorize.vectorized_map(
      lambda image: augment(image, training=True), x, fallback_to_while_loop=False))(_IMAGES)
  for v, value in zip(augment.variables, initial):
    v.assign(value)
  expected = tf.function(lambda x: tf.map_fn(lambda image: augment(image, training=True), x))(
      _IMAGES)
  testing.assert_allclose(actual.numpy(), expected.numpy())



@pytest.mark.parametrize("mode", ["eager", "function"])
def test_dropout_in_chunks_equals_the_loop(mode):
  """parallel_iterations: each chunk reads the state the previous chunk left."""
  layer = _built("Dropout")
  initial = [v.numpy() for v in layer.variables]
  run = lambda: vectorize.pfor(_body(layer), 5, parallel_iterations=2,
                               fallback_to_while_loop=False)
  actual = (run() if mode == "eager" else tf.function(run, autograph=False)()).numpy()
  after = [v.numpy() for v in layer.variables]
  for v, value in zip(layer.variables, initial):
    v.assign(value)
  testing.assert_allclose(actual, _loop(_body(layer), 5, mode))
  testing.assert_allclose(after, [v.numpy() for v in layer.variables])


def test_per_example_gradients_through_dropout_equal_the_loop():
  model = keras.Sequential([_L.Dense(4), _L.Dropout(0.5, seed=4), _L.Dense(1)])
  examples = tf.reshape(_IMAGES[:, :2, :2, 0], [5, 4])
  model(examples[:1], training=True)
  initial = [v.numpy() for v in model.variables]

  def loss_fn(example):
    return tf.reduce_sum(model(example[tf.newaxis], training=True) ** 2)

  actual = vectorize.per_example_gradients(loss_fn, model.trainable_variables, examples)
  for v, value in zip(model.variables, initial):
    v.assign(value)
  expected = []
  for example in examples:
    with tf.GradientTape() as tape:
      loss = loss_fn(example)
    expected.append(tape.gradient(loss, model.trainable_variables))
  for k, grad in enumerate(actual):
    testing.assert_allclose(grad.numpy(), np.stack([e[k].numpy() for e in expected]))

# ----------------------------------------------------------------------------- for other owners

_X = tf.constant(np.random.default_rng(1).uniform(0, 1, [4, 3]), tf.float32)
_rebound_layer = _L.Dense(2)


def _global_layer_body(i):
  return _rebound_layer(_X[i:i + 1])


def test_rebinding_a_global_layer_converts_anew():
  global _rebound_layer
  vectorize.pfor(_global_layer_body, 4)
  _rebound_layer = _L.Dense(2)
  actual = vectorize.pfor(_global_layer_body, 4).numpy()
  testing.assert_allclose(actual[:, 0], _rebound_layer(_X).numpy())


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])
@pytest.mark.parametrize("n", [4, 0])
def test_update_that_is_not_affine_runs_sequentially_with_the_fallback_on(mode, n):
  """The engine converts in a scratch graph first (vectorize/whole_body_loop.py): the refusal
  there makes the whole body one sequential loop, nothing stateful emitted twice."""
  variable = tf.Variable(tf.fill([3], 0.5))

  def body(i):
    old = variable.read_value()
    variable.assign(old * old + _X[i])
    return old

  actual = testing.run_pfor(body, n, mode=mode, fallback=True)
  after = variable.numpy()
  variable.assign(tf.fill([3], 0.5))
  testing.assert_allclose(actual, testing.sequential(body, n, testing.output_spec(body)))
  testing.assert_allclose(after, variable.numpy())


@pytest.mark.parametrize("kwargs", [{"parallel_iterations": 2}, {}])
def test_update_that_is_not_affine_runs_sequentially_chunked_and_under_xla(kwargs):
  variable = tf.Variable(tf.fill([3], 0.5))

  def body(i):
    old = variable.read_value()
    variable.assign(old * old + _X[i])
    return old

  mode = "function" if kwargs else "xla"
  actual = testing.run_pfor(body, 4, mode=mode, fallback=True, **kwargs)
  after = variable.numpy()
  variable.assign(tf.fill([3], 0.5))
  testing.assert_allclose(actual, testing.sequential(body, 4))
  testing.assert_allclose(after, variable.numpy())


def test_update_that_is_not_affine_with_the_fallback_off_names_the_line():
  variable = tf.Variable(tf.fill([3], 0.5))

  def body(i):
    old = variable.read_value()
    variable.assign(old * old + _X[i])
    return old

  with pytest.raises(vectorize.ConversionError, match=r"test_keras_stateful_layers.py:\d+"):
    vectorize.pfor(body, 4, fallback_to_while_loop=False)
  np.testing.assert_array_equal(variable.numpy(), np.full([3], 0.5, np.float32))
