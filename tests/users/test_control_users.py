"""Control flow in bodies: tf.cond, tf.while_loop, autograph if/for, TensorArray, switch_case."""
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.users._util import assert_same, loop

rng = np.random.default_rng(6)
X = tf.constant(rng.normal(size=[6, 4]).astype(np.float32))
LENS = tf.constant([3, 0, 4, 1, 2, 4])

MODES = {
    "eager": lambda c: c(),
    "function": lambda c: tf.function(c)(),
    "xla": lambda c: tf.function(c, jit_compile=True)(),
}


def run(body, n, mode, **kw):
  return MODES[mode](lambda: vectorize.pfor(body, n, **kw))


@pytest.mark.parametrize("mode", list(MODES))
def test_tf_cond_per_example(mode):
  fn = lambda i: tf.cond(tf.reduce_sum(X[i]) > 0, lambda: tf.exp(X[i]), lambda: X[i] * -3.0)
  assert_same(run(fn, 6, mode, fallback_to_while_loop=False), loop(fn, 6))


@pytest.mark.parametrize("mode", list(MODES))
def test_autograph_if_else_and_for(mode):
  @tf.function
  def fn(i):
    x = X[i]
    acc = tf.zeros([])
    for k in tf.range(LENS[i]):
      if x[k] > 0:
        acc += x[k]
      else:
        acc -= 2.0 * x[k]
    return acc
  assert_same(run(fn, 6, mode), loop(fn, 6))


@pytest.mark.parametrize("mode", list(MODES))
def test_while_loop_per_example_trip_count(mode):
  def fn(i):
    def body(k, h):
      return k + 1, tf.tanh(h * 1.5 + X[i])
    return tf.while_loop(lambda k, h: k < LENS[i], body, (0, tf.zeros([4])))
  assert_same(run(fn, 6, mode), loop(fn, 6))


def test_while_loop_collatz_steps_int64():
  starts = tf.constant([1, 6, 7, 27, 12], tf.int64)
  def fn(i):
    def body(x, s):
      x = tf.where(x % 2 == 0, x // 2, 3 * x + 1)
      return x, s + 1
    return tf.while_loop(lambda x, s: x != 1, body, (starts[i], tf.constant(0, tf.int64)))[1]
  assert_same(vectorize.pfor(fn, 5, fallback_to_while_loop=False), loop(fn, 5))


@pytest.mark.parametrize("mode", list(MODES))
def test_tensorarray_fixed_size(mode):
  def fn(i):
    ta = tf.TensorArray(tf.float32, size=4)
    for k in range(4):
      ta = ta.write(k, X[i][k] * tf.cast(k, tf.float32))
    return ta.stack()
  assert_same(run(fn, 6, mode), loop(fn, 6))


def test_tensorarray_dynamic_per_example_length():
  def fn(i):
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    def body(k, ta):
      return k + 1, ta.write(k, X[i][k] ** 2)
    _, ta = tf.while_loop(lambda k, ta: k < LENS[i], body, (0, ta))
    return ta.stack()
  assert_same(vectorize.pfor(fn, 6), loop(fn, 6))


def test_tensorarray_dynamic_size_xla_clear_error():
  """TF's own XLA silently drops writes to a dynamic_size TensorArray; vectorize should refuse clearly."""
  def fn(i):
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[])
    def body(k, ta):
      return k + 1, ta.write(k, X[i][k] ** 2)
    _, ta = tf.while_loop(lambda k, ta: k < LENS[i], body, (0, ta), maximum_iterations=4)
    return tf.reduce_sum(ta.stack()) + tf.cast(ta.size(), tf.float32)
  f = tf.function(lambda: vectorize.pfor(fn, 6), jit_compile=True)
  with pytest.raises(vectorize.ConversionError) as e:
    f()
  assert "TensorArray" in str(e.value) and "size" in str(e.value)


def test_tensorarray_dynamic_reduced_dense():
  def fn(i):
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[])
    def body(k, ta):
      return k + 1, ta.write(k, X[i][k] ** 2)
    _, ta = tf.while_loop(lambda k, ta: k < LENS[i], body, (0, ta))
    return tf.reduce_sum(ta.stack()) + tf.cast(ta.size(), tf.float32)
  assert_same(vectorize.pfor(fn, 6), loop(fn, 6))


def test_tensorarray_unstack_read_in_loop():
  def fn(i):
    ta = tf.TensorArray(tf.float32, size=4).unstack(X[i])
    out = tf.TensorArray(tf.float32, size=4)
    def body(k, out):
      return k + 1, out.write(3 - k, ta.read(k) + 1.0)
    _, out = tf.while_loop(lambda k, o: k < 4, body, (0, out))
    return out.stack()
  assert_same(vectorize.pfor(fn, 6), loop(fn, 6))


def test_switch_case():
  def fn(i):
    return tf.switch_case(i % 3, [lambda: X[i] * 0.0, lambda: tf.sin(X[i]), lambda: X[i] + 1.0])
  assert_same(vectorize.pfor(fn, 6, fallback_to_while_loop=False), loop(fn, 6))


def test_nested_cond_in_while():
  def fn(i):
    def body(k, a):
      a = tf.cond(X[i][k % 4] > 0, lambda: a + X[i][k % 4], lambda: a * 0.5)
      return k + 1, a
    return tf.while_loop(lambda k, a: k < i, body, (0, tf.constant(1.0)))[1]
  assert_same(vectorize.pfor(fn, 6), loop(fn, 6))


def test_cond_with_loop_invariant_predicate():
  flag = tf.constant(True)
  fn = lambda i: tf.cond(flag, lambda: X[i] * 2.0, lambda: X[i])
  assert_same(vectorize.pfor(fn, 6), loop(fn, 6))


def test_cond_branches_different_dtypes_int():
  fn = lambda i: tf.cond(i % 2 == 0, lambda: tf.cast(i, tf.int64) * 10, lambda: tf.constant(-1, tf.int64))
  assert_same(vectorize.pfor(fn, 5, fallback_to_while_loop=False), loop(fn, 5))


def test_while_loop_n_zero_and_runtime_n():
  fn = lambda i: tf.while_loop(lambda k, a: k < i, lambda k, a: (k + 1, a * 2), (0, 1))[1]
  f = tf.function(lambda n: vectorize.pfor(fn, n), input_signature=[tf.TensorSpec([], tf.int32)])
  assert_same(f(tf.constant(5)), loop(fn, 5))
  assert f(tf.constant(0)).shape == (0,)


def test_python_for_unrolled_over_static_range():
  def fn(i):
    h = X[i]
    for _ in range(3):
      h = tf.nn.relu(h - tf.reduce_mean(h))
    return h
  assert_same(vectorize.pfor(fn, 6, fallback_to_while_loop=False), loop(fn, 6))


def test_rnn_manual_loop_over_sequence_per_length():
  seq = tf.constant(rng.normal(size=[4, 5, 3]).astype(np.float32))
  lens = tf.constant([5, 2, 0, 3])
  w = tf.constant(rng.normal(size=[3, 3]).astype(np.float32) * 0.5)
  def fn(i):
    x = seq[i][:lens[i]]
    def body(t, h):
      return t + 1, tf.tanh(tf.linalg.matvec(w, h) + x[t])
    return tf.while_loop(lambda t, h: t < tf.shape(x)[0], body, (0, tf.zeros([3])))[1]
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))
