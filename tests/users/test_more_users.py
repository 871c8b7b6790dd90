"""Nesting, sparse/IndexedSlices, the eager cache, text models with per-example gradients."""
import numpy as np
import pytest
import tensorflow as tf
import keras

import vectorize
from tests.users._util import assert_same, loop, rows

rng = np.random.default_rng(8)
X = tf.constant(rng.normal(size=[4, 3]).astype(np.float32))


def test_nested_pfor():
  fn = lambda i: vectorize.pfor(lambda j: X[i, j] * tf.cast(i, tf.float32), 3)
  assert_same(vectorize.pfor(fn, 4), X * tf.range(4, dtype=tf.float32)[:, None])


def test_nested_pfor_ragged_inner():
  fn = lambda i: vectorize.pfor(lambda j: tf.range(j + i), 2)
  got = vectorize.pfor(fn, 3)
  assert got.to_list() == [[[], [0]], [[0], [0, 1]], [[0, 1], [0, 1, 2]]]


def test_vectorized_map_sparse_rows():
  st = tf.sparse.from_dense(tf.constant([[1., 0, 2], [0, 0, 3], [4, 5, 0]]))
  got = vectorize.vectorized_map(lambda r: tf.sparse.to_dense(r) * 2 + tf.sparse.reduce_sum(r), st)
  ref = tf.sparse.to_dense(st) * 2 + tf.sparse.reduce_sum(st, axis=1)[:, None]
  assert_same(got, ref)


def test_indexed_slices_gradient_returned_dense():
  emb = tf.Variable(tf.ones([5, 2]))
  def g(i):
    with tf.GradientTape() as t:
      y = tf.reduce_sum(tf.gather(emb, [i % 5, 2]) * tf.cast(i + 1, tf.float32))
    return t.gradient(y, emb)
  got = vectorize.pfor(g, 3)
  assert not isinstance(got, tf.IndexedSlices)
  assert_same(got, tf.stack([tf.convert_to_tensor(g(tf.constant(i))) for i in range(3)]))


def test_complex_variable_gradient():
  z = tf.Variable(tf.complex(1.0, 2.0))
  def cg(i):
    with tf.GradientTape() as t:
      y = tf.math.real(z * tf.complex(tf.cast(i, tf.float32), 1.0) * tf.math.conj(z))
    return t.gradient(y, z)
  assert_same(vectorize.pfor(cg, 3), loop(cg, 3))


def test_cache_sees_rebound_closure():
  def mk(s):
    return lambda i: tf.cast(i, tf.float32) * s
  assert_same(vectorize.pfor(mk(1.0), 3), tf.constant([0., 1., 2.]))
  assert_same(vectorize.pfor(mk(3.0), 3), tf.constant([0., 3., 6.]))


SCALE = 2.0


def test_cache_sees_rebound_global():
  global SCALE
  body = lambda i: tf.cast(i, tf.float32) * SCALE
  SCALE = 2.0
  assert_same(vectorize.pfor(body, 3), loop(body, 3))
  SCALE = 5.0
  assert_same(vectorize.pfor(body, 3), loop(body, 3))


def test_cache_sees_variable_update():
  v = tf.Variable(1.0)
  body = lambda i: tf.cast(i, tf.float32) * v
  vectorize.pfor(body, 3)
  v.assign(4.0)
  assert_same(vectorize.pfor(body, 3), loop(body, 3))


def test_same_body_different_captured_shapes():
  global XS
  XS = tf.ones([3, 2])
  body = lambda i: XS[i] * 2
  assert vectorize.pfor(body, 3).shape == (3, 2)
  XS = tf.ones([4, 5])
  assert_same(vectorize.pfor(body, 4), loop(body, 4))


def test_xla_runtime_n():
  f = tf.function(lambda n: vectorize.pfor(lambda i: X[i] * 2, n), jit_compile=True,
                  input_signature=[tf.TensorSpec([], tf.int32)])
  assert_same(f(tf.constant(3)), X[:3] * 2)


def test_n_zero_nested_structures_types():
  got = vectorize.pfor(lambda i: {"a": (X[i], tf.cast(i, tf.int8)), "s": tf.strings.as_string(i),
                                  "r": tf.range(i)}, 0)
  assert got["a"][0].shape == (0, 3) and got["a"][0].dtype == tf.float32
  assert got["a"][1].shape == (0,) and got["a"][1].dtype == tf.int8
  assert got["s"].dtype == tf.string and got["s"].shape == (0,)
  assert isinstance(got["r"], tf.RaggedTensor) and got["r"].shape[0] == 0


def test_text_model_per_example_gradients():
  keras.utils.set_random_seed(0)
  emb = keras.layers.Embedding(20, 4)
  dense = keras.layers.Dense(2)
  emb.build((None,))
  dense.build((None, 4))
  s = tf.constant(["3 1 4", "1 5", "9 2 6 5 3", "5"])
  y = tf.constant([0, 1, 1, 0])
  def loss_fn(text, lab):
    toks = tf.strings.to_number(tf.strings.split(text), tf.int32)
    h = tf.reduce_mean(emb(toks), axis=0)
    return tf.nn.sparse_softmax_cross_entropy_with_logits(lab, dense(h[None])[0])
  vs = emb.trainable_variables + dense.trainable_variables
  got = vectorize.per_example_gradients(loss_fn, vs, s, y)
  out = []
  for b in range(4):
    with tf.GradientTape() as t:
      l = loss_fn(s[b], y[b])
    out.append([tf.convert_to_tensor(g) for g in t.gradient(l, vs)])
  for g, r in zip(got, [tf.stack(z) for z in zip(*out)]):
    assert_same(g, r)


def test_ragged_self_attention_pooled():
  x3 = tf.constant(rng.normal(size=[3, 5, 4]).astype(np.float32))
  lens = tf.constant([2, 5, 3])
  def att(i):
    x = x3[i][:lens[i]]
    a = tf.nn.softmax(tf.matmul(x, x, transpose_b=True) / 2.0)
    return tf.reduce_sum(tf.matmul(a, x), axis=0)
  assert_same(vectorize.pfor(att, 3), loop(att, 3))


def test_dropout_per_example_gradients_shapes_and_masks_differ():
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dropout(0.5),
                            keras.layers.Dense(1)])
  xs = tf.ones([6, 4])
  got = vectorize.per_example_gradients(lambda x: tf.reduce_sum(model(x[None], training=True)), model, xs)
  assert [tuple(g.shape) for g in got] == [(6, 4, 8), (6, 8), (6, 8, 1), (6, 1)]
  # identical inputs: only the dropout masks make the per-example gradients differ
  assert not np.allclose(got[2][0].numpy(), got[2][1].numpy())


@pytest.mark.parametrize("dtype", [tf.int8, tf.uint8, tf.int16, tf.int64, tf.float16, tf.float64, tf.bfloat16])
def test_reductions_dtypes_fallback_off(dtype):
  lo = 0 if dtype == tf.uint8 else -5
  a = tf.cast(rng.integers(lo, 5, size=[4, 3, 2]), dtype)
  fn = lambda i: (tf.reduce_sum(a[i], 0), tf.reduce_max(a[i], 1, keepdims=True), tf.reduce_min(a[i]),
                  tf.math.cumsum(a[i], axis=1), tf.reduce_prod(a[i], -1))
  assert_same(vectorize.pfor(fn, 4, fallback_to_while_loop=False), loop(fn, 4))


def test_explain_reports_fallback():
  fn = lambda i: tf.numpy_function(lambda v: v, [X[i]], tf.float32)
  ex = vectorize.explain(fn, 3)
  assert "PyFunc" in str(ex) or "numpy" in str(ex).lower()
