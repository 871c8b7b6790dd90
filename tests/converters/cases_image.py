"""OpCases for converters/image.py.

Images are per-iteration batches `[b, h, w, c]` (the kernels' layout) or single images
`[h, w, c]` through `tf.image`, which adds and removes the batch axis. Per-image parameters
(transforms, boxes, factors) are arguments too, so every stacked/invariant pattern of them
is tested.
"""

import numpy as np
import tensorflow as tf

from tests.converters.op_cases import OpCase, indices_below

_TOL = 1e-4
_NO_XLA = "XLA has no kernel for this op"
_F32_F64 = (tf.float32, tf.float64)


def in_unit_interval(rng, shape, dtype):
  """Pixel values in [0, 1)."""
  return rng.uniform(0.0, 1.0, shape).astype(tf.as_dtype(dtype).as_numpy_dtype)


def small(rng, shape, dtype):
  """Values in [-0.4, 0.4]: hue deltas."""
  return rng.uniform(-0.4, 0.4, shape).astype(tf.as_dtype(dtype).as_numpy_dtype)


def factors(rng, shape, dtype):
  """Values in [0.2, 2]: contrast and saturation factors."""
  return rng.uniform(0.2, 2.0, shape).astype(tf.as_dtype(dtype).as_numpy_dtype)


def near_identity_transforms(rng, shape, dtype):
  """Projective transforms `[a0, a1, a2, b0, b1, b2, c0, c1]` near the identity, some
  reading outside the image."""
  identity = np.array([1, 0, 0, 0, 1, 0, 0, 0], np.float64)
  noise = rng.uniform(-1, 1, shape) * np.array([0.2, 0.2, 1.5, 0.2, 0.2, 1.5, 0.01, 0.01])
  return (identity + noise).astype(tf.as_dtype(dtype).as_numpy_dtype)


def boxes(rng, shape, dtype):
  """Boxes `[y1, x1, y2, x2]` in normalized coordinates, a few flipped or reaching out."""
  return rng.uniform(-0.2, 1.2, shape).astype(tf.as_dtype(dtype).as_numpy_dtype)


def glimpse_offsets(rng, shape, dtype):
  """Centered, normalized glimpse offsets in (-1, 1), some reaching outside the image."""
  return rng.uniform(-1.0, 1.0, shape).astype(tf.as_dtype(dtype).as_numpy_dtype)


def pixel_offsets(rng, shape, dtype):
  """Glimpse corners in pixels, inside a 6x7 image."""
  return rng.integers(0, 3, shape).astype(tf.as_dtype(dtype).as_numpy_dtype)


def sorted_boxes(rng, shape, dtype):
  """Boxes `[y1, x1, y2, x2]` with y1 < y2 and x1 < x2, overlapping often."""
  corners = rng.uniform(0.0, 1.0, list(shape[:-1]) + [2, 2])
  return np.concatenate([corners.min(-2), corners.max(-2)], -1).astype(
      tf.as_dtype(dtype).as_numpy_dtype)


def scores(rng, shape, dtype):
  """Distinct scores in [0, 1) (ties would make the order of equal scores arbitrary)."""
  return rng.permutation(np.prod(shape)).reshape(shape).astype(
      tf.as_dtype(dtype).as_numpy_dtype) / np.prod(shape)


def _dilation(x, f):
  return tf.nn.dilation2d(x, f, [1, 2, 1, 1], "SAME", "NHWC", [1, 1, 2, 1])


def _dilation_grad(wrt):
  """The gradient of a dilation w.r.t. its input (0) or filter (1), for a given output
  gradient."""

  def build(x, f, dy):
    with tf.GradientTape() as tape:
      tape.watch([x, f][wrt])
      y = _dilation(x, f)
    return tape.gradient(y, [x, f][wrt], output_gradients=dy)

  return build


def _resize(method, size=(5, 7), **kwargs):
  return lambda x: tf.image.resize(x, size, method=method, **kwargs)


def _raw_resize(op_type, **attrs):
  return lambda x: getattr(tf.raw_ops, op_type)(images=x, size=[5, 3], **attrs)


def _resize_grad(method):
  """The gradient of a resize w.r.t. its images, for a given output gradient."""

  def build(x, dy):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = tf.image.resize(x, [5, 3], method=method)
    return tape.gradient(y, x, output_gradients=dy)

  return build


def _transform(version=3, interpolation="BILINEAR", fill_mode="CONSTANT"):
  op = getattr(tf.raw_ops, f"ImageProjectiveTransformV{version}")
  if version == 2:
    return lambda x, t: op(images=x, transforms=t, output_shape=[6, 5],
                           interpolation=interpolation, fill_mode=fill_mode)
  return lambda x, t, fill: op(images=x, transforms=t, output_shape=[6, 5], fill_value=fill,
                               interpolation=interpolation, fill_mode=fill_mode)


def _crop(method="bilinear"):
  return lambda x, b, i: tf.image.crop_and_resize(x, b, i, [3, 4], method=method,
                                                  extrapolation_value=0.5)


def _crop_grad(x, b, i, dy):
  with tf.GradientTape() as tape:
    tape.watch([x, b])
    y = tf.image.crop_and_resize(x, b, i, [3, 4])
  return tape.gradient(y, [x, b], output_gradients=dy)


_TRANSFORM_MAKE = [None, near_identity_transforms, None]
_CROP_MAKE = [None, boxes, indices_below(2)]
_CROP_DTYPES = ((tf.float32, tf.float32, tf.int32),)

CASES = [
    # Resizing, single images and batches, each method.
    OpCase("ResizeBilinear", _resize("bilinear"), [[4, 6, 3]], dtypes=_F32_F64, tol=_TOL),
    OpCase("ResizeBilinear-batch", _resize("bilinear"), [[2, 4, 6, 3]], tol=_TOL),
    OpCase("ResizeBilinear-align_corners", _raw_resize("ResizeBilinear", align_corners=True),
           [[2, 4, 6, 3]], tol=_TOL),
    OpCase("ResizeNearestNeighbor", _resize("nearest"), [[4, 6, 3]], dtypes=_F32_F64),
    OpCase("ResizeNearestNeighbor-half_pixel",
           _raw_resize("ResizeNearestNeighbor", half_pixel_centers=True), [[2, 4, 6, 3]]),
    OpCase("ResizeBicubic", _resize("bicubic"), [[4, 6, 3]], dtypes=_F32_F64, tol=_TOL,
           xla=_NO_XLA),
    OpCase("ResizeBicubic-antialias", _resize("bicubic", (2, 3), antialias=True),
           [[4, 6, 3]], op_types=("ScaleAndTranslate",), tol=_TOL, xla=_NO_XLA),
    OpCase("ResizeArea", _resize("area"), [[4, 6, 3]], tol=_TOL, xla=_NO_XLA),
    OpCase("ResizeBilinearGrad", _resize_grad("bilinear"), [[2, 4, 6, 3], [2, 5, 3, 3]],
           tol=_TOL),
    OpCase("ResizeNearestNeighborGrad", _resize_grad("nearest"),
           [[2, 4, 6, 3], [2, 5, 3, 3]], tol=_TOL, xla=_NO_XLA),
    OpCase("ResizeBicubicGrad", _resize_grad("bicubic"), [[2, 4, 6, 3], [2, 5, 3, 3]],
           tol=_TOL, xla=_NO_XLA),
    OpCase("ScaleAndTranslateGrad", _resize_grad("lanczos3"), [[2, 4, 6, 3], [2, 5, 3, 3]],
           tol=_TOL, xla=_NO_XLA),
    # Projective transforms: one per image, one for the batch, per-iteration fill values.
    OpCase("ImageProjectiveTransformV3", _transform(), [[2, 6, 5, 3], [2, 8], []],
           make=_TRANSFORM_MAKE, tol=_TOL, xla=True),
    OpCase("ImageProjectiveTransformV3-one_transform", _transform(),
           [[2, 6, 5, 3], [1, 8], []], make=_TRANSFORM_MAKE, tol=_TOL, xla=True),
    OpCase("ImageProjectiveTransformV3-nearest", _transform(interpolation="NEAREST"),
           [[2, 6, 5, 3], [2, 8], []], make=_TRANSFORM_MAKE, tol=_TOL, xla=True),
    OpCase("ImageProjectiveTransformV3-reflect", _transform(fill_mode="REFLECT"),
           [[2, 6, 5, 3], [2, 8], []], make=_TRANSFORM_MAKE, tol=_TOL, xla=True),
    OpCase("ImageProjectiveTransformV3-wrap", _transform(fill_mode="WRAP"),
           [[2, 6, 5, 3], [1, 8], []], make=_TRANSFORM_MAKE, tol=_TOL,
           xla="XLA has no kernel, and converters/projective.py no WRAP fill mode"),
    OpCase("ImageProjectiveTransformV3-nearest_fill",
           _transform(interpolation="NEAREST", fill_mode="NEAREST"),
           [[2, 6, 5, 3], [2, 8], []], make=_TRANSFORM_MAKE, tol=_TOL, xla=True),
    OpCase("ImageProjectiveTransformV2", _transform(version=2), [[2, 6, 5, 3], [2, 8]],
           make=_TRANSFORM_MAKE[:2], tol=_TOL, xla=True),
    # Crops: boxes and box indices per iteration.
    OpCase("CropAndResize", _crop(), [[2, 6, 7, 3], [4, 4], [4]], dtypes=_CROP_DTYPES,
           make=_CROP_MAKE, tol=_TOL, xla=_NO_XLA),
    OpCase("CropAndResize-nearest", _crop("nearest"), [[2, 6, 7, 3], [4, 4], [4]],
           dtypes=_CROP_DTYPES, make=_CROP_MAKE, tol=_TOL, xla=_NO_XLA),
    OpCase("CropAndResizeGradImage", _crop_grad, [[2, 6, 7, 3], [4, 4], [4], [4, 3, 4, 3]],
           dtypes=((tf.float32, tf.float32, tf.int32, tf.float32),),
           op_types=("CropAndResizeGradImage", "CropAndResizeGradBoxes"),
           make=_CROP_MAKE + [None], tol=_TOL, xla=_NO_XLA),
    # Patches, morphology, glimpses, boxes.
    OpCase("ExtractImagePatches", lambda x: tf.image.extract_patches(
        x, [1, 2, 3, 1], [1, 2, 1, 1], [1, 1, 2, 1], "VALID"), [[2, 5, 7, 3]]),
    OpCase("ExtractVolumePatches", lambda x: tf.extract_volume_patches(
        x, [1, 2, 2, 2, 1], [1, 1, 2, 1, 1], "SAME"), [[2, 3, 4, 4, 2]], xla=_NO_XLA),
    OpCase("Dilation2D", _dilation, [[2, 6, 7, 3], [2, 3, 3]], tol=_TOL, xla=_NO_XLA),
    OpCase("Dilation2DBackpropInput", _dilation_grad(0), [[2, 6, 7, 3], [2, 3, 3], [2, 3, 7, 3]],
           tol=_TOL, xla=_NO_XLA),
    OpCase("Dilation2DBackpropFilter", _dilation_grad(1),
           [[2, 6, 7, 3], [2, 3, 3], [2, 3, 7, 3]], tol=_TOL, xla=_NO_XLA),
    OpCase("ExtractGlimpseV2", lambda x, offsets: tf.image.extract_glimpse(
        x, [3, 4], offsets, noise="zero"), [[2, 6, 7, 3], [2, 2]], tol=_TOL,
           make=[None, glimpse_offsets], xla=_NO_XLA),
    OpCase("ExtractGlimpse", lambda x, offsets: tf.raw_ops.ExtractGlimpse(
        input=x, size=[3, 4], offsets=offsets, centered=False, normalized=False,
        uniform_noise=False,
        noise="zero"), [[2, 6, 7, 3], [2, 2]], tol=_TOL, make=[None, pixel_offsets],
           xla=_NO_XLA),
    # Noise fills only what lies outside the image: none here.
    OpCase("ExtractGlimpseV2-uniform_noise_inside", lambda x, offsets: tf.image.extract_glimpse(
        x, [3, 4], offsets, centered=False, normalized=False), [[2, 6, 7, 3], [2, 2]],
           tol=_TOL, make=[None, pixel_offsets], xla=_NO_XLA),
    OpCase("DrawBoundingBoxesV2", lambda x, b: tf.image.draw_bounding_boxes(
        x, b, [[1.0, 0.0, 0.0, 1.0], [0.0, 0.5, 1.0, 1.0]]), [[2, 6, 7, 3], [2, 3, 4]],
           make=[None, boxes], xla=_NO_XLA),
    OpCase("DrawBoundingBoxes", lambda x, b: tf.raw_ops.DrawBoundingBoxes(images=x, boxes=b),
           [[2, 6, 7, 4], [2, 3, 4]], make=[None, boxes], xla=_NO_XLA),
    OpCase("CombinedNonMaxSuppression", lambda b, s: tuple(tf.image.combined_non_max_suppression(
        b, s, 3, 5, iou_threshold=0.4, score_threshold=0.2)), [[2, 6, 1, 4], [2, 6, 3]],
           make=[sorted_boxes, scores], xla=_NO_XLA),
    OpCase("CombinedNonMaxSuppression-per_class", lambda b, s: tuple(
        tf.image.combined_non_max_suppression(b, s, 2, 5, pad_per_class=True,
                                              clip_boxes=False)),
           [[2, 6, 3, 4], [2, 6, 3]], make=[sorted_boxes, scores], xla=_NO_XLA),
    # Colour.
    OpCase("RGBToHSV", tf.image.rgb_to_hsv, [[4, 5, 3]], dtypes=_F32_F64,
           make=[in_unit_interval]),
    OpCase("HSVToRGB", tf.image.hsv_to_rgb, [[4, 5, 3]], dtypes=_F32_F64,
           make=[in_unit_interval]),
    OpCase("AdjustContrastv2", tf.image.adjust_contrast, [[4, 5, 3], []],
           make=[in_unit_interval, factors]),
    OpCase("AdjustContrastv2-batch", tf.image.adjust_contrast, [[2, 4, 5, 3], []],
           make=[in_unit_interval, factors]),
    # Hue and saturation also of values outside [0, 1] (the default normal values), as
    # after a contrast adjustment.
    OpCase("AdjustHue", tf.image.adjust_hue, [[4, 5, 3], []], make=[in_unit_interval, small]),
    OpCase("AdjustHue-any_values", tf.image.adjust_hue, [[2, 4, 5, 3], []],
           make=[None, small],
           xla="XLA's AdjustHue differs from the CPU kernel (the reference) outside [0, 1]"),
    OpCase("AdjustSaturation", tf.image.adjust_saturation, [[2, 4, 5, 3], []],
           make=[in_unit_interval, factors]),
    OpCase("AdjustSaturation-any_values", tf.image.adjust_saturation, [[4, 5, 3], []],
           make=[None, factors]),
]
