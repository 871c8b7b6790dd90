"""Fuzz findings with image ops whose fix belongs to other files (converters/image.py, the
while loop): strict xfails until fixed; the fix makes them pass, then remove the mark."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize

X = tf.constant([0.5, -1.0, 2.0, 0.3])
TRIPS = tf.constant([1, 3, 0, 2])
W = tf.constant(np.random.default_rng(0).standard_normal([2, 2, 3]), tf.float32)


def _make_body(x):
  def body(i):
    def step(j, c):
      unrelated = tf.image.adjust_saturation(tf.abs(W), 0.5)   # not connected to x
      return j + 1, tf.tanh(c) + tf.reduce_mean(unrelated)
    return tf.while_loop(lambda j, c: j < TRIPS[i], step, (0, x[i]), maximum_iterations=5)[1]
  return body


@pytest.mark.xfail(strict=True, raises=LookupError, reason="converters/image.py or the while "
                   "loop: pfor's loop keeps the invariant AdjustSaturation inside its body, and "
                   "TF's while gradient then asks AdjustSaturation (no registered gradient) "
                   "for one; the loop traced in a graph does not. A differentiable form, or "
                   "hoisting invariant ops out of the loop, would fix it")
def test_gradient_of_a_loop_with_an_unconnected_adjust_saturation():
  """Fuzz seed 1002173, shrunk."""
  @tf.function(autograph=False)
  def pfor_grad(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      total = tf.reduce_sum(vectorize.pfor(_make_body(x), 4, fallback_to_while_loop=False))
    return tape.gradient(total, x)

  @tf.function(autograph=False)
  def loop_grad(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      body = _make_body(x)
      total = tf.reduce_sum(tf.stack([body(tf.constant(i)) for i in range(4)]))
    return tape.gradient(total, x)

  np.testing.assert_allclose(pfor_grad(X), loop_grad(X), rtol=1e-5)
