"""Gradients through converters built on the core's loop-axis toolkit (ids moved per
iteration, sizes taken over the iterations, per-iteration indices), for n known at trace
time, n known only at run time (0 included) and under XLA, against the loop."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize

RNG = np.random.default_rng(0)
X = tf.constant(RNG.standard_normal([3, 4]), tf.float32)
IDS = tf.constant([[0, 2, 2, 1], [1, 1, 0, 0], [2, 0, 1, 2]])
PERMUTATIONS = tf.constant([[3, 2, 1, 0], [0, 1, 2, 3], [1, 0, 3, 2]])
STARTS = tf.constant([0, 2, 1])
LENGTH = tf.constant(2)   # a captured tensor: the slice length is unknown while tracing


def _segment_sum(w, i):
  return tf.math.unsorted_segment_sum(X[i] * w, IDS[i], 3)


def _stitch(w, i):
  return tf.dynamic_stitch([PERMUTATIONS[i]], [X[i] * w])


def _slice_of_run_time_length(w, i):
  return tf.slice(X[i] * w, [STARTS[i]], [LENGTH])


def _tensor_array_at_run_time_positions(w, i):
  return tf.TensorArray(tf.float32, size=3).write(STARTS[i], X[i] * w).stack()


BODIES = [_segment_sum, _stitch, _slice_of_run_time_length, _tensor_array_at_run_time_positions]


def _loop_and_pfor_gradients(body, n, mode):
  """(loop gradient, pfor gradient) of the sum of squares of the outputs w.r.t. `w`."""
  w0 = tf.constant(RNG.standard_normal([4]), tf.float32)

  def gradient(use_pfor, m):
    with tf.GradientTape() as tape:
      tape.watch(w0)
      if use_pfor:
        out = vectorize.pfor(lambda i: body(w0, i), m, fallback_to_while_loop=False)
      else:
        out = tf.stack([body(w0, tf.constant(k)) for k in range(n)]) if n else tf.zeros([0])
      loss = tf.reduce_sum(out * out)
    return tape.gradient(loss, w0)

  expected = gradient(False, n)
  if mode == "static":
    actual = tf.function(lambda: gradient(True, n), autograph=False)()
  elif mode == "run_time":
    actual = tf.function(lambda m: gradient(True, m), autograph=False,
                         input_signature=[tf.TensorSpec([], tf.int32)])(tf.constant(n))
  else:
    actual = tf.function(lambda: gradient(True, n), autograph=False, jit_compile=True)()
  return expected, actual


@pytest.mark.parametrize("body", BODIES, ids=lambda b: b.__name__.strip("_"))
@pytest.mark.parametrize("n,mode", [(3, "static"), (0, "static"), (3, "run_time"),
                                    (0, "run_time"), (3, "xla")])
def test_gradient_equals_the_loop(body, n, mode):
  expected, actual = _loop_and_pfor_gradients(body, n, mode)
  expected = np.zeros([4], np.float32) if expected is None else expected
  np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)
