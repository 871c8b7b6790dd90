"""Images of their own sizes: values that differ per iteration in several axes.

`tf.image.resize(tf.io.decode_png(x[i]), [32, 32])` decodes every image at its own height
and width, then resizes it to one size. The decode gives a multi-axis ragged value
(`vectorize.ragged`: each image's pixels, its varying axes merged, concatenated, with its
sizes); the walker picks that form only where every use of the image takes it, so images
that are decoded and then returned keep the dense converter. A resize to a fixed size reads
every output pixel's source pixels by gathers from the concatenated pixels, with the
kernels' own coordinate arithmetic, per image, and gives a stacked tensor again: no loop
after the decode (area and ScaleAndTranslate resizes, with no gather form here, run their
kernel per image in a loop instead). Where the images turn out to have one size, the resize
kernel runs on them as a batch (with no conditional: the other side gets no images).
"""

import numpy as np
import tensorflow as tf

from converters import per_row
from vectorize import ragged
from vectorize import values
from vectorize.errors import Unvectorizable
from vectorize.values import stacked

_PARALLEL_ROWS = 16
_ROWS_PER_STEP = 4


def _varying_axes(shape):
  """k: the leading axes up to the last one the graph does not know (they are merged)."""
  unknown = [a for a, d in enumerate(shape.as_list()) if d is None]
  return unknown[-1] + 1


@ragged.register_multi_axis_producer("DecodeAndCropJpeg", "DecodeBmp", "DecodeGif",
                                     "DecodeImage", "DecodeJpeg", "DecodePng")
def _convert_decode(op):
  """Each iteration's decode in one while loop; its image flattened over the varying axes
  (`[h * w, c]`) is written to a TensorArray, its sizes to another."""
  op.ctx.target.require_dynamic_shapes(op.op, "an image decoded at its own size")
  out = op.op.outputs[0]
  k = _varying_axes(out.shape)
  inputs = [op.value(i) for i in range(op.num_inputs)]
  rest = out.shape[k:]
  flat_shape = [-1] + rest.as_list() if rest.is_fully_defined() else None

  def body(i, images, shapes):
    # several images per step (the last step repeats image n - 1, as per_row.map_rows
    # does): the loop's own ops run once for several decodes
    for j in tf.unstack(tf.minimum(i + tf.range(_ROWS_PER_STEP), n - 1), _ROWS_PER_STEP):
      image = op.rebuild([tf.gather(v.tensor, j) if v.stacked else v.tensor
                          for v in inputs])[0]
      shape = per_row.row_shape(image)
      flat = tf.reshape(image, flat_shape or tf.concat([[-1], shape[k:]], 0))
      images, shapes = images.write(j, flat), shapes.write(j, shape)
    return i + _ROWS_PER_STEP, images, shapes

  n = op.ctx.n
  images = tf.TensorArray(out.dtype, size=n, infer_shape=False,
                          element_shape=tf.TensorShape([None]).concatenate(rest))
  shapes = tf.TensorArray(tf.int32, size=n, element_shape=[out.shape.rank])
  _, images, shapes = tf.while_loop(lambda i, *_: i < n, body, (0, images, shapes),
                                    parallel_iterations=_PARALLEL_ROWS)
  return ragged.multi_axis(images.concat(), shapes.stack()[:, :k])


# ----------------------------------------------------------------------------- shapes

@ragged.register_multi_axis("Shape")
def _convert_shape(op):
  """`[n, rank]`: each iteration's sizes of the merged axes, then the shared rest."""
  rows = op.value(0).tensor
  out_type = op.attr("out_type")
  rest = tf.shape(rows.values, out_type=out_type)[1:]
  n = tf.shape(rows.dims)[0]
  return stacked(tf.concat([tf.cast(rows.dims, out_type),
                            tf.tile(rest[None], tf.stack([n, 1]))], 1))


@ragged.register_multi_axis("ExpandDims")
def _convert_expand_dims(op):
  """A new axis among the merged ones: a column of ones in the sizes; after them: on the
  pixels."""
  rows = op.value(0).tensor
  k = rows.dims.shape[1]
  axis = int(op.static_value(1)) % (k + values.rank(rows.values))
  if axis > k:
    return ragged.same_rows(tf.expand_dims(rows.values, axis - k + 1), rows)
  ones = tf.ones_like(rows.dims[:, :1])
  dims = tf.concat([rows.dims[:, :axis], ones, rows.dims[:, axis:]], 1)
  return ragged.multi_axis(rows.values, dims)


@ragged.register_multi_axis("Squeeze")
def _convert_squeeze(op):
  """Merged axes of size 1 leave the sizes (checked); later ones: on the pixels."""
  rows = op.value(0).tensor
  k = rows.dims.shape[1]
  rank = k + values.rank(rows.values) - 1
  axes = sorted({a % rank for a in op.attr("squeeze_dims")})
  if not axes:
    raise Unvectorizable("squeeze with no axes of a value that differs in several axes")
  merged = [a for a in axes if a < k]
  later = [a - k + 1 for a in axes if a >= k]
  flat = tf.squeeze(rows.values, later) if later else rows.values
  kept = [a for a in range(k) if a not in merged]
  pick = lambda axes: tf.gather(rows.dims, tf.constant(axes, tf.int32), axis=1)
  check = tf.debugging.Assert(tf.reduce_all(tf.equal(pick(merged), 1)), [
      f"vectorize: {op.op.name}: squeezing an axis whose size is not 1 in every iteration:",
      rows.dims])
  with tf.control_dependencies([check]):
    return ragged.multi_axis(tf.identity(flat), pick(kept))


@ragged.register_multi_axis("CheckNumerics", "Identity", "StopGradient")
def _convert_identity(op):
  rows = op.value(0).tensor
  return ragged.same_rows(op.rebuild([rows.values])[0], rows)


# ----------------------------------------------------------------------------- resizing

def _fixed_size_of_one_image(op):
  """A resize whose images are one per iteration (`[1, h, w, c]`, c known) and whose size
  is a constant."""
  shape = op.inputs[0].shape
  return (shape.rank == 4 and shape[0] == 1 and shape[3] is not None and
          tf.get_static_value(op.inputs[1]) is not None)


def _scale(in_size, out_size, align_corners):
  """Per iteration, input pixels per output pixel, in float32 as the kernels compute it."""
  in_size = tf.cast(in_size, tf.float32)
  if align_corners and out_size > 1:
    return (in_size - 1.) / float(out_size - 1)
  return in_size / float(out_size)


def _source(in_size, out_size, axis, align_corners, shift):
  """Each output pixel's position in the input image (float32), half-pixel centers shifted
  by `shift` (0.5 for bilinear and bicubic, 0 for nearest): `[n, out_size, 1]` for the rows
  (axis 1), `[n, 1, out_size]` for the columns (axis 2), from sizes `in_size` `[n, 1, 1]`.
  The output positions are one constant in the shape they broadcast in: few ops, since
  each tf.data iterator optimizes the whole map function again."""
  scale = _scale(in_size, out_size, align_corners)
  shape = [1, 1, 1]
  shape[axis] = out_size
  positions = np.arange(out_size, dtype=np.float32).reshape(shape)
  if shift is None:
    return tf.constant(positions) * scale
  return tf.constant(positions + np.float32(0.5)) * scale - shift


def _nearest_taps(in_size, out_size, axis, align_corners, half_pixel):
  src = _source(in_size, out_size, axis, align_corners, 0. if half_pixel else None)
  index = tf.floor(src)
  if align_corners:                                  # roundf: halves away from zero
    index += tf.cast(src - index >= 0.5, tf.float32)
  index = tf.minimum(tf.cast(index, tf.int32), in_size - 1)
  if half_pixel:
    index = tf.maximum(index, 0)
  return [index], None


def _bilinear_taps(in_size, out_size, axis, align_corners, half_pixel):
  src = _source(in_size, out_size, axis, align_corners, 0.5 if half_pixel else None)
  low = tf.floor(src)
  lower = tf.maximum(tf.cast(low, tf.int32), 0)
  upper = tf.minimum(tf.cast(tf.math.ceil(src), tf.int32), in_size - 1)
  return [lower, upper], src - low


def _cubic_table(a):
  """The kernel's table of cubic weights at 1024 steps of the fractional position: entry 2q
  for distance q/1024, entry 2q + 1 for distance 1 + q/1024."""
  x = (np.arange(1025) / 1024.).astype(np.float32).astype(np.float64)
  near = ((a + 2) * x - (a + 3)) * x * x + 1
  x = (x + 1).astype(np.float32).astype(np.float64)
  far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
  return tf.constant(np.stack([near, far], 1).reshape([-1]).astype(np.float32))


def _bicubic_taps(in_size, out_size, axis, align_corners, half_pixel):
  """Four taps; with half-pixel centers (Keys' cubic, a = -0.5) taps outside the image get
  weight 0 and the rest are renormalized, else (a = -0.75) they repeat the edge pixel."""
  src = _source(in_size, out_size, axis, align_corners, 0.5 if half_pixel else None)
  floor = tf.floor(src)
  base = tf.cast(floor, tf.int32)
  offset = tf.cast(tf.round((src - floor) * 1024.), tf.int32)         # lrintf: half to even
  table = _cubic_table(-0.5 if half_pixel else -0.75)
  weights = [tf.gather(table, offset * 2 + 1), tf.gather(table, offset * 2),
             tf.gather(table, (1024 - offset) * 2), tf.gather(table, (1024 - offset) * 2 + 1)]
  limit = in_size
  taps = [base + d for d in (-1, 0, 1, 2)]
  bounded = [tf.clip_by_value(t, 0, limit - 1) for t in taps]
  if half_pixel:
    weights = [tf.where(tf.equal(b, t), w, 0.) for b, t, w in zip(bounded, taps, weights)]
    total = tf.add_n(weights)
    usable = tf.abs(total) >= 1000. * np.finfo(np.float32).tiny
    weights = [tf.where(usable, w * (1. / total), w) for w in weights]
  return bounded, weights


def _interpolate(pick, taps_y, weights_y, taps_x, weights_x, method):
  """The resized image from `pick(y, x)` (source pixels of row tap y and column tap x,
  float32 for interpolations), in the kernels' order of operations; weights of the rows
  `[n, out_h, 1]`, of the columns `[n, 1, out_w]`."""
  if method == "ResizeNearestNeighbor":
    return pick(0, 0)
  if method == "ResizeBilinear":
    y_lerp, x_lerp = tf.expand_dims(weights_y, -1), tf.expand_dims(weights_x, -1)
    top_left, top_right = pick(0, 0), pick(0, 1)
    bottom_left, bottom_right = pick(1, 0), pick(1, 1)
    top = top_left + (top_right - top_left) * x_lerp
    bottom = bottom_left + (bottom_right - bottom_left) * x_lerp
    return top + (bottom - top) * y_lerp
  weights_y = [tf.expand_dims(w, -1) for w in weights_y]
  columns = []
  for x in range(len(taps_x)):       # the y interpolation of each x tap, then the x one
    terms = [pick(y, x) * wy for y, wy in enumerate(weights_y)]
    columns.append(terms[0] + terms[1] + terms[2] + terms[3])
  terms = [c * tf.expand_dims(wx, -1) for c, wx in zip(columns, weights_x)]
  return terms[0] + terms[1] + terms[2] + terms[3]


_TAPS = {"ResizeBicubic": _bicubic_taps, "ResizeBilinear": _bilinear_taps,
         "ResizeNearestNeighbor": _nearest_taps}


@ragged.register_multi_axis("ResizeBicubic", "ResizeBilinear", "ResizeNearestNeighbor",
                            accepts=_fixed_size_of_one_image)
def _convert_resize(op):
  """One image per iteration to a fixed size, `[n, 1, height, width, c]`. Where every image
  has one size (the usual case, known only at run time), the op's own kernel on the batch;
  else per image the taps and weights of each output row and column (from its own height
  and width), then gathers of the source pixels from the concatenated ones. No conditional:
  the side not taken runs on no images."""
  rows = op.value(0).tensor
  if rows.dims.shape[1] != 3:
    raise Unvectorizable("a resize of images whose channels differ per iteration")
  n = op.ctx.n
  largest = tf.reduce_max(tf.concat([tf.ones([1, 3], tf.int32), rows.dims], 0), 0)
  one_size = tf.reduce_all(tf.equal(rows.dims, largest))
  whole = tf.where(one_size, n, 0)                       # images the kernel resizes
  size = tf.where(one_size, largest, 1)                  # their (1, height, width)
  channels = op.op.inputs[0].shape[3]
  batch = tf.reshape(tf.slice(rows.values, [0, 0], tf.stack([whole * tf.reduce_prod(size), -1])),
                     tf.concat([tf.reshape(whole, [1]), size[1:], [channels]], 0))
  rest = ragged.RaggedRows(rows.values, tf.slice(rows.row_lengths, [whole], [-1]),
                           tf.slice(rows.dims, tf.stack([whole, 0]), [-1, -1]))
  out = tf.concat([op.rebuild([batch, op.invariant(1)])[0], _resize_each(op, rest)], 0)
  return stacked(tf.expand_dims(out, 1))


def _one_image_to_a_fixed_size(op):
  """An op on one image per iteration (`[1, h, w, c]`, c known) whose output size the
  graph knows (past its batch axis of 1)."""
  shape = op.inputs[0].shape
  return (shape.rank == 4 and shape[0] == 1 and shape[3] is not None
          and op.outputs[0].shape[1:].is_fully_defined())


@ragged.register_multi_axis("ResizeArea", "ScaleAndTranslate",
                            accepts=_one_image_to_a_fixed_size)
def _convert_resize_in_a_loop(op):
  """Resizes with no gather form here (area; the antialiased and kernel methods, lanczos,
  gaussian and mitchellcubic, which are ScaleAndTranslate): where the images have one
  size, the op's own kernel on the batch; else each image at its own size through the
  kernel, one per step of a loop, to the one output size: `[n, 1, h, w, c]`. (Its other
  inputs, a scale from each image's size, are per iteration: the batch takes the first.)"""
  rows = op.value(0).tensor
  if rows.dims.shape[1] != 3:
    raise Unvectorizable("a resize of images whose channels differ per iteration")
  n = op.ctx.n
  others = [op.value(k) for k in range(1, op.num_inputs)]
  largest = tf.reduce_max(tf.concat([tf.ones([1, 3], tf.int32), rows.dims], 0), 0)
  one_size = tf.reduce_all(tf.equal(rows.dims, largest))
  whole = tf.where(one_size, n, 0)
  size = tf.where(one_size, largest, 1)
  channels = op.op.inputs[0].shape[3]
  batch = tf.reshape(tf.slice(rows.values, [0, 0], tf.stack([whole * tf.reduce_prod(size), -1])),
                     tf.concat([tf.reshape(whole, [1]), size[1:], [channels]], 0))
  first = [_first_row(v.tensor) if v.stacked else v.tensor for v in others]
  out_shape = op.op.outputs[0].shape
  starts, dims = rows.row_starts, rows.dims

  def resized(i, images):
    h, w = dims[i, 1], dims[i, 2]
    image = tf.reshape(tf.slice(rows.values, tf.stack([starts[i], 0]), tf.stack([h * w, -1])),
                       tf.stack([1, h, w, channels]))
    args = [tf.gather(v.tensor, i) if v.stacked else v.tensor for v in others]
    return i + 1, images.write(i, op.rebuild([image] + args)[0][0])

  count = n - whole
  _, each = tf.while_loop(lambda i, _: i < count, resized, (0, tf.TensorArray(
      op.op.outputs[0].dtype, size=count, element_shape=out_shape[1:])))
  out = tf.concat([op.rebuild([batch] + first)[0], each.stack()], 0)
  return stacked(tf.expand_dims(out, 1))


def _first_row(t):
  """Row 0 of `t`, or ones where it has none (n = 0: a scale the kernel takes)."""
  ones = tf.ones(tf.concat([[1], tf.shape(t)[1:]], 0), t.dtype)
  return tf.concat([t, ones], 0)[0]


def _resize_each(op, rows):
  """`[n, height, width, c]`: each image resized from its own size by gathers."""
  out_h, out_w = (int(s) for s in op.static_value(1))
  align, half = op.attr("align_corners"), op.attr("half_pixel_centers")
  _, h, w = tf.split(tf.reshape(rows.dims, [-1, 1, 3]), 3, axis=2)        # [n, 1, 1] each
  taps = _TAPS[op.type]
  taps_y, weights_y = taps(h, out_h, 1, align, half)                       # [n, out_h, 1]
  taps_x, weights_x = taps(w, out_w, 2, align, half)                       # [n, 1, out_w]
  starts = tf.reshape(rows.row_starts, [-1, 1, 1])
  row_starts = [starts + y * w for y in taps_y]
  pixels = rows.values if op.type == "ResizeNearestNeighbor" else \
      tf.cast(rows.values, tf.float32)

  def pick(y, x):                    # -> [n, out_h, out_w, c]
    return tf.gather(pixels, row_starts[y] + taps_x[x])

  return _interpolate(pick, taps_y, weights_y, taps_x, weights_x, op.type)
