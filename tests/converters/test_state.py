"""Effects of stateful ops inside pfor against a sequential loop: variable writes, refused
orders of reads and writes, assertions and printing."""

import os

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

MODES = ["function", "dynamic", "xla"]
X = tf.constant(np.random.default_rng(0).standard_normal([5, 3]).astype(np.float32))
XI = tf.constant(np.arange(15, dtype=np.int32).reshape(5, 3) - 4)


def _effect(make_body, initial, n, mode):
  """(variable after pfor, variable after a sequential loop), both from `initial`."""
  variable = tf.Variable(initial)
  testing.run_pfor(make_body(variable), n, mode=mode)
  after_pfor = variable.numpy()
  variable.assign(initial)
  body = make_body(variable)
  for i in range(n):
    body(tf.constant(i))
  return after_pfor, variable.numpy()


def _check_effect(make_body, initial, n, mode, tol=1e-5):
  actual, expected = _effect(make_body, initial, n, mode)
  testing.assert_allclose(actual, expected, tol)


# ----------------------------------------------------------------------------- commutative updates

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [0, 1, 5])
def test_assign_add_of_stacked_values_equals_sequential_adds(mode, n):
  def make_body(v):
    def body(i):
      v.assign_add(X[i])
      return X[i]
    return body
  _check_effect(make_body, tf.ones([3]), n, mode)


@pytest.mark.parametrize("mode", MODES)
def test_assign_add_of_an_invariant_value_adds_it_n_times(mode):
  def make_body(v):
    def body(i):
      v.assign_add(XI[0])
      return i
    return body
  _check_effect(make_body, tf.zeros([3], tf.int32), 5, mode)


@pytest.mark.parametrize("mode", MODES)
def test_assign_sub_of_int_values_is_exact(mode):
  def make_body(v):
    def body(i):
      v.assign_sub(XI[i])
      return i
    return body
  _check_effect(make_body, tf.constant([2**31 - 1, -2**31, 0]), 5, mode)


@pytest.mark.parametrize("mode", MODES)
def test_several_adds_and_a_final_assign_equal_sequential(mode):
  def make_body(v):
    def body(i):
      v.assign_add(X[i])
      v.assign_sub(2.0 * X[i])
      v.assign(X[0] * 3.0)
      return i
    return body
  _check_effect(make_body, tf.ones([3]), 4, mode)


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_scatter_add_with_indices_repeated_across_iterations_equals_sequential(mode):
  indices = tf.constant([[0, 2], [2, 2], [4, 0]])

  def make_body(v):
    def body(i):
      v.scatter_add(tf.IndexedSlices(X[i:i + 2], indices[i]))
      return i
    return body
  _check_effect(make_body, tf.zeros([5, 3]), 3, mode)


def test_scatter_sub_with_invariant_indices_equals_sequential():
  def make_body(v):
    def body(i):
      v.scatter_sub(tf.IndexedSlices(X[i:i + 2], [1, 3]))
      return i
    return body
  _check_effect(make_body, tf.zeros([5, 3]), 4, "function")


# ----------------------------------------------------------------------------- assignments

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [0, 1, 5])
def test_assign_of_stacked_values_leaves_the_last_iteration_value(mode, n):
  def make_body(v):
    def body(i):
      v.assign(X[i])
      return X[i]
    return body
  _check_effect(make_body, tf.fill([3], 7.0), n, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [0, 3])
def test_assign_of_an_invariant_value_then_read_sees_it_in_every_iteration(mode, n):
  variable = tf.Variable(tf.fill([3], 7.0))

  def body(i):
    variable.assign(X[0])
    return variable.read_value() * X[i]

  actual = testing.run_pfor(body, n, mode=mode)
  expected = (X[0] * X[:n]).numpy()
  testing.assert_allclose(actual, expected)
  np.testing.assert_array_equal(variable.numpy(), X[0].numpy() if n else np.full([3], 7.0))


def test_reads_of_a_variable_the_body_never_writes_are_invariant():
  variable = tf.Variable(X[0])
  out = vectorize.pfor(lambda i: variable * X[i], 5)
  testing.assert_allclose(out.numpy(), (X[0] * X).numpy())
  kinds = {r.kind for r in vectorize.last_report().records if r.op_type == "ReadVariableOp"}
  assert kinds == {"invariant"}


# ----------------------------------------------------------------------------- refused orders

def _refused(body):
  with pytest.raises(vectorize.ConversionError, match="a stateful op cannot be vectorized"):
    testing.run_pfor(body, 3)


def test_update_that_is_not_affine_is_refused_naming_the_scope_and_line():
  variable = tf.Variable(tf.ones([3]))

  def body(i):
    with tf.name_scope("my_layer"):
      old = variable.read_value()
      variable.assign(old * old + X[i])
    return old

  with pytest.raises(vectorize.ConversionError,
                     match=r"(?s)'my_layer'.*test_state\.py:\d+.*not an affine recurrence"):
    testing.run_pfor(body, 3)


def test_update_with_a_coefficient_per_iteration_is_refused():
  variable = tf.Variable(tf.ones([3]))

  def body(i):
    old = variable.read_value()
    variable.assign(old * X[i])
    return old

  with pytest.raises(vectorize.ConversionError, match="differs per iteration"):
    testing.run_pfor(body, 3)


# ----------------------------------------------------------------------------- recurrences

def _check_reads_and_effect(make_body, initial, n, mode, tol=1e-5):
  """pfor's outputs and the variable after it equal a sequential loop's, from `initial`."""
  variable = tf.Variable(initial)
  body = make_body(variable)
  actual = testing.run_pfor(body, n, mode=mode)
  after_pfor = variable.numpy()
  variable.assign(initial)
  expected = testing.sequential(body, n, testing.output_spec(body))
  testing.assert_allclose(actual, expected, tol)
  testing.assert_allclose(after_pfor, variable.numpy(), tol)
  return actual


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [0, 1, 5])
def test_read_before_assign_add_sees_the_running_sum(mode, n):
  def make_body(v):
    def body(i):
      before = v.read_value()
      v.assign_add(X[i])
      return before * 2.0
    return body
  _check_reads_and_effect(make_body, tf.ones([3]), n, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [0, 1, 5])
def test_reads_before_and_after_assign_add_see_the_state_of_their_iteration(mode, n):
  """The read after the update starts from the state before the loop, not the state the
  converted update leaves (code-blind finding: the loop's final state plus the sum)."""
  def make_body(v):
    def body(i):
      before = v.read_value()
      v.assign_add(X[i])
      return before, v.read_value() * 2.0
    return body
  _check_reads_and_effect(make_body, tf.ones([3]), n, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [0, 1, 5])
def test_read_after_an_update_that_no_read_precedes(mode, n):
  def make_body(v):
    def body(i):
      v.assign_sub(XI[i])
      after = tf.identity(v)
      v.assign_add(XI[i] * 3)
      return after, v.read_value()
    return body
  _check_reads_and_effect(make_body, tf.constant([5, -7, 2]), n, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("indices", ["stacked", "invariant"])
def test_reads_around_scatter_adds(mode, indices):
  rows = tf.constant(np.random.default_rng(3).standard_normal([5, 2, 3]).astype(np.float32))

  def make_body(v):
    def body(i):
      at = tf.stack([i % 4, 3 - i % 4]) if indices == "stacked" else tf.constant([1, 1])
      before = v.read_value()
      v.scatter_add(tf.IndexedSlices(rows[i], at))
      middle = v.read_value()
      v.scatter_sub(tf.IndexedSlices(rows[i, :1] * 0.5, at[:1]))
      return before, middle, v.read_value()
    return body
  _check_reads_and_effect(make_body, tf.reshape(tf.range(12.), [4, 3]), 5, mode)


def test_scatter_add_of_rows_computed_from_the_variable_read_back_is_refused():
  variable = tf.Variable(tf.ones([3]))

  def body(i):
    old = variable.read_value()
    variable.scatter_add(tf.IndexedSlices(old[:1] * X[i, :1], [0]))
    return variable.read_value()

  with pytest.raises(vectorize.ConversionError, match="scatters are computed from its reads"):
    testing.run_pfor(body, 3)


@pytest.mark.parametrize("mode", MODES)
def test_seed_generator_pattern_is_exact_in_integers(mode):
  """Keras's SeedGenerator: read the state, assign it plus [0, 1], draw with the read."""
  def make_body(v):
    def body(i):
      seed = v.read_value() * 1
      v.assign(v.read_value() + tf.constant([0, 1], tf.int64))
      return tf.cast(seed % 1000, tf.int32)
    return body
  out = _check_reads_and_effect(make_body, tf.constant([2**40, 7], tf.int64), 6, mode)
  assert len({tuple(row) for row in out}) == 6


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [0, 1, 6])
def test_reads_before_an_update_in_any_order_and_one_after(mode, n):
  """Keras's seed generator read back after its update: the two reads before it are not
  ordered against each other, so either may read the state before the loop."""
  def make_body(v):
    def body(i):
      seed = v.read_value() * 1
      v.assign(v.read_value() + tf.constant([0, 1], tf.int64))
      return seed, v.read_value() + tf.cast(i, tf.int64)
    return body
  _check_reads_and_effect(make_body, tf.constant([5, 7], tf.int64), n, mode)


@pytest.mark.parametrize("mode", MODES)
def test_moving_average_equals_the_loop(mode):
  def make_body(v):
    def body(i):
      mean = tf.reduce_mean(X[i])
      v.assign(v.read_value() * 0.9 + mean * (1.0 - 0.9))
      return X[i] - mean
    return body
  _check_reads_and_effect(make_body, tf.constant([1.0, -2.0, 3.0]), 5, mode)


@pytest.mark.parametrize("mode", MODES)
def test_moving_average_over_many_iterations_equals_the_loop(mode):
  xs = tf.constant(np.random.default_rng(2).standard_normal([300, 2]).astype(np.float32))

  def make_body(v):
    def body(i):
      v.assign(v.read_value() * 0.99 + xs[i] * 0.01)
      return v.read_value()
    return body
  _check_reads_and_effect(make_body, tf.constant([1.0, -2.0]), 300, mode, tol=1e-4)


@pytest.mark.parametrize("mode", MODES)
def test_reads_between_two_updates_see_each_update(mode):
  def make_body(v):
    def body(i):
      first = v.read_value()
      v.assign(first + 1.0)
      second = v.read_value()
      v.assign(second * 0.5 - X[i])
      return tf.stack([first, second, v.read_value()])
    return body
  _check_reads_and_effect(make_body, tf.constant([1.0, -2.0, 3.0]), 5, mode)


@pytest.mark.parametrize("mode", MODES)
def test_read_of_a_stacked_assign_sees_this_and_the_previous_iteration(mode):
  def make_body(v):
    def body(i):
      previous = v.read_value()
      v.assign(X[i])
      return previous + v.read_value()
    return body
  _check_reads_and_effect(make_body, tf.zeros([3]), 4, mode)


@pytest.mark.parametrize("mode", MODES)
def test_assign_add_of_a_value_computed_from_the_read(mode):
  def make_body(v):
    def body(i):
      before = v.read_value()
      v.assign_add(before * 0.5 + X[i])
      return before
    return body
  _check_reads_and_effect(make_body, tf.constant([1.0, -2.0, 0.5]), 5, mode)


def test_recurrence_in_a_tf1_graph_whose_increment_waits_for_the_read():
  """Without tf.function's automatic control dependencies: the increment is created under a
  control dependency on the read it does not use."""
  with tf.Graph().as_default():
    variable = tf.compat.v1.Variable(tf.ones([3]), use_resource=True)
    xs = tf.constant(X)

    def body(i):
      before = variable.read_value()
      with tf.control_dependencies([before]):
        variable.assign_add(xs[i], read_value=False)
      return before * 2.0

    out = vectorize.pfor(body, 5)
    with tf.compat.v1.Session() as session:
      session.run(variable.initializer)
      actual, after = session.run(out), session.run(variable)
  prefix = np.concatenate([np.zeros([1, 3]), np.cumsum(X.numpy(), 0)[:-1]])
  testing.assert_allclose(actual, (2.0 * (1.0 + prefix)).astype(np.float32))
  testing.assert_allclose(after, 1.0 + X.numpy().sum(0))


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_recurrence_reads_differentiate_like_reads(mode):
  """A tape does not differentiate through an assignment: reads depend on the variable, not
  on the values assigned to it."""
  variable = tf.Variable(tf.ones([3]))

  def gradients(run):
    x = tf.constant(X)
    with tf.GradientTape() as tape:
      tape.watch(x)
      def body(i):
        before = variable.read_value()
        variable.assign_add(x[i])
        return tf.reduce_sum(before * x[i])
      loss = tf.reduce_sum(run(body))
    return [tf.convert_to_tensor(g) for g in tape.gradient(loss, [x, variable])]

  pfor = lambda body: vectorize.pfor(body, 5, fallback_to_while_loop=False)
  loop = lambda body: tf.stack([body(tf.constant(i)) for i in range(5)])
  jit = mode == "xla"
  actual = tf.function(lambda: gradients(pfor), jit_compile=jit, autograph=False)()
  variable.assign(tf.ones([3]))
  expected = tf.function(lambda: gradients(loop), jit_compile=jit, autograph=False)()
  testing.assert_allclose([a.numpy() for a in actual], [e.numpy() for e in expected])


# ----------------------------------------------------------------------------- assert, print

def test_assert_on_a_stacked_condition_fails_when_one_iteration_fails():
  limits = tf.constant([100.0, 100.0, -9.0])

  def body(i):
    tf.debugging.assert_less(X[i, 0], limits[i])
    return X[i]

  with pytest.raises(tf.errors.InvalidArgumentError):
    testing.run_pfor(body, 3)
  testing.run_pfor(body, 2)  # the third iteration's condition is the failing one


def test_raw_assert_with_invariant_false_condition_and_no_iterations_passes():
  def body(i):
    tf.raw_ops.Assert(condition=tf.constant(False), data=[X[i]])
    return X[i]

  assert testing.run_pfor(body, 0, mode="dynamic").shape == (0, 3)
  with pytest.raises(tf.errors.InvalidArgumentError):
    testing.run_pfor(body, 2)


def _read_and_remove(path):
  with open(path) as f:
    text = f.read()
  os.remove(path)
  return text


@pytest.mark.unchecked   # counts the ops pfor emits (or the prints): the check adds its own
@pytest.mark.parametrize("mode", ["function", "dynamic", "eager"])
@pytest.mark.parametrize("n", [4, 0])
def test_print_prints_what_the_loop_prints(tmp_path, mode, n):
  """One line per iteration, in iteration order, each formatted on its own (a summarized
  row's `...` too); a string the same in every iteration is printed n times."""
  def make_body(path):
    def body(i):
      stream = "file://" + str(path)
      tf.print("iteration", i, X[i], tf.range(20) + i, output_stream=stream, end=";\n")
      tf.print("same", output_stream=stream)
      return i
    return body

  vectorized, expected = tmp_path / "pfor.txt", tmp_path / "expected.txt"
  testing.run_pfor(make_body(vectorized), n, mode=mode)
  loop = make_body(expected)
  for i in range(n):
    loop(tf.constant(i))
  text = _read_and_remove(vectorized) if vectorized.exists() else ""
  assert text.count(";\n") == n
  lines = _read_and_remove(expected) if expected.exists() else ""
  assert sorted(text.splitlines()) == sorted(lines.splitlines())
  assert [l for l in text.splitlines() if l != "same"] == [
      l for l in lines.splitlines() if l != "same"]


def test_a_formatted_string_the_body_returns_is_formatted_per_iteration():
  def body(i):
    return tf.strings.format("x={}", X[i])
  testing.assert_allclose(testing.run_pfor(body, 4), testing.sequential(body, 4))




# ----------------------------------------------------------------------------- two variables

def _check_two_variables(make_body, n, mode, tol=1e-5):
  """pfor's outputs and both variables after it equal a sequential loop's."""
  a, b = tf.Variable(1.0), tf.Variable(10.0)
  body = make_body(a, b)
  actual = testing.run_pfor(body, n, mode=mode)
  after_pfor = [a.numpy(), b.numpy()]
  a.assign(1.0)
  b.assign(10.0)
  expected = testing.sequential(body, n, testing.output_spec(body))
  testing.assert_allclose(actual, expected, tol)
  testing.assert_allclose(after_pfor, [a.numpy(), b.numpy()], tol)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [0, 1, 5])
def test_assign_of_another_variables_recurrence(mode, n):
  """a <- 2 b, then b <- b + x: a's reads need b's sequential reads, converted out of the
  walker's order from inside a's."""
  def make_body(a, b):
    def body(i):
      a.assign(b.read_value() * 2.0)
      b.assign_add(X[i, 0])
      return a.read_value(), b.read_value()
    return body
  _check_two_variables(make_body, n, mode)


@pytest.mark.parametrize("mode", MODES)
def test_add_of_another_variables_state_after_its_update(mode):
  def make_body(a, b):
    def body(i):
      b.assign(b * 0.5 + X[i, 1])
      a.assign_add(b.read_value())
      return a.read_value() + 0.0
    return body
  _check_two_variables(make_body, 5, mode)


@pytest.mark.parametrize("rotate", [False, True])
def test_variables_whose_updates_read_each_other_are_refused(rotate, caplog):
  """A swap (a <- b, b <- old a + x) is a recurrence of the two together: refused naming
  it, not a crash about a placeholder; with the fallback on, the loop runs it."""
  a, b = tf.Variable(1.0), tf.Variable(10.0)

  def body(i):
    old_a = tf.identity(a.read_value())
    a.assign(b.read_value() + (1.0 if rotate else 0.0))
    b.assign(old_a + X[i, 2])
    return a.read_value(), b.read_value()

  with pytest.raises(vectorize.ConversionError, match="another variable's read each other"):
    testing.run_pfor(body, 3)
  a.assign(1.0)
  b.assign(10.0)
  expected = testing.sequential(body, 3, testing.output_spec(body))
  after_loop = [a.numpy(), b.numpy()]
  a.assign(1.0)
  b.assign(10.0)
  actual = vectorize.pfor(body, 3)
  assert "sequential loop" in caplog.text
  testing.assert_allclose(actual, expected, 1e-6)
  testing.assert_allclose([a.numpy(), b.numpy()], after_loop, 1e-6)


_CANCELLING = tf.constant(np.tile(np.array([1e8, 1.0, -1e8, 1.0], np.float32), 6))


@pytest.mark.parametrize("mode", ["function", "dynamic"])
@pytest.mark.parametrize("subtract", [False, True])
def test_float_running_sum_rounds_as_the_loop_does(mode, subtract):
  """Reads and the final state of `v += x_i` are the loop's bit for bit on CPU: added one
  after another from the state before the loop (a reduce_sum gave a final state of 24.0
  where the loop leaves 3.0; reads computed as start + sum lost the start's rounding)."""
  def make_body(v):
    def body(i):
      before = v.read_value()
      (v.assign_sub if subtract else v.assign_add)(_CANCELLING[i])
      return before, v.read_value()
    return body
  v = tf.Variable(2.0)
  body = make_body(v)
  actual = testing.run_pfor(body, 24, mode=mode)
  after_pfor = v.numpy()
  v.assign(2.0)
  expected = testing.sequential(body, 24, testing.output_spec(body))
  np.testing.assert_array_equal(actual[0], expected[0])
  np.testing.assert_array_equal(actual[1], expected[1])
  assert after_pfor == v.numpy() == expected[1][-1]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [0, 1, 3])
def test_infinite_updates_and_reads_equal_the_loop(mode, n):
  """Fuzz seed 3600305: an update by -inf (the max of an empty mask) read back gave NaN (the
  read's exact zero, x - x, is NaN for an infinite x), and at n = 0 the invariant
  addition `-inf * 0` made the variable NaN where the loop leaves it as it was."""
  empty_max = tf.reduce_max(tf.boolean_mask(X[0], X[0] > 100.0))     # -inf

  def make_body(v):
    def body(i):
      v.assign_add(empty_max)
      return v.read_value() + X[i, 0] * 0.0
    return body
  _check_reads_and_effect(make_body, tf.constant(0.5), n, mode)
  counter = tf.Variable(7)

  def count(i):
    counter.assign_add(3)
    return i

  testing.run_pfor(count, n, mode=mode)
  assert counter.numpy() == 7 + 3 * n


@pytest.mark.parametrize("mode", MODES)
def test_affine_recurrence_through_an_infinite_increment_equals_the_loop(mode):
  """Fuzz seed 3630445: v <- (v + b_i) / 4 with b_1 = -inf. The closed form's prefix sums
  masked earlier rows by multiplying with 0, and 0 * -inf is NaN (the loop gives -inf)."""
  b = tf.constant([1.0, -np.inf, 2.0, 0.5, -1.0])

  def make_body(v):
    def body(i):
      v.assign((v + b[i]) / 4.0)
      return v.read_value() + 0.0
    return body
  _check_reads_and_effect(make_body, tf.constant(0.5), 5, mode)
