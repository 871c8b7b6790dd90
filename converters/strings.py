"""String ops (`tf.strings`): case, length, hashing, regexes, joins, substrings, numbers.

The trick: almost every string op works element by element on a tensor of any shape, so the
stacked input, loop axis first, is just a bigger tensor and the op runs once on all
iterations. Patterns, separators and encodings are attributes or scalar inputs that must be
loop-invariant (a per-iteration regex has no batched kernel; it falls back). The ops that take
several tensors (StringJoin, Substr) broadcast only scalars against a shape, not numpy-style,
so their non-scalar inputs are broadcast to `[n] + the per-iteration output shape` first.
Table lookups (`tf.lookup`, Keras StringLookup) look up keys of any shape in a table made
outside the loop, so the stacked keys are looked up at once too.
"""

import functools

import tensorflow as tf

from vectorize import values
from vectorize.family import register_axis_shift
from vectorize.family import register_elementwise
from vectorize.family import register_leading_batch
from vectorize.family import register_merge_batch
from vectorize.registry import register
from vectorize.values import stacked


def _is_invariant_scalar(value):
  return not value.stacked and value.tensor.shape.rank == 0


def _per_iteration_shape(value):
  shape = tf.shape(value.tensor)
  return shape[1:] if value.stacked else shape


def broadcast_to_output(op, keep_scalars=True):
  """Every input at `[n] + the per-iteration output shape`, except loop-invariant scalars
  when `keep_scalars` (the op broadcasts those itself)."""
  inputs = op.inputs
  output_shape = op.output_shape(0)
  if output_shape.is_fully_defined():
    per_iteration = output_shape.as_list()
  else:
    per_iteration = functools.reduce(tf.broadcast_dynamic_shape,
                                     [_per_iteration_shape(v) for v in inputs])
  full_shape = values.prepend_loop_length(
      per_iteration if isinstance(per_iteration, tf.Tensor)
      else tf.constant(per_iteration, tf.int32), op.ctx.n)
  aligned = values.align_ranks(inputs)
  out = [t if keep_scalars and _is_invariant_scalar(v) else tf.broadcast_to(t, full_shape)
         for v, t in zip(inputs, aligned)]
  # One static shape for all: a kernel's shape check (Substr's) wants `[5]` and `[?]` equal.
  broadcast = [t for v, t in zip(inputs, out) if not (keep_scalars and _is_invariant_scalar(v))]
  common = functools.reduce(lambda a, b: a.merge_with(b), [t.shape for t in broadcast])
  for t in broadcast:
    t.set_shape(common)
  return out


@register("StringJoin")
def _convert_string_join(op):
  """Scalars may mix with tensors of one shape: the rest are broadcast to that shape."""
  return stacked(op.rebuild(broadcast_to_output(op))[0])


@register("Substr")
def _convert_substr(op):
  """Scalar `pos` and `len` apply to every element; otherwise all three are broadcast to
  one shape (the kernel wants `pos` and `len` of the same shape)."""
  if _is_invariant_scalar(op.value(1)) and _is_invariant_scalar(op.value(2)):
    return stacked(op.rebuild([op.stacked(0), op.invariant(1), op.invariant(2)])[0])
  return stacked(op.rebuild(broadcast_to_output(op, keep_scalars=False))[0])


@register("UnsortedSegmentJoin")
def _convert_unsorted_segment_join(op):
  """Iteration i's segments become segments `i*s .. i*s + s - 1` of one join over all
  iterations, `[n*s] + rest -> [n, s] + rest`; ids outside `[0, s)` become -1, which the
  kernel rejects as the loop's would (never a neighbour's segment)."""
  data, ids, num_segments = op.stacked(0), op.stacked(1), op.invariant(2)
  n = op.ctx.n
  s = tf.cast(num_segments, ids.dtype)
  offsets = values.expand_after_loop_axis(tf.range(tf.cast(n, ids.dtype)) * s,
                                          values.rank(ids) - 1)
  ids = tf.where((ids >= 0) & (ids < s), ids + offsets, -tf.ones_like(ids))
  joined = op.rebuild([data, ids, num_segments * tf.cast(n, num_segments.dtype)])[0]
  return stacked(values.reshape_leading(joined, [n, num_segments]))


register_axis_shift("ReduceJoin", axis_input=1)
register_elementwise(
    "AsString",
    "DecodeBase64",
    "EncodeBase64",
    "StaticRegexFullMatch",
    "StaticRegexReplace",
    "StringLength",
    "StringLower",
    "StringStrip",
    "StringToHashBucket",
    "StringToHashBucketFast",
    "StringToHashBucketStrong",
    "StringToNumber",
    "StringUpper",
    "UnicodeScript",
    "UnicodeTranscode",
)


@register("LookupTableFindV2")
def _convert_lookup(op):
  """Keys `[n] + s` looked up at once. A dense hash table takes keys of its key shape with one
  leading axis only (`[m] + key shape`), so keys of a rank above 0 per iteration have the
  loop axis merged into their first (`[n*s0] + ...`), and the values split back."""
  keys = op.stacked(1)
  table, default = op.invariant(0), op.invariant(2)
  if values.rank(keys) < 2:
    return stacked(op.rebuild([table, keys, default])[0])
  found = op.rebuild([table, values.merge_leading(keys), default])[0]
  return stacked(values.split_leading(found, op.ctx.n, tf.shape(keys)[1]))
register_leading_batch("RegexFullMatch", "RegexReplace")
register_merge_batch("Fingerprint")
