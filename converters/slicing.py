"""Slicing ops: gathers, n-d gathers and scatters, slices, strided slices, stitch, partition.

The tricks:
- Gather: loop-invariant params gathered by stacked indices is one gather whose result
  already carries the loop axis (moved to the front when the gather axis is not 0); stacked
  params pair each iteration with its own indices through `batch_dims + 1`.
- N-d gathers and scatters into a stacked tensor get an iteration coordinate prepended to
  every index, so one op serves every iteration without mixing them.
- Slices whose bounds are the same in every iteration prepend a full slice for the loop
  axis. Bounds that differ per iteration become gathers of per-iteration index ranges
  `start + range(length) * stride`: the length must be the same in every iteration (a
  run-time assertion checks it); it is known at trace time where the body's graph shows
  `end = begin + constant`, as in `x[i:i + 1]`, which keeps XLA's static shapes.
- Stitch and partition: with invariant indices (partitions) the loop axis rides along as
  one more data dim; stacked ones are offset per iteration (partition keeps the order, so its
  outputs come out iteration-major).
"""

from typing import NamedTuple, Optional, Union

import tensorflow as tf

from converters import fusions
from converters import shapes
from vectorize import graph_io
from vectorize import indexing
from vectorize import offsets
from vectorize import ragged
from vectorize import values
from vectorize.errors import ConversionError, Unvectorizable, user_location
from vectorize.registry import register
from vectorize.values import invariant, stacked

# ----------------------------------------------------------------------------------------
# Small tensor helpers.


def _rank(op, i):
  """The per-iteration static rank of input i; Unvectorizable when it is unknown."""
  r = op.input_shape(i).rank
  if r is None:
    raise Unvectorizable(f"input {i} of {op.type} has an unknown rank")
  return r


def _move_axis(tensor, source, destination):
  """Transposes axis `source` of `tensor` to position `destination`."""
  if source == destination:
    return tensor
  perm = list(range(values.rank(tensor)))
  perm.insert(destination, perm.pop(source))
  return tf.transpose(tensor, perm)


def _loop_ids(n, like):
  """`[n]` iteration ids with the dtype of `like`."""
  return tf.range(tf.cast(n, like.dtype), dtype=like.dtype)


def _prepend_iteration_coordinate(indices):
  """`[n, M..., k] -> [n, M..., k + 1]`: each index gets its iteration id in front (int32
  for narrower indices: `values.with_wide_indices`; the op's `Tindices` follows)."""
  indices = values.with_wide_indices(stacked(indices)).tensor
  shape = tf.shape(indices, out_type=indices.dtype)
  ids = values.expand_after_loop_axis(_loop_ids(shape[0], indices), values.rank(indices) - 1)
  ids = tf.broadcast_to(ids, tf.concat([shape[:-1], tf.ones([1], indices.dtype)], 0))
  return tf.concat([ids, indices], -1)


def _with_loop_dim(ctx, shape):
  """`shape -> [n] + shape` for a shape vector."""
  return values.prepend_loop_length(shape, ctx.n, ctx.static_n)


# ----------------------------------------------------------------------------------------
# Gathers and scatters.


def _gather_from_the_end(params, indices, axis, batch_dims, n):
  """`_gather` with a negative axis on params of a rank known only at run time. Counted
  from the end, the axis is the same with the loop axis in front; invariant params put the
  loop axis of stacked indices at the run-time position `rank + axis`, moved to the front."""
  if params.stacked:
    if not indices.stacked and batch_dims == 0:
      return tf.gather(params.tensor, indices.tensor, axis=axis)
    return tf.gather(params.tensor, values.stack(indices, n), axis=axis,
                     batch_dims=batch_dims + 1)
  if batch_dims != 0:
    raise Unvectorizable("batch_dims with a negative axis needs the rank of params")
  gathered = tf.gather(params.tensor, indices.tensor, axis=axis)
  position = tf.rank(params.tensor) + axis
  perm = tf.concat([[position], tf.range(position), tf.range(position + 1, tf.rank(gathered))],
                   0)
  return tf.transpose(gathered, perm)


def _gather(params, indices, axis, batch_dims, n):
  """Per-iteration `tf.gather(params, indices, axis, batch_dims)` on Values, non-negative
  axis and batch_dims; returns the stacked result."""
  if not params.stacked:
    # [n, B..., I...] -> [B..., n, I...]: the loop axis becomes an index dim and lands at
    # `axis` of the result.
    moved = _move_axis(indices.tensor, 0, batch_dims)
    return _move_axis(tf.gather(params.tensor, moved, axis=axis, batch_dims=batch_dims),
                      axis, 0)
  if not indices.stacked and batch_dims == 0:
    return tf.gather(params.tensor, indices.tensor, axis=axis + 1)
  return tf.gather(params.tensor, values.stack(indices, n), axis=axis + 1,
                   batch_dims=batch_dims + 1)


@register("GatherV2")
def _convert_gather_v2(op):
  """See `_gather`: one gather for every combination of stacked params and indices."""
  axis = int(op.static_value(2))
  batch_dims = op.attr("batch_dims")
  if batch_dims < 0:
    batch_dims += _rank(op, 1)
  params = op.value(0)
  if axis < 0 and op.input_shape(0).rank is None:
    return stacked(_gather_from_the_end(params, op.value(1), axis, batch_dims, op.ctx.n))
  if axis < 0:
    axis += _rank(op, 0)
  if (axis == 0 and batch_dims == 0 and not params.stacked and
      op.ctx.is_loop_index(op.value(1)) and op.ctx.static_n is not None and
      params.tensor.shape[:1] == [op.ctx.static_n]):
    return stacked(params.tensor)   # tf.gather(x, i) over all n rows of x: x itself
  return stacked(_gather(params, op.value(1), axis, batch_dims, op.ctx.n))


@register("Gather")
def _convert_gather(op):
  """The old axis-0 gather, emitted as GatherV2."""
  return stacked(_gather(op.value(0), op.value(1), 0, 0, op.ctx.n))


@register("GatherNd")
def _convert_gather_nd(op):
  """Invariant params: the stacked indices' loop axis is one more index dim; stacked params:
  each index gets its iteration id."""
  if not op.is_stacked(0):
    return stacked(op.rebuild([op.invariant(0), op.value(1).tensor])[0])
  indices = _prepend_iteration_coordinate(op.stacked(1))
  return stacked(op.rebuild([op.value(0).tensor, indices], {"Tindices": indices.dtype})[0])


@register("ScatterNd")
def _convert_scatter_nd(op):
  """Scatters every iteration into its own row of `[n] + shape`."""
  indices = _prepend_iteration_coordinate(op.stacked(0))
  shape = _with_loop_dim(op.ctx, op.invariant(2))
  shape = tf.cast(shape, indices.dtype)
  return stacked(op.rebuild([indices, op.stacked(1), shape], {"Tindices": indices.dtype})[0])


def _convert_tensor_scatter(op):
  """Scatters into the stacked tensor, each index prefixed by its iteration id."""
  indices = _prepend_iteration_coordinate(op.stacked(1))
  return stacked(op.rebuild([op.stacked(0), indices, op.stacked(2)],
                            {"Tindices": indices.dtype})[0])


# ----------------------------------------------------------------------------------------
# Slices: a plan per per-iteration input dim, then one strided slice and a few gathers.


class _Fixed(NamedTuple):
  """A dim sliced the same way in every iteration (ints or invariant scalar tensors)."""
  begin: object = 0
  end: object = 0
  stride: int = 1
  begin_masked: bool = True
  end_masked: bool = True
  shrink: bool = False


_FULL = _Fixed()


class _Varying(NamedTuple):
  """A dim whose bounds differ per iteration: indices `start + range(length) * stride`.

  `start` is `[n]`; `length` an int or scalar tensor; `sizes` the `[n]` per-iteration
  lengths that must all equal `length` (None when they do by construction); `fixed`: the
  graph fixes `length` though it is a tensor (an invariant difference of the bounds), so
  differing sizes are an error, not a ragged result. A `shrink` dim gathers `start` alone
  and drops the dim.
  """
  start: tf.Tensor
  length: Union[int, tf.Tensor, None]
  stride: int
  shrink: bool
  sizes: Optional[tf.Tensor]
  fixed: bool = False


def _slice_by_plan(x, plan, new_axes, dtype, what, target):
  """Slices the Value `x` per iteration as `plan` (one entry per input dim) says.

  One strided slice applies the `_Fixed` dims (the loop axis rides along as a full slice);
  then each `_Varying` dim, last first so earlier positions stay put, is a gather of
  `[n, length]` indices (`[n]` for shrink dims); last, `new_axes` (output positions, per
  iteration) get unit dims. Returns a Value, invariant if no dim varies.
  """
  if _has_fixed(plan):
    begin, end, strides, masks = _fixed_slice_args(plan, x.stacked, dtype)
    x = values.Value(tf.strided_slice(x.tensor, begin, end, strides, **masks), x.stacked)
  positions = _varying_positions(plan)
  ragged_dim = _ragged_first_axis(positions, new_axes, target)
  positions = [q for q in positions if q is not ragged_dim]
  if positions:
    checks = [_same_length_check(p, what, target) for _, p in positions
              if p.sizes is not None]
    with tf.control_dependencies(checks):
      for pos, p in reversed(positions):
        indices = _range_indices(p)
        rows_of = _row_gather(x.tensor) if x.stacked and pos == 0 else None
        if rows_of is not None:
          x = stacked(_gather_rows_and_indices(*rows_of, indices))
        elif x.stacked:
          x = stacked(tf.gather(x.tensor, indices, axis=pos + 1, batch_dims=1))
        else:
          x = stacked(_move_axis(tf.gather(x.tensor, indices, axis=pos), pos, 0))
  if ragged_dim is not None:
    return _ragged_rows(x, ragged_dim[1], new_axes)
  out = x.tensor
  for pos in new_axes:
    out = tf.expand_dims(out, pos + int(x.stacked))
  return values.Value(out, x.stacked)


def _varying_positions(plan):
  """`(pos, plan entry)` of each `_Varying` dim, pos counting the dims still there after the
  fixed slice (varying shrink dims are, until gathered)."""
  positions, pos = [], 0
  for p in plan:
    if isinstance(p, _Varying):
      positions.append((pos, p))
    if not (p.shrink and isinstance(p, _Fixed)):
      pos += 1
  return positions


def _ragged_first_axis(positions, new_axes, target):
  """The varying dim `(pos, plan)` whose lengths nothing in the graph fixes, when it is the
  only one and becomes the output's first axis (`x[i][:lengths[i]]`, `x[i, s[i]:, 0]`): the
  output is then ragged rather than checked equal. None otherwise."""
  unfixed = [q for q in positions if q[1].sizes is not None and
             not isinstance(q[1].length, int) and not q[1].fixed]
  if len(unfixed) != 1 or 0 in new_axes or target.static_shapes:
    return None
  pos = unfixed[0][0]
  dropped_before = sum(1 for q_pos, q in positions if q_pos < pos and q.shrink)
  return unfixed[0] if pos == dropped_before else None


def _ragged_rows(x, p, new_axes):
  """Each iteration's rows `start + range(size) * stride` of the Value `x` (its other dims
  already sliced), as ragged rows: one gather from the merged rows."""
  out = ragged.RaggedRows(x.tensor[:0], tf.cast(p.sizes, tf.int32))
  within = (tf.gather(tf.cast(p.start, tf.int32), out.row_ids) +
            out.positions * p.stride)
  if x.stacked:
    rows = tf.shape(x.tensor, out_type=tf.int32)[1]
    flat = tf.gather(values.merge_leading(x.tensor), out.row_ids * rows + within)
  else:
    flat = tf.gather(x.tensor, within)
  for pos in new_axes:
    flat = tf.expand_dims(flat, pos)
  return ragged.ragged(flat, out.row_lengths)


def _row_gather(tensor):
  """`(source, rows)` when `tensor` is `tf.gather(source, rows)` on axis 0 (how a converted
  loop reads a sequence it carries whole at its active positions), else None."""
  op = tensor.op
  if (op.type != "GatherV2" or op.get_attr("batch_dims") != 0 or
      tf.get_static_value(op.inputs[2]) != 0 or op.inputs[1].shape.rank != 1):
    return None
  return op.inputs[0], op.inputs[1]


def _gather_rows_and_indices(source, rows, indices):
  """`source[rows[j], indices[j]]` per iteration j, one gather_nd: the rows of `source` are
  never copied whole (`indices` is `[n]`, or `[n, length]` for a range per iteration)."""
  rows = tf.cast(rows, indices.dtype)
  if indices.shape.rank == 2:
    rows = tf.broadcast_to(rows[:, tf.newaxis], tf.shape(indices))
  return indexing.gather_nd(source, tf.stack([rows, indices], axis=-1))


def _has_fixed(plan):
  return any(p is not _FULL and isinstance(p, _Fixed) for p in plan)


def _fixed_slice_args(plan, with_loop_axis, dtype):
  """begin, end, strides and mask attrs of the strided slice doing the `_Fixed` dims of
  `plan` (the others are full slices), with a full slice in front for a loop axis."""
  entries = ([_FULL] if with_loop_axis else []) + [p if isinstance(p, _Fixed) else _FULL
                                                   for p in plan]
  masks = {"begin_mask": 0, "end_mask": 0, "shrink_axis_mask": 0}
  for k, e in enumerate(entries):
    masks["begin_mask"] |= int(e.begin_masked) << k
    masks["end_mask"] |= int(e.end_masked) << k
    masks["shrink_axis_mask"] |= int(e.shrink) << k
  vectors = [values.shape_vector([e[j] for e in entries], dtype) for j in range(3)]
  return vectors + [masks]


def _range_indices(p):
  """`[n]` for a shrink dim, else `[n, length]`: `start + range(length) * stride`."""
  start = tf.identity(p.start)
  if p.shrink:
    return start
  steps = tf.range(tf.cast(p.length, start.dtype), dtype=start.dtype) * p.stride
  return start[:, tf.newaxis] + steps[tf.newaxis, :]


def _described(kind, op):
  """`kind 'name' created at file:line`, for messages."""
  return f"{kind} {op.op.name!r}{user_location(op.op)}"


def _same_length_check(p, what, target):
  """The run-time check that a varying dim's lengths are the one length planned. XLA drops
  checks, so there a length nothing in the graph fixes is refused instead."""
  if not isinstance(p.length, int) and target.static_shapes:
    where, way_out = target.cause
    raise ConversionError(
        f"Cannot vectorize {what} {where}: its length differs per iteration unless the "
        "graph fixes it, and XLA needs static shapes (and cannot check them at run time). "
        "To fix: give the slice a fixed size (`x[s:s + k]` with a Python int k, or pad to a "
        f"bound and mask), or {way_out}.")
  return tf.debugging.Assert(
      tf.reduce_all(tf.equal(p.sizes, tf.cast(p.length, p.sizes.dtype))),
      [f"vectorize: {what} has a length that differs between iterations (or from the length "
       "the graph implies); a vectorized loop needs the same shape in every iteration. "
       "(A window `x[s:s + k]` that the end of x cuts short in some iterations is one.) To "
       "fix: pad x so that every window fits (tf.pad by k - 1 at the end) and mask, or "
       "return the window's size from the body. Lengths per iteration:", p.sizes],
      summarize=32)


def _varying_length(sizes, static_length):
  """The common length: static when known, else the largest (0 when there is none)."""
  if static_length is not None:
    return static_length
  return values.max_or_zero(sizes)


def _column(op, i, k, dtype):
  """Column k of the vector input i: (int or tensor, stacked flag); ints where the body's
  graph holds a constant there (then it is the same in every iteration)."""
  partial = tf.get_static_value(op.op.inputs[i], partial=True)
  if partial is not None and partial[k] is not None:
    return int(partial[k]), False
  v = op.value(i)
  column = v.tensor[:, k] if v.stacked else v.tensor[k]
  return tf.cast(column, dtype), v.stacked


def _dim_sizes(op, x, rank, dtype):
  """Per-iteration dim sizes of input 0 (the Value `x`): ints where static, else scalars."""
  shape = op.input_shape(0)
  static = shape.as_list() if shape.rank is not None else [None] * rank
  dynamic = values.per_iteration_shape(x, dtype)
  return [static[d] if static[d] is not None else dynamic[d] for d in range(rank)]


def _num_steps(interval, stride):
  """Elements of `range(0, interval, stride)`, for ints or tensors."""
  if isinstance(interval, int):
    return max(0, -(-interval // stride))
  return tf.maximum(tf.math.floordiv(interval + stride - (1 if stride > 0 else -1), stride),
                    0)


def _canonical(x, dim, stride, masked, is_end, dtype):
  """A Python-slicing bound as a tensor: masked -> the end of the full range, negatives
  count from the end, then clamped to the valid range."""
  dim = tf.cast(dim, dtype)
  lo, hi = (tf.zeros([], dtype), dim) if stride > 0 else (-tf.ones([], dtype), dim - 1)
  if masked:
    return (hi if is_end else lo) if stride > 0 else (lo if is_end else hi)
  x = tf.cast(x, dtype)
  return tf.minimum(tf.maximum(tf.where(x < 0, x + dim, x), lo), hi)


def _strided_slice_plan(op, x, grad_dims=None):
  """The slice plan and new-axis output positions of a StridedSlice (x: its input Value) or
  StridedSliceGrad (x None; its dim sizes `grad_dims` where not its invariant shape input)
  whose begin or end differ per iteration. Inputs 1-3 are begin, end and strides; strides
  must be constants."""
  strides = op.static_value(3)
  dtype = op.attr("Index")
  masks = {name: op.attr(name) for name in ("begin_mask", "end_mask", "ellipsis_mask",
                                            "new_axis_mask", "shrink_axis_mask")}
  bits = lambda k: {name[:-5]: bool(mask >> k & 1) for name, mask in masks.items()}
  entries = [bits(k) for k in range(int(strides.shape[0]))]
  num_real = sum(1 for e in entries if not e["ellipsis"] and not e["new_axis"])
  if x is None:
    dims = grad_dims if grad_dims is not None else _shape_entries(op, dtype)
    out_shape = op.input_shape(4)
  else:
    # With no ellipsis, dims past the spec are full slices: only the spec's dims need sizes,
    # so a per-iteration rank known only at run time is no obstacle.
    rank = op.input_shape(0).rank
    if rank is None and not masks["ellipsis_mask"]:
      rank = num_real
    dims = _dim_sizes(op, x, rank if rank is not None else _rank(op, 0), dtype)
    out_shape = op.output_shape(0)
  rank = len(dims)
  plan, new_axes, out_pos = [], [], 0
  ellipsis_done = False
  for k, e in enumerate(entries):
    if e["ellipsis"]:
      if not ellipsis_done:  # Only the first ellipsis counts.
        plan.extend([_FULL] * (rank - num_real))
        out_pos += rank - num_real
        ellipsis_done = True
    elif e["new_axis"]:
      new_axes.append(out_pos)
      out_pos += 1
    else:
      static_length = None
      if not e["shrink_axis"] and out_shape.rank is not None:
        static_length = out_shape[out_pos]
      plan.append(_plan_dim(op, k, dims[len(plan)], int(strides[k]), e["begin"], e["end"],
                            e["shrink_axis"], static_length, dtype))
      out_pos += 0 if e["shrink_axis"] else 1
  plan.extend([_FULL] * (rank - len(plan)))
  return plan, new_axes


def _shape_entries(op, dtype):
  """The dim sizes given by the (invariant) shape input 0 of a StridedSliceGrad."""
  static = tf.get_static_value(op.invariant(0))
  if static is not None:
    return [int(s) for s in static]
  rank = op.input_shape(0)[0]
  if rank is None:
    raise Unvectorizable("the rank of the sliced tensor is unknown")
  return [tf.cast(op.invariant(0)[d], dtype) for d in range(rank)]


def _plan_dim(op, k, dim, stride, begin_masked, end_masked, shrink, static_length, dtype):
  """The plan of one dim of a strided slice from its sparse entry k."""
  n = op.ctx.n
  begin, begin_stacked = _column(op, 1, k, dtype)
  end, end_stacked = _column(op, 2, k, dtype)
  if shrink:  # The end and masks play no part.
    if not begin_stacked:
      return _Fixed(begin, 0, stride, False, False, True)
    dim = tf.cast(dim, dtype)
    return _Varying(tf.where(begin < 0, begin + dim, begin), None, stride, True, None)
  if not (begin_stacked and not begin_masked) and not (end_stacked and not end_masked):
    return _Fixed(0 if begin_masked else begin, 0 if end_masked else end, stride,
                  begin_masked, end_masked, False)
  start = tf.broadcast_to(_canonical(begin, dim, stride, begin_masked, False, dtype), [n])
  stop = _canonical(end, dim, stride, end_masked, True, dtype)
  sizes = tf.broadcast_to(_num_steps(stop - start, stride), [n])
  if static_length is None and not begin_masked and not end_masked:
    difference = offsets.invariant_difference(op, 2, 1, k, dtype)
    if difference is not None:
      return _Varying(start, _num_steps(difference, stride), stride, False, sizes, True)
  return _Varying(start, _varying_length(sizes, static_length), stride, False, sizes)


def _shifted_masks(op):
  """The strided-slice mask attrs with a full slice for the loop axis in front."""
  return {"begin_mask": op.attr("begin_mask") << 1 | 1,
          "end_mask": op.attr("end_mask") << 1 | 1,
          "ellipsis_mask": op.attr("ellipsis_mask") << 1,
          "new_axis_mask": op.attr("new_axis_mask") << 1,
          "shrink_axis_mask": op.attr("shrink_axis_mask") << 1}


def _prepend(vector, value):
  """`[value] + vector`; a constant when the vector is one."""
  if vector.op.type == "Const":
    return values.constant([value] + list(tf.get_static_value(vector)), vector.dtype)
  return graph_io.concat([values.constant([value], vector.dtype), vector], 0)


@register("StridedSlice")
def _convert_strided_slice(op):
  """Invariant bounds: one strided slice with a full slice for the loop axis in front and
  the masks shifted by one entry. Bounds that differ per iteration: `_slice_by_plan`. One
  size the traced graph knows, read from a shape (`tf.shape(x)[-1]` of x `[None, 2]`, whose
  shape is read per iteration where its first axis differs), is that constant."""
  known = _known_size(op)
  if known is not None:
    return invariant(values.constant(known, op.op.outputs[0].dtype))
  if op.is_stacked(3):
    raise Unvectorizable("strides differ per iteration")
  x = op.value(0)
  if not op.is_stacked(1) and not op.is_stacked(2):
    begin, end, strides = (op.invariant(i) for i in (1, 2, 3))
    return stacked(op.rebuild([x.tensor, _prepend(begin, 0), _prepend(end, 0),
                               _prepend(strides, 1)], _shifted_masks(op))[0])
  plan, new_axes = _strided_slice_plan(op, x)
  return _slice_by_plan(x, plan, new_axes, op.attr("Index"), _described("strided slice", op),
                        op.ctx.target)


def _known_size(op):
  """The size `shape[k]` picks where the traced graph knows it (k a constant index of a
  Shape's output, that axis static), else None."""
  shape = op.op.inputs[0]
  if shape.op.type != "Shape" or op.attr("shrink_axis_mask") != 1 or any(
      op.attr(m) for m in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask")):
    return None
  begin = tf.get_static_value(op.op.inputs[1])
  dims = shape.op.inputs[0].shape
  if (begin is None or dims.rank is None or len(begin) != 1
      or not -dims.rank <= begin[0] < dims.rank):
    return None
  return dims[int(begin[0])]


@register("StridedSliceGrad")
def _convert_strided_slice_grad(op):
  """The adjoint of StridedSlice: invariant bounds shift like the forward op; bounds that
  differ per iteration scatter `dy` back through the forward plan, dim by dim."""
  if op.is_stacked(3):
    raise Unvectorizable("the strides of a strided-slice gradient differ per iteration")
  if op.is_stacked(0):
    return _grad_into_rows_of_per_iteration_count(op)
  shape, dy = op.invariant(0), op.stacked(4)
  if not op.is_stacked(1) and not op.is_stacked(2):
    begin, end, strides = (op.invariant(i) for i in (1, 2, 3))
    return stacked(op.rebuild([_with_loop_dim(op.ctx, shape), _prepend(begin, 0),
                               _prepend(end, 0), _prepend(strides, 1), dy],
                              _shifted_masks(op))[0])
  plan, new_axes = _strided_slice_plan(op, None)
  if new_axes:
    dy = tf.squeeze(dy, [p + 1 for p in new_axes])
  return _slice_grad_by_plan(op, plan, dy)


def _grad_into_rows_of_per_iteration_count(op):
  """A gradient into a value with a first axis of its own length in every iteration (the
  gradient of `rows[t]` for a ragged `rows`): scattered through the plan into a block padded
  to the longest, whose valid rows are the ragged result. The first axis's bounds are
  resolved against each iteration's own length; the later dims must agree."""
  dtype = op.attr("Index")
  shape = tf.cast(op.stacked(0), dtype)                               # [n, rank]
  rank = op.input_shape(0)[0]
  if rank is None or rank < 1:
    raise Unvectorizable("a strided-slice gradient into a shape of unknown rank")
  lengths = shape[:, 0]
  known = op.op.outputs[0].shape
  rest = ragged.agreed(shape[:, 1:], f"vectorize: {op.op.name}: the gradient's later dims "
                       "differ between iterations",
                       when_none=[0 if d is None else d for d in known[1:].as_list()]
                       if known.rank == rank else 0)
  dims = [lengths] + [known[d] if known.rank == rank and known[d] is not None else rest[d - 1]
                      for d in range(1, rank)]
  plan, new_axes = _strided_slice_plan(op, None, grad_dims=dims)
  first = plan[0]
  if isinstance(first, _Fixed):
    if not first.shrink:
      raise Unvectorizable("a strided-slice gradient into a first axis of per-iteration "
                           "length, sliced by fixed bounds")
    begin = tf.cast(first.begin, dtype)
    plan[0] = _Varying(tf.broadcast_to(tf.where(begin < 0, begin + lengths, begin),
                                       tf.shape(lengths)), None, first.stride, True, None)
  dy = op.stacked(4)
  if new_axes:
    dy = tf.squeeze(dy, [p + 1 for p in new_axes])
  longest = tf.reduce_max(tf.concat([tf.zeros([1], dtype), lengths], 0))
  padded = tf.concat([tf.reshape(longest, [1]), rest], 0)
  block = _slice_grad_by_plan(op, plan, dy, shape=padded,
                              dims=[longest] + dims[1:]).tensor    # [n, longest] + rest
  out = ragged.RaggedRows(block, tf.cast(lengths, tf.int32))
  flat = tf.gather_nd(block, tf.stack([out.row_ids, out.positions], 1))
  return ragged.ragged(flat, out.row_lengths)


@ragged.register("StridedSliceGrad")
def _convert_strided_slice_grad_of_ragged(op):
  """`dy` of per-iteration length (the gradient of `x[i][:lengths[i]]`): its rows scattered
  back to their places along the first axis, then the rest as for a stacked `dy`."""
  if op.is_stacked(0) or op.is_stacked(3):
    raise Unvectorizable("the shape or strides of a strided-slice gradient differ per "
                         "iteration")
  plan, new_axes = _strided_slice_plan(op, None)
  ragged_dim = _ragged_first_axis(_varying_positions(plan), new_axes, op.ctx.target)
  if ragged_dim is None:
    raise Unvectorizable("a strided-slice gradient whose size differs per iteration past "
                         "the first axis")
  rows = op.value(4).tensor
  flat = tf.squeeze(rows.values, new_axes) if new_axes else rows.values
  p = ragged_dim[1]
  dim = next(d for q, d in zip(plan, _shape_entries(op, op.attr("Index"))) if q is p)
  ids = rows.row_ids
  within = tf.gather(tf.cast(p.start, tf.int32), ids) + rows.positions * p.stride
  target = tf.concat([[op.ctx.n, tf.cast(dim, tf.int32)], tf.shape(flat)[1:]], 0)
  dy = indexing.scatter_nd(tf.stack([ids, within], 1), flat, target)
  return _slice_grad_by_plan(op, plan, dy, done=p)


def _slice_grad_by_plan(op, plan, dy, done=None, shape=None, dims=None):
  """The stacked `dy` of a strided slice planned as `plan` scattered back: each varying dim
  but `done` (already scattered), then the fixed dims' StridedSliceGrad; into `shape` (dim
  sizes `dims`) where that is not the op's invariant shape input."""
  dtype = op.attr("Index")
  shape = op.invariant(0) if shape is None else shape
  dims = _shape_entries(op, dtype) if dims is None else dims
  checks = [_same_length_check(p, _described("strided slice gradient", op), op.ctx.target)
            for p in plan if isinstance(p, _Varying) and p.sizes is not None and p is not done]
  pos = 0
  with tf.control_dependencies(checks):
    for p, dim in zip(plan, dims):
      if isinstance(p, _Varying) and p is not done:
        dy = _scatter_dim(dy, _range_indices(p), pos, dim)
      if not (p.shrink and isinstance(p, _Fixed)):
        pos += 1
  if not _has_fixed(plan):
    return stacked(dy)
  begin, end, strides, masks = _fixed_slice_args(plan, True, dtype)
  return stacked(tf.raw_ops.StridedSliceGrad(shape=_with_loop_dim(op.ctx, shape), begin=begin,
                                             end=end, strides=strides, dy=dy, **masks))


def _scatter_dim(dy, indices, pos, dim):
  """Undoes one per-iteration gather at per-iteration axis `pos` of the stacked `dy`:
  `[n, ..., length, ...]` (no dim for `[n]` indices) -> `[n, ..., dim, ...]`, zeros
  elsewhere. Indices are distinct within an iteration, so summing scatters place values."""
  shrink = values.rank(indices) == 1
  moved = dy if shrink else _move_axis(dy, pos + 1, 1)  # [n, length, rest...] or [n, rest...]
  ids = _loop_ids(tf.shape(indices)[0], indices)
  if shrink:
    coordinates = tf.stack([ids, indices], -1)  # [n, 2]
  else:
    ids = tf.broadcast_to(ids[:, tf.newaxis], tf.shape(indices))
    coordinates = tf.stack([ids, indices], -1)  # [n, length, 2]
  rest = tf.shape(moved, out_type=indices.dtype)[(1 if shrink else 2):]
  target = tf.concat([tf.shape(indices, out_type=indices.dtype)[:1],
                      tf.reshape(tf.cast(dim, indices.dtype), [1]), rest], 0)
  out = indexing.scatter_nd(coordinates, moved, target)  # [n, dim, rest...]
  return _move_axis(out, 1, pos + 1)


@register("XlaDynamicUpdateSlice")
def _convert_xla_dynamic_update_slice(op):
  """`update` written into `input` at `indices`, clamped so that it fits (as XLA does; a
  slice's gradient under XLA). Invariant indices write every iteration at once; per-iteration
  ones pad each update to its place and select it where a mask padded alike is set."""
  x, update = op.stacked(0), op.stacked(1)
  if not op.is_stacked(2):
    indices = op.invariant(2)
    start = tf.concat([tf.zeros([1], indices.dtype), indices], 0)
    return stacked(op.rebuild([x, update, start])[0])
  indices = op.stacked(2)                                        # [n, r]
  room = (values.per_iteration_shape(stacked(x), indices.dtype) -
          values.per_iteration_shape(stacked(update), indices.dtype))
  begin = tf.minimum(tf.maximum(indices, 0), room)
  paddings = tf.stack([begin, room - begin], axis=2)             # [n, r, 2]
  placed = shapes.pad_per_iteration(update, paddings, op.output_shape(0), op.op.name)
  inside = shapes.pad_per_iteration(tf.ones_like(update, tf.bool), paddings, op.output_shape(0),
                                    op.op.name)
  return stacked(tf.where(inside, placed, x))


@register("Slice")
def _convert_slice(op):
  """Invariant begin and size: prepend 0 and -1 (the whole loop axis); columns of a matrix
  product, the product of the matching columns (converters/fusions.py). Otherwise gathers of
  per-iteration ranges (`_slice_by_plan`)."""
  x = op.value(0)
  if not op.is_stacked(1) and not op.is_stacked(2):
    columns = fusions.columns_of_product(op)
    if columns is not None:
      return columns
    begin, size = op.invariant(1), op.invariant(2)
    return stacked(op.rebuild([x.tensor, _prepend(begin, 0), _prepend(size, -1)])[0])
  dtype = op.attr("Index")
  rank = _rank(op, 0)
  dims = _dim_sizes(op, x, rank, dtype)
  out_shape = op.op.outputs[0].shape
  plan = []
  for d in range(rank):
    static_length = out_shape[d] if out_shape.rank is not None else None
    plan.append(_plan_slice_dim(op, d, dims[d], static_length, dtype))
  return _slice_by_plan(x, plan, [], dtype, _described("slice", op), op.ctx.target)


def _plan_slice_dim(op, d, dim, static_length, dtype):
  """The plan of dim d of a Slice from its begin and size (-1: to the end)."""
  begin, begin_stacked = _column(op, 1, d, dtype)
  size, size_stacked = _column(op, 2, d, dtype)
  if not begin_stacked and not size_stacked:
    if isinstance(size, int):
      return _Fixed(begin, 0 if size < 0 else begin + size, 1, False, size < 0, False)
    end = tf.where(size < 0, tf.cast(dim, dtype), begin + size)
    return _Fixed(begin, end, 1, False, False, False)
  start = tf.broadcast_to(tf.cast(begin, dtype), [op.ctx.n])
  if isinstance(size, int) and size >= 0:
    return _Varying(start, size, 1, False, None)
  to_end = tf.cast(dim, dtype) - start
  sizes = to_end if isinstance(size, int) else tf.where(size < 0, to_end, size)
  sizes = tf.broadcast_to(sizes, [op.ctx.n])
  return _Varying(start, _varying_length(sizes, static_length), 1, False, sizes)


# ----------------------------------------------------------------------------------------
# Stitch and partition.


@register("DynamicStitch", "ParallelDynamicStitch")
def _convert_dynamic_stitch(op):
  """Invariant indices: data `[n, I..., rest] -> [I..., n, rest]`, stitch, loop axis back.
  Stacked indices: iteration i's indices are offset by i * size, one stitch fills
  `[n * size, rest]`, split back; `size` (largest index + 1) is the same in every
  iteration whenever the loop's result can be stacked."""
  n = values.loop_length(op.ctx)
  num = op.num_inputs // 2
  indices, data = op.inputs[:num], op.inputs[num:]
  ranks = [_rank(op, m) for m in range(num)]
  if not any(v.stacked for v in indices):
    moved = [_move_axis(values.stack(v, n), 0, r) for v, r in zip(data, ranks)]
    return stacked(_move_axis(op.rebuild([v.tensor for v in indices] + moved)[0], 1, 0))
  all_indices = [values.stack(v, n) for v in indices]
  largest = tf.reduce_max(tf.stack([tf.reduce_max(t) for t in all_indices]))
  size = tf.maximum(largest, -1) + 1
  shifted = [values.offset_by_iteration(stacked(t), size, n) for t in all_indices]
  out = op.rebuild(shifted + [values.stack(v, n) for v in data])[0]  # [n * size, rest...]
  return stacked(values.split_leading(out, n, size))


@register("DynamicPartition")
def _convert_dynamic_partition(op):
  """Invariant partitions: data `[n, P..., rest] -> [P..., n, rest]`, partition, loop axis
  back. Stacked partitions: partition every iteration at once (order is kept, so each output
  is iteration-major); each iteration sends its own number of elements to a partition, so
  the outputs are ragged values. With static shapes (XLA) they must be stacked: every
  iteration must send the same number (a run-time assertion checks it)."""
  n = values.loop_length(op.ctx)
  r = _rank(op, 1)
  num_partitions = op.attr("num_partitions")
  data, partitions = op.value(0), op.value(1)
  if not partitions.stacked:
    moved = _move_axis(data.tensor, 0, r)
    return [stacked(_move_axis(t, 1, 0)) for t in op.rebuild([moved, partitions.tensor])]
  data = op.stacked(0)
  flat_partitions = tf.reshape(partitions.tensor, tf.size(partitions.tensor)[tf.newaxis])
  shape = tf.shape(data)
  flat_data = tf.reshape(data, tf.concat([tf.reshape(tf.reduce_prod(shape[:r + 1]), [1]),
                                          shape[r + 1:]], 0))
  per_iteration = values.reshape(partitions.tensor, [n, tf.reduce_prod(shape[1:r + 1])])
  counts = tf.reduce_sum(tf.one_hot(per_iteration, num_partitions, dtype=tf.int32), 1)
  if not op.ctx.target.static_shapes:
    return [ragged.ragged(t, counts[:, p])
            for p, t in enumerate(op.rebuild([flat_data, flat_partitions]))]
  sizes = ragged.agreed(counts, (
      f"vectorize: dynamic partition {op.op.name} sends different numbers of elements to a "
      "partition in different iterations; under XLA a vectorized loop needs the same shape "
      "in every iteration"), static_shapes=True)   # zeros when n is 0
  outs = op.rebuild([flat_data, flat_partitions])
  return [stacked(values.split_leading(t, n, sizes[p])) for p, t in enumerate(outs)]


register("TensorScatterAdd", "TensorScatterMax", "TensorScatterMin", "TensorScatterSub",
         "TensorScatterUpdate")(_convert_tensor_scatter)
