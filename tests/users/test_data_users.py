"""tf.data pipelines: ds.apply(map_and_batch(fn, b)) must equal ds.map(fn).batch(b)."""
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from vectorize import data as vdata
from tests.users._util import assert_same

rng = np.random.default_rng(5)


def compare(ds, fn, batch, drop_remainder=False, **kw):
  got_ds = ds.apply(vdata.map_and_batch(fn, batch, drop_remainder=drop_remainder, **kw))
  ref_ds = ds.map(fn).batch(batch, drop_remainder=drop_remainder)
  assert got_ds.element_spec == ref_ds.element_spec, (got_ds.element_spec, ref_ds.element_spec)
  got, ref = list(got_ds), list(ref_ds)
  assert len(got) == len(ref)
  for g, r in zip(got, ref):
    assert_same(g, r)
  return got


@pytest.mark.parametrize("dtype", [tf.float16, tf.float32, tf.float64, tf.bfloat16])
def test_float_dtypes(dtype):
  ds = tf.data.Dataset.from_tensor_slices(tf.cast(rng.normal(size=[7, 3]), dtype))
  compare(ds, lambda x: x * tf.cast(2, dtype) + tf.reduce_max(x), 3)


@pytest.mark.parametrize("dtype", [tf.int8, tf.int16, tf.int32, tf.int64, tf.uint8, tf.uint16])
def test_int_dtypes(dtype):
  ds = tf.data.Dataset.from_tensor_slices(tf.cast(rng.integers(0, 50, size=[7, 4]), dtype))
  compare(ds, lambda x: (x // tf.cast(3, dtype), tf.reduce_sum(x), tf.argmax(x)), 3)


def test_bool_elements():
  ds = tf.data.Dataset.from_tensor_slices(rng.normal(size=[5, 4]) > 0)
  compare(ds, lambda b: (tf.logical_not(b), tf.reduce_any(b), tf.cast(b, tf.int32)), 2)


def test_strings():
  ds = tf.data.Dataset.from_tensor_slices(["Hello", "world", "TF", "data", "x"])
  compare(ds, lambda s: (tf.strings.upper(s), tf.strings.length(s), s + "!"), 2)


def test_string_to_number_and_hash():
  ds = tf.data.Dataset.from_tensor_slices(["1.5", "2", "-3.25", "4e2"])
  compare(ds, lambda s: (tf.strings.to_number(s), tf.strings.to_hash_bucket_fast(s, 7)), 3)


def test_nested_dict_tuple():
  ds = tf.data.Dataset.from_tensor_slices(
      {"a": rng.normal(size=[6, 2]).astype(np.float32), "b": (np.arange(6), np.array(list("abcdef")))})
  def fn(d):
    return {"x": d["a"] * 2.0, "y": (d["b"][0] + 1, tf.strings.join([d["b"][1], "z"]))}
  compare(ds, fn, 4)


def test_tuple_elements_positional_args():
  ds = tf.data.Dataset.from_tensor_slices((rng.normal(size=[6, 3]).astype(np.float32),
                                           rng.integers(0, 3, size=[6])))
  compare(ds, lambda x, y: (tf.nn.softmax(x), tf.one_hot(y, 3)), 4)


def test_images_with_labels_augment():
  imgs = rng.integers(0, 255, size=[5, 8, 8, 3]).astype(np.uint8)
  labels = rng.integers(0, 10, size=[5]).astype(np.int64)
  ds = tf.data.Dataset.from_tensor_slices((imgs, labels))
  def fn(im, lab):
    x = tf.image.convert_image_dtype(im, tf.float32)
    x = tf.image.resize(x, [4, 4])
    x = tf.image.per_image_standardization(x)
    x = tf.image.flip_left_right(x)
    return x, tf.one_hot(lab, 10)
  compare(ds, fn, 2)


def test_drop_remainder_spec():
  ds = tf.data.Dataset.range(10)
  got = compare(ds, lambda x: x * x, 4, drop_remainder=True)
  assert len(got) == 2


def test_empty_dataset():
  ds = tf.data.Dataset.from_tensor_slices(tf.zeros([0, 3]))
  compare(ds, lambda x: x + 1.0, 4)


def test_range_dataset_scalar_and_batch_bigger_than_data():
  compare(tf.data.Dataset.range(3), lambda x: tf.cast(x, tf.float32) / 2.0, 8)


def test_batch_size_tensor():
  ds = tf.data.Dataset.range(7)
  compare(ds, lambda x: x + 1, tf.constant(3, tf.int64))


def test_num_parallel_calls_autotune():
  ds = tf.data.Dataset.range(9)
  got_ds = ds.apply(vdata.map_and_batch(lambda x: x * 3, 4, num_parallel_calls=tf.data.AUTOTUNE))
  ref = list(ds.map(lambda x: x * 3).batch(4))
  for g, r in zip(got_ds, ref):
    assert_same(g, r)


def test_parse_tf_example():
  def ser(i):
    return tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[i, i + 0.5])),
        "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[i * 2])),
        "s": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"id%d" % i]))})).SerializeToString()
  ds = tf.data.Dataset.from_tensor_slices([ser(i) for i in range(5)])
  spec = {"x": tf.io.FixedLenFeature([2], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64),
          "s": tf.io.FixedLenFeature([], tf.string)}
  compare(ds, lambda r: tf.io.parse_single_example(r, spec), 2)


def test_decode_png_same_size():
  imgs = [tf.io.encode_png(tf.cast(rng.integers(0, 255, size=[4, 5, 3]), tf.uint8)) for _ in range(4)]
  ds = tf.data.Dataset.from_tensor_slices(tf.stack(imgs))
  compare(ds, lambda s: tf.image.resize(tf.io.decode_png(s, channels=3), [3, 3]), 3)


def test_map_and_batch_with_keras_model():
  import keras
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu")])
  ds = tf.data.Dataset.from_tensor_slices(rng.normal(size=[5, 4]).astype(np.float32))
  got = list(ds.apply(vdata.map_and_batch(lambda x: model(x[None])[0], 2)))
  ref = list(ds.map(lambda x: model(x[None])[0]).batch(2))
  for g, r in zip(got, ref):
    assert_same(g, r)


def test_stateless_random_per_element_seed():
  ds = tf.data.Dataset.range(6)
  def fn(i):
    return tf.random.stateless_uniform([3], seed=tf.stack([i, i + 7]))
  compare(ds, fn, 4)


def test_variable_length_output_is_error_like_batch():
  """.map(fn).batch(b) fails on rows of different sizes; map_and_batch should not give silently
  something else (fn 'must return dense tensors' of one size)."""
  ds = tf.data.Dataset.range(4)
  fn = lambda x: tf.range(x)
  with pytest.raises((tf.errors.InvalidArgumentError, ValueError, TypeError)):
    list(ds.apply(vdata.map_and_batch(fn, 4)))


def test_ragged_input_dataset_type_error():
  ds = tf.data.Dataset.from_tensor_slices(tf.ragged.constant([[1, 2], [3]])).batch(1)
  with pytest.raises(TypeError) as e:
    ds.apply(vdata.map_and_batch(lambda x: x, 2))
  assert "ragged" in str(e.value).lower()


def test_py_function_conversion_error():
  ds = tf.data.Dataset.range(4)
  fn = lambda x: tf.py_function(lambda v: v * 2, [x], tf.int64)
  with pytest.raises(vectorize.ConversionError) as e:
    ds.apply(vdata.map_and_batch(fn, 2))
  assert "py_function" in str(e.value).lower() or "python" in str(e.value).lower()


def test_map_and_batch_in_dataset_after_shuffle_repeat_take():
  ds = tf.data.Dataset.range(10).shuffle(10, seed=1, reshuffle_each_iteration=False).repeat(2).take(13)
  compare(ds, lambda x: tf.stack([x, x * x]), 5)


def test_two_outputs_one_int32_minimal():
  ds = tf.data.Dataset.range(4)
  compare(ds, lambda x: (tf.cast(x, tf.int32), x), 2)


def test_two_outputs_int64_float():
  ds = tf.data.Dataset.range(5)
  compare(ds, lambda x: (x + 1, tf.cast(x, tf.float32) * 0.5), 2)


def test_single_int32_output():
  ds = tf.data.Dataset.range(5)
  compare(ds, lambda x: tf.cast(x, tf.int32) * 3, 2)


def test_images_with_int32_labels():
  imgs = rng.integers(0, 255, size=[5, 6, 6, 1]).astype(np.uint8)
  labels = rng.integers(0, 10, size=[5]).astype(np.int32)
  ds = tf.data.Dataset.from_tensor_slices((imgs, labels))
  compare(ds, lambda im, lab: (tf.cast(im, tf.float32) / 255.0, lab), 2)
