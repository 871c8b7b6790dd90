"""Gradients through pfor's outputs, taken outside it: of ops whose gradient is a Python
function of the body's tensors (`tf.custom_gradient`), and of nested `tf.function`s whose
result is loop-invariant. Each is compared with the gradient of the sequential loop."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize

RNG = np.random.default_rng(11)
MODES = ["eager", "function", "dynamic", "xla"]


def _gradients_of_pfor(body, sources, n, mode):
  """d sum(pfor(body, n) * weights) / d sources, in `mode` (fallback off)."""

  def grads(m):
    with tf.GradientTape() as tape:
      y = vectorize.pfor(body, m, fallback_to_while_loop=False)
      loss = tf.reduce_sum(y * _weights(y))
    return tape.gradient(loss, sources)

  if mode == "eager":
    out = grads(n)
  elif mode == "dynamic":
    out = tf.function(grads, input_signature=[tf.TensorSpec([], tf.int32)])(tf.constant(n))
  else:
    out = tf.function(lambda: grads(n), jit_compile=(mode == "xla"))()
  return [np.asarray(tf.convert_to_tensor(g)) for g in out]


def _gradients_of_loop(body, sources, n):
  with tf.GradientTape() as tape:
    outs = [body(tf.constant(i)) for i in range(n)]
    y = tf.stack(outs) if outs else None
    loss = tf.reduce_sum(y * _weights(y)) if outs else tf.constant(0.)
  grads = tape.gradient(loss, sources, unconnected_gradients="zero")
  return [np.asarray(tf.convert_to_tensor(g)) for g in grads]


def _weights(y):
  """Distinct per-element cotangents, so that a mixed-up iteration shows."""
  return tf.reshape(tf.cast(tf.range(tf.size(y)), y.dtype) * 0.1 + 1., tf.shape(y))


def _check(body, sources, n=3, mode="function"):
  actual = _gradients_of_pfor(body, sources, n, mode)
  expected = _gradients_of_loop(body, sources, n)
  for a, e in zip(actual, expected):
    np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)


X = tf.Variable(RNG.standard_normal([3, 4]), dtype=tf.float32)
W = tf.Variable(RNG.standard_normal([4]), dtype=tf.float32)


@tf.custom_gradient
def _straight_through_round(x):
  """Rounds; its gradient is the identity (the forward ops' own gradient is zero)."""
  return tf.round(x), lambda dy: dy


@tf.custom_gradient
def _scaled_square(x, s):
  """x**2 * s with a hand-written gradient for both inputs."""
  def grad(dy):
    return dy * 2. * x * s, tf.reduce_sum(dy * x * x)
  return x * x * s, grad


@tf.custom_gradient
def _identity_scaled_by_a_side_value(x):
  """x, with a gradient scaled by an intermediate the output does not depend on (as
  `tf.nn.ctc_loss`'s dense form keeps its gradient beside its loss)."""
  side = tf.sin(x) * 3. + 1.
  return tf.identity(x), lambda dy: dy * side


# ----------------------------------------------------------------------------- custom gradients

@pytest.mark.parametrize("mode", MODES)
def test_silu_custom_gradient(mode):
  _check(lambda i: tf.nn.silu(X[i]), [X], mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_custom_gradient_is_used_not_the_forward_ops(mode):
  _check(lambda i: _straight_through_round(X[i] * 3.), [X], mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_custom_gradient_reading_a_value_the_output_does_not_need(mode):
  """The gradient closes over `side`, which no output of the body needs: converted too
  (it was a ConversionError asking the user to compute it on the way to the result)."""
  _check(lambda i: _identity_scaled_by_a_side_value(X[i]), [X], mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_custom_gradient_with_stacked_and_invariant_inputs(mode):
  _check(lambda i: _scaled_square(X[i], W[1]), [X, W], mode=mode)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_loop_invariant_custom_gradient(mode):
  _check(lambda i: _straight_through_round(W * 3.) * X[i], [X, W], mode=mode)


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
def test_custom_gradient_inside_a_per_iteration_cond(mode):
  def body(i):
    return tf.cond(X[i, 0] > 0., lambda: tf.nn.silu(X[i]), lambda: _straight_through_round(X[i]))
  _check(body, [X], mode=mode)


@pytest.mark.parametrize("mode", ["eager", "dynamic"])
def test_custom_gradient_with_no_iteration(mode):
  _check(lambda i: tf.nn.silu(X[i]), [X], n=0, mode=mode)


# ----------------------------------------------------------------------------- nested functions

@tf.function
def _nested(v):
  return tf.sin(v) * 2.


@pytest.mark.parametrize("mode", MODES)
def test_nested_function_with_loop_invariant_result(mode):
  _check(lambda i: _nested(W * 1.) + X[i], [X, W], mode=mode)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_nested_function_is_the_whole_loop_invariant_output(mode):
  _check(lambda i: _nested(W * 1.), [W], mode=mode)
