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


import os
RS = np.random.RandomState(0)
X = tf.constant(RS.randn(4, 3).astype(np.float32))


def test_pfor_config_batch_mean_feeds_running_average():  # pfor_config batch stats feeding a running average
  running = tf.Variable(tf.zeros([3]))
  def body(i, pfor_config):
    m = pfor_config.reduce_mean(X[i])
    running.assign(0.9 * running + 0.1 * m)
    return X[i] - m, running.read_value()
  m = tf.reduce_mean(X, 0)
  want_r, r = [], np.zeros(3, np.float32)
  for i in range(4):
    r = 0.9 * r + 0.1 * m.numpy(); want_r.append(r)
  got = vectorize.pfor(body, 4)
  np.testing.assert_allclose(got[0].numpy(), (X - m).numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(got[1].numpy(), np.stack(want_r), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(running.numpy(), r, rtol=1e-5, atol=1e-6)

def test_tensorarray_of_variable_reads_while_assign_add_in_loop():  # TensorArray of variable values while assign_add in the loop
  v = tf.Variable(0.)
  def body(i):
    ta = tf.TensorArray(tf.float32, size=3)
    def step(k, ta):
      v.assign_add(tf.cast(i + k, tf.float32))
      return k + 1, ta.write(k, v.read_value())
    return tf.while_loop(lambda k, ta: k < 3, step, (0, ta))[1].stack()
  check_stateful(body, 4, [v], modes=("eager", "function"))

def test_static_hash_table_lookup_string_keys():  # static hash table lookup (read-only resource)
  table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(tf.constant(["cat", "dog", "emu"]), tf.constant([1, 2, 3], tf.int64)), -1)
  words = tf.constant([["cat", "x"], ["emu", "dog"], ["dog", "dog"], ["", "cat"]])
  body = lambda i: (table.lookup(words[i]), tf.reduce_sum(table.lookup(words[i])))
  want = loop(body, 4)
  assert_same(vectorize.pfor(body, 4), want)
  assert_same(tf.function(lambda: vectorize.pfor(body, 4))(), want)

def test_mutable_hash_table_insert_then_lookup():  # mutable hash table insert + lookup in body
  t = tf.lookup.experimental.MutableHashTable(tf.int64, tf.float32, -1.)
  keys = tf.constant([3, 1, 3, 2], tf.int64)
  def body(i):
    before = t.lookup(keys[i])
    t.insert(keys[i][None], tf.cast(i, tf.float32)[None] + 0.5)
    return before, t.size()
  want = loop(body, 4)
  t.remove(tf.constant([1, 2, 3], tf.int64))
  got = vectorize.pfor(body, 4)
  assert_same(got, want)

def test_tf_print_lines_match_loop_order():  # tf.print ordering to a file
  path = "/tmp/u4_print_%d.txt" % os.getpid()
  if os.path.exists(path): os.remove(path)
  body = lambda i: (tf.print("it", i, X[i, 0] > 0, output_stream="file://" + path), X[i] * 2)[1]
  for i in range(4): body(tf.constant(i))
  want = open(path).read(); os.remove(path)
  vectorize.pfor(body, 4)
  got = open(path).read(); os.remove(path)
  assert got == want, (got, want)

def test_failing_assertion_in_one_iteration_raises():  # assertion in body that fails in one iteration
  x = tf.constant([1., 2., 30., 4.])
  body = lambda i: (tf.debugging.assert_less(x[i], 10., message="too big"), x[i] * 2)[1]
  try:
    vectorize.pfor(body, 4); raise AssertionError("no error")
  except tf.errors.InvalidArgumentError as e:
    assert "too big" in str(e), str(e)[:300]
  ok = lambda i: (tf.debugging.assert_less(x[i], 100., message="too big"), x[i] * 2)[1]
  np.testing.assert_allclose(vectorize.pfor(ok, 4).numpy(), x.numpy() * 2)

def test_check_numerics_in_one_iteration_raises():  # check_numerics on one bad iteration
  x = tf.constant([1., 0., 4.])
  body = lambda i: tf.debugging.check_numerics(1. / x[i], "bad value")
  try:
    vectorize.pfor(body, 3); raise AssertionError("no error")
  except tf.errors.InvalidArgumentError as e:
    assert "bad value" in str(e), str(e)[:300]

def test_assertion_in_untaken_cond_branch_does_not_fire():  # assert in a cond branch not taken must not fire
  x = tf.constant([1., -2., 3.])
  body = lambda i: tf.cond(x[i] > 0, lambda: tf.sqrt(x[i]), lambda: (tf.debugging.assert_positive(x[i] + 5.), -x[i])[1])
  assert_same(vectorize.pfor(body, 3), loop(body, 3))
  body2 = lambda i: tf.cond(x[i] > 0, lambda: tf.sqrt(x[i]), lambda: (tf.debugging.assert_positive(x[i] * 0 + 1.), -x[i])[1])
  assert_same(vectorize.pfor(body2, 3), loop(body2, 3))
  body3 = lambda i: tf.cond(x[i] < 0, lambda: -x[i], lambda: (tf.debugging.assert_positive(x[i]), x[i])[1])
  assert_same(vectorize.pfor(body3, 3), loop(body3, 3))



def test_read_after_assign_add_inside_while_loop_minimal():
  v = tf.Variable(0.0)

  def body(i):
    def step(k, acc):
      v.assign_add(1.0)
      return k + 1, acc + v.read_value()
    return tf.while_loop(lambda k, a: k < 2, step, (0, 0.0))[1]

  check_stateful(body, 2, [v], modes=("eager", "function"))


def test_read_after_assign_add_inside_while_loop_per_iteration_trips():
  v = tf.Variable(0)

  def body(i):
    def step(k, acc):
      v.assign_add(1)
      return k + 1, acc + v.read_value()
    return tf.while_loop(lambda k, a: k < i + 1, step, (0, 0))[1]

  check_stateful(body, 3, [v], modes=("eager",))


def test_checked_mode_catches_read_after_write_in_while():
  v = tf.Variable(0.0)

  def body(i):
    def step(k, acc):
      v.assign_add(1.0)
      return k + 1, acc + v.read_value()
    return tf.while_loop(lambda k, a: k < 2, step, (0, 0.0))[1]

  with vectorize.checked(sample=None):
    try:
      got = vectorize.pfor(body, 2)
    except vectorize.CheckError as e:
      assert "While" in str(e)
      return
  np.testing.assert_allclose(got.numpy(), [3.0, 7.0])


def test_budget_variable_read_in_while_condition():
  c = tf.Variable(0)

  def body(i):
    def step(k):
      c.assign_add(1)
      return (k + 1,)
    return tf.while_loop(lambda k: tf.logical_and(k < 3, c < 5), step, (0,))[0]

  check_stateful(body, 3, [c], modes=("eager",))


def test_own_row_memory_updated_and_read_in_while_loop():
  mem = tf.Variable(tf.zeros([3, 2]))

  def body(i):
    def step(k, acc):
      mem[i].assign(mem[i] + tf.cast(k + 1, tf.float32))
      return k + 1, acc + tf.reduce_sum(mem[i])
    return tf.while_loop(lambda k, a: k < 3, step, (0, 0.0))[1]

  check_stateful(body, 3, [mem], modes=("eager",))


def test_counter_in_cond_inside_while_read_in_loop():
  c = tf.Variable(0)

  def body(i):
    def step(k, acc):
      tf.cond(k % 2 == 0, lambda: c.assign_add(1).op, lambda: tf.no_op())
      return k + 1, acc + c.read_value()
    return tf.while_loop(lambda k, a: k < 3, step, (0, 0))[1]

  check_stateful(body, 3, [c], modes=("eager",))
