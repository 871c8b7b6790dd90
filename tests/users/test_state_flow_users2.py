"""State inside control flow: variables updated in while loops of per-example trip counts,
in cond branches, nested conds, TensorArrays in the same loop, Keras metrics; each run
eagerly, in tf.function and under XLA, compared with the Python loop (values and state)."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.users._util import assert_same, loop

rng = np.random.default_rng(11)
X = tf.constant(rng.normal(size=[5, 3]).astype(np.float32))
TRIPS = tf.constant([2, 0, 3, 1, 4])
LABELS = tf.constant([1, 0, 2, 2, 1])
MODES = ["eager", "function", "xla"]


def wrap(call, mode):
  if mode == "eager":
    return call
  return tf.function(call, jit_compile=(mode == "xla"))


def both(make, n, mode):
  """(pfor outputs, its state), (loop outputs, its state) from fresh state each."""
  state_l, body_l = make()
  ref = loop(body_l, n) if n else None
  state_v, body_v = make()
  got = wrap(lambda: vectorize.pfor(body_v, n), mode)()
  snap = lambda s: tf.nest.map_structure(lambda v: v.numpy(), s)
  return (got, snap(state_v)), (ref, snap(state_l))


def assert_ragged_values(got, ref):
  """pfor's ragged output equals tf.ragged.stack of the loop, value by value (README)."""
  assert isinstance(got, tf.RaggedTensor), type(got)
  assert got.dtype == ref.dtype
  assert got.shape[0] == ref.shape[0]
  g, r = got.to_list(), ref.to_list()
  assert [np.shape(x) for x in map(np.asarray, g)] == [np.shape(x) for x in map(np.asarray, r)]
  for a, b in zip(g, r):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-5, atol=1e-6)


def assert_state(sv, sl, exact=False):
  for a, b in zip(tf.nest.flatten(sv), tf.nest.flatten(sl)):
    if exact:
      np.testing.assert_array_equal(a, b)
    else:
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_while_assign_add_per_example_trips(mode):
  def make():
    v = tf.Variable(tf.zeros([3]))
    def body(i):
      def step(t, acc):
        v.assign_add(X[i] * tf.cast(t + 1, tf.float32))
        return t + 1, acc + X[i]
      _, acc = tf.while_loop(lambda t, acc: t < TRIPS[i], step, (0, tf.zeros([3])))
      return acc
    return v, body
  (got, sv), (ref, sl) = both(make, 5, mode)
  assert_same(got, ref)
  assert_state(sv, sl)


@pytest.mark.parametrize("mode", MODES)
def test_while_assign_sub_int_counter(mode):
  def make():
    budget = tf.Variable(100, dtype=tf.int64)
    def body(i):
      def step(t):
        budget.assign_sub(tf.cast(t + 1, tf.int64))
        return [t + 1]
      return tf.while_loop(lambda t: t < TRIPS[i], step, [tf.constant(0)])[0]
    return budget, body
  (got, sv), (ref, sl) = both(make, 5, mode)
  assert_same(got, ref)
  assert_state(sv, sl, exact=True)


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
def test_while_scatter_nd_add_histogram(mode):
  def make():
    hist = tf.Variable(tf.zeros([6], tf.int32))
    def body(i):
      def step(t):
        hist.scatter_nd_add([[(i + t) % 6]], [t + 1])
        return [t + 1]
      t = tf.while_loop(lambda t: t < TRIPS[i], step, [tf.constant(0)])[0]
      return t * 10
    return hist, body
  (got, sv), (ref, sl) = both(make, 5, mode)
  assert_same(got, ref)
  assert_state(sv, sl, exact=True)


@pytest.mark.parametrize("mode", MODES)
def test_while_tensorarray_and_variable_same_loop(mode):
  def make():
    total = tf.Variable(0.0)
    def body(i):
      ta = tf.TensorArray(tf.float32, size=4, element_shape=[3])   # fixed size: dense
      def step(t, ta):
        val = X[i] * tf.cast(t, tf.float32)
        total.assign_add(tf.reduce_sum(val))
        return t + 1, ta.write(t, val)
      _, ta = tf.while_loop(lambda t, ta: t < tf.minimum(TRIPS[i], 4),
                            step, (0, ta))
      return ta.stack()
    return total, body
  (got, sv), (ref, sl) = both(make, 5, mode)
  assert_same(got, ref)
  assert_state(sv, sl)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_while_dynamic_tensorarray_and_variable_ragged(mode):
  def make():
    steps = tf.Variable(0)
    def body(i):
      ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[3])
      def step(t, ta):
        steps.assign_add(1)
        return t + 1, ta.write(t, X[i] + tf.cast(t, tf.float32))
      _, ta = tf.while_loop(lambda t, ta: t < TRIPS[i], step, (0, ta))
      return ta.stack()
    return steps, body
  (got, sv), (ref, sl) = both(make, 5, mode)
  assert_ragged_values(got, ref)
  assert_state(sv, sl, exact=True)


@pytest.mark.parametrize("mode", MODES)
def test_cond_branches_update_different_variables(mode):
  def make():
    pos = tf.Variable(0.0)
    neg = tf.Variable(0.0)
    def body(i):
      s = tf.reduce_sum(X[i])
      def yes():
        pos.assign_add(s)
        return s * 2
      def no():
        neg.assign_sub(s)
        return -s
      return tf.cond(s > 0, yes, no)
    return (pos, neg), body
  (got, sv), (ref, sl) = both(make, 5, mode)
  assert_same(got, ref)
  assert_state(sv, sl)


@pytest.mark.parametrize("mode", MODES)
def test_nested_conds_in_while_update_counters(mode):
  def make():
    counts = tf.Variable(tf.zeros([3], tf.int32))
    def body(i):
      def step(t, y):
        k = (i + t) % 3
        def inner():
          return tf.cond(k == 0,
                         lambda: counts.scatter_nd_add([[0]], [1]).read_value()[0] * 0 + 1,
                         lambda: counts.scatter_nd_add([[1]], [1]).read_value()[0] * 0 + 2)
        def other():
          counts.scatter_nd_add([[2]], [1])
          return tf.constant(3)
        return t + 1, y + tf.cond(k < 2, inner, other)
      return tf.while_loop(lambda t, y: t < TRIPS[i], step, (0, 0))[1]
    return counts, body
  (got, sv), (ref, sl) = both(make, 5, mode)
  assert_same(got, ref)
  assert_state(sv, sl, exact=True)


@pytest.mark.parametrize("mode", MODES)
def test_keras_mean_metric_per_example(mode):
  def make():
    m = keras.metrics.Mean()
    def body(i):
      m.update_state(X[i])
      return tf.reduce_mean(X[i])
    return m.variables, body
  (got, sv), (ref, sl) = both(make, 5, mode)
  assert_same(got, ref)
  assert_state(sv, sl)


@pytest.mark.parametrize("mode", MODES)
def test_keras_accuracy_metric_per_example(mode):
  def make():
    acc = keras.metrics.Accuracy()
    def body(i):
      pred = tf.argmax(X[i], output_type=tf.int32)
      acc.update_state(LABELS[i:i + 1], pred[None])
      return pred
    return acc.variables, body
  (got, sv), (ref, sl) = both(make, 5, mode)
  assert_same(got, ref)
  assert_state(sv, sl)


@pytest.mark.parametrize("mode", MODES)
def test_keras_metric_in_cond(mode):
  def make():
    m = keras.metrics.Sum()
    def body(i):
      s = tf.reduce_sum(X[i])
      def upd():
        m.update_state(s)
        return s
      return tf.cond(s > 0, upd, lambda: tf.zeros([]))
    return m.variables, body
  (got, sv), (ref, sl) = both(make, 5, mode)
  assert_same(got, ref)
  assert_state(sv, sl)


@pytest.mark.parametrize("mode", MODES)
def test_n_zero_stateful_loop_leaves_state(mode):
  v = tf.Variable(tf.ones([3]))
  c = tf.Variable(7)
  def body(i):
    def step(t):
      v.assign_add(X[i])
      c.assign_add(1)
      return t + 1
    t = tf.while_loop(lambda t: t < TRIPS[i], step, [tf.constant(0)])[0]
    return tf.cast(t, tf.float32) * X[i]
  got = wrap(lambda: vectorize.pfor(body, 0), mode)()
  assert got.shape == (0, 3) and got.dtype == tf.float32
  np.testing.assert_array_equal(v.numpy(), np.ones(3, np.float32))
  assert c.numpy() == 7


def test_runtime_n_while_assign_add():
  def make():
    v = tf.Variable(0.0)
    def body(i):
      def step(t):
        v.assign_add(X[i][t % 3])
        return [t + 1]
      return tf.while_loop(lambda t: t < TRIPS[i], step, [tf.constant(0)])[0]
    return v, body
  vl, bl = make()
  ref = loop(bl, 4)
  vv, bv = make()
  f = tf.function(lambda n: vectorize.pfor(bv, n),
                  input_signature=[tf.TensorSpec([], tf.int32)])
  got = f(tf.constant(4))
  assert_same(got, ref)
  np.testing.assert_allclose(vv.numpy(), vl.numpy(), rtol=1e-5)
  got0 = f(tf.constant(0))
  assert got0.shape == (0,)
  np.testing.assert_allclose(vv.numpy(), vl.numpy(), rtol=1e-5)


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
def test_optimizer_free_sgd_counter(mode):
  """A per-example 'training' step written by hand: w -= lr * grad, applied in loop order."""
  def make():
    w = tf.Variable(tf.ones([3]))
    steps = tf.Variable(0, dtype=tf.int64)
    def body(i):
      xi = X[i]
      with tf.GradientTape() as tape:
        tape.watch(xi)
        loss = tf.reduce_sum(xi ** 2)
      g = tape.gradient(loss, xi)     # does not read w: update order does not matter
      w.assign_sub(0.1 * g)
      steps.assign_add(1)
      return loss
    return (w, steps), body
  (got, sv), (ref, sl) = both(make, 5, mode)
  assert_same(got, ref)
  assert_state(sv, sl)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_while_reads_variable_it_updates(mode):
  """Order dependent: each step reads the running total. The README allows a
  ConversionError here; a silent different value is not allowed."""
  def make():
    v = tf.Variable(0.0)
    def body(i):
      def step(t, seen):
        seen = seen + v.read_value()
        v.assign_add(1.0)
        return t + 1, seen
      return tf.while_loop(lambda t, s: t < TRIPS[i], step, (0, 0.0))[1]
    return v, body
  try:
    (got, sv), (ref, sl) = both(make, 5, mode)
  except (vectorize.ConversionError, tf.errors.InvalidArgumentError) as e:
    assert "line" in str(e) or ".py" in str(e), str(e)
    return
  assert_same(got, ref)
  assert_state(sv, sl)


def test_xla_scatter_in_while_silent_without_checked_mode(monkeypatch):
  """The same program as test_while_scatter_nd_add_histogram[xla], checked mode off:
  a user not using the checked mode gets the wrong state with no error."""
  monkeypatch.delenv("VECTORIZE_CHECKED", raising=False)
  def make():
    hist = tf.Variable(tf.zeros([6], tf.int32))
    def body(i):
      def step(t):
        hist.scatter_nd_add([[(i + t) % 6]], [t + 1])
        return [t + 1]
      return tf.while_loop(lambda t: t < TRIPS[i], step, [tf.constant(0)])[0]
    return hist, body
  (got, sv), (ref, sl) = both(make, 5, "xla")
  assert_same(got, ref)
  assert_state(sv, sl, exact=True)


def test_checked_mode_catches_xla_scatter_in_while():
  """Checked mode's promise: either the state is the loop's or CheckError names the variable."""
  hist = tf.Variable(tf.zeros([6], tf.int32))
  def body(i):
    def step(t):
      hist.scatter_nd_add([[(i + t) % 6]], [t + 1])
      return [t + 1]
    return tf.while_loop(lambda t: t < TRIPS[i], step, [tf.constant(0)])[0]
  try:
    tf.function(lambda: vectorize.pfor(body, 5), jit_compile=True)()
  except vectorize.CheckError as e:
    assert "variable" in str(e) and "differs" in str(e), str(e)
    return
  np.testing.assert_array_equal(hist.numpy(), [4, 6, 1, 3, 4, 2])
