"""OpCases for converters/reductions.py."""

import numpy as np
import tensorflow as tf

from tests.converters.op_cases import OpCase, indices_below

F32, F64, I16, I32, I64 = tf.float32, tf.float64, tf.int16, tf.int32, tf.int64

_NO_XLA_SEGMENT_COUNT = ("the segment count depends on stacked ids' values, so the output "
                         "shape is not static (the op itself has no XLA kernel)")


def sorted_ids(num_segments):
  """Sorted segment ids in [0, num_segments), the last one num_segments - 1 (every iteration
  then has the same segment count); gaps leave empty segments."""
  def make(rng, shape, dtype):
    ids = np.sort(rng.integers(0, num_segments, shape), axis=-1)
    if ids.size:
      ids[..., -1] = num_segments - 1
    return ids.astype(tf.as_dtype(dtype).as_numpy_dtype)
  return make


def ids_with_negatives(num_segments):
  """Segment ids in [-1, num_segments): negative ids are dropped by the unsorted ops."""
  def make(rng, shape, dtype):
    return rng.integers(-1, num_segments, shape).astype(tf.as_dtype(dtype).as_numpy_dtype)
  return make


def constant(value):
  """Every element equal to `value` (a per-iteration argument that is a fixed parameter)."""
  def make(rng, shape, dtype):
    del rng
    return np.broadcast_to(np.asarray(value), shape).astype(tf.as_dtype(dtype).as_numpy_dtype)
  return make


def _gather_gradient(params, indices):
  """The dense gradient of a gather w.r.t. its params (emits UnsortedSegmentSum)."""
  with tf.GradientTape() as tape:
    tape.watch(params)
    y = tf.gather(params, indices)
  return tf.convert_to_tensor(tape.gradient(y, params))


_X = [2, 3, 4]

_AXIS_CASES = [
    OpCase("Sum", lambda x: tf.reduce_sum(x, 1), [_X], dtypes=[F32, F64, I32]),
    OpCase("Sum-negative_axis", lambda x: tf.reduce_sum(x, -1), [_X], dtypes=[F32, I32]),
    OpCase("Sum-keep_dims", lambda x: tf.reduce_sum(x, [0, 2], keepdims=True), [_X]),
    OpCase("Sum-vector_axis", lambda x: tf.reduce_sum(x, [0, -1]), [_X], dtypes=[F32, F64]),
    OpCase("Sum-all_axes", tf.reduce_sum, [_X], dtypes=[F32, I32]),
    OpCase("Sum-scalar_input", tf.reduce_sum, [[]]),
    OpCase("Sum-axis_arg", tf.reduce_sum, [_X, []], dtypes=[(F32, I32), (F64, I64)],
           patterns=[(True, False)], make=[None, constant(1)]),
    OpCase("Sum-negative_vector_axis_arg", lambda x, a: tf.reduce_sum(x, a, keepdims=True),
           [_X, [2]], dtypes=[(F32, I32)], patterns=[(True, False)],
           make=[None, constant([-1, 0])]),
    # A stacked axis cannot be moved past the loop axis: Unvectorizable, falls back.
    OpCase("Sum-stacked_axis", tf.reduce_sum, [[3, 3], []], dtypes=[(F32, I32)],
           patterns=[(True, True), (False, True)], make=[None, indices_below(2)],
           loop_lengths=(1, 3), allow_fallback=True,
           xla="the fallback's per-iteration axis is not a constant"),
    OpCase("Mean", lambda x: tf.reduce_mean(x, 0), [_X], dtypes=[F32, F64, I32]),
    OpCase("Mean-keep_dims", lambda x: tf.reduce_mean(x, [-1, 1], keepdims=True), [_X]),
    OpCase("Prod", lambda x: tf.reduce_prod(x, 2), [_X], dtypes=[F32, F64, I32]),
    OpCase("Prod-keep_dims", lambda x: tf.reduce_prod(x, -2, keepdims=True), [_X]),
    OpCase("Max", lambda x: tf.reduce_max(x, 1), [_X], dtypes=[F32, F64, I32]),
    OpCase("Max-keep_dims", lambda x: tf.reduce_max(x, [0, 1], keepdims=True), [_X],
           dtypes=[F32, I64]),
    OpCase("Min", lambda x: tf.reduce_min(x, -3), [_X], dtypes=[F32, F64, I32]),
    OpCase("Min-keep_dims", lambda x: tf.reduce_min(x, 2, keepdims=True), [_X]),
    OpCase("All", lambda x: tf.reduce_all(x, 1), [_X], dtypes=[tf.bool]),
    OpCase("All-keep_dims", lambda x: tf.reduce_all(x, [0, 2], keepdims=True), [_X],
           dtypes=[tf.bool]),
    OpCase("Any", lambda x: tf.reduce_any(x, -1), [_X], dtypes=[tf.bool]),
    OpCase("Any-keep_dims", lambda x: tf.reduce_any(x, 0, keepdims=True), [_X],
           dtypes=[tf.bool]),
    # EuclideanNorm has no XLA kernel: under XLA it is emitted as a sum of squares.
    OpCase("EuclideanNorm", lambda x: tf.math.reduce_euclidean_norm(x, 1), [_X],
           dtypes=[F32, F64]),
    OpCase("EuclideanNorm-keep_dims",
           lambda x: tf.math.reduce_euclidean_norm(x, [-1, 0], keepdims=True), [_X]),
    OpCase("EuclideanNorm-int", lambda x: tf.math.reduce_euclidean_norm(x, 1), [_X],
           dtypes=[tf.int32], xla="EuclideanNorm has no XLA kernel, for integers either"),
    # Compositions of reductions with elementwise ops (need the elementwise family's Exp,
    # Log, IsFinite, SelectV2, Square, Sqrt and the shapes family's Reshape).
    OpCase("Max-logsumexp", lambda x: tf.reduce_logsumexp(x, 1), [_X], dtypes=[F32, F64],
           op_types=("Max", "Sum")),
    OpCase("Mean-variance", lambda x: tf.math.reduce_variance(x, -1), [_X],
           dtypes=[F32, F64]),
    OpCase("Mean-std", lambda x: tf.math.reduce_std(x, [0, 2], keepdims=True), [_X]),
]

_ARG_CASES = [
    OpCase("ArgMax", lambda x: tf.argmax(x, 1), [_X], dtypes=[F32, I32]),
    OpCase("ArgMax-int32_output", lambda x: tf.argmax(x, -1, output_type=tf.int32), [_X],
           dtypes=[F32, F64]),
    OpCase("ArgMax-rank1", lambda x: tf.argmax(x, 0), [[5]]),
    OpCase("ArgMin", lambda x: tf.argmin(x, -3), [_X], dtypes=[F32, I32]),
    OpCase("ArgMin-int32_output", lambda x: tf.argmin(x, 2, output_type=tf.int32), [_X]),
]


def _cumulative(name, fn, dtypes, make=None):
  """The exclusive/reverse variants of one cumulative op, on a positive and a negative axis."""
  out = []
  for exclusive in (False, True):
    for reverse in (False, True):
      variant = "-".join(v for v, on in (("exclusive", exclusive), ("reverse", reverse)) if on)
      out.append(OpCase(
          f"{name}-{variant}" if variant else name,
          lambda x, e=exclusive, r=reverse: fn(x, 1, exclusive=e, reverse=r),
          [_X], dtypes=dtypes, make=make))
  out.append(OpCase(f"{name}-negative_axis",
                    lambda x: fn(x, -1, exclusive=True), [_X], dtypes=dtypes[:1], make=make))
  return out


_CUMULATIVE_CASES = (
    _cumulative("Cumsum", tf.math.cumsum, [F32, F64, I32])
    + _cumulative("Cumprod", tf.math.cumprod, [F32, I32])
    + _cumulative("CumulativeLogsumexp", tf.math.cumulative_logsumexp, [F32, F64]))

# Segment ops. Data [4, 3] and ids [4], unless the case says otherwise.
_SEGMENT_INVARIANT_IDS = [(True, False)]
_SEGMENT_STACKED_IDS = [(True, True), (False, True)]

_UNSORTED_CASES = [
    OpCase("UnsortedSegmentSum", lambda d, i: tf.math.unsorted_segment_sum(d, i, 3),
           [[4, 3], [4]], dtypes=[(F32, I32), (F64, I64), (I32, I32), (F32, I16)],
           make=[None, indices_below(3)]),
    OpCase("UnsortedSegmentSum-negative_ids", lambda d, i: tf.math.unsorted_segment_sum(d, i, 3),
           [[4, 3], [4]], dtypes=[(F32, I32)], make=[None, ids_with_negatives(3)]),
    OpCase("UnsortedSegmentSum-rank2_ids", lambda d, i: tf.math.unsorted_segment_sum(d, i, 4),
           [[2, 3, 2], [2, 3]], dtypes=[(F32, I32), (I32, I64)],
           make=[None, indices_below(4)]),
    OpCase("UnsortedSegmentSum-rank1_data",
           lambda d, i: tf.math.unsorted_segment_sum(d, i, 3), [[5], [5]],
           dtypes=[(F32, I32)], make=[None, indices_below(3)]),
    OpCase("UnsortedSegmentSum-num_segments_arg", tf.math.unsorted_segment_sum,
           [[4, 3], [4], []], dtypes=[(F32, I32, I32), (F32, I64, I64)],
           patterns=[(True, False, False), (False, True, False), (True, True, False)],
           make=[None, indices_below(5), constant(5)]),
    # A stacked num_segments: Unvectorizable, falls back, and gives a ragged value (the
    # output size is per iteration); the same value in every iteration here, which
    # tf.ensure_shape states, so the result is stacked again.
    OpCase("UnsortedSegmentSum-stacked_num_segments",
           lambda x, ids, num: tf.ensure_shape(tf.math.unsorted_segment_sum(x, ids, num),
                                               [4, 3]),
           [[4, 3], [4], []], dtypes=[(F32, I32, I32)],
           patterns=[(True, True, True), (False, False, True)],
           make=[None, indices_below(4), constant(4)], loop_lengths=(1, 3), allow_fallback=True,
           xla="the fallback's per-iteration num_segments is not a constant"),
    OpCase("UnsortedSegmentSum-gather_gradient", _gather_gradient, [[5, 3], [4]],
           dtypes=[(F32, I32)], make=[None, indices_below(5)],
           op_types=("UnsortedSegmentSum",)),
    OpCase("UnsortedSegmentSum-mean", lambda d, i: tf.math.unsorted_segment_mean(d, i, 5),
           [[4, 3], [4]], dtypes=[(F32, I32)], make=[None, indices_below(5)],
           op_types=("UnsortedSegmentSum",)),
    OpCase("UnsortedSegmentMax", lambda d, i: tf.math.unsorted_segment_max(d, i, 5),
           [[4, 3], [4]], dtypes=[(F32, I32), (I32, I32)], make=[None, ids_with_negatives(5)]),
    OpCase("UnsortedSegmentMin", lambda d, i: tf.math.unsorted_segment_min(d, i, 5),
           [[4, 3], [4]], dtypes=[(F32, I32), (F64, I64)], make=[None, indices_below(5)]),
    OpCase("UnsortedSegmentProd", lambda d, i: tf.math.unsorted_segment_prod(d, i, 5),
           [[4, 3], [4]], dtypes=[(F32, I32), (I32, I32)], make=[None, indices_below(5)]),
]


# The per-iteration output shape of sorted segment ops is unknown at trace time, so the
# reference cannot build an empty result for n = 0: those cases run n = 1 and 3 only.


def _as_four_segments(fn):
  """Stacked sorted ids give a segment count of each iteration's own (a ragged value, returned
  as a RaggedTensor: test_reductions.py); the cases' ids all end at 3, and
  `ensure_shape` says so, which makes the result stacked again."""
  return lambda *args: tf.ensure_shape(fn(*args), [4, 3])


def _sorted_segment(name, fn, dtypes):
  """Invariant sorted ids (compiles under XLA) and stacked ones (the count is data-dependent)."""
  shapes = [[5, 3], [5]]
  make = [None, sorted_ids(4)]
  return [
      OpCase(name, fn, shapes, dtypes=dtypes, make=make, patterns=_SEGMENT_INVARIANT_IDS,
             loop_lengths=(1, 3)),
      OpCase(f"{name}-stacked_ids", _as_four_segments(fn), shapes, dtypes=dtypes, make=make,
             patterns=_SEGMENT_STACKED_IDS, loop_lengths=(1, 3), xla=_NO_XLA_SEGMENT_COUNT),
  ]


_SORTED_CASES = (
    _sorted_segment("SegmentSum", tf.math.segment_sum, [(F32, I32), (F64, I64), (I32, I32)])
    + _sorted_segment("SegmentMean", tf.math.segment_mean, [(F32, I32), (I32, I32)])
    + _sorted_segment("SegmentMax", tf.math.segment_max, [(F32, I32), (I32, I64)])
    + _sorted_segment("SegmentMin", tf.math.segment_min, [(F32, I32), (F64, I32)])
    + _sorted_segment("SegmentProd", tf.math.segment_prod, [(F32, I32), (I32, I32)]))


def _sparse_segment(name, fn):
  """Data [6, 3], indices [5] into it, sorted ids [5]; with and without num_segments."""
  shapes = [[6, 3], [5], [5]]
  make = [None, indices_below(6), sorted_ids(4)]
  dtypes = [(F32, I32, I32), (F64, I64, I64)]
  invariant_ids = [(True, False, False), (False, True, False), (True, True, False)]
  stacked_ids = [(True, True, True), (True, False, True), (False, True, True),
                 (False, False, True)]
  return [
      OpCase(name, fn, shapes, dtypes=dtypes, make=make, patterns=invariant_ids,
             loop_lengths=(1, 3)),
      OpCase(f"{name}-stacked_ids", _as_four_segments(fn), shapes, dtypes=dtypes, make=make,
             patterns=stacked_ids, loop_lengths=(1, 3), xla=_NO_XLA_SEGMENT_COUNT),
      OpCase(f"{name}WithNumSegments", lambda d, x, i: fn(d, x, i, num_segments=6), shapes,
             dtypes=dtypes, make=make),
  ]


_SPARSE_CASES = (
    _sparse_segment("SparseSegmentSum", tf.sparse.segment_sum)
    + _sparse_segment("SparseSegmentMean", tf.sparse.segment_mean)
    + _sparse_segment("SparseSegmentSqrtN", tf.sparse.segment_sqrt_n))

CASES = (_AXIS_CASES + _ARG_CASES + _CUMULATIVE_CASES + _UNSORTED_CASES + _SORTED_CASES
         + _SPARSE_CASES)
