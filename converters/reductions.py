"""Reductions: sum/prod/max/min/mean/all/any/norm, argmax/argmin, cumulative and segment ops.

The trick for axis reductions: the loop axis is axis 0, so every per-iteration axis moves past
it (negative axes stay) and the op reduces each iteration's slice on its own.

The trick for segment ops: offset iteration i's segment ids by `i * num_segments`, run ONE
unsorted segment reduction with `n * num_segments` segments over all iterations' rows, and
split the result `[n*s, ...] -> [n, s, ...]`. Ids outside `[0, num_segments)` become -1 first
so they are dropped instead of landing in a neighbouring iteration's segments (the per-op
kernels drop negative ids too; out-of-range ids, an error on CPU, are dropped here). Sorted
and sparse segment ops go through the same path: their segment count is the last id + 1
(each iteration's own: a ragged value where stacked ids end differently),
mean and sqrt-n divide by per-segment counts, and empty segments of max/min give 0.
"""

import tensorflow as tf

from vectorize import indexing
from vectorize import ragged
from vectorize import values
from vectorize.family import register_axis_shift
from vectorize.registry import register
from vectorize.values import Value, stacked

_UNSORTED = {
    "sum": tf.math.unsorted_segment_sum,
    "mean": tf.math.unsorted_segment_sum,
    "sqrt_n": tf.math.unsorted_segment_sum,
    "prod": tf.math.unsorted_segment_prod,
    "max": tf.math.unsorted_segment_max,
    "min": tf.math.unsorted_segment_min,
}


def _kind(op_type):
  """'SparseSegmentSqrtNWithNumSegments' -> 'sqrt_n', 'UnsortedSegmentMax' -> 'max', ..."""
  name = op_type.replace("WithNumSegments", "").split("Segment")[-1]
  return {"SqrtN": "sqrt_n"}.get(name, name.lower())


def _num_segments(op, i):
  """The invariant num_segments input i, as a Python int when known at trace time."""
  t = op.invariant(i)
  value = tf.get_static_value(t)
  return int(value) if value is not None else t


def _sorted_num_segments(op, ids):
  """Segment count of a sorted-id op: the last id + 1 (0 for no ids), static when possible."""
  static = op.output_shape(0)
  if static.rank and static[0] is not None:
    return int(static[0])
  if not ids.stacked:
    value = tf.get_static_value(ids.tensor)
    if value is not None:
      return int(value.reshape([-1])[-1]) + 1 if value.size else 0
  # Sorted ids: the largest id over all iterations is the longest iteration's last one; the
  # others are trimmed to their own count afterwards (`_trim_to_own_counts`).
  return tf.maximum(tf.reduce_max(ids.tensor), -1) + 1


def _trim_to_own_counts(op, out, ids, num_segments):
  """A sorted-id result computed with the longest iteration's segment count, cut to each
  iteration's own (its last id + 1): a ragged value, unless the count is the same for all."""
  if isinstance(num_segments, int) or not ids.stacked:
    return out
  op.ctx.target.require_dynamic_shapes(op.op, f"{op.type}'s output (its last segment id + 1 rows)")
  counts = tf.cast(tf.maximum(tf.reduce_max(ids.tensor, axis=1), -1) + 1, tf.int32)  # [n]
  keep = tf.sequence_mask(counts, tf.shape(out.tensor)[1])
  return ragged.ragged(tf.boolean_mask(out.tensor, keep), counts)


def _segment_reduce(op, kind, rows, ids, num_segments, empty_is_zero=False):
  """Segment reduction of every iteration at once, by offsetting ids per iteration.

  Args:
    op: the OpInput (for n).
    kind: a key of `_UNSORTED`.
    rows: Value, per iteration `[d..., rest...]`.
    ids: Value, per iteration `[d...]`.
    num_segments: s, a Python int or an invariant scalar tensor.
    empty_is_zero: empty max/min segments give 0 (as sorted ids do) instead of the lowest /
      highest value (as unsorted ids do).

  Returns:
    The stacked result `[n, s, rest...]`.
  """
  n = values.loop_length(op.ctx)
  ids = values.with_wide_indices(ids)   # n * s ids (int16 ones: no Range kernel either)
  dtype = ids.tensor.dtype
  s = num_segments if isinstance(num_segments, int) else tf.cast(num_segments, dtype)
  in_range = tf.logical_and(ids.tensor >= 0, ids.tensor < s)
  flat_ids = tf.where(in_range, values.offset_by_iteration(ids, s, n),
                      tf.constant(-1, dtype))  # [n, d...]
  total = n * s if isinstance(n, int) else tf.cast(n, dtype) * s
  data = values.stack(rows, n)  # [n, d..., rest...]
  if empty_is_zero and kind in ("max", "min"):   # a sorted op: infinities as its kernel
    out = indexing.segment_extreme(kind, data, flat_ids, total)
  else:
    out = _UNSORTED[kind](data, flat_ids, total)
  out = values.reshape_leading(out, [n, num_segments])
  if kind in ("mean", "sqrt_n") or (empty_is_zero and kind in ("max", "min")):
    counts = tf.math.unsorted_segment_sum(tf.ones_like(flat_ids, tf.int32), flat_ids, total)
    counts = values.reshape_leading(counts, [n, num_segments])  # [n, s]
    for _ in range(values.rank(out) - 2):
      counts = tf.expand_dims(counts, -1)
    out = _apply_counts(kind, out, counts)
  return stacked(out)


def _apply_counts(kind, out, counts):
  """Divides sums by counts (mean, sqrt_n) or zeroes empty segments (max, min)."""
  if kind in ("max", "min"):
    return tf.where(counts > 0, out, tf.zeros_like(out))
  safe = tf.cast(tf.maximum(counts, 1), out.dtype)
  if kind == "sqrt_n":
    return out / tf.sqrt(safe)
  if out.dtype.is_integer:
    return tf.truncatediv(out, safe)
  return out / safe


@register("UnsortedSegmentMax", "UnsortedSegmentMin", "UnsortedSegmentProd",
          "UnsortedSegmentSum")
def _convert_unsorted_segment(op):
  """One unsorted segment op over `n * num_segments` segments (see the module docstring)."""
  num_segments = _num_segments(op, 2)
  return _segment_reduce(op, _kind(op.type), op.value(0), op.value(1), num_segments)


@register("SegmentMax", "SegmentMean", "SegmentMin", "SegmentProd", "SegmentSum")
def _convert_segment(op):
  """Sorted ids: the unsorted form with `last id + 1` segments."""
  data, ids = op.value(0), op.value(1)
  num_segments = _sorted_num_segments(op, ids)
  out = _segment_reduce(op, _kind(op.type), data, ids, num_segments, empty_is_zero=True)
  return _trim_to_own_counts(op, out, ids, num_segments)


@register("SparseSegmentMean", "SparseSegmentMeanWithNumSegments", "SparseSegmentSqrtN",
          "SparseSegmentSqrtNWithNumSegments", "SparseSegmentSum",
          "SparseSegmentSumWithNumSegments")
def _convert_sparse_segment(op):
  """Gathers each iteration's rows by `indices`, then reduces them like a segment op."""
  ids = op.value(2)
  rows = _gather_rows(op.value(0), op.value(1))
  if op.num_inputs > 3:
    return _segment_reduce(op, _kind(op.type), rows, ids, _num_segments(op, 3))
  num_segments = _sorted_num_segments(op, ids)
  out = _segment_reduce(op, _kind(op.type), rows, ids, num_segments)
  return _trim_to_own_counts(op, out, ids, num_segments)


def _gather_rows(data, indices):
  """`data[indices]` per iteration, stacked only where an input is."""
  if data.stacked and indices.stacked:
    return stacked(tf.gather(data.tensor, indices.tensor, axis=1, batch_dims=1))
  if data.stacked:
    return stacked(tf.gather(data.tensor, indices.tensor, axis=1))
  return Value(tf.gather(data.tensor, indices.tensor), indices.stacked)


register_axis_shift(
    "ArgMax",
    "ArgMin",
    "Cumprod",
    "Cumsum",
    "CumulativeLogsumexp",
    axis_input=1,
)


@register("EuclideanNorm")
def _convert_euclidean_norm(op):
  """Axes shifted past the loop axis. EuclideanNorm has no XLA kernel: under static shapes
  (XLA) a real norm is the square root of a sum of squares, so the body compiles."""
  x = op.stacked(0)
  axes = values.shift_axis(op.invariant(1))
  if op.ctx.target.static_shapes and x.dtype.is_floating:
    return stacked(tf.sqrt(tf.reduce_sum(tf.square(x), axes, keepdims=op.attr("keep_dims"))))
  return stacked(op.rebuild([x, axes])[0])
register_axis_shift("All", "Any", "Max", "Mean", "Min", "Prod", "Sum", axis_input=1,
                    identity_if_no_axis=True)
