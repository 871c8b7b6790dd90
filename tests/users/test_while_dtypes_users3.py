"""While loops with per-example trip counts carrying several dtypes, and bodies that add a
value to a no-op view of itself (transpose, reshape to its own shape, times one)."""
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.users._util_users3 import plain_mode_users3  # noqa: F401 (autouse)
from tests.users._util_users3 import (assert_empty_like, assert_same, checked_pfor,
                                      in_function, loop, runtime_n, without_checked_env)

TRIPS = tf.constant([2, 0, 3, 1, 4])


def _multi_dtype_body(i, strings=True):
  def cond(t, a, b, h, d, flag, *s):
    return t < TRIPS[i]

  def step(t, a, b, h, d, flag, *s):
    out = (t + 1, a * 2 + t, b + tf.cast(t, tf.int64) * 3,
           h * tf.constant(1.5, tf.float16), d / 3. + 1., tf.logical_not(flag))
    return out + ((tf.strings.join([s[0], tf.strings.as_string(t)]),) if strings else ())

  init = (tf.constant(0), tf.constant(1) + i, tf.constant(7, tf.int64),
          tf.constant(0.5, tf.float16), tf.constant(1., tf.float64), tf.constant(True))
  init += (tf.constant("s"),) if strings else ()
  return tf.while_loop(cond, step, init)


def test_while_carries_six_dtypes_eager_and_runtime_n():
  want = loop(_multi_dtype_body, 5)
  assert_same(checked_pfor(_multi_dtype_body, 5), want, tol=1e-3)
  assert_same(runtime_n(_multi_dtype_body)(tf.constant(5)), want, tol=1e-3)


def test_while_carries_six_dtypes_n_zero():
  got = vectorize.pfor(_multi_dtype_body, 0)
  assert_empty_like(got, [(tf.int32, ()), (tf.int32, ()), (tf.int64, ()), (tf.float16, ()),
                          (tf.float64, ()), (tf.bool, ()), (tf.string, ())])
  got = runtime_n(_multi_dtype_body)(tf.constant(0))
  assert_empty_like(got, [(tf.int32, ()), (tf.int32, ()), (tf.int64, ()), (tf.float16, ()),
                          (tf.float64, ()), (tf.bool, ()), (tf.string, ())])


def test_while_numeric_dtypes_under_jit():
  def body(i):
    return _multi_dtype_body(i, strings=False)     # no strings under XLA

  want = loop(body, 5)
  assert_same(in_function(body, 5, jit=True), want, tol=1e-3)


@pytest.mark.parametrize("shape", [[2, 2], [1, 1]])
def test_c_plus_transpose_c_per_example_trips(shape, monkeypatch):
  # Plain mode (the checked mode crashes on this pattern: see the xfail below).
  without_checked_env(monkeypatch)
  base = tf.reshape(tf.range(5 * int(np.prod(shape)), dtype=tf.float32), [5] + shape)

  def body(i):
    def step(t, c):
      return t + 1, c + tf.transpose(c)
    return tf.while_loop(lambda t, c: t < TRIPS[i], step, (tf.constant(0), base[i]))[1]

  want = loop(body, 5)
  assert_same(vectorize.pfor(body, 5), want)
  assert_same(in_function(body, 5), want)


@pytest.mark.parametrize("shape", [[3], [1]])
def test_c_plus_reshape_own_shape(shape, monkeypatch):
  without_checked_env(monkeypatch)
  base = tf.reshape(tf.range(5 * int(np.prod(shape)), dtype=tf.int64), [5] + shape)

  def body(i):
    def step(t, c):
      return t + 1, c + tf.reshape(c, tf.shape(c))
    return tf.while_loop(lambda t, c: t < TRIPS[i], step, (tf.constant(0), base[i]))[1]

  want = loop(body, 5)
  assert_same(runtime_n(body)(tf.constant(5)), want)
  assert_same(in_function(body, 5), want)


def test_c_times_one_plus_c_float64_scalar(monkeypatch):
  without_checked_env(monkeypatch)
  def body(i):
    def step(t, c):
      return t + 1, c * 1 + c
    c0 = tf.cast(i, tf.float64) + 0.5
    return tf.while_loop(lambda t, c: t < TRIPS[i], step, (tf.constant(0), c0))[1]

  want = loop(body, 5)
  assert_same(vectorize.pfor(body, 5), want)
  assert_same(in_function(body, 5, jit=True), want)
  assert_same(runtime_n(body)(tf.constant(5)), want)


def test_c_plus_reduce_sum_no_axes_in_function(monkeypatch):
  without_checked_env(monkeypatch)
  # README: c + tf.reduce_sum(c, []) is a no-op pattern Grappler empties in plain TF.
  def body(i):
    def step(t, c):
      return t + 1, c + tf.reduce_sum(c, [])
    return tf.while_loop(lambda t, c: t < TRIPS[i], step,
                         (tf.constant(0), tf.fill([2], tf.cast(i, tf.float32))))[1]

  want = loop(body, 5)
  assert_same(in_function(body, 5), want)


def test_string_accumulating_loop_with_ragged_split_output():
  words = tf.constant(["a", "b", "c", "d", "e"])

  def body(i):
    def step(t, s):
      return t + 1, tf.strings.join([s, words[t]], separator=" ")
    _, s = tf.while_loop(lambda t, s: t < TRIPS[i], step, (tf.constant(0), tf.constant("")))
    return s, tf.strings.split(s)

  want = loop(body, 5)
  assert_same(checked_pfor(body, 5), want)
  assert_same(runtime_n(body)(tf.constant(5)), want)


def test_while_with_maximum_iterations_and_break_condition_float16():
  x = tf.constant([[0.5, 1., 2.], [3., 0.25, 1.], [1., 1., 1.], [4., 4., 4.], [0., 0., 9.]],
                  tf.float16)

  def body(i):
    def step(t, acc):
      return t + 1, acc + x[i, t % 3]
    return tf.while_loop(lambda t, acc: acc < tf.constant(3., tf.float16), step,
                         (tf.constant(0), tf.constant(0., tf.float16)),
                         maximum_iterations=5)

  want = loop(body, 5)
  assert_same(vectorize.pfor(body, 5), want, tol=1e-3)
  assert_same(in_function(body, 5, jit=True), want, tol=1e-3)


def test_nested_while_inner_trip_depends_on_outer_step():
  def body(i):
    def outer(t, acc):
      def inner(u, a):
        return u + 1, a + tf.cast(u * t, tf.int64)
      _, acc = tf.while_loop(lambda u, a: u < t, inner, (tf.constant(0), acc))
      return t + 1, acc
    return tf.while_loop(lambda t, acc: t < TRIPS[i] + 1, outer,
                         (tf.constant(0), tf.constant(0, tf.int64)))

  want = loop(body, 5)
  assert_same(checked_pfor(body, 5), want)
  assert_same(in_function(body, 5, jit=True), want)
  assert_empty_like(vectorize.pfor(body, 0), [(tf.int32, ()), (tf.int64, ())])


def _noop_self_add(c):
  return c * 1 + c


def _reshape_self_add(c):
  return c + tf.reshape(c, tf.shape(c))


# Fixed: the checker's copies of such loops stay functional (graph_io).
@pytest.mark.parametrize("update", [_noop_self_add, _reshape_self_add])
def test_checked_mode_noop_self_add_loop(update):
  trips = tf.constant([2, 0, 3])

  def body(i):
    c0 = tf.cast(i, tf.float64) + 0.5
    return tf.while_loop(lambda t, c: t < trips[i], lambda t, c: (t + 1, update(c)),
                         (tf.constant(0), c0))[1]

  want = loop(body, 3)
  with vectorize.checked(sample=None):
    got = vectorize.pfor(body, 3)
  assert_same(got, want)
