"""While loops inside the body: invariant and per-iteration trip counts, maximum_iterations,
nested loops, conds inside loops and loops inside conds, gradients, and the static-shape
(XLA) form."""

import functools

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

RNG = np.random.default_rng(4)
X = tf.constant(RNG.standard_normal([6, 3]), tf.float32)
TRIPS = tf.constant([3, 0, 5, 1, 2, 4])
MODES = ["function", "dynamic", "eager", "xla"]
_check = functools.partial(testing.check_against_loop, n=6)


@pytest.mark.parametrize("mode", MODES)
def test_invariant_condition(mode):
  def body(i):
    x = tf.gather(X, i)
    return tf.while_loop(lambda t, y: t < 4, lambda t, y: (t + 1, y * 0.5 + 1.0), (0, x))[1]
  _check(body, mode=mode)


@pytest.mark.unchecked
def test_invariant_condition_runs_no_per_iteration_bookkeeping():
  def body(i):
    x = tf.gather(X, i)
    return tf.while_loop(lambda t, y: t < 4, lambda t, y: (t + 1, y * 0.5), (0, x))[1]
  graph = tf.function(lambda: vectorize.pfor(body, 6, fallback_to_while_loop=False)
                      ).get_concrete_function().graph
  types = testing.all_op_types(graph)
  for bookkeeping in ("TensorScatterUpdate", "Where", "SelectV2", "DynamicPartition"):
    assert bookkeeping not in types


@pytest.mark.parametrize("mode", MODES)
def test_per_iteration_trip_count_including_zero_trips(mode):
  def body(i):
    x = tf.gather(X, i)
    limit = tf.gather(TRIPS, i)
    return tf.while_loop(lambda t, y: t < limit, lambda t, y: (t + 1, y * 2.0 + 1.0), (0, x))
  _check(body, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_trip_count_depends_on_the_loop_index(mode):
  def body(i):
    return tf.while_loop(lambda t, s: t < i, lambda t, s: (t + 1, s + tf.cast(t, tf.float32)),
                         (0, 0.0))[1]
  _check(body, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_maximum_iterations(mode):
  def body(i):
    x = tf.gather(X, i)
    limit = tf.gather(TRIPS, i)
    return tf.while_loop(lambda t, y: t < limit, lambda t, y: (t + 1, y + 1.0), (0, x),
                         maximum_iterations=2)
  _check(body, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_data_dependent_termination(mode):
  def body(i):
    x = tf.abs(tf.gather(X, i)) + 0.1
    return tf.while_loop(lambda y: tf.reduce_sum(y) < 20.0, lambda y: (y * 1.5,), (x,))[0]
  _check(body, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_nested_loops_with_per_iteration_trip_counts(mode):
  def body(i):
    outer = tf.gather(TRIPS, i)

    def outer_body(t, total):
      inner = tf.while_loop(lambda s, acc: s < t + i % 2, lambda s, acc: (s + 1, acc + 1.0),
                            (0, 0.0))[1]
      return t + 1, total + inner

    return tf.while_loop(lambda t, total: t < outer, outer_body, (0, 0.0))[1]
  _check(body, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_cond_inside_a_loop(mode):
  def body(i):
    limit = tf.gather(TRIPS, i)

    def loop_body(t, y):
      y = tf.cond(t % 2 == 0, lambda: y * 2.0, lambda: y - 1.0)
      return t + 1, y

    return tf.while_loop(lambda t, y: t < limit, loop_body, (0, tf.gather(X, i)))[1]
  _check(body, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_loop_inside_a_cond(mode):
  def body(i):
    x = tf.gather(X, i)
    return tf.cond(x[0] > 0,
                   lambda: tf.while_loop(lambda t, y: t < i, lambda t, y: (t + 1, y * 2.0),
                                         (0, x))[1],
                   lambda: x)
  _check(body, mode=mode)


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_zero_iterations(mode):
  def body(i):
    limit = tf.gather(TRIPS, i)
    return tf.while_loop(lambda t, y: t < limit, lambda t, y: (t + 1, y + 1.0), (0, 1.0))[1]
  _check(body, n=0, mode=mode)


@pytest.mark.parametrize("static_shapes", [False, True])
def test_gradient_outside_through_a_converted_loop(static_shapes):
  x = tf.Variable(X)

  def body(i):
    limit = tf.gather(TRIPS, i)
    return tf.reduce_sum(tf.while_loop(lambda t, y: t < limit,
                                       lambda t, y: (t + 1, tf.sin(y) * 1.5),
                                       (0, tf.gather(x, i)))[1])

  with vectorize.static_shapes(static_shapes):
    with tf.GradientTape() as tape:
      out = tf.reduce_sum(vectorize.pfor(body, 6, fallback_to_while_loop=False))
  grad = tf.convert_to_tensor(tape.gradient(out, x))
  with tf.GradientTape() as tape:
    looped = tf.reduce_sum(tf.stack([body(tf.constant(i)) for i in range(6)]))
  np.testing.assert_allclose(out, looped, rtol=1e-5)
  np.testing.assert_allclose(grad, tf.convert_to_tensor(tape.gradient(looped, x)), rtol=1e-5,
                             atol=1e-6)


def test_static_shapes_leak_no_junk_past_a_lane_end():
  """After a lane stops, the body would take log of a negative number: no NaN may leak."""
  start = tf.Variable([3.0, 1.5, 8.0, 2.5])

  def body(i):
    def loop_body(y):
      return (tf.math.log(y) + 0.5,)
    return tf.while_loop(lambda y: y > 1.0, loop_body, (tf.gather(start, i),),
                         maximum_iterations=20)[0]   # XLA differentiates bounded loops only

  @tf.function(jit_compile=True)
  def vectorized():
    with tf.GradientTape() as tape:
      out = vectorize.pfor(body, 4, fallback_to_while_loop=False)
      total = tf.reduce_sum(out)
    return out, tf.convert_to_tensor(tape.gradient(total, start))

  out, grad = vectorized()
  with tf.GradientTape() as tape:
    looped = tf.stack([body(tf.constant(i)) for i in range(4)])
    total = tf.reduce_sum(looped)
  assert np.all(np.isfinite(out)) and np.all(np.isfinite(grad))
  np.testing.assert_allclose(out, looped, rtol=1e-6)
  np.testing.assert_allclose(grad, tf.convert_to_tensor(tape.gradient(total, start)), rtol=1e-5)


# ----------------------------------------------------------------------------- TensorArrays

@pytest.mark.parametrize("mode", MODES)
def test_tensor_array_outside_loops(mode):
  def body(i):
    x = tf.gather(X, i)
    ta = tf.TensorArray(tf.float32, size=3)
    for k in range(3):
      ta = ta.write(k, x * float(k))
    return ta.stack(), ta.read(1)
  _check(body, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_tensor_array_accumulator_with_invariant_trip_count(mode):
  def body(i):
    x = tf.gather(X, i)

    def loop_body(t, y, ta):
      y = tf.tanh(y * 1.5)
      return t + 1, y, ta.write(t, y)

    ta = tf.TensorArray(tf.float32, size=4)
    return tf.while_loop(lambda t, y, ta: t < 4, loop_body, (0, x, ta))[2].stack()
  _check(body, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_tensor_array_accumulator_with_per_iteration_trip_count(mode):
  """Each iteration writes its own number of entries into a fixed-size array."""
  def body(i):
    x = tf.gather(X, i)
    limit = tf.gather(TRIPS, i)

    def loop_body(t, y, ta):
      y = y * 0.5 + 1.0
      return t + 1, y, ta.write(t, y)

    ta = tf.TensorArray(tf.float32, size=5, element_shape=[3])
    return tf.while_loop(lambda t, y, ta: t < limit, loop_body, (0, x, ta))[2].stack()
  _check(body, mode=mode)


def _dynamic_rnn_gradient(inputs, lengths, w):
  """Per-example: d/dw of a tanh RNN run for the example's own number of steps."""
  def body(i):
    xs = tf.gather(inputs, i)
    length = tf.gather(lengths, i)
    with tf.GradientTape() as tape:
      tape.watch(w)

      def step(t, h):
        return t + 1, tf.tanh(tf.linalg.matvec(w, h) + xs[t])

      h = tf.while_loop(lambda t, h: t < length, step, (0, tf.zeros([3])),
                        maximum_iterations=inputs.shape[1])[1]
      loss = tf.reduce_sum(h * h)
    return tape.gradient(loss, w, unconnected_gradients=tf.UnconnectedGradients.ZERO)
  return body


@pytest.mark.parametrize("mode", MODES)
def test_gradient_inside_the_body_through_a_loop_with_per_iteration_lengths(mode):
  inputs = tf.constant(RNG.standard_normal([6, 5, 3]), tf.float32)
  w = tf.constant(RNG.standard_normal([3, 3]) * 0.5, tf.float32)
  _check(_dynamic_rnn_gradient(inputs, TRIPS, w), mode=mode, tol=1e-5)
