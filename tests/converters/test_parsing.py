"""Parsing and decoding beyond the OpCases: records the batched ops cannot take (clear errors,
fallbacks with a reason), eager mode, and that no loop is emitted where a batched op exists."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing


def _pngs(*sizes):
  return tf.stack([tf.io.encode_png(tf.fill([h, w, 3], tf.constant(k, tf.uint8)))
                   for k, (h, w) in enumerate(sizes)])


def _example(values):
  return tf.train.Example(features=tf.train.Features(feature={
      "v": tf.train.Feature(float_list=tf.train.FloatList(value=values))})).SerializeToString()


def test_decode_png_of_images_of_different_sizes_is_a_clear_error():
  pngs = _pngs((4, 4), (4, 4), (5, 4))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"DecodePng .*outputs of different sizes.*resize"):
    testing.run_pfor(lambda i: tf.io.decode_png(pngs[i], channels=3), 3)


def test_decode_png_eager_equals_loop():
  pngs = _pngs((4, 6), (4, 6), (4, 6))
  body = lambda i: tf.io.decode_png(pngs[i], channels=3)
  testing.check_against_loop(body, 3, mode="eager")


def test_parse_tensor_of_different_shapes_is_a_clear_error():
  records = tf.stack([tf.io.serialize_tensor(tf.zeros([2])), tf.io.serialize_tensor(tf.zeros([3]))])
  with pytest.raises(tf.errors.InvalidArgumentError, match="tensors of different shapes"):
    testing.run_pfor(lambda i: tf.io.parse_tensor(records[i], tf.float32), 2)


def test_parse_tensor_of_another_dtype_is_a_clear_error():
  records = tf.stack([tf.io.serialize_tensor(tf.zeros([2], tf.float64))] * 2)
  with pytest.raises(tf.errors.InvalidArgumentError, match="another dtype than float32"):
    testing.run_pfor(lambda i: tf.io.parse_tensor(records[i], tf.float32), 2)


def test_parse_tensor_of_typed_fields_is_a_clear_error():
  proto = tf.make_tensor_proto(np.float32(1.5))           # a scalar: float_val, no raw content
  records = tf.constant([proto.SerializeToString()] * 2)
  with pytest.raises(tf.errors.InvalidArgumentError, match="typed fields"):
    testing.run_pfor(lambda i: tf.io.parse_tensor(records[i], tf.float32), 2)


def test_parse_tensor_eager_equals_loop():
  records = tf.stack([tf.io.serialize_tensor(tf.fill([2, 2], float(k))) for k in range(3)])
  body = lambda i: tf.io.parse_tensor(records[i], tf.float32)
  expected = np.stack([np.full([2, 2], float(k), np.float32) for k in range(3)])
  np.testing.assert_array_equal(testing.run_pfor(body, 3, mode="eager"), expected)


def test_parse_example_of_a_variable_length_feature_falls_back_with_the_reason():
  records = tf.constant([_example([1.0, 2.0]), _example([3.0, 4.0])])
  features = {"v": tf.io.FixedLenSequenceFeature([], tf.float32, allow_missing=True)}
  body = lambda i: tf.io.parse_single_example(records[i], features)["v"]
  with pytest.raises(vectorize.ConversionError, match="variable-length dense feature"):
    testing.run_pfor(body, 2)
  # A feature of no static length is a per-iteration size: it comes back as
  # tf.ragged.stack of the loop gives it: ragged, even where the lengths agree.
  out = tf.function(lambda: vectorize.pfor(body, 2, fallback_to_while_loop=True))()
  assert isinstance(out, tf.RaggedTensor)
  assert out.to_list() == [[1.0, 2.0], [3.0, 4.0]]


@pytest.mark.unchecked   # counts the ops pfor emits (or the prints): the check adds its own
def test_parse_single_example_emits_one_parse_and_no_loop():
  records = tf.constant([_example([float(k)]) for k in range(4)])
  features = {"v": tf.io.FixedLenFeature([1], tf.float32)}
  fn = tf.function(lambda: vectorize.pfor(
      lambda i: tf.io.parse_single_example(records[i], features)["v"], 4,
      fallback_to_while_loop=False))
  types = testing.all_op_types(fn.get_concrete_function().graph)
  assert types.count("ParseExampleV2") == 1
  assert "While" not in types and "StatelessWhile" not in types


def test_decode_raw_of_different_lengths_returned_whole_is_a_clear_error():
  records = tf.constant([b"\x01\x02", b"\x01\x02\x03"])
  with pytest.raises(tf.errors.InvalidArgumentError, match="different lengths in different"):
    testing.run_pfor(lambda i: tf.io.decode_raw(records[i], tf.uint8), 2)


_AUDIO = tf.constant([b"\x01\x02", b"\x03\x04\x05\x06", b"", b"\x07\x08\xff\xff\x00\x80"])


def _decoded_statistics(i):
  """Byte strings of each example's own length decoded, then only reduced and used
  elementwise (code-blind round 13: the batched decode needed one length)."""
  pcm = tf.cast(tf.io.decode_raw(_AUDIO[i], tf.int16), tf.float32)
  loud = tf.abs(pcm) > 1000.0
  return (tf.reduce_sum(pcm), tf.size(pcm), tf.reduce_sum(tf.abs(pcm) * 0.5 + pcm),
          tf.reduce_sum(tf.cast(loud, tf.int32)))


@pytest.mark.parametrize("n,mode", [(4, "eager"), (0, "dynamic"), (4, "function")])
def test_decode_raw_of_different_lengths_reduced_equals_loop(n, mode):
  testing.check_against_loop(_decoded_statistics, n, mode=mode)


def test_decode_raw_of_a_length_not_a_multiple_of_the_type_is_an_error():
  records = tf.constant([b"\x01\x02\x03", b"\x01\x02"])
  with pytest.raises(tf.errors.InvalidArgumentError, match="multiple of 2"):
    testing.run_pfor(lambda i: tf.reduce_sum(tf.io.decode_raw(records[i], tf.int16)), 2)


def test_decode_png_in_a_branch_taken_by_some_iterations_equals_loop():
  pngs = _pngs((4, 6), (4, 6), (4, 6), (4, 6))

  def body(i):
    return tf.cond(i % 2 == 0, lambda: tf.io.decode_png(pngs[i], channels=3),
                   lambda: tf.zeros([4, 6, 3], tf.uint8))

  for mode in ("function", "dynamic"):
    testing.check_against_loop(body, 4, mode=mode)


def test_parse_example_in_a_while_loop_over_records_equals_loop():
  records = tf.constant([[_example([1.0]), _example([2.0])], [_example([3.0]), _example([4.0])]])
  features = {"v": tf.io.FixedLenFeature([1], tf.float32)}

  def body(i):
    def step(k, total):
      return k + 1, total + tf.io.parse_single_example(records[i, k], features)["v"]
    return tf.while_loop(lambda k, _: k < 2, step, (0, tf.zeros([1])))[1]

  testing.check_against_loop(body, 2)


def test_nested_vectorization_of_string_ops_equals_double_loop():
  words = tf.constant([["Ab", "cD"], ["eF", "Gh"], ["iJ", "kl"]])

  def outer(i):
    return vectorize.pfor(lambda j: tf.strings.length(tf.strings.lower(words[i, j])) +
                          tf.cast(tf.strings.to_hash_bucket_fast(words[i, j], 5), tf.int32),
                          2, fallback_to_while_loop=False)

  expected = np.array([[len(w) + tf.strings.to_hash_bucket_fast(w, 5).numpy() for w in row]
                       for row in words.numpy().tolist()])
  np.testing.assert_array_equal(testing.run_pfor(outer, 3), expected)


def test_decode_image_of_a_still_and_an_animation_is_a_clear_error():
  gif = tf.constant(bytes.fromhex(   # 2x2, two frames
      "47494638376102000200810000ff00000102030000000000002c00000000020002000008060003001818"
      "100021f90401000001002c0000000002000200810000ff0000000000000000000806000108041010003b"))
  images = tf.stack([tf.io.encode_png(tf.zeros([2, 2, 3], tf.uint8)), gif])
  with pytest.raises(tf.errors.InvalidArgumentError, match="DecodeImage .*different sizes"):
    testing.run_pfor(lambda i: tf.io.decode_image(images[i], channels=3), 2)


def test_gradient_through_a_parsed_record_equals_loop():
  records = tf.constant([_example([1.0, 2.0]), _example([3.0, -1.0]), _example([0.5, 4.0])])
  features = {"v": tf.io.FixedLenFeature([2], tf.float32)}
  w = tf.Variable([[1.0, -2.0], [0.5, 3.0]])

  def body(i):
    x = tf.io.parse_single_example(records[i], features)["v"]
    return tf.reduce_sum(tf.tanh(tf.linalg.matvec(w, x)))

  with tf.GradientTape() as tape:
    total = tf.reduce_sum(vectorize.pfor(body, 3, fallback_to_while_loop=False))
  actual = tape.gradient(total, w)
  with tf.GradientTape() as tape:
    expected_total = tf.add_n([body(tf.constant(i)) for i in range(3)])
  np.testing.assert_allclose(actual, tape.gradient(expected_total, w), rtol=1e-5)
  np.testing.assert_allclose(total, expected_total, rtol=1e-5)


def test_decode_proto_of_repeated_fields_of_different_lengths_is_a_clear_error():
  shapes = tf.constant([tf.TensorShape([2]).as_proto().SerializeToString(),
                        tf.TensorShape([2, 3]).as_proto().SerializeToString()])
  body = lambda i: tf.io.decode_proto(shapes[i], "tensorflow.TensorShapeProto", ["dim"],
                                      [tf.string]).values[0]
  with pytest.raises(tf.errors.InvalidArgumentError, match="repeated fields of different"):
    testing.run_pfor(body, 2)


def test_parse_example_of_a_read_sparse_feature_falls_back_with_the_reason():
  records = tf.constant([_example([1.0, 2.0]), _example([3.0, 4.0])])
  body = lambda i: tf.sparse.to_dense(tf.io.parse_single_example(
      records[i], {"v": tf.io.VarLenFeature(tf.float32)})["v"])
  with pytest.raises(vectorize.ConversionError, match="sparse or ragged feature is read"):
    testing.run_pfor(body, 2)


@pytest.mark.parametrize("mode", ["function", "dynamic"])
def test_decodes_and_parses_in_chunks_of_parallel_iterations_equal_loop(mode):
  pngs = _pngs(*[(3, 2)] * 5)
  records = tf.constant([_example([float(k), 1.0]) for k in range(5)])
  tensors = tf.stack([tf.io.serialize_tensor(tf.fill([2], float(k))) for k in range(5)])

  def body(i):
    image = tf.cast(tf.io.decode_png(pngs[i], channels=3), tf.float32)
    parsed = tf.io.parse_single_example(records[i], {"v": tf.io.FixedLenFeature([2], tf.float32)})
    return tf.reduce_sum(image) + parsed["v"] + tf.io.parse_tensor(tensors[i], tf.float32)

  expected = testing.sequential(body, 5)
  testing.assert_allclose(testing.run_pfor(body, 5, mode=mode, parallel_iterations=2), expected)


def test_nested_vectorization_of_image_decodes_equals_double_loop_without_fallback():
  pngs = tf.reshape(_pngs(*[(3, 2)] * 6), [3, 2])

  def outer(i):
    return vectorize.pfor(lambda j: tf.io.decode_png(pngs[i, j], channels=3), 2,
                          fallback_to_while_loop=False)

  expected = np.stack([[tf.io.decode_png(pngs[i, j], channels=3) for j in range(2)]
                       for i in range(3)])
  for mode in ("function", "dynamic"):
    np.testing.assert_array_equal(testing.run_pfor(outer, 3, mode=mode), expected)
