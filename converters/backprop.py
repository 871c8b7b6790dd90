"""Gradient ops whose forward values are invariant and whose cotangents are stacked.

This is the pattern of a jacobian (and of any pfor over output gradients): the forward pass
runs once, outside the loop, and each iteration pulls its own cotangent back through it.
The gradient kernels want equal input shapes, so converted one op at a time they tile the
forward values to every iteration (ReluGrad, SigmoidGrad, TanhGrad), or redo a max pool's
argmax search per iteration (MaxPoolGrad). Instead, each converter here computes the local
derivative once, at the forward value's own shape, and applies it to the stacked cotangents
by broadcasting. Other stacking patterns re-emit the op on stacked inputs.

Each op registers in its family's table (the activation gradients in `elementwise.py`,
MaxPoolGrad in `nn.py`); this module holds the tricks.
"""

import tensorflow as tf

from converters import fusions
from vectorize import graph_io
from vectorize import values
from vectorize.family import fold_into_batch, unless_empty
from vectorize.values import stacked


def _rebuilt(op):
  """The op re-emitted on stacked inputs (equal shapes, as the kernels need)."""
  return [stacked(t) for t in op.rebuild([op.stacked(i) for i in range(op.num_inputs)])]


def _scaled(op, forward, cotangent, factor_fn):
  """`cotangent * factor_fn(forward)` when only the cotangent is stacked, else None; a
  cotangent that is itself a stacked value times invariants is scaled once (fusions.py)."""
  if op.is_stacked(forward) or not op.is_stacked(cotangent):
    return None
  base, factors = fusions.scaled_base(op, cotangent)
  factor = values.Value(factor_fn(op.value(forward).tensor), False)
  return [fusions.scaled(base or op.value(cotangent), factors + [factor])]


def relu_grad(op):
  """gradients * (features > 0), the mask cast once at the forward value's shape: the
  kernel's own product (an infinite cotangent where features <= 0 gives NaN, as there), and
  half a select's time on CPU. After a max pool's routing select, the relu mask joins that
  select's mask instead (one pass over the stacked cotangents, not two)."""
  if op.is_stacked(1) or not op.is_stacked(0):
    return _rebuilt(op)
  mask, g = values.align_ranks([values.Value(op.value(1).tensor > 0, False), op.value(0)])
  if _is_kept_where(g):
    return [stacked(_kept_where(mask, g))]
  return [stacked(_mul(g, tf.cast(mask, g.dtype)))]


def sigmoid_grad(op):
  """dy * y * (1 - y), the factor computed once from the invariant y."""
  return _scaled(op, 0, 1, lambda y: _mul(y, _sub(1, y))) or _rebuilt(op)


def tanh_grad(op):
  """dy * (1 - y^2), the factor computed once from the invariant y."""
  return _scaled(op, 0, 1, lambda y: _sub(1, _mul(y, y))) or _rebuilt(op)


def _mul(x, y):
  return graph_io.binary("Mul", x, y)


def _sub(x, y):
  return graph_io.binary("Sub", x, y)


def max_pool_grad(op):
  """With the forward invariant and windows that tile the input (ksize == strides), the
  gradient is each output gradient copied over its window, kept only at the window's
  routing position: `MaxPoolGrad(x, y, ones)` run once marks the same (first) maximum the
  kernel picks. Otherwise the loop axis folds into the batch (oneDNN's kernel aborts on an
  empty batch, hence `unless_empty`)."""
  routed = _tiled_max_pool_grad(op)
  if routed is not None:
    return routed
  return unless_empty(op, lambda op: fold_into_batch(op, (0, 1, 2)))


def _tiled_max_pool_grad(op):
  x_shape = op.input_shape(0)
  ksize, strides = list(op.attr("ksize")), list(op.attr("strides"))
  if (op.is_stacked(0) or op.is_stacked(1) or not op.is_stacked(2) or
      op.attr("data_format") != b"NHWC" or ksize != strides or ksize[0] != 1 or
      ksize[3] != 1 or not x_shape[1:3].is_fully_defined() or
      not op.input_shape(2)[1:3].is_fully_defined()):
    return None
  x, y = op.value(0).tensor, op.value(1).tensor
  routing = tf.raw_ops.MaxPoolGrad(orig_input=x, orig_output=y, grad=tf.ones_like(y),
                                   ksize=ksize, strides=strides, padding=op.attr("padding"))
  (h, w), (kh, kw) = x_shape[1:3].as_list(), ksize[1:3]
  (oh, ow) = op.input_shape(2)[1:3].as_list()
  g = op.value(2).tensor                                      # [n, b, oh, ow, c]
  shape = values.dynamic_shape(g)
  up = tf.broadcast_to(g[:, :, :, None, :, None, :], shape[:3] + [kh] + shape[3:4] +
                       [kw] + shape[4:])
  up = tf.reshape(up, shape[:2] + [oh * kh, ow * kw] + shape[4:])
  up = _fit(_fit(up, 2, h, oh * kh), 3, w, ow * kw)
  return [stacked(_kept_where(routing > 0, up))]


def _kept_where(mask, g):
  """`g` where `mask` holds, else 0. When `g` is itself such a select (a max pool's routing
  then the relu before it, in every convnet's backward pass), the two masks, small ones at
  the forward value's shape, combine first: one pass over the stacked cotangents, not two
  (a jacobian of a VGG-like net made one such pass per block)."""
  if _is_kept_where(g):
    mask, g = tf.logical_and(g.op.inputs[0], mask), g.op.inputs[1]
  return tf.where(mask, g, tf.zeros([], g.dtype))


def _is_kept_where(g):
  """Whether `g` is the output of `_kept_where`: a select of a value or zero."""
  inner = g.op
  return (inner.type == "SelectV2" and inner.inputs[2].shape.rank == 0 and
          tf.get_static_value(inner.inputs[2]) == 0)


def _fit(t, axis, size, covered):
  """Axis `axis` of `t` (windows covering `covered` positions) cut or zero-padded to `size`:
  SAME padding puts half the excess before the input, VALID leaves a remainder after."""
  if covered > size:
    before = (covered - size) // 2
    begin = [0] * axis + [before] + [0] * (t.shape.rank - axis - 1)
    sizes = [-1] * axis + [size] + [-1] * (t.shape.rank - axis - 1)
    return tf.slice(t, begin, sizes)
  if covered < size:
    pads = [[0, 0]] * axis + [[0, size - covered]] + [[0, 0]] * (t.shape.rank - axis - 1)
    return tf.pad(t, pads)
  return t


def conv_input_gradient_as_conv(op):
  """Conv2DBackpropInput of stacked cotangents through an invariant stride-1 SAME filter of
  odd size, as the forward convolution of the folded cotangents with the filter flipped and
  its channel axes swapped; or None.

  The same sums, but CPU kernels (oneDNN) run the forward convolution 1.3-1.7x faster than
  the backprop one, except into a few channels (an RGB image's gradient), left to the kernel.
  XLA compiles both to one convolution.
  """
  f_shape = op.input_shape(1)
  if (op.type != "Conv2DBackpropInput" or op.is_stacked(1) or not op.is_stacked(2) or
      op.attr("data_format") != b"NHWC" or op.attr("padding") != b"SAME" or
      list(op.attr("strides")) != [1, 1, 1, 1] or list(op.attr("dilations")) != [1, 1, 1, 1]
      or not f_shape.is_fully_defined() or f_shape[0] % 2 == 0 or f_shape[1] % 2 == 0 or
      f_shape[2] <= 4):
    return None
  flipped = tf.transpose(tf.reverse(op.value(1).tensor, [0, 1]), [0, 1, 3, 2])
  dy = op.value(2).tensor                                    # [n, b, h, w, out channels]
  n, b = values.dynamic_shape(dy)[:2]
  y = tf.nn.conv2d(values.merge_leading(dy), flipped, 1, "SAME")
  return stacked(values.split_leading(y, n, b))
