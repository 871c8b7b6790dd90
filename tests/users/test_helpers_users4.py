"""Helpers and mixed programs: per_example_gradients with BatchNorm, tapes around pfor, vectorized_map with state, map_and_batch, jacobians in graph mode."""
import numpy as np
import pytest
import tensorflow as tf
import keras

import vectorize
from ._util_users4 import _no_checked_env, check_stateful, loop, assert_same, to_np  # noqa: F401

RS = np.random.RandomState(0)
def test_nested_pfor_counter_read_in_inner_cond():  # nested pfor: counter read in cond of inner
  c = tf.Variable(0.)
  def body(i):
    def inner(j):
      c.assign_add(1.)
      return tf.cond(j % 2 == 0, lambda: c * 10., lambda: -c)
    return vectorize.pfor(inner, 3)
  def ref(i):
    out = []
    for j in range(3):
      c.assign_add(1.)
      out.append(c.numpy() * 10. if j % 2 == 0 else -c.numpy())
    return tf.constant(out)
  c.assign(0.); want = loop(ref, 3); wc = c.numpy(); c.assign(0.)
  got = vectorize.pfor(body, 3); assert_same(got, want); assert c.numpy() == wc, (c.numpy(), wc)

def test_per_example_gradients_batchnorm_training_moving_stats():  # per_example_gradients with BN training=True updating moving stats
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.BatchNormalization(momentum=0.5), keras.layers.Dense(1)])
  x = tf.constant(RS.randn(4, 2, 3).astype(np.float32))
  def loss_fn(xi):
    return tf.reduce_sum(model(xi, training=True) ** 2)
  st = [model.layers[1].moving_mean, model.layers[1].moving_variance]
  init = [v.numpy() for v in st]
  def ref(i):
    with tf.GradientTape() as t:
      l = loss_fn(x[i])
    return t.gradient(l, model.trainable_variables)
  want = loop(ref, 4); ws = [v.numpy() for v in st]
  for v, a in zip(st, init): v.assign(a)
  got = vectorize.per_example_gradients(loss_fn, model.trainable_variables, x)
  assert_same(got, want, rtol=1e-4, atol=1e-4)  # BN over 2 rows: gradients of ~0 are rounding noise
  for v, a in zip(st, ws): np.testing.assert_allclose(v.numpy(), a, rtol=1e-5, atol=1e-6)

def test_tape_outside_pfor_of_body_that_counts():  # gradient through pfor (tape outside) of a body that also counts
  w = tf.Variable([1., 2., 3.]); c = tf.Variable(0.)
  x = tf.constant(RS.randn(4, 3).astype(np.float32))
  def body(i):
    c.assign_add(1.)
    return tf.reduce_sum(tf.sin(x[i] * w)) * c
  with tf.GradientTape() as t:
    out = vectorize.pfor(body, 4)
    l = tf.reduce_sum(out)
  g = t.gradient(l, w)
  c.assign(0.)
  with tf.GradientTape() as t:
    outs = [body(tf.constant(i)) for i in range(4)]
    l2 = tf.add_n(outs)
  g2 = t.gradient(l2, w)
  np.testing.assert_allclose(out.numpy(), np.array([o.numpy() for o in outs]), rtol=1e-5)
  np.testing.assert_allclose(g.numpy(), g2.numpy(), rtol=1e-5)

def test_vectorized_map_with_variable_update():  # vectorized_map with variable update (sequential semantics)
  v = tf.Variable(0.)
  x = tf.constant([1., 2., 3., 4.])
  f = lambda e: v.assign_add(e) * 1.0
  v.assign(0.); got = vectorize.vectorized_map(f, x).numpy(); gv = v.numpy()
  v.assign(0.); want = np.array([f(e).numpy() for e in x]); wv = v.numpy()
  np.testing.assert_allclose(got, want); assert gv == wv

def test_xla_cond_writes_both_branches():  # jit + cond writes
  v = tf.Variable(0.)
  x = tf.constant([1., -2., 3., -4., 5.])
  def body(i):
    tf.cond(x[i] > 0, lambda: v.assign_add(x[i]).op, lambda: v.assign_sub(1.).op)
    return v.read_value()
  check_stateful(body, 5, [v], modes=("xla",))

def test_parallel_iterations_with_ragged_output_is_clear_error():  # map_fn with variable and ragged output, parallel_iterations ragged
  x = tf.constant(RS.randn(5, 4).astype(np.float32)); L = tf.constant([1, 4, 0, 2, 3])
  body = lambda i: tf.sort(x[i, :L[i]])
  with pytest.raises(vectorize.ConversionError, match=r"(?s)parallel_iterations cannot chunk.*To fix"):
    vectorize.pfor(body, 5, parallel_iterations=2)
  # dense outputs chunk fine
  dense = lambda i: tf.reduce_sum(tf.sort(x[i, :L[i]]))
  assert_same(vectorize.pfor(dense, 5, parallel_iterations=2), loop(dense, 5))

def test_jacobian_fn_of_rnn_while_loop_reading_variables():  # jacobian_fn of a function reading variables and with per-example while loop
  w = tf.Variable([[0.5, -0.2], [0.1, 0.3]])
  def f(x):  # x: [2]
    def step(k, h): return k + 1, tf.tanh(tf.linalg.matvec(w, h) + x)
    return tf.while_loop(lambda k, h: k < 3, step, (0, tf.zeros([2])))[1]
  x = tf.constant([0.3, -0.7])
  got = vectorize.jacobian_fn(f)(x)
  with tf.GradientTape(persistent=True) as t:
    t.watch(x); y = f(x)
  want = t.jacobian(y, x, experimental_use_pfor=False)
  np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)

def test_map_and_batch_prefix_reductions():  # data.map_and_batch with per-example variable-length processing
  ds = tf.data.Dataset.from_tensor_slices((tf.constant(RS.randn(7, 5).astype(np.float32)), tf.constant([1, 5, 0, 3, 2, 4, 5])))
  fn = lambda x, l: (tf.reduce_sum(x[:l]), tf.reduce_max(tf.concat([x[:l], [-9.]], 0)))
  got = list(ds.apply(vectorize.data.map_and_batch(fn, 3)))
  want = list(ds.map(fn).batch(3))
  for a, b in zip(got, want):
    for u, v in zip(a, b): np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-5)

def test_tf1_batch_jacobian_and_jacobian_agree():  # batch_jacobian graph-mode
  x = tf.constant(RS.randn(3, 4).astype(np.float32))
  # graph-mode TF1 style
  with tf.Graph().as_default():
    xp = tf.constant(x.numpy()); y = tf.nn.softmax(xp * 2.)
    j = vectorize.batch_jacobian(y, xp)
    j2 = vectorize.jacobian(y, xp)
    with tf.compat.v1.Session() as s: a, b = s.run([j, j2])
  for i in range(3): np.testing.assert_allclose(a[i], b[i, :, i, :], rtol=1e-5, atol=1e-6)

