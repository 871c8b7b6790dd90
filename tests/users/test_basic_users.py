"""pfor / vectorized_map / map_fn on plain programs: eager, tf.function, XLA, n=0, run-time n."""
import collections
import functools

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.users._util import assert_same, loop, rows

rng = np.random.default_rng(0)
X = tf.constant(rng.normal(size=[5, 4, 3]).astype(np.float32))
W = tf.constant(rng.normal(size=[3, 2]).astype(np.float32))


def body(i):
  x = X[i]
  h = tf.nn.relu(tf.matmul(x, W))
  return {"sum": tf.reduce_sum(h), "h": h, "arg": tf.argmax(h, axis=0),
          "cast": tf.cast(h > 0, tf.int32)}


def test_eager_dict_output():
  assert_same(vectorize.pfor(body, 5), loop(body, 5))


def test_tf_function():
  f = tf.function(lambda: vectorize.pfor(body, 5))
  assert_same(f(), loop(body, 5))


def test_xla():
  f = tf.function(lambda: vectorize.pfor(body, 5), jit_compile=True)
  assert_same(f(), loop(body, 5))


def test_n_zero():
  out = vectorize.pfor(body, 0)
  assert out["h"].shape == (0, 4, 2)
  assert out["sum"].shape == (0,)
  assert out["arg"].dtype == tf.int64 and out["arg"].shape == (0, 2)
  assert out["cast"].dtype == tf.int32


def test_runtime_n():
  @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
  def f(n):
    return vectorize.pfor(lambda i: tf.reduce_sum(X[i] * tf.cast(i, tf.float32), axis=1), n)
  for n in (0, 1, 3, 5):
    got = f(tf.constant(n))
    if n:
      assert_same(got, loop(lambda i: tf.reduce_sum(X[i] * tf.cast(i, tf.float32), axis=1), n))
    else:
      assert got.shape == (0, 4)


def test_runtime_n_int64():
  @tf.function(input_signature=[tf.TensorSpec([], tf.int64)])
  def f(n):
    return vectorize.pfor(lambda i: tf.cast(i, tf.float32) * 2.0, n)
  np.testing.assert_array_equal(f(tf.constant(4, tf.int64)).numpy(), [0., 2., 4., 6.])


def test_fallback_off_plain_math():
  fn = lambda i: tf.tanh(tf.matmul(X[i], W)) + tf.cast(i, tf.float32)
  assert_same(vectorize.pfor(fn, 5, fallback_to_while_loop=False), loop(fn, 5))


def test_namedtuple_and_python_number_output():
  P = collections.namedtuple("P", "a b c")
  fn = lambda i: P(a=X[i, 0], b=3, c=[tf.cast(i, tf.int64), tf.shape(X[i])])
  got = vectorize.pfor(fn, 5)
  assert isinstance(got, P)
  assert_same(got.a, loop(lambda i: X[i, 0], 5))
  np.testing.assert_array_equal(np.asarray(got.b), [3] * 5)
  assert_same(got.c[0], tf.range(5, dtype=tf.int64))
  assert_same(got.c[1], tf.constant([[4, 3]] * 5, tf.int32))


def test_none_output():
  got = vectorize.pfor(lambda i: (X[i] * 2, None), 5)
  assert got[1] is None
  assert_same(got[0], X * 2)


def test_partial_and_callable_object():
  def scaled(s, i):
    return X[i] * s

  class Obj:
    def __call__(self, i):
      return tf.reduce_mean(X[i], axis=0)

  assert_same(vectorize.pfor(functools.partial(scaled, 3.0), 5), X * 3.0)
  assert_same(vectorize.pfor(Obj(), 5), tf.reduce_mean(X, axis=1))


def test_body_is_tf_function():
  @tf.function
  def fn(i):
    return tf.linalg.norm(X[i], axis=-1)
  assert_same(vectorize.pfor(fn, 5), loop(fn, 5))


def test_parallel_iterations_chunks():
  fn = lambda i: tf.matmul(X[i], W) * tf.cast(i + 1, tf.float32)
  assert_same(vectorize.pfor(fn, 5, parallel_iterations=2), loop(fn, 5))


def test_parallel_iterations_xla():
  fn = lambda i: tf.matmul(X[i], W) * tf.cast(i + 1, tf.float32)
  f = tf.function(lambda: vectorize.pfor(fn, 5, parallel_iterations=2), jit_compile=True)
  assert_same(f(), loop(fn, 5))


def test_pfor_config_reduce():
  def fn(i, pfor_config):
    cfg = pfor_config
    x = X[i]
    mean = cfg.reduce_mean(x)
    total = cfg.reduce_sum(tf.reduce_sum(x))
    allv = cfg.reduce_concat(tf.reduce_max(x))
    return x - mean, total, allv
  got = vectorize.pfor(fn, 5)
  assert_same(got[0], X - tf.reduce_mean(X, axis=0))
  assert_same(got[1], tf.fill([5], tf.reduce_sum(X)))
  assert_same(got[2], tf.tile(tf.reduce_max(X, axis=[1, 2])[None], [5, 1]))


def test_vectorized_map_nested_elems():
  a = tf.constant(rng.normal(size=[6, 3]), tf.float64)
  b = tf.constant(rng.integers(0, 9, size=[6, 2]), tf.int64)
  fn = lambda e: {"p": e[0] * tf.cast(tf.reduce_sum(e[1]), tf.float64), "q": e[1][::-1]}
  assert_same(vectorize.vectorized_map(fn, (a, b)), rows(fn, (a, b)))


def test_vectorized_map_broadcast_leading_one():
  a = tf.constant(rng.normal(size=[6, 3]), tf.float32)
  b = tf.constant(rng.normal(size=[1, 3]), tf.float32)
  got = vectorize.vectorized_map(lambda e: e[0] + e[1], (a, b))
  assert_same(got, a + b)


def test_map_fn_matches_tf_map_fn():
  x = tf.constant(rng.normal(size=[7, 4]), tf.float32)
  fn = lambda r: (tf.reduce_sum(r), tf.argmax(r, output_type=tf.int32))
  sig = (tf.float32, tf.int32)
  assert_same(vectorize.map_fn(fn, x, fn_output_signature=sig),
              tf.map_fn(fn, x, fn_output_signature=sig))


def test_map_fn_dtype_alias_and_empty():
  x = tf.zeros([0, 4], tf.float32)
  got = vectorize.map_fn(lambda r: tf.cast(r, tf.int32), x, dtype=tf.int32)
  # tf.map_fn itself says (0,) here without a TensorSpec; the loop's per-row shape is [4]
  ref = tf.map_fn(lambda r: tf.cast(r, tf.int32), x,
                  fn_output_signature=tf.TensorSpec([4], tf.int32))
  assert_same(got, ref)


def test_map_fn_in_tf_function_runtime_size():
  @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
  def f(x):
    return vectorize.map_fn(lambda r: tf.nn.softmax(r) * tf.reduce_max(r), x)
  for n in (0, 1, 4):
    x = tf.constant(rng.normal(size=[n, 3]), tf.float32)
    assert_same(f(x), tf.map_fn(lambda r: tf.nn.softmax(r) * tf.reduce_max(r), x,
                                fn_output_signature=tf.TensorSpec([3], tf.float32)))


def test_uint8_and_bool_and_int8():
  x = tf.constant(rng.integers(0, 255, size=[4, 6]), tf.uint8)
  fn = lambda i: (x[i] // 3, x[i] > 100, tf.cast(x[i], tf.int8), tf.reduce_max(x[i]))
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


def test_float16_math():
  x = tf.constant(rng.normal(size=[4, 5]), tf.float16)
  fn = lambda i: tf.nn.softmax(x[i] * tf.cast(i, tf.float16))
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))
