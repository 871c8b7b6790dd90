"""Images decoded at their own sizes, then resized to one size, against the loop.

The decoded images differ per iteration in height and width (a multi-axis ragged value);
a resize to a fixed size makes them stacked again. Fallback off; eager, tf.function,
run-time n and n = 0.
"""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.converters.test_per_row_loop import _shape_ops_written_to_lists
from tests.converters.test_ragged import _reference, _run

SIZES = [(5, 7), (9, 4), (6, 6), (1, 1), (3, 12)]
N = len(SIZES)
_RNG = np.random.RandomState(0)
_PIXELS = [_RNG.randint(0, 256, [h, w, 3]).astype(np.uint8) for h, w in SIZES]
PNGS = tf.stack([tf.io.encode_png(p) for p in _PIXELS])
JPEGS = tf.stack([tf.io.encode_jpeg(p) for p in _PIXELS])
BRIGHTNESS = tf.constant([0.1, -0.2, 0.3, 0.0, 0.5])
SAME_SIZE = tf.stack([tf.io.encode_png(_RNG.randint(0, 256, [4, 5, 3]).astype(np.uint8))
                      for _ in range(N)])


def _png(i):
  return tf.io.decode_png(PNGS[i], channels=3)


def _resized(size, method, align_corners=None):
  if align_corners is None:
    return lambda i: tf.image.resize(_png(i), size, method=method)
  resize = {"bilinear": tf.raw_ops.ResizeBilinear, "nearest": tf.raw_ops.ResizeNearestNeighbor,
            "bicubic": tf.raw_ops.ResizeBicubic}[method]
  return lambda i: resize(images=tf.expand_dims(_png(i), 0), size=size,
                          align_corners=align_corners, half_pixel_centers=False)[0]


BODIES = {
    "bilinear": _resized([4, 4], "bilinear"),
    "bilinear_up": _resized([10, 3], "bilinear"),
    "nearest": _resized([4, 6], "nearest"),
    "bicubic": _resized([8, 3], "bicubic"),
    "bilinear_align_corners": _resized([7, 5], "bilinear", True),
    "bilinear_legacy": _resized([7, 5], "bilinear", False),
    "nearest_align_corners": _resized([7, 5], "nearest", True),
    "nearest_legacy": _resized([3, 9], "nearest", False),
    "bicubic_legacy": _resized([7, 5], "bicubic", False),
    "jpeg": lambda i: tf.image.resize(tf.io.decode_jpeg(JPEGS[i], channels=3), [4, 4]),
    "decode_image": lambda i: tf.image.resize(
        tf.io.decode_image(PNGS[i], channels=3, expand_animations=False), [5, 5]),
    "convert_dtype": lambda i: tf.image.resize(
        tf.image.convert_image_dtype(_png(i), tf.float32), [6, 6]),
    "per_iteration_brightness": lambda i: tf.image.resize(
        tf.cast(_png(i), tf.float32) / 255. + BRIGHTNESS[i], [4, 4]),
    "one_size_bilinear": lambda i: tf.image.resize(
        tf.io.decode_png(SAME_SIZE[i], channels=3), [3, 7]),
    "one_size_nearest": lambda i: tf.image.resize(
        tf.io.decode_png(SAME_SIZE[i], channels=3), [6, 2], method="nearest"),
    # no gather form: each image through the op's own kernel in a loop (code-blind round 13)
    "area": _resized([4, 6], "area"),
    "lanczos3": _resized([5, 5], "lanczos3"),
    "gaussian_float": lambda i: tf.image.resize(
        tf.image.convert_image_dtype(_png(i), tf.float32), [3, 8], method="gaussian"),
    "bilinear_antialias": lambda i: tf.image.resize(_png(i), [4, 4], antialias=True),
    "one_size_area": lambda i: tf.image.resize(
        tf.io.decode_png(SAME_SIZE[i], channels=3), [2, 3], method="area"),
    "height_and_resized": lambda i: (tf.shape(_png(i))[0],
                                     tf.image.resize(_png(i), [3, 3], method="nearest")),
}

_LOOPED = ("area", "lanczos3", "gaussian_float", "bilinear_antialias", "one_size_area")

TOLERANCE = 2e-4   # pixels of 0..255: the kernels' float sums in another order


def _assert_close(actual, expected):
  for a, e in zip(tf.nest.flatten(actual), expected):
    assert not isinstance(a, tf.RaggedTensor)
    assert a.shape == e.shape and a.dtype == e.dtype, (a.shape, e.shape, a.dtype, e.dtype)
    np.testing.assert_allclose(a.numpy().astype(np.float64), e, rtol=1e-6, atol=TOLERANCE)


# Every body eagerly and with a run-time n; "bilinear" in a caller's tf.function too. An eager
# pfor of a static n traces the same `pfor_in_graph` in a tf.function of its own, so the
# caller's function adds nothing that depends on the body.
@pytest.mark.parametrize("name,n,mode", [
    pytest.param(name, n, mode, id=f"{name}-{n}-{mode}") for name in sorted(BODIES)
    for n in (N, 0) for mode in ("eager", "function", "dynamic")
    if (mode != "function" or name == "bilinear")
    and (n or name not in _LOOPED or name == "area")])
def test_images_of_own_sizes_resized_equal_loop(name, n, mode):
  body = BODIES[name]
  _assert_close(_run(body, n, mode), _reference(body, n))


def test_resize_has_no_loop_or_conditional_after_the_decode():
  fn = tf.function(lambda: vectorize.pfor(BODIES["bilinear"], N, fallback_to_while_loop=False))
  types = [op.type for op in fn.get_concrete_function().graph.get_operations()]
  assert types.count("While") + types.count("StatelessWhile") == 1      # the decodes'
  assert not {"If", "StatelessIf", "Case"} & set(types)


def test_decoded_sizes_are_written_as_plain_int32():
  fn = tf.function(lambda: vectorize.pfor(BODIES["bilinear"], N, fallback_to_while_loop=False))
  assert not _shape_ops_written_to_lists(fn)


def test_images_of_one_size_returned_whole_stay_dense():
  """Only uses that take images of their own sizes make them so: returned, they keep the
  decode's dense converter (images of one size stack)."""
  body = lambda i: tf.io.decode_png(SAME_SIZE[i], channels=3)
  actual = _run(body, N, "function")
  assert not isinstance(actual, tf.RaggedTensor)
  np.testing.assert_array_equal(actual, np.stack([body(i) for i in range(N)]))


def test_gradient_through_resized_images():
  scale = tf.Variable(0.5)

  def loss(i):
    return tf.reduce_sum(tf.image.resize(tf.cast(_png(i), tf.float32) * scale, [4, 4]) ** 2)

  def gradient(fn):
    with tf.GradientTape() as tape:
      y = tf.reduce_sum(fn())
    return tape.gradient(y, scale)

  vectorized = gradient(lambda: vectorize.pfor(loss, N, fallback_to_while_loop=False))
  loop = gradient(lambda: tf.stack([loss(tf.constant(i)) for i in range(N)]))
  np.testing.assert_allclose(vectorized, loop, rtol=1e-5)
