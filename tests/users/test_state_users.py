"""Stateful bodies: tf.Variable updates must leave the state a Python loop leaves."""
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.users._util import assert_same, loop

rng = np.random.default_rng(3)
X = tf.constant(rng.normal(size=[5, 3]).astype(np.float32))


def run_both(make_body, n, fn_wrap=None, **kw):
  """Runs body(i) in a Python loop and through pfor on fresh state; returns both."""
  state_l, body_l = make_body()
  ref = loop(body_l, n) if n else None
  state_v, body_v = make_body()
  call = lambda: vectorize.pfor(body_v, n, **kw)
  if fn_wrap is not None:
    call = fn_wrap(call)
  got = call()
  return (state_v, got), (state_l, ref)


def test_assign_add_counter_eager():
  def make():
    v = tf.Variable(0.0)
    def body(i):
      v.assign_add(tf.reduce_sum(X[i]))
      return X[i] * 2
    return v, body
  (sv, got), (sl, ref) = run_both(make, 5)
  assert_same(got, ref)
  np.testing.assert_allclose(sv.numpy(), sl.numpy(), rtol=1e-5)


def test_assign_add_in_tf_function_and_xla():
  for jit in (False, True):
    def make():
      v = tf.Variable(tf.zeros([3]))
      def body(i):
        v.assign_add(X[i] ** 2)
        return tf.reduce_sum(X[i])
      return v, body
    (sv, got), (sl, ref) = run_both(make, 5, lambda c: tf.function(c, jit_compile=jit))
    assert_same(got, ref)
    np.testing.assert_allclose(sv.numpy(), sl.numpy(), rtol=1e-5)


def test_assign_add_int_counter_in_cond():
  def make():
    count = tf.Variable(0, dtype=tf.int64)
    def body(i):
      return tf.cond(tf.reduce_sum(X[i]) > 0,
                     lambda: count.assign_add(1).read_value() * 0 + 1,
                     lambda: tf.constant(0, tf.int64))
    return count, body
  (sv, got), (sl, ref) = run_both(make, 5)
  assert_same(got, ref)
  assert sv.numpy() == sl.numpy()


def test_assign_add_in_autograph_if():
  def make():
    pos = tf.Variable(0.0)
    @tf.function
    def body(i):
      s = tf.reduce_sum(X[i])
      if s > 0:
        pos.assign_add(s)
      return s
    return pos, body
  (sv, got), (sl, ref) = run_both(make, 5)
  assert_same(got, ref)
  np.testing.assert_allclose(sv.numpy(), sl.numpy(), rtol=1e-5)


def test_assign_add_in_while_loop_per_example_count():
  def make():
    acc = tf.Variable(0)
    def body(i):
      def step(t):
        acc.assign_add(t)
        return [t + 1]
      tf.while_loop(lambda t: t < i, step, [0])
      return i * 2
    return acc, body
  (sv, got), (sl, ref) = run_both(make, 5)
  assert_same(got, ref)
  assert sv.numpy() == sl.numpy() == sum(sum(range(i)) for i in range(5))


def test_loop_invariant_assign():
  def make():
    v = tf.Variable(1.0)
    def body(i):
      v.assign(5.0)
      return tf.cast(i, tf.float32)
    return v, body
  (sv, got), (sl, ref) = run_both(make, 4)
  assert_same(got, ref)
  assert sv.numpy() == sl.numpy() == 5.0


def test_read_variable_after_assign_add_order_dependent():
  """Each iteration reads the running total after adding: iteration i sees sum_{j<=i}."""
  def make():
    v = tf.Variable(0.0)
    def body(i):
      with tf.control_dependencies([v.assign_add(tf.cast(i, tf.float32))]):
        return v.read_value()
    return v, body
  try:
    (sv, got), (sl, ref) = run_both(make, 4, fallback_to_while_loop=False)
  except ValueError as e:  # documented: order-dependent -> ConversionError naming it
    assert isinstance(e, vectorize.ConversionError)
    assert "assign" in str(e).lower() or "variable" in str(e).lower() or "state" in str(e).lower(), str(e)
    return
  assert_same(got, ref)
  assert sv.numpy() == sl.numpy()


def test_read_variable_after_assign_add_with_fallback():
  def make():
    v = tf.Variable(0.0)
    def body(i):
      with tf.control_dependencies([v.assign_add(tf.cast(i, tf.float32))]):
        return v.read_value()
    return v, body
  (sv, got), (sl, ref) = run_both(make, 4)
  assert_same(got, ref)
  assert sv.numpy() == sl.numpy()


def test_stacked_assign_last_writer_wins():
  def make():
    v = tf.Variable(tf.zeros([3]))
    def body(i):
      v.assign(X[i])
      return tf.constant(1)
    return v, body
  try:
    (sv, got), (sl, ref) = run_both(make, 5)
  except vectorize.ConversionError as e:
    assert "assign" in str(e).lower() or "variable" in str(e).lower(), str(e)
    return
  assert_same(got, ref)
  np.testing.assert_allclose(sv.numpy(), sl.numpy())


def test_scatter_add_histogram():
  def make():
    hist = tf.Variable(tf.zeros([4], tf.int32))
    ids = tf.constant([0, 3, 3, 1, 0])
    def body(i):
      hist.scatter_nd_add(ids[i][None, None], [1])
      return ids[i]
    return hist, body
  (sv, got), (sl, ref) = run_both(make, 5)
  assert_same(got, ref)
  np.testing.assert_array_equal(sv.numpy(), sl.numpy())


def test_assign_add_n_zero_leaves_state():
  v = tf.Variable(7.0)
  def body(i):
    v.assign_add(1.0)
    return tf.cast(i, tf.float32)
  out = vectorize.pfor(body, 0)
  assert out.shape == (0,)
  assert v.numpy() == 7.0


def test_assign_add_runtime_n():
  v = tf.Variable(0.0)
  def body(i):
    v.assign_add(tf.cast(i, tf.float32))
    return tf.cast(i, tf.float32)
  f = tf.function(lambda n: vectorize.pfor(body, n), input_signature=[tf.TensorSpec([], tf.int32)])
  f(tf.constant(4))
  assert v.numpy() == 6.0
  f(tf.constant(0))
  assert v.numpy() == 6.0


def test_keras_metric_mean_update():
  import keras
  def make():
    m = keras.metrics.Mean()
    m.update_state(0.0, sample_weight=0.0)
    def body(i):
      m.update_state(tf.reduce_sum(X[i]))
      return tf.reduce_sum(X[i])
    return m, body
  (mv, got), (ml, ref) = run_both(make, 5)
  assert_same(got, ref)
  np.testing.assert_allclose(mv.result().numpy(), ml.result().numpy(), rtol=1e-5)


def test_stateful_random_generator_body_shape():
  g = tf.random.Generator.from_seed(1)
  out = vectorize.pfor(lambda i: g.normal([3]) + tf.cast(i, tf.float32), 4)
  assert out.shape == (4, 3)
  assert not np.allclose(out[0].numpy(), out[1].numpy() - 1.0)
