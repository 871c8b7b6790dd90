"""Image, spectral and array ops as users reach them: Keras preprocessing layers in
inference, `tf.image` on one image per iteration, dilated convolutions, `tf.compat.v1.Print`,
and gradients taken through pfor's outputs. Every body runs with the fallback off against
the sequential loop."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

RNG = np.random.default_rng(5)
IMAGES = tf.constant(RNG.uniform(0, 1, [4, 8, 10, 3]), tf.float32)
MODES = ["eager", "function", "dynamic", "xla"]


def _check(body, n=4, mode="function", tol=1e-5):
  testing.check_against_loop(body, n, mode=mode, tol=tol)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layer", [
    keras.layers.RandomRotation(0.2), keras.layers.RandomZoom(0.2),
    keras.layers.RandomTranslation(0.2, 0.1), keras.layers.Resizing(5, 7)],
    ids=["RandomRotation", "RandomZoom", "RandomTranslation", "Resizing"])
def test_keras_image_layer_in_inference_converts(layer, mode):
  _check(lambda i: layer(tf.gather(IMAGES, i), training=False), mode=mode, tol=1e-4)


@pytest.mark.parametrize("n", [4, 0])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("method", ["bilinear", "nearest", "bicubic", "area", "lanczos3"])
def test_resize_of_one_image_converts(method, mode, n):
  if mode == "xla" and method in ("bicubic", "area", "lanczos3"):
    pytest.skip("XLA has no kernel for this resize")
  _check(lambda i: tf.image.resize(tf.gather(IMAGES, i), [5, 7], method=method), n=n,
         mode=mode, tol=1e-4)


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])
def test_affine_transform_per_image_converts(mode):
  """keras.ops.image.affine_transform with one transform per example (as the random
  augmentation layers build them)."""
  angles = tf.constant(RNG.uniform(-0.5, 0.5, [4]), tf.float32)

  def body(i):
    c, s = tf.cos(angles[i]), tf.sin(angles[i])
    transform = tf.stack([c, -s, 1.0, s, c, -1.0, 0.0, 0.0])
    return keras.ops.image.affine_transform(tf.gather(IMAGES, i), transform,
                                            fill_mode="constant", fill_value=angles[i])

  _check(body, mode=mode, tol=1e-4)


@pytest.mark.parametrize("mode", MODES)
def test_keras_dilated_conv1d_converts(mode):
  layer = keras.layers.Conv1D(4, 3, dilation_rate=2, padding="same")
  signals = tf.constant(RNG.standard_normal([4, 12, 3]), tf.float32)
  layer(signals[:1])
  _check(lambda i: layer(tf.gather(signals, i)[None])[0], mode=mode, tol=1e-4)


@pytest.mark.parametrize("mode", MODES)
def test_atrous_conv2d_with_per_iteration_filters_converts(mode):
  filters = tf.constant(RNG.standard_normal([4, 3, 3, 3, 2]), tf.float32)
  _check(lambda i: tf.nn.atrous_conv2d(tf.gather(IMAGES, i)[None], tf.gather(filters, i), 2,
                                       "SAME"), mode=mode, tol=1e-4)


@pytest.mark.unchecked   # counts the ops pfor emits (or the prints): the check adds its own
def test_print_prints_once_per_call_with_stacked_values(capfd):
  x = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])

  @tf.function(autograph=False)
  def run():
    return vectorize.pfor(lambda i: tf.compat.v1.Print(x[i], [x[i]], "row: ",
                                                                summarize=10), 3,
                          fallback_to_while_loop=False)

  np.testing.assert_array_equal(run(), x)
  printed = [line for line in capfd.readouterr().err.splitlines() if "row: " in line]
  assert len(printed) == 1, printed
  assert "[[1 2][3 4][5 6]]" in printed[0], printed


def _gradients_match(body, sources, n=3, mode="function"):
  """d sum(pfor(body) * w) / d sources equals the loop's, w distinct per element."""

  def weighted(y):
    return tf.reduce_sum(y * tf.reshape(tf.cast(tf.range(tf.size(y)), y.dtype) * 0.1 + 1.0,
                                        tf.shape(y)))

  def vectorized():
    with tf.GradientTape() as tape:
      loss = weighted(vectorize.pfor(body, n, fallback_to_while_loop=False))
    return tape.gradient(loss, sources, unconnected_gradients="zero")

  with tf.GradientTape() as tape:
    loss = weighted(tf.stack([body(tf.constant(i)) for i in range(n)]))
  expected = tape.gradient(loss, sources, unconnected_gradients="zero")
  actual = tf.function(vectorized, jit_compile=(mode == "xla"), autograph=False)()
  for a, e in zip(actual, expected):
    np.testing.assert_allclose(tf.convert_to_tensor(a), tf.convert_to_tensor(e), rtol=1e-4,
                               atol=1e-4)


IMAGE_VARIABLE = tf.Variable(IMAGES[:3])
FACTORS = tf.Variable(RNG.uniform(0.5, 1.5, [3]), dtype=tf.float32)
TRANSFORMS = tf.constant(RNG.uniform(-0.2, 0.2, [3, 8]) + [1, 0, 0, 0, 1, 0, 0, 0],
                         tf.float32)
SHIFTS = tf.constant([1, -2, 3])

_GRADIENT_BODIES = {
    "resize": lambda i: tf.image.resize(IMAGE_VARIABLE[i], [5, 7]),
    "resize_bicubic": lambda i: tf.image.resize(IMAGE_VARIABLE[i], [5, 7], method="bicubic"),
    "projective_transform": lambda i: tf.raw_ops.ImageProjectiveTransformV3(
        images=IMAGE_VARIABLE[i:i + 1], transforms=TRANSFORMS[i:i + 1], output_shape=[8, 10],
        fill_value=0.0, interpolation="BILINEAR", fill_mode="REFLECT"),
    "crop_and_resize": lambda i: tf.image.crop_and_resize(
        IMAGE_VARIABLE[i:i + 1], TRANSFORMS[i:i + 1, :4] * 0.5, [0], [4, 4]),
    "rfft": lambda i: tf.abs(tf.signal.rfft2d(IMAGE_VARIABLE[i][..., 0])),
    "roll": lambda i: tf.roll(IMAGE_VARIABLE[i], SHIFTS[i], 1) * FACTORS[i],
    "diag": lambda i: tf.linalg.tensor_diag(FACTORS[i] * IMAGE_VARIABLE[i, 0, :, 0]),
    "space_to_batch": lambda i: tf.space_to_batch_nd(IMAGE_VARIABLE[i:i + 1], [2, 2],
                                                     [[0, 0], [1, 1]]) * FACTORS[i],
    "depth_to_space": lambda i: tf.nn.depth_to_space(
        tf.tile(IMAGE_VARIABLE[i:i + 1], [1, 1, 1, 4]), 2) * FACTORS[i],
}


_NO_XLA_KERNEL = ("resize_bicubic", "projective_transform", "crop_and_resize")


@pytest.mark.parametrize("mode", ["function", "xla"])
@pytest.mark.parametrize("name", sorted(_GRADIENT_BODIES))
def test_gradient_through_pfor_equals_loop(name, mode):
  if mode == "xla" and name in _NO_XLA_KERNEL:
    pytest.skip("XLA has no kernel for this op")
  _gradients_match(_GRADIENT_BODIES[name], [IMAGE_VARIABLE, FACTORS], mode=mode)


SQUARE = tf.constant(RNG.uniform(0, 1, [4, 6, 6, 3]), tf.float32)
OTHER = tf.constant(RNG.uniform(0, 1, [4, 8, 10, 3]), tf.float32)
AMOUNTS = tf.constant([0.5, 1.2, 2.0, 0.8])
TURNS = tf.constant([1, 2, 3, 0])
SIGNALS = tf.constant(RNG.standard_normal([4, 40]), tf.float32)

_EVERYDAY_BODIES = {
    "adjust_gamma": lambda i: tf.image.adjust_gamma(IMAGES[i], AMOUNTS[i], AMOUNTS[i]),
    "adjust_contrast_then_hue": lambda i: tf.image.adjust_hue(
        tf.image.adjust_contrast(IMAGES[i], AMOUNTS[i]), AMOUNTS[i] - 1.0),
    "adjust_saturation": lambda i: tf.image.adjust_saturation(IMAGES[i], AMOUNTS[i]),
    "rot90_per_image_turns": lambda i: tf.image.rot90(SQUARE[i], TURNS[i]),
    "resize_with_pad": lambda i: tf.image.resize_with_pad(IMAGES[i], 5, 5),
    "per_image_standardization": lambda i: tf.image.per_image_standardization(IMAGES[i]),
    "sobel_edges": lambda i: tf.image.sobel_edges(IMAGES[i][None]),
    "ssim": lambda i: tf.image.ssim(IMAGES[i], OTHER[i], 1.0, filter_size=3),
    "extract_patches": lambda i: tf.image.extract_patches(
        IMAGES[i][None], [1, 3, 3, 1], [1, 2, 2, 1], [1, 1, 1, 1], "SAME"),
    "stft_then_inverse": lambda i: tf.signal.inverse_stft(tf.signal.stft(SIGNALS[i], 8, 4), 8,
                                                         4),
    "dct": lambda i: tf.signal.dct(SIGNALS[i]),
    "fftshift": lambda i: tf.signal.fftshift(IMAGES[i]),
    "histogram": lambda i: tf.histogram_fixed_width(IMAGES[i], [0.2, 0.8], 7),
}


@pytest.mark.parametrize("name", sorted(_EVERYDAY_BODIES))
def test_everyday_image_and_signal_function_converts(name):
  _check(_EVERYDAY_BODIES[name], tol=1e-4)


def _in_branch(i):
  """Image and array ops in a branch taken by some iterations only (a stacked predicate)."""
  image = IMAGES[i]
  return tf.cond(i % 2 == 0,
                 lambda: tf.image.adjust_contrast(tf.image.resize(image, [6, 6]), AMOUNTS[i]),
                 lambda: tf.roll(tf.image.resize(image, [6, 6]), TURNS[i], 0))


def _in_loop(i):
  """Ops in a while loop whose trip count differs per iteration."""
  def step(k, image):
    turned = tf.image.adjust_hue(image, 0.1 * tf.cast(k, tf.float32))
    return k + 1, tf.raw_ops.ImageProjectiveTransformV3(
        images=turned[None], transforms=tf.constant([[1.0, 0.1, 0.5, 0.0, 1.0, 0.0, 0.0, 0.0]]),
        output_shape=[8, 10], fill_value=AMOUNTS[i], interpolation="BILINEAR",
        fill_mode="CONSTANT")[0]
  return tf.while_loop(lambda k, _: k < TURNS[i], step, [0, IMAGES[i]])[1]


def _in_loop_xla(i):
  """XLA-compilable ops in a while loop whose trip count differs per iteration."""
  def step(k, image):
    rolled = tf.roll(image, k + TURNS[i], 1)
    blocks = tf.space_to_batch_nd(rolled[None], [2, 2], [[0, 0], [0, 0]])
    return k + 1, tf.image.resize(tf.batch_to_space(blocks * AMOUNTS[i], [2, 2],
                                                    [[0, 0], [0, 0]])[0], [8, 10])
  return tf.while_loop(lambda k, _: k < TURNS[i], step, [0, IMAGES[i]])[1]


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])
@pytest.mark.parametrize("body", [_in_branch, _in_loop, _in_loop_xla],
                         ids=["cond", "while_loop", "while_loop_xla_ops"])
def test_ops_under_partitioned_control_flow(body, mode):
  _check(body, mode=mode, tol=1e-4)


@pytest.mark.parametrize("body", [_in_branch, _in_loop_xla], ids=["cond", "while_loop"])
def test_ops_under_masked_control_flow_xla(body):
  _check(body, mode="xla", tol=1e-4)


def test_branches_giving_different_shapes_name_the_problem():
  """rot90 of a non-square image by a per-image number of turns: the branches give [w, h]
  and [h, w], which cannot be stacked (the loop cannot either). The error should say that
  iterations give different shapes, not a DynamicStitch shape error."""
  with pytest.raises(vectorize.ConversionError,
                     match=r"(?s)conditional.*test_image.py:\d+.*\(10, 8, 3\) or \(8, 10, 3\).*"
                           r"iterations.*different shapes.*To fix: make every branch"):
    vectorize.pfor(lambda i: tf.image.rot90(IMAGES[i], TURNS[i]), 4,
                   fallback_to_while_loop=False)


def test_crop_box_index_out_of_range_fails_as_the_kernel_does():
  """Iteration 0's box index 1 is past its one image; folded it would crop iteration 1's."""
  box_index = tf.constant([[1], [0]])

  def body(i):
    return tf.image.crop_and_resize(IMAGES[i:i + 1], [[0.0, 0.0, 1.0, 1.0]], box_index[i],
                                    [3, 3])

  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"(?s)CropAndResize.*test_image.py:\d+.*box_index has values "
                           r"outside \[0, batch_size\)"):
    vectorize.pfor(body, 2, fallback_to_while_loop=False)


@pytest.mark.parametrize("mode", ["function", "xla"])
@pytest.mark.parametrize("stacked_factor", [True, False])
def test_adjust_contrast_has_the_gradient_of_its_formula(mode, stacked_factor):
  """TF has no gradient for AdjustContrastv2 (fuzz seed 1001137 found the loop's missing);
  the vectorized op has that of (x - mean) * f + mean."""
  rng = np.random.default_rng(0)
  images = tf.constant(rng.uniform(0, 1, [3, 4, 5, 3]), tf.float32)
  factors = tf.constant(rng.uniform(0.2, 2, [3]), tf.float32)
  pick = (lambda f, i: f[i]) if stacked_factor else (lambda f, i: f[0])

  def gradients(adjust):
    def run():
      with tf.GradientTape() as tape:
        tape.watch([images, factors])
        out = vectorize.pfor(lambda i: adjust(images[i], pick(factors, i)), 3,
                             fallback_to_while_loop=False)
        loss = tf.reduce_sum(out * out)
      return tape.gradient(loss, [images, factors])
    return [tf.convert_to_tensor(g).numpy() for g in tf.function(run, jit_compile=mode == "xla")()]

  def formula(x, f):
    mean = tf.reduce_mean(x, [0, 1], keepdims=True)
    return (x - mean) * f + mean

  for actual, expected in zip(gradients(tf.image.adjust_contrast), gradients(formula)):
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


_TRANSFORM_IMAGES = tf.constant(np.random.default_rng(1).uniform(-1, 1, [4, 9, 7, 3]),
                                tf.float32)


def _transforms():
  rng = np.random.default_rng(2)
  a, s = rng.uniform(-3, 3, 4), rng.uniform(0.3, 3, 4)
  t = np.stack([s * np.cos(a), -np.sin(a) * s, rng.uniform(-20, 20, 4), np.sin(a),
                np.cos(a) * s, rng.uniform(-20, 20, 4), rng.uniform(-0.05, 0.05, 4),
                rng.uniform(-0.05, 0.05, 4)], 1)
  t[0] = [1, 0, 0, 0, 1, 0, 0, 0]
  return tf.constant(t, tf.float32)


@pytest.mark.parametrize("interpolation", ["BILINEAR", "NEAREST"])
@pytest.mark.parametrize("fill_mode", ["REFLECT", "NEAREST", "CONSTANT"])
@pytest.mark.parametrize("output_shape", [[9, 7], [5, 11]])
def test_projective_transform_under_xla_equals_the_kernels_loop(interpolation, fill_mode,
                                                                 output_shape):
  """XLA has no kernel: converters/projective.py computes it in TF ops, per-iteration fill
  values included."""
  transforms, fills = _transforms(), tf.constant([0.0, 1.5, -2.0, 0.25])

  def body(i):
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=_TRANSFORM_IMAGES[i][None], transforms=transforms[i][None],
        output_shape=output_shape, fill_value=fills[i], interpolation=interpolation,
        fill_mode=fill_mode)[0]

  expected = testing.sequential(body, 4)
  testing.assert_allclose(testing.run_pfor(body, 4, mode="xla"), expected, 1e-6)


def test_keras_random_rotation_compiles_under_xla():
  layer = keras.layers.RandomRotation(0.3, seed=5)
  out = testing.run_pfor(lambda i: layer(_TRANSFORM_IMAGES[i], training=True), 4, mode="xla")
  assert out.shape == (4, 9, 7, 3) and len({row.tobytes() for row in out}) == 4


@pytest.mark.unchecked   # counts the ops pfor emits (or the prints): the check adds its own
@pytest.mark.parametrize("mode", ["function", "dynamic", "eager"])
@pytest.mark.parametrize("fill_mode", ["REFLECT", "NEAREST", "CONSTANT"])
def test_projective_transform_on_cpu_runs_compiled_and_equals_the_kernels_loop(mode,
                                                                                fill_mode):
  """Outside XLA on CPU the batch's transform runs as converters/projective.py's TF ops
  compiled by XLA (faster than the CPU kernel), not the kernel; values and gradients equal
  the kernel's loop."""
  transforms = _transforms()

  def body(i):
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=_TRANSFORM_IMAGES[i][None], transforms=transforms[i][None],
        output_shape=[9, 7], fill_value=0.5, interpolation="BILINEAR", fill_mode=fill_mode)[0]

  graph = tf.function(lambda: vectorize.pfor(body, 4, fallback_to_while_loop=False)
                      ).get_concrete_function().graph
  assert "ImageProjectiveTransformV3" not in testing.all_op_types(graph)
  testing.assert_allclose(testing.run_pfor(body, 4, mode=mode), testing.sequential(body, 4),
                          1e-6)

  def loss(images):
    return tf.reduce_sum(vectorize.pfor(
        lambda i: body(i) * tf.cast(i + 1, tf.float32), 4, fallback_to_while_loop=False))
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(_TRANSFORM_IMAGES)
    actual = loss(_TRANSFORM_IMAGES)
    expected = tf.reduce_sum(tf.stack([body(i) * (i + 1.0) for i in range(4)]))
  gradients = [tf.convert_to_tensor(tape.gradient(y, _TRANSFORM_IMAGES))
               for y in (actual, expected)]
  np.testing.assert_allclose(*gradients, rtol=1e-5, atol=1e-5)


X = tf.constant([0.5, -1.0, 2.0, 0.3])
TRIPS = tf.constant([1, 3, 0, 2])
W = tf.constant(np.random.default_rng(0).standard_normal([2, 2, 3]), tf.float32)


def _make_body(x):
  def body(i):
    def step(j, c):
      unrelated = tf.image.adjust_saturation(tf.abs(W), 0.5)   # not connected to x
      return j + 1, tf.tanh(c) + tf.reduce_mean(unrelated)
    return tf.while_loop(lambda j, c: j < TRIPS[i], step, (0, x[i]), maximum_iterations=5)[1]
  return body


@pytest.mark.xfail(strict=True, raises=LookupError, reason="converters/image.py or the while "
                   "loop: pfor's loop keeps the invariant AdjustSaturation inside its body, and "
                   "TF's while gradient then asks AdjustSaturation (no registered gradient) "
                   "for one; the loop traced in a graph does not. A differentiable form, or "
                   "hoisting invariant ops out of the loop, would fix it")
def test_gradient_of_a_loop_with_an_unconnected_adjust_saturation():
  """Fuzz seed 1002173, shrunk."""
  @tf.function(autograph=False)
  def pfor_grad(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      total = tf.reduce_sum(vectorize.pfor(_make_body(x), 4, fallback_to_while_loop=False))
    return tape.gradient(total, x)

  @tf.function(autograph=False)
  def loop_grad(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      body = _make_body(x)
      total = tf.reduce_sum(tf.stack([body(tf.constant(i)) for i in range(4)]))
    return tape.gradient(total, x)

  np.testing.assert_allclose(pfor_grad(X), loop_grad(X), rtol=1e-5)
