"""nn ops: bias add, softmax and cross-entropy, convolutions, pooling, batch norm, top-k.

Three tricks cover the family:
- fold: an op with one batch axis takes the loop axis folded into it,
  `[n, b, h, w, c] -> [n*b, h, w, c]`, and its outputs are split back (pooling, LRN,
  cross-entropy, convolutions and input gradients whose filter is loop-invariant).
- pack into channels: an op that treats channels independently takes the loop axis merged
  into a channel axis, `[n, b, h, w, c] -> [b, h, w, n*c]`, so per-iteration filters, scales
  or statistics become the per-channel ones of one bigger op (depthwise convolutions, batch
  norm, a convolution's output channels when its input is invariant, a filter gradient's
  input channels when its output gradient is invariant).
- patches: a convolution whose input and filter both differ per iteration is a batch matmul
  of image patches against the filters, `[n, b*oh*ow, kh*kw*c] x [n, kh*kw*c, k]`; the filter
  gradient of stacked input and output gradient (per-example gradients) is the transposed
  product, and the input gradient is rewritten as a forward convolution over the output
  gradient dilated by the strides.
Convolutions stored channels-first are transposed to channels-last where they are packed.
Packed at n = 0, a convolution has zero channels, which its kernels reject: the convolutions
register behind the n = 0 guard (`register_converter(rejects_empty=True)`).
"""

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from converters import backprop
from vectorize import graph_io
from vectorize.control_flow import cond
from vectorize.errors import Unvectorizable
from vectorize.family import (fold_into_batch, register_converter, register_leading_batch,
                              register_merge_batch, size_list)
from vectorize.registry import register
from vectorize.values import (constant, dynamic_shape, invariant, loop_length, merge_leading,
                              product, rank, reshape, reshape_leading, shape_vector,
                              split_leading, stacked)


# ----------------------------------------------------------------------------- shape helpers


def _pack(tensor, axis):
  """Merges the loop axis into per-iteration `axis`, loop index major.

  `[n, ..., c, ...] -> [..., n*c, ...]`; `axis` counts per-iteration axes (negative: from the
  end).
  """
  r = rank(tensor) - 1
  axis %= r
  perm = list(range(1, axis + 1)) + [0] + list(range(axis + 1, r + 1))
  moved = graph_io.transpose(tensor, perm)
  shape = dynamic_shape(moved)
  return reshape(moved, shape[:axis] + [shape[axis] * shape[axis + 1]] + shape[axis + 2:])


def _unpack(tensor, axis, n, size):
  """Inverse of `_pack`: `[..., n*size, ...] -> [n, ..., size, ...]` for `axis` of `tensor`."""
  r = rank(tensor)
  axis %= r
  shape = dynamic_shape(tensor)
  split = reshape(tensor, shape[:axis] + [n, size] + shape[axis + 1:])
  return graph_io.transpose(split, [axis] + [a for a in range(r + 1) if a != axis])


def _to_channels_last(tensor, is_stacked):
  """`[(n,) b, c, *spatial] -> [(n,) b, *spatial, c]`."""
  lead = 2 if is_stacked else 1
  r = rank(tensor)
  return tf.transpose(tensor, list(range(lead)) + list(range(lead + 1, r)) + [lead])


def _to_channels_first(tensor):
  """Stacked `[n, b, *spatial, c] -> [n, b, c, *spatial]`."""
  r = rank(tensor)
  return tf.transpose(tensor, [0, 1, r - 1] + list(range(2, r - 1)))


def _static_ints(dims, what):
  if not all(isinstance(d, (int, np.integer)) for d in dims):
    raise Unvectorizable(f"{what} must be known at trace time")
  return [int(d) for d in dims]


# ----------------------------------------------------------------------- bias, softmax, loss


@register("BiasAdd", "BiasAddV1")
def _convert_bias_add(op):
  """Channels-last with an invariant bias: the op itself, which takes any leading dims (on a
  folded producer's output before it is split back, see `_folded_source`).

  Otherwise a broadcasting add of the bias reshaped onto the channel axis.
  """
  value, bias = op.value(0), op.value(1)
  channels_first = op.type == "BiasAdd" and op.attr("data_format") == b"NCHW"
  if not bias.stacked and not channels_first:
    folded = _folded_source(value.tensor)
    if folded is not None:
      return stacked(graph_io.reshape(op.rebuild([folded, bias.tensor])[0],
                                      value.tensor.op.inputs[1]))
    return stacked(op.rebuild([value.tensor, bias.tensor])[0])
  r = op.input_shape(0).rank
  if r is None:
    raise Unvectorizable("the value has unknown rank")
  channel = 1 if channels_first else r - 1
  trailing = [1] * (r - 1 - channel)
  if bias.stacked:
    # [n, c] -> [n, 1, ..., c, 1, ...]
    shape = dynamic_shape(bias.tensor)
    b = reshape(bias.tensor, [shape[0]] + [1] * channel + [shape[1]] + trailing)
  else:
    b = reshape(bias.tensor, dynamic_shape(bias.tensor) + trailing)
  return stacked(tf.add(value.tensor, b))


def _folded_source(tensor):
  """The tensor that `tensor` reshapes, when that keeps its channel (last) axis: a folded
  convolution's or matmul's output, split back to `[n, b, ...]`. Adding the bias before the
  reshape leaves the op next to its producer, so Grappler fuses them (one pass, not two:
  5% of the MNIST convnet's inference)."""
  if tensor.op.type != "Reshape":
    return None
  source = tensor.op.inputs[0]
  if (source.shape.rank is None or source.shape.rank < 2 or tensor.shape[-1] is None or
      source.shape[-1] != tensor.shape[-1]):
    return None
  return source


@register("BiasAddGrad")
def _convert_bias_add_grad(op):
  """A sum over every per-iteration axis but the channel axis; the loop axis stays."""
  grad = op.stacked(0)
  r = rank(grad) - 1
  channel = 1 if op.attr("data_format") == b"NCHW" else r - 1
  return stacked(tf.reduce_sum(grad, [1 + a for a in range(r) if a != channel]))


@register("L2Loss")
def _convert_l2_loss(op):
  """`sum(x**2) / 2` over the per-iteration axes."""
  x = op.stacked(0)
  half = tf.constant(0.5, x.dtype)
  return stacked(tf.reduce_sum(tf.square(x), list(range(1, rank(x)))) * half)


@register("SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits")
def _convert_softmax_cross_entropy(op):
  """Folds the loop axis into the batch axis of logits and labels (tiling an invariant one:
  the op does not broadcast over the folded axis)."""
  if op.type == "SoftmaxCrossEntropyWithLogits":
    a, b = op.input_shape(0), op.input_shape(1)
    if not (a.is_fully_defined() and b.is_fully_defined() and a == b):
      raise Unvectorizable("logits and labels must have the same static shape")
  return fold_into_batch(op, (0, 1))


# --------------------------------------------------------------------- convolution geometry


class _Window(NamedTuple):
  """A convolution's geometry per spatial dim (channels-last order)."""
  strides: tuple
  dilations: tuple
  padding: str  # SAME, VALID or EXPLICIT
  explicit: tuple  # (before, after) per spatial dim, for EXPLICIT


def _window(op):
  """(channels_first, _Window) from a convolution op's attrs."""
  return window_of(op.op)


def window_of(node):
  """(channels_first, _Window) of a convolution `tf.Operation` (or its gradient's)."""
  fmt = node.get_attr("data_format").decode()
  channels_first = fmt.startswith("NC")
  num_spatial = len(fmt) - 2

  def spatial(values):
    values = list(values)
    return tuple(values[2:] if channels_first else values[1:-1])

  attrs = node.node_def.attr
  dilations = spatial(node.get_attr("dilations")) if "dilations" in attrs else \
      (1,) * num_spatial
  padding = node.get_attr("padding").decode()
  explicit = ()
  if padding == "EXPLICIT":
    pads = list(node.get_attr("explicit_paddings"))
    explicit = spatial([(pads[2 * k], pads[2 * k + 1]) for k in range(len(fmt))])
  return channels_first, _Window(spatial(node.get_attr("strides")), dilations, padding,
                                 explicit)


def _window_attrs(op, window):
  """Attrs re-emitting `op` channels-last with the same geometry."""
  attrs = {"data_format": "NHWC" if len(window.strides) == 2 else "NDHWC",
           "strides": [1, *window.strides, 1]}
  node_attrs = op.op.node_def.attr
  if "dilations" in node_attrs:
    attrs["dilations"] = [1, *window.dilations, 1]
  if "explicit_paddings" in node_attrs:
    attrs["explicit_paddings"] = (
        [0, 0] + [p for pair in window.explicit for p in pair] + [0, 0] if window.explicit
        else [])
  return attrs


def _taps(x, ksize, window):
  """`[B, *spatial, c]` -> one slice per filter tap (taps in a filter's order), each the
  input pixels that tap meets, in output order, and the output's spatial size."""
  tap, count, out = _tap_slicer(x, ksize, window)
  return [tap(k) for k in range(count)], out


def _tap_slicer(x, ksize, window):
  """(tap, count, out): `tap(k)` emits the slice of filter tap k (see `_taps`), `count`
  taps, `out` the output's spatial size.

  The input is padded, and each strided spatial dim split into `[q, stride]`, so every tap is
  one plain slice (strided slices are slow on CPU); a tap is then `[B, o, 1, ...]` in each
  strided dim, which one reshape merges.
  """
  shape = dynamic_shape(x)
  spatial = _static_ints(shape[1:-1], "the input's spatial size")
  pads, split, out = [], [], []
  for k, (size, kk, s, d) in enumerate(zip(spatial, ksize, window.strides, window.dilations)):
    reach = (kk - 1) * d + 1
    if window.padding == "SAME":
      o = -(-size // s)
      before = max((o - 1) * s + reach - size, 0) // 2
    else:
      before, after = window.explicit[k] if window.padding == "EXPLICIT" else (0, 0)
      o = (size + before + after - reach) // s + 1
    if o <= 0:
      raise Unvectorizable("the convolution's output is empty")
    q = max(-(-(size + before) // s), (kk - 1) * d // s + o)
    pads.append([before, q * s - size - before])
    split += [q, s] if s > 1 else [q]
    out.append(o)
  if any(p for pair in pads for p in pair):
    x = graph_io.pad(x, [[0, 0]] + pads + [[0, 0]])
  if any(s > 1 for s in window.strides):
    x = reshape(x, shape[:1] + split + shape[-1:])
  size = [-1]
  for s, o in zip(window.strides, out):
    size += [o, 1] if s > 1 else [o]
  size = constant(size + [-1])
  taps = list(np.ndindex(*ksize))

  def tap(k):
    begin = [0]
    for t, d, s in zip(taps[k], window.dilations, window.strides):
      begin += [t * d // s, t * d % s] if s > 1 else [t * d]
    return graph_io.slice_(x, begin + [0], size)

  return tap, len(taps), out


def _patches(x, ksize, window):
  """`[B, *spatial, c] -> [B, *out_spatial, prod(ksize)*c]`, taps then channels (the order of
  a filter `[*ksize, c, k]` reshaped to `[prod(ksize)*c, k]`).

  The taps are concatenated on the channel axis (XLA lowers ExtractImagePatches to a
  convolution with a one-hot filter, prod(ksize)*c times the work), so a k*k filter costs
  k*k slices and one concat.
  """
  taps, out = _taps(x, ksize, window)
  patches = graph_io.concat(taps, -1)
  if any(s > 1 for s in window.strides):
    patches = reshape(patches, dynamic_shape(x)[:1] + out + [product(ksize) *
                                                             dynamic_shape(x)[-1]])
  return patches


def _conv_both_stacked(x, f, window):
  """Stacked x `[n, b, *spatial, c]` and filter `[n, *ksize, c, k]` -> `[n, b, *out, k]`."""
  n, b = dynamic_shape(x)[:2]
  f_shape = dynamic_shape(f)
  ksize = _static_ints(f_shape[1:-2], "the filter's spatial size")
  patches = _patches(merge_leading(x), ksize, window)  # [n*b, *out, P]
  p_shape = dynamic_shape(patches)
  out = p_shape[1:-1]
  patches = reshape(patches, [n, b * product(out), p_shape[-1]])
  f = reshape(f, [n, p_shape[-1], f_shape[-1]])
  return reshape(tf.matmul(patches, f), [n, b] + out + [f_shape[-1]])


def _filter_gradient_both_stacked(x, dy, sizes, window):
  """Per-iteration filter gradients of stacked x `[n, b, *spatial, c]` and dy
  `[n, b, *out, k]`: `filter_gradient_taps`, stacked into `[n, *ksize, c, k]`."""
  ksize = _static_ints(sizes[:-2], "the filter's spatial size")
  grads = filter_gradient_taps(x, dy, ksize, window)
  return reshape(graph_io.pack(grads, 1), dynamic_shape(x)[:1] + list(sizes))


def filter_gradient_taps(x, dy, ksize, window):
  """Per-iteration filter gradients of stacked x `[n, b, *spatial, c]` and dy
  `[n, b, *out, k]`, one `[n, c, k]` per filter tap (in the filter's order): one batch
  matmul per tap, its input pixels against dy, `[n, b*o, c]^T x [n, b*o, k]`. (One matmul
  of all taps' patches first copies the input prod(ksize) times: 1.5-2x the time on CPU.)
  Each tap's pixels are cut after the tap before it is multiplied: cut all at once (the
  executor runs every ready slice first), a layer's taps held prod(ksize) copies of its
  input, 4x a ResNet step's peak memory."""
  dy_shape = dynamic_shape(dy)
  dy = reshape(dy, [dy_shape[0], product(dy_shape[1:-1]), dy_shape[-1]])
  products = [dy]   # the padded input is made once dy is: not held from the forward pass on
  for pixels in tap_pixels(x, ksize, window, after=products):
    products.append(tf.matmul(pixels, dy, transpose_a=True))
  return products[1:]


def tap_pixels(x, ksize, window, after=None):
  """The input pixels each filter tap meets, per iteration: stacked x `[n, b, *spatial, c]`
  -> one `[n, b*o, c]` per tap (o output positions, in output order), yielded in order. With
  `after` (a list the caller appends each tap's result to), a tap is cut only once the
  previous tap's result is computed (the first, and the padded input, once its last item is),
so one tap's copy is held at a time."""
  n, b = dynamic_shape(x)[:2]
  channels = dynamic_shape(x)[-1]
  with tf.control_dependencies(after[-1:] if after else []):
    tap, count, out = _tap_slicer(merge_leading(x), ksize, window)  # each [n*b, *out, c]
  for k in range(count):
    with tf.control_dependencies(after[-1:] if after else []):
      pixels = tap(k)
    yield reshape(pixels, [n, b * product(out), channels])


def _dilate(x, axis, stride):
  """Inserts `stride - 1` zeros after each element along `axis`: length L -> L*stride."""
  shape = dynamic_shape(x)
  x = tf.expand_dims(x, axis + 1)
  pads = [[0, 0]] * (axis + 1) + [[0, stride - 1]] + [[0, 0]] * (len(shape) - axis - 1)
  x = graph_io.pad(x, pads)
  return reshape(x, shape[:axis] + [shape[axis] * stride] + shape[axis + 1:])


def _pad_or_crop(x, pads):
  """Pads (positive) or crops (negative) the spatial dims of `[B, *spatial, c]`."""
  shape = dynamic_shape(x)
  begin = [0] + [max(-lo, 0) for lo, _ in pads] + [0]
  size = [-1] + [d + min(lo, 0) + min(hi, 0) for d, (lo, hi) in zip(shape[1:-1], pads)] + [-1]
  if any(lo < 0 or hi < 0 for lo, hi in pads):
    x = graph_io.slice_(x, shape_vector(begin), shape_vector(size))
  if any(lo > 0 or hi > 0 for lo, hi in pads):
    x = graph_io.pad(x, [[0, 0]] + [[max(lo, 0), max(hi, 0)] for lo, hi in pads] + [[0, 0]])
  return x


def _pad_before(window, k, size, out, ksize):
  """The padding the forward convolution puts before spatial dim k."""
  if window.padding == "VALID":
    return 0
  if window.padding == "EXPLICIT":
    return window.explicit[k][0]
  effective = (ksize - 1) * window.dilations[k] + 1
  return max((out - 1) * window.strides[k] + effective - size, 0) // 2


def _input_gradient_both_stacked(in_sizes, f, dy, window):
  """Per-iteration input gradients for stacked filter `[n, *ksize, c, k]` and dy
  `[n, b, *out, k]`, as a forward convolution.

  dx[p] = sum_t dy_dilated[p + pad_before - t*d] f[t]: dy dilated by the strides, padded by
  `(ksize-1)*d - pad_before` before (cropped if negative) and to the input size after, then
  correlated (stride 1, same dilation) with the spatially flipped filter whose channel axes
  are swapped.
  """
  n, b = dynamic_shape(dy)[:2]
  ksize = _static_ints(dynamic_shape(f)[1:-2], "the filter's spatial size")
  spatial = _static_ints(in_sizes[1:-1], "the input's spatial size")
  out = _static_ints(dynamic_shape(dy)[2:-1], "the output's spatial size")
  u = merge_leading(dy)
  pads = []
  for k, (size, o, kk) in enumerate(zip(spatial, out, ksize)):
    stride, dilation = window.strides[k], window.dilations[k]
    if stride > 1:
      u = _dilate(u, 1 + k, stride)
    before = (kk - 1) * dilation - _pad_before(window, k, size, o, kk)
    pads.append((before, size + (kk - 1) * dilation - before - o * stride))
  u = split_leading(_pad_or_crop(u, pads), n, b)
  r = rank(f)
  flipped = tf.reverse(f, list(range(1, r - 2)))
  flipped = tf.transpose(flipped, list(range(r - 2)) + [r - 1, r - 2])
  unit = _Window((1,) * len(ksize), window.dilations, "VALID", ())
  return _conv_both_stacked(u, flipped, unit)


# ----------------------------------------------------------------------------- convolutions


def _channels_last_input(op, i, tile=False):
  """Input i channels-last (transposed if the op is channels-first); `tile` stacks it."""
  channels_first = op.attr("data_format").decode().startswith("NC")
  is_stacked = tile or op.is_stacked(i)
  t = op.stacked(i) if tile else op.value(i).tensor
  return _to_channels_last(t, is_stacked) if channels_first else t


def _restore_layout(op, y):
  """A stacked channels-last result back in the op's data_format."""
  if op.attr("data_format").decode().startswith("NC"):
    return stacked(_to_channels_first(y))
  return stacked(y)


def _channels_last_sizes(op, i):
  sizes = size_list(op, i)
  if op.attr("data_format").decode().startswith("NC"):
    sizes = [sizes[0]] + sizes[2:] + [sizes[1]]
  return sizes


def _groups(op, images, filter_shape):
  """How many groups a convolution has: its images have that many times the filter's input
  channels (Keras `Conv2D(groups=g)`); 1 where either is unknown."""
  channels_axis = 1 if op.attr("data_format").decode().startswith("NC") else -1
  channels = images.shape[channels_axis] if images.shape.rank else None
  filter_channels = filter_shape[-2] if filter_shape.rank else None
  if channels is None or filter_channels is None or channels == filter_channels:
    return 1
  return channels // filter_channels


def _in_groups(groups, convert, *channel_split):
  """`convert` of each group's channels, concatenated on the last (channel) axis: a grouped
  convolution is `groups` ungrouped ones, and packing iterations into the channels of one
  would mix the groups. `channel_split` are the channels-last tensors to split."""
  if groups == 1:
    return convert(*channel_split)
  pieces = [tf.split(t, groups, axis=-1) for t in channel_split]
  return graph_io.concat([convert(*parts) for parts in zip(*pieces)], -1)


@register_converter("Conv2D", "Conv3D", rejects_empty=True)
def _convert_conv(op):
  """Invariant filter: fold. Invariant input: the filters packed into output channels, one
  convolution (per group). Both stacked: patches."""
  if not op.is_stacked(1):
    return fold_into_batch(op, (0,))
  _, window = _window(op)
  x, f = _channels_last_input(op, 0), op.value(1).tensor

  def convert(x, f):
    if op.is_stacked(0):
      return _conv_both_stacked(x, f, window)
    y = op.rebuild([x, _pack(f, -1)], _window_attrs(op, window))[0]  # [b, *out, n*k]
    return _unpack(y, -1, loop_length(op.ctx), dynamic_shape(f)[-1])

  groups = _groups(op, op.op.inputs[0], op.op.inputs[1].shape)
  return _restore_layout(op, _in_groups(groups, convert, x, f))


@register_converter("Conv2DBackpropInput", "Conv3DBackpropInputV2", rejects_empty=True)
def _convert_conv_backprop_input(op):
  """Invariant filter: fold. Invariant out_backprop: the filters packed into input channels,
  one op (per group). Both stacked: a forward convolution by patches."""
  groups = _groups(op, op.op.outputs[0], op.op.inputs[1].shape)
  if not op.is_stacked(1) and not (groups > 1 and cond.in_unlowered_branch()):
    return (backprop.conv_input_gradient_as_conv(op) or
            fold_into_batch(op, (2,), sizes_input=0))
  _, window = _window(op)
  sizes = _channels_last_sizes(op, 0)
  f, dy = op.value(1).tensor, _channels_last_input(op, 2)
  n = loop_length(op.ctx)
  if groups > 1:
    sizes = sizes[:-1] + [sizes[-1] // groups]

  def convert(f, dy):
    if not op.is_stacked(1):   # a grouped filter where CPU has no grouped kernel: per group
      folded = shape_vector([sizes[0] * n] + sizes[1:], op.op.inputs[0].dtype)
      dx = op.rebuild([folded, f, merge_leading(dy)], _window_attrs(op, window))[0]
      return split_leading(dx, n, dynamic_shape(dy)[1])
    if op.is_stacked(2):
      return _input_gradient_both_stacked(sizes, f, dy, window)
    packed_sizes = shape_vector(sizes[:-1] + [n * sizes[-1]], op.op.inputs[0].dtype)
    y = op.rebuild([packed_sizes, _pack(f, -2), dy], _window_attrs(op, window))[0]
    return _unpack(y, -1, n, sizes[-1])

  return _restore_layout(op, _in_groups(groups, convert, f, dy))


@register_converter("Conv2DBackpropFilter", "Conv3DBackpropFilterV2", rejects_empty=True)
def _conv_backprop_filter(op):
  """Only out_backprop stacked: packed into output channels; only the input stacked: packed
  into input channels (one op each, per group). Both stacked (per-example gradients):
  patches."""
  _, window = _window(op)
  sizes = size_list(op, 1)
  x, dy = _channels_last_input(op, 0), _channels_last_input(op, 2)
  n = loop_length(op.ctx)
  dtype = op.op.inputs[1].dtype
  attrs = _window_attrs(op, window)
  groups = _groups(op, op.op.inputs[0], op.op.outputs[0].shape)
  if groups > 1:
    sizes = sizes[:-1] + [sizes[-1] // groups]

  def convert(x, dy):
    if op.is_stacked(0) and op.is_stacked(2):
      return _filter_gradient_both_stacked(x, dy, sizes, window)
    if op.is_stacked(2):
      packed_sizes = shape_vector(sizes[:-1] + [n * sizes[-1]], dtype)
      grad = op.rebuild([x, packed_sizes, _pack(dy, -1)], attrs)[0]
      return _unpack(grad, -1, n, sizes[-1])
    packed_sizes = shape_vector(sizes[:-2] + [n * sizes[-2], sizes[-1]], dtype)
    grad = op.rebuild([_pack(x, -1), packed_sizes, dy], attrs)[0]
    return _unpack(grad, -2, n, sizes[-2])

  return stacked(_in_groups(groups, convert, x, dy))


@register_converter("DepthwiseConv2dNative", rejects_empty=True)
def _convert_depthwise_conv(op):
  """Invariant filter: fold. Otherwise the loop axis is packed into the channels: both
  stacked, input channels `n*c`; invariant input, multipliers `n*m` per input channel."""
  if not op.is_stacked(1):
    return fold_into_batch(op, (0,))
  _, window = _window(op)
  x, f = _channels_last_input(op, 0), op.value(1).tensor
  n = loop_length(op.ctx)
  c, m = dynamic_shape(f)[-2:]
  attrs = _window_attrs(op, window)
  if op.is_stacked(0):
    y = op.rebuild([_pack(x, -1), _pack(f, -2)], attrs)[0]  # [b, *out, n*c*m]
    return _restore_layout(op, _unpack(y, -1, n, c * m))
  y = op.rebuild([x, _pack(f, -1)], attrs)[0]  # [b, *out, c*n*m]
  shape = dynamic_shape(y)
  y = _unpack(reshape(y, shape[:-1] + [c, n * m]), -1, n, m)  # [n, b, *out, c, m]
  return _restore_layout(op, reshape(y, [n] + shape[:-1] + [c * m]))


@register_converter("DepthwiseConv2dNativeBackpropInput", rejects_empty=True)
def _convert_depthwise_conv_backprop_input(op):
  """Invariant filter: fold. Otherwise input channels `n*c` and out_backprop channels
  `n*c*m` (tiled if invariant: each iteration's filter needs it)."""
  if not op.is_stacked(1):
    return fold_into_batch(op, (2,), sizes_input=0)
  _, window = _window(op)
  sizes = _channels_last_sizes(op, 0)
  n = loop_length(op.ctx)
  dy = _channels_last_input(op, 2, tile=True)
  packed_sizes = shape_vector(sizes[:-1] + [n * sizes[-1]], op.op.inputs[0].dtype)
  y = op.rebuild([packed_sizes, _pack(op.value(1).tensor, -2), _pack(dy, -1)],
                 _window_attrs(op, window))[0]
  return _restore_layout(op, _unpack(y, -1, n, sizes[-1]))


@register_converter("DepthwiseConv2dNativeBackpropFilter", rejects_empty=True)
def _depthwise_conv_backprop_filter(op):
  """Invariant input: out_backprop packed into multipliers `n*m`. Otherwise input channels
  `n*c` (out_backprop tiled if invariant)."""
  _, window = _window(op)
  kh, kw, c, m = size_list(op, 1)
  n = loop_length(op.ctx)
  dtype = op.op.inputs[1].dtype
  attrs = _window_attrs(op, window)
  x, dy = _channels_last_input(op, 0), _channels_last_input(op, 2, tile=True)
  if not op.is_stacked(0):
    shape = dynamic_shape(dy)
    dy = _pack(reshape(dy, shape[:-1] + [c, m]), -1)  # [b, *out, c, n*m]
    dy = reshape(dy, shape[1:-1] + [c * n * m])
    grad = op.rebuild([x, shape_vector([kh, kw, c, n * m], dtype), dy], attrs)[0]
    return stacked(_unpack(grad, -1, n, m))
  grad = op.rebuild([_pack(x, -1), shape_vector([kh, kw, n * c, m], dtype), _pack(dy, -1)],
                    attrs)[0]
  return stacked(_unpack(grad, -2, n, c))


# ---------------------------------------------------------------------------------- pooling


def _argmax_offsets(op, x, dtype):
  """`[n, 1, ..., 1]`: where each iteration's flat indices start once the batch is folded."""
  shape = dynamic_shape(x)
  offsets = tf.range(loop_length(op.ctx), dtype=dtype) * tf.cast(product(shape[1:]), dtype)
  return reshape(offsets, [shape[0]] + [1] * (len(shape) - 1))


@register_converter("MaxPoolWithArgmax", rejects_empty=True)
def _max_pool_with_argmax(op):
  """Fold; flat indices that count the batch (include_batch_in_index) get each iteration's
  offset subtracted. The kernel rejects an empty batch."""
  output, argmax = fold_into_batch(op, (0,))
  if not op.attr("include_batch_in_index"):
    return [output, argmax]
  return [output, stacked(argmax.tensor - _argmax_offsets(op, op.stacked(0),
                                                          argmax.tensor.dtype))]


@register_converter("MaxPoolGradWithArgmax", rejects_empty=True)
def _max_pool_grad_with_argmax(op):
  """Fold input, gradient and argmax; flat indices that count the batch get each iteration's
  offset added first. The kernel rejects an empty batch."""
  n = loop_length(op.ctx)
  x = op.stacked(0)
  b = dynamic_shape(x)[1]
  argmax = op.stacked(2)
  if op.attr("include_batch_in_index"):
    argmax += _argmax_offsets(op, x, argmax.dtype)
  grad = op.rebuild([merge_leading(x), merge_leading(op.stacked(1)), merge_leading(argmax)])[0]
  return stacked(split_leading(grad, n, b))


# ------------------------------------------------------------------------------- batch norm


def _batch_norm_channel_axis(op):
  return 1 if op.attr("data_format").decode().startswith("NC") else -1


@register("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
def _convert_fused_batch_norm(op):
  """Inference with only x stacked: fold (the statistics are inputs). Otherwise pack the loop
  axis into the channels, so each iteration's channels get their own statistics and
  parameters; V3's last output is an opaque workspace, consumed as is by the gradient."""
  n = loop_length(op.ctx)
  if not op.attr("is_training") and not any(op.is_stacked(i) for i in range(1, 5)):
    b = dynamic_shape(op.value(0).tensor)[1]
    outs = op.rebuild([merge_leading(op.value(0).tensor)] +
                      [op.invariant(i) for i in range(1, 5)])
    return [stacked(split_leading(outs[0], n, b))] + [invariant(t) for t in outs[1:]]
  channel = _batch_norm_channel_axis(op)
  x = op.stacked(0)
  c = dynamic_shape(x)[1:][channel]
  outs = op.rebuild([_pack(x, channel)] + [merge_leading(op.stacked(i)) for i in range(1, 5)])
  return ([stacked(_unpack(outs[0], channel, n, c))] +
          [stacked(reshape_leading(t, [n, c])) for t in outs[1:5]] +
          [invariant(t) for t in outs[5:]])


@register("FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3")
def _convert_fused_batch_norm_grad(op):
  """Packs the loop axis into the channels (per-iteration scale and statistics); the
  workspace input (V3) must be invariant, as the converted forward op makes it."""
  n = loop_length(op.ctx)
  channel = _batch_norm_channel_axis(op)
  dy, x = op.stacked(0), op.stacked(1)
  c = dynamic_shape(x)[1:][channel]
  inputs = [_pack(dy, channel), _pack(x, channel)]
  inputs += [merge_leading(op.stacked(i)) for i in (2, 3, 4)]
  inputs += [op.invariant(i) for i in range(5, op.num_inputs)]
  outs = op.rebuild(inputs)
  return ([stacked(_unpack(outs[0], channel, n, c))] +
          [stacked(reshape_leading(t, [n, c])) for t in outs[1:3]] +
          [invariant(t) for t in outs[3:]])


# ----------------------------------------------------------------------- registration table

register_merge_batch("AvgPool")
register_merge_batch("AvgPool3D")
register_merge_batch("AvgPool3DGrad", batch_inputs=(1,), sizes_input=0)
register_merge_batch("AvgPoolGrad", batch_inputs=(1,), sizes_input=0)
register_merge_batch("InTopK", batch_inputs=(0, 1))
register_merge_batch("InTopKV2", batch_inputs=(0, 1))
register_merge_batch("LRN")
register_merge_batch("LRNGrad", batch_inputs=(0, 1, 2))
register_leading_batch("LogSoftmax")
register_merge_batch("MaxPool")
register_merge_batch("MaxPool3D")
register_merge_batch("MaxPool3DGrad", batch_inputs=(0, 1, 2), rejects_empty=True)
register_merge_batch("MaxPool3DGradGrad", batch_inputs=(0, 1, 2), rejects_empty=True)
register("MaxPoolGrad")(backprop.max_pool_grad)
register_merge_batch("MaxPoolGradGrad", batch_inputs=(0, 1, 2))
register_merge_batch("MaxPoolGradGradV2", batch_inputs=(0, 1, 2))
register_merge_batch("MaxPoolGradV2", batch_inputs=(0, 1, 2))
register_merge_batch("MaxPoolV2")
register_leading_batch("NthElement")
register_leading_batch("Softmax")
register_leading_batch("TopKV2")
