"""Per-example-length outputs and ragged inputs: must equal tf.ragged.stack of the loop."""
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.users._util import assert_same, loop, rows

rng = np.random.default_rng(4)
X = tf.constant(rng.normal(size=[6, 5]).astype(np.float32))
IDS = tf.constant(rng.integers(0, 4, size=[6, 7]), tf.int32)


def test_range_of_i():
  fn = lambda i: tf.range(i)
  assert_same(vectorize.pfor(fn, 5), tf.ragged.stack([tf.range(i) for i in range(5)]))


def test_range_of_i_float_and_n_zero():
  fn = lambda i: tf.cast(tf.range(i), tf.float64) * 0.5
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))
  out = vectorize.pfor(fn, 0)
  assert out.shape[0] == 0


def test_boolean_mask_positive():
  fn = lambda i: tf.boolean_mask(X[i], X[i] > 0)
  assert_same(vectorize.pfor(fn, 6), loop(fn, 6))


def test_boolean_mask_reduced_is_dense():
  fn = lambda i: tf.reduce_sum(tf.boolean_mask(X[i], X[i] > 0))
  got = vectorize.pfor(fn, 6, fallback_to_while_loop=False)
  assert_same(got, loop(fn, 6))


def test_unique_per_row():
  fn = lambda i: tf.unique(IDS[i])[0]
  assert_same(vectorize.pfor(fn, 6), loop(fn, 6))


def test_unique_with_counts_int64():
  fn = lambda i: tf.unique_with_counts(tf.cast(IDS[i], tf.int64), out_idx=tf.int64)
  got = vectorize.pfor(lambda i: tuple(fn(i)), 6)
  ref = loop(lambda i: tuple(fn(i)), 6)
  assert_same(got, ref)


def _uniform_later_axes(got, expected):
  """The README: where only the first axis varies, the later axes stay uniform (ragged
  rank 1), where tf.ragged.stack of dense rows marks them ragged; the values are equal."""
  assert got.ragged_rank == 1 and got.shape[2:].is_fully_defined(), got.shape
  assert got.to_list() == expected.to_list()
  assert got.dtype == expected.dtype


def test_where_one_arg():
  fn = lambda i: tf.where(X[i] > 0.3)
  _uniform_later_axes(vectorize.pfor(fn, 6), loop(fn, 6))


def test_string_split_words():
  s = tf.constant(["a b c", "", "hello world", "x", "one two three four"])
  fn = lambda i: tf.strings.split(s[i])
  assert_same(vectorize.pfor(fn, 5), loop(fn, 5))


def test_string_split_then_length_dense():
  s = tf.constant(["a b c", "", "hello world", "x"])
  fn = lambda i: tf.size(tf.strings.split(s[i]))
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


def test_ragged_output_in_tf_function():
  f = tf.function(lambda: vectorize.pfor(lambda i: tf.range(i * 2, dtype=tf.int64), 4))
  assert_same(f(), loop(lambda i: tf.range(i * 2, dtype=tf.int64), 4))


def test_ragged_output_runtime_n():
  f = tf.function(lambda n: vectorize.pfor(lambda i: tf.range(i), n),
                  input_signature=[tf.TensorSpec([], tf.int32)])
  assert_same(f(tf.constant(4)), loop(lambda i: tf.range(i), 4))


def test_ragged_2d_rows():
  fn = lambda i: tf.reshape(tf.range(i * 3), [i, 3])
  got = vectorize.pfor(fn, 4)
  _uniform_later_axes(got, loop(fn, 4))
  assert got.shape.as_list() == [4, None, 3]


def test_slice_to_length():
  lengths = tf.constant([3, 0, 5, 1, 2, 4])
  fn = lambda i: X[i][:lengths[i]] * 2.0
  assert_same(vectorize.pfor(fn, 6), loop(fn, 6))


def test_ragged_xla_error_is_clear():
  f = tf.function(lambda: vectorize.pfor(lambda i: tf.range(i), 3), jit_compile=True)
  with pytest.raises(vectorize.ConversionError) as e:
    f()
  msg = str(e.value).lower()
  assert "xla" in msg or "ragged" in msg or "static" in msg, msg


def test_vectorized_map_ragged_input_rows():
  rt = tf.ragged.constant([[1.0, 2.0], [], [3.0, 4.0, 5.0], [6.0]])
  fn = lambda r: tf.reduce_sum(r) + tf.cast(tf.size(r), tf.float32)
  assert_same(vectorize.vectorized_map(fn, rt), tf.stack([fn(r) for r in rt]))


def test_vectorized_map_ragged_input_ragged_output():
  rt = tf.ragged.constant([[1, 2], [], [3, 4, 5], [6]], dtype=tf.int64)
  fn = lambda r: r * 10 + 1
  assert_same(vectorize.vectorized_map(fn, rt), tf.ragged.stack([fn(r) for r in rt]))


def test_returning_ragged_tensor_from_body():
  fn = lambda i: tf.RaggedTensor.from_row_lengths(tf.range(6), [i % 3, 3 - i % 3, 3])
  got = vectorize.pfor(fn, 4)
  assert_same(got, tf.ragged.stack([fn(tf.constant(i)) for i in range(4)]))


def test_text_model_mean_embedding_per_example_tokens():
  emb = tf.constant(rng.normal(size=[10, 3]).astype(np.float32))
  s = tf.constant(["3 1 4", "1 5", "9 2 6 5 3", "5"])
  def fn(i):
    toks = tf.strings.to_number(tf.strings.split(s[i]), tf.int32)
    return tf.reduce_mean(tf.gather(emb, toks), axis=0)
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


def test_dynamic_partition_per_example():
  fn = lambda i: tf.dynamic_partition(X[i], tf.cast(X[i] > 0, tf.int32), 2)
  got = vectorize.pfor(fn, 6)
  ref = loop(fn, 6)
  assert_same(got, ref)


def test_sort_within_ragged_rows():
  fn = lambda i: tf.sort(tf.boolean_mask(X[i], X[i] < 0.5), direction="DESCENDING")
  assert_same(vectorize.pfor(fn, 6), loop(fn, 6))


def test_cumsum_of_ragged():
  fn = lambda i: tf.cumsum(tf.range(i, dtype=tf.float32) + 1.0)
  assert_same(vectorize.pfor(fn, 5), loop(fn, 5))


def test_sparse_output():
  fn = lambda i: tf.sparse.from_dense(tf.one_hot(i % 3, 4) * tf.cast(i, tf.float32))
  got = vectorize.pfor(fn, 4)
  ref = tf.sparse.concat(0, [tf.sparse.expand_dims(fn(tf.constant(i)), 0) for i in range(4)])
  assert isinstance(got, tf.SparseTensor)
  assert_same(tf.sparse.to_dense(got), tf.sparse.to_dense(ref))


def test_where_one_arg_values():
  fn = lambda i: tf.where(X[i] > 0.3)
  got, ref = vectorize.pfor(fn, 6), loop(fn, 6)
  assert isinstance(got, tf.RaggedTensor) and got.dtype == tf.int64
  assert got.to_list() == ref.to_list()
