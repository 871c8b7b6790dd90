"""Rewrites that look past one op: sums of per-iteration matrix products as one contraction,
sums of slice gradients as one stack, per-image flips read as mirrored coordinates, and
products of differences with per-example statistics as one compiled call.

A per-example weight gradient is a sum over uses of the weight (e.g. over the time steps of
an RNN) of `matmul(a_t, b_t, transpose_a=True)`. Converted one op at a time, each term is its
own `[n, i, j]` batch matmul, and the sum adds T of them: memory-bound and T times the
traffic. But a sum of products is one product of concatenations: `sum_t a_t^T b_t =
[a_1; ...; a_T]^T [b_1; ...; b_T]`, each operand concatenated along its contracted axis. The
AddN converter asks `sum_of_matmuls` first; the per-term matmuls it no longer needs are
dead code, pruned when the graph runs.
"""

import numpy as np
import tensorflow as tf

from vectorize import compiled_calls
from vectorize import graph_io
from vectorize.values import Value, align_ranks, merge_leading, split_leading, stack, stacked


def sum_of_matmuls(op):
  """One batch matmul for AddN of MatMuls with equal flags and stacked operands, or None.

  Under XLA a sum of outer products (each term contracting one row: a per-example weight
  gradient) is left as it is: XLA turns each product into a multiply and fuses their sum into
  one pass that writes the result once, 0.9x the time of the one batch matmul, whose
  contraction of depth T is slow (per_example_lstm).
  """
  producers = [t.op for t in op.op.inputs]
  if len(producers) < 2 or any(p.type != "MatMul" for p in producers):
    return None
  flags = {(p.get_attr("transpose_a"), p.get_attr("transpose_b")) for p in producers}
  if len(flags) != 1:
    return None
  transpose_a, transpose_b = flags.pop()
  operands = [[op.converted(p.inputs[0]), op.converted(p.inputs[1])] for p in producers]
  if any(v is None or not v.stacked for pair in operands for v in pair):
    return None
  # Per-iteration contracted axes: a's rows if transposed else its columns; b's the other way.
  contracted = 1 if transpose_a else 2
  if op.ctx.target.xla and all(pair[0].tensor.shape[contracted] == 1
                               for pair in operands):
    return None   # outer products: XLA fuses their sum into one elementwise pass
  a = graph_io.concat([pair[0].tensor for pair in operands], axis=contracted)
  b = graph_io.concat([pair[1].tensor for pair in operands], axis=2 if transpose_b else 1)
  return stacked(graph_io.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b))


def sum_of_slice_gradients(op):
  """One stack for AddN of StridedSliceGrads that each fill one index of the same axis, all
  indices once (the gradient of `x[:, t]` for every step t of an unrolled RNN), or None.

  Converted one op at a time, each term is a zero tensor the size of x with one slice set,
  and the sum reads T of them; the stack writes x once.
  """
  producers = [t.op for t in op.op.inputs]
  if len(producers) < 2 or any(p.type != "StridedSliceGrad" for p in producers):
    return None
  first = producers[0]
  shape = tf.get_static_value(first.inputs[0])
  masks = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")
  if shape is None or any(p.get_attr(m) != first.get_attr(m) for p in producers for m in masks):
    return None
  if any(not np.array_equal(tf.get_static_value(p.inputs[0]), shape) for p in producers):
    return None
  shrink, full = first.get_attr("shrink_axis_mask"), first.get_attr("begin_mask")
  if (first.get_attr("ellipsis_mask") or first.get_attr("new_axis_mask") or
      bin(shrink).count("1") != 1 or first.get_attr("end_mask") != full):
    return None
  axis = shrink.bit_length() - 1
  if full != (1 << axis) - 1:       # every axis before the shrunk one taken whole
    return None
  indices = []
  for p in producers:
    begin, strides = (tf.get_static_value(p.inputs[k]) for k in (1, 3))
    if begin is None or strides is None or len(begin) != axis + 1 or any(strides != 1):
      return None
    indices.append(int(begin[axis]) % int(shape[axis]))
  if sorted(indices) != list(range(int(shape[axis]))):
    return None
  terms = [op.converted(p.inputs[4]) for p in producers]
  if any(v is None for v in terms):
    return None
  ordered = [stack(terms[indices.index(t)], op.ctx.n) for t in range(len(indices))]
  return stacked(graph_io.pack(ordered, axis=axis + 1))


def scaled_base(op, k):
  """Body input k of `op` as (stacked base, invariant factors): follows Muls of one stacked
  and one invariant value, each used only on this path, down to the stacked base.

  A backward pass multiplies each stacked cotangent by one forward value after another
  (d c * g, then the sigmoid's derivative, ...); with the forward invariant, the factors
  multiply together once and the stacked cotangent is scaled once.
  """
  t, factors = op.op.inputs[k], []
  base = op.converted(t)
  while t.op.type == "Mul" and len(t.consumers()) == 1 and base is not None:
    a, b = (op.converted(x) for x in t.op.inputs)
    if a is None or b is None or a.stacked == b.stacked:
      break
    s = 0 if a.stacked else 1
    factors.append((b, a)[s])
    t, base = t.op.inputs[s], (a, b)[s]
  return base, factors


def scaled(base, factors):
  """`base * factors[0] * factors[1] * ...` as one stacked product (the factors invariant)."""
  factor = factors[0].tensor
  for f in factors[1:]:
    factor = graph_io.binary("Mul", factor, f.tensor)
  base, factor = align_ranks([base, Value(factor, False)])
  return stacked(graph_io.binary("Mul", base, factor))


def product_chain(op):
  """One stacked product for Mul of a stacked chain of products and an invariant, or None."""
  values = op.inputs
  if values[0].stacked == values[1].stacked:
    return None
  s = 0 if values[0].stacked else 1
  base, factors = scaled_base(op, s)
  if not factors or base is None:
    return None
  return scaled(base, factors + [values[1 - s]])


def columns_of_product(op):
  """For a Slice taking whole rows of `matmul(stacked a, invariant b)` (per iteration), the
  product of `a` with the matching columns of `b`, or None.

  The gradient of `concat([x, h]) @ w` slices one product into the gradients of x and of h;
  as two products, the one feeding the recurrence is smaller and the other runs beside it.
  The columns of `b` are sliced once (invariant); the full product becomes dead code when
  every slice of it is rewritten.
  """
  product = op.op.inputs[0]
  if product.op.type != "MatMul" or op.is_stacked(1) or op.is_stacked(2):
    return None
  if product.op.get_attr("transpose_a"):
    return None
  a, b = (op.converted(t) for t in product.op.inputs)
  rows = product.shape[0]
  if (a is None or b is None or not a.stacked or b.stacked or rows is None or
      op.output_shape()[0] != rows):             # a slice as tall as the product: whole rows
    return None
  transpose_b = product.op.get_attr("transpose_b")
  first, count = _static_begin(op, op.op.inputs[1]), op.output_shape()[1]
  if first is not None and count is not None:     # known now: two shared constants
    first = int(first[1])
  else:
    first, count = op.invariant(1)[1], op.invariant(2)[1]

  def along_b(value, other):
    """A begin or size for b: the product's columns are b's rows if transposed."""
    entries = [value, other] if transpose_b else [other, value]
    return entries if isinstance(value, int) else tf.stack(entries)

  part = graph_io.slice_(b.tensor, along_b(first, 0), along_b(count, -1))
  n = op.ctx.n
  x = graph_io.matmul(merge_leading(a.tensor), part, transpose_b=transpose_b)
  return stacked(split_leading(x, n, rows))


def _static_begin(op, t):
  """A Slice's `begin` known at trace time, or None; sees through the ConcatOffset that a
  concat's gradient slices with, whose shapes are static."""
  value = _known(op, t)
  if value is not None or t.op.type != "ConcatOffset":
    return value
  axis = _known(op, t.op.inputs[0])
  if axis is None and t.op.inputs[0].op.type == "FloorMod":   # the axis, modulo the rank
    x, y = (_known(op, i) for i in t.op.inputs[0].op.inputs)
    axis = None if x is None or y is None else np.mod(x, y)
  shapes = [_static_shape(op, s) for s in t.op.inputs[1:]]
  if axis is None or any(s is None for s in shapes):
    return None
  axis = int(axis) % len(shapes[0])
  offset = np.zeros(len(shapes[0]), np.int64)
  offset[axis] = sum(s[axis] for s in shapes[:t.value_index])
  return offset


def _static_shape(op, t):
  """The value of a shape vector `t` known at trace time (a Shape or ShapeN of a fully
  defined tensor included), or None."""
  value = _known(op, t)
  if value is None and t.op.type in ("Shape", "ShapeN"):
    shape = t.op.inputs[t.value_index if t.op.type == "ShapeN" else 0].shape
    value = shape.as_list() if shape.is_fully_defined() else None
  return value


def _known(op, t):
  """The value of body tensor `t` known at trace time, in the body or as converted (a
  captured constant is a placeholder in the body), or None."""
  value = tf.get_static_value(t)
  if value is None:
    converted = op.converted(t)
    if converted is not None and not converted.stacked:
      value = tf.get_static_value(converted.tensor)
  return value


_LAYOUT_OPS = ("ExpandDims", "Squeeze", "Reshape", "Identity", "EnsureShape")


def conditional_flips(op, images):
  """Body tensor `images` (`[..., h, w, c]` per iteration) as an earlier image under
  per-iteration flips of its rows and columns: (source Value, rows flag, columns flag), each
  flag `[n]` bool or None; or None where `images` is not such a flip.

  Keras RandomFlip picks per image between the image and its reverse, `where(flip,
  reverse(x), x)`, along the rows and then the columns. An op that reads its input at
  computed coordinates (the projective transform) can read the unflipped source at mirrored
  coordinates instead: the reverses and selects, full passes over the batch, never run.
  """
  t, flags = images, {-3: None, -2: None}
  while True:
    if t.op.type in _LAYOUT_OPS and _same_pixels(t.op.inputs[0], t, images.shape[-3:]):
      t = t.op.inputs[0]
      continue
    flip = _conditional_flip(op, t)
    if flip is None:
      break
    t, axis, flag = flip
    flags[axis] = flag if flags[axis] is None else tf.math.logical_xor(flags[axis], flag)
  source = op.converted(t)
  if source is None or flags[-3] is None and flags[-2] is None:
    return None
  return source, flags[-3], flags[-2]


def _same_pixels(a, b, hwc):
  """Whether body tensors a and b hold the same images in the same layout: static shapes
  ending in `hwc`, with the same number of elements (only unit axes differ)."""
  return (a.shape.is_fully_defined() and b.shape.is_fully_defined() and a.shape.rank >= 3
          and hwc.is_fully_defined() and a.shape[-3:] == hwc and b.shape[-3:] == hwc
          and a.shape.num_elements() == b.shape.num_elements())


def _conditional_flip(op, t, axes=(-3, -2)):
  """For `t = where(flag, reverse(x, [axis]), x)` (either order) with one flag per iteration
  and axis one of `axes` (negative; None: any): (x, axis, flag as `[n]` bool); else None."""
  if t.op.type != "SelectV2" or t.shape.rank is None:
    return None
  condition, a, b = t.op.inputs
  if condition.shape.num_elements() != 1 or a.shape != t.shape or b.shape != t.shape:
    return None
  for reversed_, x, picked in ((a, b, True), (b, a, False)):
    if reversed_.op.type != "ReverseV2" or reversed_.op.inputs[0] is not x:
      continue
    reversed_axes = _known(op, reversed_.op.inputs[1])
    if reversed_axes is None or np.size(reversed_axes) != 1:
      continue
    axis = int(np.reshape(reversed_axes, [])) % t.shape.rank - t.shape.rank
    flag = op.converted(condition)
    if axes is not None and axis not in axes or flag is None:
      continue
    n = op.ctx.n
    flag = (tf.reshape(flag.tensor, [-1]) if flag.stacked else
            tf.fill(tf.reshape(n, [1]), tf.reshape(flag.tensor, [])))
    return x, axis, flag if picked else tf.logical_not(flag)
  return None


@compiled_calls.compiled_on_cpu
def _scaled_sum(a, b, factor, subtract):
  return ((a - b) if subtract else (a + b)) * factor


def scaled_difference(op):
  """For Mul of `a - b` (or `a + b`) by a factor, where a or b repeats along inner axes
  between axes it varies along (a per-image statistic against the image, `[n, 1, 1, 3]`
  against `[n, h, w, 3]`, as normalizations and Keras RandomContrast compute it): the
  product as one XLA-compiled call on CPU, or None.

  TF's CPU kernels broadcast such shapes element by element: at batch 128 of 64x64x3 images
  the difference took 4x the time of one of equal shapes. Compiled, the difference and the
  product are one pass, with the kernels' IEEE results (no op is contracted with another).
  """
  for k in (0, 1):
    t = op.op.inputs[k]
    if t.op.type not in ("Sub", "AddV2") or len(t.consumers()) != 1:
      continue
    a, b = (op.converted(x) for x in t.op.inputs)
    if a is None or b is None or not (a.stacked or b.stacked):
      continue
    a, b, factor = align_ranks([a, b, op.value(1 - k)])
    if (_broadcasts_inside([a.shape, b.shape], [a.shape, b.shape, factor.shape]) and
        op.attr("T") in (tf.float32, tf.float64) and not op.ctx.target.xla):
      return stacked(_scaled_sum(a, b, factor, t.op.type == "Sub"))
  return None


def _broadcasts_inside(operands, shapes):
  """Whether one of `operands` (static shapes) repeats along an axis of the broadcast of
  `shapes` and varies along axes both before and after it (runs of kept / repeated axes:
  three or more), which TF's CPU kernels broadcast slowly."""
  if any(s.rank is None for s in shapes):
    return False
  rank = max(s.rank for s in shapes)
  padded = [[1] * (rank - s.rank) + s.as_list() for s in shapes]
  wide = [any(d != 1 for d in dims) for dims in zip(*padded)]
  for shape in operands:
    dims = [1] * (rank - shape.rank) + shape.as_list()
    runs = [d != 1 for d, w in zip(dims, wide) if w]
    if sum(x != y for x, y in zip(runs, runs[1:])) >= 2:
      return True
  return False


@compiled_calls.compiled_on_cpu
def _flip(x, flag, axis):
  flag = tf.reshape(flag, tf.concat([[-1], tf.ones([tf.rank(x) - 1], tf.int32)], 0))
  return tf.where(flag, tf.reverse(x, [axis]), x)


def conditional_flip(op):
  """For SelectV2 of x and its reverse along one axis by one flag per iteration (Keras
  RandomFlip without a transform after it to read mirrored pixels): one XLA-compiled pass
  on CPU, or None. TF's CPU kernels reverse every image, then pick; reversing the columns
  of `[h, w, 3]` images, a small axis after the reversed one, goes element by element: at
  batch 128 of 64x64x3 images the two took about 4x the time of the compiled pass."""
  flip = _conditional_flip(op, op.op.outputs[0], axes=None)
  if flip is None or op.ctx.target.xla:
    return None
  x, axis, flag = flip
  x = op.converted(x)
  return None if x is None else stacked(_flip(stack(x, op.ctx.n), flag, axis))
