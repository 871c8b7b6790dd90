"""Everyday ops on each example's own length: cumsum / cumprod (empty rows, zero-width
features), reductions, sorts, top_k, unique, gathers at per-example indices."""
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.users._util_users3 import plain_mode_users3  # noqa: F401 (autouse)
from tests.users._util_users3 import (assert_empty_like, assert_same, checked_pfor,
                                      in_function, loop, runtime_n)

X = tf.constant([[3., 1., 2., 5.], [4., 4., 1., 0.], [2., -1., 7., 1.], [1., 1., 1., 1.]])
XI = tf.constant([[3, 1, 2, 5], [4, 4, 1, 0], [2, -1, 7, 1], [1, 1, 1, 1]], tf.int64)
L = tf.constant([3, 0, 4, 2])


def test_cumsum_of_prefix_with_empty_row():
  def body(i):
    return tf.cumsum(X[i, :L[i]])

  want = loop(body, 4)
  assert_same(checked_pfor(body, 4), want)
  assert_same(runtime_n(body)(tf.constant(4)), want)
  assert_empty_like(vectorize.pfor(body, 0), [(tf.float32, None)])


def test_cumprod_exclusive_reverse_int64():
  def body(i):
    row = XI[i, :L[i]]
    return (tf.math.cumprod(row, exclusive=True, reverse=True),
            tf.math.cumsum(row, exclusive=True))

  want = loop(body, 4)
  assert_same(vectorize.pfor(body, 4), want)
  assert_same(in_function(body, 4), want)


def test_cumsum_zero_width_features():
  feats = tf.zeros([4, 4, 0])

  def body(i):
    return tf.cumsum(feats[i, :L[i]], axis=0), tf.shape(feats[i, :L[i]])

  want = loop(body, 4)
  got = checked_pfor(body, 4)
  assert_same(got, want)
  assert_same(runtime_n(body)(tf.constant(4)), want)


def test_cumsum_along_features_of_ragged_rows():
  feats = tf.reshape(tf.range(24, dtype=tf.float64), [4, 3, 2])
  lens = tf.constant([1, 3, 0, 2])

  def body(i):
    rows = feats[i, :lens[i]]
    return tf.cumsum(rows, axis=1), tf.cumsum(rows, axis=0, reverse=True)

  want = loop(body, 4)
  assert_same(vectorize.pfor(body, 4), want)
  assert_same(in_function(body, 4), want)


def test_reductions_of_prefix_including_empty():
  def body(i):
    row = X[i, :L[i]]
    irow = XI[i, :L[i]]
    return (tf.reduce_sum(row), tf.reduce_max(row), tf.reduce_min(irow),
            tf.reduce_prod(irow), tf.reduce_mean(row), tf.reduce_any(row > 2.),
            tf.reduce_all(row > 0.), tf.math.reduce_logsumexp(row))

  want = loop(body, 4)
  assert_same(checked_pfor(body, 4), want)
  assert_same(runtime_n(body)(tf.constant(4)), want)


def test_sort_descending_and_argsort_stable():
  def body(i):
    row = X[i, :L[i]]
    return (tf.sort(row, direction="DESCENDING"),
            tf.argsort(row, stable=True),
            tf.argsort(XI[i, :L[i]], direction="DESCENDING", stable=True))

  want = loop(body, 4)
  assert_same(checked_pfor(body, 4), want)
  assert_same(in_function(body, 4), want)


def test_top_k_fixed_k_within_every_length():
  lens = tf.constant([3, 2, 4, 2])

  def body(i):
    v, ix = tf.math.top_k(X[i, :lens[i]], k=2)
    return v, ix

  want = loop(body, 4)
  assert_same(vectorize.pfor(body, 4), want)
  assert_same(runtime_n(body)(tf.constant(4)), want)


def test_top_k_k_equals_per_example_length():
  def body(i):
    return tf.math.top_k(X[i], k=L[i])

  want = loop(body, 4)
  assert_same(tuple(vectorize.pfor(body, 4)), tuple(want))


def test_unique_of_prefix_with_idx_and_counts():
  def body(i):
    y, idx, count = tf.unique_with_counts(XI[i, :L[i]])
    return y, idx, count

  want = loop(body, 4)
  assert_same(checked_pfor(body, 4), want)
  assert_same(in_function(body, 4), want)


def test_gather_at_per_example_indices():
  idx = tf.constant([[2, 0, 1, 1], [0, 0, 0, 0], [3, 3, 0, 1], [1, 0, 0, 0]])

  def body(i):
    return tf.gather(X[i], idx[i, :L[i]]), tf.gather(XI, idx[i, :L[i]])

  want = loop(body, 4)
  assert_same(checked_pfor(body, 4), want)
  assert_same(runtime_n(body)(tf.constant(4)), want)


def test_boolean_mask_sum_is_dense_again():
  def body(i):
    return tf.reduce_sum(tf.boolean_mask(X[i], X[i] > 1.5)), tf.size(tf.where(X[i] > 1.5))

  want = loop(body, 4)
  assert_same(vectorize.pfor(body, 4), want)
  assert_same(in_function(body, 4), want)


def test_vectorized_map_over_ragged_rows_cumsum_and_sort():
  rt = tf.ragged.constant([[3., 1.], [], [5., -2., 4.], [0.]])

  def fn(row):
    return tf.cumsum(row), tf.sort(row), tf.reduce_max(row, axis=0)

  want = tuple(tf.ragged.stack([fn(r)[k] for r in rt]) if k < 2 else
               tf.stack([fn(r)[k] for r in rt]) for k in range(3))
  got = vectorize.vectorized_map(fn, rt)
  assert_same(tuple(got), want)


def test_strings_split_and_lengths():
  text = tf.constant(["the cat", "", "a bb ccc dddd", "x y"])

  def body(i):
    words = tf.strings.split(text[i])
    return words, tf.strings.length(words), tf.size(words)

  want = loop(body, 4)
  assert_same(vectorize.pfor(body, 4), want)
  assert_same(runtime_n(body)(tf.constant(4)), want)


def test_map_fn_prefix_mean_with_zero_length():
  def fn(args):
    row, n = args
    return tf.math.divide_no_nan(tf.reduce_sum(row[:n]), tf.cast(n, tf.float32))

  want = tf.map_fn(fn, (X, L), fn_output_signature=tf.float32)
  got = vectorize.map_fn(fn, (X, L), fn_output_signature=tf.float32)
  assert_same(got, want)
  got0 = vectorize.map_fn(fn, (X[:0], L[:0]), fn_output_signature=tf.float32)
  assert_empty_like(got0, [(tf.float32, ())])


def test_slices_past_the_end_and_negative_suffix_of_length_zero():
  long_ = tf.constant([6, 0, 2, 9])      # past the row's end: clamped, as in the loop
  tail = tf.constant([1, 0, 2, 4])       # x[i, -0:] is the WHOLE row

  def body(i):
    return X[i, :long_[i]], X[i, -tail[i]:], X[i, tail[i]::-1]

  want = loop(body, 4)
  assert want[1].to_list()[1] == [4., 4., 1., 0.]
  assert_same(checked_pfor(body, 4), want)
  assert_same(runtime_n(body)(tf.constant(4)), want)


def test_per_example_stride_slice():
  s = tf.constant([1, 2, 3, 4])

  def body(i):
    return X[i, ::s[i]]

  want = loop(body, 4)
  assert_same(vectorize.pfor(body, 4), want)


def test_ragged_rank_two_built_in_body_and_zero_width_reductions():
  feats = tf.zeros([4, 4, 0])

  def body(i):
    row = X[i, :L[i]]
    rt = tf.RaggedTensor.from_row_splits(row, tf.concat([[0], tf.range(1, L[i] + 1)], 0))
    r = feats[i, :L[i]]
    return rt, tf.reduce_sum(r, axis=0), tf.reduce_max(r, axis=1)

  want = loop(body, 4)
  assert_same(vectorize.pfor(body, 4), want)
  assert_same(in_function(body, 4), want)


def test_unique_of_split_words_and_top_k_ties():
  text = tf.constant(["a b a", "", "c c c", "x y x y"])
  lens = tf.constant([3, 2, 4, 3])

  def body(i):
    y, idx = tf.unique(tf.strings.split(text[i]))
    vals, ix = tf.math.top_k(XI[i, :lens[i]], k=2)
    return y, idx, vals, ix

  want = loop(body, 4)
  assert_same(vectorize.pfor(body, 4), want)
  assert_same(runtime_n(body)(tf.constant(4)), want)


def test_segment_ops_with_per_example_ids():
  seg = tf.constant([[0, 0, 1, 1], [0, 1, 2, 3], [0, 0, 0, 2], [1, 1, 1, 1]])

  def body(i):
    return (tf.math.segment_sum(X[i, :L[i]], seg[i, :L[i]]),
            tf.math.unsorted_segment_max(X[i, :L[i]], seg[i, :L[i]], 3))

  want = loop(body, 4)
  assert_same(vectorize.pfor(body, 4), want)
  assert_same(in_function(body, 4), want)


def test_split_words_unique_with_counts_and_sort_by_length():
  text = tf.constant(["b a b", "", "c cc a", "zzz"])

  def body(i):
    w = tf.strings.split(text[i])
    y, _, c = tf.unique_with_counts(w)
    return y, c, tf.gather(w, tf.argsort(tf.strings.length(w), stable=True))

  want = loop(body, 4)
  assert_same(vectorize.pfor(body, 4), want)
  assert_same(in_function(body, 4), want)
