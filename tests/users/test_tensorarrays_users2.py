"""TensorArrays of per-example length read back every way (stack, concat, gather, read,
size, unstack), also inside conds; ragged results compared with tf.ragged.stack of the loop."""
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.users._util import assert_same, loop
from tests.users._util_users2 import assert_ragged_values, ragged_loop

rng = np.random.default_rng(5)
X = tf.constant(rng.normal(size=[4, 5, 2]).astype(np.float32))
LENS = tf.constant([3, 1, 5, 2])     # every example writes at least once


def fill(i, dtype=tf.float32):
  """A dynamic-size TensorArray of LENS[i] rows X[i, t]."""
  ta = tf.TensorArray(dtype, size=0, dynamic_size=True, element_shape=[2])
  def step(t, ta):
    return t + 1, ta.write(t, tf.cast(X[i, t] * 10, dtype))
  return tf.while_loop(lambda t, ta: t < LENS[i], step, (0, ta))[1]


def f(fn):
  return tf.function(fn)


@pytest.mark.parametrize("wrap", [lambda c: c, f])
def test_stack_per_example_length_ragged(wrap):
  body = lambda i: fill(i).stack()
  got = wrap(lambda: vectorize.pfor(body, 4))()
  assert_ragged_values(got, ragged_loop(body, 4))


def test_stack_int32_exact():
  body = lambda i: fill(i, tf.int32).stack()
  got = vectorize.pfor(body, 4)
  assert_ragged_values(got, ragged_loop(body, 4))


def test_concat_per_example_length():
  body = lambda i: fill(i).concat()          # [2 * LENS[i]]
  got = vectorize.pfor(body, 4)
  assert_ragged_values(got, ragged_loop(body, 4))


@pytest.mark.xfail(strict=True, raises=vectorize.ConversionError, reason=(
    "ConversionError 'Op while/TensorArrayV2Write/TensorListSetItem ... takes or makes a TensorList ... that differs per iteration; it has no vectorized form and cannot run in a sequential loop': an infer_shape=False array whose elements grow with t; the message names neither the user's line nor a fix (README promises both), and the README's limits do not list it"))
def test_concat_elements_of_different_sizes():
  """Element t has t + 1 values: concat has sum_{t<L} (t+1) values per example."""
  def body(i):
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, infer_shape=False)
    def step(t, ta):
      return t + 1, ta.write(t, tf.range(tf.cast(t + 1, tf.float32)) + tf.cast(i, tf.float32))
    return tf.while_loop(lambda t, ta: t < LENS[i], step, (0, ta))[1].concat()
  got = vectorize.pfor(body, 4)
  assert_ragged_values(got, ragged_loop(body, 4))


def test_gather_range_of_size():
  def body(i):
    ta = fill(i)
    return ta.gather(tf.range(ta.size()))
  got = vectorize.pfor(body, 4)
  assert_ragged_values(got, ragged_loop(body, 4))


def test_gather_fixed_indices_dense():
  """Gather of indices every example has (0): dense [4, 1, 2]."""
  body = lambda i: fill(i).gather([0])
  assert_same(vectorize.pfor(body, 4), loop(body, 4))


@pytest.mark.parametrize("wrap", [lambda c: c, f])
def test_read_last_and_size(wrap):
  def body(i):
    ta = fill(i)
    return ta.read(ta.size() - 1), ta.size()
  got = wrap(lambda: vectorize.pfor(body, 4))()
  assert_same(got, loop(body, 4))


@pytest.mark.xfail(strict=True, raises=vectorize.ConversionError, reason=(
    'ConversionError at TensorArrayUnstack/TensorListFromTensor: unstack of x[i, :L[i]] (a per-example length); no user line, no fix in the message'))
def test_unstack_per_example_tensor_then_read_and_stack():
  """unstack of a per-example slice x[i, :LENS[i]]: its length differs per example."""
  def body(i):
    ta = tf.TensorArray(tf.float32, size=LENS[i], element_shape=[2])
    ta = ta.unstack(X[i, :LENS[i]])
    return ta.read(0) + ta.read(ta.size() - 1), ta.stack()
  got = vectorize.pfor(body, 4)
  ref_d, _ = loop(lambda i: body(i)[0], 4), None
  assert_same(got[0], ref_d)
  assert_ragged_values(got[1], ragged_loop(lambda i: body(i)[1], 4))


def test_unstack_fixed_tensor_reversed_in_loop_dense():
  """A fixed-size array made from a tensor, rewritten in a loop: stays dense."""
  def body(i):
    ta = tf.TensorArray(tf.float32, size=5).unstack(X[i])
    def step(t, ta):
      return t + 1, ta.write(t, ta.read(t) * tf.cast(t, tf.float32))
    _, ta = tf.while_loop(lambda t, ta: t < LENS[i], step, (0, ta))
    return ta.stack()
  got = vectorize.pfor(body, 4)
  assert_same(got, loop(body, 4))


def test_ta_in_cond_branches_different_lengths():
  def body(i):
    def long_branch():
      return fill(i).stack()
    def short_branch():
      return tf.TensorArray(tf.float32, size=1, element_shape=[2]).write(0, X[i, 0]).stack()
    return tf.cond(i % 2 == 0, long_branch, short_branch)
  got = vectorize.pfor(body, 4)
  assert_ragged_values(got, ragged_loop(body, 4))


def test_ta_read_in_cond_inside_while():
  """A loop that reads its array back inside a cond: dense output."""
  def body(i):
    ta = fill(i)
    def step(t, s):
      r = ta.read(t)
      v = tf.cond(tf.reduce_sum(r) > 0, lambda: r, lambda: -r)
      return t + 1, s + v
    return tf.while_loop(lambda t, s: t < ta.size(), step, (0, tf.zeros([2])))[1]
  got = vectorize.pfor(body, 4)
  assert_same(got, loop(body, 4))


def test_ta_size_and_stack_under_xla_fixed_size():
  """Fixed-size array (size 5) written LENS[i] times under XLA: dense, zeros past LENS[i]."""
  def body(i):
    ta = tf.TensorArray(tf.float32, size=5, element_shape=[2])
    def step(t, ta):
      return t + 1, ta.write(t, X[i, t])
    _, ta = tf.while_loop(lambda t, ta: t < LENS[i], step, (0, ta), maximum_iterations=5)
    return ta.stack(), ta.size()
  got = tf.function(lambda: vectorize.pfor(body, 4), jit_compile=True)()
  assert_same(got, loop(body, 4))


def test_ta_ragged_under_xla_is_conversion_error():
  """README: under XLA a ragged value is a ConversionError (naming the user's line)."""
  body = lambda i: fill(i).stack()
  with pytest.raises(vectorize.ConversionError) as e:
    tf.function(lambda: vectorize.pfor(body, 4), jit_compile=True)()
  assert "test_tensorarrays_users2.py" in str(e.value), str(e.value)


def test_ta_string_elements():
  words = tf.constant([["a", "b", "c", "d", "e"]] * 4)
  def body(i):
    ta = tf.TensorArray(tf.string, size=0, dynamic_size=True, element_shape=[])
    def step(t, ta):
      return t + 1, ta.write(t, words[i, t] + tf.strings.as_string(i))
    return tf.while_loop(lambda t, ta: t < LENS[i], step, (0, ta))[1].stack()
  got = vectorize.pfor(body, 4)
  assert_ragged_values(got, ragged_loop(body, 4))


def test_ta_reduce_of_stack_dense():
  """A reduction of the per-example stack is dense again."""
  body = lambda i: tf.reduce_sum(fill(i).stack(), axis=0)
  assert_same(vectorize.pfor(body, 4), loop(body, 4))


@pytest.mark.xfail(strict=True, raises=vectorize.ConversionError, reason=(
    'ConversionError at gradient_tape/TensorArrayV2Stack/TensorListFromTensor: per-example gradient through ta.stack() of a dynamic array of per-example length (README: per-example gradients through loops of per-example length vectorize); no user line in the message'))
def test_ta_grad_through_stack_per_example_length():
  w = tf.Variable([0.5, -1.0])
  def body(i):
    with tf.GradientTape() as tape:
      ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[2])
      def step(t, ta):
        return t + 1, ta.write(t, tf.sin(X[i, t] * w))
      _, ta = tf.while_loop(lambda t, ta: t < LENS[i], step, (0, ta))
      loss = tf.reduce_sum(ta.stack())
    return tape.gradient(loss, w)
  assert_same(vectorize.pfor(body, 4), loop(body, 4))


def test_ta_n_zero_and_runtime_n():
  body = lambda i: fill(i).stack()
  g = tf.function(lambda n: vectorize.pfor(body, n), input_signature=[tf.TensorSpec([], tf.int32)])
  assert_ragged_values(g(tf.constant(3)), ragged_loop(body, 3))
  z = g(tf.constant(0))
  assert z.shape[0] == 0 and z.dtype == tf.float32
  z = vectorize.pfor(body, 0)
  assert z.shape[0] == 0 and z.dtype == tf.float32


def test_ta_grad_through_fixed_size_array_per_example_trips():
  """The README's fix for a dense result: a fixed size; gradient through it."""
  w = tf.Variable([0.5, -1.0])
  def body(i):
    with tf.GradientTape() as tape:
      ta = tf.TensorArray(tf.float32, size=5, element_shape=[2])
      def step(t, ta):
        return t + 1, ta.write(t, tf.sin(X[i, t] * w))
      _, ta = tf.while_loop(lambda t, ta: t < LENS[i], step, (0, ta), maximum_iterations=5)
      loss = tf.reduce_sum(ta.stack())
    return tape.gradient(loss, w)
  assert_same(vectorize.pfor(body, 4), loop(body, 4))
  got = tf.function(lambda: vectorize.pfor(body, 4), jit_compile=True)()
  assert_same(got, loop(body, 4))


def test_ta_grad_of_last_read_per_example_length():
  """Gradient through read(size - 1) of a dynamic array of per-example length: dense."""
  w = tf.Variable([0.5, -1.0])
  def body(i):
    with tf.GradientTape() as tape:
      ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[2])
      def step(t, ta):
        return t + 1, ta.write(t, tf.sin(X[i, t] * w))
      _, ta = tf.while_loop(lambda t, ta: t < LENS[i], step, (0, ta))
      loss = tf.reduce_sum(ta.read(ta.size() - 1))
    return tape.gradient(loss, w)
  assert_same(vectorize.pfor(body, 4), loop(body, 4))
