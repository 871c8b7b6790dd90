"""Per-example ops over each example's own prefix x[i, :L[i]] and other per-iteration
shapes, in several dtypes, eagerly, in tf.function, with a run-time n (and n = 0), and under
XLA where shapes are static."""
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from ._util_users4 import _no_checked_env, loop, assert_same, check_modes  # noqa: F401

RS = np.random.RandomState(0)
X = tf.constant(np.round(RS.randn(5, 6), 1).astype(np.float32))
XD = tf.cast(X, tf.float64)
XI = tf.constant(RS.randint(-5, 6, size=(5, 6)).astype(np.int32))
XL = tf.cast(XI, tf.int64)
L = tf.constant([3, 6, 0, 1, 4])
W = tf.constant([["a", "bb", "c", "", "dd", "e"]] * 5)
SENT = tf.constant(["the cat sat", "a", "", "dogs bark loud now", "x y"])

PROGRAMS = {
    "cumsum_prefix_f64": lambda i: tf.math.cumsum(XD[i, :L[i]], reverse=True),
    "sort_prefix_desc": lambda i: tf.sort(X[i, :L[i]], direction="DESCENDING"),
    "argsort_prefix_int": lambda i: tf.argsort(XI[i, :L[i]], stable=True),
    "unique_prefix": lambda i: tf.unique(XI[i, :L[i]])[0],
    "empty_int_reductions": lambda i: (tf.reduce_max(XI[i, :L[i]]), tf.reduce_min(XL[i, :L[i]]),
                                       tf.reduce_prod(XL[i, :L[i]])),
    "string_reduce_join": lambda i: tf.strings.reduce_join(W[i, :L[i]], separator="-"),
    "string_split_words": lambda i: tf.strings.split(SENT[i]),
    "string_compare": lambda i: (tf.strings.length(SENT[i]) > 3, tf.equal(SENT[i], "a"),
                                 tf.strings.substr(SENT[i], 0, 3)),
    "boolean_mask_sum": lambda i: tf.reduce_sum(tf.boolean_mask(XI[i], XI[i] > 0)),
    "bincount_prefix": lambda i: tf.math.bincount(tf.abs(XI[i, :L[i]]), minlength=6, maxlength=6),
    "softmax_prefix": lambda i: tf.nn.softmax(X[i, :L[i]]),
    "bool_all_prefix": lambda i: tf.reduce_all(tf.not_equal(XI[i, :L[i]], 0)),
    "int64_floordiv_mod": lambda i: (XL[i] // 3, XL[i] % 3, tf.math.floormod(XL[i], -4)),
    "tile_by_index": lambda i: tf.tile(X[i, :2], [i + 1]),
    "cond_on_ragged": lambda i: tf.cond(i % 2 == 0, lambda: X[i, :L[i]], lambda: -X[i, :L[i]]),
    "mean_prefix_nan_when_empty": lambda i: tf.reduce_mean(X[i, :L[i]]),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_all_modes(name):
  body = PROGRAMS[name]
  check_modes(body, 5, modes=("eager", "runtime_n"))
  f = tf.function(lambda k: vectorize.pfor(body, k), input_signature=[tf.TensorSpec([], tf.int32)])
  for t in tf.nest.flatten(f(tf.constant(0)), expand_composites=False):
    assert t.shape[0] == 0


XLA_PROGRAMS = {
    "topk": lambda i: tf.math.top_k(X[i], k=2),
    "cholesky_f64": lambda i: tf.linalg.cholesky(
        tf.eye(3, dtype=tf.float64) * 2.0 + XD[i, :3, None] * XD[i, None, :3]),
    "searchsorted": lambda i: tf.searchsorted(tf.sort(X[i]), X[(i + 1) % 5]),
    "segment_sum": lambda i: tf.math.unsorted_segment_sum(X[i], tf.abs(XI[i]) % 3, 3),
    "uint8_image": lambda i: tf.image.convert_image_dtype(tf.cast(tf.abs(XI[i]) * 20, tf.uint8),
                                                         tf.float32),
    "roll_by_index": lambda i: tf.roll(X[i], shift=i, axis=0),
    "fixed_window": lambda i: _window(XL[i], i % 3),
}


def _window(row, s):
  return row[s:s + 3] * 2         # one start tensor: its length is fixed in the graph


@pytest.mark.parametrize("name", sorted(XLA_PROGRAMS))
def test_program_under_xla(name):
  check_modes(XLA_PROGRAMS[name], 5, modes=("xla", "eager"))


def test_prefix_under_xla_is_a_clear_conversion_error():
  body = lambda i: tf.reduce_mean(X[i, :L[i]])
  with pytest.raises(vectorize.ConversionError, match=r"(?s)strided slice.*under XLA.*To fix"):
    tf.function(lambda: vectorize.pfor(body, 5), jit_compile=True)()


def test_static_shapes_context_pads_cond():
  body = lambda i: tf.cond(X[i, 0] > 0, lambda: XD[i] * 2, lambda: tf.sqrt(tf.abs(XD[i])))
  want = loop(body, 5)
  with vectorize.static_shapes():
    got = vectorize.pfor(body, 5)
  assert_same(got, want)
