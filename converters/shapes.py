"""Shape ops: identity, reshape, transpose, expand/squeeze, concat, pack, pad, tile, ...

The trick: the loop axis is axis 0 of every stacked tensor, so a per-iteration axis `a`
becomes `a + 1` (negative axes count from the end and stay), a per-iteration shape `s`
becomes `[n] + s`, a permutation `p` becomes `[0] + (p + 1)` and paddings gain a `[0, 0]`
row. Ops that only read their input's shape (Shape, Size, ZerosLike, ...) give invariant
results. Shape-like inputs (reshape targets, multiples, paddings, perms) that differ per
iteration would make per-iteration output shapes differ, so they raise Unvectorizable.
"""

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import tensor_util
from tensorflow.python.ops import handle_data_util

from converters import ragged_producers
from vectorize import ragged
from vectorize import values
from vectorize.errors import Unvectorizable
from vectorize.family import (register_axis_shift, register_invariant_output,
                              register_leading_batch)
from vectorize.lists import DenseList, UniformList
from vectorize.op_input import OpInput
from vectorize.registry import register
from vectorize.values import Value, stacked


# ----------------------------------------------------------------------------- helpers

def _with_loop_len(op, shape):
  """`s -> [n] + s` for a per-iteration shape vector (numpy value or tensor)."""
  return values.prepend_loop_length(shape, op.ctx.n, op.ctx.static_n)


def _shifted_axes(op, i):
  """Invariant axis input i (scalar or vector) moved past the loop axis; numpy if static."""
  axis = op.invariant(i)
  static = tf.get_static_value(axis)
  if static is None:
    return values.shift_axis(axis)
  static = np.asarray(static)
  return np.where(static >= 0, static + 1, static).astype(static.dtype)


def _shifted_dims_attr(dims):
  """A list attr of per-iteration axes, moved past the loop axis."""
  return [values.shift_axis(d) for d in dims]


def _rank_of(shape, run_time_rank):
  """The rank of a per-iteration static shape, or `run_time_rank()` (a scalar tensor) when
  the static rank is unknown."""
  return shape.rank if shape.rank is not None else run_time_rank()


def _broadcast_scalar(op, i, out_rank):
  """Scalar input i as a tensor broadcasting against a stacked rank-`out_rank` result."""
  v = op.value(i)
  return values.expand_after_loop_axis(v.tensor, out_rank) if v.stacked else v.tensor


def _stack_all(op, indices):
  """Inputs `indices` with the loop axis; only the invariant ones are tiled."""
  return [op.stacked(i) for i in indices]


# ----------------------------------------------------------------------------- identity-like

@register("CheckNumerics", "CheckNumericsV2", "Identity", "PreventGradient", "Snapshot",
          "StopGradient")
def _convert_identity(op):
  """Passes the value through, stacked or not (kept as an op so gradients stop where asked).

  A plain Identity (no device, no control inputs) emits nothing: the body's identities
  (while_loop wraps every loop variable in one) would otherwise run in every step of an
  emitted loop. A stacked TensorList (a `DenseList` of tensors) passes field by field.
  """
  v = op.value(0)
  if op.type == "Identity" and not op.op.device and not op.op.control_inputs:
    return v
  if isinstance(v.tensor, (DenseList, UniformList)):
    passed = [op.rebuild([t], {"T": t.dtype})[0] for t in v.tensor]
    for before, after in zip(v.tensor, passed):
      if before.dtype == tf.variant:
        handle_data_util.copy_handle_data(before, after)
    return Value(type(v.tensor)(*passed), True)
  return Value(op.rebuild([v.tensor], {"T": v.tensor.dtype})[0], v.stacked)


@register("PlaceholderWithDefault")
def _convert_placeholder_with_default(op):
  """Passes the value through as a value Grappler cannot fold, as in the body (a guard's
  branch index, `control_flow/cond.py`, which a pfor inside a pfor's body emits)."""
  v = op.value(0)
  return Value(tf.raw_ops.PlaceholderWithDefault(input=v.tensor, shape=v.tensor.shape),
               v.stacked)


@register("IdentityN")
def _convert_identity_n(op):
  """Each output keeps its input's stackedness."""
  outs = op.rebuild([v.tensor for v in op.inputs], {"T": [v.tensor.dtype for v in op.inputs]})
  return [Value(t, v.stacked) for t, v in zip(outs, op.inputs)]


@register("EnsureShape")
def _convert_ensure_shape(op):
  """Checks `[n] + shape` on the stacked input."""
  shape = tf.TensorShape([op.ctx.static_n]).concatenate(tf.TensorShape(op.attr("shape")))
  return stacked(op.rebuild([op.stacked(0)], {"shape": shape})[0])


# ----------------------------------------------------------------------------- reshaping

def _resolved_shape(sizes, in_shape):
  """The per-iteration shape `tf.reshape(x, sizes)` produces, with -1 resolved as TF does.

  `in_shape` is x's per-iteration shape (known even when n is 0, unlike dividing the stacked
  element count by n). Zero dims are left out of both products when `sizes` has one.
  """
  minus_one = tf.equal(sizes, -1)
  has_zero = tf.reduce_any(tf.equal(sizes, 0))
  known = tf.where(minus_one | tf.equal(sizes, 0), tf.ones_like(sizes), sizes)
  counted = tf.where(has_zero & tf.equal(in_shape, 0), tf.ones_like(in_shape), in_shape)
  missing = tf.reduce_prod(counted) // tf.reduce_prod(known)
  return tf.where(minus_one, missing, sizes)


@register("Reshape")
def _convert_reshape(op):
  """`[n] + s` reshape; -1 in s is resolved per iteration, never left to the stacked reshape.
  A shape the traced graph knows fully is used as it is, even where the shape input differs
  per iteration (a gradient's shape computed from a ragged value's)."""
  x = op.stacked(0)
  out_shape = op.output_shape(0)
  if out_shape.is_fully_defined():
    shape = np.array(out_shape.as_list(), op.op.inputs[1].dtype.as_numpy_dtype)
    return stacked(tf.reshape(x, _with_loop_len(op, shape)))
  sizes = op.invariant(1)
  static_sizes = tf.get_static_value(sizes)
  if static_sizes is not None and not np.any(np.asarray(static_sizes) == -1):
    shape = static_sizes
  else:
    shape = _resolved_shape(sizes, tf.shape(x, out_type=sizes.dtype)[1:])
  return stacked(tf.reshape(x, _with_loop_len(op, shape)))


def _squeeze_at_run_time(x):
  """Every per-iteration unit dim dropped, found at run time (never the loop axis)."""
  shape = tf.shape(x)
  kept = tf.boolean_mask(shape[1:], tf.not_equal(shape[1:], 1))
  return tf.reshape(x, tf.concat([shape[:1], kept], 0))


@register("Squeeze")
def _convert_squeeze(op):
  """Shifts `squeeze_dims`; with none given, names the per-iteration unit dims (never axis 0)."""
  dims = op.attr("squeeze_dims")
  if not dims:
    shape = op.input_shape(0)
    if shape.rank is None or any(d is None for d in shape.as_list()):
      return stacked(_squeeze_at_run_time(op.stacked(0)))
    dims = [k for k, d in enumerate(shape.as_list()) if d == 1]
    if not dims:   # nothing to squeeze; an empty attr would squeeze the loop axis if n == 1
      return stacked(op.stacked(0))
  return stacked(op.rebuild([op.stacked(0)], {"squeeze_dims": _shifted_dims_attr(dims)})[0])


@register("Transpose", "ConjugateTranspose")
def _convert_transpose(op):
  """Keeps the loop axis first: `perm -> [0] + (perm + 1)`."""
  perm = op.invariant(1)
  static = tf.get_static_value(perm)
  if static is not None:
    new_perm = np.concatenate([[0], np.asarray(static) + 1]).astype(perm.dtype.as_numpy_dtype)
  else:
    new_perm = tf.concat([tf.zeros([1], perm.dtype), perm + 1], 0)
  return stacked(op.rebuild([op.stacked(0), new_perm])[0])


@register("Tile")
def _convert_tile(op):
  """`multiples -> [1] + multiples`; per-iteration multiples give a ragged value."""
  if op.is_stacked(1):
    return ragged_producers.tile_per_iteration(op)
  multiples = tf.convert_to_tensor(op.invariant(1))
  new_multiples = tf.concat([tf.ones([1], multiples.dtype), multiples], 0)
  return stacked(op.rebuild([op.stacked(0), new_multiples])[0])


@register("BroadcastTo")
def _convert_broadcast_to(op):
  """Pads the stacked input's rank after the loop axis, then broadcasts to `[n] + shape`
  (ranks known only at run time pad at run time)."""
  shape = op.invariant(1)
  out_rank = shape.shape[0] if shape.shape[0] is not None else tf.size(shape)
  x = values.expand_after_loop_axis(op.stacked(0), out_rank - values.per_iteration_rank(
      op.value(0)))
  return stacked(tf.broadcast_to(x, _with_loop_len(op, shape)))


@register("Fill")
def _convert_fill(op):
  """A stacked scalar value: reshape it to `[n, 1, ..., 1]` and broadcast to `[n] + dims`.
  Dims that differ per iteration in their first axis only (`tf.zeros([k])`, `tf.ones_like`
  of a ragged value): a ragged value, as the loop's are."""
  if op.is_stacked(0):
    return _fill_of_per_iteration_length(op)
  dims = op.invariant(0)
  value = op.stacked(1)
  unit = _with_loop_len(op, tf.ones_like(dims))
  return stacked(tf.broadcast_to(tf.reshape(value, unit), _with_loop_len(op, dims)))


def _fill_of_per_iteration_length(op):
  out_shape = op.output_shape(0)
  if not ragged.first_dim_varies(out_shape):
    raise Unvectorizable("per-iteration dims that the graph leaves unknown past the first "
                         "axis")
  op.ctx.target.require_dynamic_shapes(op.op, "tf.fill (tf.zeros, tf.ones) of a size that "
                                       "differs per iteration")
  lengths = tf.cast(op.stacked(0), tf.int32)[:, 0]
  rest = tf.constant(out_shape[1:].as_list(), tf.int32)   # the same in every iteration
  rows = ragged.RaggedRows(tf.zeros([0]), lengths)
  shape = tf.concat([tf.reshape(tf.reduce_sum(lengths), [1]), rest], 0)
  value = op.value(1)
  if value.stacked:   # each row the value of its iteration
    row_values = tf.reshape(tf.gather(value.tensor, rows.row_ids),
                            tf.concat([[-1], tf.ones_like(rest)], 0))
    return ragged.ragged(tf.broadcast_to(row_values, shape), lengths)
  return ragged.ragged(tf.fill(shape, value.tensor), lengths)


# ----------------------------------------------------------------------------- joining, splitting

@register("ConcatV2")
def _convert_concat_v2(op):
  """Concatenates stacked pieces (invariant ones tiled) on the shifted axis."""
  num = op.num_inputs - 1
  return stacked(op.rebuild(_stack_all(op, range(num)) + [_shifted_axes(op, num)])[0])


@register("Concat")
def _convert_concat(op):
  """ConcatV2 with the axis first."""
  num = op.num_inputs - 1
  return stacked(op.rebuild([_shifted_axes(op, 0)] + _stack_all(op, range(1, num + 1)))[0])


@register("Pack")
def _convert_pack(op):
  """Packs stacked pieces (invariant ones tiled) on the shifted axis."""
  return stacked(op.rebuild(_stack_all(op, range(op.num_inputs)),
                            {"axis": values.shift_axis(op.attr("axis"))})[0])


@register("Split")
def _convert_split(op):
  """Splits the stacked value on the shifted axis; every piece keeps the loop axis."""
  return [stacked(t) for t in op.rebuild([_shifted_axes(op, 0), op.stacked(1)])]


@register("SplitV")
def _convert_split_v(op):
  """As Split; the sizes (-1 included) are per-iteration and stay."""
  return [stacked(t) for t in op.rebuild([op.stacked(0), op.invariant(1),
                                          _shifted_axes(op, 2)])]


@register("ConcatOffset")
def _convert_concat_offset(op):
  """Offsets of each piece: the running sum of the earlier pieces' sizes on `concat_dim`.

  Stacked shapes are `[n, r]`; invariant ones `[r]` broadcast against them. The op's
  consistency checks are not repeated.
  """
  shapes = [op.value(i).tensor for i in range(1, op.num_inputs)]
  r = op.input_shape(1)[0]
  if r is None:
    raise Unvectorizable("ConcatOffset's shape vectors have unknown length")
  dim = op.value(0).tensor
  dim = tf.where(dim < 0, dim + r, dim)
  mask = tf.one_hot(dim, r, dtype=shapes[0].dtype)   # [r] or [n, r]
  offset = tf.zeros_like(mask[..., :1])
  outs = []
  for s in shapes:
    outs.append(offset * mask)
    offset = offset + tf.reduce_sum(s * mask, -1, keepdims=True)
  n_shape = _with_loop_len(op, [r])
  return [stacked(tf.broadcast_to(o, n_shape)) for o in outs]


# ----------------------------------------------------------------------------- padding

def _paddings_with_loop_row(op, i):
  """Invariant paddings input i `[r, 2] -> [r + 1, 2]`, no padding on the loop axis."""
  paddings = tf.convert_to_tensor(op.invariant(i))
  return tf.concat([tf.zeros([1, 2], paddings.dtype), paddings], 0)


@register("Pad")
def _convert_pad(op):
  """Pads nothing on the loop axis; per-iteration paddings place each iteration's values."""
  if op.is_stacked(1):
    _refuse_unknown_paddings_at_n0(op)
    return stacked(pad_per_iteration(op.stacked(0), op.stacked(1), op.output_shape(0),
                                     op.op.name, op.ctx.target.static_shapes))
  return stacked(op.rebuild([op.stacked(0), _paddings_with_loop_row(op, 1)])[0])


def pad_per_iteration(x, paddings, out_shape, name="tf.pad", static_shapes=False,
                      mode="CONSTANT"):
  """`x` `[n, ...]` padded by paddings `[n, r, 2]` that differ per iteration (the gradient
  of a slice at a per-iteration begin): zeros, or with `mode` "REFLECT" / "SYMMETRIC" its
  mirror image. The results stack only where each dim grows by the same total in every
  iteration (checked where `out_shape`, per iteration, does not know the dim: at run time,
  or with `static_shapes` (XLA, which drops run-time checks) by a reshape that fails to
  compile unless the totals agree); dim by dim, each output position gathers the value
  `before` places back, its mirror, or a zero appended past the end. Dims stay static where
  `out_shape` has them, as XLA needs."""
  rank = paddings.shape[1] if paddings.shape[1] is not None else values.rank(x) - 1
  paddings = tf.cast(paddings, tf.int32)
  for d in range(rank):
    axis = d + 1
    size = tf.shape(x)[axis]
    if out_shape.rank is not None and out_shape[d] is not None:
      out_size = out_shape[d]
    else:   # the same in every iteration; with n = 0 no iteration says it: 0
      out_size = size + ragged.agreed(tf.reduce_sum(paddings[:, d], 1),
                                      f"vectorize: {_unequal_paddings(name, d)}",
                                      static_shapes=static_shapes)
    source = tf.range(out_size)[tf.newaxis, :] - paddings[:, d, 0][:, tf.newaxis]
    if mode == "CONSTANT":
      x = tf.pad(x, [[0, 0]] * axis + [[0, 1]] + [[0, 0]] * (rank - axis))   # the zero
      source = tf.where((source >= 0) & (source < size), source, size)    # [n, out_size]
    else:   # the kernel checks the paddings (REFLECT: < size, SYMMETRIC: <= size)
      shift = 0 if mode == "REFLECT" else 1
      source = tf.where(source < 0, -source - shift, source)
      source = tf.where(source >= size, 2 * size - 2 + shift - source, source)
    x = tf.gather(x, source, axis=axis, batch_dims=1)
  return x


def _refuse_unknown_paddings_at_n0(op):
  if op.ctx.static_n == 0 and not op.output_shape(0).is_fully_defined():
    raise Unvectorizable("per-iteration paddings with no iteration: nothing says how much "
                         "they add")


def _mirror_pad_per_iteration(op):
  _refuse_unknown_paddings_at_n0(op)
  mode = op.attr("mode").decode()
  x, paddings = op.stacked(0), tf.cast(op.stacked(1), tf.int32)
  limit = tf.shape(x)[1:] - (1 if mode == "REFLECT" else 0)             # [r]
  valid = (paddings >= 0) & (paddings <= limit[tf.newaxis, :, tf.newaxis])
  # 1 where every padding is valid (checked as XLA too can check it): scales the paddings.
  one = ragged.agreed(tf.concat([[1], tf.cast(tf.reshape(valid, [-1]), tf.int32)], 0),
                      f"vectorize: {op.op.name}: tf.pad {mode} needs paddings between 0 and "
                      f"the size{' - 1' if mode == 'REFLECT' else ''} of their axis",
                      static_shapes=op.ctx.target.static_shapes)
  return stacked(pad_per_iteration(x, paddings * one, op.output_shape(0), op.op.name,
                                   op.ctx.target.static_shapes, mode))


def _unequal_paddings(name, d):
  return (f"{name}: the paddings of axis {d} add a different total in some iterations, "
          "which pfor does not hold here. To fix: pad every iteration to one size (and keep "
          "each one's length beside it), or run the body sequentially")


@register("MirrorPad", "MirrorPadGrad")
def _convert_mirror_pad(op):
  """Adds a zero padding row; an empty loop axis gets an empty result without running the op.
  Per-iteration paddings of a MirrorPad: each output position gathers its mirrored source
  (`pad_per_iteration`), the paddings checked as TensorFlow's kernel checks them.

  The kernels check every dim against its padding (REFLECT needs padding < size), which a
  zero padding of an empty loop axis fails although nothing is padded.
  """
  if op.is_stacked(1) and op.type == "MirrorPad":
    return _mirror_pad_per_iteration(op)
  x = op.stacked(0)
  paddings = _paddings_with_loop_row(op, 1)
  sign = 1 if op.type == "MirrorPad" else -1

  def pad():
    return op.rebuild([x, paddings])[0]

  def empty():
    return tf.zeros(tf.shape(x, out_type=paddings.dtype) + sign * tf.reduce_sum(paddings, 1),
                    x.dtype)

  if op.ctx.static_n is not None:
    return stacked(empty() if op.ctx.static_n == 0 else pad())
  return stacked(tf.cond(op.ctx.n > 0, pad, empty))


@register("PadV2")
def _convert_pad_v2(op):
  """A stacked pad value: pad with zeros, then select the value where a mask was padded."""
  paddings = _paddings_with_loop_row(op, 1)
  if not op.is_stacked(2):
    return stacked(op.rebuild([op.stacked(0), paddings, op.invariant(2)])[0])
  x = op.stacked(0)
  padded = tf.pad(x, paddings)
  inside = tf.pad(tf.ones(tf.shape(x)[1:], tf.bool), op.invariant(1))
  out_rank = _rank_of(op.input_shape(0), lambda: tf.shape(op.invariant(1))[0])
  return stacked(tf.where(inside, padded, _broadcast_scalar(op, 2, out_rank)))


# ----------------------------------------------------------------------------- other

@register("OneHot")
def _convert_one_hot(op):
  """Shifts `axis`; stacked on/off values select from a boolean one-hot."""
  depth = op.invariant(1)
  axis = values.shift_axis(op.attr("axis"))
  indices = op.value(0)
  if not (op.is_stacked(2) or op.is_stacked(3)):
    return stacked(op.rebuild([op.stacked(0), depth, op.invariant(2), op.invariant(3)],
                              {"axis": axis})[0])
  if indices.stacked:
    hot = tf.one_hot(indices.tensor, depth, True, False, axis=axis, dtype=tf.bool)
  else:
    hot = tf.one_hot(indices.tensor, depth, True, False, axis=op.attr("axis"), dtype=tf.bool)
  out_rank = _rank_of(op.output_shape(0), lambda: tf.rank(hot) - int(indices.stacked))
  return stacked(tf.where(hot, _broadcast_scalar(op, 2, out_rank),
                          _broadcast_scalar(op, 3, out_rank)))


@register("ReverseV2")
def _convert_reverse_v2(op):
  """Reverses a view of the stacked input in which each run of neighbouring axes that are
  all reversed, or all kept, is merged into one axis (the loop axis joins the first kept
  run). TF's kernel is fast at rank <= 3 and slow above: a horizontal flip of `[n, 1, h, w,
  c]` images took 6x the time of the same reverse on `[n*h, w, c]`."""
  x = op.stacked(0)
  axes = tf.get_static_value(op.invariant(1))
  rank = x.shape.rank
  flat_axes = None if axes is None or rank is None else np.ravel(axes)
  if flat_axes is None or rank == 1 or len(set(flat_axes % (rank - 1))) != len(flat_axes):
    return stacked(tf.reverse(x, _shifted_axes(op, 1)))   # dynamic, or the kernel's error
  reversed_axes = {int(a) % (rank - 1) + 1 for a in flat_axes}
  return stacked(reverse_merged(x, [k in reversed_axes for k in range(rank)]))


def reverse_merged(x, flags):
  """`tf.reverse` of `x` on the axes whose flag is set, done on the merged view."""
  dims = values.dynamic_shape(x)
  groups = []                     # [flag, dims of the run]
  for flag, dim in zip(flags, dims):
    if groups and groups[-1][0] == flag:
      groups[-1][1].append(dim)
    else:
      groups.append([flag, [dim]])
  if len(groups) == len(dims):
    return tf.reverse(x, [k for k, flag in enumerate(flags) if flag])
  view = values.reshape(x, [values.product(run) for _, run in groups])
  view = tf.reverse(view, [k for k, (flag, _) in enumerate(groups) if flag])
  return values.reshape(view, dims)


@register("ReverseSequence")
def _convert_reverse_sequence(op: OpInput) -> Value:
  """Folds the loop axis into the op's batch axis, and the lengths with it:
  `[n, b, ...] -> [n*b, ...]`. A batch axis after the first is moved first, and back."""
  x, lengths = op.stacked(0), op.stacked(1)
  batch, seq = op.attr("batch_dim") + 1, op.attr("seq_dim") + 1   # axes of the stacked x
  order = [0, batch] + [k for k in range(1, x.shape.rank) if k != batch]
  x = tf.transpose(x, order) if batch != 1 else x
  n, b = values.loop_length(op.ctx), values.dynamic_shape(x)[1]
  reversed_ = tf.reverse_sequence(values.merge_leading(x), values.merge_leading(lengths),
                                  seq_axis=order.index(seq) - 1, batch_axis=0)
  reversed_ = values.split_leading(reversed_, n, b)
  return stacked(tf.transpose(reversed_, np.argsort(order)) if batch != 1 else reversed_)


@register("Reverse")
def _convert_reverse(op):
  """As ReverseV2 on the shifted axes (Reverse itself rejects an empty axis 0, i.e. n = 0)."""
  dims = op.static_value(1)
  return stacked(tf.reverse(op.stacked(0), [k + 1 for k in np.flatnonzero(dims)]))


@register("InvertPermutation")
def _convert_invert_permutation(op):
  """Scatters `j` to `[i, x[i, j]]`: `[n, k] -> [n, k]`. Invalid permutations are not caught."""
  x = op.stacked(0)
  shape = tf.shape(x, out_type=x.dtype)
  rows = tf.broadcast_to(tf.expand_dims(tf.range(shape[0]), 1), shape)
  positions = tf.broadcast_to(tf.range(shape[1]), shape)
  return stacked(tf.scatter_nd(tf.stack([rows, x], -1), positions, shape))


@register("BroadcastArgs")
def _convert_broadcast_args(op):
  """Left-pads both shapes with ones to one length; then each dim is the non-one of the pair.

  Incompatible shapes are not reported (the op itself would fail).
  """
  lengths = [op.input_shape(i)[0] for i in range(2)]
  if None in lengths:
    raise Unvectorizable("BroadcastArgs needs shape vectors of known length")
  length = max(lengths)
  padded = []
  for i in range(2):
    v = op.value(i)
    ones_shape = ([op.ctx.n] if v.stacked else []) + [length - lengths[i]]
    ones = tf.ones(tf.stack(ones_shape), v.dtype)
    padded.append(tf.concat([ones, v.tensor], -1))
  a, b = padded
  return stacked(tf.where(tf.equal(a, 1), b, a))


@register("BroadcastGradientArgs")
def _convert_broadcast_gradient_args(op):
  """The axes each operand's gradient sums over, where the shapes differ per iteration (a
  ragged operand broadcast against another: `x[L, d] * m[L, 1]`), known at trace time as
  the gradient's reductions need. They depend only on which dims are 1: the op runs on one
  shape per operand standing for every iteration, with a 1 where the graph knows the dim is
  1, else a 2. Where both operands are 1 in some iteration the op's own answer may differ,
  but a sum over an axis of size 1 then reshaped to the operand's shape does not: so only
  where every use is that (a gradient's `reshape(reduce_sum(g, axes), shape)`). An iteration
  where an operand the graph does not know to be 1 is 1 against another that is not would
  need other axes: checked at run time.
  """
  if not _summed_then_reshaped(op.op):
    raise Unvectorizable("per-iteration shapes whose reduction axes may differ per iteration, "
                         "used other than by a gradient's sum and reshape")
  known = [tensor_util.constant_value_as_shape(op.op.inputs[i]) for i in range(2)]
  if any(k.rank is None for k in known):
    raise Unvectorizable("BroadcastGradientArgs needs shape vectors of known length")
  lengths = [k.rank for k in known]
  length = max(lengths)
  standing = [[1 if d == 1 else 2 for d in k.as_list()] for k in known]
  ones = []
  for i in range(2):
    v = op.value(i)
    shape = v.tensor if v.stacked else tf.broadcast_to(v.tensor, [op.ctx.n, lengths[i]])
    padding = tf.ones(tf.stack([op.ctx.n, length - lengths[i]]), shape.dtype)
    ones.append(tf.equal(tf.concat([padding, shape], 1), 1))     # [n, length]
  assumed_not_one = [np.array([1] * (length - lengths[i]) + standing[i]) == 2
                     for i in range(2)]
  wrong = tf.reduce_any([ones[i] & assumed_not_one[i] & tf.logical_not(ones[1 - i])
                         for i in range(2)])
  tf.debugging.Assert(tf.logical_not(wrong), [
      f"vectorize: {op.op.name}: an operand is broadcast (size 1) along an axis in some "
      "iterations only, where the graph does not know its size; give that axis a static "
      "size (tf.ensure_shape) or broadcast explicitly (tf.broadcast_to)"])
  with tf.init_scope():
    axes = tf.raw_ops.BroadcastGradientArgs(
        s0=tf.constant(standing[0], op.op.inputs[0].dtype),
        s1=tf.constant(standing[1], op.op.inputs[1].dtype))
  return [values.invariant(tf.constant(a.numpy())) for a in axes]


def _summed_then_reshaped(op):
  """Whether every use of op's outputs is a Sum over them whose every use is a Reshape."""
  for t in op.outputs:
    for sum_op in t.consumers():
      if sum_op.type != "Sum" or sum_op.inputs[1] is not t:
        return False
      if not all(c.type == "Reshape" for c in sum_op.outputs[0].consumers()):
        return False
  return True


def _shape_like(op, shape):
  return tf.cast(shape, op.attr("out_type"))


@register("ShapeN")
def _convert_shape_n(op):
  """Each input's per-iteration shape, invariant."""
  out = []
  for v in op.inputs:
    shape = tf.shape(v.tensor)[1:] if v.stacked else tf.shape(v.tensor)
    out.append(values.invariant(_shape_like(op, shape)))
  return out


@register("ZerosLike")
def _convert_zeros_like(op):
  """Zeros of the per-iteration shape, invariant. Of a per-iteration TensorList (the
  gradient of a loop zeroes its accumulators): a list of the same lengths whose elements
  are zeros."""
  v = op.value(0)
  if isinstance(v.tensor, DenseList):
    return Value(DenseList(tf.zeros_like(v.tensor.buffer), v.tensor.lengths), True)
  if isinstance(v.tensor, UniformList):
    zeros = tf.zeros_like(v.tensor.handle)
    handle_data_util.copy_handle_data(v.tensor.handle, zeros)
    return Value(UniformList(zeros, v.tensor.n), True)
  dtype = op.attr("T")
  if dtype == tf.variant and v.tensor.dtype != tf.variant:   # an Optional held as its value
    dtype = v.tensor.dtype
  elif dtype == tf.variant:
    raise Unvectorizable("zeros of a variant need its per-iteration contents")
  shape = tf.shape(v.tensor)[1:] if v.stacked else tf.shape(v.tensor)
  return values.invariant(tf.zeros(shape, dtype))


def _ones(op, shape):
  return tf.ones(shape, op.attr("T"))


def _rank(op, shape):
  del op
  return tf.size(shape)


def _size(op, shape):
  return tf.reduce_prod(_shape_like(op, shape))


# ----------------------------------------------------------------------------- table

register_leading_batch("Bitcast")
register_axis_shift("ExpandDims", axis_input=1)
register_invariant_output("OnesLike", per_iteration=_ones)
register_invariant_output("Rank", per_iteration=_rank)
register_invariant_output("Shape", per_iteration=_shape_like)
register_invariant_output("Size", per_iteration=_size)
register_axis_shift("Unpack", axis_attr="axis")
