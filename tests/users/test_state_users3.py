"""Bodies with state: variables updated per example inside while loops and conds, checked
against what the Python loop leaves, with outputs whose size differs per example."""
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.users._util_users3 import plain_mode_users3  # noqa: F401 (autouse)
from tests.users._util_users3 import (assert_same, assert_state, checked_pfor, in_function,
                                      loop, runtime_n, stateful_compare,
                                      without_checked_env)

X = tf.constant([[1., 2., 3., 4.], [5., 6., 7., 8.], [-1., 0.5, 2., -3.],
                 [0.25, -0.5, 1., 2.]])
LENGTHS = tf.constant([2, 0, 4, 1])


def test_assign_add_in_while_with_prefix_output():
  total = tf.Variable(0.)

  def body(i):
    def step(t, acc):
      total.assign_add(X[i, t])
      return t + 1, acc + X[i, t]
    _, acc = tf.while_loop(lambda t, acc: t < LENGTHS[i], step,
                           (tf.constant(0), tf.constant(0.)))
    return acc, X[i, :LENGTHS[i]]

  want, ws, got, gs = stateful_compare([total], [0.], body, 4,
                                       lambda: checked_pfor(body, 4))
  assert_same(got, want)
  assert_state(gs, ws)
  # The same inside a tf.function with a run-time n.
  f = runtime_n(body)
  total.assign(0.)
  assert_same(f(tf.constant(4)), want)
  assert_state([total.numpy().tolist()], ws)


def test_nonlinear_assign_of_old_value_in_while():
  # v <- sin(v) + x: the order of iterations matters; the loop's order must be kept.
  v = tf.Variable(0.5)

  def body(i):
    def step(t):
      v.assign(tf.sin(v) * 2. + X[i, t])
      return [t + 1]
    tf.while_loop(lambda t: t < LENGTHS[i], step, [tf.constant(0)])
    return v.read_value(), tf.boolean_mask(X[i], X[i] > 1.)

  want, ws, got, gs = stateful_compare([v], [0.5], body, 4,
                                       lambda: checked_pfor(body, 4))
  assert_same(got, want)
  assert_state(gs, ws)
  v.assign(0.5)
  assert_same(in_function(body, 4), want)
  assert_state([v.numpy().tolist()], ws)


def test_cond_assign_add_counter_and_boolean_mask():
  count = tf.Variable(0, dtype=tf.int64)

  def body(i):
    s = tf.reduce_sum(X[i])
    def yes():
      count.assign_add(tf.constant(1, tf.int64))
      return s * 2.
    def no():
      return -s
    r = tf.cond(s > 5., yes, no)
    return r, tf.boolean_mask(X[i], X[i] > 0.)

  want, ws, got, gs = stateful_compare([count], [0], body, 4,
                                       lambda: vectorize.pfor(body, 4))
  assert_same(got, want)
  assert_state(gs, ws)
  count.assign(0)
  with vectorize.checked(sample=None):
    got = vectorize.pfor(body, 4)
  assert_same(got, want)
  assert_state([count.numpy().tolist()], ws)


def test_cond_assign_and_assign_sub_branches():
  v = tf.Variable([1., 1.])

  def body(i):
    def up():
      v.assign(v * 1.5 + X[i, :2])
      return tf.constant(1)
    def down():
      v.assign_sub(X[i, 2:])
      return tf.constant(0)
    which = tf.cond(X[i, 0] > 0., up, down)
    return which, tf.strings.split(tf.strings.as_string(X[i, :LENGTHS[i]]))

  # tf.strings.split of a vector gives a RaggedTensor per example.
  want, ws, got, gs = stateful_compare([v], [[1., 1.]], body, 4,
                                       lambda: vectorize.pfor(body, 4))
  assert_same(got, want)
  assert_state(gs, ws)


def test_scatter_update_per_example_index_with_strings_split():
  table = tf.Variable(tf.zeros([5]))
  idx = tf.constant([3, 1, 3, 0])
  text = tf.constant(["a b c", "", "hello world", "x"])

  def body(i):
    table.scatter_update(tf.IndexedSlices(X[i, :1] * 10., idx[i:i + 1]))
    return tf.strings.split(text[i])

  want, ws, got, gs = stateful_compare([table], [np.zeros(5, np.float32)], body, 4,
                                       lambda: vectorize.pfor(body, 4))
  assert_same(got, want)
  assert_state(gs, ws)


def test_scatter_nd_add_in_while_loop():
  hist = tf.Variable(tf.zeros([4], tf.int32))
  tokens = tf.constant([[1, 1, 2, 3], [0, 0, 0, 0], [3, 2, 1, 0], [2, 2, 2, 2]])

  def body(i):
    def step(t):
      hist.scatter_nd_add([[tokens[i, t]]], [1])
      return [t + 1]
    tf.while_loop(lambda t: t < LENGTHS[i], step, [tf.constant(0)])
    return tokens[i, :LENGTHS[i]]

  want, ws, got, gs = stateful_compare([hist], [[0, 0, 0, 0]], body, 4,
                                       lambda: checked_pfor(body, 4))
  assert_same(got, want)
  assert_state(gs, ws)
  hist.assign([0, 0, 0, 0])
  assert_same(runtime_n(body)(tf.constant(4)), want)
  assert_state([hist.numpy().tolist()], ws)


def test_tensorarray_filled_for_length_steps_with_state():
  steps = tf.Variable(0)

  def body(i):
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    def step(t, ta):
      steps.assign_add(1)
      return t + 1, ta.write(t, X[i, t] * X[i, t])
    _, ta = tf.while_loop(lambda t, ta: t < LENGTHS[i], step, (tf.constant(0), ta))
    return ta.stack()

  want, ws, got, gs = stateful_compare([steps], [0], body, 4,
                                       lambda: checked_pfor(body, 4))
  assert_same(got, want)
  assert_state(gs, ws)
  steps.assign(0)
  assert_same(in_function(body, 4), want)
  assert_state([steps.numpy().tolist()], ws)


def test_ragged_built_in_body_with_running_max_variable():
  best = tf.Variable(-100.)

  def body(i):
    best.assign(tf.maximum(best, tf.reduce_max(X[i])))
    row = X[i, :LENGTHS[i]]
    return tf.RaggedTensor.from_row_lengths(row, [LENGTHS[i], 0]), best.read_value()

  want, ws, got, gs = stateful_compare([best], [-100.], body, 4,
                                       lambda: checked_pfor(body, 4))
  assert_same(got, want)
  assert_state(gs, ws)


def test_square_plus_one_recurrence_in_while():
  # v <- v * v * 0.5 + 1 per step, per-example trip counts: no affine form.
  v = tf.Variable(0.25, dtype=tf.float64)

  def body(i):
    def step(t):
      v.assign(v * v * 0.5 + 1.)
      return [t + 1]
    n, = tf.while_loop(lambda t: t < LENGTHS[i], step, [tf.constant(0)])
    return n, tf.cast(X[i, :LENGTHS[i]], tf.float64) * v.read_value()

  want, ws, got, gs = stateful_compare([v], [0.25], body, 4,
                                       lambda: vectorize.pfor(body, 4))
  assert_same(got, want)
  assert_state(gs, ws)


def test_overlapping_scatter_nd_update_last_write_wins():
  v = tf.Variable([0, 0, 0])
  where = tf.constant([1, 1, 2, 1])

  def body(i):
    v.scatter_nd_update([[where[i]]], [i * 10 + 1])
    return tf.range(LENGTHS[i])

  want, ws, got, gs = stateful_compare([v], [[0, 0, 0]], body, 4,
                                       lambda: checked_pfor(body, 4))
  assert ws == [[0, 31, 21]]
  assert_same(got, want)
  assert_state(gs, ws)


def test_vectorized_map_with_assign_add_and_unique():
  seen = tf.Variable(0)
  rows = tf.constant([[1, 1, 2], [3, 3, 3], [4, 5, 6]])

  def fn(row):
    y, _ = tf.unique(row)
    seen.assign_add(tf.size(y))
    return y

  seen.assign(0)
  want = tf.ragged.stack([fn(r) for r in tf.unstack(rows)])
  ws = seen.numpy()
  seen.assign(0)
  got = vectorize.vectorized_map(fn, rows)
  assert_same(got, want)
  assert seen.numpy() == ws == 6


def test_reads_after_assign_add_are_running_sums():
  v = tf.Variable(0.)

  def body(i):
    v.assign_add(X[i, 0])
    return v.read_value()

  want, ws, got, gs = stateful_compare([v], [0.], body, 4,
                                       lambda: vectorize.pfor(body, 4))
  assert want.numpy().tolist() == [1., 6., 5., 5.25]
  assert_same(got, want)
  assert_state(gs, ws)


@pytest.mark.parametrize("jit", [False, True])
def test_read_before_and_after_assign_add(jit):
  xs = tf.constant([3., 1., 2., 5.])
  v = tf.Variable(10.)

  def body(i):
    before = v.read_value()
    v.assign_add(xs[i])
    return before, v.read_value()

  run = (lambda: in_function(body, 4, jit=True)) if jit else (lambda: vectorize.pfor(body, 4))
  want, ws, got, gs = stateful_compare([v], [10.], body, 4, run)
  assert_state(gs, ws)
  assert_same(got, want)


def test_identity_before_assign_sub_vector():
  v = tf.Variable([1., 2.])

  def body(i):
    r = tf.identity(v)
    v.assign_sub(X[i, :2])
    return r + 0., v + 0.

  want, ws, got, gs = stateful_compare([v], [[1., 2.]], body, 4,
                                       lambda: vectorize.pfor(body, 4))
  assert_state(gs, ws)
  assert_same(got, want)


def test_reads_around_assign_and_two_assign_adds():
  v = tf.Variable(-1.)

  def shift(i):
    previous = v.read_value()
    v.assign(X[i, 0])
    return previous

  want, ws, got, gs = stateful_compare([v], [-1.], shift, 4,
                                       lambda: vectorize.pfor(shift, 4))
  assert want.numpy().tolist() == [-1., 1., 5., -1.]
  assert_same(got, want)
  assert_state(gs, ws)

  def twice(i):
    v.assign_add(X[i, 0])
    a = v.read_value()
    v.assign_add(X[i, 1])
    return a, v.read_value()

  want, ws, got, gs = stateful_compare([v], [0.], twice, 4,
                                       lambda: checked_pfor(twice, 4))
  assert_same(got, want)
  assert_state(gs, ws)


def test_read_before_assign_add_inside_while_of_per_example_trips():
  v = tf.Variable(0.)

  def body(i):
    def step(t, acc):
      r = v.read_value()
      v.assign_add(X[i, t])
      return t + 1, acc + r
    return tf.while_loop(lambda t, a: t < LENGTHS[i], step,
                         (tf.constant(0), tf.constant(0.)))[1]

  want, ws, got, gs = stateful_compare([v], [0.], body, 4,
                                       lambda: vectorize.pfor(body, 4))
  assert_same(got, want)
  assert_state(gs, ws)


def test_sliced_assign_of_per_example_row():
  table = tf.Variable(tf.zeros([4, 2]))

  def body(i):
    table[i].assign(X[i, :2] * 2.)
    return tf.reduce_sum(table)

  want, ws, got, gs = stateful_compare([table], [np.zeros([4, 2], np.float32)], body, 4,
                                       lambda: vectorize.pfor(body, 4))
  assert_same(got, want)
  assert_state(gs, ws)


def test_read_before_and_after_assign_add_passes_the_checked_mode():
  xs = tf.constant([3., 1., 2., 5.])
  v = tf.Variable(10.)

  def body(i):
    before = v.read_value()
    v.assign_add(xs[i])
    return before, v.read_value()

  with vectorize.checked(sample=None):
    before, after = vectorize.pfor(body, 4)
  assert before.numpy().tolist() == [10., 13., 14., 16.]
  assert after.numpy().tolist() == [13., 14., 16., 21.]
  assert v.numpy() == 21.


def test_two_variables_one_feeding_the_other():
  a = tf.Variable(0.)
  b = tf.Variable(1.)

  def body(i):
    a.assign_add(X[i, 0])
    b.assign(b + a)
    return b.read_value()

  want, ws, got, gs = stateful_compare([a, b], [0., 1.], body, 4,
                                       lambda: checked_pfor(body, 4))
  assert_same(got, want)
  assert_state(gs, ws)


def test_cond_assign_add_or_sub_inside_while_with_prefix_output():
  v = tf.Variable(0.)

  def body(i):
    def step(t):
      tf.cond(X[i, t] > 1.5, lambda: v.assign_add(X[i, t]), lambda: v.assign_sub(1.))
      return [t + 1]
    tf.while_loop(lambda t: t < LENGTHS[i], step, [tf.constant(0)])
    return X[i, :LENGTHS[i]]

  want, ws, got, gs = stateful_compare([v], [0.], body, 4,
                                       lambda: vectorize.pfor(body, 4))
  assert_same(got, want)
  assert_state(gs, ws)
  v.assign(0.)
  assert_same(runtime_n(body)(tf.constant(4)), want)
  assert_state([v.numpy().tolist()], ws)


# Fixed: the whole-body loop asks a probe conversion which outputs are ragged.
def test_sequential_body_fixed_size_slice_stays_dense():
  v = tf.Variable(3.)

  def body(i):
    v.assign(v * v)
    return X[i, :2]

  want, ws, got, gs = stateful_compare([v], [3.], body, 2,
                                       lambda: vectorize.pfor(body, 2))
  assert_state(gs, ws)
  assert_same(got, want)


def test_nonlinear_update_under_jit_and_n_zero():
  v = tf.Variable(0.5)

  def body(i):
    v.assign(tf.sin(v) * 2. + X[i, 0])
    return v.read_value() + X[i]

  want, ws, got, gs = stateful_compare([v], [0.5], body, 4,
                                       lambda: in_function(body, 4, jit=True))
  assert_same(got, want)
  assert_state(gs, ws)
  v.assign(0.5)
  got = runtime_n(body)(tf.constant(0))
  assert tuple(got.shape) == (0, 4) and v.numpy() == 0.5


def test_assign_add_in_while_under_jit():
  v = tf.Variable(0.)

  def body(i):
    def step(t, acc):
      v.assign_add(X[i, t])
      return t + 1, acc * 2. + X[i, t]
    return tf.while_loop(lambda t, a: t < LENGTHS[i], step,
                         (tf.constant(0), tf.constant(0.)))[1]

  want, ws, got, gs = stateful_compare([v], [0.], body, 4,
                                       lambda: in_function(body, 4, jit=True))
  assert_same(got, want)
  assert_state(gs, ws)


def test_parallel_iterations_keep_loop_order_of_updates():
  v = tf.Variable(0.5)

  def body(i):
    v.assign(v * v + X[i, 0] * 0.1)
    return v.read_value()

  want, ws, got, gs = stateful_compare(
      [v], [0.5], body, 4, lambda: vectorize.pfor(body, 4, parallel_iterations=3))
  assert_same(got, want)
  assert_state(gs, ws)


def test_tf_function_body_updating_variable_with_prefix_sum():
  v = tf.Variable(0.)

  @tf.function
  def body(i):
    v.assign_add(tf.reduce_sum(X[i, :LENGTHS[i]]))
    return v.read_value()

  want, ws, got, gs = stateful_compare([v], [0.], body, 4,
                                       lambda: vectorize.pfor(body, 4))
  assert_same(got, want)
  assert_state(gs, ws)


def test_cond_with_updates_returning_ragged_prefix(monkeypatch):
  without_checked_env(monkeypatch)
  lens = tf.constant([3, 0, 4, 2])
  v = tf.Variable(1.)

  def body(i):
    def long_():
      v.assign_add(1.)
      return X[i, :lens[i]]
    def short():
      v.assign(v * 2.)
      return X[i, :1]
    return tf.cond(lens[i] > 2, long_, short)

  want, ws, got, gs = stateful_compare([v], [1.], body, 4,
                                       lambda: vectorize.pfor(body, 4))
  assert_same(got, want)
  assert_state(gs, ws)


def test_nonlinear_state_in_while_fills_tensorarray_and_splits_strings():
  v = tf.Variable(1.)
  text = tf.constant(["a b", "", "c d e", "f"])

  def body(i):
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    def step(t, ta):
      v.assign(v * 0.5 + X[i, t])
      return t + 1, ta.write(t, v.read_value())
    _, ta = tf.while_loop(lambda t, ta: t < LENGTHS[i], step, (tf.constant(0), ta))
    return ta.stack(), tf.strings.split(text[i])

  want, ws, got, gs = stateful_compare([v], [1.], body, 4,
                                       lambda: checked_pfor(body, 4))
  assert_same(got, want)
  assert_state(gs, ws)


def test_bool_and_int64_variables_nonlinear_updates():
  flag = tf.Variable(False)
  cnt = tf.Variable(tf.constant(0, tf.int64))

  def body(i):
    flag.assign(tf.math.logical_xor(flag, X[i, 0] > 2.))
    cnt.assign(cnt * 3 + tf.cast(i, tf.int64))
    return flag.read_value(), cnt.read_value()

  want, ws, got, gs = stateful_compare([flag, cnt], [False, 0], body, 4,
                                       lambda: vectorize.pfor(body, 4))
  assert_same(got, want)
  assert_state(gs, ws)
  flag.assign(False)
  cnt.assign(0)
  assert_same(runtime_n(body)(tf.constant(4)), want)
  assert_state([flag.numpy().tolist(), cnt.numpy().tolist()], ws)


def test_scatter_of_squared_element_per_step_with_mask_output():
  v = tf.Variable(tf.ones([3]))

  def body(i):
    def step(t):
      j = (i + t) % 3
      v.scatter_nd_update([[j]], [v[j] * v[j] + 0.5])
      return [t + 1]
    tf.while_loop(lambda t: t < LENGTHS[i], step, [tf.constant(0)])
    return tf.boolean_mask(v, v > 1.6)

  want, ws, got, gs = stateful_compare([v], [[1., 1., 1.]], body, 4,
                                       lambda: checked_pfor(body, 4))
  assert_same(got, want)
  assert_state(gs, ws)
