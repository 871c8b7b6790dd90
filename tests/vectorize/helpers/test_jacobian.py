"""jacobian, batch_jacobian, jacobian_fn, batch_jacobian_fn and hessian against TensorFlow's
tape without pfor (a loop of gradients), with the fallback counted (float32, relative error
<= 1e-4)."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from benchmarks import models
from vectorize.helpers.jacobian import (batch_jacobian, batch_jacobian_fn, hessian, jacobian,
                                        jacobian_fn)

RNG = np.random.default_rng(0)
TOL = 1e-4

MLP_PARAMS = models.mlp_params()
CONVNET_PARAMS = models.convnet_params(channels=(2, 4), hidden=8, image_size=8)
LSTM_PARAMS = models.lstm_params(input_size=3, state_size=4)
LENGTHS = (4, 6)


def _mlp(x):
  return models.mlp_logits(MLP_PARAMS, x)


def _convnet(x):
  return models.convnet_logits(CONVNET_PARAMS, x)


def _lstm10(x):
  return models.lstm_unrolled_logits(LSTM_PARAMS, x)


def _while_rnn(x):
  """[2, 6, 3] -> [2, 4]: each example its own tf.while_loop, run for its own length."""
  return tf.stack([models.lstm_dynamic_final_state(LSTM_PARAMS, x[k], tf.constant(length))
                   for k, length in enumerate(LENGTHS)])


def _normal(shape):
  return tf.constant(RNG.standard_normal(shape), tf.float32)


MODELS = {
    "mlp": (_mlp, _normal([3, 16])),
    "convnet": (_convnet, _normal([2, 8, 8, 1])),
    "lstm10": (_lstm10, _normal([2, 10, 3])),
    "while_rnn": (_while_rnn, _normal([2, 6, 3])),
}


def _tape_jacobian(f, x, batch=False):
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(x)
    y = f(x)
  if batch:
    return tape.batch_jacobian(y, x, experimental_use_pfor=False)
  return tape.jacobian(y, x, experimental_use_pfor=False)


def _nested_hessian(f, x):
  """d2 f(x)[i] / dx dx for each output element i, by nested tapes without pfor."""
  size = int(np.prod(f(x).shape))
  rows = []
  for i in range(size):
    with tf.GradientTape(persistent=True) as outer:
      outer.watch(x)
      with tf.GradientTape() as inner:
        inner.watch(x)
        y = tf.reshape(f(x), [-1])[i]
      gradient = inner.gradient(y, x)
    rows.append(outer.jacobian(gradient, x, experimental_use_pfor=False))
  return np.reshape(np.stack(rows), f(x).shape + x.shape + x.shape)


def _assert_close(actual, expected, tol=TOL):
  actual, expected = np.asarray(actual), np.asarray(expected)
  assert actual.shape == expected.shape, f"shape {actual.shape} != expected {expected.shape}"
  scale = max(np.max(np.abs(expected)), 1e-6)
  np.testing.assert_allclose(actual / scale, expected / scale, atol=tol, rtol=0)


def _assert_no_fallback():
  assert vectorize.last_report().num_fallbacks == 0, vectorize.last_report().counts()


@pytest.mark.parametrize("model", MODELS)
def test_jacobian_equals_the_tape(model):
  f, x = MODELS[model]
  actual = tf.function(lambda x: jacobian(f(x), x))(x)
  _assert_no_fallback()
  _assert_close(actual, _tape_jacobian(f, x))


@pytest.mark.parametrize("model", MODELS)
def test_batch_jacobian_equals_the_tape(model):
  f, x = MODELS[model]
  actual = tf.function(lambda x: batch_jacobian(f(x), x))(x)
  _assert_no_fallback()
  _assert_close(actual, _tape_jacobian(f, x, batch=True))


def test_jacobian_without_pfor_equals_the_tape():
  f, x = MODELS["while_rnn"]
  actual = tf.function(lambda x: jacobian(f(x), x, use_pfor=False))(x)
  _assert_close(actual, _tape_jacobian(f, x))


def test_batch_jacobian_without_pfor_equals_the_tape():
  f, x = MODELS["mlp"]
  actual = tf.function(lambda x: batch_jacobian(f(x), x, use_pfor=False,
                                                parallel_iterations=2))(x)
  _assert_close(actual, _tape_jacobian(f, x, batch=True))


def test_jacobian_in_chunks_equals_the_tape():
  f, x = MODELS["mlp"]
  actual = tf.function(lambda x: jacobian(f(x), x, parallel_iterations=7))(x)
  _assert_no_fallback()
  _assert_close(actual, _tape_jacobian(f, x))


@pytest.mark.parametrize("use_pfor", [True, False], ids=["pfor", "while_loop"])
def test_jacobian_under_xla_equals_the_tape(use_pfor):
  f, x = MODELS["mlp"]
  actual = tf.function(lambda x: jacobian(f(x), x, use_pfor=use_pfor), jit_compile=True)(x)
  _assert_close(actual, _tape_jacobian(f, x))


def test_batch_jacobian_under_xla_equals_the_tape():
  f, x = MODELS["convnet"]
  actual = tf.function(lambda x: batch_jacobian(f(x), x), jit_compile=True)(x)
  _assert_close(actual, _tape_jacobian(f, x, batch=True))


def test_batch_jacobian_of_a_variable_equals_the_tape():
  w = tf.Variable(RNG.standard_normal([3, 4]), dtype=tf.float32)
  actual = tf.function(lambda: batch_jacobian(tf.tanh(w) * w[:, :1], w))()
  _assert_no_fallback()
  with tf.GradientTape(persistent=True) as tape:
    y = tf.tanh(w) * w[:, :1]
  _assert_close(actual, tape.batch_jacobian(y, w, experimental_use_pfor=False))


def test_batch_jacobian_with_unknown_batch_size_equals_the_tape():
  f, x = MODELS["mlp"]
  fn = tf.function(lambda x: batch_jacobian(f(x), x),
                   input_signature=[tf.TensorSpec([None, 16], tf.float32)])
  _assert_close(fn(x), _tape_jacobian(f, x, batch=True))


def test_jacobian_with_unknown_output_size_equals_the_tape():
  f, x = MODELS["mlp"]
  fn = tf.function(lambda x: jacobian(f(x), x),
                   input_signature=[tf.TensorSpec([None, 16], tf.float32)])
  _assert_close(fn(x), _tape_jacobian(f, x))


def test_jacobian_of_variables_and_unconnected_inputs():
  w = tf.Variable(RNG.standard_normal([4, 5]), dtype=tf.float32)
  x, z = _normal([3, 4]), _normal([2])

  @tf.function
  def fn(x, z):
    return jacobian(tf.tanh(tf.matmul(x, w)), {"x": x, "w": w, "z": z})

  actual = fn(x, z)
  _assert_no_fallback()
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(x)
    y = tf.tanh(tf.matmul(x, w))
  assert actual["z"] is None
  _assert_close(actual["x"], tape.jacobian(y, x, experimental_use_pfor=False))
  _assert_close(actual["w"], tape.jacobian(y, w, experimental_use_pfor=False))


@pytest.mark.parametrize("use_pfor", [True, False], ids=["pfor", "while_loop"])
def test_jacobian_with_no_gradient_path_is_none(use_pfor):
  fn = tf.function(lambda x, z: jacobian(tf.sin(x), [z, x], use_pfor=use_pfor))
  none, _ = fn(_normal([3]), _normal([2]))
  assert none is None
  assert tf.function(lambda x, z: jacobian(tf.sin(x), z, use_pfor=use_pfor))(
      _normal([3]), _normal([2])) is None


def test_batch_jacobian_with_no_gradient_path_is_none():
  assert tf.function(lambda x, z: batch_jacobian(tf.sin(x), z))(
      _normal([3, 2]), _normal([3, 4])) is None


def test_batch_jacobian_rejects_different_batch_sizes():
  with pytest.raises(ValueError, match="same batch size"):
    tf.function(lambda x, z: batch_jacobian(x * 2.0, z))(_normal([3, 2]), _normal([4, 2]))


def test_batch_jacobian_rejects_different_batch_sizes_at_run_time():
  spec = tf.TensorSpec([None, 2], tf.float32)
  fn = tf.function(lambda x, z: batch_jacobian(x * tf.reduce_sum(z), z),
                   input_signature=[spec, spec])
  with pytest.raises(tf.errors.InvalidArgumentError, match="same batch size"):
    fn(_normal([3, 2]), _normal([4, 2]))


def test_batch_jacobian_rejects_scalars():
  with pytest.raises(ValueError, match="batch axis"):
    tf.function(lambda x: batch_jacobian(tf.reduce_sum(x), x))(_normal([3]))


def test_jacobian_eagerly_raises():
  with pytest.raises(RuntimeError, match="jacobian_fn"):
    jacobian(_normal([3]), _normal([3]))


def test_jacobian_fn_equals_the_tape_and_does_not_retrace():
  calls = []

  def f(x):
    calls.append(1)
    return _lstm10(x)

  g = jacobian_fn(f)
  for _ in range(3):
    x = _normal([2, 10, 3])
    _assert_close(g(x), _tape_jacobian(_lstm10, x))
  _assert_no_fallback()
  jacobian_fn(f)(x)    # a new g for the same f: the same cached function
  assert len(calls) == 1


def test_batch_jacobian_fn_equals_the_tape_and_does_not_retrace():
  calls = []

  def f(x):
    calls.append(1)
    return _convnet(x)

  g = batch_jacobian_fn(f)
  for _ in range(2):
    x = _normal([2, 8, 8, 1])
    _assert_close(g(x), _tape_jacobian(_convnet, x, batch=True))
  assert len(calls) == 1


def test_jacobian_fn_of_a_while_loop_over_a_structure():
  length = tf.constant(4)

  def f(inputs):
    params = dict(LSTM_PARAMS, kernel=inputs["kernel"])
    return models.lstm_dynamic_final_state(params, inputs["sequence"], length)

  inputs = {"sequence": _normal([6, 3]), "kernel": LSTM_PARAMS["kernel"]}
  actual = jacobian_fn(f)(inputs)
  _assert_no_fallback()
  for name, x in inputs.items():
    def f_of_one(x, name=name):
      return f(dict(inputs, **{name: x}))
    _assert_close(actual[name], _tape_jacobian(f_of_one, x))


def test_hessian_of_a_scalar():
  x = _normal([4])
  actual = hessian(lambda x: tf.reduce_sum(tf.sin(x) * x[0]), x)
  _assert_close(actual, _nested_hessian(lambda x: tf.reduce_sum(tf.sin(x) * x[0]), x))


def test_hessian_of_a_non_scalar_output_equals_the_nested_loop():
  params = models.mlp_params(sizes=(4, 5, 3))

  def f(x):
    return models.mlp_logits(params, x)

  x = _normal([2, 4])
  actual = hessian(f, x)
  _assert_no_fallback()
  assert actual.shape == [2, 3, 2, 4, 2, 4]
  _assert_close(actual, _nested_hessian(f, x))


def test_hessian_through_a_cond_equals_the_nested_loop():
  def f(x):
    return tf.cond(tf.reduce_sum(x) > 0.0, lambda: tf.sin(x) * x[0], lambda: x ** 3)

  for x in (tf.constant([1.0, 0.5, -0.2]), tf.constant([-1.0, 0.5, -0.2])):
    _assert_close(hessian(f, x), _nested_hessian(f, x))
    _assert_no_fallback()


def test_hessian_over_a_structure():
  def f(inputs):
    return inputs["a"] * tf.reduce_sum(inputs["b"] ** 2)

  inputs = {"a": _normal([2]), "b": _normal([3])}
  actual = hessian(f, inputs)
  for row in inputs:
    for column in inputs:
      with tf.GradientTape(persistent=True) as outer:
        outer.watch(inputs[column])
        with tf.GradientTape(persistent=True) as inner:
          inner.watch(inputs[row])
          y = f(inputs)
        first = inner.jacobian(y, inputs[row], experimental_use_pfor=False)
      expected = outer.jacobian(first, inputs[column], experimental_use_pfor=False)
      if expected is None:
        assert actual[row][column] is None
      else:
        _assert_close(actual[row][column], expected)


def test_hessian_does_not_retrace():
  calls = []

  def f(x):
    calls.append(1)
    return x ** 3

  for _ in range(3):
    hessian(f, _normal([3]))
  assert len(calls) == 1


def test_hessian_through_a_while_loop_equals_the_nested_loop():
  params = models.lstm_params(input_size=2, state_size=3)

  def f(x):
    return models.lstm_dynamic_final_state(params, x, tf.constant(3))

  x = _normal([4, 2])
  actual = hessian(f, x)
  _assert_no_fallback()
  _assert_close(actual, _nested_hessian(f, x))
