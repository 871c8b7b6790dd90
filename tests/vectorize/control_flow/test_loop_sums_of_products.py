"""A loop variable the body only adds a matrix product to (a weight's gradient in a loop's
gradient) is carried as its factors and summed by one contraction after the loop."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from vectorize.control_flow import while_loop
from tests import testing

X = tf.constant(np.random.default_rng(1).standard_normal([6, 9, 4]), tf.float32)
W = tf.constant(np.random.default_rng(2).standard_normal([4, 5]) * 0.3, tf.float32)
U = tf.constant(np.random.default_rng(3).standard_normal([5, 5]) * 0.3, tf.float32)


def _looped(body, n):
  outs = [body(tf.constant(i)) for i in range(max(n, 1))]
  return tf.nest.map_structure(lambda *xs: tf.stack(xs)[:n], *outs)


def _sums_after_loops(fn, jit_compile=None):
  """How many sums of products the graph of `fn` (and the functions it calls) computes
  after a loop from their factors."""
  graph = tf.function(fn, jit_compile=jit_compile).get_concrete_function().graph
  return sum(op.type.startswith("BatchMatMul") and
             op.name.rpartition("/")[2].startswith(while_loop.SUM_OVER_STEPS)
             for op in testing.all_ops(graph))


def _rnn_weight_gradients(i, bound=9):
  """The gradients of an RNN's two weights: the loop's gradient adds one outer product
  per step to each. The loop stops after 9 steps, before a larger `bound` (under XLA the
  factor lists have the bound's rows, and the rows no step sets must add nothing)."""
  with tf.GradientTape() as tape:
    w, u = tf.identity(W), tf.identity(U)
    tape.watch([w, u])
    xs = X[i]

    def step(t, h):
      return t + 1, tf.tanh(tf.matmul(xs[t][None], w) + tf.matmul(h, u))

    _, h = tf.while_loop(lambda t, h: t < 9, step, (0, tf.zeros([1, 5])),
                         maximum_iterations=bound)   # XLA differentiates bounded loops only
    loss = tf.reduce_sum(h ** 2)
  return tape.gradient(loss, [w, u])


def _rnn_stopping_early(i):
  return _rnn_weight_gradients(i, bound=12)


def _pfor(body, n):
  return vectorize.pfor(body, n, fallback_to_while_loop=False)


@pytest.mark.parametrize("n", [6, 1, 0])
def test_rnn_weight_gradients_are_summed_after_the_loop(n):
  got = _pfor(_rnn_weight_gradients, n)
  for g, w in zip(got, _looped(_rnn_weight_gradients, n)):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
  assert _sums_after_loops(lambda: _pfor(_rnn_weight_gradients, 6)) == 2


def test_run_time_n_and_xla():
  fn = tf.function(lambda n: _pfor(_rnn_weight_gradients, n))
  for n in (5, 0):
    for g, w in zip(fn(tf.constant(n)), _looped(_rnn_weight_gradients, n)):
      np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
  compiled = tf.function(lambda: _pfor(_rnn_weight_gradients, 6), jit_compile=True)
  for g, w in zip(compiled(), _looped(_rnn_weight_gradients, 6)):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [6, 0])
@pytest.mark.parametrize("body", [_rnn_weight_gradients, _rnn_stopping_early])
def test_under_xla_the_factors_fill_lists_of_the_loops_bound(body, n):
  """Under XLA (static shapes, lists cannot grow) the factors are set at each step's row of
  lists as long as the loop's static bound (its forward loop's, for a gradient loop):
  the sums stay after the loop rather than `[n, 4, 5]` accumulators read and written at
  every step."""
  compiled = tf.function(lambda: _pfor(body, n), jit_compile=True)
  for g, w in zip(compiled(), _looped(body, n)):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
  assert _sums_after_loops(lambda: _pfor(body, 6), jit_compile=True) == 2


@pytest.mark.parametrize("transpose_a,transpose_b", [(False, False), (True, False),
                                                     (False, True), (True, True)])
def test_written_sums_of_outer_products(transpose_a, transpose_b):
  """`acc += a @ b` written by hand, each factor as MatMul sees it transposed or not."""

  def body(i):
    xs = X[i]

    def step(t, acc):
      a = xs[t][:, None] * tf.cast(t + 1, tf.float32)      # [4, 1]
      b = tf.tanh(xs[t])[None, :3]                          # [1, 3]
      a = tf.transpose(a) if transpose_a else a
      b = tf.transpose(b) if transpose_b else b
      return t + 1, acc + tf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)

    _, acc = tf.while_loop(lambda t, acc: t < 9, step, (0, tf.ones([4, 3])))
    return acc

  got = _pfor(body, 6)
  np.testing.assert_allclose(got, _looped(body, 6), rtol=1e-5, atol=1e-5)
  assert _sums_after_loops(lambda: _pfor(body, 6)) == 1


def test_a_sum_the_body_reads_is_carried_as_it_is():
  """The running sum read in the step (or by the condition): no factors, as before."""

  def read_in_body(i):
    xs = X[i]

    def step(t, acc):
      a = xs[t][:, None] + 0.01 * tf.reduce_sum(acc)
      return t + 1, acc + tf.matmul(a, tf.tanh(xs[t])[None, :3])

    return tf.while_loop(lambda t, acc: t < 9, step, (0, tf.zeros([4, 3])))[1]

  def read_in_condition(i):
    xs = X[i]

    def step(t, acc):
      return t + 1, acc + tf.matmul(xs[t][:, None], tf.tanh(xs[t])[None, :3])

    return tf.while_loop(lambda t, acc: (t < 9) & (tf.reduce_sum(acc) < 1e6), step,
                         (0, tf.zeros([4, 3])))[1]

  for body in (read_in_body, read_in_condition):
    got = _pfor(body, 6)
    np.testing.assert_allclose(got, _looped(body, 6), rtol=1e-5, atol=1e-5)
    assert not _sums_after_loops(lambda: _pfor(body, 6)), body.__name__  # pylint: disable=cell-var-from-loop


def test_a_product_smaller_than_its_factors_is_carried_as_it_is():
  """[2, 9] @ [9, 2]: the factors hold more than the product, so the sum is kept."""

  def body(i):
    xs = X[i]

    def step(t, acc):
      a = tf.reshape(tf.tile(xs[t][:3], [6]), [2, 9])
      return t + 1, acc + tf.matmul(a, tf.transpose(a))

    return tf.while_loop(lambda t, acc: t < 9, step, (0, tf.zeros([2, 2])))[1]

  np.testing.assert_allclose(_pfor(body, 6), _looped(body, 6), rtol=1e-5, atol=1e-4)
  assert not _sums_after_loops(lambda: _pfor(body, 6))


def test_per_iteration_trips_keep_the_sum():
  """A loop of per-iteration trip counts runs masked: its sums are carried as they are."""

  def body(i):
    xs = X[i]

    def step(t, acc):
      return t + 1, acc + tf.matmul(xs[t][:, None], tf.tanh(xs[t])[None, :3])

    return tf.while_loop(lambda t, acc: t < i + 2, step, (0, tf.zeros([4, 3])))[1]

  np.testing.assert_allclose(_pfor(body, 6), _looped(body, 6), rtol=1e-5, atol=1e-5)


def test_the_initial_sum_is_added_after_the_loop_as_it_is():
  """A gradient's zero accumulator adds nothing (no `[n] + weight` tile of zeros, no add);
  an invariant start is broadcast, a per-iteration one added as it is."""
  graph = tf.function(lambda: _pfor(_rnn_weight_gradients, 6)).get_concrete_function().graph
  tiles = [op for op in testing.all_ops(graph) if op.type == "Tile" and
           op.outputs[0].shape in ([6, 4, 5], [6, 5, 5])]
  assert not tiles, [op.name for op in tiles]

  def body(i):
    xs = X[i]

    def step(t, acc):
      return t + 1, acc + tf.matmul(xs[t][:, None], tf.tanh(xs[t])[None, :3])

    start = tf.tile(xs[0][:, None], [1, 3])   # per-iteration
    return tf.while_loop(lambda t, acc: t < 9, step, (0, start))[1]

  np.testing.assert_allclose(_pfor(body, 6), _looped(body, 6), rtol=1e-5, atol=1e-5)
  assert _sums_after_loops(lambda: _pfor(body, 6)) == 1
