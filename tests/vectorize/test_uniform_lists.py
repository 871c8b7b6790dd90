"""UniformLists: a TensorList that every iteration writes at the same positions, held as one
TensorList of stacked elements and written in place (vectorize/lists.py)."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

X = tf.constant(np.random.default_rng(0).standard_normal([5, 7, 3]), tf.float32)


def _looped(body, n):
  """The loop's stacked outputs (at n = 0, the shapes of iteration 0's, empty)."""
  outs = [body(tf.constant(i)) for i in range(max(n, 1))]
  return tf.nest.map_structure(lambda *xs: tf.stack(xs)[:n], *outs)


def _op_types(fn):
  """Every op type in the graph of `fn` and the functions it calls, with counts."""
  return collections.Counter(
      testing.all_op_types(tf.function(fn).get_concrete_function().graph))


def _pushes(i, dynamic=True):
  """A TensorArray written once per step of a loop of 7 trips in every iteration."""
  xs = X[i]
  ta = (tf.TensorArray(tf.float32, size=0, dynamic_size=True) if dynamic else
        tf.TensorArray(tf.float32, size=7, element_shape=[3]))

  def step(t, h, ta):
    h = tf.tanh(h + xs[t])
    return t + 1, h, ta.write(t, h)

  _, h, ta = tf.while_loop(lambda t, h, ta: t < 7, step, (0, tf.zeros([3]), ta))
  return ta.stack(), h, ta.size()


def _unstacked_reads_gradient(i):
  """The gradient of a recurrence reading an unstacked TensorArray (how Keras RNNs read
  their inputs): the loop's gradient sums one read's cotangent into a list per step."""
  with tf.GradientTape() as tape:
    xs = X[i]
    tape.watch(xs)
    seq = tf.TensorArray(tf.float32, size=7).unstack(xs)

    def step(t, h):
      return t + 1, tf.tanh(h * 0.5 + seq.read(t))

    _, h = tf.while_loop(lambda t, h: t < 7, step, (0, tf.zeros([3])))
    loss = tf.reduce_sum(h ** 2)
  return tape.gradient(loss, xs)


@pytest.mark.parametrize("dynamic", [True, False])
def test_loop_writes_are_list_pushes_not_buffer_scatters(dynamic):
  body = lambda i: _pushes(i, dynamic)
  types = _op_types(lambda: vectorize.pfor(body, 5, fallback_to_while_loop=False))
  assert not any("Scatter" in t for t in types), types
  assert types.get("TensorListSetItem", 0) + types.get("TensorListPushBack", 0) >= 1, types


@pytest.mark.parametrize("n", [5, 2, 0])
def test_loop_writes_equal_the_loop_and_stack_dense(n):
  """A dynamic-size array written once per trip of a loop every iteration shares stacks
  to the same length in every iteration: dense, as tf.stack of the loop's."""
  got = vectorize.pfor(_pushes, n, fallback_to_while_loop=False)
  want = _looped(_pushes, n)
  for g, w in zip(got, want):
    assert isinstance(g, tf.Tensor), type(g)
    np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_loop_writes_at_a_run_time_n_and_in_a_function():
  fn = tf.function(lambda n: vectorize.pfor(_pushes, n, fallback_to_while_loop=False))
  for n in (4, 0):
    got = fn(tf.constant(n))
    for g, w in zip(got, _looped(_pushes, n)):
      np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_loop_writes_under_xla_stay_dense_lists():
  fn = tf.function(lambda: vectorize.pfor(lambda i: _pushes(i, dynamic=False), 5,
                                          fallback_to_while_loop=False), jit_compile=True)
  for g, w in zip(fn(), _looped(lambda i: _pushes(i, dynamic=False), 5)):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [5, 0])
def test_gradient_of_unstacked_reads_sums_lists_in_place(n):
  got = vectorize.pfor(_unstacked_reads_gradient, n, fallback_to_while_loop=False)
  np.testing.assert_allclose(got, _looped(_unstacked_reads_gradient, n), rtol=1e-5,
                             atol=1e-6)
  types = _op_types(lambda: vectorize.pfor(_unstacked_reads_gradient, 5,
                                           fallback_to_while_loop=False))
  assert not any("Scatter" in t for t in types), types


def test_a_write_at_a_per_iteration_index_makes_the_list_dense():
  """Pushes, then a write at the iteration's own index: the list leaves its uniform form
  (lanes differ), in the loop and after it."""

  def body(i):
    xs = X[i]
    ta = tf.TensorArray(tf.float32, size=7, element_shape=[3])

    def step(t, ta):
      ta = ta.write(t, xs[t])
      return t + 1, ta.write(tf.math.floormod(i + t, 7), xs[t] * 2.0)

    _, ta = tf.while_loop(lambda t, ta: t < 7, step, (0, ta))
    ta = ta.write(i % 7, tf.ones([3]))
    return ta.stack(), ta.read(3)

  got = vectorize.pfor(body, 5, fallback_to_while_loop=False)
  for g, w in zip(got, _looped(body, 5)):
    np.testing.assert_allclose(g, w)


def test_lists_through_conditionals_and_loops_of_per_iteration_trips():
  """A list pushed in a shared loop, then read in a loop of per-iteration trips, and
  extended in a conditional on a per-iteration predicate, and on an invariant one."""

  def body(i):
    xs = X[i]

    def push(t, ta):
      return t + 1, ta.write(t, xs[t])

    _, ta = tf.while_loop(lambda t, ta: t < 7, push,
                          (0, tf.TensorArray(tf.float32, size=0, dynamic_size=True,
                                             clear_after_read=False)))

    def accumulate(t, acc):
      return t + 1, acc + ta.read(t)

    _, total = tf.while_loop(lambda t, acc: t < i + 1, accumulate, (0, tf.zeros([3])))
    grown = tf.cond(i % 2 == 0, lambda: ta.write(7, total), lambda: ta.write(7, -total))
    kept = tf.cond(tf.constant(True), lambda: grown.write(8, xs[0]),
                   lambda: grown.write(8, xs[1]))
    return kept.stack(), total

  for n in (5, 0):
    got = vectorize.pfor(body, n, fallback_to_while_loop=False)
    for g, w in zip(got, _looped(body, n)):
      if isinstance(g, tf.RaggedTensor):   # lengths written in conditionals: not proven
        np.testing.assert_array_equal(g.row_lengths(), [w.shape[1]] * n)
        g = g.to_tensor(shape=w.shape)
      np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_gathers_sizes_and_element_shapes_of_a_uniform_list():
  def body(i):
    xs = X[i]

    def push(t, ta):
      return t + 1, ta.write(t, xs[t] * tf.cast(i + 1, tf.float32))

    _, ta = tf.while_loop(lambda t, ta: t < 7, push,
                          (0, tf.TensorArray(tf.float32, size=0, dynamic_size=True,
                                             element_shape=[3], clear_after_read=False)))
    return (ta.gather([6, 0, 3]), ta.size(), ta.read(2),
            ta.gather(tf.stack([i % 7, (i + 2) % 7])), tf.shape(ta.concat()))

  got = vectorize.pfor(body, 5, fallback_to_while_loop=False)
  for g, w in zip(got, _looped(body, 5)):
    np.testing.assert_allclose(g, w)


def test_keras_lstm_per_example_gradients_write_lists_in_place():
  """A Keras LSTM's per-example gradients: its loops' accumulators and its input
  sequence's gradient are UniformLists (no buffer scatter at any step), equal to the
  per-example tape gradients."""
  import keras  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input([6], dtype="int32"), keras.layers.Embedding(20, 4),
                            keras.layers.LSTM(5), keras.layers.Dense(2)])
  x = tf.random.stateless_uniform([3, 6], [1, 2], 0, 20, tf.int32)
  y = tf.constant([0, 1, 1])

  def loss(x, y):
    logits = model(x[None])
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y[None], logits))

  def per_example():
    return vectorize.per_example_gradients(loss, model.trainable_variables, x, y,
                                           fallback_to_while_loop=False)

  got = per_example()
  for k in range(3):
    with tf.GradientTape() as tape:
      value = loss(x[k], y[k])
    for g, w in zip(got, tape.gradient(value, model.trainable_variables)):
      np.testing.assert_allclose(g[k], tf.convert_to_tensor(w), rtol=1e-4, atol=1e-6)
  types = _op_types(per_example)
  assert not any("Scatter" in t and "Segment" not in t for t in types), types


def test_a_conditional_on_an_invariant_predicate_whose_branches_write_differently():
  """One branch writes a stacked item into an invariant list (a UniformList), the other
  returns the list as it is: the conditional's output is one kind for both branches (the
  branches' structures differed: a crash)."""
  flag = tf.Variable(True)

  def body(i):
    ta = tf.TensorArray(tf.float32, size=2, element_shape=[3]).write(1, tf.ones([3]))
    ta = tf.cond(flag, lambda: ta.write(0, X[i, 0]), lambda: ta)
    return ta.stack()

  for value in (True, False):
    flag.assign(value)
    got = vectorize.pfor(body, 5, fallback_to_while_loop=False)
    want = _looped(body, 5)
    if isinstance(got, tf.RaggedTensor):   # a list through a conditional: not proven
      np.testing.assert_array_equal(got.row_lengths(), [2] * 5)
      got = got.to_tensor()
    np.testing.assert_allclose(got, want)
