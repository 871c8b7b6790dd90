"""The whole body as a sequential loop (vectorize/whole_body_loop.py), checked against the
loop of `body(i)` calls."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

V = tf.Variable(0)


def _doubling_body(i):
  """A variable assigned in a loop that only some iterations run (so the whole body runs as
  a sequential loop) and, in another loop, `c + tf.reduce_sum(c)`: a reduction over no
  axes, which Grappler rewrote into a dead value inside a lowered loop (fuzz seed 3100017,
  shrunk)."""
  def write(j, c):
    V.assign(c, read_value=False)
    return j + 1, c
  tf.while_loop(lambda j, c: j < i, write, (0, i))

  def double(j, c):
    return j + 1, c + tf.reduce_sum(c)
  return tf.while_loop(lambda j, c: j < 2, double, (0, i + 1))[1]


@pytest.mark.parametrize("mode", testing.MODES)
@pytest.mark.parametrize("n", [0, 3])
def test_body_survives_grappler(mode, n):
  """The sequential loop is emitted unlowered: lowered, the function returned an empty
  float32 tensor of shape (0,) for every output, the loop's and the others'."""
  expected = testing.sequential(_doubling_body, n, testing.output_spec(_doubling_body))
  final_state = V.numpy()
  V.assign(-1)
  got = testing.run_pfor(_doubling_body, n, mode=mode, fallback=True)
  testing.assert_allclose(got, expected)
  if n:
    assert V.numpy() == final_state


def test_body_survives_grappler_in_the_gradient():
  """Fuzz seed 3100017's mode: a gradient taken beside the loop (the loss reads no float
  output, so it is zeros of x's shape); the whole function's outputs were shape (0,)."""
  x = tf.constant(np.ones([4, 2], np.float32))

  @tf.function(autograph=False)
  def grad(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      out = vectorize.pfor(_doubling_body, 3, fallback_to_while_loop=True)
      loss = tf.reduce_sum(tf.cast(out, tf.float32)) * 0.0 + tf.reduce_sum(x[0])
    return tape.gradient(loss, x), out

  gradient, out = grad(x)
  expected = np.zeros([4, 2], np.float32)
  expected[0] = 1.0
  np.testing.assert_array_equal(gradient, expected)
  np.testing.assert_array_equal(out, testing.sequential(_doubling_body, 3))
