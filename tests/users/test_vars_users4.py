"""Per-example code that reads and writes tf.Variables inside the pfor body.

Each test runs the plain loop, records the outputs and the variables' final values, resets
the variables, runs pfor, and compares both.
"""
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from ._util_users4 import _no_checked_env, loop, assert_same, check_stateful as _check_stateful  # noqa: F401


def test_counter_read_before_and_after_assign_add():
  v = tf.Variable(0.0)

  def body(i):
    before = v.read_value()
    v.assign_add(tf.cast(i, tf.float32) + 1.0)
    after = v.read_value()
    return before, after, after - before

  _check_stateful(body, 5, [v])


def test_counter_n_zero():
  v = tf.Variable(3.0)

  def body(i):
    v.assign_add(tf.cast(i, tf.float32))
    return v.read_value()

  _check_stateful(body, 0, [v])
  got = vectorize.pfor(body, 0)
  assert tuple(got.shape) == (0,)
  assert v.numpy() == 3.0


def test_int64_step_counter():
  step = tf.Variable(tf.constant(10, tf.int64))

  def body(i):
    s = step.assign_add(1)
    return s * 2, tf.cast(i, tf.int64) + step

  _check_stateful(body, 4, [step])


def test_assign_sub_vector_sgd_steps():
  w = tf.Variable([1.0, -2.0, 0.5])
  g = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3) / 10)

  def body(i):
    w.assign_sub(0.1 * g[i])
    return w.read_value(), tf.reduce_sum(w * w)

  _check_stateful(body, 4, [w])


def test_moving_average_ema():
  ema = tf.Variable(tf.zeros([2], tf.float64))
  x = tf.constant(np.random.RandomState(0).randn(6, 2))

  def body(i):
    ema.assign(0.9 * ema + 0.1 * x[i])
    return ema.read_value()

  _check_stateful(body, 6, [ema])


def test_moving_average_debiased_with_step():
  mean = tf.Variable(tf.zeros([3]))
  step = tf.Variable(0.0)
  x = tf.constant(np.random.RandomState(1).randn(5, 3).astype(np.float32))

  def body(i):
    step.assign_add(1.0)
    mean.assign(0.8 * mean + 0.2 * x[i])
    return mean / (1.0 - 0.8 ** step)

  _check_stateful(body, 5, [mean, step], rtol=1e-4, atol=1e-5)


def test_scatter_add_memory_table():
  mem = tf.Variable(tf.zeros([4, 2]))
  keys = tf.constant([1, 3, 1, 0, 3, 1])
  vals = tf.constant(np.arange(12, dtype=np.float32).reshape(6, 2))

  def body(i):
    mem.scatter_add(tf.IndexedSlices(vals[i][None], keys[i][None]))
    return mem[keys[i]], tf.reduce_sum(mem)

  _check_stateful(body, 6, [mem])


def test_scatter_update_duplicate_keys_last_write_wins():
  mem = tf.Variable(-tf.ones([3, 2]))
  keys = tf.constant([2, 0, 2, 2, 1])
  vals = tf.constant(np.arange(10, dtype=np.float32).reshape(5, 2))

  def body(i):
    old = mem[keys[i]]
    mem.scatter_update(tf.IndexedSlices(vals[i][None], keys[i][None]))
    return old, mem.read_value()

  _check_stateful(body, 5, [mem])


def test_slice_assign_row_then_sum():
  table = tf.Variable(tf.zeros([4, 3]))
  rows = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3) + 1)

  def body(i):
    table[i].assign(rows[i] * 2.0)
    return tf.reduce_sum(table), table[i] - rows[i]

  _check_stateful(body, 4, [table])


def test_variable_read_in_cond_branches():
  a = tf.Variable([1.0, 2.0])
  b = tf.Variable([10.0, 20.0])
  x = tf.constant([0.5, -1.0, 2.0, -0.5, 0.0])

  def body(i):
    return tf.cond(x[i] > 0, lambda: a * x[i], lambda: b + x[i])

  _check_stateful(body, 5, [a, b])


def test_variable_updated_in_both_branches_of_cond():
  c = tf.Variable(0.0)

  def body(i):
    out = tf.cond(i % 2 == 0, lambda: c.assign_add(tf.cast(i, tf.float32) + 1.0),
                  lambda: c.assign_sub(0.5))
    return out, c.read_value()

  _check_stateful(body, 5, [c])


def test_variable_read_inside_while_loop():
  w = tf.Variable(np.arange(6, dtype=np.float32) + 1.0)

  def body(i):
    _, acc = tf.while_loop(lambda k, a: k < i + 1, lambda k, a: (k + 1, a + w[k] * w[k]),
                           (tf.constant(0), tf.constant(0.0)))
    return acc

  _check_stateful(body, 5, [w])


def test_assign_add_inside_while_loop_per_example_trips():
  hits = tf.Variable(0)

  def body(i):
    def step(k):
      hits.assign_add(1)
      return (k + 1,)
    k = tf.while_loop(lambda k: k < i, step, (tf.constant(0),))[0]
    return k, hits.read_value()

  # Sequential: hits after iteration i is i*(i+1)/2.
  _check_stateful(body, 4, [hits], modes=("eager", "function"))


def test_keras_mean_metric_updated_in_body():
  m = tf.keras.metrics.Mean()
  x = tf.constant([1.0, 3.0, 5.0, 7.0])

  def body(i):
    m.update_state(x[i])
    return m.result()

  _check_stateful(body, 4, list(m.variables), modes=("eager", "function"))


def test_keras_accuracy_metric_updated_in_body():
  acc = tf.keras.metrics.SparseCategoricalAccuracy()
  labels = tf.constant([0, 1, 2, 1])
  logits = tf.constant([[2.0, 1.0, 0.0], [0.0, 1.0, 3.0], [0.0, 0.0, 5.0], [1.0, 2.0, 0.0]])

  def body(i):
    acc.update_state(labels[i][None], logits[i][None])
    return acc.result()

  _check_stateful(body, 4, list(acc.variables), modes=("eager",))


def test_checked_mode_variable_body():
  v = tf.Variable(tf.zeros([2]))
  x = tf.constant(np.arange(8, dtype=np.float32).reshape(4, 2))

  def body(i):
    v.assign_add(x[i])
    return v * 2.0

  want = loop(body, 4)
  want_v = v.numpy()
  v.assign(tf.zeros([2]))
  with vectorize.checked(sample=None):
    got = vectorize.pfor(body, 4)
  assert_same(got, want)
  np.testing.assert_allclose(v.numpy(), want_v)


def test_running_max_non_affine_update():
  best = tf.Variable(-100.0)
  x = tf.constant([3.0, 1.0, 7.0, 2.0, 9.0, -1.0])

  def body(i):
    improved = x[i] > best
    best.assign(tf.maximum(best, x[i]))
    return improved, best.read_value()

  _check_stateful(body, 6, [best])


def test_two_coupled_variables():
  a = tf.Variable(1.0)
  b = tf.Variable(2.0)

  def body(i):
    a.assign_add(b)
    b.assign(a * 0.5 + tf.cast(i, tf.float32))
    return a.read_value(), b.read_value()

  _check_stateful(body, 4, [a, b])


def test_assign_per_iteration_value_last_write_wins():
  last = tf.Variable(tf.zeros([2], tf.int32))
  x = tf.constant([[1, 2], [3, 4], [5, 6]])

  def body(i):
    prev = last.read_value()
    last.assign(x[i])
    return prev

  _check_stateful(body, 3, [last])


def test_string_variable_last_write_and_read():
  name = tf.Variable("start")
  names = tf.constant(["a", "bb", "ccc"])

  def body(i):
    prev = name.read_value()
    name.assign(tf.strings.join([names[i], "!"]))
    return prev, tf.strings.length(name.read_value())

  _check_stateful(body, 3, [name], modes=("eager", "function"))


def test_write_in_cond_then_read_after():
  total = tf.Variable(0.0)
  x = tf.constant([1.0, -2.0, 3.0, -4.0, 5.0])

  def body(i):
    tf.cond(x[i] > 0, lambda: total.assign_add(x[i]).op, lambda: tf.no_op())
    return total.read_value()

  _check_stateful(body, 5, [total], modes=("eager", "function"))


def test_counter_under_xla():
  v = tf.Variable(0.0)
  x = tf.constant([1.0, 2.0, 3.0, 4.0])

  def body(i):
    before = v.read_value()
    v.assign_add(x[i])
    return before * 10.0 + v

  _check_stateful(body, 4, [v], modes=("xla",))


def test_scatter_nd_add_histogram():
  hist = tf.Variable(tf.zeros([5], tf.int32))
  bins = tf.constant([[0, 1], [1, 1], [4, 2], [0, 0]])

  def body(i):
    hist.scatter_nd_add(bins[i][:, None], tf.ones([2], tf.int32))
    return tf.reduce_max(hist), hist[bins[i][0]]

  _check_stateful(body, 4, [hist], modes=("eager", "function"))


def test_memory_write_then_read_in_while():
  mem = tf.Variable(tf.zeros([6]))

  def body(i):
    mem[i].assign(tf.cast(i, tf.float32) + 1.0)
    _, s = tf.while_loop(lambda k, s: k <= i, lambda k, s: (k + 1, s + mem[k]),
                         (tf.constant(0), tf.constant(0.0)))
    return s

  _check_stateful(body, 6, [mem], modes=("eager", "function"))


# Variables of other dtypes and writes under control flow, one program per name.
def mk(name):
  if name == "bool_read_in_cond":
    f = tf.Variable(False); x = tf.constant([1., 3., 0., 5.])
    def body(i):
      f.assign(tf.math.logical_xor(f, x[i] > 2.))
      return tf.cond(f, lambda: x[i], lambda: -x[i])
    return body, [f]
  if name == "int64_scatter_update":
    t = tf.Variable(tf.zeros([3], tf.int64)); k = tf.constant([0, 2, 0, 1])
    def body(i):
      t.scatter_update(tf.IndexedSlices(tf.cast(i, tf.int64)[None] + 7, k[i][None]))
      return t.read_value()
    return body, [t]
  if name == "string_scatter_update":
    t = tf.Variable(["", "", ""]); k = tf.constant([0, 2, 0, 1]); w = tf.constant(["a", "b", "c", "d"])
    def body(i):
      t.scatter_update(tf.IndexedSlices(w[i][None], k[i][None]))
      return tf.strings.reduce_join(t.read_value())
    return body, [t]
  if name == "string_assign_only":
    t = tf.Variable("x"); w = tf.constant(["a", "b", "c"])
    def body(i):
      t.assign(w[i]); return tf.constant(1)
    return body, [t]
  if name == "string_read_only_after_invariant_assign":
    t = tf.Variable("x")
    def body(i):
      t.assign("y"); return t.read_value()
    return body, [t]
  if name == "int32_read_before_assign":
    t = tf.Variable(5); x = tf.constant([1, 2, 3])
    def body(i):
      p = t.read_value(); t.assign(x[i] * p); return p
    return body, [t]
  if name == "float16_counter":
    t = tf.Variable(tf.constant(0., tf.float16))
    def body(i):
      t.assign_add(tf.cast(i, tf.float16)); return t.read_value()
    return body, [t]
  if name == "complex_counter":
    t = tf.Variable(tf.constant(0j, tf.complex64))
    def body(i):
      t.assign_add(tf.complex(tf.cast(i, tf.float32), 1.)); return t.read_value()
    return body, [t]
  if name == "uint8_assign":
    t = tf.Variable(tf.constant([0, 0], tf.uint8)); x = tf.constant([[1, 2], [3, 4], [5, 6]], tf.uint8)
    def body(i):
      p = t.read_value(); t.assign(x[i]); return p
    return body, [t]
  if name == "cond_inside_while_writes":
    v = tf.Variable(0.)
    def body(i):
      def step(k):
        tf.cond(k % 2 == 0, lambda: v.assign_add(1.).op, lambda: v.assign_sub(0.25).op)
        return (k + 1,)
      tf.while_loop(lambda k: k < i + 1, step, (0,))
      return v.read_value()
    return body, [v]
  if name == "assign_in_while_non_affine":
    v = tf.Variable(1.)
    def body(i):
      def step(k):
        v.assign(tf.sqrt(v + tf.cast(k, tf.float32)))
        return (k + 1,)
      tf.while_loop(lambda k: k < i, step, (0,))
      return v.read_value()
    return body, [v]
  if name == "switch_case_writes":
    v = tf.Variable([0., 0., 0.])
    def body(i):
      tf.switch_case(i % 3, [lambda: v[0].assign(v[0] + 1.).op, lambda: v[1].assign(v[1] + 2.).op, lambda: v.assign(v * 0.5).op])
      return v.read_value()
    return body, [v]
  if name == "resource_gather_nd_read":
    v = tf.Variable(tf.reshape(tf.range(12.), [3, 4]))
    idx = tf.constant([[0, 1], [2, 3], [1, 1]])
    def body(i):
      v.scatter_nd_update(idx[i][None], [100. + tf.cast(i, tf.float32)])
      return tf.gather_nd(v, idx), v.sparse_read([0, 2])
    return body, [v]
  if name == "assign_returns_used_in_math":
    v = tf.Variable(2.)
    def body(i):
      a = v.assign_add(1.)
      b = v.assign(a * 2.)
      return a + b
    return body, [v]


_VAR_PROGRAMS = ["bool_read_in_cond", "int64_scatter_update", "string_scatter_update",
                 "string_assign_only", "int32_read_before_assign", "float16_counter",
                 "complex_counter", "uint8_assign", "cond_inside_while_writes",
                 "assign_in_while_non_affine", "switch_case_writes",
                 "resource_gather_nd_read", "assign_returns_used_in_math"]


@pytest.mark.parametrize("name", _VAR_PROGRAMS)
def test_variable_program(name):
  body, vs = mk(name)
  n = 3 if name in ("string_assign_only", "int32_read_before_assign", "uint8_assign",
                    "resource_gather_nd_read") else 4
  modes = ("eager", "runtime_n") if name in ("float16_counter", "complex_counter") else (
      "eager", "function")
  _check_stateful(body, n, vs, modes=modes, rtol=1e-3, atol=1e-3)


def test_string_variable_assign_then_read_minimal():
  t = tf.Variable("x")
  w = tf.constant(["a", "b", "c"])

  def body(i):
    t.assign(w[i])
    return t.read_value()

  _check_stateful(body, 3, [t], modes=("eager",))
