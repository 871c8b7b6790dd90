"""tf.data through vectorize.data.map_and_batch vs .map(fn).batch(b): element_spec and values,
for dtypes round 1 left out (complex, uint32/64, int8 outputs of float inputs), nested dicts
mixing strings/bool/complex, final partial batches, drop_remainder, and Keras preprocessing
layers as fn."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from vectorize import data as vdata
from tests.users._util import assert_same

rng = np.random.default_rng(21)


def compare(ds, fn, batch, drop_remainder=False):
  got_ds = ds.apply(vdata.map_and_batch(fn, batch, drop_remainder=drop_remainder))
  ref_ds = ds.map(fn).batch(batch, drop_remainder=drop_remainder)
  assert got_ds.element_spec == ref_ds.element_spec, (got_ds.element_spec, ref_ds.element_spec)
  got, ref = list(got_ds), list(ref_ds)
  assert len(got) == len(ref), (len(got), len(ref))
  for g, r in zip(got, ref):
    assert_same(g, r)
  return got


@pytest.mark.parametrize("dtype", [tf.complex64, tf.complex128])
def test_complex_elements(dtype):
  re = rng.normal(size=[7, 3]); im = rng.normal(size=[7, 3])
  ds = tf.data.Dataset.from_tensor_slices(tf.cast(re + 1j * im, dtype))
  compare(ds, lambda z: (z * tf.math.conj(z), tf.math.real(z), tf.abs(tf.reduce_sum(z))), 3)


@pytest.mark.parametrize("dtype", [tf.uint32, tf.uint64])
def test_unsigned_wide(dtype):
  ds = tf.data.Dataset.from_tensor_slices(tf.cast(rng.integers(0, 1000, size=[5, 2]), dtype))
  compare(ds, lambda x: (x + tf.cast(1, dtype), tf.reduce_max(x)), 2)


def test_float16_to_int8_and_float16_outputs():
  ds = tf.data.Dataset.from_tensor_slices(tf.cast(rng.normal(size=[6, 4]) * 20, tf.float16))
  compare(ds, lambda x: (tf.cast(x, tf.int8), tf.nn.relu(x), tf.reduce_mean(x)), 4)


def test_nested_dict_strings_bool_complex_partial_batch():
  n = 7
  ds = tf.data.Dataset.from_tensor_slices({
      "name": tf.constant([f"item{k}" for k in range(n)]),
      "x": tf.constant(rng.normal(size=[n, 2]).astype(np.float32)),
      "flag": tf.constant(rng.normal(size=[n]) > 0),
  })
  def fn(d):
    return {"meta": {"upper": tf.strings.upper(d["name"]),
                     "len": tf.strings.length(d["name"]),
                     "flag": tf.logical_not(d["flag"])},
            "z": tf.complex(d["x"][0], d["x"][1]),
            "x2": (d["x"] * 2.0, tf.where(d["flag"], d["x"], -d["x"]))}
  got = compare(ds, fn, 3)
  assert [int(g["z"].shape[0]) for g in got] == [3, 3, 1]


def test_drop_remainder_values_and_static_batch_dim():
  ds = tf.data.Dataset.range(11).map(lambda k: tf.cast(k, tf.float32))
  got = compare(ds, lambda x: tf.stack([x, x * x]), 4, drop_remainder=True)
  assert len(got) == 2
  spec = ds.apply(vdata.map_and_batch(lambda x: tf.stack([x, x * x]), 4, drop_remainder=True)).element_spec
  assert spec.shape.as_list() == [4, 2]


def test_final_partial_batch_of_one():
  ds = tf.data.Dataset.from_tensor_slices(tf.constant(rng.normal(size=[9, 3]).astype(np.float32)))
  got = compare(ds, lambda x: tf.nn.softmax(x), 4)
  assert [g.shape[0] for g in got] == [4, 4, 1]


def test_uint8_images_int32_labels_partial_batch():
  imgs = rng.integers(0, 256, size=[5, 4, 4, 3]).astype(np.uint8)
  labels = rng.integers(0, 10, size=[5]).astype(np.int32)
  ds = tf.data.Dataset.from_tensor_slices((imgs, labels))
  def fn(im, y):
    im = tf.image.flip_left_right(im)
    return tf.cast(im, tf.float32) / 255.0, tf.one_hot(y, 10), y + 1, tf.reduce_max(im)
  compare(ds, fn, 2)


def test_string_split_fixed_count_and_bytes():
  ds = tf.data.Dataset.from_tensor_slices(tf.constant(["a,b,c", "dd,e,f", "g,hh,iii", "j,k,l"]))
  def fn(s):
    parts = tf.ensure_shape(tf.strings.split(s, ","), [3])
    return parts, tf.strings.reduce_join(tf.reverse(parts, [0]), separator="|"), tf.strings.substr(s, 0, 1)
  compare(ds, fn, 3)


# --- Keras preprocessing layers as fn ---------------------------------------------------

def test_keras_normalization_layer():
  data = rng.normal(size=[8, 3]).astype(np.float32) * 3 + 1
  norm = keras.layers.Normalization()
  norm.adapt(data)
  ds = tf.data.Dataset.from_tensor_slices(data)
  compare(ds, lambda x: norm(x), 3)


def test_keras_string_lookup_layer():
  lookup = keras.layers.StringLookup(vocabulary=["cat", "dog", "fish"])
  ds = tf.data.Dataset.from_tensor_slices(tf.constant([["cat", "bird"], ["dog", "dog"],
                                                       ["fish", "cat"], ["x", "y"], ["dog", "cat"]]))
  compare(ds, lambda s: lookup(s), 2)


def test_keras_integer_lookup_layer():
  lookup = keras.layers.IntegerLookup(vocabulary=[3, 7, 11])
  ds = tf.data.Dataset.from_tensor_slices(tf.constant([[3, 4], [7, 11], [0, 3], [11, 11], [9, 7]], tf.int64))
  compare(ds, lambda x: lookup(x), 2)


def test_keras_hashing_layer():
  hashing = keras.layers.Hashing(num_bins=5)
  ds = tf.data.Dataset.from_tensor_slices(tf.constant([["a"], ["bb"], ["ccc"], ["a"], ["zz"]]))
  compare(ds, lambda s: hashing(s), 2)


def test_keras_category_encoding_layer():
  enc = keras.layers.CategoryEncoding(num_tokens=6, output_mode="multi_hot")
  ds = tf.data.Dataset.from_tensor_slices(tf.constant([[0, 1], [2, 2], [5, 0], [3, 4], [1, 1]]))
  compare(ds, lambda x: enc(x), 2)


def test_keras_string_lookup_then_category_encoding_count():
  lookup = keras.layers.StringLookup(vocabulary=["a", "b", "c"])
  enc = keras.layers.CategoryEncoding(num_tokens=4, output_mode="count")
  ds = tf.data.Dataset.from_tensor_slices(tf.constant([["a", "b", "a"], ["c", "q", "c"], ["b", "b", "b"]]))
  compare(ds, lambda s: enc(lookup(s)), 2)


def test_keras_rescaling_and_center_crop_uint8():
  imgs = rng.integers(0, 256, size=[5, 6, 6, 3]).astype(np.uint8)
  resc = keras.layers.Rescaling(1 / 127.5, offset=-1)
  crop = keras.layers.CenterCrop(4, 4)
  ds = tf.data.Dataset.from_tensor_slices(imgs)
  compare(ds, lambda im: crop(resc(tf.cast(im, tf.float32))), 2)


def test_map_and_batch_checked_sample_all(monkeypatch):
  """VECTORIZE_CHECKED=all also works in a tf.data pipeline."""
  monkeypatch.setenv("VECTORIZE_CHECKED", "all")
  ds = tf.data.Dataset.from_tensor_slices(tf.constant(rng.normal(size=[6, 3]).astype(np.float32)))
  compare(ds, lambda x: tf.sort(x) * tf.range(3, dtype=tf.float32), 4)
