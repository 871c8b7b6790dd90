"""Array ops: block rearrangements (space/batch, depth/space), diagonals, rolls, top-k,
sorted search, histograms and bin counts, sparse segment gradients, Print (XlaEinsum shares
Einsum's converter, in linalg.py).

The tricks:
- fold: ops with a batch axis take the loop axis folded into it; where the kernel orders its
  batch block-major (`[P*b, ...]`, P block offsets), the loop axis folds inside the block
  offset, `[n, P*b, ...] -> [P*n*b, ...]`.
- flatten: an op on a tensor taken whole (Diag, DiagPart, Bincount) sees each iteration's
  tensor as one row of a batched op (matrix diagonals, 2-D bin counts).
- disjoint ids: ops that scatter into rows by id (sparse segment gradients) get iteration
  i's ids moved by i times the row count, so iterations fill disjoint rows of one folded
  output; histograms and bin counts count each iteration's row with the 2-D bin count.
"""

import numpy as np
import tensorflow as tf

from vectorize import ragged
from vectorize.errors import Unvectorizable, user_location
from vectorize.family import register_leading_batch, register_merge_batch
from vectorize.registry import register
from vectorize.values import (Value, dynamic_shape, invariant, loop_length, max_or_zero,
                              merge_leading, offset_by_iteration, per_iteration_shape,
                              product, rank, reshape, shift_axis, split_leading, stacked)


def _shape(tensor):
  """`dynamic_shape` as a list (ints and scalars); a rank known only at run time falls back."""
  rank(tensor)
  return dynamic_shape(tensor)


def _block_count(op):
  """P, the number of block offsets: the product of `block_shape` (input 1) or the square of
  the `block_size` attr."""
  if op.type in ("SpaceToBatch", "BatchToSpace"):
    return op.attr("block_size") ** 2
  return tf.reduce_prod(tf.cast(op.invariant(1), tf.int32))


@register("SpaceToBatch", "SpaceToBatchND")
def _convert_space_to_batch(op):
  """`[n, b, ...] -> [n*b, ...]`; the output `[P*n*b, ...]` goes back to `[n, P*b, ...]`."""
  x = op.stacked(0)
  n, b = loop_length(op.ctx), _shape(x)[1]
  out = op.rebuild([merge_leading(x)] + [op.invariant(i) for i in range(1, op.num_inputs)])[0]
  p = _block_count(op)
  rest = _shape(out)[1:]
  blocks = tf.transpose(reshape(out, [p, n, b] + rest), [1, 0] + list(range(2, len(rest) + 3)))
  return stacked(reshape(blocks, [n, p * b] + rest))


@register("BatchToSpace", "BatchToSpaceND")
def _convert_batch_to_space(op):
  """`[n, P*b, ...] -> [P*n*b, ...]` (block offset major, as the kernel reads it); the output
  `[n*b, ...]` splits back."""
  x = op.stacked(0)
  n, p = loop_length(op.ctx), _block_count(op)
  shape = _shape(x)
  b = shape[1] // p
  rest = shape[2:]
  blocks = tf.transpose(reshape(x, [n, p, b] + rest), [1, 0] + list(range(2, len(rest) + 3)))
  out = op.rebuild([reshape(blocks, [p * n * b] + rest)] +
                   [op.invariant(i) for i in range(1, op.num_inputs)])[0]
  return stacked(split_leading(out, n, b))


@register("Diag")
def _convert_diag(op):
  """`[n, d...] -> [n, D]` (D the product of d...), a batched diagonal matrix `[n, D, D]`,
  then `[n, d..., d...]`."""
  x = op.stacked(0)
  n, dims = loop_length(op.ctx), _shape(x)[1:]
  matrices = tf.linalg.diag(reshape(x, [n, product(dims)]))
  return stacked(reshape(matrices, [n] + dims + dims))


@register("DiagPart")
def _convert_diag_part(op):
  """`[n, d..., d...] -> [n, D, D]`, its batched diagonal `[n, D]`, then `[n, d...]`."""
  x = op.stacked(0)
  n, shape = loop_length(op.ctx), _shape(x)
  half = (len(shape) - 1) // 2
  dims = shape[1:1 + half]
  full = per_iteration_shape(op.value(0))
  check = tf.debugging.Assert(
      tf.reduce_all(tf.equal(full[:half], full[half:])),
      [f"DiagPart {op.op.name!r}{user_location(op.op)}: the input's first half of "
       "dims must equal its second half, got ", full])
  size = product(dims)
  with tf.control_dependencies([check]):
    square = reshape(x, [n, size, size])
  return stacked(reshape(tf.linalg.diag_part(square), [n] + dims))


@register("Roll")
def _convert_roll(op):
  """Invariant shifts and axes: the axes move past the loop axis. Per-iteration ones: each
  iteration's total shift per axis (repeated axes add up), then one batched gather per axis
  that may move."""
  x = op.stacked(0)
  if not (op.is_stacked(1) or op.is_stacked(2)):
    return stacked(op.rebuild([x, op.invariant(1), shift_axis(op.invariant(2))])[0])
  r = rank(x) - 1
  k = op.input_shape(1).num_elements()
  if k is None:
    raise Unvectorizable("Roll with per-iteration shifts of unknown size")
  n = loop_length(op.ctx)
  shift = reshape(op.stacked(1), [n, k])
  axis = reshape(tf.cast(op.stacked(2), shift.dtype), [n, k])
  check = tf.debugging.Assert(
      tf.reduce_all((axis >= -r) & (axis < r)),
      [f"Roll {op.op.name!r}{user_location(op.op)}: axis out of range [{-r}, {r})"])
  with tf.control_dependencies([check]):
    axis = tf.math.floormod(axis, r)
  totals = tf.reduce_sum(shift[:, :, None] * tf.one_hot(axis, r, dtype=shift.dtype), 1)
  named = None if op.is_stacked(2) else tf.get_static_value(op.invariant(2))
  axes = range(r) if named is None else sorted(set(np.ravel(named) % r))
  for a in axes:
    size = tf.cast(tf.shape(x)[a + 1], shift.dtype)
    positions = tf.range(size, dtype=shift.dtype)[None, :] - totals[:, a:a + 1]
    x = tf.gather(x, tf.math.floormod(positions, tf.maximum(size, 1)), axis=a + 1,
                  batch_dims=1)
  return stacked(x)


def _counts_per_row(ids, num_bins, dtype, weights=None, binary=False):
  """`[rows, k]` ids -> `[rows, num_bins]` counts (or weight sums; 0/1 if `binary`), one row
  per row, by the kernel's 2-D form (ids past the bins count nowhere, negative ones fail)."""
  weights = tf.zeros([0], dtype) if weights is None else weights
  return tf.raw_ops.DenseBincount(input=ids, size=tf.cast(num_bins, ids.dtype),
                                  weights=weights, binary_output=binary)


@register("HistogramFixedWidth")
def _convert_histogram_fixed_width(op):
  """Each value's bin as the kernel finds it (float64, clipped into the range), then one
  count row per iteration."""
  n = loop_length(op.ctx)
  x = op.stacked(0)
  x = reshape(x, [n, product(_shape(x)[1:])])
  value_range = op.value(1)
  low, high = (value_range.tensor[:, :1], value_range.tensor[:, 1:]) if value_range.stacked \
      else (value_range.tensor[0], value_range.tensor[1])
  num_bins = op.invariant(2)
  check = tf.debugging.Assert(
      tf.reduce_all(low < high) & (num_bins > 0),
      [f"HistogramFixedWidth {op.op.name!r}{user_location(op.op)}: value_range "
       "should satisfy value_range[0] < value_range[1] and nbins should be positive"])
  with tf.control_dependencies([check]):
    step = tf.cast(high - low, tf.float64) / tf.cast(num_bins, tf.float64)
  position = tf.cast(tf.maximum(x, low) - low, tf.float64) / step
  bins = tf.cast(tf.minimum(position, tf.cast(num_bins - 1, tf.float64)), tf.int32)
  return stacked(_counts_per_row(bins, num_bins, op.attr("dtype")))


def _common_size(op):
  """Input 1, the number of bins, checked the same in every iteration (`ragged.agreed`): a
  per-iteration size (`tf.math.bincount` takes max(values) + 1 unless given minlength and
  maxlength) stacks only where the iterations agree."""
  size = op.value(1)
  if not size.stacked:
    return size.tensor
  fixed = fixed_bincount_size(op.op.inputs[1])
  if fixed is not None:
    return tf.constant(fixed, size.tensor.dtype)
  message = (f"{op.type} {op.op.name!r}{user_location(op.op)} in a vectorized loop: "
             "the number of bins differs per iteration, and counts of different sizes cannot "
             "be stacked; give tf.math.bincount equal minlength and maxlength, or count "
             "outside the loop")
  return ragged.agreed(size.tensor, message, static_shapes=op.ctx.target.static_shapes)


def fixed_bincount_size(size):
  """The number of bins when minlength and maxlength fix it, else None.

  `tf.math.bincount` sizes its output min(maxlength, max(minlength, max(x) + 1)): one number
  for every iteration when maxlength <= minlength, known even with no data at all (n = 0).
  """
  if size.op.type != "Minimum":
    return None
  for upper, rest in (size.op.inputs, size.op.inputs[::-1]):
    upper = tf.get_static_value(upper)
    if upper is None or rest.op.type != "Maximum":
      continue
    lower = [tf.get_static_value(t) for t in rest.op.inputs]
    if any(bound is not None and upper <= bound for bound in lower):
      return int(upper)
  return None


def _bin_counts(op, ids, weights):
  """Counts of `[rows, k]` ids as the op gives them."""
  binary = op.type == "DenseBincount" and op.attr("binary_output")
  return _counts_per_row(ids, _common_size(op), op.op.outputs[0].dtype, weights, binary)


@register("Bincount", "DenseBincount")
def _convert_bincount(op):
  """Each iteration's ids (Bincount: all of them; DenseBincount: each row of a 2-D input)
  become rows of one 2-D count."""
  n = loop_length(op.ctx)
  x = op.stacked(0)
  shape = _shape(x)
  per_row = op.type == "DenseBincount" and len(shape) == 3
  rows, k = ([n * shape[1]] if per_row else [n]), product(shape[2:] if per_row else shape[1:])
  ids = reshape(x, rows + [k])
  weights = None
  if op.input_shape(2).num_elements() != 0:
    weights = reshape(op.stacked(2), rows + [k])
  if (not per_row and op.is_stacked(1) and not op.ctx.target.static_shapes and
      fixed_bincount_size(op.op.inputs[1]) is None):
    # `tf.math.bincount` of max(values) + 1 bins: each iteration's own number, ragged.
    sizes = tf.cast(op.stacked(1), tf.int32)
    binary = op.type == "DenseBincount" and op.attr("binary_output")
    counts = _counts_per_row(ids, max_or_zero(sizes), op.op.outputs[0].dtype, weights,
                             binary)
    return ragged.ragged(tf.RaggedTensor.from_tensor(counts, lengths=sizes).flat_values,
                         sizes)
  counts = _bin_counts(op, ids, weights)
  return stacked(split_leading(counts, n, shape[1]) if per_row else counts)


def _offset_ids(op, ids, step, n, what):
  """`[n, m]` ids -> `[n*m]`, those of iteration i moved by i*step. An id outside [0, step)
  fails, as in the kernel (moved, it would reach another iteration's rows)."""
  step = tf.cast(step, ids.dtype)
  check = tf.debugging.Assert(
      tf.reduce_all((ids >= 0) & (ids < step)),
      [f"{op.type} {op.op.name!r}{user_location(op.op)}: {what} out of range [0, ",
       step, ")"])
  with tf.control_dependencies([check]):
    return merge_leading(offset_by_iteration(stacked(ids), step, n))


@register("SparseSegmentMeanGrad", "SparseSegmentSqrtNGrad", "SparseSegmentSumGrad")
def _convert_sparse_segment_grad(op):
  """Disjoint ids: `[n, k, ...] -> [n*k, ...]` in, iteration i's segment ids move by i*k and
  its indices by i*d0, and the output `[n*d0, ...]` splits back."""
  n = loop_length(op.ctx)
  grad = op.stacked(0)
  k = _shape(grad)[1]
  d0 = op.invariant(3)
  indices = _offset_ids(op, op.stacked(1), d0, n, "indices")
  segment_ids = _offset_ids(op, op.stacked(2), k, n, "segment_ids")
  out = op.rebuild([merge_leading(grad), indices, segment_ids,
                    d0 * tf.cast(n, d0.dtype)])[0]
  return stacked(split_leading(out, n, d0))


@register("SparseSegmentMeanGradV2", "SparseSegmentSqrtNGradV2", "SparseSegmentSumGradV2")
def _convert_sparse_segment_grad_v2(op):
  """Rows only at the unique indices, so the indices must be loop-invariant (else each
  iteration has its own row count). Invariant segment ids: the loop axis moves last,
  `[n, k, ...] -> [k, ..., n]`, and back. Per-iteration ones: disjoint ids as above, and
  the `[n*u, ...]` rows split back."""
  indices = op.invariant(1)
  grad = op.stacked(0)
  r = rank(grad)
  if not op.is_stacked(2):
    moved = tf.transpose(grad, list(range(1, r)) + [0])
    rows, unique = op.rebuild([moved, indices, op.invariant(2), op.invariant(3)])
    return [stacked(tf.transpose(rows, [r - 1] + list(range(r - 1)))), invariant(unique)]
  n = loop_length(op.ctx)
  d0 = op.invariant(3)
  folded = _offset_ids(op, op.stacked(1), d0, n, "indices")
  segment_ids = _offset_ids(op, op.stacked(2), _shape(grad)[1], n, "segment_ids")
  rows = op.rebuild([merge_leading(grad), folded, segment_ids, d0 * tf.cast(n, d0.dtype)])[0]
  unique = tf.sort(tf.unique(indices)[0])
  return [stacked(split_leading(rows, n, tf.size(unique))), invariant(unique)]


@register("Print")
def _convert_print(op):
  """Prints once per call, stacked values whole (loop axis first); passes its input on."""
  out = op.rebuild([v.tensor for v in op.inputs])[0]
  return Value(out, op.is_stacked(0))


register_merge_batch("DepthToSpace")
register_merge_batch("LowerBound", batch_inputs=(0, 1))
register_merge_batch("SpaceToDepth")
register_leading_batch("TopK")
register_merge_batch("UpperBound", batch_inputs=(0, 1))
