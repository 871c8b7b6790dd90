"""A conditional's intermediates passed to its gradient as Optionals (TensorFlow's rewrite
of a tf.cond in a tf.function that a tape differentiated eagerly), held per iteration as
their values: per-example gradients through such a function equal the loop's."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize

X = tf.constant(np.random.default_rng(0).standard_normal([5, 3]), tf.float32)
W0 = np.random.default_rng(1).standard_normal([3, 2]).astype(np.float32)


def _differentiated_model(kind):
  """A tf.function model with a per-example conditional, differentiated once eagerly (an
  ordinary training step), so that its conditional outputs Optionals."""
  w = tf.Variable(W0)
  b = tf.Variable(tf.zeros([2]))

  @tf.function
  def model(x):
    h = tf.matmul(x, w) + b
    if kind == "cond":
      return tf.cond(tf.reduce_sum(h) > 0, lambda: tf.tanh(h), lambda: tf.nn.softplus(h) * h)
    index = tf.cast(tf.reduce_sum(h) > 0, tf.int32) + tf.cast(tf.reduce_sum(h) > 1, tf.int32)
    return tf.switch_case(index, [lambda: tf.tanh(h), lambda: h ** 2,
                                  lambda: tf.reduce_max(h, 1, keepdims=True) * h])

  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(model(X) ** 2)
  tape.gradient(loss, [w, b])
  return model, [w, b]


def _loop_gradients(loss_fn, variables, x):
  grads = []
  for i in range(x.shape[0]):
    with tf.GradientTape() as tape:
      loss = loss_fn(x[i])
    grads.append(tape.gradient(loss, variables))
  return [tf.stack(g) for g in zip(*grads)]


@pytest.mark.parametrize("kind", ["cond", "switch_case"])
@pytest.mark.parametrize("mode", ["eager", "function", "xla", "runtime_batch"])
def test_per_example_gradients_through_a_differentiated_function(kind, mode):
  model, variables = _differentiated_model(kind)
  loss_fn = lambda r: tf.reduce_sum(model(r[None]) ** 2)
  run = lambda x: vectorize.per_example_gradients(loss_fn, variables, x,
                                                  fallback_to_while_loop=False)
  if mode == "function":
    run = tf.function(run)
  elif mode == "xla":
    run = tf.function(run, jit_compile=True)
  elif mode == "runtime_batch":
    run = tf.function(run, input_signature=[tf.TensorSpec([None, 3])])
  want = _loop_gradients(loss_fn, variables, X)
  for g, w in zip(run(X), want):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
  if mode in ("eager", "runtime_batch"):
    assert [g.shape for g in run(X[:0])] == [[0, 3, 2], [0, 2]]


def test_pfor_of_a_tape_through_a_differentiated_function():
  """The gradient in the body (a stacked predicate: both branches' lanes), with an outer
  tape through pfor (second order, the loop's too)."""
  model, (w, b) = _differentiated_model("cond")

  def body(i):
    with tf.GradientTape() as tape:
      tape.watch(w)
      out = tf.reduce_sum(model(X[i][None]) ** 2)
    return tape.gradient(out, w)

  want = tf.stack([body(tf.constant(i)) for i in range(5)])
  np.testing.assert_allclose(vectorize.pfor(body, 5, fallback_to_while_loop=False), want,
                          rtol=1e-5, atol=1e-5)
  with tf.GradientTape() as outer:
    total = tf.reduce_sum(vectorize.pfor(body, 5, fallback_to_while_loop=False))
  with tf.GradientTape() as outer_loop:
    total_loop = tf.reduce_sum(tf.stack([body(tf.constant(i)) for i in range(5)]))
  np.testing.assert_allclose(outer.gradient(total, b), outer_loop.gradient(total_loop, b),
                          rtol=1e-4, atol=1e-5)
