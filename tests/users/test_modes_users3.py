"""The same per-example programs through vectorized_map / map_fn with run-time sizes, under
XLA, in the checked mode inside a tf.function, and under static_shapes()."""
import pytest
import tensorflow as tf

import vectorize
from tests.users._util_users3 import plain_mode_users3  # noqa: F401 (autouse)
from tests.users._util_users3 import (assert_same, assert_state, in_function, loop,
                                      stateful_compare)

X = tf.constant([[3., 1., 2., 5.], [4., 4., 1., 0.], [2., -1., 7., 1.], [1., 1., 1., 1.]])
L = tf.constant([3, 0, 4, 2])


def test_vectorized_map_run_time_rows_including_zero():
  def fn(row):
    return tf.reduce_max(row), tf.cumsum(row), tf.argsort(row, stable=True)

  @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
  def f(x):
    return vectorize.vectorized_map(fn, x)

  want = tuple(tf.stack([fn(r)[k] for r in tf.unstack(X)]) for k in range(3))
  assert_same(tuple(f(X)), want)
  got0 = f(X[:0])
  assert [(t.dtype, tuple(t.shape)) for t in got0] == [
      (tf.float32, (0,)), (tf.float32, (0, 4)), (tf.int32, (0, 4))]


def test_vectorized_map_ragged_elems_run_time_and_broadcast():
  def fn(row):
    return tf.reduce_sum(tf.cumsum(row))

  @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.float32, 1, tf.int64)])
  def f(rt):
    return vectorize.vectorized_map(fn, rt)

  rt = tf.ragged.constant([[3., 1.], [], [5., -2., 4.]])
  assert_same(f(rt), tf.stack([fn(r) for r in rt]))
  assert tuple(f(rt[:0]).shape) == (0,)
  got = vectorize.vectorized_map(lambda a: a[0] * a[1], (X, tf.constant([[1., 2., 3., 4.]])))
  assert_same(got, X * [[1., 2., 3., 4.]])


def _prefix_recurrence(a):
  row, n = a
  return tf.while_loop(lambda t, s: t < n, lambda t, s: (t + 1, s * 0.5 + row[t]),
                       (tf.constant(0), tf.constant(0.)))[1]


def test_map_fn_per_example_trips_run_time_n_and_zero():
  @tf.function(input_signature=[tf.TensorSpec([None, 4]), tf.TensorSpec([None], tf.int32)])
  def f(x, lens):
    return vectorize.map_fn(_prefix_recurrence, (x, lens), fn_output_signature=tf.float32)

  want = tf.map_fn(_prefix_recurrence, (X, L), fn_output_signature=tf.float32)
  assert_same(f(X, L), want)
  got0 = f(X[:0], L[:0])
  assert got0.dtype == tf.float32 and tuple(got0.shape) == (0,)


def test_map_fn_under_jit_and_signature_shape_check():
  f = tf.function(lambda: vectorize.map_fn(_prefix_recurrence, (X, L),
                                           fn_output_signature=tf.float32), jit_compile=True)
  assert_same(f(), tf.map_fn(_prefix_recurrence, (X, L), fn_output_signature=tf.float32))
  with pytest.raises(ValueError, match="fn_output_signature"):
    vectorize.map_fn(lambda r: r[:2], X, fn_output_signature=tf.TensorSpec([3], tf.float32))


def test_checked_mode_inside_tf_function_passes_reads_around_assign_add():
  # A body pfor got wrong (read before and after assign_add, see test_state_users3): the
  # checked mode inside a tf.function failed the graph; now the answers and state agree.
  xs = tf.constant([3., 1., 2., 5.])
  v = tf.Variable(10.)

  def body(i):
    before = v.read_value()
    v.assign_add(xs[i])
    return before, v.read_value()

  @tf.function
  def f():
    with vectorize.checked(sample=None):
      return vectorize.pfor(body, 4)

  before, after = f()
  assert before.numpy().tolist() == [10., 13., 14., 16.]
  assert after.numpy().tolist() == [13., 14., 16., 21.]
  assert v.numpy() == 21.


def test_jit_cond_while_sort_top_k_per_example():
  def body(i):
    r = tf.cond(X[i, 0] > 2., lambda: X[i] * 2., lambda: -X[i])
    _, acc = tf.while_loop(lambda t, a: t < L[i], lambda t, a: (t + 1, a + r[t]),
                           (tf.constant(0), tf.constant(0.)))
    return r, acc, tf.cumsum(r, reverse=True), tf.sort(r), tf.math.top_k(r, 2).indices

  want = loop(body, 4)
  assert_same(in_function(body, 4, jit=True), want)
  with vectorize.checked(sample=None):
    assert_same(in_function(body, 4, jit=True), want)


def test_jit_variable_updates_in_cond_branches():
  v = tf.Variable(0.)

  def body(i):
    tf.cond(X[i, 0] > 2., lambda: v.assign_add(X[i, 1]), lambda: v.assign_add(-1.))
    return X[i] * 2.

  want, ws, got, gs = stateful_compare([v], [0.], body, 4,
                                       lambda: in_function(body, 4, jit=True))
  assert_same(got, want)
  assert_state(gs, ws)


def test_static_shapes_state_in_while_of_per_example_trips():
  v = tf.Variable(0.)

  def body(i):
    def step(t):
      v.assign(v * 0.5 + X[i, t])
      return [t + 1]
    tf.while_loop(lambda t: t < L[i], step, [tf.constant(0)])
    return v.read_value()

  with vectorize.static_shapes():
    want, ws, got, gs = stateful_compare([v], [0.], body, 4,
                                         lambda: vectorize.pfor(body, 4))
  assert_same(got, want)
  assert_state(gs, ws)


def test_static_shapes_ragged_prefix_eager():
  """static_shapes() builds the graph as for XLA, which has no per-iteration sizes: the
  refusal says so (not 'under XLA ... without jit_compile', which the user did not use) and
  names the user's line."""
  def body(i):
    return tf.cumsum(X[i, :L[i]])

  line = body.__code__.co_firstlineno + 1
  with vectorize.static_shapes():
    with pytest.raises(vectorize.ConversionError,
                       match=rf"(?s)test_modes_users3.py:{line}.*under vectorize.static_shapes"
                             r"\(\).*outside vectorize.static_shapes"):
      vectorize.pfor(body, 4)


def test_per_example_gradients_of_prefix_loss():
  w = tf.Variable([1., 2., 3., 4.])

  def loss(x, n):
    return tf.reduce_sum((x[:n] * w[:n]) ** 2)

  got = vectorize.per_example_gradients(loss, [w], X, L)
  want = []
  for i in range(4):
    with tf.GradientTape() as tape:
      lo = loss(X[i], L[i])
    want.append(tape.gradient(lo, w))
  assert_same(got[0], tf.stack(want))


def test_parallel_iterations_ragged_output_refused_and_stateful_chunks():
  def body(i):
    return tf.cumsum(X[i, :L[i]])

  with pytest.raises(vectorize.ConversionError, match="parallel_iterations"):
    vectorize.pfor(body, 4, parallel_iterations=3)

  v = tf.Variable(0.)

  def stateful(i):
    v.assign_add(tf.reduce_sum(X[i, :L[i]]))
    return X[i] * 2., v.read_value()

  want, ws, got, gs = stateful_compare(
      [v], [0.], stateful, 4, lambda: vectorize.pfor(stateful, 4, parallel_iterations=3))
  assert_same(got, want)
  assert_state(gs, ws)


def test_checked_mode_skips_random_values_and_samples():
  v = tf.Variable(0.)

  def body(i):
    noise = tf.random.normal([2])
    v.assign_add(tf.reduce_sum(noise))
    return X[i, :2] * 2. + 0. * noise[0], tf.cumsum(X[i, :L[i]])

  with vectorize.checked(sample=None):
    got = vectorize.pfor(body, 4)
  assert_same(got, loop(lambda i: (X[i, :2] * 2., tf.cumsum(X[i, :L[i]])), 4))

  w = tf.Variable(2.)

  def square(i):
    w.assign(w * w)
    return X[i]

  with vectorize.checked(sample=2):
    got = vectorize.pfor(square, 0)
    assert tuple(got.shape) == (0, 4) and w.numpy() == 2.
    f = tf.function(lambda n: vectorize.pfor(square, n),
                    input_signature=[tf.TensorSpec([], tf.int32)])
    assert_same(f(tf.constant(3)), tf.stack([X[0], X[1], X[2]]))
  assert w.numpy() == 256.


def test_checked_run_time_n_ragged_strings_and_unique():
  def body(i):
    return (tf.strings.split(tf.strings.as_string(X[i, :L[i]], precision=1)),
            tf.unique(X[i, :L[i]])[0])

  f = tf.function(lambda n: vectorize.pfor(body, n),
                  input_signature=[tf.TensorSpec([], tf.int32)])
  with vectorize.checked():
    got0 = f(tf.constant(0))
    got = f(tf.constant(4))
  assert [t.to_list() for t in got0] == [[], []]
  assert_same(got, loop(body, 4))


def test_vectorized_map_sparse_rows():
  sp = tf.sparse.from_dense(tf.constant([[0., 2., 0.], [1., 0., 3.], [0., 0., 0.]]))
  got = vectorize.vectorized_map(
      lambda r: (tf.sparse.reduce_sum(r), tf.sparse.to_dense(r) * 2.), sp)
  assert_same(tuple(got), (tf.constant([2., 4., 0.]), tf.sparse.to_dense(sp) * 2.))
