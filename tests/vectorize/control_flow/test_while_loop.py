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


# A [4, 3] input, the fuzz programs' size.
SMALL_X = tf.constant(np.random.default_rng(9).standard_normal([4, 3]), tf.float32)


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])
def test_while_loop_carrying_a_zero_size_value(mode):
  """Fuzz seed 3177, shrunk: a per-iteration trip count, a `[3, 0]` loop variable."""
  def body(i):
    return tf.while_loop(lambda j, c: j < i, lambda j, c: (j + 1, c + 1.),
                         (0, tf.zeros([3, 0])), maximum_iterations=5)[1]
  testing.check_against_loop(body, 3, mode=mode)


V_INT = tf.Variable(2)


def test_loop_under_a_tape_reading_an_int_variable_inside_a_gradient():
  """Fuzz seeds 3052, 3924, 4207, shrunk: the gradient through pfor of a body whose tape
  records a while loop that reads an int variable (the loop is stateful)."""
  def make_body(x):
    def body(i):
      xi = x[-1 - i]
      with tf.GradientTape() as tape:
        tape.watch(xi)
        def step(j, c):
          V_INT.read_value()
          return j + 1, tf.tanh(c)
        _, y = tf.while_loop(lambda j, c: j < 1, step, (0, xi))
        loss = tf.reduce_sum(tf.square(y))
      tape.gradient(loss, xi)
      return tf.zeros([3])
    return body

  @tf.function(autograph=False)
  def grad(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      out = vectorize.pfor(make_body(x), 2, fallback_to_while_loop=False)
      loss = tf.reduce_sum(out)
    return tape.gradient(loss, x, unconnected_gradients="zero")

  np.testing.assert_array_equal(grad(SMALL_X), np.zeros([4, 3], np.float32))


X4 = tf.constant(np.random.default_rng(9).standard_normal([4, 2, 4]), tf.float32)


V24 = tf.Variable(tf.ones([2, 4]))


def test_loop_with_a_tensor_array_in_a_switch_case_at_n0():
  """Fuzz seed 3477, shrunk: a per-iteration loop writing a TensorArray and carrying a
  variable's value, inside a switch_case with an invariant index, at n = 0."""
  def body(i):
    xi = X4[i]

    def loop():
      def step(j, c, ta):
        return j + 1, tf.convert_to_tensor(V24), ta.write(j, tf.zeros([1]))
      return tf.while_loop(lambda j, c, ta: j < i, step,
                           (0, xi, tf.TensorArray(tf.float32, 5, element_shape=[1])),
                           maximum_iterations=5)[1]
    return tf.switch_case(tf.constant(0), [loop, lambda: xi])
  testing.check_against_loop(body, 0)


X6 = tf.constant(np.random.default_rng(9).standard_normal([4, 2, 4]), tf.float32)


TRIPS6 = tf.constant([2, 0, 3, 1])


INDEX6 = tf.constant(1)   # captured: known only at run time


def _switch_case_in_a_per_iteration_loop(index):
  def make_body(x):
    def body(i):
      xi = x[i]

      def step(j, c):
        return j + 1, tf.switch_case(index(), [lambda: xi, lambda: xi])
      return tf.while_loop(lambda j, c: j < TRIPS6[i], step, (0, xi))[1]
    return body
  return make_body


def test_gradient_through_pfor_of_a_switch_case_in_a_per_iteration_loop():
  """Fuzz seed 100018, shrunk: the Case emitted for `switch_case(tf.constant(1), ...)` in a
  per-iteration loop made TF's Case gradient assert (cond_v2._resolve_grad_inputs); a
  branch index known at trace time now picks its branch with no Case."""
  testing.check_gradient_against_loop(
      _switch_case_in_a_per_iteration_loop(lambda: tf.constant(1)), X6, 3)


def test_gradient_through_pfor_of_a_switch_case_with_a_run_time_index_in_a_loop():
  """Fuzz seeds 100018, 1220092 (the index is floormod of a captured input). The loop's
  active set gathers the Case's output, and TF's gradient of a gather from a conditional
  inside a while loop asserts where the shape is unknown (cond_v2._resolve_grad_inputs; plain
  TF code with a [None, 3] loop variable fails the same way): the output is reshaped to its
  own shape, which makes that gradient dense (cond.py `_dense_gradient`)."""
  testing.check_gradient_against_loop(_switch_case_in_a_per_iteration_loop(lambda: INDEX6),
                                      X6, 3)


def test_gradient_through_pfor_of_a_cond_with_a_run_time_predicate_in_a_loop():
  """The same for tf.cond (an If): its output gathered by the loop's active set."""
  def make_body(x):
    def body(i):
      xi = x[i]

      def step(j, c):
        return j + 1, tf.cond(INDEX6 > 0, lambda: c * 2.0, lambda: c * 3.0)
      return tf.while_loop(lambda j, c: j < TRIPS6[i], step, (0, xi))[1]
    return body
  testing.check_gradient_against_loop(make_body, X6, 3)


X7 = tf.constant(np.random.default_rng(9).standard_normal([4, 2]), tf.float32)


@pytest.mark.xfail(strict=True, raises=vectorize.ConversionError, reason="control_flow/"
                   "while_loop.py: a dynamic-size TensorArray of size 0 entering a loop with "
                   "a static maximum_iterations could be padded to that capacity "
                   "(lists.pad_capacity) under XLA; today every write is refused as having "
                   "no room (XLA's own loop drops them)")
def test_dynamic_size_array_in_a_bounded_loop_under_xla():
  """The no-room kind of the fuzzer (17 of 25 failures in the last run) where the loop has
  a compile-time bound: vectorize could give the right answer where XLA's own loop cannot."""
  def body(i):
    def step(j, array):
      return j + 1, array.write(j, X7[i] * tf.cast(j, tf.float32))
    _, array = tf.while_loop(
        lambda j, _: j < tf.math.floormod(i, 3) + 1, step,
        (0, tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[2])),
        maximum_iterations=3)
    return tf.reduce_sum(array.concat(), 0)
  testing.check_against_loop(body, 3, mode="xla")


@pytest.mark.parametrize("trips", ["invariant", "per_iteration"])
@pytest.mark.parametrize("mode", ["xla", "function"])
def test_array_written_in_a_loop_and_never_read(trips, mode):
  """Fuzz seeds 110019 and 1000637 (ten seeds of the kind), shrunk: a dynamic-size
  TensorArray written in a loop and never read. Under XLA the writes were refused (no
  room), where XLA's own loop leaves the unread array out; now the loop does too."""
  def body(i):
    limit = 3 if trips == "invariant" else tf.math.floormod(i, 3) + 1

    def step(j, c, array):
      return j + 1, tf.tanh(c), array.write(j, c)
    _, c, array = tf.while_loop(
        lambda j, c, array: j < limit, step,
        (0, X7[i], tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[2])))
    tf.reduce_sum(array.stack(), 0)   # unused, as XLA prunes it
    return c
  testing.check_against_loop(body, 3, mode=mode)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_per_iteration_cond_in_a_loop_with_per_iteration_trips(mode):
  """Fuzz seeds 1000903 and 1001433, shrunk: a conditional on the loop index inside a
  loop whose trip count differs per iteration failed in Grappler's constant folding ('data.
  shape must start with partitions.shape': the loop's live count kept its entry value)."""
  def body(i):
    def step(j, c):
      extra = tf.cond(tf.equal(tf.math.floormod(i, 2), 0),
                      lambda: tf.reduce_sum(c) * 2., lambda: tf.reduce_sum(c))
      return j + 1, c + extra
    return tf.while_loop(lambda j, c: j < i, step, (0, X7[i]), maximum_iterations=5)[1]
  testing.check_against_loop(body, 4, mode=mode)


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])
def test_invariant_inner_loop_tiling_an_invariant_into_a_per_iteration_variable(mode):
  """Fuzz seed 1220150, shrunk: an inner loop whose condition is the same in every
  iteration carries a per-iteration scalar that its body replaces by an invariant; tiled by
  the run-time n, it lost the static loop length its shape invariant names ('enters the loop
  with shape (1,), but has shape (None,) after one iteration')."""
  def body(i):
    def step(j, c, d):
      def inner(k, e, f):
        return k + 1, e, tf.reduce_mean(tf.zeros([0]))
      _, _, out = tf.while_loop(lambda k, e, f: k < tf.maximum(tf.math.floormod(j, 4), 1),
                                inner, (0, tf.zeros([0]), c), maximum_iterations=5)
      return j + 1, out, out
    return tf.while_loop(lambda j, c, d: j < 0, step, (0, SMALL_X[i, 0], SMALL_X[i, 1]))[2]
  testing.check_against_loop(body, 1, mode=mode)
