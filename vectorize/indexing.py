"""gather_nd and scatters by coordinates that accept slices holding no values.

TensorFlow's GatherNd, ScatterNd and TensorScatterUpdate kernels refuse a tensor with no
values as soon as the coordinates are not empty ("params is empty", "Indices and updates
specified for empty output shape"), even where every slice read or written is empty. A
body never meets this: per iteration it reads or writes a slice of no values (an element
of a TensorArray of `[3, 0]` values, a zero-size loop variable) with ops that accept it.
Vectorized, that read is one gather_nd over all iterations, so a slice with a dim of 0
(known statically) is answered without the kernel.

Likewise UnsortedSegmentMin/Max start from the highest/lowest finite value, which an
infinity never passes: a segment of only `inf` gives the largest float where a reduce_min
or a sorted segment_min gives `inf`. `segment_extreme` is the unsorted reduction with the
infinity put back, for the converters that compute those ops with it.
"""

import numpy as np
import tensorflow as tf


def _empty_slices(shape, depth):
  """Whether the slices addressed by coordinates of length `depth` into a tensor of static
  `shape` hold no values."""
  if depth is None or shape.rank is None:
    return False
  return 0 in shape[depth:].as_list()


def gather_nd(params, indices):
  """`tf.gather_nd(params, indices)`; zeros of the result's shape for empty slices."""
  depth = indices.shape[-1]
  if _empty_slices(params.shape, depth):
    shape = tf.concat([tf.shape(indices)[:-1], tf.shape(params)[depth:]], 0)
    return tf.zeros(shape, params.dtype)
  return tf.gather_nd(params, indices)


def tensor_scatter_nd_update(tensor, indices, updates):
  """`tf.tensor_scatter_nd_update`; `tensor` as it is where the slices are empty (there is
  nothing to write)."""
  depth = indices.shape[-1]
  lead = indices.shape.rank - 1 if indices.shape.rank is not None else None
  if (_empty_slices(tensor.shape, depth) or
      (lead is not None and _empty_slices(updates.shape, lead))):
    return tensor
  return tf.tensor_scatter_nd_update(tensor, indices, updates)


def scatter_nd(indices, updates, shape):
  """`tf.scatter_nd`; zeros of `shape` where the slices written are empty."""
  lead = indices.shape.rank - 1 if indices.shape.rank is not None else None
  static_shape = tf.get_static_value(shape)
  if ((lead is not None and _empty_slices(updates.shape, lead)) or
      (static_shape is not None and
       _empty_slices(tf.TensorShape(static_shape.tolist()), indices.shape[-1]))):
    return tf.zeros(shape, updates.dtype)
  return tf.scatter_nd(indices, updates, shape)


def segment_extreme(kind, data, ids, num_segments):
  """`unsorted_segment_min` ("min") or `_max` ("max") of `data`, where a segment whose
  values are all `inf` ("min") or `-inf` ("max") gives that infinity. Empty segments keep
  the kernel's value (the caller decides what they give)."""
  reduce = tf.math.unsorted_segment_min if kind == "min" else tf.math.unsorted_segment_max
  out = reduce(data, ids, num_segments)
  if not data.dtype.is_floating:
    return out
  infinity = tf.constant(np.inf if kind == "min" else -np.inf, data.dtype)
  # 0 where every value of the segment is that infinity; an empty one gives the lowest int.
  finite = tf.math.unsorted_segment_max(tf.cast(tf.not_equal(data, infinity), tf.int32),
                                        ids, num_segments)
  return tf.where(tf.equal(finite, 0), infinity, out)
