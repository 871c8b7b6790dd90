"""String ops beyond the OpCases: Keras text preprocessing layers as per-example bodies."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import vectorize

_WORDS = tf.constant([["cat", "dog", "x"], ["bird", "cat", "cat"], ["", "dog", "bird"]])


@pytest.mark.parametrize("make_layer", [
    lambda: keras.layers.StringLookup(vocabulary=["cat", "dog", "bird"]),
    lambda: keras.layers.StringLookup(vocabulary=["cat", "dog", "bird"], output_mode="one_hot"),
    lambda: keras.layers.Hashing(num_bins=7),
    lambda: keras.layers.Hashing(num_bins=7, salt=[3, 4]),
], ids=["string_lookup", "string_lookup_one_hot", "hashing", "hashing_salted"])
def test_keras_text_layer_under_vectorized_map_equals_the_loop(make_layer):
  layer = make_layer()
  actual = vectorize.vectorized_map(layer, _WORDS, fallback_to_while_loop=False)
  expected = tf.stack([layer(w) for w in _WORDS])
  np.testing.assert_array_equal(actual, expected)


def test_unsorted_segment_join_with_an_id_past_num_segments_is_an_error_not_a_neighbour():
  words = tf.constant([["a", "b"], ["c", "d"]])
  ids = tf.constant([[0, 2], [0, 1]])   # iteration 0's id 2 would be iteration 1's segment 0
  with pytest.raises(tf.errors.InvalidArgumentError, match="segment_ids"):
    vectorize.pfor(lambda i: tf.strings.unsorted_segment_join(words[i], ids[i], 2), 2,
                   fallback_to_while_loop=False)


_SENTENCES = tf.constant(["the cat sat", "zz", "a bb ccc dddd e", "hello", "x  y"])
_LENGTHS = tf.constant([3, 0, 2, 1, 2])


def _substr_in_a_loop(i):
  def step(k, acc):
    return k + 1, tf.strings.join([acc, tf.strings.substr(_SENTENCES[i], k, 2)])
  return tf.while_loop(lambda k, a: k < _LENGTHS[i], step, (0, tf.constant("")))[1]


def _substr_in_a_branch(i):
  return tf.cond(_LENGTHS[i] > 1, lambda: tf.strings.substr(_SENTENCES[i], _LENGTHS[i] - 1, 2),
                 lambda: _SENTENCES[i])


@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize("body", [_substr_in_a_loop, _substr_in_a_branch],
                         ids=lambda f: f.__name__)
def test_substr_of_a_per_iteration_position_where_n_is_not_static(body, static):
  """Code-blind round 10: inside a loop of per-iteration trips (or a branch under static
  shapes) `pos` was broadcast to `[5]` and `len` to `[?]`, which Substr's shape check
  refused with TensorFlow's error."""
  expected = [body(tf.constant(k)).numpy() for k in range(5)]
  with vectorize.static_shapes(static):
    got = vectorize.pfor(body, 5, fallback_to_while_loop=False)
  assert list(got.numpy()) == expected


@pytest.mark.parametrize("n,mode", [(3, "eager"), (0, "eager"), (3, "dynamic"), (0, "dynamic")])
def test_dense_hash_table_lookup_of_a_key_vector_per_iteration(n, mode):
  """A dense table takes keys with one leading axis only: the loop axis merges into the
  keys' first, the values split back (was a raw 'Expected key shape [3] got [3,2]')."""
  table = tf.lookup.experimental.DenseHashTable(tf.int64, tf.float32, default_value=-1.0,
                                                empty_key=-2, deleted_key=-3)
  table.insert(tf.constant([1, 5], tf.int64), tf.constant([10.0, 50.0]))
  ids = tf.constant([[1, 2], [5, 5], [0, 1]], tf.int64)
  body = lambda i: table.lookup(ids[i])
  pfor = lambda k: vectorize.pfor(body, k, fallback_to_while_loop=False)
  got = pfor(n) if mode == "eager" else tf.function(
      pfor, input_signature=[tf.TensorSpec([], tf.int32)])(tf.constant(n))
  want = tf.stack([body(tf.constant(i)) for i in range(3)])[:n]
  assert got.shape == want.shape
  np.testing.assert_array_equal(got.numpy(), want.numpy())
