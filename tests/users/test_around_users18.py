"""Round 18 users: what real projects do AROUND a vectorized function.

Mixed precision (Keras dtype policies, float16 / bfloat16 bodies, per-example gradients of
mixed-precision models, DP-SGD under a loss-scale optimizer); SavedModel export and reload of
modules whose `tf.function`s call pfor / vectorized_map, checkpoints of the variables a
vectorized body reads or updates; `tf.function` input signatures with a None batch, run-time
batch sizes (0 included), `reduce_retracing`; jacobians / hessians of Keras models against
`tf.GradientTape` (experimental_use_pfor=False); custom gradients, `tf.stop_gradient`,
`tf.recompute_grad`; stateless and stateful random ops; the integer, unsigned, boolean,
complex and half-precision dtypes users meet through ordinary ops.

Every program is written for ONE example and checked against the per-example loop (its
outputs stacked, `tf.ragged.stack` where the sizes differ), in the modes listed for it:

  eager      vectorize.pfor(body, n) called eagerly
  function   inside tf.function, n a Python int (a few programs; runtime_n is traced too)
  xla        inside tf.function(jit_compile=True) (against the loop compiled by XLA where
             the body draws stateless random numbers: XLA draws other numbers than TF)
  runtime_n  tf.function with n a run-time scalar (input_signature [] int32)
  zero       n = 0: dtype and shape [0] + the per-example shape
"""
import logging
import os
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.users._util import run_pfor

ALL = ("eager", "xla", "runtime_n", "zero")      # runtime_n runs inside a tf.function
WITH_FUNCTION = ALL   # (a static-n "function" mode dropped: runtime_n traces a graph too)
NO_XLA = ("eager", "runtime_n", "zero")

# ----------------------------------------------------------------------------- harness

_DEFAULT_TOL = {
    "float16": (1e-2, 1e-2), "bfloat16": (3e-2, 3e-2), "float32": (1e-5, 1e-6),
    "float64": (1e-10, 1e-12), "complex64": (1e-5, 1e-5), "complex128": (1e-10, 1e-12),
}


def _np(x):
  if isinstance(x, (tf.Tensor, tf.Variable)):
    return x.numpy()
  return np.asarray(x)


def assert_close(got, want, rtol=None, atol=None, path="out"):
  """Structures, dtypes and shapes equal; floats within tolerance, everything else exact."""
  if want is None:
    assert got is None, f"{path}: expected None, got {got!r}"
    return
  if isinstance(want, dict):
    assert isinstance(got, dict) and sorted(got) == sorted(want), (path, got, want)
    for k in want:
      assert_close(got[k], want[k], rtol, atol, f"{path}[{k!r}]")
    return
  if isinstance(want, (list, tuple)):
    assert isinstance(got, (list, tuple)) and len(got) == len(want), (path, got, want)
    for k, (g, w) in enumerate(zip(got, want)):
      assert_close(g, w, rtol, atol, f"{path}[{k}]")
    return
  if isinstance(want, tf.RaggedTensor):
    assert isinstance(got, tf.RaggedTensor), f"{path}: expected a RaggedTensor, got {type(got)}"
    assert got.dtype == want.dtype, (path, got.dtype, want.dtype)
    assert got.shape[0] == want.shape[0], (path, got.shape, want.shape)
    g_rows, w_rows = got.to_list(), want.to_list()
    assert len(g_rows) == len(w_rows)
    for k, (g, w) in enumerate(zip(g_rows, w_rows)):
      g, w = np.asarray(g), np.asarray(w)
      assert g.shape == w.shape, (f"{path} row {k}", g.shape, w.shape)
      if g.dtype.kind in "fc":
        np.testing.assert_allclose(g, w, rtol=rtol or 1e-5, atol=atol or 1e-6)
      else:
        np.testing.assert_array_equal(g, w)
    return
  g, w = _np(got), _np(want)
  gd = got.dtype.name if hasattr(got, "dtype") and hasattr(got.dtype, "name") else g.dtype.name
  wd = want.dtype.name if hasattr(want, "dtype") and hasattr(want.dtype, "name") else w.dtype.name
  assert gd == wd, f"{path}: dtype {gd} != {wd}"
  assert g.shape == w.shape, f"{path}: shape {g.shape} != {w.shape}"
  if wd in _DEFAULT_TOL:
    r0, a0 = _DEFAULT_TOL[wd]
    r, a = max(r0, rtol or 0.0), max(a0, atol or 0.0)
    kind = np.complex128 if wd.startswith("complex") else np.float64
    np.testing.assert_allclose(g.astype(kind), w.astype(kind), rtol=r, atol=a,
                               err_msg=path, equal_nan=True)
  else:
    np.testing.assert_array_equal(g, w, err_msg=path)


def _stack(*xs):
  if all(isinstance(x, (tf.Tensor, np.ndarray)) for x in xs):
    if len({tuple(x.shape) for x in xs}) > 1:
      return tf.ragged.stack(list(xs))
  return tf.stack(xs)


def loop(body, n):
  """The per-example loop: body(i) for each i, eagerly, stacked."""
  outs = [body(tf.constant(i)) for i in range(n)]
  return tf.nest.map_structure(_stack, *outs)


def loop_xla(body, n):
  return tf.function(lambda: loop(body, n), jit_compile=True)()


def empty_like_example(body):
  """[0] + per-example shape, per output, from one example."""
  one = body(tf.constant(0))
  return tf.nest.map_structure(
      lambda t: np.zeros((0,) + tuple(t.shape), t.dtype.as_numpy_dtype), one)


def check_program(body, n, mode, rtol=None, atol=None, ragged_outputs=(), xla_loop=False):
  """pfor(body, n) in `mode` against the per-example loop. Under XLA the reference is the
  eager loop, or with `xla_loop` (stateless random bodies: XLA draws other numbers than
  TF's kernels) the loop compiled by XLA."""
  if mode == "zero":
    got = run_pfor(body, 0, mode)
    want = empty_like_example(body)
    flat_g, flat_w = tf.nest.flatten(got, expand_composites=False), tf.nest.flatten(want)
    assert len(flat_g) == len(flat_w)
    for k, (g, w) in enumerate(zip(flat_g, flat_w)):
      if isinstance(g, tf.RaggedTensor):          # per-example size unknown: ragged, 0 rows
        assert k in ragged_outputs, f"output {k} came back ragged at n = 0"
        assert g.dtype == tf.as_dtype(w.dtype) and g.shape[0] == 0, g
      else:
        assert g.dtype == tf.as_dtype(w.dtype), (k, g.dtype, w.dtype)
        assert g.shape[0] == 0 and tuple(g.shape[1:]) == w.shape[1:], (k, g.shape, w.shape)
    return
  if mode == "xla" and xla_loop:
    try:
      want = loop_xla(body, n)
    except tf.errors.InvalidArgumentError as e:   # TF has no XLA kernel for an op of the
      if "unsupported operations" not in str(e):  # loop (MatrixDeterminant, SegmentSum):
        raise                                     # pfor may still compile; compare with
      want = loop(body, n)                        # the loop run without XLA
  else:
    want = loop(body, n)
  got = run_pfor(body, n, mode)
  assert_close(got, want, rtol, atol)


def R(*shape, seed=0, dtype=np.float32, lo=-1.0, hi=1.0):
  return np.random.RandomState(seed).uniform(lo, hi, size=shape).astype(dtype)


def tape_per_example(loss_fn, variables, *batch):
  """The per-example loop of tape gradients, stacked (the reference for the helpers)."""
  b = int(batch[0].shape[0])
  grads = []
  for i in range(b):
    with tf.GradientTape() as t:
      loss = loss_fn(*[x[i] for x in batch])
    grads.append([tf.convert_to_tensor(g) for g in t.gradient(loss, variables)])
  if b == 0:
    return [tf.zeros([0] + v.shape.as_list(), v.dtype) for v in variables]
  return [tf.stack(gs) for gs in zip(*grads)]


@pytest.fixture
def float32_policy_after():
  """Every test that changes Keras' global dtype policy restores float32 after it."""
  yield
  keras.mixed_precision.set_global_policy("float32")


def _with_policy(policy, build):
  keras.mixed_precision.set_global_policy(policy)
  try:
    return build()
  finally:
    keras.mixed_precision.set_global_policy("float32")


# ======================================================================= 1. mixed precision


@pytest.mark.parametrize("mode", WITH_FUNCTION)
def test_mixed_float16_and_bfloat16_dense_layers_in_body(mode):
  keras.utils.set_random_seed(1)
  x = tf.constant(R(4, 5, seed=1))
  d16 = keras.layers.Dense(3, dtype="mixed_float16", activation="tanh")
  dbf = keras.layers.Dense(3, dtype="mixed_bfloat16")
  d16.build((None, 5))
  dbf.build((None, 5))
  assert d16.compute_dtype == "float16" and d16.kernel.dtype == "float32"

  def body(i):
    h = d16(x[i][None])[0]
    g = dbf(x[i][None])[0]
    return {"h": h, "g": g, "p": tf.nn.softmax(tf.cast(h, tf.float32) + tf.cast(g, tf.float32)),
            "s": tf.reduce_sum(g)}
  check_program(body, 4, mode)


@pytest.mark.parametrize("mode", ["eager", "xla", "zero"])
def test_per_example_gradients_of_global_mixed_float16_model(mode, float32_policy_after):
  def build():
    keras.utils.set_random_seed(2)
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(6, activation="relu"),
                             keras.layers.Dense(3),
                             keras.layers.Activation("linear", dtype="float32")])
  model = _with_policy("mixed_float16", build)
  assert model.layers[0].compute_dtype == "float16"
  b = 0 if mode == "zero" else 4
  x, y = tf.constant(R(4, 5, seed=3))[:b], tf.constant([0, 2, 1, 1])[:b]

  def loss_fn(xi, yi):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(yi, model(xi[None])[0])
  want = tape_per_example(loss_fn, model.trainable_variables, x, y)
  if mode in ("eager", "zero"):
    got = vectorize.per_example_gradients(loss_fn, model, x, y)
  else:
    got = tf.function(lambda: vectorize.per_example_gradients(loss_fn, model, x, y),
                      jit_compile=mode == "xla")()
  assert [g.dtype for g in got] == [tf.float32] * 4
  assert_close(list(got), want, rtol=1e-2, atol=2e-3)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_per_example_gradients_mixed_bfloat16_conv_layernorm(mode, float32_policy_after):
  def build():
    keras.utils.set_random_seed(3)
    return keras.Sequential([
        keras.Input((6, 2)), keras.layers.Conv1D(4, 3, activation="relu"),
        keras.layers.LayerNormalization(), keras.layers.GlobalAveragePooling1D(),
        keras.layers.Dense(3, dtype="float32")])
  model = _with_policy("mixed_bfloat16", build)
  x, y = tf.constant(R(3, 6, 2, seed=4)), tf.constant([0, 2, 1])

  def loss_fn(xi, yi):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(yi, model(xi[None])[0])
  want = tape_per_example(loss_fn, model.trainable_variables, x, y)
  if mode == "eager":
    got = vectorize.per_example_gradients(loss_fn, model, x, y)
  else:
    got = tf.function(lambda: vectorize.per_example_gradients(loss_fn, model, x, y),
                      jit_compile=mode == "xla")()
  assert_close(list(got), want, rtol=5e-2, atol=2e-2)


@pytest.mark.parametrize("mode", NO_XLA)
def test_mixed_bfloat16_embedding_lstm_model_in_body(mode, float32_policy_after):
  def build():
    keras.utils.set_random_seed(4)
    return keras.Sequential([keras.Input((5,), dtype="int32"), keras.layers.Embedding(10, 4),
                             keras.layers.LSTM(3), keras.layers.Dense(2, dtype="float32")])
  model = _with_policy("mixed_bfloat16", build)
  tokens = tf.constant([[1, 2, 3, 4, 5], [0, 0, 1, 9, 9], [3, 3, 3, 3, 3]])
  check_program(lambda i: model(tokens[i][None])[0], 3, mode, rtol=3e-2, atol=2e-2)


@pytest.mark.parametrize("mode", ALL)
def test_float16_body_reductions_sorts_matvec(mode):
  xh = tf.constant(R(4, 6, seed=5), tf.float16)
  w = tf.constant(R(6, 2, seed=6), tf.float16)

  def body(i):
    r = xh[i]
    return (tf.reduce_sum(r), tf.reduce_mean(r), tf.reduce_max(r),
            tf.linalg.matvec(w, r, transpose_a=True), tf.cumsum(r), tf.sort(r),
            tf.math.top_k(r, 2).values, tf.math.top_k(r, 2).indices, tf.nn.softmax(r),
            tf.argsort(r, stable=True), tf.where(r > 0, r, r * 0.5))
  check_program(body, 4, mode)


@pytest.mark.parametrize("mode", ALL)
def test_bfloat16_body_ops(mode):
  xb = tf.constant(R(4, 6, seed=7), tf.bfloat16)
  w = tf.constant(R(6, 2, seed=8), tf.bfloat16)

  def body(i):
    r = xb[i]
    return (tf.reduce_sum(r), tf.reduce_max(r), tf.matmul(r[None], w)[0], tf.nn.relu(r) * 2,
            tf.cumsum(r), tf.nn.softmax(r), tf.cast(r, tf.float32) * 3.0,
            tf.concat([r, -r], 0), tf.gather(r, [5, 0, 2]))
  check_program(body, 4, mode)


@pytest.mark.parametrize("mode", ALL)
def test_half_precision_long_reductions(mode):
  """Reductions of 1,000-4,000 float16 / 3,000 bfloat16 elements: the vectorized reduction
  runs over an axis of an [n, k] tensor, the loop over a vector."""
  rng = np.random.RandomState(9)
  big = tf.constant((rng.rand(3, 1000) * 100).astype(np.float16))
  near_one = tf.constant((rng.rand(3, 4000) * 1e-3 + 1).astype(np.float16))
  bb = tf.constant(rng.rand(3, 3000) * 100, tf.bfloat16)

  def body(i):
    return (tf.reduce_sum(big[i]), tf.reduce_mean(big[i]), tf.reduce_sum(near_one[i]),
            tf.reduce_mean(near_one[i]), tf.math.reduce_variance(big[i][:50]),
            tf.norm(big[i][:100]), tf.reduce_prod(near_one[i][:20]),
            tf.reduce_sum(bb[i]), tf.reduce_mean(bb[i]))
  check_program(body, 3, mode, rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("mode", ["eager", "function", "zero"])
def test_batch_jacobian_fn_of_mixed_float16_model(mode, float32_policy_after):
  def build():
    keras.utils.set_random_seed(5)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                             keras.layers.Dense(2, dtype="float32")])
  model = _with_policy("mixed_float16", build)
  b = 0 if mode == "zero" else 3
  x = tf.constant(R(3, 3, seed=10))[:b]
  if mode == "function":
    got = tf.function(lambda z: vectorize.batch_jacobian(model(z), z))(x)
  else:
    got = vectorize.batch_jacobian_fn(model)(x)
  if b:
    with tf.GradientTape(persistent=True) as t:
      t.watch(x)
      y = model(x)
    want = t.batch_jacobian(y, x, experimental_use_pfor=False)
  else:
    want = tf.zeros([0, 2, 3])
  assert_close(got, want, rtol=1e-2, atol=2e-3)


def test_private_model_fit_under_mixed_float16_matches_manual_dp_step(float32_policy_after):
  """PrivateModel's docs: under a mixed-precision policy the compiled LossScaleOptimizer scales
  the loss, the bound and the noise alike: with no noise, one step is the clipped mean."""
  X, Y = R(4, 5, seed=11), np.array([0, 2, 1, 1])
  loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

  def build():
    keras.utils.set_random_seed(6)
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(6, activation="tanh"),
                             keras.layers.Dense(3),
                             keras.layers.Activation("linear", dtype="float32")])
  keras.mixed_precision.set_global_policy("mixed_float16")
  model, ref_model = build(), build()
  clip = 0.05
  private = vectorize.PrivateModel(model, l2_norm_clip=clip, noise_multiplier=0.0, seed=0)
  private.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss)
  assert type(private.optimizer).__name__ == "LossScaleOptimizer"
  private.fit(X, Y, batch_size=4, epochs=1, verbose=0, shuffle=False)
  keras.mixed_precision.set_global_policy("float32")
  total = None
  for i in range(4):
    with tf.GradientTape() as t:
      l = loss(Y[i:i + 1], ref_model(X[i:i + 1]))
    g = [np.float64(a) for a in t.gradient(l, ref_model.trainable_variables)]
    f = min(1.0, clip / np.sqrt(sum(np.sum(a ** 2) for a in g)))
    total = [f * a for a in g] if total is None else [s + f * a for s, a in zip(total, g)]
  for w, w0, s in zip(model.trainable_variables, ref_model.trainable_variables, total):
    np.testing.assert_allclose(w.numpy(), w0.numpy() - 0.5 * s / 4, rtol=1e-3, atol=1e-5)


# ========================================================= 2. SavedModel and checkpoints


class _Exported(tf.Module):
  """A module whose signatures (batch None) call vectorize inside."""

  def __init__(self):
    super().__init__()
    self.w = tf.Variable(R(3, 2, seed=12))
    self.count = tf.Variable(0.0)
    self.lo, self.hi = tf.Variable(-2.0), tf.Variable(2.0)
    keras.utils.set_random_seed(7)
    self.model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                                   keras.layers.Dense(2)])

  @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
  def pfor_fn(self, x):
    def body(i):
      return tf.tanh(tf.linalg.matvec(self.w, x[i], transpose_a=True)), tf.reduce_max(x[i])
    return vectorize.pfor(body, tf.shape(x)[0])

  @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
  def vmap_fn(self, x):
    return vectorize.vectorized_map(lambda r: tf.reduce_sum(r * self.w[:, 0]) + tf.cumsum(r), x)

  @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
  def counting_fn(self, x):
    def body(i):
      self.count.assign_add(tf.reduce_sum(x[i]))
      return x[i] * 2.0
    return vectorize.pfor(body, tf.shape(x)[0])

  @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)], jit_compile=True)
  def xla_jacobian_fn(self, x):
    return vectorize.batch_jacobian(tf.tanh(tf.matmul(x, self.w)), x)

  @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32),
                                tf.TensorSpec([None], tf.int32)])
  def per_example_fn(self, x, y):
    def loss_fn(xi, yi):
      return tf.nn.sparse_softmax_cross_entropy_with_logits(yi, self.model(xi[None])[0])
    return vectorize.per_example_gradients(loss_fn, self.model, x, y)

  @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32),
                                tf.TensorSpec([2], tf.int32)])
  def noise_fn(self, x, seed):
    def body(i):
      s = tf.stack([seed[0] + i, seed[1]])
      return x[i] + tf.random.stateless_uniform([3], s), tf.random.stateless_normal([2], s)
    return vectorize.pfor(body, tf.shape(x)[0])

  @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
  def control_fn(self, x):
    def body(i):
      r = x[i]
      out = tf.cond(tf.reduce_sum(r) > 0, lambda: r * 2.0, lambda: -r)
      k, a = tf.while_loop(lambda k, a: a < 4.0, lambda k, a: (k + 1, a * 2.0 + 0.1),
                           (tf.constant(0), tf.abs(r[0]) + 0.01))
      ta = tf.TensorArray(tf.float32, size=3)
      for j in tf.range(3):
        ta = ta.write(j, r[j] * tf.cast(j, tf.float32))
      return out, k, a, ta.stack()
    return vectorize.pfor(body, tf.shape(x)[0])

  @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
  def centered_fn(self, x):
    def body(i, pfor_config):
      return x[i] - pfor_config.reduce_mean(x[i])
    return vectorize.pfor(body, tf.shape(x)[0])

  @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
  def ragged_fn(self, x):
    return vectorize.pfor(lambda i: tf.boolean_mask(x[i], x[i] > 0), tf.shape(x)[0])

  @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
  def fake_quant_fn(self, x):
    return vectorize.pfor(
        lambda i: tf.quantization.fake_quant_with_min_max_vars(x[i], self.lo, self.hi),
        tf.shape(x)[0], warn=False)


@pytest.fixture(scope="module")
def exported():
  module = _Exported()
  path = tempfile.mkdtemp()
  tf.saved_model.save(module, path)
  return module, tf.saved_model.load(path)


def _per_row(fn, x, empty):
  rows = [fn(x[i]) for i in range(int(x.shape[0]))]
  if not rows:
    return empty
  return tf.nest.map_structure(lambda *r: tf.stack(r), *rows)


SAVED_FUNCTIONS = ("pfor_fn", "vmap_fn", "counting_fn", "xla_jacobian_fn", "per_example_fn",
                   "noise_fn", "control_fn", "centered_fn", "ragged_fn", "fake_quant_fn")


@pytest.mark.parametrize("name", SAVED_FUNCTIONS)
def test_saved_model_function_calling_vectorize_reloads(exported, name):
  module, loaded = exported
  w = module.w
  for b in (3, 0, 1):
    x = tf.constant(R(5, 3, seed=20 + b, lo=-2, hi=2))[:b]
    if name == "pfor_fn":
      got = loaded.pfor_fn(x)
      want = _per_row(lambda r: (tf.tanh(tf.linalg.matvec(w, r, transpose_a=True)),
                                 tf.reduce_max(r)), x, (tf.zeros([0, 2]), tf.zeros([0])))
    elif name == "vmap_fn":
      got = loaded.vmap_fn(x)
      want = _per_row(lambda r: tf.reduce_sum(r * w[:, 0]) + tf.cumsum(r), x, tf.zeros([0, 3]))
    elif name == "counting_fn":
      before = loaded.count.numpy()
      got = loaded.counting_fn(x)
      want = x * 2.0
      np.testing.assert_allclose(loaded.count.numpy() - before, np.sum(x.numpy()),
                                 rtol=1e-5, atol=1e-5)
    elif name == "xla_jacobian_fn":
      got = loaded.xla_jacobian_fn(x)

      def jac(r):
        with tf.GradientTape(persistent=True) as t:
          t.watch(r)
          y = tf.tanh(tf.linalg.matvec(w, r, transpose_a=True))
        return t.jacobian(y, r, experimental_use_pfor=False)
      want = _per_row(jac, x, tf.zeros([0, 2, 3]))
    elif name == "per_example_fn":
      y = tf.range(b) % 2
      got = loaded.per_example_fn(x, y)
      want = tape_per_example(
          lambda xi, yi: tf.nn.sparse_softmax_cross_entropy_with_logits(
              yi, module.model(xi[None])[0]), module.model.trainable_variables, x, y)
    elif name == "noise_fn":
      got = loaded.noise_fn(x, tf.constant([5, 9]))
      rows = [(x[i] + tf.random.stateless_uniform([3], [5 + i, 9]),
               tf.random.stateless_normal([2], [5 + i, 9])) for i in range(b)]
      want = (tf.stack([r[0] for r in rows]), tf.stack([r[1] for r in rows])) if b else (
          tf.zeros([0, 3]), tf.zeros([0, 2]))
    elif name == "control_fn":
      got = loaded.control_fn(x)

      def one(r):
        out = r * 2.0 if np.sum(r) > 0 else -r
        k, a = 0, np.float32(abs(r[0]) + np.float32(0.01))
        while a < 4.0:
          k, a = k + 1, np.float32(a * np.float32(2.0) + np.float32(0.1))
        return out, np.int32(k), np.float32(a), r * np.arange(3, dtype=np.float32)
      rows = [one(r) for r in x.numpy()]
      want = tuple(np.stack([r[j] for r in rows]) for j in range(4)) if b else (
          np.zeros([0, 3], np.float32), np.zeros([0], np.int32), np.zeros([0], np.float32),
          np.zeros([0, 3], np.float32))
    elif name == "centered_fn":
      got = loaded.centered_fn(x)
      want = x - tf.reduce_mean(x, 0) if b else tf.zeros([0, 3])
    elif name == "ragged_fn":
      x4 = tf.constant(R(5, 4, seed=30 + b))[:b]
      got = loaded.ragged_fn(x4)
      assert isinstance(got, tf.RaggedTensor) and got.shape[0] == b
      assert got.to_list() == [[v for v in r if v > 0] for r in x4.numpy().tolist()]
      continue
    elif name == "fake_quant_fn":
      got = loaded.fake_quant_fn(x)
      want = tf.quantization.fake_quant_with_min_max_vars(x, -2.0, 2.0)
    assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_saved_model_serving_signature_with_vectorized_map():
  class M(tf.Module):
    def __init__(self):
      super().__init__()
      self.w = tf.Variable(R(3, 2, seed=13))

    def __call__(self, x):
      return tf.nn.softplus(tf.matmul(x, self.w))
  m = M()
  serve = tf.function(
      lambda x: {"y": vectorize.vectorized_map(lambda r: m(r[None])[0], x)},
      input_signature=[tf.TensorSpec([None, 3])])
  path = tempfile.mkdtemp()
  tf.saved_model.save(m, path, signatures={"serving_default": serve})
  loaded = tf.saved_model.load(path).signatures["serving_default"]
  for b in (4, 0, 1):
    x = tf.constant(R(4, 3, seed=14))[:b]
    assert_close(loaded(x=x)["y"], m(x))


class _Restorable(tf.Module):
  def __init__(self, cond):
    super().__init__()
    self.use_cond = cond
    self.w = tf.Variable(R(3, 2, seed=15))
    self.b = tf.Variable(tf.fill([2], 0.1))

  @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
  def __call__(self, x):
    h = tf.matmul(x, self.w) + self.b
    if self.use_cond:
      return tf.cond(tf.reduce_sum(h) > 0, lambda: tf.tanh(h), lambda: tf.nn.softplus(h))
    return tf.tanh(h)


def _save_load(module):
  path = tempfile.mkdtemp()
  tf.saved_model.save(module, path)
  return tf.saved_model.load(path)


@pytest.mark.parametrize("mode", ALL)
def test_loaded_saved_model_function_called_in_body(mode):
  loaded = _save_load(_Restorable(cond=True))
  x = tf.constant(R(4, 3, seed=16, lo=-2, hi=2))
  check_program(lambda i: loaded(x[i][None])[0], 4, mode)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_per_example_gradients_through_loaded_function(mode):
  loaded = _save_load(_Restorable(cond=False))
  x = tf.constant(R(4, 3, seed=17, lo=-2, hi=2))

  def loss_fn(r):
    return tf.reduce_sum(loaded(r[None]) ** 2)
  want = tape_per_example(loss_fn, [loaded.w, loaded.b], x)
  if mode == "eager":
    got = vectorize.per_example_gradients(loss_fn, [loaded.w, loaded.b], x)
  else:
    got = tf.function(lambda: vectorize.per_example_gradients(loss_fn, [loaded.w, loaded.b], x),
                      jit_compile=mode == "xla")()
  assert_close(list(got), want)


def test_per_example_gradients_of_reloaded_cond_model_after_a_training_step():
  loaded = _save_load(_Restorable(cond=True))
  x = tf.constant(R(4, 3, seed=18, lo=-2, hi=2))

  def loss_fn(r):
    return tf.reduce_sum(loaded(r[None]) ** 2)
  with tf.GradientTape() as t:                  # an ordinary eager step on the whole batch
    batch_loss = tf.reduce_sum(loaded(x) ** 2)
  t.gradient(batch_loss, [loaded.w, loaded.b])
  want = tape_per_example(loss_fn, [loaded.w, loaded.b], x)
  got = vectorize.per_example_gradients(loss_fn, [loaded.w, loaded.b], x)
  assert_close(list(got), want)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_checkpoint_restore_changes_what_a_cached_pfor_reads(mode):
  scale = tf.Variable([1.0, 2.0, 3.0])
  x = tf.constant(R(3, 3, seed=19))
  body = lambda i: tf.reduce_sum(x[i] * scale) * x[i]
  f = (lambda: vectorize.pfor(body, 3)) if mode == "eager" else tf.function(
      lambda: vectorize.pfor(body, 3))
  ckpt = tf.train.Checkpoint(scale=scale)
  path = ckpt.write(os.path.join(tempfile.mkdtemp(), "c"))
  first = f()
  assert_close(first, loop(body, 3))
  scale.assign([-1.0, 0.5, 4.0])
  assert_close(f(), loop(body, 3))
  ckpt.read(path).assert_consumed()
  assert_close(f(), first)
  assert_close(f(), loop(body, 3))


@pytest.mark.parametrize("mode", ["eager", "xla", "runtime_n"])
def test_checkpoint_round_trip_of_variables_the_body_updates(mode):
  x = tf.constant(R(4, 3, seed=21))

  def make():
    m = tf.Module()
    m.total = tf.Variable(tf.zeros([3]))
    m.steps = tf.Variable(0, dtype=tf.int64)
    return m
  ours, ref = make(), make()

  def body_for(m):
    def body(i):
      running = m.total.assign_add(x[i])        # per-iteration prefix sums, in loop order
      m.steps.assign_add(1)
      return running * 1.0
    return body
  got = run_pfor(body_for(ours), 4, mode)
  want = loop(body_for(ref), 4)
  assert_close(got, want)
  assert_close(ours.total, ref.total)
  assert int(ours.steps.numpy()) == int(ref.steps.numpy()) == 4
  path = tf.train.Checkpoint(total=ours.total, steps=ours.steps).write(
      os.path.join(tempfile.mkdtemp(), "c"))
  fresh = make()
  tf.train.Checkpoint(total=fresh.total, steps=fresh.steps).read(path).assert_consumed()
  assert_close(fresh.total, ref.total)
  # and the restored state goes on as the loop's would
  assert_close(run_pfor(body_for(fresh), 4, mode), loop(body_for(ref), 4))


def test_checkpointed_generator_state_replays_the_same_draws():
  g = tf.random.Generator.from_seed(1)
  body = lambda i: (g.normal([200]), g.uniform([3], maxval=10, dtype=tf.int32))
  ref_gen = tf.random.Generator.from_seed(1)
  _ = [(ref_gen.normal([200]), ref_gen.uniform([3], maxval=10, dtype=tf.int32))
       for _ in range(4)]
  ckpt = tf.train.Checkpoint(g=g)
  path = ckpt.write(os.path.join(tempfile.mkdtemp(), "c"))
  a = vectorize.pfor(body, 4)
  # the state advances as the loop's would (the loop draws other numbers, by design)
  np.testing.assert_array_equal(g.state.numpy(), ref_gen.state.numpy())
  assert a[0].shape == (4, 200) and a[1].shape == (4, 3) and a[1].dtype == tf.int32
  assert len({tuple(r) for r in np.round(a[0].numpy(), 5)}) == 4   # iterations differ
  assert abs(float(tf.reduce_mean(a[0]))) < 0.2 and 0.85 < float(tf.math.reduce_std(a[0])) < 1.15
  b = vectorize.pfor(body, 4)
  assert not np.array_equal(a[0], b[0])
  ckpt.read(path)
  c = vectorize.pfor(body, 4)
  np.testing.assert_array_equal(a[0], c[0])
  np.testing.assert_array_equal(a[1], c[1])


def test_keras_model_saved_and_reloaded_then_vectorized():
  keras.utils.set_random_seed(8)
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="relu"),
                            keras.layers.Dense(2)])
  path = os.path.join(tempfile.mkdtemp(), "m.keras")
  model.save(path)
  reloaded = keras.models.load_model(path)
  x = tf.constant(R(4, 3, seed=22))
  assert_close(vectorize.vectorized_map(lambda r: reloaded(r[None])[0], x), model(x))
  y = tf.constant([0, 1, 1, 0])

  def loss_fn(xi, yi):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(yi, reloaded(xi[None])[0])
  assert_close(list(vectorize.per_example_gradients(loss_fn, reloaded, x, y)),
               tape_per_example(loss_fn, reloaded.trainable_variables, x, y))


# ========================================================= 3. signatures and batch sizes

_W3 = tf.constant([[1.0, 2.0], [0.5, -1.0], [3.0, 0.0]])


def _example(r):
  return tf.tanh(tf.linalg.matvec(_W3, r, transpose_a=True)), tf.reduce_sum(r)


def _expected(x):
  x = x.numpy()
  return np.tanh(x @ _W3.numpy()).astype(np.float32), x.sum(1).astype(np.float32)


def _make_signature_fn(api):
  sig = [tf.TensorSpec([None, 3])]
  if api == "pfor":
    return tf.function(lambda x: vectorize.pfor(lambda i: _example(x[i]), tf.shape(x)[0]),
                       input_signature=sig)
  if api == "pfor_int64_n":
    return tf.function(lambda x: vectorize.pfor(lambda i: _example(x[i]),
                                                tf.shape(x, out_type=tf.int64)[0]),
                       input_signature=sig)
  if api == "pfor_xla":
    return tf.function(lambda x: vectorize.pfor(lambda i: _example(x[i]), tf.shape(x)[0]),
                       input_signature=sig, jit_compile=True)
  if api == "vectorized_map":
    return tf.function(lambda x: vectorize.vectorized_map(_example, x), input_signature=sig)
  if api == "vectorized_map_xla":
    return tf.function(lambda x: vectorize.vectorized_map(_example, x), input_signature=sig,
                       jit_compile=True)
  if api == "map_fn":
    return tf.function(lambda x: vectorize.map_fn(_example, x,
                                                  fn_output_signature=(tf.float32, tf.float32)),
                       input_signature=sig)
  if api == "unknown_rank":
    return tf.function(lambda x: vectorize.vectorized_map(_example, x),
                       input_signature=[tf.TensorSpec(None)])
  if api == "reduce_retracing":
    return tf.function(lambda x: vectorize.pfor(lambda i: _example(x[i]), tf.shape(x)[0]),
                       reduce_retracing=True)
  raise AssertionError(api)


@pytest.mark.parametrize("api", ["pfor", "pfor_int64_n", "pfor_xla", "vectorized_map",
                                 "map_fn", "unknown_rank", "reduce_retracing"])
def test_one_traced_function_many_batch_sizes_including_zero(api):
  f = _make_signature_fn(api)
  for b in (3, 0, 2):
    x = tf.constant(R(5, 3, seed=40 + b))[:b]
    assert_close(f(x), _expected(x), rtol=1e-5, atol=1e-5)
  assert f.experimental_get_tracing_count() <= (2 if api == "reduce_retracing" else 1)


@pytest.mark.parametrize("jit", [False, True])
def test_per_example_gradients_signature_none_batch(jit):
  v = tf.Variable(_W3)

  def loss_fn(r, y):
    return tf.reduce_sum(tf.tanh(tf.linalg.matvec(v, r, transpose_a=True)) * y)
  f = tf.function(lambda x, y: vectorize.per_example_gradients(loss_fn, v, x, y),
                  input_signature=[tf.TensorSpec([None, 3]), tf.TensorSpec([None, 2])],
                  jit_compile=jit)
  for b in (3, 0, 1):
    x, y = tf.constant(R(3, 3, seed=50))[:b], tf.constant(R(3, 2, seed=51))[:b]
    assert_close(f(x, y), tape_per_example(loss_fn, [v], x, y)[0])


@pytest.mark.parametrize("what", ["batch_sizes", "bodies"])
def test_eager_calls_do_not_emit_tensorflows_retracing_warning(what):
  # TF's detector counts traces per function code for the whole process and warns twice at
  # most: start it afresh, so that what earlier tests traced does not decide this one.
  from tensorflow.python.eager.polymorphic_function import polymorphic_function
  polymorphic_function._frequent_tracing_detector_manager._detectors.clear()
  records = []

  class Collect(logging.Handler):
    def emit(self, record):
      records.append(record.getMessage())
  handler = Collect(level=logging.WARNING)
  logger = tf.get_logger()
  logger.addHandler(handler)
  try:
    w = tf.constant(R(3, 2, seed=52))
    if what == "batch_sizes":              # an eval loop with batches of varying size
      fn = lambda r: tf.nn.relu(tf.linalg.matvec(w, r, transpose_a=True)) - 0.25
      for b in (1, 2, 3, 4, 5, 6, 7):
        x = tf.constant(R(7, 3, seed=53))[:b]
        assert_close(vectorize.vectorized_map(fn, x), tf.nn.relu(x @ w) - 0.25)
    else:                                  # a notebook trying a few per-example functions
      x = tf.constant(R(4, 3, seed=54))
      fns = [lambda r: r + 1.25, lambda r: r * 3.25, lambda r: tf.sin(r) + 0.5,
             lambda r: tf.cos(r) - 0.5, lambda r: tf.exp(r) * 0.75, lambda r: tf.tanh(r) * 1.5,
             lambda r: r ** 2 + 0.125]
      for fn in fns:
        assert_close(vectorize.vectorized_map(fn, x), fn(x))
  finally:
    logger.removeHandler(handler)
  retracing = [m for m in records if "triggered tf.function retracing" in m]
  assert not retracing, retracing[0][:300]


@pytest.mark.parametrize("mode", ["eager", "signature"])
def test_vectorized_map_broadcast_leading_one_with_empty_batch(mode):
  fn = lambda e: e[0] * e[1]
  scale = tf.constant([[1.0, 2.0, 3.0]])
  f = (lambda a: vectorize.vectorized_map(fn, (a, scale))) if mode == "eager" else tf.function(
      lambda a: vectorize.vectorized_map(fn, (a, scale)),
      input_signature=[tf.TensorSpec([None, 3])])
  x = tf.constant(R(3, 3, seed=55))
  assert_close(f(x), x * scale)
  assert_close(f(x[:0]), tf.zeros([0, 3]))


def test_parallel_iterations_under_xla_with_signature_none_batch():
  f = tf.function(lambda x: vectorize.pfor(lambda i: tf.cumsum(x[i]) * 2.0, tf.shape(x)[0],
                                           parallel_iterations=2),
                  input_signature=[tf.TensorSpec([None, 3])], jit_compile=True)
  x = tf.constant(R(5, 3, seed=56))
  try:
    got = f(x)
  except vectorize.ConversionError as e:            # a clear refusal is acceptable
    assert "parallel_iterations" in str(e) and "To fix" in str(e), str(e)
    return
  assert_close(got, tf.cumsum(x, axis=1) * 2.0)


@pytest.mark.parametrize("b", [5, 0])
def test_parallel_iterations_static_n_under_xla_and_run_time_n_without(b):
  x = tf.constant(R(5, 3, seed=57))[:b]
  want = tf.cumsum(x, axis=1) * 2.0
  body = lambda i: tf.cumsum(x[i]) * 2.0
  assert_close(tf.function(lambda: vectorize.pfor(body, b, parallel_iterations=2),
                           jit_compile=True)(), want)
  f = tf.function(lambda z: vectorize.pfor(lambda i: tf.cumsum(z[i]) * 2.0, tf.shape(z)[0],
                                           parallel_iterations=2),
                  input_signature=[tf.TensorSpec([None, 3])])
  assert_close(f(x), want)


# ====================================================== 4. jacobians, custom gradients


def _tape_batch_jacobian(f, x):
  with tf.GradientTape(persistent=True) as t:
    t.watch(x)
    y = f(x)
  return t.batch_jacobian(y, x, experimental_use_pfor=False)


def _keras_model(kind):
  keras.utils.set_random_seed(9)
  if kind == "mlp":
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                             keras.layers.Dense(2, activation="softplus")]), (3, 3)
  if kind == "attention":
    inp = keras.Input((4, 3))
    out = keras.layers.Flatten()(keras.layers.MultiHeadAttention(2, 2)(inp, inp))
    return keras.Model(inp, out), (2, 4, 3)
  if kind == "lstm":
    return keras.Sequential([keras.Input((4, 3)), keras.layers.LSTM(3),
                             keras.layers.Dense(2)]), (2, 4, 3)
  if kind == "conv_bn":
    return keras.Sequential([keras.Input((5, 5, 1)), keras.layers.Conv2D(2, 3, activation="elu"),
                             keras.layers.BatchNormalization(),
                             keras.layers.GlobalMaxPooling2D()]), (2, 5, 5, 1)
  raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["mlp", "attention", "lstm", "conv_bn"])
def test_batch_jacobian_fn_of_keras_models_matches_tape(kind):
  model, shape = _keras_model(kind)
  x = tf.constant(R(*shape, seed=60))
  assert_close(vectorize.batch_jacobian_fn(model)(x), _tape_batch_jacobian(model, x),
               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("jit", [False, True])
def test_jacobian_of_keras_model_wrt_input_and_variables(jit):
  model, _ = _keras_model("mlp")
  x = tf.constant(R(3, 3, seed=61))
  with tf.GradientTape(persistent=True) as t:
    t.watch(x)
    y = model(x)
  want_x = t.jacobian(y, x, experimental_use_pfor=False)
  want_v = t.jacobian(y, model.trainable_variables, experimental_use_pfor=False)
  assert_close(vectorize.jacobian_fn(model)(x), want_x)

  @tf.function(jit_compile=jit)
  def both(z):
    out = model(z)
    return vectorize.jacobian(out, z), vectorize.jacobian(out, model.trainable_variables)
  got_x, got_v = both(x)
  assert_close(got_x, want_x)
  assert_close(list(got_v), list(want_v))


def _tape_hessian(f, x):
  with tf.GradientTape(persistent=True) as t2:
    t2.watch(x)
    with tf.GradientTape() as t1:
      t1.watch(x)
      y = f(x)
    g = t1.gradient(y, x)
  return t2.jacobian(g, x, experimental_use_pfor=False)


def test_hessian_of_keras_model_loss_plain_and_nested_inputs():
  model, _ = _keras_model("mlp")
  x = tf.constant(R(2, 3, seed=62))
  f = lambda z: tf.reduce_sum(model(z) ** 2)
  assert_close(vectorize.hessian(f, x), _tape_hessian(f, x), rtol=1e-4, atol=1e-6)
  g = lambda d: tf.reduce_sum(model(d["a"]) * d["b"])
  inp = {"a": x, "b": tf.constant(R(2, 2, seed=63))}
  got = vectorize.hessian(g, inp)
  with tf.GradientTape(persistent=True) as t2:
    t2.watch(inp)
    with tf.GradientTape() as t1:
      t1.watch(inp)
      y = g(inp)
    grads = t1.gradient(y, inp)
  for a in inp:
    for b in inp:
      want = t2.jacobian(grads[a], inp[b], experimental_use_pfor=False)
      assert_close(got[a][b], want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind", ["while_loop"])
def test_hessian_through_loops_matches_tape(kind):
  """hessian's docstring says an f with a tf.while_loop raises ValueError "for now"; these
  (and a Keras GRU model's) are correct instead: the docstring is stale."""
  if kind == "while_loop":
    f = lambda v: tf.reduce_sum(tf.while_loop(lambda k, a: k < 3,
                                              lambda k, a: (k + 1, tf.sin(a) * v), (0, v))[1])
    x = tf.constant([0.3, 0.7, -0.2])
  else:
    f = lambda v: tf.reduce_sum(tf.scan(lambda a, e: tf.tanh(a * e + v),
                                        tf.stack([v, 2 * v, v * v]), initializer=v))
    x = tf.constant([0.3, 0.7, -0.2])
  assert_close(vectorize.hessian(f, x), _tape_hessian(f, x), rtol=1e-4, atol=1e-6)


@tf.custom_gradient
def _clip_grad(v):
  return tf.identity(v), lambda dy: tf.clip_by_norm(dy, 0.1)


@tf.custom_gradient
def _square_with_wrong_gradient(v):
  return v * v, lambda dy: dy * 3.0 * v          # deliberately not 2v: must be kept


@pytest.mark.parametrize("mode", WITH_FUNCTION)
def test_custom_gradients_and_stop_gradient_in_per_example_body(mode):
  x = tf.constant(R(3, 4, seed=65, lo=-2, hi=2))
  w = tf.Variable(R(4, 2, seed=66))

  def body(i):
    with tf.GradientTape() as t:
      h = _clip_grad(tf.matmul(x[i][None], w))
      loss = tf.reduce_sum(_square_with_wrong_gradient(h)) + tf.reduce_sum(
          tf.stop_gradient(h) * h)
    return t.gradient(loss, w)
  check_program(body, 3, mode)


_V = tf.Variable(R(4, 2, seed=67))
_U = tf.Variable(R(2, seed=68))


@tf.custom_gradient
def _linear_with_variable_gradient(z):
  out = tf.matmul(z, _V)

  def grad(dy, variables=None):
    return tf.matmul(dy, _V, transpose_b=True), [tf.matmul(z, dy, transpose_a=True) * 0.5]
  return out, grad


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_per_example_gradients_of_custom_gradient_with_variables(mode):
  x = tf.constant(R(3, 4, seed=69))
  loss_fn = lambda r: tf.reduce_sum(tf.tanh(_linear_with_variable_gradient(r[None])) * _U)
  want = tape_per_example(loss_fn, [_V, _U], x)
  if mode == "eager":
    got = vectorize.per_example_gradients(loss_fn, [_V, _U], x)
  else:
    got = tf.function(lambda: vectorize.per_example_gradients(loss_fn, [_V, _U], x),
                      jit_compile=mode == "xla")()
  assert_close(list(got), want)


@pytest.mark.parametrize("mode", ALL)
def test_recompute_grad_of_keras_layer_in_body(mode):
  keras.utils.set_random_seed(11)
  dense = keras.layers.Dense(3, activation="tanh")
  dense.build((None, 4))
  remat = tf.recompute_grad(lambda z: dense(z))
  x = tf.constant(R(3, 4, seed=70))

  def body(i):
    with tf.GradientTape() as t:
      loss = tf.reduce_sum(remat(x[i][None]) ** 2)
    return t.gradient(loss, dense.trainable_variables)
  check_program(body, 3, mode)


def test_jacobian_fn_with_stop_gradient_and_unconnected_input():
  x = tf.constant(R(3, 3, seed=71))

  def f(d):
    a, b = d["a"], d["b"]
    return tf.sin(a) * tf.stop_gradient(a) + tf.stop_gradient(b) * 2.0
  got = vectorize.jacobian_fn(f)({"a": x, "b": x * 2})
  d = {"a": x, "b": x * 2}
  with tf.GradientTape(persistent=True) as t:
    t.watch(d)
    y = f(d)
  want = t.jacobian(y, d, experimental_use_pfor=False)
  assert got["b"] is None and want["b"] is None
  assert_close(got["a"], want["a"])


@pytest.mark.parametrize("mode", ALL)
def test_complex_intermediates_real_loss_per_example_gradient(mode):
  x = tf.constant(R(3, 4, seed=72))
  v = tf.Variable(R(4, 2, seed=73))

  def body(i):
    with tf.GradientTape() as t:
      z = tf.complex(tf.matmul(x[i][None], v), tf.matmul(x[i][None] ** 2, v))
      loss = tf.reduce_sum(tf.abs(tf.signal.fft(z)) ** 2) + tf.math.real(
          tf.reduce_sum(z * tf.math.conj(z)))
    return t.gradient(loss, v)
  check_program(body, 3, mode, rtol=1e-4, atol=1e-5)


# ============================================================================ 5. random


@pytest.mark.parametrize("mode", ALL)
def test_stateless_samplers_with_per_example_seeds(mode):
  x = tf.constant(R(3, 30, seed=74) + 3.0)
  seeds = tf.constant([[1, 2], [3, 4], [5, 6]], tf.int32)

  def body(i):
    s = seeds[i]
    return (tf.nn.experimental.stateless_dropout(x[i], 0.3, seed=s),
            tf.random.stateless_uniform([3], s),
            tf.random.stateless_normal([2, 2], s, dtype=tf.float64),
            tf.random.stateless_uniform([4], s, minval=0, maxval=100, dtype=tf.int64),
            tf.random.stateless_uniform([3], s, dtype=tf.float16))
  check_program(body, 3, mode, xla_loop=True)


@pytest.mark.parametrize("mode", NO_XLA)
def test_stateless_truncated_categorical_flip_with_per_example_seeds(mode):
  seeds = tf.constant([[1, 2], [3, 4], [5, 6]], tf.int64)
  img = tf.reshape(tf.range(3 * 12, dtype=tf.float32), [3, 2, 2, 3])

  def body(i):
    s = seeds[i]
    return (tf.random.stateless_truncated_normal([3], s),
            tf.random.stateless_categorical(tf.math.log([[0.2, 0.3, 0.5]]), 5, s),
            tf.image.stateless_random_flip_left_right(img[i], s))
  check_program(body, 3, mode)


@pytest.mark.parametrize("mode", ALL)
def test_stateless_seeds_derived_from_the_index(mode):
  def body(i):
    s = tf.stack([tf.cast(i, tf.int32) * 7 + 1, 42])
    k = tf.random.experimental.stateless_split(s, 2)
    return (tf.random.stateless_uniform([3], k[0]), tf.random.stateless_normal([3], k[1]),
            tf.random.experimental.stateless_fold_in(s, 5))
  check_program(body, 4, mode, xla_loop=True)


@pytest.mark.parametrize("mode", NO_XLA)
def test_stateless_gamma_poisson_binomial_shuffle(mode):
  """Not XLA: TF has no XLA kernel for these samplers (the loop does not compile either)."""
  seeds = tf.constant([[1, 2], [3, 4], [5, 6]], tf.int64)

  def body(i):
    s = seeds[i]
    return (tf.random.stateless_binomial([3], s, counts=10.0, probs=0.4),
            tf.random.stateless_gamma([3], s, alpha=2.0),
            tf.random.stateless_poisson([3], s, lam=3.0),
            tf.random.experimental.stateless_shuffle(tf.range(6), s),
            tf.random.stateless_parameterized_truncated_normal(
                [2], s, means=0.0, stddevs=1.0, minvals=-1.0, maxvals=1.0))
  check_program(body, 3, mode)


@pytest.mark.parametrize("mode", ["eager", "xla", "runtime_n"])
def test_keras_dropout_training_true_equals_loop_and_advances_seed(mode):
  """Keras 3's Dropout draws from a SeedGenerator (a state variable and stateless ops): the
  program is deterministic given the state, so pfor must equal the loop exactly."""
  drop = keras.layers.Dropout(0.5, seed=3)
  x = tf.ones([4, 40])
  body = lambda i: drop(x[i][None], training=True)[0]
  state = drop.seed_generator.state
  start = state.numpy().copy()
  got = run_pfor(body, 4, mode)
  after_pfor = state.numpy().copy()
  state.assign(start)
  want = loop_xla(body, 4) if mode == "xla" else loop(body, 4)
  np.testing.assert_array_equal(after_pfor, state.numpy())
  assert_close(got, want)
  vals = np.unique(got.numpy())
  assert set(vals.tolist()) <= {0.0, 2.0} and 0.2 < np.mean(got.numpy() == 0) < 0.8


@pytest.mark.parametrize("mode", ["eager", "xla", "runtime_n"])
def test_stateful_random_ops_keep_their_per_example_invariants(mode):
  x = tf.reshape(tf.range(3 * 8, dtype=tf.float32), [3, 8]) + 1.0
  img = tf.reshape(tf.range(3 * 6, dtype=tf.float32), [3, 2, 3, 1])
  noise = keras.layers.GaussianNoise(1.0, seed=1)

  def body(i):
    return (tf.random.shuffle(x[i]), tf.nn.dropout(x[i], 0.5),
            tf.image.random_flip_left_right(img[i]),
            tf.random.categorical(tf.math.log([[0.5, 0.5, 0.0]]), 20),
            tf.random.uniform([50], seed=1) + tf.cast(i, tf.float32),
            noise(tf.zeros([200]), training=True))
  shuffled, dropped, flipped, cats, unif, gauss = [t.numpy() for t in run_pfor(body, 3, mode)]
  for r, o in zip(shuffled, x.numpy()):
    assert sorted(r) == sorted(o)
  kept = dropped != 0
  np.testing.assert_allclose(dropped[kept], (x.numpy() * 2)[kept])
  assert 0 < kept.mean() < 1
  for g, o in zip(flipped, img.numpy()):
    assert np.array_equal(g, o) or np.array_equal(g, o[:, ::-1])
  assert cats.shape == (3, 1, 20) and set(cats.ravel().tolist()) <= {0, 1}
  assert unif.shape == (3, 50)
  for k in range(3):
    assert k <= unif[k].min() and unif[k].max() < k + 1
  assert not np.allclose(unif[0], unif[1] - 1.0), "every iteration drew the same numbers"
  assert gauss.shape == (3, 200) and 0.8 < gauss.std() < 1.2
  assert not np.allclose(gauss[0], gauss[1])


@pytest.mark.parametrize("mode", ["eager", "xla", "runtime_n"])
def test_generator_draws_in_body(mode):
  g = tf.random.Generator.from_seed(5)
  ref = tf.random.Generator.from_seed(5)
  body = lambda i: (g.uniform_full_int([4], dtype=tf.int64), g.truncated_normal([100]),
                    g.uniform([5], minval=-3, maxval=3, dtype=tf.int32))
  ref_body = lambda i: (ref.uniform_full_int([4], dtype=tf.int64), ref.truncated_normal([100]),
                        ref.uniform([5], minval=-3, maxval=3, dtype=tf.int32))
  a, b, c = [t.numpy() for t in run_pfor(body, 3, mode)]
  loop(ref_body, 3)
  # the state advances as the loop's: later draws do not reuse these numbers
  np.testing.assert_array_equal(g.state.numpy(), ref.state.numpy())
  assert a.shape == (3, 4) and a.dtype == np.int64 and len({tuple(r) for r in a}) == 3
  assert b.shape == (3, 100) and np.abs(b).max() <= 2.0 and 0.6 < b.std() < 1.0
  assert c.shape == (3, 5) and c.min() >= -3 and c.max() < 3


@pytest.mark.unchecked   # pfor's own state (the checked mode's: the next test; it snapshots
                         # the state it puts back: TF's binomial kernel updates it in place)
@pytest.mark.parametrize("mode", ["eager", "runtime_n"])
def test_generator_binomial_in_body_advances_state_as_the_loop(mode):
  """Not XLA: StatefulRandomBinomial has no XLA kernel in TF."""
  g = tf.random.Generator.from_seed(5)
  ref = tf.random.Generator.from_seed(5)
  counts, noise = run_pfor(lambda i: (g.binomial([5], counts=10.0, probs=0.5), g.normal([3])),
                           3, mode)
  assert counts.shape == (3, 5) and noise.shape == (3, 3)
  assert counts.numpy().min() >= 0 and counts.numpy().max() <= 10
  loop(lambda i: (ref.binomial([5], counts=10.0, probs=0.5), ref.normal([3])), 3)
  np.testing.assert_array_equal(g.state.numpy(), ref.state.numpy())


def test_checked_mode_of_a_binomial_then_another_draw():
  g = tf.random.Generator.from_seed(5)
  ref = tf.random.Generator.from_seed(5)
  with vectorize.checked():
    vectorize.pfor(lambda i: (g.binomial([5], counts=10.0, probs=0.5), g.skip(3)), 1)
  loop(lambda i: (ref.binomial([5], counts=10.0, probs=0.5), ref.skip(3)), 1)
  np.testing.assert_array_equal(g.state.numpy(), ref.state.numpy())


# ============================================================================ 6. dtypes


def _int_inputs():
  rng = np.random.RandomState(80)
  return dict(
      i8=tf.constant(rng.randint(-128, 127, size=(4, 6)).astype(np.int8)),
      u8=tf.constant(rng.randint(0, 255, size=(4, 6)).astype(np.uint8)),
      i16=tf.constant(rng.randint(-30000, 30000, size=(4, 6)).astype(np.int16)),
      u16=tf.constant(rng.randint(0, 65535, size=(4, 6)).astype(np.uint16)),
      u32=tf.constant(rng.randint(0, 2 ** 32 - 1, size=(4, 6), dtype=np.uint64).astype(np.uint32)),
      u64=tf.constant(rng.randint(0, 2 ** 63 - 1, size=(4, 6), dtype=np.uint64) * 2 + 1),
      idx=tf.constant(rng.randint(0, 6, size=(4, 3)).astype(np.int32)))


@pytest.mark.parametrize("mode", ALL)
def test_int8_uint8_ops(mode):
  d = _int_inputs()
  i8, u8, idx = d["i8"], d["u8"], d["idx"]
  xla = mode == "xla"

  def body(i):
    a, b = i8[i], u8[i]
    out = [tf.reduce_sum(a), tf.reduce_sum(b), tf.reduce_max(a), tf.reduce_min(b),
           tf.cast(a, tf.uint8), tf.cast(b, tf.int8), tf.where(a > 0, a, -a),
           tf.gather(b, idx[i]), tf.concat([a, tf.cast(b, tf.int8)], 0), a * 3, b // 7,
           tf.math.floormod(a, 5), tf.bitwise.bitwise_xor(b, b[::-1]), tf.abs(a), tf.sign(a),
           tf.reduce_prod(b[:3]), tf.one_hot(b[:2], 256, dtype=tf.uint8)]
    if not xla:                           # TF's XLA has no uint8 Cumsum kernel
      out.append(tf.cumsum(b))
    return out
  check_program(body, 4, mode)


@pytest.mark.parametrize("mode", ALL)
def test_int16_uint16_ops(mode):
  d = _int_inputs()
  i16, u16, idx = d["i16"], d["u16"], d["idx"]
  xla = mode == "xla"

  def body(i):
    a, b = i16[i], u16[i]
    out = [tf.sort(a), tf.argsort(a, stable=True), tf.math.top_k(a, 3).values,
           tf.math.top_k(a, 3).indices,
           tf.reduce_sum(b), tf.reduce_max(b), tf.concat([b, b], 0), tf.gather(a, idx[i]),
           tf.where(b > 30000, b, tf.zeros_like(b)), tf.math.minimum(a, 0),
           tf.cast(b, tf.float32), tf.bitwise.right_shift(b, 3),
           tf.math.top_k(tf.cast(a, tf.float32), 2, index_type=tf.int16).indices]
    if not xla:                  # TF's XLA has no uint16 TopKV2, int16 / uint16 Cumsum kernel
      out += [tf.sort(b, direction="DESCENDING"), tf.cumsum(b),
              tf.cumsum(a, reverse=True, exclusive=True)]
    return out
  check_program(body, 4, mode)


@pytest.mark.parametrize("mode", ALL)
def test_uint32_uint64_ops(mode):
  d = _int_inputs()
  u32, u64, idx = d["u32"], d["u64"], d["idx"]
  xla = mode == "xla"

  def body(i):
    a, b = u32[i], u64[i]
    out = [tf.reduce_max(a), tf.reduce_min(b), tf.reduce_sum(a), tf.reduce_sum(b), a // 3,
           b % 7, tf.bitwise.bitwise_and(a, 0xFFFF), tf.bitwise.left_shift(b, 1),
           tf.cast(a, tf.int64), tf.cast(b, tf.float64), tf.gather(b, idx[i]),
           tf.concat([a, a[:2]], 0), tf.where(a > 2 ** 31, a, a + 1), a > a[0],
           tf.math.top_k(tf.cast(a, tf.int64), 2).indices]
    if not xla:                           # TF's XLA has no uint32 Cumsum / TopKV2 kernel
      out += [tf.cumsum(a), tf.sort(a)]
    return out
  check_program(body, 4, mode)


@pytest.mark.parametrize("mode", NO_XLA)
def test_bool_ops_including_data_dependent_sizes(mode):
  """Not XLA: tf.where / boolean_mask of a mask are refused there (README)."""
  rng = np.random.RandomState(81)
  bl = tf.constant(rng.rand(4, 6) > 0.5)
  idx = tf.constant(rng.randint(0, 6, size=(4, 3)).astype(np.int32))

  def body(i):
    a = bl[i]
    return (tf.reduce_any(a), tf.reduce_all(a), tf.logical_and(a, a[::-1]),
            tf.math.logical_xor(a, True), tf.cast(a, tf.int32), tf.where(a, 1.0, -1.0),
            tf.gather(a, idx[i]), tf.concat([a, ~a], 0), tf.math.count_nonzero(a),
            tf.reduce_sum(tf.cast(a, tf.int8)), tf.equal(a, a[0]),
            tf.cumsum(tf.cast(a, tf.int32)), tf.cast(a, tf.complex64),
            tf.where(a), tf.boolean_mask(a, a))
  check_program(body, 4, mode, ragged_outputs=(13, 14))


@pytest.mark.parametrize("mode", ALL)
def test_complex64_complex128_ops(mode):
  rng = np.random.RandomState(82)
  c64 = tf.constant((rng.randn(4, 3, 3) + 1j * rng.randn(4, 3, 3)).astype(np.complex64))
  c128 = tf.constant(rng.randn(4, 6) + 1j * rng.randn(4, 6))
  idx = tf.constant(rng.randint(0, 6, size=(4, 3)).astype(np.int32))
  xla = mode == "xla"

  def body(i):
    m, v = c64[i], c128[i]
    out = [tf.matmul(m, m, adjoint_b=True), tf.abs(m), tf.math.conj(v), tf.reduce_sum(v),
           tf.math.real(v), tf.math.imag(m), tf.complex(tf.math.real(v), tf.math.imag(v) * 2),
           tf.signal.fft(v), tf.exp(v), tf.reduce_prod(v[:3]), tf.gather(v, idx[i]),
           tf.concat([v, v], 0), tf.where(tf.abs(v) > 1, v, tf.zeros_like(v)),
           tf.linalg.trace(m), tf.math.angle(v), v * tf.cast(i, tf.complex128)]
    if not xla:             # TF's XLA has no complex Cumsum or MatrixDeterminant kernel
      out += [tf.cumsum(v), tf.linalg.det(m)]
    return out
  check_program(body, 4, mode)


@pytest.mark.parametrize("mode", WITH_FUNCTION)
def test_float64_sorts_scans_segments(mode):
  rng = np.random.RandomState(83)
  f64 = tf.constant(rng.randn(4, 6))
  idx = tf.constant(rng.randint(0, 6, size=(4, 3)).astype(np.int32))

  def body(i):
    a = f64[i]
    return (tf.sort(a), tf.argsort(a), tf.math.top_k(a, 3).values, tf.math.top_k(a, 3).indices,
            tf.cumsum(a, exclusive=True, reverse=True), tf.math.cumprod(a),
            tf.math.cumulative_logsumexp(a), tf.reduce_logsumexp(a), tf.math.reduce_std(a),
            tf.nn.softmax(a), tf.math.segment_sum(a, [0, 0, 1, 1, 2, 2]),
            tf.math.unsorted_segment_max(a[:3], idx[i] % 2, 2),
            tf.searchsorted(tf.sort(a), a[:2]),
            tf.math.bincount(idx[i], minlength=6, maxlength=6, weights=a[:3]))
  check_program(body, 4, mode)


@pytest.mark.parametrize("mode", ALL)
def test_int64_indices_through_index_ops(mode):
  rng = np.random.RandomState(84)
  P = tf.constant(rng.randn(3, 6).astype(np.float32))
  I64 = tf.constant(rng.randint(0, 6, size=(3, 4)).astype(np.int64))
  L64 = tf.constant([2, 5, 3], tf.int64)

  def body(i):
    return (tf.gather(P[i], I64[i]), tf.gather_nd(P[i], I64[i][:, None]),
            tf.scatter_nd(I64[i][:, None], tf.ones([4]), tf.constant([6], tf.int64)),
            tf.tensor_scatter_nd_max(P[i], I64[i][:, None], tf.ones([4])),
            tf.math.unsorted_segment_sum(P[i][:4], I64[i], tf.constant(6, tf.int64)),
            tf.one_hot(tf.cast(I64[i], tf.int8), 6, dtype=tf.uint8),
            tf.sequence_mask(L64[i], 6), tf.roll(P[i], L64[i], 0),
            tf.slice(P[i], tf.stack([L64[i] - 2]), tf.constant([2], tf.int64)),
            tf.math.bincount(I64[i], minlength=6, maxlength=6, dtype=tf.int64),
            tf.math.top_k(P[i], 3, index_type=tf.int64).indices)
  check_program(body, 3, mode)


@pytest.mark.parametrize("mode", ALL)
def test_int16_indices_of_gather_and_one_hot(mode):
  """int16 indices that work: tf.gather (also with batch_dims), one_hot of int8/uint8.
  Offsets of 2 * 20,000 would overflow int16 if the loop axis were folded into them."""
  rng = np.random.RandomState(85)
  n_cols = 20000
  P = tf.constant(rng.randn(3, n_cols).astype(np.float32))
  I16 = tf.constant(rng.randint(0, n_cols, size=(3, 5)).astype(np.int16))

  def body(i):
    return (tf.gather(P[i], I16[i]), tf.gather(P[i][None], I16[i][None], batch_dims=1)[0],
            tf.argmax(P[i], output_type=tf.int16))
  check_program(body, 3, mode)


@pytest.mark.parametrize("mode", ALL)
def test_int16_indices_of_gather_nd(mode):
  P = tf.reshape(tf.range(3 * 12, dtype=tf.float32), [3, 3, 4])
  I16 = tf.constant([[[1, 3], [0, 0]], [[2, 1], [0, 3]], [[1, 1], [2, 2]]], tf.int16)
  check_program(lambda i: tf.gather_nd(P[i], I16[i]), 3, mode)


@pytest.mark.parametrize("mode", ALL)
def test_int16_segment_ids_of_unsorted_segment_sum(mode):
  P = tf.constant(R(3, 4, seed=86))
  ids = tf.constant([[0, 1, 1, 2], [2, 2, 0, 0], [1, 0, 2, 1]], tf.int16)
  check_program(lambda i: tf.math.unsorted_segment_sum(P[i], ids[i], 3), 3, mode)


@pytest.mark.parametrize("mode", ALL)
def test_casts_bitcasts_saturating_casts(mode):
  P = tf.constant(R(3, 4, seed=87, lo=-3, hi=3))
  I16 = tf.constant(np.random.RandomState(88).randint(-30000, 30000, (3, 4)).astype(np.int16))

  def body(i):
    p = P[i]
    return (tf.saturate_cast(p * 300, tf.uint8), tf.saturate_cast(p * 1e5, tf.int16),
            tf.cast(tf.cast(p * 100, tf.int16), tf.uint16), tf.cast(p > 0, tf.complex64),
            tf.math.real(tf.complex(p[:2], p[2:])), tf.bitcast(p[:2], tf.uint8),
            tf.bitcast(tf.cast(I16[i], tf.uint16), tf.int16), tf.cast(p, tf.bfloat16),
            tf.cast(tf.cast(p, tf.float16), tf.float64), tf.cast(I16[i], tf.bool))
  check_program(body, 3, mode)


@pytest.mark.parametrize("mode", ALL)
def test_fake_quantization_forward_and_gradient(mode):
  """Quantization-aware training ops: FakeQuantWithMinMaxVars and its gradient fall back
  (a sequential loop, with the documented warning) and must still equal the loop."""
  x = tf.constant(R(3, 5, seed=89, lo=-4, hi=4))
  lo, hi = tf.Variable(-2.0), tf.Variable(2.0)

  def body(i):
    with tf.GradientTape() as t:
      a = tf.quantization.fake_quant_with_min_max_vars(x[i] * 0.5, lo, hi, num_bits=8)
      loss = tf.reduce_sum(a ** 2)
    return (a, tf.quantization.quantize_and_dequantize_v2(x[i], -1.0, 1.0, range_given=True),
            tf.quantization.fake_quant_with_min_max_args(x[i], -1.5, 1.5),
            t.gradient(loss, [lo, hi]))
  check_program(body, 3, mode)
