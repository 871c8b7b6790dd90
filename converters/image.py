"""Image ops: resizing and its gradients, projective transforms, crops, glimpses, patches,
morphology, boxes (drawing, non-max suppression), colour conversions and adjustments.

The kernels take a batch of images, so the loop axis folds into it,
`[n, b, h, w, c] -> [n*b, h, w, c]`, and per-image parameters fold the same way (one
transform or box list per iteration becomes one per image; box indices move by i*b).
Where a kernel takes one scalar for the whole batch (contrast factor, hue delta, saturation
scale, fill value) and the scalar differs per iteration, the op is rewritten as batched
elementwise math, around the kernel where it helps: the contrast kernel with factor 0 gives
each channel's mean, a transform with fill 0 of an all-ones image gives the weight that the
fill value takes; hue and saturation are adjusted in the kernels' colour models.
Morphology treats channels independently, so per-iteration filters join the loop axis to the
channels, `[n, b, h, w, d] -> [b, h, w, n*d]`.
"""

import tensorflow as tf

from converters import fusions
from converters import projective
from vectorize.errors import Unvectorizable, user_location
from vectorize.family import register_leading_batch, register_merge_batch
from vectorize.registry import register
from vectorize.values import (dynamic_shape, expand_after_loop_axis, loop_length,
                              merge_leading, rank, reshape, shape_vector, split_leading,
                              stack, stacked)


def _per_iteration_scalar(op, i, like):
  """Stacked scalar input i as `[n, 1, ..., 1]`, broadcasting against `like`, in float32."""
  return expand_after_loop_axis(tf.cast(op.value(i).tensor, tf.float32), rank(like) - 1)


def _folded_rows(op, i, n, rows):
  """Input i, one row per image or per iteration (`[rows, k]` or `[1, k]` per iteration),
  as one row per folded image, `[n*rows, k]`; an invariant single row stays `[1, k]`."""
  value = op.value(i)
  if not value.stacked and value.tensor.shape[:1].as_list() == [1]:
    return value.tensor
  tensor = op.stacked(i)
  k = dynamic_shape(tensor)[-1]
  return merge_leading(tf.broadcast_to(tensor, shape_vector([n, rows, k])))


@register("ImageProjectiveTransformV2", "ImageProjectiveTransformV3")
def _convert_projective_transform(op):
  """Folds images and transforms into the batch. A per-iteration fill value f enters
  linearly: out = T(x, fill 0) + f * (1 - T(ones, fill 0)), for every fill mode and
  interpolation (a sample reading outside the image weighs f by what it misses)."""
  images = op.stacked(0)                                   # [n, b, h, w, c]
  n, b = loop_length(op.ctx), dynamic_shape(images)[1]
  transforms = _folded_rows(op, 1, n, b)                   # [n*b, 8] or [1, 8]
  output_shape = op.invariant(2)
  folded = merge_leading(images)
  if op.ctx.target.xla:   # XLA has no kernel: the op in TF ops
    return stacked(split_leading(_transform_in_ops(op, folded, transforms, n, b), n, b))
  if op.type == "ImageProjectiveTransformV2" or not op.is_stacked(3):
    extra = [] if op.type == "ImageProjectiveTransformV2" else [op.invariant(3)]
    kernel = lambda images: op.rebuild([images, transforms, output_shape] + extra)[0]
    compiled = _compiled_transform(op, folded, transforms, kernel, b)
    out = kernel(folded) if compiled is None else compiled
    return stacked(split_leading(out, n, b))
  if not images.dtype.is_floating:
    raise Unvectorizable("a per-iteration fill value of integer images")
  zero = tf.zeros([], tf.float32)
  moved = split_leading(op.rebuild([folded, transforms, output_shape, zero])[0], n, b)
  ones = tf.ones_like(folded[..., :1])
  reach = split_leading(op.rebuild([ones, transforms, output_shape, zero])[0], n, b)
  fill = tf.cast(_per_iteration_scalar(op, 3, moved), images.dtype)
  return stacked(moved + fill * (1 - reach))


def _compiled_transform(op, folded, transforms, kernel, b):
  """On CPU, the transform of a batch of `[m, h, w, c]` float32 images with an invariant fill
  value as converters/projective.py's TF ops compiled by XLA, or None where that does not
  apply. The CPU kernel computes each channel's coordinates anew and took 24 ms of the
  Keras augmentation's 33 ms CPU at batch 128 (64x64x3); compiled in two stages, the same
  transform takes about 9 ms (load 4-5). Within float rounding of the kernel; the gradient
  is the kernel's own (TF registers one for the images only), so it equals the loop's."""
  output_shape = tf.get_static_value(op.invariant(2))
  fill_mode = op.attr("fill_mode").decode()
  if (tf.config.list_logical_devices("GPU") or output_shape is None or
      folded.dtype != tf.float32 or not folded.shape[1:].is_fully_defined() or
      fill_mode not in projective.MODES):
    return None
  fill = tf.zeros([]) if op.type == "ImageProjectiveTransformV2" else op.invariant(3)
  shape, interpolation = tuple(int(d) for d in output_shape), op.attr("interpolation").decode()
  source, flips = _unflipped(op, folded, b)

  @tf.custom_gradient
  def transformed(images):
    m = tf.shape(images)[0]
    out = projective.transform(images, tf.broadcast_to(transforms, tf.stack([m, 8])), shape,
                               tf.broadcast_to(fill, tf.reshape(m, [1])), interpolation,
                               fill_mode, *flips)
    return out, lambda upstream: tf.gradients(
        kernel(projective.flipped(images, *flips)), images, upstream)[0]

  return transformed(source)


def _unflipped(op, folded, b):
  """The transform's `[n*b, h, w, c]` images as (images, (row flags, column flags)): where
  they are per-image flips of earlier images (Keras RandomFlip), the unflipped images and
  one flag per image (or None), which the transform reads at mirrored pixels (see
  converters/fusions.py); else `folded` and no flags."""
  flips = fusions.conditional_flips(op, op.op.inputs[0])
  if flips is None:
    return folded, (None, None)
  source, flip_rows, flip_columns = flips
  images = tf.reshape(stack(source, op.ctx.n), shape_vector([-1] + folded.shape[1:].as_list()))
  per_image = lambda flag: None if flag is None else tf.repeat(flag, b)
  return images, (per_image(flip_rows), per_image(flip_columns))


def _transform_in_ops(op, folded, transforms, n, b):
  """The transform of `[n*b, h, w, c]` images by converters/projective.py."""
  output_shape = tf.get_static_value(op.invariant(2))
  if output_shape is None:
    raise Unvectorizable("an output shape not known at trace time")
  m = tf.shape(folded)[0]
  transforms = tf.broadcast_to(transforms, tf.stack([m, 8]))
  if op.type == "ImageProjectiveTransformV2" or not op.is_stacked(3):
    fill = tf.zeros([]) if op.type == "ImageProjectiveTransformV2" else op.invariant(3)
    fill = tf.broadcast_to(fill, [m])
  else:
    fill = merge_leading(tf.broadcast_to(op.stacked(3)[:, None], shape_vector([n, b])))
  return projective.transform(folded, transforms, [int(d) for d in output_shape], fill,
                              op.attr("interpolation").decode(), op.attr("fill_mode").decode())


@register("CropAndResize")
def _convert_crop_and_resize(op):
  """Folds images and boxes; box indices of iteration i move by i*b onto its images."""
  n = loop_length(op.ctx)
  images, box_index, num_boxes = _folded_boxes(op, image=0, boxes=1, box_index=2)
  out = op.rebuild([images, merge_leading(op.stacked(1)), box_index, op.invariant(3)])[0]
  return stacked(split_leading(out, n, num_boxes))


@register("CropAndResizeGradBoxes")
def _convert_crop_and_resize_grad_boxes(op):
  n = loop_length(op.ctx)
  images, box_index, num_boxes = _folded_boxes(op, image=1, boxes=2, box_index=3)
  out = op.rebuild([merge_leading(op.stacked(0)), images, merge_leading(op.stacked(2)),
                    box_index])[0]
  return stacked(split_leading(out, n, num_boxes))


@register("CropAndResizeGradImage")
def _convert_crop_and_resize_grad_image(op):
  """The image gradient of folded boxes is the gradient of n*b folded images."""
  n = loop_length(op.ctx)
  image_size = op.invariant(3)                             # [b, h, w, c]
  b = image_size[0]
  box_index = _offset_box_index(op, 2, n, b)
  sizes = tf.concat([tf.reshape(b * tf.cast(n, b.dtype), [1]), image_size[1:]], 0)
  out = op.rebuild([merge_leading(op.stacked(0)), merge_leading(op.stacked(1)), box_index,
                    sizes])[0]
  return stacked(split_leading(out, n, b))


def _folded_boxes(op, image, boxes, box_index):
  """The images input folded (`[n*b, h, w, c]`; kept whole when invariant), the box
  indices pointing into it (`[n*m]`) and m, the boxes per iteration."""
  n = loop_length(op.ctx)
  num_boxes = dynamic_shape(op.stacked(boxes))[1]
  if not op.is_stacked(image):
    return op.invariant(image), merge_leading(op.stacked(box_index)), num_boxes
  images = op.stacked(image)
  b = dynamic_shape(images)[1]
  return merge_leading(images), _offset_box_index(op, box_index, n, b), num_boxes


def _offset_box_index(op, i, n, b):
  """Box indices `[n, m]` -> `[n*m]`, those of iteration i moved by i*b. An index outside
  [0, b) fails, as in the kernel (folded, it would read another iteration's images)."""
  box_index = op.stacked(i)
  b = tf.cast(b, box_index.dtype)
  check = tf.debugging.Assert(
      tf.reduce_all((box_index >= 0) & (box_index < b)),
      [f"{op.type} {op.op.name!r}{user_location(op.op)}: box_index has values "
       "outside [0, batch_size)"])
  with tf.control_dependencies([check]):
    offsets = tf.range(n, dtype=box_index.dtype) * b
    return merge_leading(box_index + offsets[:, None])


@register("AdjustContrastv2")
def _convert_adjust_contrast(op):
  """A per-iteration factor f: the kernel with factor 0 gives every pixel its channel's
  mean m, then (x - m) * f + m, as the kernel computes it. TF registers no gradient for
  the kernel; the result has that formula's gradient."""
  factor_stacked = op.is_stacked(1)

  def forward(images, factor):
    if not factor_stacked:
      return op.rebuild([images, factor])[0]
    mean = op.rebuild([images, tf.zeros([], tf.float32)])[0]
    f = expand_after_loop_axis(factor, rank(images) - 1)
    x, m = tf.cast(images, tf.float32), tf.cast(mean, tf.float32)
    return tf.cast((x - m) * f + m, images.dtype)

  @tf.custom_gradient
  def contrast(images, factor):
    def gradient(upstream):
      x, g = tf.cast(images, tf.float32), tf.cast(upstream, tf.float32)
      f = expand_after_loop_axis(factor, rank(images) - 1) if factor_stacked else factor
      spatial = [-3, -2]
      centred = x - tf.reduce_mean(x, spatial, keepdims=True)
      images_gradient = f * g + (1 - f) * tf.reduce_mean(g, spatial, keepdims=True)
      factor_axes = list(range(1, rank(images))) if factor_stacked else None
      return (tf.cast(images_gradient, images.dtype),
              tf.reduce_sum(g * centred, factor_axes))
    return forward(images, factor), gradient

  factor = op.stacked(1) if factor_stacked else op.invariant(1)
  return stacked(contrast(op.stacked(0), tf.cast(factor, tf.float32)))


@register("AdjustHue", "AdjustSaturation")
def _convert_adjust_hsv(op):
  """A per-iteration delta or scale: the adjustment as elementwise math on the batch (the
  kernel's colour model, so that values outside [0, 1] come out as the kernel gives them)."""
  images = op.stacked(0)
  if not op.is_stacked(1):
    return stacked(op.rebuild([images, op.invariant(1)])[0])
  if images.shape[-1] != 3:
    raise Unvectorizable("images whose channel count is not known at trace time")
  amount = _per_iteration_scalar(op, 1, images)           # [n, 1, ..., 1]
  x = tf.cast(images, tf.float32)
  if op.type == "AdjustHue":
    return stacked(tf.cast(_rotate_hue(x, amount), images.dtype))
  return stacked(tf.cast(_scale_saturation(x, amount), images.dtype))


def _scale_saturation(rgb, scale):
  """Scales the saturation of `rgb` (`[..., 3]`) by `scale`, clipped into [0, 1], as the
  kernel does: at a fixed hue and value V each channel c moves along V - c, so the result is
  `V - clip(scale, 0, V / spread) * (V - c)` (spread = V - smallest level; no saturation
  where V <= 0)."""
  largest = tf.reduce_max(rgb, axis=-1, keepdims=True)
  spread = largest - tf.reduce_min(rgb, axis=-1, keepdims=True)
  limit = tf.where(largest > 0, largest / tf.where(spread > 0, spread, tf.ones_like(spread)),
                   tf.zeros_like(largest))
  return largest - tf.minimum(tf.maximum(scale, 0.0), limit) * (largest - rgb)


def _rotate_hue(rgb, delta):
  """Turns the hue of `rgb` (`[..., 3]`) by `delta` turns, keeping each pixel's smallest and
  largest level, as the kernel does (so values outside [0, 1] come out as it gives them).

  With the hue h in sextants, channel k (offsets 5, 3, 1 for r, g, b) takes
  `largest - spread * clip(min(m, 4 - m), 0, 1)` where `m = (k + h) mod 6`.
  """
  r, g, b = tf.unstack(rgb, axis=-1)
  largest = tf.maximum(tf.maximum(r, g), b)
  spread = largest - tf.minimum(tf.minimum(r, g), b)
  grey = spread <= 0
  safe = tf.where(grey, tf.ones_like(spread), spread)
  hue = tf.where(tf.equal(r, largest), (g - b) / safe,
                 tf.where(tf.equal(g, largest), 2 + (b - r) / safe, 4 + (r - g) / safe))
  hue = tf.where(grey, tf.zeros_like(hue), hue) + delta[..., 0] * 6
  channels = []
  for offset in (5.0, 3.0, 1.0):
    m = tf.math.floormod(hue + offset, 6.0)
    channels.append(largest - spread * tf.clip_by_value(tf.minimum(m, 4 - m), 0.0, 1.0))
  return tf.stack(channels, axis=-1)


def _into_channels(tensor):
  """`[n, b, h, w, d] -> [b, h, w, n*d]` (a filter `[n, h, w, d] -> [h, w, n*d]`): the loop
  axis joins the channels, loop index major."""
  r = rank(tensor)
  shape = dynamic_shape(tensor)
  moved = tf.transpose(tensor, list(range(1, r - 1)) + [0, r - 1])
  return reshape(moved, shape[1:-1] + [shape[0] * shape[-1]])


def _out_of_channels(tensor, n, d):
  """Inverse of `_into_channels`: `[..., n*d] -> [n, ..., d]`."""
  shape = dynamic_shape(tensor)
  r = len(shape)
  split = reshape(tensor, shape[:-1] + [n, d])
  return tf.transpose(split, [r - 1] + list(range(r - 1)) + [r])


@register("Dilation2D", "Dilation2DBackpropFilter", "Dilation2DBackpropInput")
def _convert_dilation(op):
  """Channels are independent, so the loop axis joins them: every input packs into channels
  (`[n, b, h, w, d] -> [b, h, w, n*d]`, filters `[n, fh, fw, d] -> [fh, fw, n*d]`), and the
  output unpacks. An invariant filter in the forward or input-gradient op folds the loop axis
  into the batch instead (no transposes)."""
  n = loop_length(op.ctx)
  if not op.is_stacked(1) and op.type != "Dilation2DBackpropFilter":
    b = dynamic_shape(op.stacked(0))[1]
    inputs = [merge_leading(op.stacked(0)), op.invariant(1)]
    if op.type == "Dilation2DBackpropInput":
      inputs.append(merge_leading(op.stacked(2)))
    return stacked(split_leading(op.rebuild(inputs)[0], n, b))
  d = dynamic_shape(op.stacked(1))[-1]
  out = op.rebuild([_into_channels(op.stacked(i)) for i in range(op.num_inputs)])[0]
  return stacked(_out_of_channels(out, n, d))


@register("ExtractGlimpse", "ExtractGlimpseV2")
def _convert_extract_glimpse(op):
  """Folds images and offsets. Noise (what fills a glimpse outside its image) is drawn per
  pixel by an unseeded generator, so the loop's draws cannot be reproduced either; the
  folded glimpses draw theirs alike."""
  images = op.stacked(0)
  n, b = loop_length(op.ctx), dynamic_shape(images)[1]
  out = op.rebuild([merge_leading(images), op.invariant(1), merge_leading(op.stacked(2))])[0]
  return stacked(split_leading(out, n, b))


register_merge_batch("CombinedNonMaxSuppression", batch_inputs=(0, 1))
register_merge_batch("DrawBoundingBoxes", batch_inputs=(0, 1))
register_merge_batch("DrawBoundingBoxesV2", batch_inputs=(0, 1))
register_merge_batch("ExtractImagePatches")
register_merge_batch("ExtractVolumePatches")
register_leading_batch("HSVToRGB")
register_leading_batch("RGBToHSV")
register_merge_batch("ResizeArea")
register_merge_batch("ResizeBicubic")
register_merge_batch("ResizeBicubicGrad", batch_inputs=(0, 1))
register_merge_batch("ResizeBilinear")
register_merge_batch("ResizeBilinearGrad", batch_inputs=(0, 1))
register_merge_batch("ResizeNearestNeighbor")
register_merge_batch("ResizeNearestNeighborGrad")
register_merge_batch("ScaleAndTranslate")
register_merge_batch("ScaleAndTranslateGrad", batch_inputs=(0, 1))
