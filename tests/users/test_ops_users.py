"""Op families users reach for: random with seeds, strings, images, linear algebra, complex."""
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.users._util import assert_same, loop, rows

rng = np.random.default_rng(7)
X = tf.constant(rng.normal(size=[5, 4]).astype(np.float32))
IMGS = tf.constant(rng.uniform(size=[4, 6, 6, 3]).astype(np.float32))


# ---- random ----
def test_stateless_uniform_per_example_seed_bitwise():
  fn = lambda i: tf.random.stateless_uniform([3, 2], seed=tf.stack([i, 42]))
  assert_same(vectorize.pfor(fn, 5), loop(fn, 5), rtol=0, atol=0)


def test_stateless_uniform_int_and_normal():
  fn = lambda i: (tf.random.stateless_uniform([4], seed=[i, 1], minval=0, maxval=100, dtype=tf.int64),
                  tf.random.stateless_normal([4], seed=[7, i], dtype=tf.float64))
  assert_same(vectorize.pfor(fn, 5), loop(fn, 5))


def test_stateless_truncated_normal_and_categorical():
  logits = tf.math.log([[0.2, 0.3, 0.5]])
  fn = lambda i: (tf.random.stateless_truncated_normal([3], seed=[i, 3]),
                  tf.random.stateless_categorical(logits, 5, seed=[i, 9])[0])
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


def test_stateless_random_xla():
  fn = lambda i: tf.random.stateless_normal([3], seed=tf.stack([i, i * 2]))
  f = tf.function(lambda: vectorize.pfor(fn, 4), jit_compile=True)
  # XLA picks its own stateless algorithm: compare with the loop under XLA
  ref = tf.function(lambda: loop(fn, 4), jit_compile=True)()
  assert_same(f(), ref, rtol=1e-5, atol=1e-6)


def test_stateless_image_augment():
  fn = lambda i: tf.image.stateless_random_flip_left_right(IMGS[i], seed=tf.stack([i, 5]))
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


def test_stateful_random_with_op_seed_distinct_rows():
  out = vectorize.pfor(lambda i: tf.random.uniform([50], seed=3), 4)
  assert out.shape == (4, 50)
  assert len({tuple(r) for r in out.numpy().round(6).tolist()}) == 4


# ---- strings ----
def test_string_ops():
  s = tf.constant(["Hello World", "tf data", "", "ABC def ghi"])
  fn = lambda i: (tf.strings.lower(s[i]), tf.strings.length(s[i]), tf.strings.substr(s[i], 0, 3),
                  tf.strings.regex_replace(s[i], "[aeiou]", "*"), tf.strings.join([s[i], "!"], separator="-"))
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


def test_string_format_and_as_string():
  fn = lambda i: (tf.strings.as_string(tf.cast(i, tf.float32) / 3.0, precision=2),
                  tf.strings.format("id={}", i))
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


def test_string_to_number_bytes_split():
  s = tf.constant(["12", "7", "301"])
  fn = lambda i: (tf.strings.to_number(s[i], tf.int64), tf.strings.unicode_decode(s[i], "UTF-8"))
  assert_same(vectorize.pfor(fn, 3), loop(fn, 3))


def test_string_lookup_table():
  keys = tf.constant(["a", "b", "c"])
  table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, tf.constant([1, 2, 3], tf.int64)), -1)
  s = tf.constant([["a", "z"], ["c", "b"], ["b", "b"]])
  fn = lambda i: table.lookup(s[i])
  assert_same(vectorize.pfor(fn, 3), loop(fn, 3))


# ---- images ----
def test_image_ops_chain():
  def fn(i):
    im = IMGS[i]
    im = tf.image.adjust_brightness(im, 0.1)
    im = tf.image.adjust_contrast(im, 1.5)
    im = tf.image.rgb_to_grayscale(im)
    im = tf.image.resize(im, [3, 4], method="bilinear")
    return tf.image.rot90(im)
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


def test_image_per_example_crop_offsets():
  offs = tf.constant([0, 1, 2, 1])
  fn = lambda i: tf.image.crop_to_bounding_box(IMGS[i], offs[i], offs[i], 3, 3)
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


def test_image_hsv_and_sobel_xla():
  fn = lambda i: (tf.image.rgb_to_hsv(IMGS[i]), tf.image.sobel_edges(IMGS[i][None])[0])
  f = tf.function(lambda: vectorize.pfor(fn, 4), jit_compile=True)
  assert_same(f(), loop(fn, 4))


def test_encode_decode_jpeg_roundtrip():
  u8 = tf.cast(IMGS * 255, tf.uint8)
  fn = lambda i: tf.io.decode_jpeg(tf.io.encode_jpeg(u8[i]))
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


# ---- linear algebra ----
def _spd(n, dtype):
  a = rng.normal(size=[n, 3, 3])
  return tf.constant(a @ np.transpose(a, [0, 2, 1]) + 3 * np.eye(3), dtype)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_cholesky_solve_det_inv(dtype):
  A = _spd(4, dtype)
  b = tf.constant(rng.normal(size=[4, 3, 1]), dtype)
  def fn(i):
    L = tf.linalg.cholesky(A[i])
    return (tf.linalg.cholesky_solve(L, b[i]), tf.linalg.det(A[i]), tf.linalg.inv(A[i]),
            tf.linalg.logdet(A[i]), tf.linalg.solve(A[i], b[i]))
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4), rtol=1e-4 if dtype == tf.float32 else 1e-9, atol=1e-5 if dtype == tf.float32 else 1e-10)


def test_eigh_svd_qr_values():
  A = _spd(3, tf.float64)
  def fn(i):
    e = tf.linalg.eigvalsh(A[i])
    s = tf.linalg.svd(A[i], compute_uv=False)
    q, r = tf.linalg.qr(A[i])
    return e, s, tf.abs(tf.linalg.diag_part(r))
  assert_same(vectorize.pfor(fn, 3), loop(fn, 3))


def test_einsum_matmul_norms():
  M = tf.constant(rng.normal(size=[5, 3, 4]), tf.float32)
  fn = lambda i: (tf.einsum("ij,j->i", M[i], X[i]), tf.norm(M[i], ord="fro", axis=[0, 1]),
                  tf.linalg.trace(tf.matmul(M[i], M[i], transpose_b=True)), tf.tensordot(X[i], X[i], 1))
  assert_same(vectorize.pfor(fn, 5), loop(fn, 5))


def test_triangular_solve_and_band_part():
  A = _spd(3, tf.float32)
  fn = lambda i: tf.linalg.triangular_solve(tf.linalg.band_part(A[i], -1, 0), tf.ones([3, 2]))
  assert_same(vectorize.pfor(fn, 3), loop(fn, 3))


# ---- complex ----
@pytest.mark.parametrize("dtype", [tf.complex64, tf.complex128])
def test_complex_math_and_fft(dtype):
  z = tf.complex(tf.cast(X, dtype.real_dtype), tf.cast(X[::-1], dtype.real_dtype))
  fn = lambda i: (tf.signal.fft(z[i]), tf.math.conj(z[i]) * z[i], tf.abs(z[i]), tf.math.angle(z[i]),
                  tf.reduce_sum(tf.exp(z[i])))
  assert_same(vectorize.pfor(fn, 5), loop(fn, 5))


def test_complex_matmul_and_rfft():
  z = tf.complex(X, -X)
  fn = lambda i: (tf.linalg.matvec(tf.complex(tf.eye(4), tf.eye(4)), z[i]), tf.signal.rfft(X[i]),
                  tf.signal.irfft(tf.signal.rfft(X[i])))
  assert_same(vectorize.pfor(fn, 5), loop(fn, 5))


# ---- misc ----
def test_gather_scatter_segment_topk():
  idx = tf.constant(rng.integers(0, 4, size=[5, 3]), tf.int32)
  fn = lambda i: (tf.gather(X[i], idx[i]), tf.tensor_scatter_nd_add(X[i], idx[i][:, None], tf.ones([3])),
                  tf.math.unsorted_segment_sum(X[i], [0, 1, 0, 1], 2), tf.math.top_k(X[i], 2).indices,
                  tf.argsort(X[i]))
  assert_same(vectorize.pfor(fn, 5), loop(fn, 5))


def test_one_hot_pad_tile_concat_reverse():
  fn = lambda i: (tf.one_hot(i, 5, dtype=tf.int32), tf.pad(X[i][None], [[1, 0], [0, 2]], constant_values=-1.0),
                  tf.tile(X[i][:2], [3]), tf.concat([X[i], tf.reverse(X[i], [0])], 0))
  assert_same(vectorize.pfor(fn, 5), loop(fn, 5))


def test_bitwise_and_int_math():
  a = tf.constant(rng.integers(0, 1000, size=[5, 3]), tf.int32)
  fn = lambda i: (tf.bitwise.bitwise_and(a[i], 0xF), tf.bitwise.left_shift(a[i], 2), a[i] % 7,
                  tf.math.floordiv(-a[i], 3), tf.math.reduce_prod(tf.cast(a[i] % 5 + 1, tf.int64)))
  assert_same(vectorize.pfor(fn, 5, fallback_to_while_loop=False), loop(fn, 5))


def test_print_in_body_runs():
  fn = lambda i: (tf.print("row", i), X[i] + 1)[1]
  assert_same(vectorize.pfor(fn, 3), X[:3] + 1)


def test_numpy_function_falls_back_or_errors_clearly():
  fn = lambda i: tf.numpy_function(lambda v: np.float32(v * 2), [tf.cast(i, tf.float32)], tf.float32)
  try:
    got = vectorize.pfor(fn, 3)
  except vectorize.ConversionError as e:
    assert "numpy_function" in str(e) or "PyFunc" in str(e), str(e)
    return
  np.testing.assert_allclose(np.asarray(got).reshape(-1), [0., 2., 4.])
