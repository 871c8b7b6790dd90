"""Parsing and decoding: tf.Example records, CSV lines, raw bytes, serialized tensors.

The trick: a parse op reads a batch of records as readily as one, so the stacked records,
loop axis first, go to ONE parse: `[n]` serialized tf.Examples -> `[n] + shape` per dense
feature, `[n, b]` CSV lines -> `[n, b]` per column, `[n] + s` byte strings -> `[n] + s + [k]`
numbers (one byte string per record, of its own length: joined, decoded once, ragged).
Features whose size differs per record (sparse, ragged, variable-length sequence) would come
back padded to the longest record of the whole batch, so they are refused (the op falls
back) unless nothing reads them. A serialized tensor is read the same way: its TensorProto
fields are decoded for all iterations at once and the raw contents reinterpreted. (Images
have no kernel that decodes a batch: see per_row.py.)
"""

import tensorflow as tf

from converters.per_row import check
from vectorize import ragged
from vectorize import registry
from vectorize import values
from vectorize.errors import Unvectorizable, user_location
from vectorize.family import register_leading_batch
from vectorize.registry import register
from vectorize.values import invariant, stacked

# The dtypes DecodeRaw can read back (ParseTensor of others falls back).
_RAW_DTYPES = frozenset([tf.half, tf.bfloat16, tf.float32, tf.float64, tf.complex64,
                         tf.complex128, tf.int8, tf.int16, tf.int32, tf.int64, tf.uint8,
                         tf.uint16, tf.bool])


def _records(op, i):
  """Stacked input i (`[n] + s`, s of rank 0 or 1) as one batch `[n*b]` for the parse, and
  a function splitting a parsed output `[n*b, ...]` back to `[n, b, ...]`."""
  records = op.stacked(i)
  if records.shape.rank == 1:
    return records, lambda t: t
  b = values.dynamic_shape(records)[1]
  return values.merge_leading(records), lambda t: values.split_leading(t, op.ctx.n, b)


def _names(op, i):
  """The `names` input, kept when it is the empty (usual) vector, else batched as records."""
  if not op.is_stacked(i) and op.input_shape(i).num_elements() == 0:
    return op.invariant(i)
  return _records(op, i)[0]


def _example_layout(op):
  """(names, dense keys as one vector, dense defaults, number of sparse features, number of
  ragged features) of a tf.Example parse op, whatever its version."""
  if op.type == "ParseSingleExample":
    keys = tf.constant([k.decode() for k in op.attr("dense_keys")], tf.string)
    return (tf.constant([], tf.string), keys, [op.invariant(i) for i in range(1, op.num_inputs)],
            op.attr("num_sparse"), 0)
  if op.type == "ParseExample":
    num_sparse, num_dense = op.attr("Nsparse"), op.attr("Ndense")
    first_key = 2 + num_sparse
    keys = tf.stack([op.invariant(i) for i in range(first_key, first_key + num_dense)])
    defaults = [op.invariant(i) for i in range(first_key + num_dense, op.num_inputs)]
    return _names(op, 1), keys, defaults, num_sparse, 0
  defaults = [op.invariant(i) for i in range(5, op.num_inputs)]
  return (_names(op, 1), op.invariant(3), defaults, op.attr("num_sparse"),
          len(op.attr("ragged_value_types")))


def _is_read(tensor):
  return bool(tensor.consumers()) or any(tensor is t for t in getattr(tensor.graph, "outputs",
                                                                       ()))


@register("ParseExample", "ParseExampleV2", "ParseSingleExample")
def _convert_parse_example(op):
  """Dense features of `[n]` or `[n, b]` records by one ParseExampleV2. Sparse and ragged
  features have a size per record (a batched parse would pad them to the whole batch's
  longest), so the op falls back if anything reads them; unread, they are not parsed."""
  names, dense_keys, defaults, num_sparse, num_ragged = _example_layout(op)
  dense_shapes = [tf.TensorShape(s) for s in op.attr("dense_shapes")]
  if not all(s.is_fully_defined() for s in dense_shapes):
    raise Unvectorizable(
        "a variable-length dense feature (FixedLenSequenceFeature) parsed for all iterations "
        "at once would be padded to the whole batch's longest record")
  outputs = op.op.outputs
  dense = range(3 * num_sparse, 3 * num_sparse + len(defaults))
  if any(_is_read(t) for k, t in enumerate(outputs) if k not in dense):
    raise Unvectorizable(
        "a sparse or ragged feature is read; it has a size per record, and parsed together "
        "the records would be padded to the whole batch's longest")
  serialized, split = _records(op, 0)
  no_keys = tf.constant([], tf.string)
  parsed = tf.raw_ops.ParseExampleV2(
      serialized=serialized, names=names, sparse_keys=no_keys, dense_keys=dense_keys,
      ragged_keys=no_keys, dense_defaults=defaults, num_sparse=0, sparse_types=[],
      ragged_value_types=[], ragged_split_types=[], dense_shapes=dense_shapes).dense_values
  return ([_unread(t) for t in outputs[:dense.start]] + [stacked(split(t)) for t in parsed] +
          [_unread(t) for t in outputs[dense.stop:]])


def _unread(tensor):
  """An empty stand-in for an output nothing reads."""
  return invariant(tf.zeros([d or 0 for d in tensor.shape.as_list()], tensor.dtype))


@register("ParseTensor")
def _convert_parse_tensor(op):
  """Reads every iteration's TensorProto fields with one proto decode, checks that dtypes
  and shapes agree (equal serialized shapes), takes the shape from the first record and
  reinterprets the raw contents: `[n]` -> `[n] + shape`."""
  dtype = op.attr("out_type")
  if dtype not in _RAW_DTYPES:
    raise Unvectorizable(f"a {dtype.name} tensor is not stored as raw bytes")
  n = op.ctx.n
  # One valid record past the end, so that the decodes see one even when n = 0.
  records = tf.concat([op.stacked(0), [tf.io.serialize_tensor(tf.zeros([], dtype))]], 0)
  proto = tf.io.decode_proto(records, "tensorflow.TensorProto",
                             ["dtype", "tensor_shape", "tensor_content"],
                             [tf.int32, tf.string, tf.string])
  dtypes, shapes = proto.values[0][:n, 0], proto.values[1][:, 0]
  content = tf.concat([proto.values[2], tf.fill([n + 1, 1], "")], 1)[:n, 0]
  prefix = f"parse_tensor ({op.op.name}) in a vectorized loop:"
  same_dtype = check(tf.equal(dtypes, dtype.as_datatype_enum),
                     f"{prefix} a record holds another dtype than {dtype.name}")
  with tf.control_dependencies([same_dtype]):
    first = tf.shape(tf.io.parse_tensor(records[0], dtype), tf.int64)
  checks = [
      check(tf.equal(shapes[:n], shapes[0]),
            f"{prefix} iterations parse tensors of different shapes, which cannot be "
            "stacked; give every record the same shape"),
      check(tf.equal(tf.cast(tf.strings.length(content), tf.int64),
                     tf.reduce_prod(first) * dtype.size),
            f"{prefix} a record keeps its values in typed fields, not as raw tensor_content "
            "(tf.io.serialize_tensor writes raw content); parse such records outside the "
            "vectorized function"),
  ]
  with tf.control_dependencies(checks):
    flat = tf.io.decode_raw(content, dtype)
  shape = tf.concat([tf.reshape(tf.cast(n, tf.int64), [1]), first], 0)
  return stacked(tf.reshape(flat, shape))


@register("DecodeProtoV2")
def _convert_decode_proto(op):
  """One decode of every iteration's messages, `[n] + s` -> sizes `[n] + s + [f]` and values
  `[n] + s + [w]`. The batched decode pads repeated fields to the longest count of all
  iterations; that is each iteration's own padding only when every iteration's longest count
  is the same, which is checked (otherwise the iterations' values have different sizes and
  cannot be stacked). Unless n > 0 is known, one row of empty messages is decoded too (the
  kernel rejects an empty batch; no count grows) and dropped."""
  messages, n = op.stacked(0), op.ctx.n
  if not op.ctx.static_n:
    empty_row = tf.fill(tf.concat([[1], tf.shape(messages)[1:]], 0), "")
    messages = tf.concat([messages, empty_row], 0)
  sizes, *fields = [t[:n] for t in op.rebuild([messages])]
  longest = tf.reduce_max(sizes, axis=list(range(1, values.rank(sizes) - 1)))   # [n, f]
  message = (f"decode_proto ({op.op.name}) in a vectorized loop: iterations decode repeated "
             "fields of different lengths, so their values have different sizes and cannot "
             "be stacked; decode outside the vectorized function")
  with tf.control_dependencies([check(tf.equal(longest, longest[:1]), message)]):
    return [stacked(tf.identity(t)) for t in [sizes] + fields]


register_leading_batch("DecodeCSV", "DecodeCompressed", "DecodeJSONExample", "DecodePaddedRaw")


@register("DecodeRaw")
def _convert_decode_raw(op):
  """The iterations' byte strings decode as one batch where all have one length. A string
  per iteration whose length may differ (audio, a record of its own size) decodes ragged
  where every use takes a ragged value (`ragged.uses_take`): all strings joined and
  decoded at once, each iteration's count of numbers its row length. Elsewhere, and where
  every use reshapes to a shape the graph knows (a record's shape: one length, or the loop
  fails too), the lengths are checked equal, with a message naming the op."""
  raw, out_type = op.stacked(0), op.attr("out_type")
  lengths = tf.strings.length(raw)
  size = out_type.size
  decoded = op.op.outputs[0]
  pinned = all(use.type in ("Reshape", "EnsureShape") and use.outputs[0].shape.is_fully_defined()
               for use in decoded.consumers())
  if (values.rank(raw) == 1 and not op.ctx.target.static_shapes and not pinned
      and ragged.uses_take(decoded, registry.RAGGED)):
    whole = check(tf.equal(lengths % size, 0), (
        f"vectorize: {op.op.name}{user_location(op.op)}: tf.io.decode_raw to {out_type.name} "
        f"needs byte strings whose length is a multiple of {size}"))
    with tf.control_dependencies([whole]):
      flat = tf.io.decode_raw(tf.strings.reduce_join(raw), out_type,
                              little_endian=op.attr("little_endian"))
    return ragged.ragged(flat, lengths // size)
  flat_lengths = tf.reshape(lengths, [-1])
  same = check(tf.equal(flat_lengths, flat_lengths[:1]), (
      f"vectorize: {op.op.name}{user_location(op.op)}: tf.io.decode_raw in a vectorized loop "
      "reads byte strings of different lengths in different iterations, so the decoded "
      "values differ in size; where the decoded values are only reduced, reshaped to a "
      "fixed shape or used elementwise they are taken ragged, but this one reaches an op "
      "or output that needs one size. To fix: pad the strings to one length (or use "
      "tf.io.decode_raw(..., fixed_length=k)), or decode outside the vectorized function"))
  with tf.control_dependencies([same]):
    return stacked(op.rebuild([tf.identity(raw)])[0])
