"""Converters for ops that take ragged values (per-iteration first dimensions that differ).

A ragged value's flat values have the rank of one iteration's value, and every axis past
the first keeps its index: ops acting on later axes run on the flat values as they are.
Ops acting on the first axis use the row ids (the iteration of each flat row): reductions
over it become segment reductions, giving stacked results, and gathers offset indices by
each iteration's first row. Per-iteration (stacked) operands of elementwise ops are
gathered by row id; invariant ones broadcast as they would per iteration.

This module: elementwise ops, reductions and segment ops; shapes, slicing, joining, gathers
and sparse scatters are in `ragged_arrays.py`.
"""

import numpy as np
import tensorflow as tf

from converters import arrays
from converters.ragged_producers import tile_per_iteration
from vectorize import indexing
from vectorize import ragged
from vectorize import registry
from vectorize import values
from vectorize.errors import Unvectorizable
from vectorize.family import ELEMENTWISE
from vectorize.values import invariant, stacked


def _per_row(tensor, rows, rank):
  """A stacked operand `[n] + s` as one row per flat row, `[total] + 1s + s`, padded to
  broadcast against flat values of rank `rank`, as it does against each iteration's value.
  One as long as the ragged value in every iteration (a slice's gradient beside a pad's, say)
  is its rows laid out alike."""
  s = values.rank(tensor) - 1
  if s > rank:
    raise Unvectorizable("a per-iteration operand of higher rank than a ragged one")
  if s == rank:
    if tensor.shape[1] == 1:
      return _per_row(tensor[:, 0], rows, rank)
    with tf.control_dependencies([_lengths_check(rows, tf.shape(tensor)[1])]):
      return values.merge_leading(tensor)
  return values.expand_after_loop_axis(tf.gather(tensor, rows.row_ids), rank - 1 - s)


def _broadcast_invariant(tensor, rows, rank):
  """A loop-invariant operand, broadcast as against each iteration's value; one of the
  ragged value's rank is as long as it in every iteration, and read at each row's position."""
  s = values.rank(tensor)
  if s > rank:
    raise Unvectorizable("a loop-invariant operand of higher rank than a ragged one")
  if s < rank or tensor.shape[0] == 1:
    return tensor
  with tf.control_dependencies([_lengths_check(rows, tf.shape(tensor)[0])]):
    return tf.gather(tensor, rows.positions)


def _lengths_check(rows, length):
  return tf.debugging.Assert(tf.reduce_all(tf.equal(rows.row_lengths, length)), [
      "vectorize: an elementwise op's operands differ in length in some iteration"])


_ALSO_ELEMENTWISE = ("AddN", "ClipByValue", "Equal", "LookupTableFindV2", "Mul", "NotEqual",
                     "SelectV2")   # op types outside the family, of the same ragged form


@ragged.register(*_ALSO_ELEMENTWISE)
@ragged.register_multi_axis(*_ALSO_ELEMENTWISE)
@ELEMENTWISE.converts(registry.MULTI_AXIS)
@ELEMENTWISE.converts(registry.RAGGED)
def _convert_elementwise(op):
  """Elementwise ops on the flat values; operands of each kind aligned row by row."""
  rows, checks = ragged.common_rows(op)
  rank = values.rank(rows.values)
  args = []
  for v in op.inputs:
    if ragged.is_ragged(v):
      args.append(v.tensor.values)
    elif v.stacked:
      args.append(_per_row(v.tensor, rows, rank))
    else:
      args.append(_broadcast_invariant(v.tensor, rows, rank))
  with tf.control_dependencies(checks):
    return [ragged.same_rows(t, rows) for t in op.rebuild(args)]


@ragged.register("CheckNumerics", "CheckNumericsV2", "Identity", "PreventGradient",
                 "Snapshot", "StopGradient", "EnsureShape")
def _convert_identity(op):
  """Passes the flat values through the op (EnsureShape: the walker checks the sizes)."""
  rows = op.value(0).tensor
  if op.type == "EnsureShape":
    return ragged.same_rows(rows.values, rows)
  return ragged.same_rows(op.rebuild([rows.values])[0], rows)


ragged.register("Tile")(tile_per_iteration)


@ragged.register("ZerosLike", "OnesLike")
def _convert_like(op):
  rows = op.value(0).tensor
  return ragged.same_rows(op.rebuild([rows.values])[0], rows)


# ----------------------------------------------------------------------------- reductions

def segment_reduce(op_type, x, ids, n):
  """x `[total] + rest` reduced over the rows of each iteration: `[n] + rest`; empty
  iterations give what the reduction of nothing gives."""
  if op_type in ("Sum", "Mean"):          # ids are sorted: the faster kernel, padded to n
    sums = tf.math.segment_sum(x, ids)
    missing = n - tf.shape(sums)[0]
    return tf.pad(sums, tf.concat([[[0, missing]], tf.zeros([tf.rank(x) - 1, 2], tf.int32)], 0))
  if op_type == "Prod":
    return tf.math.unsorted_segment_prod(x, ids, n)
  if op_type in ("Max", "Min"):
    out = indexing.segment_extreme(op_type.lower(), x, ids, n)
    if not x.dtype.is_floating:
      return out
    empty = tf.reshape(tf.equal(tf.math.unsorted_segment_sum(tf.ones_like(ids), ids, n), 0),
                       tf.concat([[n], tf.ones([tf.rank(x) - 1], tf.int32)], 0))
    infinity = tf.constant(-np.inf if op_type == "Max" else np.inf, x.dtype)
    return tf.where(empty, infinity, out)       # the segment kernels give the finite limit
  if op_type == "Any":
    return tf.math.unsorted_segment_sum(tf.cast(x, tf.int32), ids, n) > 0
  return tf.equal(
      tf.math.unsorted_segment_sum(tf.cast(tf.logical_not(x), tf.int32), ids, n), 0)


@ragged.register("All", "Any", "Max", "Mean", "Min", "Prod", "Sum")
def _convert_reduction(op):
  """Over later axes only: the flat values reduce as they are (still ragged). Over the
  first axis: a segment reduction by iteration, then the other axes: stacked."""
  rows = op.value(0).tensor
  rank = values.rank(rows.values)
  axes = op.static_value(1)
  axes = sorted({int(a) % rank for a in np.reshape(axes, [-1])}) if rank else []
  keep_dims = op.attr("keep_dims")
  if 0 not in axes:
    return ragged.same_rows(op.rebuild([rows.values, op.invariant(1)])[0], rows)
  n = op.ctx.n
  out = segment_reduce(op.type, rows.values, rows.row_ids, n)      # [n] + rest
  others = [a for a in axes if a != 0]
  if others:
    out = op.rebuild([out, tf.constant(others, tf.int32)], {"Tidx": tf.int32},
                     op_type="Sum" if op.type == "Mean" else op.type)[0]
  if op.type == "Mean":
    out = _mean(out, rows.row_lengths * values.product(
        [values.dynamic_shape(rows.values)[a] for a in others]))
  if keep_dims:
    out = tf.expand_dims(out, 1)
  return stacked(out)


def _mean(sums, count):
  """Sums `[n] + rest` divided by their per-iteration count (a float divide by zero gives
  NaN, as the mean of nothing does)."""
  count = tf.reshape(tf.cast(count, sums.dtype),
                     tf.concat([tf.shape(count), tf.ones([tf.rank(sums) - 1], tf.int32)], 0))
  if sums.dtype.is_integer:
    return tf.truncatediv(sums, tf.maximum(count, 1))
  return sums / count


# ----------------------------------------------------------------------------- segments

def _ragged_ids(op, data_input, ids_input):
  """The flat data and 1-D ids (ragged alike, checked at run time), and the row ids."""
  data, ids = op.value(data_input), op.value(ids_input)
  if not (ragged.is_ragged(data) and ragged.is_ragged(ids)) or values.rank(ids.tensor.values) != 1:
    raise Unvectorizable("segment ids of another size than the data's first axis")
  rows = data.tensor
  check = tf.debugging.Assert(
      tf.reduce_all(tf.equal(rows.row_lengths, ids.tensor.row_lengths)),
      [f"vectorize: {op.op.name}: data and segment ids of different sizes"])
  return rows.values, ids.tensor.values, rows, check


@ragged.register("UnsortedSegmentMax", "UnsortedSegmentMin", "UnsortedSegmentProd",
                 "UnsortedSegmentSum")
def _convert_unsorted_segment(op):
  """Iteration i's segment s is segment `i * num_segments + s` of one reduction; negative
  ids stay dropped. Stacked: `[n, num_segments] + rest`."""
  flat, ids, rows, check = _ragged_ids(op, 0, 1)
  num = tf.cast(op.invariant(2), ids.dtype)
  in_range = ragged.index_check(op, tf.where(ids < 0, tf.zeros_like(ids), ids), num)
  combined = tf.where(ids < 0, -tf.ones_like(ids),
                      tf.cast(rows.row_ids, ids.dtype) * num + ids)
  n = values.loop_length(op.ctx)
  static_num = tf.get_static_value(op.invariant(2))
  num_rows = int(static_num) if static_num is not None else tf.cast(num, tf.int32)
  with tf.control_dependencies([check, in_range]):
    out = op.rebuild([flat, combined, tf.cast(n * num_rows, op.op.inputs[2].dtype)])[0]
  return stacked(values.split_leading(out, n, num_rows))


@ragged.register("SegmentMax", "SegmentMean", "SegmentMin", "SegmentProd", "SegmentSum")
def _convert_sorted_segment(op):
  """Iteration i has `max(ids) + 1` output rows (none without ids); its ids offset by
  where its rows start stay sorted, so one segment reduction fills every iteration."""
  flat, ids, rows, check = _ragged_ids(op, 0, 1)
  lengths = tf.maximum(tf.math.unsorted_segment_max(tf.cast(ids, tf.int32) + 1,
                                                    rows.row_ids, op.ctx.n), 0)
  out = ragged.RaggedRows(flat, lengths)
  combined = tf.gather(tf.cast(out.row_starts, ids.dtype), rows.row_ids) + ids
  with tf.control_dependencies([check]):
    return ragged.ragged(op.rebuild([flat, combined])[0], lengths)


@ragged.register("DynamicPartition")
def _convert_dynamic_partition(op):
  """Ragged data and partitions: one partition of the flat values keeps every iteration's
  order; each output's row lengths count the iteration's entries sent to it."""
  flat, partitions, rows, check = _ragged_ids(op, 0, 1)
  num = op.attr("num_partitions")
  with tf.control_dependencies([check]):
    outs = op.rebuild([flat, partitions])
  return [ragged.ragged(t, tf.math.unsorted_segment_sum(
      tf.cast(tf.equal(partitions, k), tf.int32), rows.row_ids, op.ctx.n))
          for k, t in enumerate(outs)]


def _stitch_part(op, k, m):
  """Part k of a stitch (indices input k, data input m + k) as flat rows: (ids, the
  iteration of each, data rows). Ragged parts are already flat; stacked and invariant ones
  (1-D indices per iteration) are flattened iteration by iteration."""
  indices, data = op.value(k), op.value(m + k)
  if ragged.is_ragged(indices):
    rows = indices.tensor
    if values.rank(rows.values) != 1 or not ragged.is_ragged(data):
      raise Unvectorizable("a stitch part of another size than its indices")
    return rows.values, rows.row_ids, data.tensor.values
  if ragged.is_ragged(data):
    raise Unvectorizable("a stitch part of another size than its indices")
  n = op.ctx.n
  ids = values.stack(indices, n) if indices.stacked else tf.tile(
      indices.tensor[tf.newaxis], [n, 1])
  if values.rank(ids) != 2:
    raise Unvectorizable("stitch indices of rank other than 1 beside ragged ones")
  width = tf.shape(ids)[1]
  rows = values.stack(data, n)
  return (tf.reshape(ids, [-1]), tf.repeat(tf.range(n), width),
          values.merge_leading(rows))


@ragged.register("DynamicStitch", "ParallelDynamicStitch")
def _convert_dynamic_stitch(op):
  """Iteration i fills `max(its indices) + 1` rows (as the kernel sizes its output); its
  indices offset by where its rows start, one stitch fills every iteration in order."""
  m = op.num_inputs // 2
  parts = [_stitch_part(op, k, m) for k in range(m)]
  n = op.ctx.n
  sizes = tf.maximum(tf.reduce_max(tf.stack([
      tf.math.unsorted_segment_max(ids + 1, row_ids, n) for ids, row_ids, _ in parts]), 0), 0)
  starts = tf.cumsum(sizes, exclusive=True)
  offset = [tf.gather(starts, row_ids) + ids for ids, row_ids, _ in parts]
  out = op.rebuild(offset + [rows for _, _, rows in parts])[0]
  return ragged.ragged(out, sizes)


@ragged.register("Cumsum", "Cumprod")
def _convert_cumulative(op):
  """Along the first axis: integer sums, the flat cumulative sum less what earlier
  iterations added (exact); otherwise each iteration's rows laid into one padded
  `[n, longest]` block, accumulated along it and read back (the same operations as per
  iteration: the padding, after each row, holds the identity, 0 or 1, which a reverse
  accumulation meets first). Later axes: on the flat values."""
  rows = op.value(0).tensor
  axis = int(op.static_value(1)) % values.rank(rows.values)
  if axis:
    return ragged.same_rows(op.rebuild([rows.values, op.invariant(1)])[0], rows)
  if op.type == "Cumsum" and rows.dtype.is_integer:
    return _integer_cumsum_along_rows(op, rows)
  where = tf.stack([rows.row_ids, rows.positions], 1)
  longest = tf.reduce_max(tf.concat([[0], rows.row_lengths], 0))
  shape = tf.concat([[op.ctx.n, longest], tf.shape(rows.values)[1:]], 0)
  if op.type == "Cumsum":
    block = indexing.scatter_nd(where, rows.values, shape)
  else:
    block = indexing.tensor_scatter_nd_update(tf.ones(shape, rows.dtype), where, rows.values)
  accumulated = op.rebuild([block, tf.constant(1, op.op.inputs[1].dtype)])[0]
  return ragged.same_rows(indexing.gather_nd(accumulated, where), rows)


def _integer_cumsum_along_rows(op, rows):
  flat = op.rebuild([rows.values, op.invariant(1)])[0]
  whole = tf.math.unsorted_segment_sum(rows.values, rows.row_ids, op.ctx.n)
  if op.attr("reverse"):
    before = tf.cumsum(whole, reverse=True, exclusive=True)    # later iterations' sums
  else:
    before = tf.cumsum(whole, exclusive=True)
  return ragged.same_rows(flat - tf.gather(before, rows.row_ids), rows)


@ragged.register("ReverseV2")
def _convert_reverse(op):
  """Later axes: on the flat values. The first axis: each iteration's rows read back to
  front, from its own first row."""
  rows = op.value(0).tensor
  rank = values.rank(rows.values)
  if op.is_stacked(1) or op.static_value(1) is None:
    raise Unvectorizable("reversing along axes known at run time only")
  axes = {int(a) % rank for a in np.reshape(op.static_value(1), [-1])}
  flat = rows.values
  later = sorted(axes - {0})
  if later:
    flat = tf.reverse(flat, later)
  if 0 in axes:
    last = tf.gather(rows.row_starts + rows.row_lengths - 1, rows.row_ids)
    flat = tf.gather(flat, last - rows.positions)
  return ragged.same_rows(flat, rows)


@ragged.register("Pack")
def _convert_pack(op):
  """tf.stack of ragged values as long as each other in every iteration (checked), along
  a later axis: on the flat values. Along the first axis the ragged axis would move."""
  axis = op.attr("axis") % (values.rank(op.op.outputs[0]))
  if axis == 0:
    raise Unvectorizable("stacking along a new first axis would move the ragged axis")
  if not all(ragged.is_ragged(v) for v in op.inputs):
    raise Unvectorizable("stacking ragged and per-iteration values")
  rows, checks = ragged.common_rows(op)
  with tf.control_dependencies(checks):
    return ragged.same_rows(tf.stack([v.tensor.values for v in op.inputs], axis), rows)


@ragged.register("DenseBincount")
def _convert_dense_bincount(op):
  """Ragged 1-D values: iteration i counts into bins `[starts[i], starts[i] + size_i)` of
  one segment sum; values outside `[0, size_i)` count nowhere, as in the kernel. The
  result is ragged where the size differs per iteration."""
  rows = op.value(0).tensor
  weights = op.value(2)
  if values.rank(rows.values) != 1 or ragged.is_ragged(op.value(1)):
    raise Unvectorizable("bin counts of a ragged value of rank other than 1")
  fixed = arrays.fixed_bincount_size(op.op.inputs[1])   # minlength = maxlength: dense
  size_value = invariant(tf.constant(fixed)) if fixed is not None else op.value(1)
  size = tf.cast(values.stack(size_value, op.ctx.n), tf.int32)          # [n]
  out = ragged.RaggedRows(rows.values, size)
  ids = rows.row_ids
  bin_index = tf.cast(rows.values, tf.int32)
  inside = tf.logical_and(bin_index >= 0, bin_index < tf.gather(size, ids))
  target = tf.where(inside, tf.gather(out.row_starts, ids) + bin_index, -1)
  if ragged.is_ragged(weights):
    amounts = weights.tensor.values
  elif weights.stacked or values.rank(weights.tensor) != 1 or weights.tensor.shape[0] != 0:
    raise Unvectorizable("bin count weights of another layout")
  else:
    amounts = tf.ones_like(bin_index, weights.tensor.dtype)
  counts = tf.math.unsorted_segment_sum(amounts, target, tf.reduce_sum(size))
  if op.attr("binary_output"):
    counts = tf.cast(counts > 0, counts.dtype)
  if size_value.stacked:
    return ragged.ragged(counts, size)
  return stacked(values.reshape(counts, [values.loop_length(op.ctx),
                                        tf.cast(size_value.tensor, tf.int32)]))
