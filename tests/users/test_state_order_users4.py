"""Ordering of variable effects around and inside pfor: reads before/after pfor in one
tf.function, nested pfor counters, chunks, affine and non-affine updates."""
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from ._util_users4 import _no_checked_env, loop, assert_same, check_stateful  # noqa: F401


def test_reads_around_pfor_in_one_function():
  v = tf.Variable(1.0)
  x = tf.constant([1.0, 2.0, 3.0])

  def body(i):
    v.assign_add(x[i])
    return v * 1.0

  @tf.function
  def f():
    before = v.read_value()
    out = vectorize.pfor(body, 3)
    after = v.read_value()
    return before, out, after

  before, out, after = f()
  assert before.numpy() == 1.0
  np.testing.assert_allclose(out.numpy(), [2.0, 4.0, 7.0])
  assert after.numpy() == 7.0


def test_two_pfors_sharing_a_variable_in_one_function():
  v = tf.Variable(0)

  @tf.function
  def f():
    a = vectorize.pfor(lambda i: v.assign_add(i + 1), 3)
    b = vectorize.pfor(lambda i: v.assign_add(10 * (i + 1)) * 1, 2)
    return a, b

  a, b = f()
  np.testing.assert_array_equal(a.numpy(), [1, 3, 6])
  np.testing.assert_array_equal(b.numpy(), [16, 36])
  assert v.numpy() == 36


def test_nested_pfor_counter_sequential_order():
  c = tf.Variable(0.0)

  def body(i):
    inner = vectorize.pfor(lambda j: c.assign_add(tf.cast(10 * i + j, tf.float32)) * 1.0, 3)
    return inner, c.read_value()

  def ref(i):
    vals = [c.assign_add(tf.cast(10 * i + j, tf.float32)).numpy() for j in range(3)]
    return tf.constant(vals), c.read_value()

  c.assign(0.0)
  want = loop(ref, 3)
  want_c = c.numpy()
  c.assign(0.0)
  got = vectorize.pfor(body, 3)
  assert_same(got, want)
  assert c.numpy() == want_c


def test_counter_with_parallel_iterations_chunks():
  v = tf.Variable(0.0)

  def body(i):
    before = v.read_value()
    v.assign_add(tf.cast(i, tf.float32) ** 2)
    return before

  v.assign(0.0)
  want = loop(body, 7)
  want_v = v.numpy()
  for mode in ("eager", "function"):
    v.assign(0.0)
    if mode == "eager":
      got = vectorize.pfor(body, 7, parallel_iterations=3)
    else:
      got = tf.function(lambda: vectorize.pfor(body, 7, parallel_iterations=3))()
    assert_same(got, want)
    assert v.numpy() == want_v, mode


def test_affine_update_with_per_iteration_coefficients():
  h = tf.Variable([1.0, -1.0])
  a = tf.constant([[0.5, 2.0], [1.5, 0.1], [-1.0, 1.0], [0.9, 0.9]])
  b = tf.constant([[1.0, 0.0], [0.0, 1.0], [2.0, -2.0], [0.1, 0.2]])

  def body(i):
    h.assign(h * a[i] + b[i])
    return h.read_value()

  check_stateful(body, 4, [h])


def test_self_scaling_update():
  v = tf.Variable(2.0, dtype=tf.float64)

  def body(i):
    v.assign_add(v * 0.5)
    return v.read_value() + tf.cast(i, tf.float64)

  check_stateful(body, 4, [v])


def test_bool_flag_accumulated_with_logical_or():
  flag = tf.Variable(False)
  x = tf.constant([1.0, 3.0, 0.0, 5.0])

  def body(i):
    was = flag.read_value()
    flag.assign(tf.logical_or(flag, x[i] > 2.0))
    return was, flag.read_value()

  check_stateful(body, 4, [flag], modes=("eager", "function"))


def test_variable_in_cond_predicate_after_update():
  v = tf.Variable(0)
  x = tf.constant([2, 1, 4, 3, 1])

  def body(i):
    v.assign_add(x[i])
    return tf.cond(v > 5, lambda: v * 100, lambda: -v)

  check_stateful(body, 5, [v], modes=("eager", "function"))


def test_scatter_max_and_min_tables():
  hi = tf.Variable(tf.fill([3], -10))
  lo = tf.Variable(tf.fill([3], 10))
  keys = tf.constant([0, 2, 0, 1, 2])
  vals = tf.constant([5, -3, 7, 1, 2])

  def body(i):
    hi.scatter_max(tf.IndexedSlices(vals[i][None], keys[i][None]))
    lo.scatter_min(tf.IndexedSlices(vals[i][None], keys[i][None]))
    return hi[keys[i]] - lo[keys[i]]

  check_stateful(body, 5, [hi, lo], modes=("eager", "function"))


def test_scatter_sub_then_gradient_of_read():
  table = tf.Variable(tf.ones([4, 2]))
  keys = tf.constant([3, 1, 3])
  g = tf.constant([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]])

  def body(i):
    table.scatter_sub(tf.IndexedSlices(g[i][None], keys[i][None]))
    with tf.GradientTape() as tape:
      row = tf.gather(table, keys[i])
      loss = tf.reduce_sum(row ** 2)
    return tf.convert_to_tensor(tape.gradient(loss, table)), loss

  check_stateful(body, 3, [table], modes=("eager", "function"), rtol=1e-5, atol=1e-6)


def test_sliced_assign_add_on_variable_row():
  acc = tf.Variable(tf.zeros([3, 2]))
  rows = tf.constant([0, 2, 0, 1])
  x = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])

  def body(i):
    acc[rows[i]].assign(acc[rows[i]] + x[i])
    return tf.reduce_sum(acc, axis=1)

  check_stateful(body, 4, [acc], modes=("eager", "function"))


def test_while_loop_updates_variable_with_early_exit():
  budget = tf.Variable(10)
  cost = tf.constant([3, 4, 2, 5])

  def body(i):
    def step(k, spent):
      budget.assign_sub(1)
      return k + 1, spent + 1
    _, spent = tf.while_loop(lambda k, s: tf.logical_and(k < cost[i], budget > 0), step,
                             (tf.constant(0), tf.constant(0)))
    return spent, budget.read_value()

  check_stateful(body, 4, [budget], modes=("eager", "function"))


def test_tf_function_body_with_variable_update():
  v = tf.Variable(0.0)

  @tf.function
  def body(i):
    v.assign_add(tf.cast(i, tf.float32) + 0.5)
    return v.read_value() * 2.0

  check_stateful(body, 4, [v], modes=("eager", "function"))
