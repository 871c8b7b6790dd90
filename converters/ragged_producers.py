"""Ops whose per-iteration output size depends on the data: they make ragged values.

Each runs once on all iterations and returns flat values plus one row length per iteration
(`vectorize.ragged`). The trick is that the one-shot kernels already order their output
iteration by iteration: `tf.where` of the stacked input lists coordinates in row-major order
(loop index first), and `tf.unique` of (iteration, value) keys keeps first appearances in
order. Under XLA they are a `ConversionError`: the sizes are not static.
"""

import tensorflow as tf

from vectorize import offsets
from vectorize import ragged
from vectorize import values
from vectorize.errors import Unvectorizable
from vectorize.registry import register
from vectorize.values import stacked


def _segment_counts(ids, n):
  """`[n]` int32: how many of `ids` name each iteration."""
  return tf.math.unsorted_segment_sum(tf.ones_like(ids, tf.int32), ids, n)


@register("Range")
def _convert_range(op):
  """Per-iteration bounds: lengths as TF's kernel counts them (its argument checks kept),
  then `start + position * delta` for every row at once; stacked where the length is the
  same in every iteration (`_range_of_invariant_length`)."""
  same_length = _range_of_invariant_length(op)
  if same_length is not None:
    return same_length
  op.ctx.target.require_dynamic_shapes(op.op, "tf.range with bounds that differ per iteration")
  start, limit, delta = (op.stacked(k) for k in range(3))
  valid = tf.logical_and(tf.not_equal(delta, 0), tf.where(delta > 0, start <= limit,
                                                          start >= limit))
  check = tf.debugging.Assert(tf.reduce_all(valid), [
      f"vectorize: {op.op.name}: tf.range needs delta != 0, start <= limit when delta > 0 "
      "and start >= limit when delta < 0; start, limit, delta per iteration:",
      start, limit, delta])
  if start.dtype.is_integer:
    span = tf.abs(limit - start)
    lengths = (span + tf.abs(delta) - 1) // tf.abs(delta)
  else:
    lengths = tf.math.ceil(tf.abs((limit - start) / delta))
  with tf.control_dependencies([check]):
    lengths = tf.cast(lengths, tf.int32)
    if start.dtype.is_integer:        # exact either way: one kernel call, no row ids
      flat = tf.raw_ops.RaggedRange(starts=start, limits=limit, deltas=delta).rt_dense_values
      return ragged.ragged(flat, lengths)
    rows = ragged.RaggedRows(tf.zeros([0], start.dtype), lengths)
    ids = rows.row_ids
    positions = tf.cast(rows.positions, start.dtype)
    flat = tf.gather(start, ids) + positions * tf.gather(delta, ids)
  return ragged.ragged(flat, rows.row_lengths)


def _range_of_invariant_length(op):
  """`tf.range(s, s + k, d)` with `k` and `d` loop-invariant (`vectorize/offsets.py`): every
  iteration has the same length, so the ranges stack as `[n, length]`, as the loop's do (also
  under XLA where the length is static). None where that is not provable."""
  if op.is_stacked(2):
    return None
  span = offsets.invariant_difference(op, 1, 0)
  if span is None:
    return None
  delta = op.invariant(2)
  static_delta = tf.get_static_value(delta)
  if isinstance(span, int) and static_delta is not None:
    static_delta = int(static_delta)
    if static_delta != 0 and (span == 0 or (span > 0) == (static_delta > 0)):
      length = (abs(span) + abs(static_delta) - 1) // abs(static_delta)
      return stacked(_stacked_ranges(op.stacked(0), length, delta))
  span = tf.cast(span, delta.dtype)
  valid = tf.logical_and(tf.not_equal(delta, 0), tf.where(delta > 0, span >= 0, span <= 0))
  check = tf.debugging.Assert(tf.logical_or(tf.equal(op.ctx.n, 0), valid), [
      f"vectorize: {op.op.name}: tf.range needs delta != 0, start <= limit when delta > 0 "
      "and start >= limit when delta < 0; limit - start and delta:", span, delta])
  with tf.control_dependencies([check]):
    length = (tf.abs(span) + tf.abs(delta) - 1) // tf.abs(delta)
  return stacked(_stacked_ranges(op.stacked(0), length, delta))


def _stacked_ranges(start, length, delta):
  """`[n, length]`: row j is `start[j] + position * delta`."""
  steps = tf.range(tf.cast(length, start.dtype), dtype=start.dtype) * delta
  return start[:, tf.newaxis] + steps[tf.newaxis, :]


@register("Where")
def _convert_where(op):
  """One argument: the coordinates of the stacked input's true (non-zero) entries, loop
  index first, are row-major; the loop index gives the row lengths."""
  op.ctx.target.require_dynamic_shapes(op.op, "one-argument tf.where")
  coordinates = tf.where(op.stacked(0))                   # [total, 1 + rank]
  ids = tf.cast(coordinates[:, 0], tf.int32)
  return ragged.ragged(coordinates[:, 1:], _segment_counts(ids, op.ctx.n), row_ids=ids)


@register("RaggedRange")
def _convert_ragged_range(op):
  """All iterations' ranges by one call on their rows one after another (per iteration the
  bounds broadcast to k rows): the values are ragged, each iteration's row splits the
  run of the joint ones at its rows, less its first."""
  op.ctx.target.require_dynamic_shapes(op.op, "tf.ragged.range with per-iteration bounds")
  bounds = [op.stacked(k) for k in range(3)]
  bounds = [b if values.rank(b) == 2 else b[:, None] for b in bounds]        # [n, k]
  shape = tf.broadcast_dynamic_shape(tf.broadcast_dynamic_shape(
      tf.shape(bounds[0]), tf.shape(bounds[1])), tf.shape(bounds[2]))
  splits, flat = op.rebuild([tf.reshape(tf.broadcast_to(b, shape), [-1]) for b in bounds])
  k = shape[1]
  first = tf.range(op.ctx.n) * k                                             # [n]
  local = tf.gather(splits, first[:, None] + tf.range(k + 1)[None])          # [n, k + 1]
  local -= local[:, :1]
  return [stacked(local), ragged.ragged(flat, local[:, -1])]


def unique_rows(flat, ids, n, out_idx):
  """Per iteration, `tf.unique` of its entries of `flat` (1-D, `ids` naming the iteration).

  Returns the flat unique values, their row lengths, each entry's index into its own
  iteration's unique values, and each unique value's count.
  """
  distinct, first = tf.unique(flat, out_idx=tf.int64)
  num = tf.maximum(tf.size(distinct, out_type=tf.int64), 1)
  keys, position = tf.unique(tf.cast(ids, tf.int64) * num + first, out_idx=tf.int32)
  unique_values = tf.gather(distinct, keys % num)
  lengths = _segment_counts(tf.cast(keys // num, tf.int32), n)
  index = position - tf.gather(tf.cumsum(lengths, exclusive=True), ids)
  counts = tf.math.unsorted_segment_sum(tf.ones_like(position), position, tf.size(keys))
  return unique_values, lengths, tf.cast(index, out_idx), tf.cast(counts, out_idx)


@register("Unique", "UniqueWithCounts")
def _convert_unique(op):
  """All iterations' entries at once, keyed by (iteration, value): unique values ragged, the
  index stacked, the counts ragged like the values."""
  op.ctx.target.require_dynamic_shapes(op.op, f"{op.type}'s output")
  x = op.stacked(0)                                       # [n, m]
  n = values.loop_length(op.ctx)
  m = values.dynamic_shape(x)[1]
  ids = tf.repeat(tf.range(op.ctx.n), m)
  unique_values, lengths, index, counts = unique_rows(
      values.reshape(x, [n * m]), ids, op.ctx.n, op.attr("out_idx"))
  results = [ragged.ragged(unique_values, lengths), stacked(values.reshape(index, [n, m]))]
  if op.type == "UniqueWithCounts":
    results.append(ragged.ragged(counts, lengths))
  return results


@register("StringSplitV2")
def _convert_string_split(op):
  """All iterations' strings split at once: a token of string `g = i * b + r` (iteration i,
  row r) keeps its position; indices and tokens are ragged, the dense shape stacked."""
  strings = op.stacked(0)                                 # [n, b]
  separator = op.invariant(1)
  n = values.loop_length(op.ctx)
  b = values.dynamic_shape(strings)[1]
  indices, tokens, _ = op.rebuild([values.reshape(strings, [n * b]), separator])
  row, position = indices[:, 0], indices[:, 1]
  b64 = tf.cast(b, tf.int64)
  ids = tf.cast(row // tf.maximum(b64, 1), tf.int32)
  lengths = _segment_counts(ids, op.ctx.n)
  longest = tf.maximum(tf.math.unsorted_segment_max(position + 1, ids, op.ctx.n), 0)
  shape = tf.stack([tf.fill([op.ctx.n], b64), tf.cast(longest, tf.int64)], 1)
  return [ragged.ragged(tf.stack([row % tf.maximum(b64, 1), position], 1), lengths),
          ragged.ragged(tokens, lengths), stacked(shape)]


def _static_multiples(op):
  """The multiples the graph's static shapes imply (1 where they do not say): what n = 0,
  with no iteration to read them from, keeps."""
  sizes = zip(op.input_shape(0).as_list(), op.output_shape(0).as_list())
  return [out // size if out is not None and size else 1 for size, out in sizes]


def tile_per_iteration(op):
  """Tile with per-iteration multiples: the later axes are tiled alike in every iteration
  (checked at run time), the first by each iteration's own count, so the result is
  ragged: output row q of iteration i reads its row `q % rows_i`."""
  if not ragged.first_dim_varies(op.output_shape(0)):
    raise Unvectorizable("per-iteration multiples where the graph leaves later axes unknown")
  op.ctx.target.require_dynamic_shapes(op.op, "tf.tile with multiples that differ per iteration")
  x = op.value(0)
  multiples = tf.cast(op.stacked(1), tf.int32)                     # [n, rank]
  if ragged.is_ragged(x):
    rows = x.tensor
    flat, lengths, starts = rows.values, rows.row_lengths, rows.row_starts
  else:
    flat = values.merge_leading(x.tensor) if x.stacked else x.tensor
    a = tf.shape(x.tensor)[1 if x.stacked else 0]
    lengths = tf.fill([op.ctx.n], a)
    starts = tf.range(op.ctx.n) * a if x.stacked else tf.zeros([op.ctx.n], tf.int32)
  later = ragged.agreed(multiples[:, 1:], f"vectorize: {op.op.name}: tf.tile multiples of "
                       "later axes differ per iteration", _static_multiples(op)[1:])
  flat = tf.tile(flat, tf.concat([[1], later], 0))
  out = ragged.RaggedRows(flat, lengths * multiples[:, 0])
  ids = out.row_ids
  source = tf.gather(starts, ids) + out.positions % tf.maximum(tf.gather(lengths, ids), 1)
  return ragged.ragged(tf.gather(flat, source), out.row_lengths)
