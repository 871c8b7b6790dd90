"""OpCases for the slicing converters.

Slices whose bounds differ per iteration take the bounds as a vector argument (made with
`indices_below`), so stacking patterns cover stacked and invariant bounds alike.
"""

import numpy as np
import tensorflow as tf
from tensorflow.compiler.tf2xla.ops import gen_xla_ops

from tests.converters.op_cases import OpCase, indices_below

F32, F64, I16, I32, I64 = tf.float32, tf.float64, tf.int16, tf.int32, tf.int64



def unique_rows(limit):
  """Index arrays `[..., m, 1]` whose m entries are distinct values below `limit`."""
  def make(rng, shape, dtype):
    lead, m = int(np.prod(shape[:-2])), shape[-2]
    rows = [rng.permutation(limit)[:m] for _ in range(lead)]
    return np.reshape(np.array(rows, dtype=np.int64), shape).astype(
        tf.as_dtype(dtype).as_numpy_dtype)
  return make


def permutations(rng, shape, dtype):
  """Each last-axis row a permutation of `range(shape[-1])`."""
  lead, m = int(np.prod(shape[:-1])), shape[-1]
  rows = [rng.permutation(m) for _ in range(lead)]
  return np.reshape(np.array(rows, dtype=np.int64), shape).astype(
      tf.as_dtype(dtype).as_numpy_dtype)


def balanced_partitions(num):
  """Partition ids whose last-axis rows each hold the same multiset of ids below `num`."""
  def make(rng, shape, dtype):
    lead, m = int(np.prod(shape[:-1])), shape[-1]
    rows = [rng.permutation(np.arange(m) % num) for _ in range(lead)]
    return np.reshape(np.array(rows, dtype=np.int64), shape).astype(
        tf.as_dtype(dtype).as_numpy_dtype)
  return make


def _like(b, vector):
  """A constant index vector with the dtype of `b`."""
  return tf.constant(vector, b.dtype)


def _slice_gradient(x, b):
  """The gradient of a strided slice with per-iteration bounds, through a tape."""
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = tf.strided_slice(x, b, b + [2, 3])
  return tape.gradient(y, x, output_gradients=2.0 * y)


_GATHER_DTYPES = ((F32, I32), (I32, I64), (I64, I32))

_UNFIXED_UNDER_XLA = ("a length per iteration that nothing in the graph fixes: refused under "
                      "XLA, which drops run-time checks (test_ragged.py)")


CASES = [
    # GatherV2 and Gather.
    OpCase("GatherV2", lambda x, i: tf.gather(x, i), [[5, 3], [4]], dtypes=_GATHER_DTYPES,
           make=[None, indices_below(5)]),
    OpCase("GatherV2-scalar_index", lambda x, i: tf.gather(x, i), [[5, 3], []],
           dtypes=_GATHER_DTYPES, make=[None, indices_below(5)]),
    OpCase("GatherV2-axis1", lambda x, i: tf.gather(x, i, axis=1), [[4, 5, 2], [2, 3]],
           dtypes=_GATHER_DTYPES, make=[None, indices_below(5)]),
    OpCase("GatherV2-negative_axis", lambda x, i: tf.gather(x, i, axis=-1), [[4, 2, 5], [3]],
           dtypes=_GATHER_DTYPES, make=[None, indices_below(5)]),
    OpCase("GatherV2-batch_dims", lambda x, i: tf.gather(x, i, axis=1, batch_dims=1),
           [[4, 5, 2], [4, 3]], dtypes=_GATHER_DTYPES, make=[None, indices_below(5)]),
    OpCase("GatherV2-batch_dims_axis2", lambda x, i: tf.gather(x, i, axis=2, batch_dims=1),
           [[3, 2, 5], [3, 4]], dtypes=_GATHER_DTYPES, make=[None, indices_below(5)]),
    OpCase("GatherV2-negative_batch_dims",
           lambda x, i: tf.gather(x, i, axis=-1, batch_dims=-1), [[3, 2, 5], [3, 2, 4]],
           dtypes=_GATHER_DTYPES, make=[None, indices_below(5)]),
    OpCase("Gather", lambda x, i: tf.raw_ops.Gather(params=x, indices=i), [[5, 3], [2, 2]],
           dtypes=_GATHER_DTYPES, make=[None, indices_below(5)]),
    # GatherNd.
    OpCase("GatherNd", lambda x, i: tf.gather_nd(x, i), [[4, 4, 3], [5, 2]],
           dtypes=_GATHER_DTYPES + ((F32, I16),), make=[None, indices_below(4)]),
    OpCase("GatherNd-full_index", lambda x, i: tf.gather_nd(x, i), [[4, 4], [2, 3, 2]],
           dtypes=_GATHER_DTYPES, make=[None, indices_below(4)]),
    OpCase("GatherNd-batch_dims", lambda x, i: tf.gather_nd(x, i, batch_dims=1),
           [[3, 4, 2], [3, 2, 1]], dtypes=_GATHER_DTYPES, make=[None, indices_below(4)]),
    # Scatters.
    OpCase("ScatterNd", lambda i, u: tf.scatter_nd(i, u, [6, 3]), [[4, 1], [4, 3]],
           dtypes=((I32, F32), (I64, I32)), make=[indices_below(6), None]),
    OpCase("ScatterNd-depth2", lambda i, u: tf.scatter_nd(i, u, [4, 5]), [[3, 2], [3]],
           dtypes=((I32, F32), (I64, I64)), make=[indices_below(4), None]),
    OpCase("TensorScatterUpdate", tf.tensor_scatter_nd_update, [[6, 3], [4, 1], [4, 3]],
           dtypes=((F32, I32, F32), (I32, I64, I32)), make=[None, unique_rows(6), None]),
    OpCase("TensorScatterAdd", tf.tensor_scatter_nd_add, [[6, 3], [4, 1], [4, 3]],
           dtypes=((F32, I32, F32), (I64, I64, I64)), make=[None, indices_below(6), None]),
    OpCase("TensorScatterSub", tf.tensor_scatter_nd_sub, [[4, 5], [3, 2], [3]],
           dtypes=((F32, I32, F32), (I32, I64, I32)), make=[None, indices_below(4), None]),
    OpCase("TensorScatterMax", tf.tensor_scatter_nd_max, [[6, 3], [4, 1], [4, 3]],
           dtypes=((F32, I32, F32), (I32, I64, I32)), make=[None, indices_below(6), None]),
    OpCase("TensorScatterMin", tf.tensor_scatter_nd_min, [[6, 3], [4, 1], [4, 3]],
           dtypes=((F32, I32, F32), (I32, I64, I32)), make=[None, indices_below(6), None]),
    # Slice.
    OpCase("Slice", lambda x: tf.slice(x, [1, 0], [2, -1]), [[4, 3]], dtypes=(F32, I32)),
    OpCase("Slice-invariant_bounds", lambda x, b: tf.slice(x, b, [2, -1]), [[5, 3], [2]],
           dtypes=((F32, I32), (I64, I64)), make=[None, indices_below(3)],
           patterns=[(True, False)], loop_lengths=(1, 3)),
    OpCase("Slice-stacked_begin", lambda x, b: tf.slice(x, b, [2, 2]), [[5, 4], [2]],
           dtypes=((F32, I32), (I32, I64)), make=[None, indices_below(3)]),
    OpCase("Slice-stacked_begin_to_end", lambda x, b: tf.slice(x, b * [1, 0], [2, -1]),
           [[5, 4], [2]], dtypes=((F32, I32), (I32, I64)), make=[None, indices_below(3)],
           loop_lengths=(1, 3), xla=_UNFIXED_UNDER_XLA),
    OpCase("Slice-stacked_size", lambda x, s: tf.slice(x, tf.cast([1, 0], s.dtype), s - s + [2, 3]),
           [[5, 4], [2]], dtypes=((F32, I32), (I32, I64)), make=[None, indices_below(3)],
           loop_lengths=(1, 3), xla=_UNFIXED_UNDER_XLA),
    # StridedSlice with loop-invariant bounds.
    OpCase("StridedSlice", lambda x: x[1:3, ::2], [[4, 5]], dtypes=(F32, I64)),
    OpCase("StridedSlice-shrink", lambda x: x[1, :], [[4, 5]], dtypes=(F32, I32)),
    OpCase("StridedSlice-negative", lambda x: x[-1, ::-1], [[4, 5]], dtypes=(F32, I32)),
    OpCase("StridedSlice-ellipsis_new_axis", lambda x: x[..., tf.newaxis, 1],
           [[3, 4, 5]], dtypes=(F32, I32)),
    OpCase("StridedSlice-new_axis_front", lambda x: x[tf.newaxis, 1:, ..., :2],
           [[3, 4, 5]], dtypes=(F32,)),
    OpCase("StridedSlice-invariant_bounds", lambda x, b: tf.strided_slice(x, b, b + 2),
           [[5, 4], [2]], dtypes=((F32, I32), (I32, I64)), make=[None, indices_below(3)],
           patterns=[(True, False)], loop_lengths=(1, 3)),
    # StridedSlice with per-iteration bounds: gathers.
    OpCase("StridedSlice-stacked_begin", lambda x, b: tf.strided_slice(x, b, b + 2),
           [[5, 4], [2]], dtypes=((F32, I32), (I32, I64)), make=[None, indices_below(3)],
           loop_lengths=(1, 3)),
    OpCase("StridedSlice-stacked_begin_shrink",
           lambda x, b: tf.strided_slice(x, b, b + 1, shrink_axis_mask=1), [[5, 4], [2]],
           dtypes=((F32, I32), (I64, I64)), make=[None, indices_below(4)],
           loop_lengths=(1, 3)),
    OpCase("StridedSlice-stacked_begin_stride",
           lambda x, b: tf.strided_slice(x, b, b + [4, 1], strides=[2, 1]), [[7, 4], [2]],
           dtypes=((F32, I32), (I32, I64)), make=[None, indices_below(3)],
           loop_lengths=(1, 3)),
    OpCase("StridedSlice-stacked_begin_negative_stride",
           lambda x, b: tf.strided_slice(x, b + 3, b, strides=[-1, -2]), [[6, 6], [2]],
           dtypes=((F32, I32), (I32, I64)), make=[None, indices_below(3)],
           loop_lengths=(1, 3)),
    OpCase("StridedSlice-stacked_negative_begin",
           lambda x, b: tf.strided_slice(x, b - 5, b - 3), [[5, 5], [2]],
           dtypes=((F32, I32), (I32, I64)), make=[None, indices_below(3)],
           loop_lengths=(1, 3)),
    OpCase("StridedSlice-stacked_begin_end_mask",
           lambda x, b: tf.strided_slice(x, b * [1, 0], b * [1, 0] + [2, 0], end_mask=2),
           [[5, 4], [2]], dtypes=((F32, I32), (I32, I64)), make=[None, indices_below(3)],
           loop_lengths=(1, 3), xla=_UNFIXED_UNDER_XLA),
    OpCase("StridedSlice-stacked_begin_ellipsis_new_axis",
           lambda x, b: tf.strided_slice(x, b, b + 1, ellipsis_mask=1, new_axis_mask=4,
                                         shrink_axis_mask=2), [[3, 4, 5], [3]],
           dtypes=((F32, I32), (I32, I64)), make=[None, indices_below(5)],
           loop_lengths=(1, 3)),
    # Python indexing with per-iteration ints (begin and end are packed from scalars).
    OpCase("StridedSlice-python_index", lambda x, s: x[s], [[5, 3], []],
           dtypes=_GATHER_DTYPES, make=[None, indices_below(5)]),
    OpCase("StridedSlice-python_range", lambda x, s: x[s:s + 2], [[5, 3], []],
           dtypes=_GATHER_DTYPES, make=[None, indices_below(4)], loop_lengths=(1, 3)),
    OpCase("StridedSlice-python_index_and_range", lambda x, s: x[s, 1:], [[5, 3], []],
           dtypes=_GATHER_DTYPES, make=[None, indices_below(5)], loop_lengths=(1, 3)),
    OpCase("StridedSlice-python_range_and_negative_index", lambda x, s: x[1:, s - 1],
           [[5, 3], []], dtypes=_GATHER_DTYPES, make=[None, indices_below(3)],
           loop_lengths=(1, 3)),
    OpCase("StridedSlice-python_reversed_range", lambda x, s: x[:, s + 2:s:-1],
           [[3, 5], []], dtypes=_GATHER_DTYPES, make=[None, indices_below(3)],
           loop_lengths=(1, 3)),
    # StridedSliceGrad.
    OpCase("StridedSliceGrad",
           lambda dy: tf.raw_ops.StridedSliceGrad(shape=[4, 5], begin=[1, 0], end=[3, 5],
                                                  strides=[1, 2], dy=dy), [[2, 3]],
           dtypes=(F32, I32)),
    OpCase("StridedSliceGrad-masks",
           lambda dy: tf.raw_ops.StridedSliceGrad(
               shape=[4, 5, 2], begin=[1, 0, 0], end=[2, 0, 0], strides=[1, -1, 1],
               dy=dy, begin_mask=2, end_mask=2, shrink_axis_mask=1, new_axis_mask=4),
           [[5, 1, 2]], dtypes=(F32,)),
    OpCase("StridedSliceGrad-stacked_begin",
           lambda dy, b: tf.raw_ops.StridedSliceGrad(shape=_like(b, [5, 4]), begin=b,
                                                     end=b + 2, strides=_like(b, [1, 1]),
                                                     dy=dy),
           [[2, 2], [2]], dtypes=((F32, I32), (I32, I64)), make=[None, indices_below(3)]),
    OpCase("StridedSliceGrad-stacked_begin_shrink_stride",
           lambda dy, b: tf.raw_ops.StridedSliceGrad(
               shape=[5, 7, 4], begin=b, end=b + [1, 4, 2], strides=[1, 2, 1], dy=dy,
               shrink_axis_mask=1), [[2, 2], [3]], dtypes=((F32, I32),),
           make=[None, indices_below(3)]),
    OpCase("StridedSliceGrad-tape", _slice_gradient, [[5, 4], [2]],
           dtypes=((F32, I32), (F64, I64)), make=[None, indices_below(2)],
           op_types=("StridedSliceGrad", "StridedSlice")),
    # Stitch and partition.
    OpCase("DynamicStitch-constant_indices",
           lambda a, b: tf.dynamic_stitch([[0, 2], [[1], [3]]], [a, b]), [[2, 3], [2, 1, 3]],
           dtypes=(F32, I32)),
    OpCase("DynamicStitch",
           lambda i, d, e: tf.dynamic_stitch([i[:4], i[2:]], [d, e]), [[6], [4, 2], [4, 2]],
           dtypes=((I32, F32, F32), (I32, I64, I64)), make=[permutations, None, None],
           loop_lengths=(1, 3)),
    OpCase("ParallelDynamicStitch",
           lambda i, d: tf.raw_ops.ParallelDynamicStitch(indices=[i[:2], i[2:]],
                                                         data=[d[:2], d[2:]]),
           [[5], [5, 3]], dtypes=((I32, F32),), make=[permutations, None],
           loop_lengths=(1, 3)),
    OpCase("DynamicPartition-constant_partitions",
           lambda d: tf.dynamic_partition(d, [0, 1, 0, 2, 1, 0], 3), [[6, 2]],
           dtypes=(F32, I32), loop_lengths=(1, 3)),
    OpCase("DynamicPartition", lambda d, p: tf.dynamic_partition(d, p, 3), [[6, 2], [6]],
           dtypes=((F32, I32), (I64, I32)), make=[None, balanced_partitions(3)],
           patterns=[(True, False)], loop_lengths=(1, 3)),
    # Stacked partitions give ragged outputs (each iteration its own counts); the case states
    # each partition's size, which makes them stacked again. Under XLA they stay stacked
    # (test_ragged.py), but XLA's kernel gives outputs of bounded size that tf.ensure_shape
    # rejects under jit_compile (in plain TF too).
    OpCase("DynamicPartition-stacked_partitions",
           lambda d, p: [tf.ensure_shape(t, [2, None])
                         for t in tf.dynamic_partition(d, p, 3)], [[6, 2], [6]],
           dtypes=((F32, I32), (I64, I32)), make=[None, balanced_partitions(3)],
           patterns=[(False, True), (True, True)], loop_lengths=(1, 3),
           xla="XLA's DynamicPartition has outputs of bounded size: tf.ensure_shape fails"),
]


def _starts(rng, shape, dtype):
  """Start indices, some out of range on either side (XLA clamps them so the update fits)."""
  return rng.integers(-2, 6, shape).astype(tf.as_dtype(dtype).as_numpy_dtype)


CASES.append(OpCase(
    "XlaDynamicUpdateSlice", gen_xla_ops.xla_dynamic_update_slice, [[5, 3], [2, 3], [2]],
    dtypes=[(tf.float32, tf.float32, tf.int32)], make=[None, None, _starts]))
