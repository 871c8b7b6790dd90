"""Text, parsing and input pipelines, written from the README and the public API alone.

Each program is written for ONE example (a string, a serialized tf.train.Example, an encoded
image) and compared with the per-example loop: `pfor` / `vectorized_map` / `map_fn` against
stacking the loop's results, and `data.map_and_batch(fn, b)` against `.map(fn).batch(b)`
(values and element spec). Exact for ints, strings and bools; `tol(dtype)` for floats.

Stacking the loop as the README says pfor does: dense rows that differ in their first axis
only give a RaggedTensor of ragged rank 1 (`[n, None, 3]`); RaggedTensors are
`tf.ragged.stack`ed; SparseTensors are `tf.sparse.concat`ed along a new first axis, the dense
shape the largest over the iterations.

Bugs found are kept as minimal `xfail(strict=True)` programs at the end of the file.
"""

import gzip
import os
import tempfile
import zlib

import keras
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.users._util import assert_same

F = tf.io
mab = vectorize.data.map_and_batch


# --------------------------------------------------------------------------- helpers


def _stack(values):
  values = list(values)
  first = values[0]
  if isinstance(first, tf.SparseTensor):
    return tf.sparse.concat(0, [tf.sparse.expand_dims(v, 0) for v in values],
                            expand_nonconcat_dims=True)
  if isinstance(first, tf.RaggedTensor):
    return tf.ragged.stack(values)
  shapes = {tuple(v.shape.as_list()) for v in values}
  if len(shapes) == 1:
    return tf.stack(values)
  if len({s[1:] for s in shapes}) == 1:   # only the first axis differs: ragged rank 1
    return tf.RaggedTensor.from_row_lengths(tf.concat(values, 0),
                                            [v.shape[0] for v in values])
  return tf.ragged.stack(values)


def _loop(body, n):
  outs = [body(tf.constant(i)) for i in range(n)]
  return tf.nest.map_structure(lambda *xs: _stack(xs), *outs)


def _same(got, expected):
  tf.nest.assert_same_structure(expected, got)
  for a, e in zip(tf.nest.flatten(got), tf.nest.flatten(expected)):
    if isinstance(e, tf.SparseTensor):
      assert isinstance(a, tf.SparseTensor), type(a)
      assert a.dtype == e.dtype, (a.dtype, e.dtype)
      np.testing.assert_array_equal(a.indices.numpy(), e.indices.numpy())
      np.testing.assert_array_equal(a.dense_shape.numpy(), e.dense_shape.numpy())
      assert_same(a.values, e.values)
    else:
      assert_same(a, e)


def _pfor(body, n, mode):
  if mode == "eager":
    return vectorize.pfor(body, n, warn=False)

  def run(k):
    return vectorize.pfor(body, k, warn=False)
  if mode == "function":
    return tf.function(run)(n)
  if mode == "runtime_n":
    return tf.function(run)(tf.constant(n))
  if mode == "xla":
    return tf.function(run, jit_compile=True)(n)
  raise ValueError(mode)


def _check(body, n, mode):
  _same(_pfor(body, n, mode), _loop(body, n))


def _check_ds(ds, fn, batch, drop=False, **kw):
  # The fns here have no Python control flow: keep autograph's source parsing of the test's
  # lambdas (0.2 s each) out of both pipelines (exploration ran them with autograph: same).
  fn = tf.autograph.experimental.do_not_convert(fn)
  expected = ds.map(fn).batch(batch, drop_remainder=drop)
  got = ds.apply(mab(fn, batch, drop_remainder=drop, **kw))
  assert got.element_spec == expected.element_spec, (got.element_spec, expected.element_spec)
  ge, ee = list(got), list(expected)
  assert len(ge) == len(ee), (len(ge), len(ee))
  for g, e in zip(ge, ee):
    _same(g, e)


MODES3 = ["eager", "function", "runtime_n"]
MODES2 = ["eager", "function"]

# --------------------------------------------------------------------------- data

SENTENCES = tf.constant(["héllo wörld foo", "a,b b", "", "Zebra  CROSSING x,y z", "ñandú rocks"])
N = 5
SEPS = tf.constant([" ", ",", " ", ",", "o"])
PATTERNS = tf.constant(["o", "b", "x", "[A-Z]", "(n|d)"])
REWRITES = tf.constant(["0", "B", "", "_", "<\\1>"])
WORDS = tf.constant([["cat", "zebra", "the"], ["dog", "cat", "dog"], ["", "a", "sat"],
                     ["xx", "the", "xx"], ["ran", "far", "cat"]])
SEGMENTS = tf.constant([[0, 1, 0], [1, 1, 0], [0, 0, 0], [2, 0, 1], [1, 0, 1]])
MATRIX = tf.constant([["a b", "c"], ["d e f g", ""], ["", ""], ["1 2", "3"], ["z", "z z"]])


def _example(k):
  f = tf.train.Feature
  feats = {
      "id": f(int64_list=tf.train.Int64List(value=[k])),
      "x": f(float_list=tf.train.FloatList(value=[k * 0.5, k + 1.0, -k])),
      "name": f(bytes_list=tf.train.BytesList(value=[b"name%d" % k])),
      "tags": f(bytes_list=tf.train.BytesList(value=[b"t%d" % j for j in range(k % 3)])),
      "ids": f(int64_list=tf.train.Int64List(value=[(k * 3 + j) % 6 for j in range(k % 4)])),
      "seq": f(float_list=tf.train.FloatList(value=[float(j) for j in range(2 * (k % 3))])),
      "lens": f(int64_list=tf.train.Int64List(value=[j % 3 for j in range(k + 1)])),
      "vals": f(bytes_list=tf.train.BytesList(
          value=[b"v%d" % j for j in range(sum(j % 3 for j in range(k + 1)))])),
  }
  if k % 2:
    feats["opt"] = f(float_list=tf.train.FloatList(value=[k * 2.0]))
  return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()


RECORDS = tf.constant([_example(k) for k in range(N)])
FIXED = {"id": F.FixedLenFeature([], tf.int64), "x": F.FixedLenFeature([3], tf.float32),
         "name": F.FixedLenFeature([], tf.string),
         "opt": F.FixedLenFeature([], tf.float32, default_value=-1.0),
         "absent": F.FixedLenFeature([2], tf.string, default_value=["d1", "d2"])}
VARLEN = {"tags": F.VarLenFeature(tf.string), "ids": F.VarLenFeature(tf.int64)}
RAGGED = {"ids": F.RaggedFeature(tf.int64),
          "seq2": F.RaggedFeature(tf.float32, value_key="seq",
                                  partitions=[F.RaggedFeature.UniformRowLength(2)]),
          "nested": F.RaggedFeature(tf.string, value_key="vals",
                                    partitions=[F.RaggedFeature.RowLengths("lens")])}
SEQUENCE = {"seq": F.FixedLenSequenceFeature([2], tf.float32, allow_missing=True)}


def _seq_example(k):
  fl = tf.train.FeatureList(feature=[
      tf.train.Feature(int64_list=tf.train.Int64List(value=[t * 10 + k, t]))
      for t in range(k % 3 + 1)])
  wl = tf.train.FeatureList(feature=[
      tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"w%d" % t] * (t % 2 + 1)))
      for t in range(k % 4)])
  return tf.train.SequenceExample(
      context=tf.train.Features(feature={
          "label": tf.train.Feature(float_list=tf.train.FloatList(value=[k / 2]))}),
      feature_lists=tf.train.FeatureLists(feature_list={"tok": fl, "words": wl})
  ).SerializeToString()


SEQ_RECORDS = tf.constant([_seq_example(k) for k in range(N)])

_rng = np.random.RandomState(0)
_VAR_IMAGES = [_rng.randint(0, 255, (4 + k, 5 + k % 2, 3)).astype(np.uint8) for k in range(4)]
_SAME_IMAGES = [_rng.randint(0, 255, (6, 6, 3)).astype(np.uint8) for _ in range(4)]
PNG_VAR = tf.constant([tf.io.encode_png(x).numpy() for x in _VAR_IMAGES])
JPG_VAR = tf.constant([tf.io.encode_jpeg(x).numpy() for x in _VAR_IMAGES])
PNG_SAME = tf.constant([tf.io.encode_png(x).numpy() for x in _SAME_IMAGES])
JPG_SAME = tf.constant([tf.io.encode_jpeg(x).numpy() for x in _SAME_IMAGES])


# =========================================================================== tf.strings


def _split(i):
  return tf.strings.split(SENTENCES[i])


def _normalize_lengths_substr(i):
  s = tf.strings.strip(tf.strings.lower(SENTENCES[i], encoding="utf-8"))
  return (tf.strings.regex_replace(s, r"[^a-z ]", "?"), tf.strings.upper(s),
          tf.strings.regex_full_match(s, ".*o.*"),
          tf.strings.regex_replace(s, r"(\w+)\s+(\w+)", r"\2 \1", replace_global=False),
          tf.strings.length(s), tf.strings.length(s, unit="UTF8_CHAR"),
          tf.strings.substr(s, 0, 3, unit="UTF8_CHAR"),
          tf.strings.substr(s, -tf.minimum(tf.strings.length(s), 3), 3),
          tf.strings.substr(WORDS[i], tf.constant([0, 0, 0]), tf.constant([1, 2, 1])))


@pytest.mark.parametrize("mode", MODES3)
def test_normalize_lengths_substr_unicode_numbers(mode):
  _check(lambda i: (_normalize_lengths_substr(i), _unicode(i), _to_number(i)), N, mode)


def _unicode(i):
  s = SENTENCES[i]
  chars = tf.strings.unicode_decode(s, "UTF-8")
  return (chars, tf.strings.unicode_encode(chars, "UTF-8"),
          tf.strings.unicode_transcode(s, "UTF-8", "UTF-16-BE"),
          tf.strings.unicode_transcode(tf.strings.substr(s, 0, 2), "UTF-8", "UTF-8",
                                       errors="replace", replacement_char=63))


NUMBERS = tf.constant(["1.5", "-2", "3e2", "0.25", "7"])
INTS = tf.constant(["12", "-7", "0", "99", "3"])


def _to_number(i):
  out = [tf.strings.to_number(tf.stack([NUMBERS[i], INTS[i]]))]
  for dtype in (tf.float32, tf.float64, tf.int32, tf.int64):
    out.append(tf.strings.to_number((NUMBERS if dtype.is_floating else INTS)[i], dtype))
  return out


def test_format_join_and_control_flow():
  def body(i):
    s = SENTENCES[i]
    c = tf.cond(tf.strings.length(s) > 5, lambda: tf.strings.upper(s), lambda: s + "!")
    w = tf.while_loop(lambda x: tf.strings.length(x) > 3,
                      lambda x: [tf.strings.substr(x, 1, -1)], [s])[0]
    return (tf.strings.format("ex {}: {} {}", (i, s, SEGMENTS[i]), summarize=2),
            tf.strings.join(["pre", s, "post"], separator="/"),
            tf.strings.join([tf.constant(["a", "b"]), s]), s + "|" + WORDS[i][0],
            tf.strings.as_string(tf.cast(i, tf.float32) * 1.5, precision=2),
            tf.strings.as_string(tf.cast(i, tf.int64) * 7, width=4, fill="0"),
            tf.strings.reduce_join(MATRIX[i], separator="+"),
            tf.strings.unsorted_segment_join(WORDS[i], SEGMENTS[i], 3, separator="/"), c, w)
  _check(body, N, "eager")


def test_ngrams_hash_buckets_and_per_example_patterns():
  def body(i):
    tokens = tf.strings.split(SENTENCES[i], sep=SEPS[i])
    return (tokens, tf.strings.ngrams(tokens, 2, pad_values=("<s>", "</s>")),
            tf.strings.to_hash_bucket_fast(WORDS[i], 7),
            tf.strings.to_hash_bucket_strong(SENTENCES[i], 11, [1, 2]),
            tf.strings.regex_replace(SENTENCES[i], PATTERNS[i], REWRITES[i]))
  _check(body, N, "eager")


def _token_ops(i):
  t = tf.strings.split(SENTENCES[i])
  first = t[:2]
  padded = tf.ensure_shape(tf.pad(first, [[0, 2 - tf.size(first)]], constant_values="<pad>"),
                           [2])
  return (t, padded, tf.concat([["<s>"], t, ["</s>"]], 0),
          tf.where(tf.equal(WORDS[i], "cat"), "CAT", WORDS[i]),
          tf.gather(WORDS[i], tf.argsort(tf.strings.length(WORDS[i]), stable=True)))


def test_split_tokens_truncate_and_pad():
  """Tokens come back ragged; truncated and padded ones stack densely with tf.ensure_shape
  (without it the graph does not fix their size and, as README says, pfor gives
  tf.ragged.stack of the loop's)."""
  _check(_token_ops, N, "eager")


# =========================================================================== decoding bytes

EMBEDDING = tf.reshape(tf.range(18.), [6, 3])
CSV = tf.constant(["1,2.5,a", "3,,b", "5,6.5,", "7,8.0,d", "9,1,e"])
NAMES = tf.constant(["n0", "n1", "n2", "n3", "n4"])
ZLIB = tf.constant([zlib.compress(b"abc" * (k + 1)) for k in range(N)])
GZIP = tf.constant([gzip.compress(b"hey" * (k + 1)) for k in range(N)])


def _decode_records(i):
  return (tf.io.decode_csv(tf.stack([CSV[i], CSV[(i + 1) % N]]), [[0], [-1.0], [NAMES[i]]]),
          tf.io.decode_csv(tf.stack(["NA;1", "2;NA", "3;4"])[i % 3], [[0.0], [-1]],
                           na_value="NA", field_delim=";"),
          tf.io.decode_base64(tf.io.encode_base64(SENTENCES[i])),
          tf.io.decode_compressed(ZLIB[i], "ZLIB"), tf.io.decode_compressed(GZIP[i], "GZIP"),
          tf.io.serialize_tensor(EMBEDDING[i]),
          tf.io.parse_tensor(tf.io.serialize_tensor(EMBEDDING[i]), tf.float32))


@pytest.mark.parametrize("mode", ["eager"])
def test_decode_csv_base64_compressed_tensor(mode):
  _check(_decode_records, N, mode)


_RAW16 = tf.constant([_rng.randint(0, 255, 16).astype(np.uint8).tobytes() for _ in range(4)])
_RAW16_VEC = tf.constant([[_rng.randint(0, 255, 16).astype(np.uint8).tobytes()
                           for _ in range(2)] for _ in range(4)])
_RAW_VARLEN = tf.constant([np.arange(k * 2 + 1, dtype=np.int16).tobytes() for k in range(4)])
_BOOL_BYTES = tf.constant([_rng.randint(0, 2, 6).astype(np.uint8).tobytes() for _ in range(4)])


def _decode_raw(i):
  out = [tf.io.decode_raw(_RAW16[i], tf.int32, fixed_length=8),
         tf.reduce_sum(tf.cast(tf.io.decode_raw(_RAW_VARLEN[i], tf.int16), tf.float32)),
         tf.size(tf.io.decode_raw(_RAW_VARLEN[i], tf.int16)),
         tf.io.decode_raw(tf.strings.substr(_RAW_VARLEN[i], 0, 2), tf.int16)]
  for dtype in (tf.uint8, tf.bfloat16, tf.complex64):
    out.append(tf.io.decode_raw(_RAW16_VEC[i] if dtype.size > 2 else _RAW16[i], dtype,
                                little_endian=dtype.size < 8))
  out.append(tf.io.decode_raw(_BOOL_BYTES[i], tf.bool))   # bytes of 0 and 1 only
  return out


@pytest.mark.parametrize("mode", ["function"])
def test_decode_raw_dtypes_and_varlen_reduced(mode):
  _check(_decode_raw, 4, mode)


def test_decode_errors_propagate():
  req = {"opt": F.FixedLenFeature([], tf.float32)}
  with pytest.raises(tf.errors.InvalidArgumentError, match="opt"):
    tf.function(lambda: vectorize.pfor(
        lambda i: F.parse_single_example(RECORDS[i], req), N, warn=False))()


# =========================================================================== images


def _same_size_images(i):
  png = tf.io.decode_png(PNG_SAME[i])
  f = tf.image.convert_image_dtype(png, tf.float32)
  return (f, tf.io.decode_jpeg(JPG_SAME[i]),
          tf.image.decode_and_crop_jpeg(JPG_SAME[i], tf.stack([i % 2, i % 3, 3, 3]), channels=3),
          tf.image.crop_to_bounding_box(png, i % 3, (i + 1) % 3, 3, 3))


def test_decode_images_same_size_and_resized():
  def body(i):
    img = tf.image.convert_image_dtype(tf.io.decode_png(PNG_VAR[i], channels=3), tf.float32)
    out = [tf.image.resize(img, [4, 4], method="area")]
    jpg = tf.io.decode_jpeg(JPG_VAR[i], channels=3)
    return (out, tf.image.flip_left_right(out[0]), tf.shape(jpg),
            tf.image.pad_to_bounding_box(tf.image.resize(jpg, [3, 3]), 1, 1, 5, 5),
            _same_size_images(i))
  _check(body, 4, "function")


# =========================================================================== tf.train.Example


@pytest.mark.parametrize("mode", ["eager", "runtime_n"])
def test_parse_fixed_len_with_defaults(mode):
  def body(i):
    d = F.parse_single_example(RECORDS[i], FIXED)
    two = F.parse_example(tf.stack([RECORDS[i], RECORDS[(i + 1) % N]]), FIXED)
    return d, tf.cast(d["id"], tf.float32) * tf.reduce_sum(d["x"]) + d["opt"], two
  _check(body, N, mode)


@pytest.mark.parametrize("mode", ["eager"])
def test_parse_varlen_sparse_results_and_embedding_bags(mode):
  def body(i):
    d = F.parse_single_example(RECORDS[i], VARLEN)
    return (d, tf.sparse.to_dense(d["ids"], default_value=-1),
            tf.nn.embedding_lookup_sparse(EMBEDDING, d["ids"], None, combiner="sum"))
  _check(body, N, mode)


def test_parse_ragged_and_sequence_features():
  def body(i):
    d = F.parse_single_example(RECORDS[i], {"nested": RAGGED["nested"], **SEQUENCE})
    prefix = F.parse_example(RECORDS[:i + 1], FIXED)["x"]     # i + 1 records
    return d, tf.reduce_sum(d["seq"], 0), prefix
  _check(body, N, "eager")


@pytest.mark.parametrize("mode", ["function"])
def test_parse_sequence_example(mode):
  ctx = {"label": F.FixedLenFeature([], tf.float32)}
  seq = {"tok": F.FixedLenSequenceFeature([2], tf.int64), "words": F.VarLenFeature(tf.string)}
  def body(i):
    c, s = F.parse_single_sequence_example(SEQ_RECORDS[i], ctx, seq)
    return c, s, tf.reduce_mean(tf.cast(s["tok"], tf.float32)) + c["label"]
  _check(body, N, mode)


# =========================================================================== Keras & lookup

_TEXTS = ["the cat sat", "a dog", "", "the the dog ran far away", "cat"]
_TEXT = tf.constant(_TEXTS)


def _text_vectorization(**kw):
  layer = keras.layers.TextVectorization(max_tokens=20, **kw)
  layer.adapt(_TEXTS)
  return layer


_TV = _text_vectorization(output_sequence_length=4)
_VOCAB = ["cat", "dog", "the", "a"]


def test_text_vectorization():
  _check(lambda i: _TV(_TEXT[i:i + 1])[0], N, "eager")


_INT_IDS = tf.constant([[3, 7], [7, 7], [100, 3], [-1, 0], [5, 3]], tf.int64)
_FLOATS = tf.constant([[-1., 0.5], [1.0, 3.], [2.5, 2.4], [0., 0.], [9., -9.]])
_LAYERS = {
    "string_lookup_one_hot": (keras.layers.StringLookup(vocabulary=_VOCAB, output_mode="one_hot"),
                              WORDS),
    "integer_lookup_multi_hot": (keras.layers.IntegerLookup(vocabulary=[3, 5, 7],
                                                            output_mode="multi_hot"), _INT_IDS),
    "hashing_salted": (keras.layers.Hashing(num_bins=8, salt=[5, 7]), WORDS),
    "category_count": (keras.layers.CategoryEncoding(num_tokens=8, output_mode="count"),
                       _INT_IDS % 8),
}
_NORM = keras.layers.Normalization()
_NORM.adapt(_FLOATS)
_XLA_LAYERS = {"discretization": (keras.layers.Discretization(bin_boundaries=[0., 1., 2.5]),
                                  _FLOATS),
               "category_multi_hot": (keras.layers.CategoryEncoding(num_tokens=8,
                                                                    output_mode="multi_hot"),
                                      tf.cast(_INT_IDS % 8, tf.int32)),
               "normalization": (_NORM, _FLOATS)}


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_keras_preprocessing_layers(mode):
  layers = dict(_XLA_LAYERS, **({} if mode == "xla" else _LAYERS))
  _check(lambda i: {k: layer(x[i]) for k, (layer, x) in layers.items()}, N, mode)


_KEYS = tf.constant(["cat", "dog", "the"])
_STATIC = tf.lookup.StaticHashTable(
    tf.lookup.KeyValueTensorInitializer(_KEYS, tf.constant([1, 2, 3], tf.int64)), -1)
_VOCAB_TABLE = tf.lookup.StaticVocabularyTable(
    tf.lookup.KeyValueTensorInitializer(_KEYS, tf.constant([0, 1, 2], tf.int64)),
    num_oov_buckets=3)
_MUTABLE = tf.lookup.experimental.MutableHashTable(tf.string, tf.float32,
                                                   default_value=[-1., -1.])
_MUTABLE.insert(_KEYS, tf.constant([[1., 1.5], [2., 2.5], [3., 3.5]]))


def test_lookup_tables():
  body = lambda i: (_STATIC.lookup(WORDS[i]), _VOCAB_TABLE.lookup(WORDS[i]),
                    _MUTABLE.lookup(WORDS[i]), _STATIC.size() + tf.cast(i, tf.int64))
  _check(body, N, "eager")


# =========================================================================== other entry points


def test_vectorized_map_and_map_fn_over_strings():
  tokens = tf.strings.split(_TEXT)                       # RaggedTensor elems
  got = vectorize.vectorized_map(lambda row: (tf.strings.reduce_join(row, separator="_"),
                                              tf.strings.upper(row)), tokens, warn=False)
  _same(got, (tf.stack([tf.strings.reduce_join(r, separator="_") for r in tokens]),
              tf.ragged.stack([tf.strings.upper(r) for r in tokens])))
  sp = tokens.to_sparse()
  rows = [tf.sparse.reshape(tf.sparse.slice(sp, [k, 0], [1, sp.dense_shape[1]]), [-1])
          for k in range(N)]
  got = vectorize.vectorized_map(lambda r: tf.sparse.to_dense(r, default_value="-"), sp,
                                 warn=False)
  _same(got, tf.stack([tf.sparse.to_dense(r, default_value="-") for r in rows]))
  sig = tf.RaggedTensorSpec([None], tf.string)
  _same(vectorize.map_fn(tf.strings.split, _TEXT, fn_output_signature=sig),
        tf.map_fn(tf.strings.split, _TEXT, fn_output_signature=sig))


def test_pfor_config_reduce_concat_strings():
  def body(i, pfor_config):
    everyone = pfor_config.reduce_concat(_TEXT[i])
    return tf.strings.reduce_join(everyone, separator="|") + "#" + _TEXT[i]
  expected = tf.stack([tf.strings.reduce_join(_TEXT, separator="|") + "#" + _TEXT[k]
                       for k in range(N)])
  _same(vectorize.pfor(body, N, warn=False), expected)


def test_zero_and_runtime_iterations():
  def body(i):
    return tf.strings.upper(_TEXT[i]), tf.strings.split(_TEXT[i])
  f = tf.function(lambda k: vectorize.pfor(body, k, warn=False))
  _same(f(tf.constant(2)), _loop(body, 2))
  upper, tokens = f(tf.constant(0))
  assert upper.dtype == tf.string and upper.shape == (0,)
  assert isinstance(tokens, tf.RaggedTensor) and tokens.shape[0] == 0
  assert tokens.dtype == tf.string


def test_parallel_iterations_with_ragged_output_is_refused_clearly():
  with pytest.raises(vectorize.ConversionError, match="parallel_iterations"):
    vectorize.pfor(_split, N, parallel_iterations=2, warn=False)
  got = vectorize.pfor(lambda i: tf.strings.upper(SENTENCES[i]), N, parallel_iterations=2,
                       warn=False)
  _same(got, tf.strings.upper(SENTENCES))


# =========================================================================== tf.data

_ALL_DTYPES = [tf.int8, tf.int16, tf.int32, tf.int64, tf.uint8, tf.uint16, tf.uint32,
               tf.uint64, tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.bool,
               tf.complex64, tf.complex128, tf.string]


def _element(k, dtype):
  if dtype == tf.string:
    return tf.strings.as_string(k)
  if dtype == tf.bool:
    return tf.stack([k % 2 == 0, k % 3 == 0])
  if dtype.is_complex:
    return tf.complex(tf.cast(k, dtype.real_dtype), tf.constant([1., 2.], dtype.real_dtype))
  return tf.cast(tf.stack([k, k + 1, 2]), dtype)


def _per_dtype(x):
  if x.dtype == tf.string:
    return x, tf.strings.join([x, "!"]), tf.strings.length(x)
  if x.dtype == tf.bool:
    return tf.logical_not(x), tf.reduce_any(x)
  if x.dtype.is_complex:
    return x * 2, tf.math.conj(x), tf.abs(x)
  return x * tf.constant(2, x.dtype), tf.reduce_sum(x)


def test_map_and_batch_every_dtype():
  ds = tf.data.Dataset.range(7).map(lambda k: {d.name: _element(k, d) for d in _ALL_DTYPES})
  _check_ds(ds, lambda e: {k: _per_dtype(v) for k, v in e.items()}, 3)   # a final batch of 1


def test_map_and_batch_parse_tfrecord_file():
  path = os.path.join(tempfile.mkdtemp(), "x.tfrecord")
  with tf.io.TFRecordWriter(path) as w:
    for k in range(7):
      w.write(_example(k))
  records = tf.data.TFRecordDataset(path).shuffle(7, seed=3, reshuffle_each_iteration=False)

  def fn(r):
    d = F.parse_single_example(r, {"x": FIXED["x"], "id": FIXED["id"], "tags": VARLEN["tags"]})
    return d, (d["x"] * 2, d["id"])
  _check_ds(records.repeat(2), fn, 3, drop=True)


_TEXT_DS = tf.data.Dataset.from_tensor_slices(
    ["the cat sat", "a dog", "", "the the dog ran far", "cat", "x y", "q"])


def test_map_and_batch_text_ragged_and_padded_outputs():
  def fn(s):
    tokens = tf.strings.split(tf.stack([s, s + " z"]))
    first = tokens[0][:4]
    return {"tok": tokens,
            "padded": tf.pad(first, [[0, 4 - tf.size(first)]], constant_values="<pad>")}
  _check_ds(_TEXT_DS, fn, 3)


_FLOAT_DS = tf.data.Dataset.range(10).map(lambda k: tf.cast(tf.stack([k, 2 * k]), tf.float32))


def test_map_and_batch_empty_shuffle_cache_prefetch():
  ds = _FLOAT_DS.shuffle(10, seed=1, reshuffle_each_iteration=False).cache().prefetch(2)
  _check_ds(ds, tf.nn.softmax, tf.constant(4, tf.int64), num_parallel_calls=tf.data.AUTOTUNE)
  _check_ds(_TEXT_DS.filter(lambda s: tf.strings.length(s) > 100),
            lambda s: tf.strings.upper(s), 3)


def test_map_and_batch_nested_and_variable_length_elements():
  z = tf.data.Dataset.zip((tf.data.Dataset.range(5), _TEXT_DS.take(5)))
  nested = z.map(lambda k, s: ({"k": k, "s": s}, (k * 2, tf.strings.split(s))))
  # a [None] element (the tokens) is batched ragged and fn sees each at its own size
  _check_ds(nested, lambda e, t: {"y": e["k"] + t[0], "s": tf.strings.upper(e["s"]),
                                  "n": tf.size(t[1]),
                                  "h": tf.reduce_sum(tf.strings.to_hash_bucket_fast(t[1], 9))}, 2)


def test_map_and_batch_structured_preprocessing():
  city = keras.layers.StringLookup(vocabulary=["paris", "rome", "oslo"], output_mode="one_hot")
  code = keras.layers.IntegerLookup(vocabulary=[10, 20, 30])
  ages = keras.layers.Discretization(bin_boundaries=[18., 40., 65.])
  table = tf.data.Dataset.from_tensor_slices({
      "age": [12., 30., 70., 45., 18., 99., 5.],
      "city": ["rome", "nyc", "oslo", "paris", "rome", "", "oslo"],
      "code": tf.constant([10, 20, 99, 30, 10, 20, 0], tf.int64)})
  fn = lambda e: ({"age": ages(e["age"][None])[0], "city": city(e["city"]),
                   "code": code(e["code"])},
                  tf.cast(e["age"] > 40, tf.int32))
  _check_ds(table, fn, 3)


def test_map_and_batch_decode_resize_augment():
  pngs = tf.data.Dataset.from_tensor_slices(
      tf.constant([tf.io.encode_png(x).numpy() for x in _VAR_IMAGES + _SAME_IMAGES[:3]]))

  def augment(k, b):
    img = tf.image.convert_image_dtype(tf.io.decode_png(b, channels=3), tf.float32)
    return tf.image.stateless_random_flip_left_right(tf.image.resize(img, [4, 4]),
                                                     tf.stack([k, k + 1]))
  _check_ds(pngs.enumerate(), augment, 3)


def test_map_and_batch_clear_refusals():
  ragged = tf.data.Dataset.from_tensor_slices(tf.ragged.constant([[1, 2], [3], [], [4, 5, 6]]))
  with pytest.raises(TypeError, match="RaggedTensorSpec"):
    ragged.apply(mab(tf.reduce_sum, 2))
  with pytest.raises(vectorize.ConversionError, match="py_function"):
    tf.data.Dataset.range(4).apply(
        mab(lambda k: tf.py_function(lambda z: z * 2, [k], tf.int64), 2))


# =========================================================================== bugs


@pytest.mark.xfail(strict=True, reason="decode_raw of per-example-length bytes returned as an "
                   "output is refused at run time instead of a RaggedTensor")
def test_bug_decode_raw_varlen_output_is_ragged():
  body = lambda i: tf.io.decode_raw(_RAW_VARLEN[i], tf.int16)   # lengths 1, 3, 5, 7
  _check(body, 4, "eager")


@pytest.mark.xfail(strict=True, reason="decoded images differing only in height (first axis) "
                   "are refused instead of a ragged [n, None, w, c] result")
def test_bug_decode_png_first_axis_ragged_output():
  png = tf.constant([tf.io.encode_png(tf.fill([2 + k, 3, 1], tf.constant(k, tf.uint8))).numpy()
                     for k in range(3)])
  _check(lambda i: tf.io.decode_png(png[i]), 3, "function")


@pytest.mark.xfail(strict=True, reason="README says resize_with_pad of decoded images falls "
                   "back; it fails with 'DecodePng ... outputs of different sizes'")
def test_bug_resize_with_pad_after_decode():
  body = lambda i: tf.image.resize_with_pad(tf.io.decode_png(PNG_VAR[i], channels=3), 6, 6)
  _check(body, 4, "eager")


@pytest.mark.xfail(strict=True, reason="map_and_batch: resize_with_crop_or_pad of decoded "
                   "images of different sizes fails where map().batch() works")
def test_bug_map_and_batch_resize_with_crop_or_pad():
  pngs = tf.data.Dataset.from_tensor_slices(PNG_VAR)
  _check_ds(pngs, lambda b: tf.image.resize_with_crop_or_pad(
      tf.io.decode_png(b, channels=3), 5, 5), 2)


@pytest.mark.xfail(strict=True, reason="decode_jpeg/png with the default channels=0, then a "
                   "fixed-size resize, is refused (channels=3 works)")
def test_bug_decode_default_channels_then_resize():
  body = lambda i: tf.image.resize(tf.io.decode_jpeg(JPG_VAR[i]), [3, 3])
  _check(body, 4, "eager")


@pytest.mark.xfail(strict=True, reason="map_and_batch: decode_png with default channels then "
                   "resize fails where map().batch() works")
def test_bug_map_and_batch_decode_default_channels_then_resize():
  pngs = tf.data.Dataset.from_tensor_slices(PNG_VAR)
  _check_ds(pngs, lambda b: tf.image.resize(tf.io.decode_png(b), [2, 2]), 2)


@pytest.mark.xfail(strict=True, reason="a window x[i:i+k] clamped at the end of x fails a "
                   "run-time 'length that differs between iterations' assertion")
def test_bug_sliding_window_clamped_at_end():
  tokens = tf.constant(["a", "b", "c", "d", "e"])
  body = lambda i: tf.strings.reduce_join(tokens[i:i + 3], separator=" ")   # "d e", "e" at the end
  _check(body, 5, "eager")


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_dense_hash_table_lookup_of_a_key_vector_per_example(mode):
  """Was a raw 'Expected key shape [3] got [3,2]': a dense table takes keys with one leading
  axis only."""
  table = tf.lookup.experimental.DenseHashTable(tf.int64, tf.int64, default_value=-1,
                                                empty_key=-2, deleted_key=-3)
  table.insert(tf.constant([1, 5], tf.int64), tf.constant([10, 50], tf.int64))
  ids = tf.constant([[1, 2], [5, 5], [0, 1]], tf.int64)
  _check(lambda i: table.lookup(ids[i]), 3, mode)


@pytest.mark.xfail(strict=True, reason="map_and_batch gives a more specific element_spec "
                   "(None, 5) than map().batch() (None, None) for a per-element bincount")
def test_bug_map_and_batch_element_spec_differs():
  strs = tf.data.Dataset.range(6).map(lambda k: tf.strings.as_string(tf.range(k % 4)))
  fn = lambda x: tf.math.bincount(tf.strings.to_hash_bucket_fast(x, 5), minlength=5,
                                  maxlength=5)
  _check_ds(strs, fn, 3)
