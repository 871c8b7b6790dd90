"""Converters for ops that take ragged values and act on their first axis as arrays do:
shapes, slicing, joining (concatenation, stacks, padding), gathers, sparse scatters, and
the producers that read a ragged input (see `ragged_consumers.py` for the layout: the flat
values keep every axis past the first; the row ids map flat rows to iterations).
"""

import numpy as np
import tensorflow as tf

from converters.ragged_producers import unique_rows
from vectorize import ragged
from vectorize import values
from vectorize.errors import Unvectorizable, user_location
from vectorize.values import invariant, stacked


# ----------------------------------------------------------------------------- shapes

@ragged.register("Shape")
def _convert_shape(op):
  """`[n, rank]`: each iteration's row length, then the shared rest of the shape."""
  rows = op.value(0).tensor
  out_type = op.attr("out_type")
  rest = tf.shape(rows.values, out_type=out_type)[1:]
  n = tf.size(rows.row_lengths)
  return stacked(tf.concat([tf.cast(rows.row_lengths, out_type)[:, None],
                            tf.tile(rest[None], tf.stack([n, 1]))], 1))


@ragged.register("Size")
def _convert_size(op):
  rows = op.value(0).tensor
  out_type = op.attr("out_type")
  rest = tf.reduce_prod(tf.shape(rows.values, out_type=out_type)[1:])
  return stacked(tf.cast(rows.row_lengths, out_type) * rest)


@ragged.register("Rank")
def _convert_rank(op):
  return invariant(tf.rank(op.value(0).tensor.values))


@ragged.register("Squeeze")
def _convert_squeeze(op):
  """Later axes: on the flat values. The first axis: every iteration must have one row,
  and the flat values are then the stacked result."""
  rows = op.value(0).tensor
  rank = values.rank(rows.values)
  dims = sorted({d % rank for d in op.attr("squeeze_dims")})
  if not dims:
    raise Unvectorizable("squeeze with no axes of a value of per-iteration size")
  later = [d for d in dims if d != 0]
  flat = tf.squeeze(rows.values, later) if later else rows.values
  if 0 not in dims:
    return ragged.same_rows(flat, rows)
  check = tf.debugging.Assert(tf.reduce_all(tf.equal(rows.row_lengths, 1)), [
      f"vectorize: {op.op.name}: squeezing axis 0, whose size is not 1 in every iteration:",
      rows.row_lengths])
  with tf.control_dependencies([check]):
    return stacked(tf.identity(flat))      # one row per iteration: [n] + rest


@ragged.register("Unpack")
def _convert_unpack(op):
  """Along a later axis, on the flat values (each piece keeps the rows); along the ragged
  axis the number of pieces would differ per iteration."""
  rows = op.value(0).tensor
  axis = op.attr("axis") % values.rank(rows.values)
  if axis == 0 or rows.dims is not None:
    raise Unvectorizable("unstacking along the axis whose size differs per iteration")
  return [ragged.same_rows(t, rows) for t in op.rebuild([rows.values])]


@ragged.register("ExpandDims")
def _convert_expand_dims(op):
  """A new axis after the first: on the flat values."""
  rows = op.value(0).tensor
  axis = int(op.static_value(1))
  axis = axis % (values.rank(rows.values) + 1)
  if axis == 0:
    raise Unvectorizable("a new first axis would move the ragged axis")
  return ragged.same_rows(tf.expand_dims(rows.values, axis), rows)


@ragged.register("Reshape")
def _convert_reshape(op):
  """To a shape the graph knows: stacked (sizes checked); to `[-1] + known`: ragged, each
  iteration's rows rescaled."""
  rows = op.value(0).tensor
  out = op.output_shape(0)
  if out.rank is None or not out[1:].is_fully_defined():
    raise Unvectorizable("a target shape unknown past its first axis")
  in_rest = tf.reduce_prod(tf.shape(rows.values)[1:])
  out_rest = int(np.prod(out[1:].as_list()))
  sizes = rows.row_lengths * in_rest
  fits = tf.equal(sizes % out_rest, 0)
  if op.is_stacked(1):           # per-iteration targets: their first entry is -1 or agrees
    first = tf.cast(op.stacked(1)[:, 0], tf.int32)
    fits = tf.logical_and(fits, tf.logical_or(tf.equal(first, -1),
                                              tf.equal(first, sizes // max(out_rest, 1))))
  check = tf.debugging.Assert(tf.reduce_all(fits), [
      f"vectorize: {op.op.name}: a per-iteration size does not fit the target shape {out}:",
      sizes])
  with tf.control_dependencies([check]):
    flat = values.reshape(rows.values,
                          [tf.size(rows.values) // max(out_rest, 1)] + out[1:].as_list())
    return ragged.ragged(flat, sizes // max(out_rest, 1))


# ----------------------------------------------------------------------------- slicing

@ragged.register("StridedSlice")
def _convert_strided_slice(op):
  """The first axis as Python slices it, per iteration (its own length, and its own bounds
  where they are per-iteration): an index picks one row per iteration (stacked), a slice
  keeps rows at computed positions (ragged). The spec of the later axes then applies to
  the flat values as it is."""
  rows = op.value(0).tensor
  strides = op.static_value(3)
  masks = {name: op.attr(name) for name in ("begin_mask", "end_mask", "ellipsis_mask",
                                            "new_axis_mask", "shrink_axis_mask")}
  run_time = any(op.is_stacked(k) or tf.get_static_value(op.invariant(k)) is None
                 for k in (1, 2))
  if run_time:       # per-iteration bounds, or loop-invariant ones known at run time only
    if np.size(strides) != 1 or masks["ellipsis_mask"] or masks["new_axis_mask"]:
      raise Unvectorizable("bounds known at run time only of a slice of several axes")
    begin = end = None
    first_begin, first_end = (tf.cast(op.stacked(k)[:, 0], tf.int32) for k in (1, 2))
  else:
    begin, end = op.static_value(1), op.static_value(2)
    if not np.size(begin) or (masks["ellipsis_mask"] & 1 and not masks["new_axis_mask"] and
                              np.size(begin) <= values.rank(rows.values)):
      rows = ragged.materialized(op.value(0)).tensor    # a view's values hold other rows
      return ragged.same_rows(
          op.rebuild([rows.values] + [op.invariant(k) for k in (1, 2, 3)])[0],
          rows)                                           # the first axis is left whole
    if (masks["ellipsis_mask"] & 1 and not masks["new_axis_mask"] and
        np.size(begin) == values.rank(rows.values) + 1):   # `...` spans no axis: drop it
      begin, end, strides = begin[1:], end[1:], strides[1:]
      masks = {name: mask >> 1 for name, mask in masks.items()}
    if masks["ellipsis_mask"] & 1 or masks["new_axis_mask"] & 1:
      raise Unvectorizable("a strided slice of a ragged value starting with newaxis")
    first_begin, first_end = int(begin[0]), int(end[0])
  lengths = rows.row_lengths
  if masks["shrink_axis_mask"] & 1:
    index = tf.where(first_begin < 0, lengths + first_begin, first_begin + 0 * lengths)
    with tf.control_dependencies([ragged.index_check(op, index, lengths)]):
      picked = tf.gather(rows.values, rows.row_starts + index)        # [n] + rest
    return stacked(_slice_later_axes(op, picked, begin, end, strides, masks))
  first, count = _slice_bounds(lengths, first_begin, first_end, int(strides[0]), masks)
  sliced = ragged.RaggedRows(rows.values, count)
  flat_positions = tf.gather(rows.row_starts + first, sliced.row_ids) + \
      sliced.positions * int(strides[0])
  picked = tf.gather(rows.values, flat_positions)
  return ragged.ragged(_slice_later_axes(op, picked, begin, end, strides, masks), count)


def _slice_bounds(lengths, begin, end, stride, masks):
  """Per iteration, the first position and the count of `x[begin:end:stride]` on a first
  axis of `lengths` (bounds: ints or per-iteration `[n]`), as Python clamps them."""
  if stride == 0:
    raise Unvectorizable("a strided slice with stride 0")
  low, high = (0, lengths) if stride > 0 else (-1, lengths - 1)

  def clamp(bound, masked, default):
    if masked:
      return default + 0 * lengths
    bound = tf.where(bound < 0, lengths + bound, bound + 0 * lengths)
    return tf.clip_by_value(bound, low, high)

  first = clamp(begin, masks["begin_mask"] & 1, low if stride > 0 else high)
  last = clamp(end, masks["end_mask"] & 1, high if stride > 0 else low)
  span = last - first if stride > 0 else first - last
  count = tf.maximum((span + abs(stride) - 1) // abs(stride), 0)
  return first, count


def _slice_later_axes(op, x, begin, end, strides, masks):
  """op's slice spec on `x` with its first entry made a full slice."""
  if begin is None or (len(begin) == 1 and not masks["ellipsis_mask"]):
    return x
  full = lambda v, fill: tf.constant([fill] + list(v[1:]), op.op.inputs[1].dtype)
  attrs = dict(masks, begin_mask=masks["begin_mask"] | 1, end_mask=masks["end_mask"] | 1,
               shrink_axis_mask=masks["shrink_axis_mask"] & ~1)
  return op.rebuild([x, full(begin, 0), full(end, 0), full(strides, 1)], attrs)[0]


# ----------------------------------------------------------------------------- joining

def _gather_or_fill(flat, index, valid, fill):
  """`flat[index]` where `valid`, else `fill` (one row appended, so an empty `flat` works)."""
  fill_row = tf.broadcast_to(tf.cast(fill, flat.dtype),
                             tf.concat([[1], tf.shape(flat)[1:]], 0))
  extended = tf.concat([flat, fill_row], 0)
  return tf.gather(extended, tf.where(valid, index, tf.shape(flat)[0]))


@ragged.register("Pad", "PadV2")
def _convert_pad(op):
  """First axis: each output row reads its source row or the constant; later axes (the
  same paddings in every iteration): on the flat values."""
  rows = op.value(0).tensor
  rank = values.rank(rows.values)
  constant = op.invariant(2) if op.type == "PadV2" else tf.zeros([], rows.dtype)
  paddings = tf.cast(op.value(1).tensor, tf.int32)
  flat = rows.values
  if op.is_stacked(1):
    before, after = paddings[:, 0, 0], paddings[:, 0, 1]
    later = ragged.agreed(paddings[:, 1:], f"vectorize: {op.op.name}: paddings of a later "
                          "axis that differ between iterations of a value of per-iteration size")
  else:
    ones = tf.ones_like(rows.row_lengths)
    before, after = ones * paddings[0, 0], ones * paddings[0, 1]
    later = paddings[1:]
  if rank > 1:
    flat = tf.pad(flat, tf.concat([tf.zeros([1, 2], tf.int32), later], 0),
                  constant_values=constant)
  out = ragged.RaggedRows(flat, rows.row_lengths + before + after)
  ids = out.row_ids
  source = out.positions - tf.gather(before, ids)
  valid = tf.logical_and(source >= 0, source < tf.gather(rows.row_lengths, ids))
  index = tf.gather(rows.row_starts, ids) + source
  return ragged.ragged(_gather_or_fill(flat, index, valid, constant), out.row_lengths)


@ragged.register("ConcatV2")
def _convert_concat(op):
  """Along the first axis: each output row finds its piece (by the iteration's running
  lengths) and reads that piece's row. Along a later axis: ragged pieces alike, on the
  flat values."""
  num = op.num_inputs - 1
  pieces = op.inputs[:num]
  rank = values.rank(op.op.inputs[0])
  axis = int(op.static_value(num)) % rank
  if axis:
    if not all(ragged.is_ragged(v) for v in pieces):
      raise Unvectorizable("a later-axis concat of ragged and per-iteration pieces")
    rows, checks = ragged.common_rows(op)
    with tf.control_dependencies(checks):
      return ragged.same_rows(tf.concat([v.tensor.values for v in pieces], axis), rows)
  n = op.ctx.n
  sources, lengths, starts = [], [], []
  offset = 0
  for v in pieces:                    # each piece flat, its rows per iteration and starts
    t = v.tensor
    if ragged.is_ragged(v):
      flat, length, start = t.values, t.row_lengths, t.row_starts
    elif v.stacked:
      k = tf.shape(t)[1]
      flat, length, start = values.merge_leading(t), tf.fill([n], k), tf.range(n) * k
    else:
      flat, length, start = t, tf.fill([n], tf.shape(t)[0]), tf.zeros([n], tf.int32)
    sources.append(flat)
    lengths.append(length)
    starts.append(start + offset)
    offset = offset + tf.shape(flat)[0]
  out = ragged.RaggedRows(sources[0], tf.add_n(lengths))
  ids, position = out.row_ids, out.positions
  index = tf.zeros_like(ids)
  begin = tf.zeros_like(ids)
  for length, start in zip(lengths, starts):
    end = begin + tf.gather(length, ids)
    inside = tf.logical_and(position >= begin, position < end)
    index = tf.where(inside, tf.gather(start, ids) + position - begin, index)
    begin = end
  return ragged.ragged(tf.gather(tf.concat(sources, 0), index), out.row_lengths)


# ----------------------------------------------------------------------------- gathers

@ragged.register("GatherV2")
def _convert_gather(op):
  """Along axis 0 (batch_dims 0): a ragged params' indices are offset by its iteration's
  first row; ragged indices into stacked params by the iteration's first params row. A
  later axis of ragged params with invariant indices: on the flat values."""
  params, indices = op.value(0), op.value(1)
  axis = int(op.static_value(2))
  if op.attr("batch_dims") != 0:
    raise Unvectorizable("gather with batch_dims of a value of per-iteration size")
  if ragged.is_ragged(params):
    rows = params.tensor
    axis = axis % values.rank(rows.values)
    if axis:
      if indices.stacked:
        raise Unvectorizable("per-iteration indices along a later axis of a ragged value")
      return ragged.same_rows(tf.gather(rows.values, indices.tensor, axis=axis), rows)
    return _gather_rows(op, rows, indices)
  if axis != 0 and axis != -values.rank(op.op.inputs[0]):
    raise Unvectorizable("ragged indices along a later axis")
  index_rows = indices.tensor
  index = index_rows.values
  if not params.stacked:
    m = tf.shape(params.tensor, out_type=index.dtype)[0]
    with tf.control_dependencies([ragged.index_check(op, index, m)]):
      return ragged.same_rows(tf.gather(params.tensor, index), index_rows)
  m = tf.shape(params.tensor, out_type=index.dtype)[1]
  offsets = tf.cast(index_rows.row_ids, index.dtype) * m
  flat_params = values.merge_leading(params.tensor)
  with tf.control_dependencies([ragged.index_check(op, index, m)]):
    offsets = values.expand_after_loop_axis(offsets, values.rank(index) - 1)
    return ragged.same_rows(tf.gather(flat_params, index + offsets), index_rows)


@ragged.register("GatherNd")
def _convert_gather_nd(op):
  """Ragged indices (a list of coordinates per iteration, as `tf.where` gives) into
  loop-invariant params, into stacked params with each coordinate's iteration first, or
  into ragged params with its first coordinate moved to the iteration's rows."""
  params, indices = op.value(0), op.value(1)
  if not ragged.is_ragged(indices) or values.rank(indices.tensor.values) < 2:
    raise Unvectorizable("gather_nd of a ragged value at per-iteration indices")
  index_rows = indices.tensor
  index = index_rows.values                                       # [total, ..., r]
  ids = values.expand_after_loop_axis(index_rows.row_ids, values.rank(index) - 1)
  ids = tf.broadcast_to(ids, tf.concat([tf.shape(index)[:-1], [1]], 0))
  if ragged.is_ragged(params):
    rows = params.tensor
    first = tf.gather(tf.cast(rows.row_starts, index.dtype), ids) + index[..., :1]
    limit = tf.cast(tf.gather(rows.row_lengths, ids), index.dtype)
    with tf.control_dependencies([ragged.index_check(op, index[..., :1], limit)]):
      index = tf.concat([first, index[..., 1:]], -1)
    return ragged.same_rows(tf.gather_nd(rows.values, index), index_rows)
  if params.stacked:
    index = tf.concat([tf.cast(ids, index.dtype), index], -1)
  return ragged.same_rows(tf.gather_nd(params.tensor, index), index_rows)


def _gather_rows(op, rows, indices):
  """Rows of each iteration's value of ragged `rows`, at per-iteration or ragged indices."""
  starts = rows.row_starts
  if ragged.is_ragged(indices):
    index_rows = indices.tensor
    index = index_rows.values
    ids = index_rows.row_ids
    rank = values.rank(index)
    limit = values.expand_after_loop_axis(tf.cast(tf.gather(rows.row_lengths, ids),
                                                  index.dtype), rank - 1)
    offset = values.expand_after_loop_axis(tf.cast(tf.gather(starts, ids), index.dtype),
                                           rank - 1)
    with tf.control_dependencies([ragged.index_check(op, index, limit)]):
      return ragged.same_rows(tf.gather(rows.values, index + offset), index_rows)
  index = values.stack(indices, op.ctx.n)                        # [n] + s
  rank = values.rank(index) - 1
  limit = values.expand_after_loop_axis(tf.cast(rows.row_lengths, index.dtype), rank)
  offset = values.expand_after_loop_axis(tf.cast(starts, index.dtype), rank)
  with tf.control_dependencies([ragged.index_check(op, index, limit)]):
    return stacked(tf.gather(rows.values, index + offset))


# ----------------------------------------------------------------------------- sparse

def _scatter_sparse(op, indices, sparse_values, limits):
  """Where each iteration's sparse entries (ragged indices `[nnz, r]` and values, or a
  scalar value) go in a dense `[n] + shape`: the coordinates, the iteration first, and the
  values, checked within `limits` (the shape `[r]`, or one per iteration `[n, r]`)."""
  rows = op.value(indices).tensor
  coordinates = tf.cast(rows.values, tf.int64)
  if values.rank(coordinates) == 1:
    coordinates = coordinates[:, None]
  entries = op.value(sparse_values)
  if ragged.is_ragged(entries):
    amounts = entries.tensor.values
  elif entries.stacked or values.rank(entries.tensor):
    raise Unvectorizable("sparse values that are neither ragged like the indices nor a scalar")
  else:
    amounts = tf.fill(tf.shape(coordinates)[:1], entries.tensor)
  ids = tf.cast(rows.row_ids, tf.int64)[:, None]
  where = tf.concat([ids, coordinates], 1)
  if values.rank(limits) == 2:
    limits = tf.gather(limits, rows.row_ids)
  limit = tf.cast(limits, tf.int64)
  inside = tf.reduce_all((coordinates >= 0) & (coordinates < limit))
  check = tf.debugging.Assert(inside, [
      f"vectorize: {op.op.name}: a sparse index outside the dense shape in some iteration"])
  with tf.control_dependencies([check]):
    return where, amounts


@ragged.register("SparseToDense")
def _convert_sparse_to_dense(op):
  """A loop-invariant output shape: one scatter of every iteration's entries into
  `[n] + output_shape` filled with the default value. A per-iteration one (the shape of a
  ragged value) whose later axes agree: a ragged result, each iteration's entries moved to
  its own rows."""
  default = op.invariant(3)
  if not op.is_stacked(1):
    shape = tf.reshape(tf.cast(op.invariant(1), tf.int32), [-1])
    out = tf.fill(tf.concat([[op.ctx.n], shape], 0), default)
    where, amounts = _scatter_sparse(op, 0, 2, shape)
    return stacked(tf.tensor_scatter_nd_update(out, where, amounts))
  shapes = tf.cast(op.stacked(1), tf.int32)                        # [n, r]
  rest = tf.reduce_max(tf.concat([tf.zeros([1, tf.shape(shapes)[1] - 1], tf.int32),
                                  shapes[:, 1:]], 0), 0)
  agree = tf.debugging.Assert(tf.reduce_all(tf.equal(shapes[:, 1:], rest)), [
      f"vectorize: {op.op.name}{user_location(op.op)}: the dense shapes differ per iteration "
      "past their first axis, which pfor cannot stack (only a first axis may differ). To fix: "
      "give that axis one size in every iteration (tf.sparse.reset_shape to a bound), or "
      "flatten the value so that its first axis varies (tf.reshape(x, [-1]))"])
  out = ragged.RaggedRows(tf.zeros([0], default.dtype), shapes[:, 0])
  with tf.control_dependencies([agree]):
    flat = tf.fill(tf.concat([[tf.reduce_sum(out.row_lengths)], rest], 0), default)
  where, amounts = _scatter_sparse(op, 0, 2, shapes)
  starts = tf.gather(tf.cast(out.row_starts, tf.int64), where[:, 0])
  where = tf.concat([where[:, 1:2] + starts[:, None], where[:, 2:]], 1)
  return ragged.ragged(tf.tensor_scatter_nd_update(flat, where, amounts), out.row_lengths)


@ragged.register("SparseReduceSum")
def _convert_sparse_reduce_sum(op):
  """A loop-invariant dense shape: every iteration's entries added into a dense
  `[n] + shape` (duplicates add, as in the kernel), then summed over the axes."""
  shape = tf.cast(op.invariant(2), tf.int32)
  zeros = tf.zeros(tf.concat([[op.ctx.n], tf.reshape(shape, [-1])], 0), op.op.outputs[0].dtype)
  where, amounts = _scatter_sparse(op, 0, 1, shape)
  dense = tf.tensor_scatter_nd_add(zeros, where, amounts)
  axes = tf.reshape(tf.cast(op.invariant(3), tf.int32), [-1])
  axes = tf.math.floormod(axes, tf.size(shape)) + 1
  return stacked(tf.reduce_sum(dense, axes, keepdims=op.attr("keep_dims")))


# ----------------------------------------------------------------------------- producers

@ragged.register("Where")
def _convert_where(op):
  """Coordinates in the flat values, the first one made local to its iteration."""
  op.ctx.target.require_dynamic_shapes(op.op, "one-argument tf.where")
  rows = op.value(0).tensor
  coordinates = tf.where(rows.values)
  flat_rows = tf.cast(coordinates[:, 0], tf.int32)
  ids = tf.gather(rows.row_ids, flat_rows)
  local = tf.cast(tf.gather(rows.positions, flat_rows), tf.int64)[:, None]
  lengths = tf.math.unsorted_segment_sum(tf.ones_like(ids), ids, op.ctx.n)
  return ragged.ragged(tf.concat([local, coordinates[:, 1:]], 1), lengths)


@ragged.register("Unique", "UniqueWithCounts")
def _convert_unique(op):
  rows = op.value(0).tensor
  unique_values, lengths, index, counts = unique_rows(rows.values, rows.row_ids, op.ctx.n,
                                                      op.attr("out_idx"))
  results = [ragged.ragged(unique_values, lengths), ragged.same_rows(index, rows)]
  if op.type == "UniqueWithCounts":
    results.append(ragged.ragged(counts, lengths))
  return results
