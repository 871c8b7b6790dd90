"""DP-SGD programs as ML researchers write them, checked against a plain reference.

The reference is the textbook per-example loop: for each example, its own GradientTape on
that one example, the gradient's L2 norm over ALL variables together (in float64), the clip
factor min(1, C / norm), and the sum of the clipped gradients. vectorize's
`clipped_gradient_sum(..., return_norms=True)` (sums AND norms), `per_example_gradients`
and `PrivateModel` must agree with it to float tolerance.
"""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import vectorize

MODES = ("eager", "function", "jit", "dynamic")


# ----------------------------------------------------------------------------- helpers


def _seed(s=0):
  keras.utils.set_random_seed(s)
  tf.random.set_seed(s)
  np.random.seed(s)


def _flat_vars(variables):
  if hasattr(variables, "trainable_variables"):
    return list(variables.trainable_variables)
  return tf.nest.flatten(variables)


def _np(t):
  if t is None:
    return None
  if isinstance(t, tf.IndexedSlices):
    t = tf.convert_to_tensor(t)
  return np.asarray(t.numpy() if hasattr(t, "numpy") else t)


def _example(batch, i):
  return [tf.nest.map_structure(lambda t: t[i], b) for b in batch]


def ref_per_example(loss_fn, variables, batch):
  """Per-example gradients by a Python loop of tapes: list over examples of lists of
  float64 arrays (None where the tape gives None)."""
  vs = _flat_vars(variables)
  n = int(tf.nest.flatten(batch[0])[0].shape[0])
  out = []
  for i in range(n):
    ex = _example(batch, i)
    with tf.GradientTape() as tape:
      loss = loss_fn(*ex)
    grads = tape.gradient(loss, vs)
    out.append([None if g is None else _np(g).astype(np.float64) for g in grads])
  return out


def ref_clipped(loss_fn, variables, batch, clip):
  """(sums, norms): sum_i min(1, C/||g_i||) g_i, and ||g_i|| over all variables."""
  vs = _flat_vars(variables)
  per = ref_per_example(loss_fn, variables, batch)
  sums = [None] * len(vs)
  norms = []
  for grads in per:
    norm = math.sqrt(sum(float(np.sum(g * g)) for g in grads if g is not None))
    norms.append(norm)
    factor = 1.0 if norm == 0 else min(1.0, clip / norm)
    for k, g in enumerate(grads):
      if g is None:
        continue
      sums[k] = g * factor if sums[k] is None else sums[k] + g * factor
  return sums, np.array(norms)


def close(actual, expected, rtol=1e-4, what=""):
  """Scale-aware comparison of one array (or None)."""
  if expected is None:
    assert actual is None, f"{what}: expected None (variable unused), got {actual}"
    return
  assert actual is not None, f"{what}: got None, expected an array"
  a = _np(actual).astype(np.float64)
  e = np.asarray(expected, np.float64)
  assert a.shape == e.shape, f"{what}: shape {a.shape} vs reference {e.shape}"
  scale = float(np.max(np.abs(e))) if e.size else 0.0
  np.testing.assert_allclose(a, e, rtol=rtol, atol=1e-5 * scale + 1e-7, err_msg=what)


def check_sums_norms(got, ref, rtol=1e-4):
  (sums, norms), (rsums, rnorms) = got, ref
  sums = tf.nest.flatten(sums) if not isinstance(sums, list) else sums
  assert len(sums) == len(rsums), (len(sums), len(rsums))
  close(norms, rnorms, rtol, "norms")
  for k, (s, r) in enumerate(zip(sums, rsums)):
    close(s, r, rtol, f"sum of variable {k}")


def in_mode(mode, fn, *args):
  """Runs fn(*args) eagerly, in a tf.function, under XLA, or in a tf.function whose
  batch size is known only at run time."""
  if mode == "eager":
    return fn(*args)
  if mode == "function":
    return tf.function(fn)(*args)
  if mode == "jit":
    return tf.function(fn, jit_compile=True)(*args)
  if mode == "dynamic":
    sig = [tf.nest.map_structure(
        lambda a: tf.TensorSpec([None] + a.shape[1:].as_list(), a.dtype), a) for a in args]
    return tf.function(fn, input_signature=sig)(*args)
  raise ValueError(mode)


def median_clip(ref_norms):
  """A clip bound that clips some examples and not others."""
  return float(np.median(ref_norms))


def vclip(loss_fn, variables, batch, clip, mode="eager"):
  def step(*b):
    return vectorize.clipped_gradient_sum(loss_fn, variables, *b, l2_norm_clip=clip,
                                          return_norms=True)
  return in_mode(mode, step, *batch)


def run_and_check(loss_fn, variables, batch, mode="eager", clip=None, rtol=1e-4):
  _, rnorms = ref_clipped(loss_fn, variables, batch, 1.0)
  if clip is None:
    clip = median_clip(rnorms)
  ref = ref_clipped(loss_fn, variables, batch, clip)
  got = vclip(loss_fn, variables, batch, clip, mode)
  check_sums_norms(got, ref, rtol)
  return got, ref


def sce(y, logits):
  return tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))


def keras_loss(model):
  def loss_fn(x, y):
    return sce(y[None], model(x[None]))
  return loss_fn


# ----------------------------------------------------------------------------- Keras bodies

L = keras.layers


def _dense():
  return keras.Sequential([keras.Input((5,)), L.Dense(4, activation="tanh"), L.Dense(3)]), (5,)


def _conv1d(**kw):
  def make():
    return keras.Sequential([keras.Input((11, 2)), L.Conv1D(3, 3, **kw), L.Flatten(),
                             L.Dense(3)]), (11, 2)
  return make


def _conv2d(**kw):
  def make():
    return keras.Sequential([keras.Input((7, 7, 2)), L.Conv2D(3, 3, **kw), L.Flatten(),
                             L.Dense(3)]), (7, 7, 2)
  return make


def _layer2d(layer_fn, shape=(7, 7, 2)):
  def make():
    return keras.Sequential([keras.Input(shape), layer_fn(), L.Flatten(), L.Dense(3)]), shape
  return make


def _mha():
  inp = keras.Input((4, 6))
  h = L.MultiHeadAttention(num_heads=2, key_dim=3)(inp, inp)
  h = L.GlobalAveragePooling1D()(h)
  return keras.Model(inp, L.Dense(3)(h)), (4, 6)


def _layernorm():
  return keras.Sequential([keras.Input((6,)), L.Dense(5), L.LayerNormalization(),
                           L.Dense(3)]), (6,)


def _groupnorm():
  return keras.Sequential([keras.Input((5, 5, 4)), L.Conv2D(4, 3, padding="same"),
                           L.GroupNormalization(groups=2), L.Flatten(), L.Dense(3)]), (5, 5, 4)


def _mixed():
  return keras.Sequential([keras.Input((8, 8, 1)), L.Conv2D(3, 3, activation="relu"),
                           L.MaxPooling2D(), L.Flatten(), L.Dropout(0.5),
                           L.Dense(4, activation="relu"), L.Dense(3)]), (8, 8, 1)


def _residual():
  inp = keras.Input((6, 6, 2))
  h = L.Conv2D(4, 3, padding="same", activation="relu")(inp)
  r = L.Conv2D(4, 3, padding="same")(h)
  h = L.Activation("relu")(L.Add()([h, r]))
  h = L.AveragePooling2D()(h)
  h = L.Flatten()(h)
  return keras.Model(inp, L.Dense(3)(h)), (6, 6, 2)


class _Sub(keras.Model):

  def __init__(self):
    super().__init__()
    self.d1 = L.Dense(4)
    self.d2 = L.Dense(4)
    self.out = L.Dense(3)

  def call(self, x):
    h = tf.nn.relu(self.d1(x))
    return self.out(h * tf.sigmoid(self.d2(x)))


def _subclassed():
  m = _Sub()
  m(tf.zeros([1, 5]))
  return m, (5,)


KERAS_CASES = {
    "dense": _dense,
    "conv1d_s2_valid": _conv1d(strides=2, padding="valid"),
    "conv1d_s2_same": _conv1d(strides=2, padding="same"),
    "conv1d_dil2_same": _conv1d(dilation_rate=2, padding="same"),
    "conv1d_nobias_valid": _conv1d(use_bias=False),
    "conv1d_causal": _conv1d(padding="causal", dilation_rate=2),
    "conv2d_s2_valid": _conv2d(strides=2, padding="valid"),
    "conv2d_s2_same": _conv2d(strides=2, padding="same"),
    "conv2d_dil2_valid": _conv2d(dilation_rate=2),
    "conv2d_dil2_same_nobias": _conv2d(dilation_rate=2, padding="same", use_bias=False),
    "conv2d_s21_nobias": _conv2d(strides=(2, 1), use_bias=False),
    "depthwise": _layer2d(lambda: L.DepthwiseConv2D(3, depth_multiplier=2)),
    "depthwise_s2_same": _layer2d(lambda: L.DepthwiseConv2D(3, strides=2, padding="same")),
    "separable": _layer2d(lambda: L.SeparableConv2D(3, 3, depth_multiplier=2)),
    "separable_dil2_nobias": _layer2d(
        lambda: L.SeparableConv2D(3, 3, dilation_rate=2, use_bias=False)),
    "transpose": _layer2d(lambda: L.Conv2DTranspose(3, 3, strides=2), (4, 4, 2)),
    "transpose_same_nobias": _layer2d(
        lambda: L.Conv2DTranspose(3, 3, strides=2, padding="same", use_bias=False), (4, 4, 2)),
    "mha": _mha,
    "layernorm": _layernorm,
    "groupnorm": _groupnorm,
    "mixed_conv_pool_dropout": _mixed,
    "residual_functional": _residual,
    "subclassed": _subclassed,
}


@pytest.mark.parametrize("case", sorted(KERAS_CASES))
def test_keras_layer_bodies(case):
  _seed(1)
  model, shape = KERAS_CASES[case]()
  x = tf.random.normal((6,) + shape)
  y = tf.constant([0, 1, 2, 0, 1, 2])
  run_and_check(keras_loss(model), model, (x, y))


@pytest.mark.parametrize("mode", ["function", "jit"])
@pytest.mark.parametrize("case", ["conv2d_s2_same", "separable", "transpose", "mha",
                                  "groupnorm"])
def test_keras_layer_bodies_compiled(case, mode):
  _seed(2)
  model, shape = KERAS_CASES[case]()
  x = tf.random.normal((5,) + shape)
  y = tf.constant([0, 1, 2, 0, 1])
  run_and_check(keras_loss(model), model, (x, y), mode=mode)


# ----- Embedding and recurrent layers


def _ids(n, t, vocab, pad=False, seed=3):
  rng = np.random.RandomState(seed)
  ids = rng.randint(1, vocab, size=(n, t))
  ids[:, 1] = ids[:, 0]       # a repeated id in every example
  ids[0, :] = 2               # one example of a single id, repeated
  if pad:
    lengths = [t, 2, 3, 1, t - 1, t][:n]
    for i, ln in enumerate(lengths):
      ids[i, ln:] = 0
  return tf.constant(ids, tf.int32)


def test_embedding_repeated_ids():
  _seed(3)
  model = keras.Sequential([keras.Input((5,), dtype="int32"), L.Embedding(7, 3),
                            L.Flatten(), L.Dense(3)])
  x = _ids(6, 5, 7)
  y = tf.constant([0, 1, 2, 0, 1, 2])
  run_and_check(keras_loss(model), model, (x, y))


def test_embedding_only_variable_sum_of_rows():
  """An embedding alone (a bag of words, mean of rows, fixed classifier): the gradient of
  one example adds several copies to the same row, and its norm must count them together."""
  _seed(4)
  emb = L.Embedding(5, 3)
  emb.build((None, 4))
  proj = tf.constant(np.random.RandomState(0).randn(3, 2), tf.float32)
  x = tf.constant([[1, 1, 1, 1], [1, 2, 1, 2], [3, 4, 0, 0], [2, 2, 2, 3]], tf.int32)
  y = tf.constant([0, 1, 0, 1])

  def loss_fn(ids, label):
    h = tf.reduce_sum(emb(ids), axis=0)
    return sce(label, tf.linalg.matvec(proj, h, transpose_a=True))

  run_and_check(loss_fn, emb, (x, y))


def _rnn(kind, mask, stacked):
  def make():
    rnn = L.LSTM if kind == "lstm" else L.GRU
    layers = [keras.Input((6,), dtype="int32"), L.Embedding(9, 3, mask_zero=mask)]
    if stacked:
      layers.append(rnn(3, return_sequences=True))
    layers += [rnn(3), L.Dense(3)]
    return keras.Sequential(layers)
  return make


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("mask", [False, True], ids=["nomask", "mask_zero"])
def test_recurrent(kind, mask):
  _seed(5)
  model = _rnn(kind, mask, stacked=False)()
  x = _ids(6, 6, 9, pad=mask)
  y = tf.constant([0, 1, 2, 0, 1, 2])
  run_and_check(keras_loss(model), model, (x, y))


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_recurrent_stack_masked(kind):
  _seed(6)
  model = _rnn(kind, mask=True, stacked=True)()
  x = _ids(5, 6, 9, pad=True)
  y = tf.constant([0, 1, 2, 0, 1])
  run_and_check(keras_loss(model), model, (x, y))


@pytest.mark.parametrize("mode", ["function", "jit", "dynamic"])
def test_lstm_masked_modes(mode):
  _seed(7)
  model = _rnn("lstm", mask=True, stacked=False)()
  x = _ids(5, 6, 9, pad=True)
  y = tf.constant([0, 1, 2, 0, 1])
  run_and_check(keras_loss(model), model, (x, y), mode=mode)


# ----------------------------------------------------------------------------- non-Keras


def _mlp_params(dtype=tf.float32, seed=0):
  rng = np.random.RandomState(seed)
  return {
      "w1": tf.Variable(rng.randn(4, 5) * 0.5, dtype=dtype, name="w1"),
      "b1": tf.Variable(rng.randn(5) * 0.1, dtype=dtype, name="b1"),
      "w2": tf.Variable(rng.randn(5, 3) * 0.5, dtype=dtype, name="w2"),
      "b2": tf.Variable(rng.randn(3) * 0.1, dtype=dtype, name="b2"),
  }


def _mlp_loss(p):
  def loss_fn(x, y):
    h = tf.nn.tanh(tf.matmul(x[None], p["w1"]) + p["b1"])
    return sce(y[None], tf.matmul(h, p["w2"]) + p["b2"])
  return loss_fn


def _mlp_batch(n, dtype=tf.float32, seed=1):
  rng = np.random.RandomState(seed)
  x = tf.constant(rng.randn(n, 4), dtype)
  y = tf.constant(rng.randint(0, 3, n), tf.int32)
  return x, y


def _check_dict(got, ref_sums, ref_norms, p, rtol=1e-4):
  sums, norms = got
  assert isinstance(sums, dict) and sorted(sums) == sorted(p), sums
  close(norms, ref_norms, rtol, "norms")
  for k, name in enumerate(tf.nest.flatten({k: k for k in p})):
    close(sums[name], ref_sums[k], rtol, name)


@pytest.mark.parametrize("mode", MODES)
def test_raw_variables_mlp(mode):
  p = _mlp_params()
  x, y = _mlp_batch(7)
  loss_fn = _mlp_loss(p)
  _, rn = ref_clipped(loss_fn, p, (x, y), 1.0)
  clip = median_clip(rn)
  rs, rn = ref_clipped(loss_fn, p, (x, y), clip)
  _check_dict(vclip(loss_fn, p, (x, y), clip, mode), rs, rn, p)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [0, 1], ids=["n0", "n1"])
def test_tiny_batches(n, mode):
  """n = 0: the sum over no examples is zero in every variable, and there are no norms.
  n = 1: the one example's clipped gradient."""
  p = _mlp_params()
  x, y = _mlp_batch(n)
  loss_fn = _mlp_loss(p)
  sums, norms = vclip(loss_fn, p, (x, y), 0.3, mode)
  if n == 0:
    assert tuple(norms.shape) == (0,), norms
    for k, v in p.items():
      assert sums[k] is not None, k
      close(sums[k], np.zeros(v.shape), what=k)
  else:
    rs, rn = ref_clipped(loss_fn, p, (x, y), 0.3)
    _check_dict((sums, norms), rs, rn, p)


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_clip_tiny_and_huge(mode):
  p = _mlp_params()
  x, y = _mlp_batch(6)
  loss_fn = _mlp_loss(p)
  # C tiny: every example is clipped; each contributes exactly C * g_i / ||g_i||.
  rs, rn = ref_clipped(loss_fn, p, (x, y), 1e-6)
  assert np.all(rn > 1e-6)
  got = vclip(loss_fn, p, (x, y), 1e-6, mode)
  _check_dict(got, rs, rn, p)
  # C huge: nothing is clipped and the sum is the plain gradient of the batch's summed loss.
  with tf.GradientTape() as tape:
    h = tf.nn.tanh(tf.matmul(x, p["w1"]) + p["b1"])
    total = sce(y, tf.matmul(h, p["w2"]) + p["b2"])
  plain = tape.gradient(total, p)
  sums, norms = vclip(loss_fn, p, (x, y), 1e6, mode)
  close(norms, rn, what="norms")
  for k in p:
    close(sums[k], plain[k].numpy(), what=k)


class _Mod(tf.Module):

  def __init__(self):
    super().__init__()
    rng = np.random.RandomState(2)
    self.w = tf.Variable(rng.randn(4, 3).astype("float32"), name="w")
    self.b = tf.Variable(rng.randn(3).astype("float32"), name="b")
    self.scale = tf.Variable(1.5, name="scale")
    self.frozen = tf.Variable(np.ones([3], "float32"), trainable=False, name="frozen")

  def __call__(self, x):
    return self.scale * tf.matmul(x, self.w) + self.b + self.frozen


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_tf_module(mode):
  mod = _Mod()
  x, y = _mlp_batch(5)

  def loss_fn(xi, yi):
    return sce(yi[None], mod(xi[None]))

  got, _ = run_and_check(loss_fn, mod, (x, y), mode=mode)
  assert len(got[0]) == len(mod.trainable_variables) == 3


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_einsum_layer(mode):
  rng = np.random.RandomState(3)
  w = tf.Variable(rng.randn(4, 2, 3).astype("float32"), name="w")      # d, heads, k
  v = tf.Variable(rng.randn(2, 3).astype("float32"), name="v")
  x = tf.constant(rng.randn(6, 5, 4).astype("float32"))                 # b, t, d
  y = tf.constant(rng.randn(6).astype("float32"))

  def loss_fn(xi, yi):
    h = tf.einsum("td,dhk->thk", xi, w)
    out = tf.einsum("thk,hk->t", tf.nn.relu(h), v)
    return tf.square(tf.reduce_mean(out) - yi)

  run_and_check(loss_fn, [w, v], (x, y), mode=mode)


def test_einsum_dense_keras():
  _seed(8)
  model = keras.Sequential([keras.Input((3, 4)),
                            L.EinsumDense("btd,dk->btk", output_shape=(None, 5), bias_axes="k"),
                            L.Flatten(), L.Dense(3)])
  x = tf.random.normal([5, 3, 4])
  y = tf.constant([0, 1, 2, 1, 0])
  run_and_check(keras_loss(model), model, (x, y))


@pytest.mark.parametrize("mode", ["eager", "function", "jit"])
def test_unused_variable_is_none(mode):
  p = _mlp_params()
  p["unused"] = tf.Variable(tf.ones([2, 2]), name="unused")
  x, y = _mlp_batch(5)
  loss_fn = _mlp_loss(p)
  _, rn = ref_clipped(loss_fn, p, (x, y), 1.0)
  rs, rn = ref_clipped(loss_fn, p, (x, y), median_clip(rn))
  sums, norms = vclip(loss_fn, p, (x, y), median_clip(rn), mode)
  assert sums["unused"] is None, sums["unused"]
  _check_dict((sums, norms), rs, rn, p)
  grads = vectorize.per_example_gradients(loss_fn, p, x, y)
  assert grads["unused"] is None


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_shared_weight_used_twice(mode):
  rng = np.random.RandomState(4)
  w = tf.Variable(rng.randn(4, 4).astype("float32") * 0.6, name="w")
  head = tf.Variable(rng.randn(4, 3).astype("float32"), name="head")
  x, y = _mlp_batch(6)

  def loss_fn(xi, yi):
    h = tf.nn.tanh(tf.matmul(xi[None], w))
    h = tf.nn.tanh(tf.matmul(h, w))            # the same weight, again
    return sce(yi[None], tf.matmul(h, head) + tf.matmul(xi[None], w)[:, :3])

  run_and_check(loss_fn, [w, head], (x, y), mode=mode)


def test_shared_keras_layer_used_twice():
  _seed(9)
  shared = L.Dense(4, activation="tanh")
  inp = keras.Input((4,))
  out = L.Dense(3)(shared(shared(inp)))
  model = keras.Model(inp, out)
  x, y = _mlp_batch(6)
  run_and_check(keras_loss(model), model, (x, y))


@pytest.mark.parametrize("mode", ["eager", "function", "jit"])
def test_float64(mode):
  p = _mlp_params(tf.float64)
  x, y = _mlp_batch(6, tf.float64)
  loss_fn = _mlp_loss(p)
  _, rn = ref_clipped(loss_fn, p, (x, y), 1.0)
  rs, rn = ref_clipped(loss_fn, p, (x, y), median_clip(rn))
  sums, norms = vclip(loss_fn, p, (x, y), median_clip(rn), mode)
  assert norms.dtype == tf.float64
  for k in p:
    assert sums[k].dtype == tf.float64, (k, sums[k].dtype)
  _check_dict((sums, norms), rs, rn, p, rtol=1e-9)


def test_float64_keras():
  _seed(10)
  model = keras.Sequential([keras.Input((4,)), L.Dense(5, activation="tanh", dtype="float64"),
                            L.Dense(3, dtype="float64")])
  x, y = _mlp_batch(5, tf.float64)
  got, _ = run_and_check(keras_loss(model), model, (x, y), rtol=1e-9)
  assert got[1].dtype == tf.float64


# ----------------------------------------------------------------------------- daily DP work


def test_per_example_gradients_match_loop():
  _seed(11)
  model, shape = _conv2d(strides=2, padding="same")()
  x = tf.random.normal((5,) + shape)
  y = tf.constant([0, 1, 2, 0, 1])
  loss_fn = keras_loss(model)
  ref = ref_per_example(loss_fn, model, (x, y))
  got = vectorize.per_example_gradients(loss_fn, model, x, y)
  assert len(got) == len(model.trainable_variables)
  for k, g in enumerate(got):
    close(g, np.stack([r[k] for r in ref]), what=f"variable {k}")


@pytest.mark.parametrize("mode", ["eager", "function", "jit"])
def test_has_aux_per_example_losses(mode):
  p = _mlp_params()
  x, y = _mlp_batch(6)

  def loss_fn(xi, yi):
    h = tf.nn.tanh(tf.matmul(xi[None], p["w1"]) + p["b1"])
    logits = tf.matmul(h, p["w2"]) + p["b2"]
    loss = sce(yi[None], logits)
    return loss, {"loss": loss, "pred": tf.argmax(logits[0], output_type=tf.int32)}

  def plain(xi, yi):
    return loss_fn(xi, yi)[0]

  _, rn = ref_clipped(plain, p, (x, y), 1.0)
  clip = median_clip(rn)
  rs, rn = ref_clipped(plain, p, (x, y), clip)

  def step(xb, yb):
    return vectorize.clipped_gradient_sum(loss_fn, p, xb, yb, l2_norm_clip=clip,
                                          return_norms=True, has_aux=True)

  out = in_mode(mode, step, x, y)
  assert len(out) == 3, out
  sums, norms, aux = out
  _check_dict((sums, norms), rs, rn, p)
  ref_losses = [float(plain(x[i], y[i])) for i in range(6)]
  ref_preds = [int(loss_fn(x[i], y[i])[1]["pred"]) for i in range(6)]
  close(aux["loss"], np.array(ref_losses), what="aux loss")
  np.testing.assert_array_equal(_np(aux["pred"]), ref_preds)


def test_microbatch_accumulation():
  """Gradient accumulation: clipping is per example, so the clipped sums of microbatches
  add up to the clipped sum of the whole batch."""
  p = _mlp_params()
  x, y = _mlp_batch(8)
  loss_fn = _mlp_loss(p)
  rs, rn = ref_clipped(loss_fn, p, (x, y), 0.5)

  @tf.function
  def accumulate(xb, yb):
    acc = {k: tf.zeros_like(v) for k, v in p.items()}
    norms = []
    for m in range(4):
      s, nm = vectorize.clipped_gradient_sum(loss_fn, p, xb[2 * m:2 * m + 2],
                                             yb[2 * m:2 * m + 2], l2_norm_clip=0.5,
                                             return_norms=True)
      acc = {k: acc[k] + s[k] for k in acc}
      norms.append(nm)
    return acc, tf.concat(norms, 0)

  _check_dict(accumulate(x, y), rs, rn, p)


def test_custom_train_loop_with_noise():
  """Three DP-SGD steps by hand (clipped sum, Gaussian noise from a seeded generator,
  divided by the batch size, SGD), against the same steps with the reference sums."""
  lr, clip, sigma, b = 0.3, 0.4, 0.8, 6
  batches = [_mlp_batch(b, seed=s) for s in (10, 11, 12)]

  def train(use_vectorize):
    p = _mlp_params(seed=5)
    keys = list(p)
    gen = tf.random.Generator.from_seed(123)
    opt = keras.optimizers.SGD(lr)
    loss_fn = _mlp_loss(p)
    for x, y in batches:
      if use_vectorize:
        sums = vectorize.clipped_gradient_sum(loss_fn, p, x, y, l2_norm_clip=clip)
        sums = [sums[k] for k in keys]
      else:
        rs, _ = ref_clipped(loss_fn, [p[k] for k in keys], (x, y), clip)
        sums = [tf.constant(s, tf.float32) for s in rs]
      noised = [s + gen.normal(s.shape, stddev=clip * sigma) for s in sums]
      opt.apply_gradients(zip([g / b for g in noised], [p[k] for k in keys]))
    return {k: v.numpy() for k, v in p.items()}

  got, ref = train(True), train(False)
  for k in ref:
    close(got[k], ref[k], what=k)


def test_clip_bound_as_variable_adaptive():
  """Adaptive clipping: C lives in a tf.Variable read by a tf.function; changing it must
  change the clipping without a stale trace."""
  p = _mlp_params()
  x, y = _mlp_batch(6)
  loss_fn = _mlp_loss(p)
  c = tf.Variable(0.2)

  @tf.function
  def step(xb, yb):
    return vectorize.clipped_gradient_sum(loss_fn, p, xb, yb, l2_norm_clip=c,
                                          return_norms=True)

  for value in (0.2, 0.7, 5.0):
    c.assign(value)
    rs, rn = ref_clipped(loss_fn, p, (x, y), value)
    _check_dict(step(x, y), rs, rn, p)


def test_nested_batch_structure():
  """Features in a dict, as tf.data pipelines give them."""
  p = _mlp_params()
  x, y = _mlp_batch(5)
  feats = {"a": x[:, :2], "b": x[:, 2:]}

  def loss_fn(f, yi):
    xi = tf.concat([f["a"], f["b"]], 0)
    return _mlp_loss(p)(xi, yi)

  rs, rn = ref_clipped(loss_fn, p, (feats, y), 0.5)
  _check_dict(vclip(loss_fn, p, (feats, y), 0.5), rs, rn, p)


# ----------------------------------------------------------------------------- PrivateModel


def _toy_model(seed=0, width=3):
  _seed(seed)
  return keras.Sequential([keras.Input((4,)), L.Dense(width, activation="tanh"), L.Dense(2)])


def _toy_data(n=16, seed=0):
  rng = np.random.RandomState(seed)
  x = rng.randn(n, 4).astype("float32")
  y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype("int32")
  return x, y


def _loss_obj():
  return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def test_private_model_one_step_exact():
  lr, clip, b = 0.5, 0.3, 8
  model = _toy_model()
  x, y = _toy_data(b)
  before = [v.numpy().copy() for v in model.trainable_variables]
  lossobj = _loss_obj()

  def loss_fn(xi, yi):
    return lossobj(yi[None], model(xi[None]))

  rs, rn = ref_clipped(loss_fn, model, (tf.constant(x), tf.constant(y)), clip)
  assert np.sum(rn > clip) >= 2 and np.sum(rn < clip) >= 1, rn   # some clipped, some not
  private = vectorize.PrivateModel(model, l2_norm_clip=clip, noise_multiplier=0.0, seed=0)
  private.compile(optimizer=keras.optimizers.SGD(lr), loss=_loss_obj())
  private.fit(x, y, batch_size=b, epochs=1, shuffle=False, verbose=0)
  after = [v.numpy() for v in model.trainable_variables]
  for k, (w0, w1, s) in enumerate(zip(before, after, rs)):
    close(w1 - w0, -lr * s / b, rtol=1e-3, what=f"update of variable {k}")


def test_private_model_with_regularizer_step():
  """The model's own losses (an L2 kernel regularizer) are part of each example's loss."""
  lr, clip, b = 0.5, 0.3, 6
  _seed(1)
  model = keras.Sequential([keras.Input((4,)),
                            L.Dense(3, activation="tanh",
                                    kernel_regularizer=keras.regularizers.L2(0.1)),
                            L.Dense(2)])
  x, y = _toy_data(b, seed=1)
  before = [v.numpy().copy() for v in model.trainable_variables]
  lossobj = _loss_obj()

  def loss_fn(xi, yi):
    out = model(xi[None])
    return lossobj(yi[None], out) + tf.add_n(model.losses)

  rs, rn = ref_clipped(loss_fn, model, (tf.constant(x), tf.constant(y)), clip)
  private = vectorize.PrivateModel(model, l2_norm_clip=clip, noise_multiplier=0.0, seed=0)
  private.compile(optimizer=keras.optimizers.SGD(lr), loss=_loss_obj())
  private.fit(x, y, batch_size=b, epochs=1, shuffle=False, verbose=0)
  after = [v.numpy() for v in model.trainable_variables]
  for k, (w0, w1, s) in enumerate(zip(before, after, rs)):
    close(w1 - w0, -lr * s / b, rtol=1e-3, what=f"update of variable {k}")


def _noised_run(seed, sigma=1.0, epochs=1, model_seed=0):
  model = _toy_model(model_seed)
  x, y = _toy_data(16)
  private = vectorize.PrivateModel(model, l2_norm_clip=0.5, noise_multiplier=sigma, seed=seed)
  private.compile(optimizer=keras.optimizers.SGD(0.1), loss=_loss_obj())
  private.fit(x, y, batch_size=8, epochs=epochs, shuffle=False, verbose=0)
  return [v.numpy() for v in model.trainable_variables]


def test_private_model_noise_reproducible_and_present():
  a, b = _noised_run(seed=7), _noised_run(seed=7)
  for wa, wb in zip(a, b):
    np.testing.assert_array_equal(wa, wb)
  c = _noised_run(seed=8)
  quiet = _noised_run(seed=7, sigma=0.0)
  assert any(not np.allclose(wa, wc) for wa, wc in zip(a, c)), "seed does not change noise"
  assert any(not np.allclose(wa, wq) for wa, wq in zip(a, quiet)), "no noise added"


def test_private_model_noise_scale_and_fresh_per_step():
  """Recover the noise from the update: noise = -(b/lr) * delta - clipped_sum. Its standard
  deviation must be sigma * C, and two steps must not reuse the same noise."""
  lr, clip, sigma, b = 0.1, 0.5, 2.0, 4
  _seed(3)
  model = keras.Sequential([keras.Input((40,)), L.Dense(50)])     # 2050 parameters
  rng = np.random.RandomState(3)
  x = rng.randn(2 * b, 40).astype("float32")
  y = rng.randn(2 * b, 50).astype("float32")
  mse = keras.losses.MeanSquaredError()

  def loss_fn(xi, yi):
    return mse(yi[None], model(xi[None]))

  private = vectorize.PrivateModel(model, l2_norm_clip=clip, noise_multiplier=sigma, seed=5)
  private.compile(optimizer=keras.optimizers.SGD(lr), loss=keras.losses.MeanSquaredError())
  noises = []
  for step in range(2):
    xs, ys = x[step * b:(step + 1) * b], y[step * b:(step + 1) * b]
    before = [v.numpy().copy() for v in model.trainable_variables]
    rs, _ = ref_clipped(loss_fn, model, (tf.constant(xs), tf.constant(ys)), clip)
    private.fit(xs, ys, batch_size=b, epochs=1, shuffle=False, verbose=0)
    after = [v.numpy() for v in model.trainable_variables]
    noise = np.concatenate([(-(w1 - w0) * b / lr - s).ravel()
                            for w0, w1, s in zip(before, after, rs)])
    noises.append(noise)
    assert abs(np.std(noise) / (sigma * clip) - 1) < 0.1, np.std(noise)
    assert abs(np.mean(noise)) < 0.1 * sigma * clip, np.mean(noise)
  corr = np.corrcoef(noises[0], noises[1])[0, 1]
  assert abs(corr) < 0.15, f"the two steps' noise is correlated ({corr:.3f}): reused noise"


def test_private_model_trains_toy_problem():
  model = _toy_model(seed=4, width=4)
  x, y = _toy_data(64, seed=4)
  private = vectorize.PrivateModel(model, l2_norm_clip=1.0, noise_multiplier=0.3, seed=1)
  private.compile(optimizer=keras.optimizers.SGD(0.5), loss=_loss_obj(),
                  metrics=["accuracy"])
  first = private.evaluate(x, y, verbose=0, return_dict=True)
  hist = private.fit(x, y, batch_size=16, epochs=6, verbose=0)
  last = private.evaluate(x, y, verbose=0, return_dict=True)
  assert set(hist.history) >= {"loss", "accuracy"}, hist.history
  assert last["loss"] < 0.7 * first["loss"], (first, last)
  assert last["accuracy"] >= 0.85, last
  # evaluate's numbers are the plain model's.
  logits = model(x, training=False).numpy()
  ref_loss = float(_loss_obj()(y, logits))
  ref_acc = float(np.mean(np.argmax(logits, -1) == y))
  np.testing.assert_allclose(last["loss"], ref_loss, rtol=1e-4)
  np.testing.assert_allclose(last["accuracy"], ref_acc, rtol=1e-6)
  # predict gives the wrapped model's outputs.
  pred = private.predict(x, batch_size=16, verbose=0)
  np.testing.assert_allclose(pred, logits, rtol=1e-5, atol=1e-6)


def test_private_model_refuses_sample_weight():
  model = _toy_model()
  x, y = _toy_data(8)
  private = vectorize.PrivateModel(model, l2_norm_clip=1.0, noise_multiplier=0.0)
  private.compile(optimizer="sgd", loss=_loss_obj())
  with pytest.raises(Exception, match="(?i)sample_weight|weight"):
    private.fit(x, y, sample_weight=np.ones(8, "float32"), batch_size=8, verbose=0)
