"""GradientTape inside bodies, nested tapes, jacobians, hessians, gradients through pfor."""
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.users._util import assert_same, loop, rows

rng = np.random.default_rng(2)
X = tf.constant(rng.normal(size=[5, 3]).astype(np.float32))
W = tf.Variable(rng.normal(size=[3, 4]).astype(np.float32))


def grad_body(i):
  with tf.GradientTape() as tape:
    y = tf.reduce_sum(tf.sin(tf.matmul(X[i][None], W)))
  return tape.gradient(y, W)


def test_per_example_grad_eager():
  assert_same(vectorize.pfor(grad_body, 5), loop(grad_body, 5))


def test_per_example_grad_xla():
  f = tf.function(lambda: vectorize.pfor(grad_body, 5), jit_compile=True)
  assert_same(f(), loop(grad_body, 5))


def test_per_example_grad_runtime_n():
  f = tf.function(lambda n: vectorize.pfor(grad_body, n),
                  input_signature=[tf.TensorSpec([], tf.int32)])
  assert_same(f(tf.constant(3)), loop(grad_body, 3))
  assert f(tf.constant(0)).shape[1:] == (3, 4)


def test_nested_tapes_second_derivative():
  def fn(i):
    x = X[i]
    with tf.GradientTape() as t2:
      t2.watch(x)
      with tf.GradientTape() as t1:
        t1.watch(x)
        y = tf.reduce_sum(x ** 3 * tf.cos(x))
      g = t1.gradient(y, x)
    return t2.gradient(g, x)
  assert_same(vectorize.pfor(fn, 5), loop(fn, 5))


def test_tape_jacobian_inside_body():
  def fn(i):
    x = X[i]
    with tf.GradientTape() as t:
      t.watch(x)
      y = tf.tanh(x[:, None] * x[None, :])
    return t.jacobian(y, x)
  assert_same(vectorize.pfor(fn, 5), loop(fn, 5))


def test_gradient_through_pfor_output():
  v = tf.Variable(rng.normal(size=[3]).astype(np.float32))
  with tf.GradientTape() as tape:
    out = vectorize.pfor(lambda i: tf.reduce_sum(tf.exp(X[i] * v)), 5)
    loss = tf.reduce_sum(out ** 2)
  g = tape.gradient(loss, v)
  with tf.GradientTape() as tape:
    out = tf.stack([tf.reduce_sum(tf.exp(X[i] * v)) for i in range(5)])
    loss = tf.reduce_sum(out ** 2)
  assert_same(g, tape.gradient(loss, v))


def test_gradient_through_vectorized_map_in_tf_function():
  v = tf.Variable(rng.normal(size=[3, 2]).astype(np.float32))

  @tf.function
  def f():
    with tf.GradientTape() as tape:
      out = vectorize.vectorized_map(lambda r: tf.nn.softplus(tf.linalg.matvec(v, r, transpose_a=True)), X)
      loss = tf.reduce_mean(out)
    return tape.gradient(loss, v)
  with tf.GradientTape() as tape:
    loss = tf.reduce_mean(tf.nn.softplus(tf.matmul(X, v)))
  assert_same(f(), tape.gradient(loss, v))


def test_jacobian_fn_nested_input():
  f = lambda xs: {"u": tf.sin(xs["a"]) * xs["b"][0], "v": tf.reduce_sum(xs["a"] ** 2)}
  x = {"a": tf.constant([0.1, 0.2, 0.3]), "b": tf.constant([2.0, 1.0])}
  got = vectorize.jacobian_fn(f)(x)
  with tf.GradientTape(persistent=True) as t:
    t.watch(x)
    y = f(x)
  for k in ("u", "v"):
    ref = t.jacobian(y[k], x)
    assert_same(got[k]["a"], ref["a"])
    assert_same(got[k]["b"], ref["b"])


def test_batch_jacobian_fn_matches_tape():
  w = tf.constant(rng.normal(size=[3, 4]).astype(np.float32))
  f = lambda x: tf.tanh(tf.matmul(x, w)) * x[:, :1]
  got = vectorize.batch_jacobian_fn(f)(X)
  with tf.GradientTape() as t:
    t.watch(X)
    y = f(X)
  assert_same(got, t.batch_jacobian(y, X))


def test_jacobian_graph_mode_with_variable():
  @tf.function
  def f(x):
    y = tf.matmul(x, W) ** 2
    return vectorize.jacobian(y, W)
  with tf.GradientTape() as t:
    y = tf.matmul(X, W) ** 2
  assert_same(f(X), t.jacobian(y, W))


def test_jacobian_unrelated_is_none():
  @tf.function
  def f(x, z):
    return vectorize.jacobian(x * 2.0, [x, z])
  got = f(tf.ones([3]), tf.ones([2]))
  assert got[1] is None
  assert_same(got[0], 2.0 * tf.eye(3))


def test_batch_jacobian_graph_xla():
  @tf.function(jit_compile=True)
  def f(x):
    return vectorize.batch_jacobian(tf.nn.softmax(x * 3.0), x)
  with tf.GradientTape() as t:
    t.watch(X)
    y = tf.nn.softmax(X * 3.0)
  assert_same(f(X), t.batch_jacobian(y, X))


def test_hessian_scalar_and_float64():
  x = tf.constant([0.3, -0.5, 1.2], tf.float64)
  f = lambda x: tf.reduce_sum(tf.exp(x) * x[0] + x ** 3)
  got = vectorize.hessian(f, x)
  with tf.GradientTape() as t2:
    t2.watch(x)
    with tf.GradientTape() as t1:
      t1.watch(x)
      y = f(x)
    g = t1.gradient(y, x)
  assert_same(got, t2.jacobian(g, x))


def test_hessian_through_cond():
  x = tf.constant([0.3, -0.5])
  f = lambda x: tf.cond(tf.reduce_sum(x) > 0, lambda: tf.reduce_sum(x ** 4), lambda: tf.reduce_sum(tf.sin(x)))
  got = vectorize.hessian(f, x)
  with tf.GradientTape() as t2:
    t2.watch(x)
    with tf.GradientTape() as t1:
      t1.watch(x)
      y = f(x)
    g = t1.gradient(y, x)
  assert_same(got, t2.jacobian(g, x))


def test_per_example_gradients_module_with_while_loop():
  class M(tf.Module):
    def __init__(self):
      self.w = tf.Variable([[0.5, -0.2], [0.1, 0.3]])

    def __call__(self, x, steps):
      h = x
      for _ in tf.range(steps):
        h = tf.tanh(tf.linalg.matvec(self.w, h))
      return h
  m = M()
  xs = tf.constant(rng.normal(size=[4, 2]).astype(np.float32))
  steps = tf.constant([1, 3, 0, 2])
  loss_fn = tf.function(lambda x, s: tf.reduce_sum(m(x, s) ** 2))
  got = vectorize.per_example_gradients(loss_fn, m, xs, steps)
  ref = []
  for b in range(4):
    with tf.GradientTape() as t:
      l = loss_fn(xs[b], steps[b])
    ref.append(t.gradient(l, m.trainable_variables)[0])
  assert_same(got[0], tf.stack(ref))


def test_per_example_gradients_int_input_and_stop_gradient():
  emb = tf.Variable(rng.normal(size=[10, 3]).astype(np.float32))
  ids = tf.constant(rng.integers(0, 10, size=[4, 5]), tf.int64)
  def loss_fn(row):
    e = tf.gather(emb, row)
    return tf.reduce_sum(e * tf.stop_gradient(e))
  got = vectorize.per_example_gradients(loss_fn, emb, ids)
  ref = []
  for b in range(4):
    with tf.GradientTape() as t:
      l = loss_fn(ids[b])
    ref.append(tf.convert_to_tensor(t.gradient(l, emb)))
  assert_same(got, tf.stack(ref))


def test_per_example_gradients_parallel_iterations():
  xs = tf.constant(rng.normal(size=[5, 3]).astype(np.float32))
  got = vectorize.per_example_gradients(lambda x: tf.reduce_sum(tf.matmul(x[None], W) ** 2), W, xs,
                                        parallel_iterations=2)
  ref = []
  for b in range(5):
    with tf.GradientTape() as t:
      l = tf.reduce_sum(tf.matmul(xs[b][None], W) ** 2)
    ref.append(t.gradient(l, W))
  assert_same(got, tf.stack(ref))


def test_gradient_of_while_loop_per_example_length_xla():
  lengths = tf.constant([2, 0, 4, 1, 3])
  def fn(i):
    with tf.GradientTape() as tape:
      h = tf.zeros([4])
      h = tf.while_loop(lambda t, h: t < lengths[i],
                        lambda t, h: (t + 1, tf.tanh(tf.linalg.matvec(W, X[i] + tf.cast(t, tf.float32), transpose_a=True) + h)),
                        (0, h), maximum_iterations=5)[1]
      loss = tf.reduce_sum(h)
    return tape.gradient(loss, W, unconnected_gradients=tf.UnconnectedGradients.ZERO)
  f = tf.function(lambda: vectorize.pfor(fn, 5), jit_compile=True)
  assert_same(f(), loop(fn, 5))
