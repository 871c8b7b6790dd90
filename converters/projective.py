"""ImageProjectiveTransformV3 written in TF ops, for XLA, which has no kernel for it.

Keras RandomRotation, RandomZoom and RandomTranslation call the op; under XLA neither the
op nor a loop of it compiles. Here each output pixel's source coordinates come from its
image's transform, are mapped into the image by the fill mode, and the image is read by one
gather per neighbour from a copy framed by two pixels of the fill value on every side, so
that a read outside the image gives the fill value as the kernel's does. Bilinear weights
are combined in the kernel's order. Checked against the kernel on CPU
(tests/converters/test_image.py); float32 images, fill modes REFLECT, NEAREST and CONSTANT.
"""

import tensorflow as tf

from vectorize import compiled_calls
from vectorize.errors import Unvectorizable

_BORDER = 2
MODES = ("REFLECT", "NEAREST", "CONSTANT")


def _truncated(x):
  return tf.where(x < 0, tf.math.ceil(x), tf.floor(x))


def _reflected(coord, size):
  """Folds a coordinate into [0, size - 1] by mirroring at the edges, periodically."""
  if size <= 1:
    return tf.zeros_like(coord)
  period = float(2 * size)
  below = coord + period * _truncated(-coord / period)
  below = tf.where(below < -size, below + period, -below - 1)
  above = coord - period * _truncated(coord / period)
  above = tf.where(above >= size, period - above - 1, above)
  folded = tf.where(coord < 0, below, tf.where(coord > size - 1, above, coord))
  return tf.clip_by_value(folded, 0.0, float(size - 1))


def _mapped(coord, size, fill_mode):
  if fill_mode == "REFLECT":
    return _reflected(coord, size)
  if fill_mode == "NEAREST":
    return tf.clip_by_value(coord, 0.0, float(max(size - 1, 0)))
  return coord


def _framed(images, fill):
  """`[m, h, w, c]` images inside a frame of `_BORDER` fill pixels: `[m, h + 4, w + 4, c]`;
  `fill` is one value per image, `[m]`."""
  _, h, w, c = images.shape
  m = tf.shape(images)[0]
  fill = tf.reshape(fill, [-1, 1, 1, 1])
  columns = tf.broadcast_to(fill, [m, h, _BORDER, c])
  middle = tf.concat([columns, images, columns], 2)
  rows = tf.broadcast_to(fill, [m, _BORDER, w + 2 * _BORDER, c])
  return tf.concat([rows, middle, rows], 1)


def _mirrored(index, size, flip):
  """Integer pixel indices `[m, oh, ow]`, mirrored (size - 1 - index) in the images whose
  `flip` is set; the frame is as wide on both sides, so outside stays outside."""
  if flip is None:
    return index
  return tf.where(flip[:, None, None], size - 1 - index, index)


def flipped(images, flip_rows, flip_columns):
  """`[m, h, w, c]` images with the rows / columns of those whose flag is set reversed."""
  for axis, flip in ((1, flip_rows), (2, flip_columns)):
    if flip is not None:
      images = tf.where(flip[:, None, None, None], tf.reverse(images, [axis]), images)
  return images


def transform(images, transforms, output_shape, fill, interpolation, fill_mode,
              flip_rows=None, flip_columns=None):
  """The kernel's output for `[m, h, w, c]` float32 images, `[m, 8]` transforms, a static
  `[out_h, out_w]`, one fill value per image (`[m]`). `flip_rows` / `flip_columns` (`[m]`
  bool, optional): the transform of those images flipped first, by reading mirrored pixels
  (the same pixels, so the same values as flipping them). On the CPU outside XLA each of
  the two stages (per output pixel, then per channel) is its own XLA-compiled call: in one
  computation XLA fuses the per-pixel arithmetic (the fill mode's folding, several selects)
  into the reads, once per channel and neighbour, which at batch 128 of 64x64x3 images took
  about twice the time."""
  if (images.dtype != tf.float32 or fill_mode not in MODES or
      not images.shape[1:].is_fully_defined()):
    raise Unvectorizable("the projective transform in TF ops takes float32 images of known "
                         "size and fill modes " + ", ".join(MODES))
  nearest = interpolation == "NEAREST"
  sources = _sources(transforms, tuple(images.shape[1:3]), tuple(output_shape), fill_mode,
                      nearest, flip_rows, flip_columns)
  return _reads(images, fill, sources, _steps(images.shape[2], flip_rows, flip_columns),
               nearest)


def _steps(w, flip_rows, flip_columns):
  """Per image, the steps in the framed images' rows from a pixel to its right neighbour and
  to the one below it, as the neighbours of the unflipped image lie: `[m]` or scalars."""
  right = 1 if flip_columns is None else tf.where(flip_columns, -1, 1)
  below = w + 2 * _BORDER
  return right, below if flip_rows is None else tf.where(flip_rows, -below, below)


@compiled_calls.compiled_on_cpu
def _sources(transforms, size, output_shape, fill_mode, nearest, flip_rows, flip_columns):
  """Per output pixel (`[m, oh, ow]` each): its source coordinates in the image, the row of
  the framed images that it reads (bilinear: its top left neighbour), and whether the
  projection is undefined there."""
  h, w = size
  m = tf.shape(transforms)[0]
  out_h, out_w = output_shape
  ys = tf.range(out_h, dtype=tf.float32)[:, None]
  xs = tf.range(out_w, dtype=tf.float32)[None, :]
  t = [transforms[:, k, None, None] for k in range(8)]
  projection = t[6] * xs + t[7] * ys + 1.0                                  # [m, oh, ow]
  unprojected = tf.equal(projection, 0)   # the kernel gives the fill value there
  divisor = tf.where(unprojected, 1.0, projection)
  in_x = _mapped((t[0] * xs + t[1] * ys + t[2]) / divisor, w, fill_mode)
  in_y = _mapped((t[3] * xs + t[4] * ys + t[5]) / divisor, h, fill_mode)
  stride = w + 2 * _BORDER
  first = (tf.range(m) * (h + 2 * _BORDER) * stride)[:, None, None]
  if nearest:
    rounded = lambda v: tf.sign(v) * tf.floor(tf.abs(v) + 0.5)   # half away from zero
    row, column = rounded(in_y), rounded(in_x)
  else:
    row, column = tf.floor(in_y), tf.floor(in_x)
  # Clipped into the frame; a neighbour one step on from a clipped pixel is a frame pixel
  # too, so it reads the fill value, as the kernel's neighbour outside the image does.
  row = _mirrored(tf.cast(tf.clip_by_value(row, -_BORDER, h), tf.int32), h, flip_rows)
  column = _mirrored(tf.cast(tf.clip_by_value(column, -_BORDER, w), tf.int32), w,
                     flip_columns)
  return in_x, in_y, first + (row + _BORDER) * stride + column + _BORDER, unprojected


@compiled_calls.compiled_on_cpu
def _reads(images, fill, sources, steps, nearest):
  """The output `[m, oh, ow, c]` from the framed images' rows that `sources` names (and
  their neighbours, `steps` on): bilinear weights combined in the kernel's order; the fill
  value where the projection is undefined."""
  in_x, in_y, index, unprojected = sources
  c = images.shape[-1]
  frame = tf.reshape(_framed(images, fill), [-1, c])
  per_image = lambda step: tf.reshape(step, [-1, 1, 1])
  right, below = per_image(steps[0]), per_image(steps[1])
  if nearest:
    out = tf.gather(frame, index)
  else:
    read = lambda offset: tf.gather(frame, index + offset)                 # [m, oh, ow, c]
    x0, y0 = tf.floor(in_x), tf.floor(in_y)
    weight = lambda v: v[..., None]
    top = weight(x0 + 1 - in_x) * read(0) + weight(in_x - x0) * read(right)
    bottom = weight(x0 + 1 - in_x) * read(below) + weight(in_x - x0) * read(below + right)
    out = weight(y0 + 1 - in_y) * top + weight(in_y - y0) * bottom
  fill = tf.reshape(fill, [-1, 1, 1, 1])
  return tf.where(unprojected[..., None], fill, out)
