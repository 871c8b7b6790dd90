"""map_and_batch: equal to map-then-batch element for element; clear errors for stateful fns."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from vectorize.helpers import data

SIZE = 10
RNG = np.random.default_rng(0)
IMAGES = RNG.standard_normal([SIZE, 4, 4, 3]).astype(np.float32)
LABELS = np.arange(SIZE, dtype=np.int64)
W = tf.constant(RNG.standard_normal([48, 5]).astype(np.float32))


def _nested_dataset():
  """Elements ({"image": [4, 4, 3], "meta": (label, scalar)}, label): a tuple, so map
  passes them as two arguments."""
  return tf.data.Dataset.from_tensor_slices(
      ({"image": IMAGES, "meta": (LABELS, IMAGES[:, 0, 0, 0])}, LABELS))


def _nested_fn(features, label):
  image = (features["image"] - tf.reduce_mean(features["image"])) / 2.0
  projected = tf.matmul(tf.reshape(image, [1, -1]), W)[0]
  offset, scalar = features["meta"]
  return {"projected": projected, "flipped": tf.reverse(image, [1])}, (label * 2 + offset,
                                                                        scalar + 1.0)


def _assert_same_dataset(actual, expected):
  assert actual.element_spec == expected.element_spec
  actual, expected = list(actual), list(expected)
  assert len(actual) == len(expected)
  for a, e in zip(actual, expected):
    tf.nest.assert_same_structure(a, e)
    for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(e)):
      np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batch_size,drop_remainder",
                         [(5, False), (5, True), (4, False), (4, True)])
def test_map_and_batch_equals_map_then_batch_nested(batch_size, drop_remainder):
  ds = _nested_dataset()
  _assert_same_dataset(ds.apply(data.map_and_batch(_nested_fn, batch_size, drop_remainder)),
                       ds.map(_nested_fn).batch(batch_size, drop_remainder))


def test_map_and_batch_single_tensor_elements_with_parallel_calls():
  ds = tf.data.Dataset.from_tensor_slices(IMAGES)
  fn = lambda image: tf.reduce_max(image, axis=-1) * 3.0
  _assert_same_dataset(
      ds.apply(data.map_and_batch(fn, 3, num_parallel_calls=tf.data.AUTOTUNE)),
      ds.map(fn).batch(3))


def test_map_and_batch_converts_python_control_flow_of_fn():
  def fn(image):
    if tf.reduce_sum(image) > 0:   # a Python `if` on a tensor, as Dataset.map allows
      return image[0] * 2.0
    return -image[0]

  ds = tf.data.Dataset.from_tensor_slices(IMAGES)
  _assert_same_dataset(ds.apply(data.map_and_batch(fn, 4)), ds.map(fn).batch(4))


def test_map_and_batch_batch_larger_than_dataset_with_drop_remainder_is_empty():
  ds = tf.data.Dataset.from_tensor_slices(IMAGES)
  assert not list(ds.apply(data.map_and_batch(tf.reduce_sum, SIZE + 1, drop_remainder=True)))


def test_map_and_batch_is_vectorized_without_fallback():
  _nested_dataset().apply(data.map_and_batch(_nested_fn, 4))
  assert vectorize.last_report().num_fallbacks == 0


def test_map_and_batch_commutative_variable_update_matches_map():
  counter = tf.Variable(0.0)

  def fn(image):
    counter.assign_add(tf.reduce_sum(image))
    return image[0, 0]

  ds = tf.data.Dataset.from_tensor_slices(IMAGES)
  list(ds.apply(data.map_and_batch(fn, 4)))
  np.testing.assert_allclose(counter.numpy(), IMAGES.sum(), rtol=1e-4)


# ----------------------------------------------------------------------------- errors

def test_map_and_batch_order_dependent_variable_raises_at_apply_time_without_fallback():
  state = tf.Variable(1.0)

  def fn(image):
    state.assign(state * tf.reduce_mean(image))   # each element sees the previous one's write
    return state.read_value()

  with pytest.raises(vectorize.ConversionError, match=r"(?s)variable.*dataset\.map\(fn\)"):
    tf.data.Dataset.from_tensor_slices(IMAGES).apply(
        data.map_and_batch(fn, 4, fallback_to_while_loop=False))


def test_map_and_batch_order_dependent_variable_runs_each_batch_as_a_loop_with_fallback():
  """The whole fn runs element after element (vectorize/whole_body_loop.py), batches in
  order: what map then batch gives."""
  state = tf.Variable(1.0)

  def fn(image):
    state.assign(state * (0.5 + tf.reduce_mean(image)))
    return state.read_value()

  source = tf.data.Dataset.from_tensor_slices(IMAGES)
  actual = [b.numpy() for b in source.apply(data.map_and_batch(fn, 4))]
  state.assign(1.0)
  expected = [b.numpy() for b in source.map(fn).batch(4)]
  assert len(actual) == len(expected)
  for a, e in zip(actual, expected):
    np.testing.assert_allclose(a, e, rtol=1e-6)


def test_map_and_batch_py_function_raises_at_apply_time():
  fn = lambda image: tf.py_function(lambda t: t * 2.0, [image], tf.float32)
  with pytest.raises(vectorize.ConversionError, match=r"(?s)EagerPyFunc.*dataset\.map\(fn\)"):
    tf.data.Dataset.from_tensor_slices(IMAGES).apply(data.map_and_batch(fn, 4))


def test_map_and_batch_ragged_elements_raise_type_error():
  ds = tf.data.Dataset.from_tensor_slices(tf.ragged.constant([[1, 2], [3]]))
  with pytest.raises(TypeError, match="RaggedTensorSpec"):
    ds.apply(data.map_and_batch(lambda r: r, 2))


# ------------------------------------------------------------ a real input pipeline

_RECORD_FEATURES = {
    "image": tf.io.FixedLenFeature([], tf.string),
    "raw": tf.io.FixedLenFeature([], tf.string),
    "label": tf.io.FixedLenFeature([], tf.int64),
    "word": tf.io.FixedLenFeature([], tf.string),
}


def _records(image_sizes):
  """Serialized tf.Examples: a PNG of each size, 6 raw float32s, a label and a word."""
  rng = np.random.default_rng(1)
  records = []
  for k, (h, w) in enumerate(image_sizes):
    png = tf.io.encode_png(rng.integers(0, 256, [h, w, 3], np.uint8)).numpy()
    feature = {
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png])),
        "raw": tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[rng.standard_normal(6).astype(np.float32).tobytes()])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[k])),
        "word": tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[rng.choice([b"Cat", b"DOG", b"bird"])])),
    }
    records.append(tf.train.Example(
        features=tf.train.Features(feature=feature)).SerializeToString())
  return tf.data.Dataset.from_tensor_slices(records)


def _preprocess(record):
  """What a tf.Example input pipeline does per record: parse, decode, resize, hash."""
  example = tf.io.parse_single_example(record, _RECORD_FEATURES)
  image = tf.io.decode_png(example["image"], channels=3)
  image = tf.image.resize(tf.cast(image, tf.float32) / 255.0, [5, 4])
  raw = tf.reshape(tf.io.decode_raw(example["raw"], tf.float32), [2, 3])
  bucket = tf.strings.to_hash_bucket_fast(tf.strings.lower(example["word"]), 50)
  return {"image": image, "raw": raw, "label": example["label"], "bucket": bucket}


@pytest.mark.parametrize("batch_size,drop_remainder", [(4, False), (4, True), (16, False)])
def test_map_and_batch_of_a_record_pipeline_equals_map_then_batch_without_fallback(
    batch_size, drop_remainder):
  ds = _records([(8, 6)] * 10)
  _assert_same_dataset(
      ds.apply(data.map_and_batch(_preprocess, batch_size, drop_remainder,
                                  fallback_to_while_loop=False)),
      ds.map(_preprocess).batch(batch_size, drop_remainder))
  assert vectorize.last_report().num_fallbacks == 0


def test_map_and_batch_of_a_record_pipeline_decodes_by_one_op_per_batch():
  ds = _records([(8, 6)] * 4).apply(data.map_and_batch(_preprocess, 4,
                                                       fallback_to_while_loop=False))
  del ds
  types = [r.op_type for r in vectorize.last_report().records]
  assert types.count("ParseExampleV2") == 1 and types.count("DecodePng") == 1


def test_map_and_batch_of_images_of_different_sizes_equals_map_then_batch():
  """Decoded at their own sizes, then resized to one (converters/ragged_images.py)."""
  ds = _records([(8, 6), (8, 6), (7, 6), (3, 9)])
  _assert_same_dataset(
      ds.apply(data.map_and_batch(_preprocess, 3, fallback_to_while_loop=False)),
      ds.map(_preprocess).batch(3))


def test_data_pipeline_benchmark_forms_agree_at_a_small_size():
  from benchmarks.workloads import data_pipeline  # pylint: disable=g-import-not-at-top
  forms = data_pipeline.build(8, data_pipeline.make_records(20))
  data_pipeline.check(forms)


def test_map_and_batch_of_a_record_pipeline_with_keras_augmentation_equals_map_then_batch():
  import keras  # pylint: disable=g-import-not-at-top

  def make_fn():
    flip = keras.layers.RandomFlip("horizontal", seed=1)
    contrast = keras.layers.RandomContrast(0.3, seed=2)

    def fn(record):
      features = _preprocess(record)
      image = contrast(flip(features["image"], training=True), training=True)
      return dict(features, image=image)
    return fn

  ds = _records([(8, 6)] * 10)
  _assert_same_dataset(
      ds.apply(data.map_and_batch(make_fn(), 4, fallback_to_while_loop=False)),
      ds.map(make_fn()).batch(4))


@pytest.mark.unchecked
def test_map_and_batch_stacks_sparse_outputs_and_holds_no_assert():
  """A fn returning a SparseTensor gives the batch's SparseTensor, as map then batch does; the
  batch's own size needs no range check (an Assert would gate the whole map function)."""
  def fn(image, label):
    return tf.sparse.from_dense(tf.where(image[0] > 0.5, image[0], 0.0)), label

  ds = tf.data.Dataset.from_tensor_slices((IMAGES, LABELS))
  actual = ds.apply(data.map_and_batch(fn, 4))
  expected = ds.map(fn).batch(4)
  assert isinstance(actual.element_spec[0], tf.SparseTensorSpec)
  for (a, a_label), (e, e_label) in zip(actual, expected):
    np.testing.assert_allclose(tf.sparse.to_dense(a), tf.sparse.to_dense(e))
    np.testing.assert_array_equal(a.dense_shape, e.dense_shape)
    np.testing.assert_array_equal(a_label, e_label)
  mapped = data._vectorized(lambda x: x * 2.0, fallback=False)
  graph = tf.function(mapped).get_concrete_function(tf.TensorSpec([None, 3])).graph
  assert "Assert" not in [op.type for op in graph.get_operations()]


def _nodes_optimized_at_each_iterator_start(fn, spec):
  """Nodes of map_and_batch's map function and of the functions it calls, except those XLA
  compiles: tf.data instantiates the function for every new iterator, and Grappler's pass
  over these nodes is most of that start (each epoch pays it)."""
  graph_def = tf.function(data._vectorized(fn, False)).get_concrete_function(
      spec).graph.as_graph_def()
  return len(graph_def.node) + sum(
      len(f.node_def) for f in graph_def.library.function
      if not f.attr["_XlaMustCompile"].b)


@pytest.mark.unchecked
def test_map_and_batch_of_the_record_pipeline_is_a_small_graph():
  """Guards the iterator start of the tf.data workload: 350 nodes before the resize of
  images of their own sizes was written in fewer ops, 243 after."""
  from benchmarks.workloads import data_pipeline  # pylint: disable=g-import-not-at-top
  assert _nodes_optimized_at_each_iterator_start(
      data_pipeline.preprocess, tf.TensorSpec([None], tf.string)) <= 260


@pytest.mark.unchecked
def test_map_and_batch_of_a_keras_random_flip_is_a_small_graph():
  """Philox's rounds are XLA-compiled calls on the CPU: unrolled, RandomFlip alone was 426
  nodes that every tf.data iterator start optimizes again (134 now)."""
  import keras  # pylint: disable=g-import-not-at-top
  flip = keras.layers.RandomFlip("horizontal", seed=1)
  assert _nodes_optimized_at_each_iterator_start(
      lambda x: flip(x, training=True), tf.TensorSpec([None, 4, 4, 3])) <= 200


def test_map_and_batch_function_is_instantiated_without_grappler():
  """tf.data runs Grappler over a map function at every iterator start unless the function
  goes through the single-device runtime (this attribute); that was 30 of the 44 ms CPU of
  the tfdata_records workload's start."""
  ds = _records([(8, 6)] * 4).apply(data.map_and_batch(_preprocess, 4,
                                                       fallback_to_while_loop=False))
  function_def = ds._map_func.function.function_def  # pylint: disable=protected-access
  assert function_def.attr["experimental_ints_on_device"].b


@pytest.mark.parametrize("num_parallel_calls", [None, 2])
def test_map_and_batch_inside_a_tf_function_equals_map_then_batch(num_parallel_calls):
  """As the benchmark suite runs it: the dataset built and reduced inside a tf.function."""
  ds = _records([(8, 6)] * 10)

  def summed(batched):
    zeros = {"image": tf.zeros([5, 4, 3]), "raw": tf.zeros([2, 3]),
             "label": tf.constant(0, tf.int64), "bucket": tf.constant(0, tf.int64)}
    return batched.reduce(zeros, lambda acc, b: {
        k: acc[k] + tf.reduce_sum(b[k], 0) for k in acc})

  actual = tf.function(lambda: summed(ds.apply(data.map_and_batch(
      _preprocess, 4, num_parallel_calls=num_parallel_calls,
      fallback_to_while_loop=False))))()
  expected = summed(ds.map(_preprocess).batch(4))
  for key in expected:
    np.testing.assert_allclose(actual[key], expected[key], rtol=1e-5, atol=1e-5)


# ------------------------------------------------- every dtype a map fn may return

_DTYPES = [tf.float16, tf.float32, tf.float64, tf.bfloat16, tf.int8, tf.int16, tf.int32,
           tf.int64, tf.uint8, tf.bool, tf.string, tf.complex64]


def _as(x, dtype):
  """x (float32) as `dtype`: strings by formatting, the others by a cast."""
  if dtype == tf.string:
    return tf.strings.as_string(x)
  return tf.cast(x, dtype)


def _assert_same_elements(actual, expected):
  """Equal element specs, then equal values (floats up to rounding, others exactly)."""
  assert actual.element_spec == expected.element_spec
  actual, expected = list(actual), list(expected)
  assert len(actual) == len(expected)
  for a, e in zip(actual, expected):
    tf.nest.assert_same_structure(a, e, expand_composites=True)
    for x, y in zip(tf.nest.flatten(a, expand_composites=True),
                    tf.nest.flatten(e, expand_composites=True)):
      assert x.dtype == y.dtype
      if x.dtype.is_floating:
        np.testing.assert_allclose(tf.cast(x, tf.float64), tf.cast(y, tf.float64), rtol=1e-3)
      else:
        np.testing.assert_array_equal(x.numpy(), y.numpy())


@pytest.mark.parametrize("dtype", _DTYPES, ids=lambda d: d.name)
def test_map_and_batch_of_two_outputs_of_every_dtype_equals_map_then_batch(dtype):
  """An int32 output beside another one failed at iterator creation ("Expected only one
  fetch node"): the single-device attribute made it a `_DeviceRetval`."""
  fn = lambda image, label: (image[0, 0], _as(image[1, 1, 0] * 10.0, dtype))
  ds = tf.data.Dataset.from_tensor_slices((IMAGES, LABELS))
  _assert_same_elements(ds.apply(data.map_and_batch(fn, 4)), ds.map(fn).batch(4))


def _all_dtypes_fn(image, label):
  """Nested tuples and dicts holding every dtype, int32 ones among them."""
  value = image[0, 0, 0] * 10.0
  word = tf.strings.as_string(tf.cast(label, tf.int32))
  return ({d.name: _as(value, d) for d in _DTYPES},
          (tf.strings.length(word), {"label": tf.cast(label, tf.int32), "row": image[0, 0]}))


@pytest.mark.parametrize("drop_remainder", [False, True])
def test_map_and_batch_of_nested_outputs_of_every_dtype_equals_map_then_batch(drop_remainder):
  ds = tf.data.Dataset.from_tensor_slices((IMAGES, LABELS))   # 10 elements: a batch of 2 last
  _assert_same_elements(ds.apply(data.map_and_batch(_all_dtypes_fn, 4, drop_remainder)),
                        ds.map(_all_dtypes_fn).batch(4, drop_remainder))


def test_map_and_batch_of_int32_outputs_inside_a_tf_function_equals_map_then_batch():
  ds = tf.data.Dataset.from_tensor_slices((IMAGES, LABELS))
  fn = lambda image, label: {"f": image[0, 0, 0], "i": tf.cast(label, tf.int32) * 3}

  def summed(batched):
    return batched.reduce((0.0, 0), lambda acc, b: (acc[0] + tf.reduce_sum(b["f"]),
                                                    acc[1] + tf.reduce_sum(b["i"])))

  actual = tf.function(lambda: summed(ds.apply(data.map_and_batch(fn, 4))))()
  expected = summed(ds.map(fn).batch(4))
  np.testing.assert_allclose(actual[0], expected[0], rtol=1e-5)
  assert actual[1].dtype == tf.int32 and actual[1] == expected[1]


def test_map_and_batch_of_a_keras_discretization_equals_map_then_batch():
  import keras  # pylint: disable=g-import-not-at-top
  bins = keras.layers.Discretization(bin_boundaries=[-0.5, 0.0, 0.5])
  fn = lambda image, label: (image[0, 0], bins(image[0, 0]))
  ds = tf.data.Dataset.from_tensor_slices((IMAGES, LABELS))
  _assert_same_elements(ds.apply(data.map_and_batch(fn, 4)), ds.map(fn).batch(4))


# ------------------------------------------- dense where map then batch is dense

_SIZED_BY_DATA = {   # outputs whose size pfor cannot prove equal in every element
    "boolean_mask": lambda image, label: tf.boolean_mask(image[0, 0], image[0, 0] > -9.0),
    "unique": lambda image, label: tf.unique(tf.cast(image[0, 0] > -9.0, tf.int32))[0],
    "where": lambda image, label: (tf.where(image[0] > -9.0), label),
    "range": lambda image, label: {"r": tf.range(tf.cast(label, tf.int32) * 0 + 3), "l": label},
    "user_ragged": lambda image, label: tf.RaggedTensor.from_row_lengths(image[0, 0], [1, 2]),
    "user_sparse": lambda image, label: tf.sparse.from_dense(image[0, :1]),
}


@pytest.mark.parametrize("drop_remainder", [False, True])
@pytest.mark.parametrize("name", sorted(_SIZED_BY_DATA))
def test_map_and_batch_types_batches_as_map_then_batch(name, drop_remainder):
  """Dense batches (not RaggedTensors) of dense outputs whose size the data decides, ragged
  ones of RaggedTensor outputs, and the reference's static shapes."""
  fn = _SIZED_BY_DATA[name]
  ds = tf.data.Dataset.from_tensor_slices((IMAGES, LABELS))
  _assert_same_elements(ds.apply(data.map_and_batch(fn, 4, drop_remainder)),
                        ds.map(fn).batch(4, drop_remainder))


def test_map_and_batch_of_sizes_that_differ_in_a_batch_stops_as_map_then_batch():
  fn = lambda image, label: tf.range(label % 2 + 1)
  ds = tf.data.Dataset.from_tensor_slices((IMAGES, LABELS))
  actual = ds.apply(data.map_and_batch(fn, 4))
  assert actual.element_spec == ds.map(fn).batch(4).element_spec
  with pytest.raises(tf.errors.InvalidArgumentError, match="Cannot add tensor to the batch"):
    list(ds.map(fn).batch(4))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"(?s)output <top level> of <lambda> has different shapes.*To fix"):
    list(actual)


def _sequences(lengths, width=None):
  """A dataset of float sequences of the given lengths (spec `[None]`, or `[None, width]`)."""
  def gen():
    for k, n in enumerate(lengths):
      x = np.arange(n * (width or 1), dtype=np.float32) + 10 * k
      yield x if width is None else x.reshape(n, width)
  shape = [None] if width is None else [None, width]
  return tf.data.Dataset.from_generator(gen, output_signature=tf.TensorSpec(shape, tf.float32))


def _padded_summary(x):
  padded = tf.pad(x, [[0, 5 - tf.shape(x)[0]]] + [[0, 0]] * (x.shape.rank - 1))
  return {"padded": tf.ensure_shape(padded, [5] + x.shape[1:].as_list()),
          "total": tf.reduce_sum(x), "count": tf.shape(x)[0], "tag": "seq"}


@pytest.mark.parametrize("width,batch_size,drop_remainder", [
    (None, 3, False), (3, 3, True), (None, 8, False)])
def test_map_and_batch_of_elements_of_their_own_lengths_equals_map_then_batch(
    width, batch_size, drop_remainder):
  """Elements whose first axis differs (spec `[None]`) are batched ragged and fn sees each
  at its own size; a Python string fn returns is a tensor, as Dataset.map makes it (both
  failed before: code-blind round 13)."""
  ds = _sequences([0, 2, 5, 1, 3, 4, 2], width)
  got = list(ds.apply(data.map_and_batch(_padded_summary, batch_size, drop_remainder)))
  want = list(ds.map(_padded_summary).batch(batch_size, drop_remainder=drop_remainder))
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert set(g) == set(w)
    for key in w:
      np.testing.assert_array_equal(g[key].numpy(), w[key].numpy())


def test_map_and_batch_of_elements_differing_past_their_first_axis_is_refused():
  ds = tf.data.Dataset.from_generator(
      lambda: iter([np.zeros([2, 3], np.float32)]),
      output_signature=tf.TensorSpec([None, None], tf.float32))
  with pytest.raises(TypeError, match="may differ between elements in an axis after its first"):
    ds.apply(data.map_and_batch(tf.reduce_sum, 2))
