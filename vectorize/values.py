"""Converted values: a tensor plus a flag saying whether it differs per iteration.

A stacked value carries the loop axis at position 0 (`[n] + shape`); an invariant value keeps
the unconverted shape. Converters keep values invariant as long as they can and tile
(`stack`) only where an op cannot broadcast. The reshaping helpers here never use -1 in a
shape, so they stay correct when n is 0.
"""

import functools
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from vectorize import graph_io
from vectorize import lists
from vectorize.graph_io import constant
from vectorize.errors import Unvectorizable


class Value(NamedTuple):
  """A converted tensor: `stacked` says whether axis 0 is the loop axis."""
  tensor: tf.Tensor
  stacked: bool

  @property
  def dtype(self):
    return self.tensor.dtype


def stacked(tensor):
  """A value that differs per iteration; `tensor` has the loop axis first."""
  return Value(_as_tensor(tensor), True)


def invariant(tensor):
  """A value that is the same in every iteration, at its own shape."""
  return Value(_as_tensor(tensor), False)


def _as_tensor(value):
  # Every converted op passes here: skip TF's conversion dispatch for what is a tensor.
  return value if isinstance(value, tf.Tensor) else tf.convert_to_tensor(value)


def stack(value, n):
  """The tensor of `value` with a loop axis: tiles an invariant value to `[n] + shape`."""
  if value.stacked:
    return value.tensor
  t = value.tensor
  if t.dtype == tf.variant:
    return lists.to_dense(t, n)
  if t.shape.rank is None:
    multiples = tf.concat([tf.reshape(n, [1]), tf.ones([tf.rank(t)], tf.int32)], 0)
    return tf.tile(tf.expand_dims(t, 0), multiples)
  static_n = tf.get_static_value(n) if isinstance(n, tf.Tensor) and n.op.type == "Const" else n
  if isinstance(static_n, (int, np.integer, np.ndarray)):
    multiples = constant([int(static_n)] + [1] * t.shape.rank)
  else:
    multiples = graph_io.concat([graph_io.reshape(tf.cast(n, tf.int32), [1]),
                                 constant([1] * t.shape.rank)], 0)
  return graph_io.tile(graph_io.expand_dims(t, 0), multiples)


def rank(tensor):
  """The static rank of `tensor`; raises Unvectorizable (fall back) when it is unknown."""
  r = tensor.shape.rank
  if r is None:
    raise Unvectorizable(f"tensor {tensor.name} has unknown rank")
  return r


def dynamic_shape(tensor):
  """The shape of `tensor` as a list: static dims as ints, the others as scalar tensors."""
  static = tensor.shape.as_list() if tensor.shape.rank is not None else None
  if static is not None and all(d is not None for d in static):
    return static
  dynamic = tf.shape(tensor)
  if static is None:
    return dynamic
  return [d if d is not None else dynamic[k] for k, d in enumerate(static)]


def shape_vector(dims, dtype=tf.int32):
  """Packs a list of ints and scalar tensors into one shape vector of `dtype` (a constant
  when every dim is known at trace time). The one way converters build shape vectors."""
  if isinstance(dims, tf.Tensor) and dims.shape.rank == 1:
    return dims if dims.dtype == dtype else tf.cast(dims, dtype)
  if all(isinstance(d, (int, np.integer)) for d in dims):
    return constant([int(d) for d in dims], dtype)
  return graph_io.pack([constant(int(d), dtype) if isinstance(d, (int, np.integer))
                        else tf.cast(d, dtype) for d in dims])


def product(dims):
  """The product of a list of ints and scalar tensors (an int when all are ints)."""
  out = 1
  for d in dims:
    out = out * d
  return out


def loop_length(ctx):
  """n as a Python int when known at trace time, else the scalar tensor: what shape lists
  (`dynamic_shape`, `shape_vector`, `split_leading`) take for the loop axis."""
  return ctx.static_n if ctx.static_n is not None else ctx.n


def static_iteration_shape(value):
  """The static shape of one iteration of `value` (a stacked value's loop axis dropped)."""
  shape = value.tensor.shape
  return shape[1:] if value.stacked and shape.rank is not None else shape


def per_iteration_shape(value, out_type=tf.int32):
  """The shape vector of one iteration of `value`: a stacked value's loop axis dropped."""
  shape = tf.shape(value.tensor, out_type=out_type)
  return shape[1:] if value.stacked else shape


def max_or_zero(tensor):
  """The largest entry of `tensor`, or 0 when it is empty (a per-iteration vector when n is 0,
  where a plain reduce_max gives the dtype's lowest value)."""
  return tf.maximum(tf.reduce_max(tensor), tf.zeros([], tensor.dtype))


def with_wide_indices(value):
  """A Value of indices as int32 where they are narrower (int16, int8): ids that the loop
  axis offsets or prefixes address n times as many rows, and TF's index ops that make them
  (Range, Shape) take int32 and int64 only."""
  if value.tensor.dtype in (tf.int32, tf.int64):
    return value
  return Value(tf.cast(value.tensor, tf.int32), value.stacked)


def offset_by_iteration(ids, step, n):
  """`ids + i * step` in iteration i, stacked `[n, ...]` (the Value `ids` may be invariant:
  it broadcasts): ids that address `step` rows of one iteration then address disjoint rows
  of one `[n*step, ...]` tensor."""
  t = ids.tensor
  offsets = tf.range(tf.cast(n, t.dtype), dtype=t.dtype) * tf.cast(step, t.dtype)
  return t + expand_after_loop_axis(offsets, per_iteration_rank(ids))


def reshape(tensor, dims):
  """`tf.reshape` to `dims`, a list of ints and scalar tensors or a shape vector (never -1
  where n is involved: n may be 0)."""
  return graph_io.reshape(tensor, shape_vector(dims))


def loop_length_vector(n, static_n=None, dtype=tf.int32):
  """n as a 1-vector of `dtype`: a constant when n is known at trace time."""
  if static_n is not None:
    return constant([static_n], dtype)
  return tf.cast(tf.reshape(n, [1]), dtype)


def prepend_loop_length(shape, n, static_n=None):
  """`s -> [n] + s` for a per-iteration shape vector (numpy value or tensor)."""
  if isinstance(shape, np.ndarray) and shape.dtype in (np.int32, np.int64):
    if static_n is not None:
      return constant([static_n] + shape.tolist(), tf.as_dtype(shape.dtype))
    shape = constant(shape, tf.as_dtype(shape.dtype))
  shape = tf.convert_to_tensor(shape)
  return graph_io.concat([loop_length_vector(n, static_n, shape.dtype), shape], 0)


def merge_leading(tensor):
  """`[n, b, ...] -> [n*b, ...]`: folds the loop axis into the next one."""
  shape = dynamic_shape(tensor)
  if isinstance(shape, tf.Tensor):   # rank known only at run time
    return graph_io.reshape(tensor, tf.concat([shape[:1] * shape[1:2], shape[2:]], 0))
  return reshape(tensor, [shape[0] * shape[1]] + list(shape[2:]))


def split_leading(tensor, n, b):
  """`[n*b, ...] -> [n, b, ...]`; both sizes are given (ints or scalars) so n may be 0."""
  return reshape_leading(tensor, [n, b])


def reshape_leading(tensor, leading):
  """Replaces the first axis of `tensor` by the dims in `leading` (ints or scalars)."""
  shape = dynamic_shape(tensor)
  if isinstance(shape, tf.Tensor):   # rank known only at run time
    return graph_io.reshape(tensor, tf.concat([shape_vector(list(leading)), shape[1:]], 0))
  return reshape(tensor, list(leading) + list(shape[1:]))


def expand_after_loop_axis(tensor, num_dims):
  """`[n, ...] -> [n, 1, ..., 1, ...]`: inserts `num_dims` unit dims after the loop axis.

  `num_dims` may be a scalar tensor (a rank known only at run time): one reshape then.
  """
  if isinstance(num_dims, tf.Tensor):
    shape = tf.shape(tensor)
    return tf.reshape(tensor, tf.concat([shape[:1], tf.ones([num_dims], tf.int32),
                                         shape[1:]], 0))
  if num_dims > 1 and tensor.shape.is_fully_defined():   # one op
    shape = tensor.shape.as_list()
    return reshape(tensor, shape[:1] + [1] * num_dims + shape[1:])
  for _ in range(num_dims):
    tensor = graph_io.expand_dims(tensor, 1)
  return tensor


def per_iteration_rank(value):
  """The rank of one iteration's value: an int, or a scalar tensor when known only at run
  time."""
  r = value.tensor.shape.rank
  if r is None:
    r = tf.rank(value.tensor)
  return r - 1 if value.stacked else r


def align_ranks(values):
  """Pads stacked values so that they broadcast against each other and invariant values.

  Per-iteration shapes broadcast from the right; a stacked value of lower per-iteration rank
  gets unit dims just after its loop axis, so its loop axis lines up with the other stacked
  values' and invariant values broadcast into the trailing dims. Ranks known only at run
  time give a run-time padding.
  """
  ranks = [per_iteration_rank(v) for v in values]
  if all(isinstance(r, int) for r in ranks):
    target = max(ranks)
  else:
    target = functools.reduce(tf.maximum, [tf.convert_to_tensor(r) for r in ranks])
  out = []
  for v, r in zip(values, ranks):
    if v.stacked:
      out.append(expand_after_loop_axis(v.tensor, target - r))
    else:
      out.append(v.tensor)
  return out


def shift_axis(axis):
  """Maps an axis of the per-iteration tensor to the stacked tensor (past the loop axis).

  Non-negative axes move by one; negative axes count from the end and stay. `axis` may be a
  Python int, a numpy value or an invariant tensor (folded when known at trace time).
  """
  if isinstance(axis, tf.Tensor):
    static = tf.get_static_value(axis)
    if static is None:
      return tf.where(axis >= 0, axis + 1, axis)
    return constant(shift_axis(static), axis.dtype)
  if np.ndim(axis):
    return np.where(np.asarray(axis) >= 0, np.asarray(axis) + 1, axis).astype(
        np.asarray(axis).dtype)
  axis = int(axis)
  return axis + 1 if axis >= 0 else axis


def select_lanes(mask, taken, other):
  """Per iteration: `taken` where `mask` (`[n]` bool), else `other`; both stacked alike:
  tensors, or DenseLists (padded to a common capacity first; UniformLists become
  DenseLists: lanes may differ after)."""
  taken, other = lists.as_dense(taken), lists.as_dense(other)
  if isinstance(taken, lists.DenseList):
    taken, other = lists.common_capacity([taken, other])
    return lists.DenseList(select_lanes(mask, taken.buffer, other.buffer),
                           select_lanes(mask, taken.lengths, other.lengths))
  shape = tf.concat([tf.shape(mask), tf.ones([tf.rank(taken) - 1], tf.int32)], 0)
  return tf.where(tf.reshape(mask, shape), taken, other)


def gather_rows(value, positions):
  """Rows `positions` of a stacked tensor or DenseList (a UniformList as a DenseList)."""
  return tf.nest.map_structure(lambda t: tf.gather(t, positions), lists.as_dense(value))
