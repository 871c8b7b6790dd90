"""Failures the fuzzer (tests/fuzz) found whose root cause is in the engine or control flow,
each shrunk to a minimal body. A strict xfail marks a bug not fixed yet: the fix makes the
test pass and strict xfail then fails, so remove the mark with the fix.
"""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

X = tf.constant(np.random.default_rng(9).standard_normal([4, 3]), tf.float32)


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

  np.testing.assert_array_equal(grad(X), np.zeros([4, 3], np.float32))


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


X5 = tf.constant(np.random.default_rng(9).standard_normal([4, 4, 5, 2]), tf.float32)
V5 = tf.Variable(np.random.default_rng(9).standard_normal([4, 2, 2, 2, 3]), dtype=tf.float32)


@pytest.mark.parametrize("mode", ["eager", "function", "xla", "dynamic"])
@pytest.mark.parametrize("n", [1, 4])
def test_cond_under_a_tape_with_an_intermediate_of_unknown_dim(n, mode):
  """Fuzz seed 4044, shrunk: the untaken branch's stand-in for an intermediate of unknown
  dims (TF gives them as 0, `[0, 4, 5, 2]` for `[None, 4, 5, 2]`) could not be merged with
  the taken branch's values ('Dimension 0 in both shapes must be equal' in DynamicStitch)."""
  def body(i):
    with tf.GradientTape() as tape:
      def taken():
        image = tf.squeeze(X5[i:i + 1], 0)[tf.newaxis]      # static shape [1, None, 5, 2]
        y = tf.nn.conv2d(image, V5[-1 - i], 1, "VALID")
        return tf.zeros([2]) + tf.reduce_mean(y)
      out = tf.cond(tf.equal(tf.math.floormod(i, 2), 0), taken, lambda: tf.zeros([2]))
      loss = tf.reduce_sum(tf.square(out))
    tape.gradient(loss, tf.zeros([2]), unconnected_gradients="zero")
    return out
  testing.check_against_loop(body, n, mode=mode)


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
  _check_loop_gradient(_switch_case_in_a_per_iteration_loop(lambda: tf.constant(1)))


def test_gradient_through_pfor_of_a_switch_case_with_a_run_time_index_in_a_loop():
  """Fuzz seeds 100018, 1220092 (the index is floormod of a captured input). The loop's
  active set gathers the Case's output, and TF's gradient of a gather from a conditional
  inside a while loop asserts where the shape is unknown (cond_v2._resolve_grad_inputs; plain
  TF code with a [None, 3] loop variable fails the same way): the output is reshaped to its
  own shape, which makes that gradient dense (cond.py `_dense_gradient`)."""
  _check_loop_gradient(_switch_case_in_a_per_iteration_loop(lambda: INDEX6))


def test_gradient_through_pfor_of_a_cond_with_a_run_time_predicate_in_a_loop():
  """The same for tf.cond (an If): its output gathered by the loop's active set."""
  def make_body(x):
    def body(i):
      xi = x[i]

      def step(j, c):
        return j + 1, tf.cond(INDEX6 > 0, lambda: c * 2.0, lambda: c * 3.0)
      return tf.while_loop(lambda j, c: j < TRIPS6[i], step, (0, xi))[1]
    return body
  _check_loop_gradient(make_body)


def _check_loop_gradient(make_body):
  @tf.function(autograph=False)
  def pfor_grad(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      out = vectorize.pfor(make_body(x), 3, fallback_to_while_loop=False)
      total = tf.reduce_sum(out * out)
    return tf.convert_to_tensor(tape.gradient(total, x, unconnected_gradients="zero"))

  with tf.GradientTape() as tape:
    tape.watch(X6)
    body = make_body(X6)
    out = tf.stack([body(tf.constant(i)) for i in range(3)])
    total = tf.reduce_sum(out * out)
  expected = tf.convert_to_tensor(tape.gradient(total, X6, unconnected_gradients="zero"))
  np.testing.assert_allclose(pfor_grad(X6), expected, rtol=1e-5)


@pytest.mark.unchecked
@pytest.mark.parametrize("known", [True, False])
def test_conditional_known_at_trace_time_emits_no_conditional(known):
  """A predicate or branch index known when the body is traced picks its branch in place."""
  def body(i):
    x = X[i]
    picked = tf.cond(tf.constant(known), lambda: x * 2.0, lambda: x - 1.0)
    return tf.switch_case(tf.constant(5), [lambda: picked, lambda: picked + 1.0])
  graph = tf.function(lambda: vectorize.pfor(body, 3, fallback_to_while_loop=False),
                      autograph=False).get_concrete_function().graph
  assert not {"If", "StatelessIf", "Case", "StatelessCase"} & set(testing.all_op_types(graph))
  testing.check_against_loop(body, 3)


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


X8 = tf.constant(np.random.default_rng(9).standard_normal([4, 1]), tf.float32)
W8 = tf.constant(np.random.default_rng(8).standard_normal([1, 2, 3]), tf.float32)
B8 = tf.constant([2.])
P8 = tf.constant([1., -1., 1., -1.])


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_add_chain_in_a_per_iteration_branch_survives_grappler(mode):
  """Fuzz seed 1000020, shrunk (the first run of the extended pool): a silent wrong answer
  (shape (0,)) while Grappler's arithmetic optimizer rewrote the add chain x + x + b in our
  lowered guard cond; plain TF shows the bug too, so the guard stays a functional If."""
  def body(i):
    x = X8[-1 - i]
    return tf.cond(P8[-1 - i] > 0.0, lambda: tf.tanh(W8) + (x + x + B8), lambda: W8)
  testing.check_against_loop(body, 3, mode=mode)


def test_add_chain_in_a_per_iteration_branch_survives_grappler_in_the_gradient():
  """Fuzz seed 1000268, shrunk: the gradient of the guard cond was lowered to Switch /
  Merge again, and Grappler turned the gradient's add chain into shape (0,) (a silent
  wrong answer); the guard is now a Case that passes its lowering flag to its gradient."""
  def make_body(x):
    def body(i):
      xi = x[-1 - i]
      return tf.cond(P8[-1 - i] > 0.0, lambda: tf.tanh(xi), lambda: xi + xi + B8)
    return body

  @tf.function(autograph=False)
  def pfor_grad(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      out = vectorize.pfor(make_body(x), 3, fallback_to_while_loop=False)
      total = tf.reduce_sum(out * out)
    return tf.convert_to_tensor(tape.gradient(total, x, unconnected_gradients="zero"))

  with tf.GradientTape() as tape:
    tape.watch(X8)
    body = make_body(X8)
    out = tf.stack([body(tf.constant(i)) for i in range(3)])
    total = tf.reduce_sum(out * out)
  expected = tf.convert_to_tensor(tape.gradient(total, X8))
  np.testing.assert_allclose(pfor_grad(X8), expected, rtol=1e-5)


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


X9 = tf.constant(np.random.default_rng(0).standard_normal([4, 3, 1]), tf.float32)
SIGNS9 = tf.constant([-1., -2., 3., -4.])
W9 = tf.ones([3, 3])


def _gradient_of_a_gather_in_one_branch(i):
  """The gradient of the cond is an IndexedSlices: in one branch the 2 gathered rows, in
  the other a dense zero gradient seen as 3 rows."""
  xi = X9[i]
  with tf.GradientTape() as tape:
    tape.watch(xi)
    out = tf.cond(SIGNS9[i] > 0.0, lambda: W9,
                  lambda: tf.tanh(W9) + tf.reduce_mean(tf.gather(xi, [1, 2])))
    loss = tf.reduce_sum(tf.square(out))
  return tape.gradient(loss, xi, unconnected_gradients="zero")


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_branches_giving_values_of_other_sizes_merge_as_ragged(n, mode):
  """Fuzz seed 1003004, shrunk ('Dimension 0 in both shapes must be equal, but are 3 and
  2' in DynamicStitch): the branches' outputs now merge as a ragged value, and the dense
  shape, the same constant in both branches, stays loop-invariant."""
  testing.check_against_loop(_gradient_of_a_gather_in_one_branch, n, mode=mode)


def test_branches_giving_values_of_other_sizes_under_xla_is_a_clear_error():
  fn = tf.function(lambda: vectorize.pfor(_gradient_of_a_gather_in_one_branch, 4,
                                          fallback_to_while_loop=False), jit_compile=True)
  with pytest.raises(vectorize.ConversionError, match="rows depending on the branch taken"):
    fn()


def _gradient_of_a_tensor_array_gather_in_one_branch(i):
  xi = X9[i]
  with tf.GradientTape() as tape:
    tape.watch(xi)
    def gathered():
      rows = tf.TensorArray(tf.float32, 3).unstack(xi).gather([1, 2])
      return tf.tanh(W9) + tf.reduce_mean(rows)
    loss = tf.reduce_sum(tf.square(tf.cond(SIGNS9[i] > 0.0, lambda: W9, gathered)))
  return tape.gradient(loss, xi, unconnected_gradients="zero")


@pytest.mark.parametrize("n,mode", [(1, "function"), (2, "function"), (1, "dynamic"),
                                    (2, "dynamic"), (4, "dynamic")])
def test_gradient_list_of_a_per_iteration_length_and_run_time_element_shape(n, mode):
  """Fuzz seed 1003004: the gradient of a TensorArray gather reserves a list shaped like
  the forward one (`TensorListElementShape`), known at run time only; it was refused as of
  unknown rank ('a TensorList of a per-iteration size with elements of unknown rank').
  At a static n = 2 (both lanes in one branch) the branch was then skipped: Grappler folded
  the Size of its positions to 0."""
  testing.check_against_loop(_gradient_of_a_tensor_array_gather_in_one_branch, n,
                             mode=mode)


@pytest.mark.xfail(strict=True, raises=tf.errors.InvalidArgumentError, reason="active_set.py "
                   "or TF's Grappler: with a static n, constant folding gives a part of a "
                   "partitioned conditional another part's size (a TensorList intermediate "
                   "under a tape; 'data[1].shape = [1] does not start with indices[1].shape "
                   "= [3]' in DynamicStitch); passes with n known at run time, with "
                   "constant folding off, or with the predicate's data passed as a "
                   "tf.function argument instead of a captured constant")
def test_gradient_list_in_one_branch_with_a_static_n():
  """Fuzz seed 1003004, static n = 4 (1 lane takes one branch, 3 the other)."""
  testing.check_against_loop(_gradient_of_a_tensor_array_gather_in_one_branch, 4,
                             mode="function")


X10 = tf.constant([[0.5], [-1.], [2.], [0.3]])
V10 = tf.constant([1., 2., 3., 4.])
FLAG10 = tf.Variable(False)


def _tape_over_a_cond_reading_a_slice(x, i):
  """A tape inside the body over a cond whose untaken branch reads `x[i:i + 1]`."""
  vi = tf.gather(V10, i)
  with tf.GradientTape() as tape:
    tape.watch(vi)
    def sliced():
      return tf.tanh(vi) + tf.reduce_mean(vi / (tf.abs(tf.squeeze(x[i:i + 1], 0)) + 1.0))
    y = tf.square(tf.cond(tf.convert_to_tensor(FLAG10), lambda: tf.tanh(vi), sliced))
  return tape.gradient(y, vi)


@pytest.mark.xfail(strict=True, raises=ValueError, reason="TensorFlow's bug, not ours: "
                   "under XLA (and wherever cond_v2 makes FakeParam stand-ins instead of "
                   "Optionals, as pfor's trace does) a stand-in's unknown dims become 0, and "
                   "the outer gradient's aggregation fails: 'Shapes (0, 1) and (1, 1) are not "
                   "compatible'")
def test_plain_tf_gradient_of_a_cond_under_a_tape_under_xla():
  """The grad-mode kind of fuzz seeds 62, 3895, 120062, 120075 ('Shapes (0, ..) and (1, ..)
  are not compatible'), shown with no vectorize at all: the outer gradient of one iteration
  under jit_compile. pfor traces the body with optionals disabled, as TF's own pfor does,
  and meets the same error."""
  @tf.function(jit_compile=True)
  def grad(x, i):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = _tape_over_a_cond_reading_a_slice(x, i)
    return tape.gradient(y, x)
  grad(X10, tf.constant(1))


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
    return tf.while_loop(lambda j, c, d: j < 0, step, (0, X[i, 0], X[i, 1]))[2]
  testing.check_against_loop(body, 1, mode=mode)


def test_unique_of_an_invariant_under_xla_is_a_clear_error():
  """Fuzz seed 1240049: tf.unique of a loop-invariant value under jit_compile. XLA computes
  it wrongly by itself (an empty result, no vectorize involved) and crashed the process once
  the result was tiled; it is refused, while the same pfor without XLA equals the loop."""
  w = tf.constant([5, 1, 7])
  body = lambda i: tf.math.cumprod(tf.unique(tf.math.floormod(tf.identity(w), 3))[0])
  fn = tf.function(lambda ws: vectorize.pfor(
      lambda i: tf.math.cumprod(tf.unique(tf.math.floormod(ws, 3))[0]), 3,
      fallback_to_while_loop=False), jit_compile=True)
  with pytest.raises(vectorize.ConversionError, match="output's size depends on the data"):
    fn(w)
  np.testing.assert_array_equal(vectorize.pfor(body, 3), [[2, 2]] * 3)


V11 = tf.Variable([-0.3])


def test_boolean_mask_of_an_invariant_under_xla_is_a_clear_error():
  """Fuzz seeds 1260067, 1240109: tf.boolean_mask of a loop-invariant value (a variable's
  value) under jit_compile, given to every iteration, came back with a garbage shape
  ((21862, 646229280) for (1, 0)) or a dynamic_padder RET_CHECK; XLA miscompiles such
  data-dependent sizes by itself too (a gather from an empty one aborts the process). It is
  refused, while the same pfor without XLA equals the loop."""
  body = lambda i: tf.boolean_mask(tf.identity(V11), tf.identity(V11) > 0.0)
  fn = tf.function(lambda: vectorize.pfor(body, 1, fallback_to_while_loop=False),
                   jit_compile=True)
  with pytest.raises(vectorize.ConversionError, match="Where.*output's size depends on the data"):
    fn()
  testing.check_against_loop(body, 2)
