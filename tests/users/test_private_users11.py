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


def check_sums_norms(got, ref, rtol=1e-4, names=None):
  (sums, norms), (rsums, rnorms) = got, ref
  sums = tf.nest.flatten(sums) if not isinstance(sums, list) else sums
  assert len(sums) == len(rsums), (len(sums), len(rsums))
  close(norms, rnorms, rtol, "norms")
  for k, (s, r) in enumerate(zip(sums, rsums)):
    close(s, r, rtol, f"sum of variable {k} {names[k] if names else ''}")


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
  names = [getattr(v, "path", None) or v.name for v in _flat_vars(variables)]
  check_sums_norms(got, ref, rtol, names)
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


def _branches(shape, *layers):
  """One input through several layers side by side (each a variant under test), their
  flattened outputs concatenated into a small classifier."""
  def make():
    inp = keras.Input(shape)
    outs = [L.Flatten()(layer(inp)) for layer in layers]
    h = L.Concatenate()(outs) if len(outs) > 1 else outs[0]
    return keras.Model(inp, L.Dense(3)(h)), shape
  return make


def _conv1d_family():
  return _branches(
      (11, 2), L.Conv1D(3, 3, strides=2, padding="valid", name="s2_valid"),
      L.Conv1D(3, 3, strides=2, padding="same", name="s2_same"),
      L.Conv1D(3, 3, dilation_rate=2, padding="same", name="dil2_same"),
      L.Conv1D(2, 3, use_bias=False, name="nobias_valid"),
      L.Conv1D(2, 2, padding="causal", dilation_rate=2, name="causal_dil2"))()


def _conv2d_family():
  return _branches(
      (7, 7, 2), L.Conv2D(3, 3, strides=2, padding="valid", name="s2_valid"),
      L.Conv2D(3, 3, strides=2, padding="same", name="s2_same"),
      L.Conv2D(2, 3, dilation_rate=2, name="dil2_valid"),
      L.Conv2D(2, 3, dilation_rate=2, padding="same", use_bias=False, name="dil2_same_nobias"),
      L.Conv2D(2, (3, 2), strides=(2, 1), use_bias=False, name="s21_nobias"),
      L.Conv2D(4, 3, groups=2, name="groups2"),
      L.Conv2D(2, 2, strides=2, padding="same", name="k2_s2_same"),
      L.Conv2D(2, 4, strides=3, padding="same", name="k4_s3_same"))()


def _conv2d_small():
  return _branches(
      (6, 6, 2), L.Conv2D(2, 3, strides=2, padding="same", name="s2_same"),
      L.Conv2D(2, 3, dilation_rate=2, use_bias=False, name="dil2_nobias"))()


def _depthwise_family():
  return _branches(
      (7, 7, 2), L.DepthwiseConv2D(3, depth_multiplier=2, name="dm2_valid"),
      L.DepthwiseConv2D(3, strides=2, padding="same", name="s2_same"),
      L.DepthwiseConv2D(3, dilation_rate=2, use_bias=False, name="dil2_nobias"))()


def _separable_family():
  return _branches(
      (7, 7, 2), L.SeparableConv2D(3, 3, depth_multiplier=2, name="dm2"),
      L.SeparableConv2D(3, 3, strides=2, padding="same", name="s2_same"),
      L.SeparableConv2D(2, 3, dilation_rate=2, use_bias=False, name="dil2_nobias"))()


def _transpose_family():
  return _branches(
      (4, 4, 2), L.Conv2DTranspose(3, 3, strides=2, name="s2_valid"),
      L.Conv2DTranspose(2, 3, strides=2, padding="same", use_bias=False, name="s2_same_nobias"),
      L.Conv2DTranspose(2, 2, dilation_rate=2, name="dil2"))()


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
  h = L.AveragePooling2D(2)(h)
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


def _odd_layers():
  bn = L.BatchNormalization()
  model = keras.Sequential([keras.Input((4, 4, 2)), L.ZeroPadding2D(1), L.Conv2D(2, 3),
                            bn, L.PReLU(), L.UpSampling2D(2), L.Cropping2D(1),
                            L.Conv2D(2, 2, strides=2), L.Flatten(), L.Dense(3)])
  bn.moving_mean.assign([0.3, -0.2])                         # inference statistics
  bn.moving_variance.assign([1.5, 0.7])
  return model, (4, 4, 2)


def _subclassed():
  m = _Sub()
  m(tf.zeros([1, 5]))
  return m, (5,)


KERAS_CASES = {                  # case: (model maker, modes)
    "dense": (_dense, ("eager", "dynamic")),
    "conv1d_family": (_conv1d_family, ("eager",)),
    "conv2d_family": (_conv2d_family, ("eager",)),
    "conv2d_small": (_conv2d_small, ("jit", "dynamic")),
    "depthwise_family": (_depthwise_family, ("eager",)),
    "separable_family": (_separable_family, ("eager", "function")),
    "transpose_family": (_transpose_family, ("eager",)),
    "mha": (_mha, ("jit",)),
    "layernorm": (_layernorm, ("eager",)),
    "groupnorm": (_groupnorm, ("eager", "dynamic")),
    "mixed_conv_pool_dropout": (_mixed, ("eager",)),
    "residual_functional": (_residual, ("eager",)),
    "subclassed": (_subclassed, ("eager",)),
    "pad_bn_prelu_upsample_crop": (_odd_layers, ("eager",)),
}


@pytest.mark.parametrize("case,mode", [(c, m) for c in sorted(KERAS_CASES)
                                       for m in KERAS_CASES[c][1]])
def test_keras_layer_bodies(case, mode):
  _seed(1)
  model, shape = KERAS_CASES[case][0]()
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
    if kind == "lstm_gru" and stacked:        # an LSTM's sequences into a GRU
      layers += [L.LSTM(3, return_sequences=True), L.GRU(3)]
    elif kind == "lstm_gru":                  # forward LSTM, backward GRU
      layers += [L.Bidirectional(L.LSTM(2), backward_layer=L.GRU(2, go_backwards=True))]
    else:
      layers += [rnn(3, return_sequences=True)] if stacked else []
      layers += [rnn(3)]
    layers += [L.Dense(3)]
    return keras.Sequential(layers)
  return make


@pytest.mark.parametrize("mask,stacked", [(True, True), (False, False)],
                         ids=["mask_zero_lstm_into_gru", "nomask_bidirectional_lstm_gru"])
def test_recurrent(mask, stacked):
  """Embedding(mask_zero=True) -> LSTM(return_sequences=True) -> GRU: padded sequences of
  different lengths, each example's own mask; and unmasked, a Bidirectional layer of a
  forward LSTM and a backward GRU."""
  _seed(5)
  model = _rnn("lstm_gru", mask, stacked)()
  x = _ids(5, 6, 9, pad=mask)
  y = tf.constant([0, 1, 2, 0, 1])
  run_and_check(keras_loss(model), model, (x, y))


@pytest.mark.parametrize("mode", ["jit"])
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
                            L.EinsumDense("btd,dk->btk", output_shape=(3, 5), bias_axes="k"),
                            L.Flatten(), L.Dense(3)])
  x = tf.random.normal([5, 3, 4])
  y = tf.constant([0, 1, 2, 1, 0])
  run_and_check(keras_loss(model), model, (x, y))


@pytest.mark.parametrize("mode", ["eager", "jit"])
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


@pytest.mark.parametrize("mode", ["eager", "jit"])
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
  model, shape = _transpose_family()
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
    for m in range(2):
      s, nm = vectorize.clipped_gradient_sum(loss_fn, p, xb[4 * m:4 * m + 4],
                                             yb[4 * m:4 * m + 4], l2_norm_clip=0.5,
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
  lr, clip, b = 0.5, 1.5, 8
  model = _toy_model()
  x, y = _toy_data(b)
  before = [v.numpy().copy() for v in model.trainable_variables]
  lossobj = _loss_obj()

  def loss_fn(xi, yi):
    return lossobj(yi[None], model(xi[None]))

  rs, rn = ref_clipped(loss_fn, model, (tf.constant(x), tf.constant(y)), clip)
  assert np.sum(rn > clip) >= 2 and np.sum(rn < clip) >= 1, rn   # some clipped, some not
  losses = [float(loss_fn(tf.constant(x[i]), tf.constant(y[i]))) for i in range(b)]
  private = vectorize.PrivateModel(model, l2_norm_clip=clip, noise_multiplier=0.0, seed=0)
  private.compile(optimizer=keras.optimizers.SGD(lr), loss=_loss_obj())
  hist = private.fit(x, y, batch_size=b, epochs=1, shuffle=False, verbose=0)
  after = [v.numpy() for v in model.trainable_variables]
  for k, (w0, w1, s) in enumerate(zip(before, after, rs)):
    close(w1 - w0, -lr * s / b, rtol=1e-3, what=f"update of variable {k}")
  # fit reports the batch's mean loss before the step.
  np.testing.assert_allclose(hist.history["loss"][0], np.mean(losses), rtol=1e-5)


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


def test_private_model_noise_reproducible():
  """Noise > 0 and the same seed: two fresh runs end with identical weights (that the noise
  is there, of the right size and fresh each step, is the next test's)."""
  a, b = _noised_run(seed=7), _noised_run(seed=7)
  for wa, wb in zip(a, b):
    np.testing.assert_array_equal(wa, wb)



def test_private_model_noise_scale_and_fresh_per_step():
  """Recover the noise from the update: noise = -(b/lr) * delta - clipped_sum. Its standard
  deviation must be sigma * C, and two steps must not reuse the same noise."""
  lr, clip, sigma, b = 0.1, 0.5, 2.0, 4
  _seed(3)
  model = keras.Sequential([keras.Input((32,)), L.Dense(32, use_bias=False),
                            L.Dense(32, use_bias=False)])      # two 32x32 kernels
  rng = np.random.RandomState(3)
  x = rng.randn(2 * b, 32).astype("float32")
  y = rng.randn(2 * b, 32).astype("float32")
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
    parts = [(-(w1 - w0) * b / lr - s).ravel() for w0, w1, s in zip(before, after, rs)]
    corr = np.corrcoef(parts[0], parts[1])[0, 1]
    assert abs(corr) < 0.15, f"two variables of one shape got correlated noise ({corr:.3f})"
    noise = np.concatenate(parts)
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


# ----------------------------------------------------------------------------- more probes


def test_tied_embedding_and_output_projection():
  """Weight tying (a language model's embedding is also its output projection): one
  variable gets an embedding (rows at ids) gradient AND a matmul gradient."""
  rng = np.random.RandomState(12)
  emb = tf.Variable(rng.randn(7, 3).astype("float32"), name="emb")
  mix = tf.Variable(rng.randn(3, 3).astype("float32"), name="mix")
  x = _ids(6, 4, 7)
  y = tf.constant(rng.randint(0, 7, size=(6, 4)), tf.int32)

  def loss_fn(ids, targets):
    h = tf.nn.tanh(tf.matmul(tf.gather(emb, ids), mix))         # [t, 3]
    logits = tf.matmul(h, emb, transpose_b=True)                 # [t, 7]
    return sce(targets, logits)

  run_and_check(loss_fn, [emb, mix], (x, y))


def test_keras_tied_embedding_subclassed():
  class TiedLM(keras.Model):

    def __init__(self):
      super().__init__()
      self.emb = L.Embedding(8, 4)
      self.dense = L.Dense(4, activation="tanh")

    def call(self, ids):
      h = self.dense(self.emb(ids))
      return tf.matmul(h, self.emb.embeddings, transpose_b=True)

  _seed(12)
  model = TiedLM()
  model(tf.zeros([1, 5], tf.int32))
  x = _ids(5, 5, 8)
  y = tf.roll(x, 1, axis=1)
  run_and_check(keras_loss(model), model, (x, y))


def test_weight_decay_in_loss_raw():
  """L2 weight decay written into each example's loss: the weight's gradient is a matmul
  of the example plus 2*lambda*W, and the norm must include their cross term."""
  p = _mlp_params()
  x, y = _mlp_batch(6)

  def loss_fn(xi, yi):
    return _mlp_loss(p)(xi, yi) + 0.3 * tf.reduce_sum(tf.square(p["w1"])) + \
        0.2 * tf.reduce_sum(tf.square(p["w2"]))

  rs, rn = ref_clipped(loss_fn, p, (x, y), 0.8)
  _check_dict(vclip(loss_fn, p, (x, y), 0.8), rs, rn, p)


def test_zero_gradient_example_no_nan():
  """An example whose gradient is exactly zero (ReLU dead on a zero input, no bias): its
  clip factor is 1, and nothing may become NaN."""
  rng = np.random.RandomState(13)
  w = tf.Variable(rng.randn(3, 4).astype("float32"), name="w")
  v = tf.Variable(rng.randn(4).astype("float32"), name="v")
  x = tf.constant(np.concatenate([np.zeros([1, 3]), rng.randn(4, 3)]).astype("float32"))
  y = tf.constant(rng.randn(5).astype("float32"))

  def loss_fn(xi, yi):
    out = tf.reduce_sum(tf.nn.relu(tf.linalg.matvec(w, xi, transpose_a=True)) * v)
    return out * yi

  for mode in ("eager", "jit"):
    rs, rn = ref_clipped(loss_fn, [w, v], (x, y), 0.5)
    assert rn[0] == 0
    got = vclip(loss_fn, [w, v], (x, y), 0.5, mode)
    assert all(np.all(np.isfinite(_np(s))) for s in got[0]), got
    check_sums_norms(got, (rs, rn))


def test_dense_on_sequence_positions():
  _seed(14)
  model = keras.Sequential([keras.Input((5, 3)), L.Dense(4, activation="relu"),
                            L.TimeDistributed(L.Dense(2)), L.Flatten(), L.Dense(3)])
  x = tf.random.normal([6, 5, 3])
  y = tf.constant([0, 1, 2, 0, 1, 2])
  run_and_check(keras_loss(model), model, (x, y))


def test_text_transformer_block():
  """A transformer block over padded tokens: Embedding(mask_zero=True) -> causal
  self-attention, which also takes the padding mask from the embedding, -> residual +
  LayerNormalization -> GELU feed-forward -> residual + LayerNormalization -> pooled
  classifier."""
  _seed(41)
  inp = keras.Input((6,), dtype="int32")
  h = L.Embedding(9, 4, mask_zero=True)(inp)
  a = L.MultiHeadAttention(num_heads=2, key_dim=2)(h, h, use_causal_mask=True)
  h = L.LayerNormalization()(L.Add()([h, a]))
  f = L.Dense(4)(L.Dense(6, activation="gelu")(h))
  h = L.LayerNormalization()(L.Add()([h, f]))
  model = keras.Model(inp, L.Dense(3)(L.GlobalAveragePooling1D()(h)))
  x = _ids(5, 6, 9, pad=True)
  y = tf.constant([0, 1, 2, 0, 1])
  run_and_check(keras_loss(model), model, (x, y))


def test_sequence_tagging_masked_loss():
  """Per-token loss over padded tokens, averaged over the real ones."""
  _seed(15)
  model = keras.Sequential([keras.Input((6,), dtype="int32"), L.Embedding(9, 4),
                            L.Conv1D(4, 3, padding="same", activation="relu"), L.Dense(3)])
  x = _ids(6, 6, 9, pad=True)
  tags = tf.constant(np.random.RandomState(1).randint(0, 3, size=(6, 6)), tf.int32)

  def loss_fn(ids, t):
    logits = model(ids[None])[0]
    w = tf.cast(ids > 0, tf.float32)
    per = tf.nn.sparse_softmax_cross_entropy_with_logits(t, logits)
    return tf.reduce_sum(per * w) / tf.maximum(tf.reduce_sum(w), 1.0)

  run_and_check(loss_fn, model, (x, tags))


def test_conv3d():
  _seed(17)
  y = tf.constant([0, 1, 2, 0, 1])
  model = keras.Sequential([keras.Input((4, 4, 4, 1)), L.Conv3D(2, 2, strides=2), L.Flatten(),
                            L.Dense(3)])
  x = tf.random.normal([5, 4, 4, 4, 1])
  run_and_check(keras_loss(model), model, (x, y))


def test_variable_cast_and_sliced():
  """A float32 variable cast to float16 for compute (mixed precision by hand) and a
  variable of which only some rows are used."""
  rng = np.random.RandomState(18)
  w = tf.Variable(rng.randn(4, 3).astype("float32"), name="w")
  table = tf.Variable(rng.randn(6, 3).astype("float32"), name="table")
  x, y = _mlp_batch(5)

  def loss_fn(xi, yi):
    h = tf.cast(tf.matmul(tf.cast(xi[None], tf.float16), tf.cast(w, tf.float16)), tf.float32)
    h = h + tf.reduce_sum(table[1:3], 0)
    return sce(yi[None], h)

  run_and_check(loss_fn, [w, table], (x, y), rtol=1e-2)


def test_matvec_variable_on_left():
  rng = np.random.RandomState(19)
  w = tf.Variable(rng.randn(3, 4).astype("float32"), name="w")       # out, in
  x, y = _mlp_batch(6)

  def loss_fn(xi, yi):
    return sce(yi[None], tf.matmul(w, xi[:, None])[None, :, 0])

  run_and_check(loss_fn, [w], (x, y))


def test_loss_vector_shape_one():
  """A loss of shape [1] (what model(x[None]) with a per-example loss gives) is summed."""
  model = _toy_model()
  x, y = _toy_data(6)
  x, y = tf.constant(x), tf.constant(y)

  def loss_fn(xi, yi):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(yi[None], model(xi[None]))

  run_and_check(loss_fn, model, (x, y))


def test_return_norms_default_and_layer_as_variables():
  _seed(20)
  layer = L.Dense(3)
  layer.build((None, 4))
  x, y = _mlp_batch(5)

  def loss_fn(xi, yi):
    return sce(yi[None], layer(xi[None]))

  rs, _ = ref_clipped(loss_fn, layer, (x, y), 0.4)
  sums = vectorize.clipped_gradient_sum(loss_fn, layer, x, y, l2_norm_clip=0.4)
  assert isinstance(sums, list) and len(sums) == 2, sums
  for s, r in zip(sums, rs):
    close(s, r)


def test_private_model_adam_jit():
  """One step of Adam (epsilon large, so the step depends on the gradient's size, not only
  its sign), compiled for XLA: the optimizer must receive the averaged clipped gradient."""
  lr, clip, b = 0.05, 1.0, 6
  model = _toy_model(seed=21)
  x, y = _toy_data(b, seed=21)
  start = [v.numpy().copy() for v in model.trainable_variables]
  lossobj = _loss_obj()

  def loss_fn(xi, yi):
    return lossobj(yi[None], model(xi[None]))

  rs, rn = ref_clipped(loss_fn, model, (tf.constant(x), tf.constant(y)), clip)
  assert np.sum(rn > clip) >= 1 and np.sum(rn < clip) >= 1, rn
  ref_vars = [tf.Variable(w) for w in start]
  keras.optimizers.Adam(lr, epsilon=0.5).apply_gradients(
      zip([tf.constant(s / b, tf.float32) for s in rs], ref_vars))
  private = vectorize.PrivateModel(model, l2_norm_clip=clip, noise_multiplier=0.0, seed=0)
  private.compile(optimizer=keras.optimizers.Adam(lr, epsilon=0.5), loss=_loss_obj(),
                  jit_compile=True)
  private.fit(x, y, batch_size=b, epochs=1, shuffle=False, verbose=0)
  for k, (w0, v, r) in enumerate(zip(start, model.trainable_variables, ref_vars)):
    close(v.numpy() - w0, r.numpy() - w0, rtol=1e-3, what=f"update of variable {k}")


@pytest.mark.parametrize("steps_per_execution", [1, 2])
def test_private_model_partial_last_batch(steps_per_execution):
  """10 examples in batches of 4: steps of 4, 4 and 2 examples, each averaged over its own
  examples (noise 0), also with two steps per execution."""
  lr, clip = 0.3, 0.7
  model = _toy_model(seed=22)
  x, y = _toy_data(10, seed=22)
  lossobj = _loss_obj()

  def loss_fn(xi, yi):
    return lossobj(yi[None], model(xi[None]))

  ref_model = _toy_model(seed=22)
  ref_model.set_weights(model.get_weights())

  def ref_loss(xi, yi):
    return lossobj(yi[None], ref_model(xi[None]))

  for lo, hi in ((0, 4), (4, 8), (8, 10)):
    rs, _ = ref_clipped(ref_loss, ref_model, (tf.constant(x[lo:hi]), tf.constant(y[lo:hi])),
                        clip)
    for v, s in zip(ref_model.trainable_variables, rs):
      v.assign_sub(lr * s.astype("float32") / (hi - lo))
  private = vectorize.PrivateModel(model, l2_norm_clip=clip, noise_multiplier=0.0)
  private.compile(optimizer=keras.optimizers.SGD(lr), loss=_loss_obj(),
                  steps_per_execution=steps_per_execution)
  private.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
  for k, (v, r) in enumerate(zip(model.trainable_variables, ref_model.trainable_variables)):
    close(v.numpy(), r.numpy(), rtol=1e-4, what=f"variable {k}")


def test_private_model_tf_data_and_dict_inputs():
  inp_a, inp_b = keras.Input((2,), name="a"), keras.Input((2,), name="b")
  _seed(23)
  out = L.Dense(2)(L.Concatenate()([L.Dense(3, activation="tanh")(inp_a), inp_b]))
  model = keras.Model({"a": inp_a, "b": inp_b}, out)
  x, y = _toy_data(8, seed=23)
  feats = {"a": x[:, :2], "b": x[:, 2:]}
  lossobj = _loss_obj()

  def loss_fn(f, yi):
    return lossobj(yi[None], model({k: v[None] for k, v in f.items()}))

  before = [v.numpy().copy() for v in model.trainable_variables]
  rs, _ = ref_clipped(loss_fn, model, ({k: tf.constant(v) for k, v in feats.items()},
                                       tf.constant(y)), 0.5)
  ds = tf.data.Dataset.from_tensor_slices((feats, y)).batch(8)
  private = vectorize.PrivateModel(model, l2_norm_clip=0.5, noise_multiplier=0.0)
  private.compile(optimizer=keras.optimizers.SGD(0.2), loss=_loss_obj())
  private.fit(ds, epochs=1, shuffle=False, verbose=0)
  for k, (w0, v, s) in enumerate(zip(before, model.trainable_variables, rs)):
    close(v.numpy() - w0, -0.2 * s / 8, rtol=1e-3, what=f"update of variable {k}")


def test_weight_on_vector_and_on_sequence():
  """One weight applied to a single vector and to every position of a sequence in the
  same example (different numbers of positions for one variable)."""
  rng = np.random.RandomState(24)
  w = tf.Variable(rng.randn(3, 3).astype("float32") * 0.5, name="w")
  x = tf.constant(rng.randn(6, 4, 3).astype("float32"))
  q = tf.constant(rng.randn(6, 3).astype("float32"))
  y = tf.constant(rng.randint(0, 3, 6), tf.int32)

  def loss_fn(seq, query, yi):
    keys = tf.nn.tanh(tf.matmul(seq, w))                  # [t, 3]
    qv = tf.matmul(query[None], w)                        # [1, 3]
    att = tf.nn.softmax(tf.matmul(qv, keys, transpose_b=True))
    return sce(yi[None], tf.matmul(att, keys))

  run_and_check(loss_fn, [w], (x, q, y))


def test_broadcast_batch_matmul_and_quadratic_einsum():
  rng = np.random.RandomState(25)
  w = tf.Variable(rng.randn(3, 4).astype("float32") * 0.5, name="w")
  a = tf.Variable(rng.randn(3, 3).astype("float32") * 0.5, name="a")
  x = tf.constant(rng.randn(5, 2, 4, 3).astype("float32"))              # [b, h, t, d]
  y = tf.constant(rng.randn(5).astype("float32"))

  def loss_fn(xi, yi):
    h = tf.matmul(xi, w)                                                 # [h, t, 4] broadcast
    quad = tf.einsum("htd,de,hte->", xi, a, xi)                          # x^T A x
    return tf.square(tf.reduce_mean(tf.nn.tanh(h)) + 0.1 * quad - yi)

  run_and_check(loss_fn, [w, a], (x, y))


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_raw_rnn_scan_and_while(mode):
  """A hand-written Elman RNN over raw variables: with tf.scan, and with a tf.while_loop
  whose trip count is the example's own length."""
  rng = np.random.RandomState(26)
  wx = tf.Variable(rng.randn(2, 3).astype("float32") * 0.5, name="wx")
  wh = tf.Variable(rng.randn(3, 3).astype("float32") * 0.5, name="wh")
  out = tf.Variable(rng.randn(3).astype("float32"), name="out")
  x = tf.constant(rng.randn(5, 4, 2).astype("float32"))
  lengths = tf.constant([4, 1, 3, 2, 4], tf.int32)
  y = tf.constant(rng.randn(5).astype("float32"))

  def scan_loss(xi, li, yi):
    hs = tf.scan(lambda h, xt: tf.nn.tanh(tf.linalg.matvec(wx, xt, transpose_a=True) +
                                          tf.linalg.matvec(wh, h, transpose_a=True)),
                 xi, initializer=tf.zeros([3]))
    return tf.square(tf.reduce_sum(hs[-1] * out) - yi)

  def while_loss(xi, li, yi):
    def body(t, h):
      return t + 1, tf.nn.tanh(tf.linalg.matvec(wx, xi[t], transpose_a=True) +
                               tf.linalg.matvec(wh, h, transpose_a=True))
    _, h = tf.while_loop(lambda t, h: t < li, body, (0, tf.zeros([3])), maximum_iterations=4)
    return tf.square(tf.reduce_sum(h * out) - yi)

  # eagerly: a while loop of each example's own trip count; under XLA: tf.scan.
  run_and_check(while_loss if mode == "eager" else scan_loss, [wx, wh, out], (x, lengths, y),
                mode=mode)


def test_per_example_branch():
  """tf.cond on the example: different variables used per example."""
  rng = np.random.RandomState(27)
  w1 = tf.Variable(rng.randn(4, 3).astype("float32"), name="w1")
  w2 = tf.Variable(rng.randn(4, 3).astype("float32"), name="w2")
  x, y = _mlp_batch(6)

  def loss_fn(xi, yi):
    logits = tf.cond(xi[0] > 0, lambda: tf.matmul(xi[None], w1),
                     lambda: tf.matmul(xi[None], w2) * 2.0)
    return sce(yi[None], logits)

  run_and_check(loss_fn, [w1, w2], (x, y))


def test_frozen_backbone_fine_tuning():
  """DP fine-tuning: the backbone is frozen; only the head's variables are clipped, and
  the norm is over them alone. PrivateModel must leave the backbone untouched."""
  _seed(28)
  backbone = L.Dense(5, activation="relu")
  head = L.Dense(2)
  model = keras.Sequential([keras.Input((4,)), backbone, head])
  backbone.trainable = False
  x, y = _toy_data(6, seed=28)
  xt, yt = tf.constant(x), tf.constant(y)
  assert len(model.trainable_variables) == 2
  got, _ = run_and_check(keras_loss(model), model, (xt, yt))
  assert len(got[0]) == 2
  frozen = [w.numpy().copy() for w in backbone.weights]
  before = [v.numpy().copy() for v in model.trainable_variables]
  lossobj = _loss_obj()
  rs, _ = ref_clipped(lambda xi, yi: lossobj(yi[None], model(xi[None])), model, (xt, yt), 0.5)
  private = vectorize.PrivateModel(model, l2_norm_clip=0.5, noise_multiplier=0.0)
  private.compile(optimizer=keras.optimizers.SGD(0.3), loss=_loss_obj())
  private.fit(x, y, batch_size=6, shuffle=False, verbose=0)
  for w0, w in zip(frozen, backbone.weights):
    np.testing.assert_array_equal(w.numpy(), w0)
  for k, (w0, v, s) in enumerate(zip(before, model.trainable_variables, rs)):
    close(v.numpy() - w0, -0.3 * s / 6, rtol=1e-3, what=f"update of variable {k}")


def test_recommender_scalar_ids_shared_table():
  """A recommender: each example is a (user, item) pair of scalar ids looked up in ONE
  shared table (the same row twice when user == item), and a flat-stored weight reshaped."""
  rng = np.random.RandomState(29)
  table = tf.Variable(rng.randn(6, 3).astype("float32"), name="table")
  flat = tf.Variable(rng.randn(9).astype("float32") * 0.5, name="flat")
  users = tf.constant([0, 1, 2, 3, 3, 5], tf.int32)
  items = tf.constant([1, 1, 2, 4, 0, 5], tf.int32)
  rating = tf.constant(rng.randn(6).astype("float32"))

  def loss_fn(u, i, r):
    eu = tf.gather(table, u)
    ei = tf.nn.embedding_lookup(table, i)
    proj = tf.matmul(ei[None], tf.reshape(flat, [3, 3]))[0]
    return tf.square(tf.reduce_sum(eu * proj) - r)

  run_and_check(loss_fn, [table, flat], (users, items, rating))


def test_per_example_gradients_parallel_iterations():
  p = _mlp_params()
  x, y = _mlp_batch(7)
  loss_fn = _mlp_loss(p)
  ref = ref_per_example(loss_fn, p, (x, y))
  got = vectorize.per_example_gradients(loss_fn, p, x, y, parallel_iterations=3)
  for k, name in enumerate(sorted(p)):
    close(got[name], np.stack([r[k] for r in ref]), what=name)


def test_private_model_mixed_precision():
  """Under mixed_float16 the compiled LossScaleOptimizer scales the loss, the bound and
  the noise alike: with noise 0 the step is the unscaled clipped mean, to float16 accuracy."""
  keras.mixed_precision.set_global_policy("mixed_float16")
  try:
    model = _toy_model(seed=31)
    x, y = _toy_data(6, seed=31)
    before = [v.numpy().copy() for v in model.trainable_variables]
    lossobj = _loss_obj()

    def loss_fn(xi, yi):
      return tf.cast(lossobj(yi[None], model(xi[None])), tf.float32)

    rs, rn = ref_clipped(loss_fn, model, (tf.constant(x), tf.constant(y)), 0.5)
    private = vectorize.PrivateModel(model, l2_norm_clip=0.5, noise_multiplier=0.0)
    private.compile(optimizer=keras.optimizers.SGD(0.3), loss=_loss_obj())
    private.fit(x, y, batch_size=6, shuffle=False, verbose=0)
    for k, (w0, v, s) in enumerate(zip(before, model.trainable_variables, rs)):
      np.testing.assert_allclose(v.numpy() - w0, -0.3 * s / 6, rtol=2e-2,
                                 atol=2e-3 * np.max(np.abs(s)) * 0.3 / 6 + 1e-6,
                                 err_msg=f"variable {k}")
  finally:
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("mode", ["jit", "dynamic"])
def test_embedding_repeated_ids_modes(mode):
  _seed(32)
  model = keras.Sequential([keras.Input((5,), dtype="int32"), L.Embedding(7, 3),
                            L.GlobalAveragePooling1D(), L.Dense(3)])
  x = _ids(6, 5, 7)
  y = tf.constant([0, 1, 2, 0, 1, 2])
  run_and_check(keras_loss(model), model, (x, y), mode=mode)


@pytest.mark.parametrize("positions,width", [(2, 12), (12, 2)], ids=["gram", "materialized"])
def test_dense_gram_and_materialized_regimes(positions, width):
  """Few positions and wide layers (the Gram form of the norm is cheaper) and many positions
  of narrow layers (the gradient itself is cheaper): both must give the true norm."""
  _seed(33)
  model = keras.Sequential([keras.Input((positions, width)), L.Dense(width, activation="tanh"),
                            L.Dense(width), L.Flatten(), L.Dense(3)])
  x = tf.random.normal([5, positions, width])
  y = tf.constant([0, 1, 2, 0, 1])
  run_and_check(keras_loss(model), model, (x, y))


def _columns_problem():
  rng = np.random.RandomState(34)
  table = tf.Variable(rng.randn(3, 6).astype("float32"), name="table")
  w = tf.Variable(rng.randn(3, 2).astype("float32"), name="w")
  ids = tf.constant([[0, 1], [5, 5], [2, 3], [1, 0], [4, 4]], tf.int32)
  y = tf.constant([0, 1, 1, 0, 1], tf.int32)

  def loss_fn(idx, yi):
    h = tf.reduce_sum(tf.gather(table, idx, axis=1), axis=1)        # [3]
    logits = tf.matmul(h[None], w)
    if yi > 0:                     # a Python `if` on a tensor: autograph makes it a tf.cond
      loss = sce(yi[None], logits)
    else:
      loss = 2.0 * sce(yi[None], logits)
    return loss

  return [table, w], (ids, y), loss_fn


def test_gather_columns_and_autograph_if():
  """A table read by columns (tf.gather on axis 1), and a loss with a Python `if` on a
  tensor in a tf.function-decorated loss_fn (vectorize sees it first)."""
  variables, batch, loss_fn = _columns_problem()
  loss_fn = tf.function(loss_fn)
  got = vclip(loss_fn, variables, batch, 0.7)
  check_sums_norms(got, ref_clipped(loss_fn, variables, batch, 0.7))


def test_tf_function_loss_differentiated_eagerly_first():
  variables, batch, loss_fn = _columns_problem()
  loss_fn = tf.function(loss_fn)
  ref = ref_clipped(loss_fn, variables, batch, 0.7)       # the tape sees the function first
  check_sums_norms(vclip(loss_fn, variables, batch, 0.7), ref)


def test_tf_function_differentiated_first_and_its_python_function_agree():
  """Both the differentiated tf.function (its conditional now outputs Optionals) and its
  undecorated function give the loop's clipped sums."""
  variables, batch, loss_fn = _columns_problem()
  loss_fn = tf.function(loss_fn)
  ref = ref_clipped(loss_fn, variables, batch, 0.7)
  check_sums_norms(vclip(loss_fn, variables, batch, 0.7), ref)
  check_sums_norms(vclip(loss_fn.python_function, variables, batch, 0.7), ref)


def test_has_aux_without_norms_order():
  p = _mlp_params()
  x, y = _mlp_batch(4)

  def loss_fn(xi, yi):
    loss = _mlp_loss(p)(xi, yi)
    return loss, loss * 2.0

  rs, _ = ref_clipped(lambda a, b: loss_fn(a, b)[0], p, (x, y), 0.5)
  out = vectorize.clipped_gradient_sum(loss_fn, p, x, y, l2_norm_clip=0.5, has_aux=True)
  assert len(out) == 2
  sums, aux = out
  for k, name in enumerate(sorted(p)):
    close(sums[name], rs[k], what=name)
  close(aux, [2.0 * float(_mlp_loss(p)(x[i], y[i])) for i in range(4)], what="aux")


def test_per_example_gradients_embedding_and_lstm():
  _seed(35)
  model = _rnn("lstm", mask=False, stacked=False)()
  x = _ids(4, 6, 9)
  y = tf.constant([0, 1, 2, 0])
  loss_fn = keras_loss(model)
  ref = ref_per_example(loss_fn, model, (x, y))
  got = vectorize.per_example_gradients(loss_fn, model, x, y)
  for k, g in enumerate(got):
    close(g, np.stack([r[k] for r in ref]), what=f"variable {k}")


def test_private_model_activity_regularizer_and_multi_output():
  """Each example's loss is its own: an activity regularizer of its activations, and a
  weighted sum of two heads' losses."""
  _seed(36)
  inp = keras.Input((4,))
  h = L.Dense(3, activation="tanh", activity_regularizer=keras.regularizers.L2(0.05))(inp)
  model = keras.Model(inp, {"c": L.Dense(2, name="c")(h), "r": L.Dense(1, name="r")(h)})
  x, y = _toy_data(6, seed=36)
  t = x[:, 1:2] * 0.5
  before = [v.numpy().copy() for v in model.trainable_variables]
  ce, mse = _loss_obj(), keras.losses.MeanSquaredError()

  def loss_fn(xi, yi, ti):
    out = model(xi[None])
    return ce(yi[None], out["c"]) + 0.5 * mse(ti[None], out["r"]) + tf.add_n(model.losses)

  rs, rn = ref_clipped(loss_fn, model, (tf.constant(x), tf.constant(y), tf.constant(t)), 0.4)
  private = vectorize.PrivateModel(model, l2_norm_clip=0.4, noise_multiplier=0.0)
  private.compile(optimizer=keras.optimizers.SGD(0.3),
                  loss={"c": _loss_obj(), "r": keras.losses.MeanSquaredError()},
                  loss_weights={"c": 1.0, "r": 0.5})
  private.fit(x, {"c": y, "r": t}, batch_size=6, shuffle=False, verbose=0)
  for k, (w0, v, s) in enumerate(zip(before, model.trainable_variables, rs)):
    close(v.numpy() - w0, -0.3 * s / 6, rtol=1e-3, what=f"update of variable {k}")


def test_private_model_unbuilt_sequential():
  _seed(37)
  model = keras.Sequential([L.Dense(3, activation="tanh"), L.Dense(2)])
  x, y = _toy_data(8, seed=37)
  private = vectorize.PrivateModel(model, l2_norm_clip=0.5, noise_multiplier=0.0)
  private.compile(optimizer=keras.optimizers.SGD(0.3), loss=_loss_obj())
  private.fit(x, y, batch_size=8, shuffle=False, verbose=0)
  assert len(model.trainable_variables) == 4


RAGGED_MSG = ("clipped_gradient_sum takes dense tensors as batch elements; got a RaggedTensor. "
              "Pad it to a dense tensor")


def _bag_of_words():
  rng = np.random.RandomState(38)
  emb = tf.Variable(rng.randn(7, 3).astype("float32"), name="emb")
  w = tf.Variable(rng.randn(3, 2).astype("float32"), name="w")
  rows = [[1, 2, 2], [3], [4, 5, 6, 1], [2, 2]]
  y = tf.constant([0, 1, 0, 1])

  def loss_fn(ids, yi):
    h = tf.reduce_mean(tf.gather(emb, ids), 0)
    return sce(yi[None], tf.matmul(h[None], w))

  return emb, w, rows, y, loss_fn


def test_ragged_refusal_is_clear_and_its_fix_is_right():
  emb, w, rows, y, loss_fn = _bag_of_words()
  with pytest.raises(TypeError) as err:
    vectorize.clipped_gradient_sum(loss_fn, [emb, w], tf.ragged.constant(rows), y,
                                   l2_norm_clip=0.5)
  assert RAGGED_MSG in str(err.value) and "x[:length]" in str(err.value)
  # The fix the message gives: pad, pass lengths, slice in loss_fn.
  padded = tf.ragged.constant(rows).to_tensor()
  lengths = tf.constant([len(r) for r in rows], tf.int32)
  ref_sums = [np.zeros([7, 3]), np.zeros([3, 2])]
  ref_norms = []
  for i, r in enumerate(rows):
    with tf.GradientTape() as tape:
      loss = loss_fn(tf.constant(r, tf.int32), y[i])
    g = [_np(t).astype(np.float64) for t in tape.gradient(loss, [emb, w])]
    nrm = math.sqrt(sum(float(np.sum(t * t)) for t in g))
    ref_norms.append(nrm)
    for k in range(2):
      ref_sums[k] += g[k] * min(1.0, 0.5 / nrm)
  got = vectorize.clipped_gradient_sum(lambda ids, n, yi: loss_fn(ids[:n], yi), [emb, w],
                                       padded, lengths, y, l2_norm_clip=0.5, return_norms=True)
  check_sums_norms(got, (ref_sums, np.array(ref_norms)))


@pytest.mark.xfail(strict=True, raises=TypeError, reason=(
    "clipped_gradient_sum refuses a RaggedTensor batch (variable-length token lists, the "
    "usual DP-NLP input) with TypeError 'takes dense tensors as batch elements; got a "
    "RaggedTensor. Pad it ...', although vectorized_map accepts ragged elems of ragged rank "
    "1 and gives loss_fn each row as a tensor"))
def test_ragged_batch_accepted():
  emb, w, rows, y, loss_fn = _bag_of_words()
  got = vectorize.clipped_gradient_sum(loss_fn, [emb, w], tf.ragged.constant(rows), y,
                                       l2_norm_clip=0.5, return_norms=True)
  batch = ([tf.constant(r, tf.int32) for r in rows], y)
  ref_sums = [np.zeros([7, 3]), np.zeros([3, 2])]
  norms = []
  for i in range(4):
    with tf.GradientTape() as tape:
      loss = loss_fn(batch[0][i], y[i])
    g = [_np(t).astype(np.float64) for t in tape.gradient(loss, [emb, w])]
    nrm = math.sqrt(sum(float(np.sum(t * t)) for t in g))
    norms.append(nrm)
    for k in range(2):
      ref_sums[k] += g[k] * min(1.0, 0.5 / nrm)
  check_sums_norms(got, (ref_sums, np.array(norms)))


def test_sparse_refusal_message_names_sparse_fix():
  w = tf.Variable(tf.ones([3, 2]))
  st = tf.sparse.from_dense(tf.constant([[1., 0, 2], [0, 0, 3]]))
  with pytest.raises(TypeError) as err:
    vectorize.clipped_gradient_sum(lambda s: tf.reduce_sum(
        tf.matmul(tf.sparse.to_dense(s)[None], w)), [w], st, l2_norm_clip=1.0)
  msg = str(err.value)
  assert "SparseTensor" in msg
  assert "RaggedTensor" not in msg and "to_dense" in msg, msg


def test_bad_arguments_are_clear():
  w = tf.Variable(tf.ones([3, 2]))
  x, y = tf.ones([4, 3]), tf.constant([0, 1, 0, 1])

  def loss_fn(a, b):
    return sce(b[None], tf.matmul(a[None], w))

  for bad in (0.0, -1.0):
    with pytest.raises(ValueError, match="l2_norm_clip > 0"):
      vectorize.clipped_gradient_sum(loss_fn, [w], x, y, l2_norm_clip=bad)
  with pytest.raises(ValueError, match=r"leading dimension.*\[3, 4\]|\[4, 3\]"):
    vectorize.clipped_gradient_sum(loss_fn, [w], x, y[:3], l2_norm_clip=1.0)
  with pytest.raises(ValueError, match="no variables"):
    vectorize.clipped_gradient_sum(loss_fn, [], x, y, l2_norm_clip=1.0)
  model = _toy_model()
  private = vectorize.PrivateModel(model, l2_norm_clip=1.0, noise_multiplier=0.0)
  private.compile(optimizer="sgd", loss=_loss_obj())
  xx, yy = _toy_data(8)
  with pytest.raises(ValueError, match="class_weight"):
    private.fit(xx, yy, class_weight={0: 1.0, 1: 2.0}, verbose=0)


def test_dropout_masks_differ_per_example():
  """Dropout in training mode inside loss_fn: each example draws its own mask, as the loop
  would (identical inputs must not get identical masks)."""
  _seed(39)
  drop, dense = L.Dropout(0.5), L.Dense(2)
  dense.build((None, 64))
  x = tf.ones([4, 64])
  y = tf.constant([0, 1, 0, 1])

  def loss_fn(xi, yi):
    h = drop(xi[None], training=True)
    return sce(yi[None], dense(h)), h[0]

  sums, norms, h = vectorize.clipped_gradient_sum(loss_fn, dense, x, y, l2_norm_clip=1.0,
                                                  return_norms=True, has_aux=True)
  h = h.numpy()
  assert set(np.unique(h)) <= {0.0, 2.0}
  assert not any(np.array_equal(h[0], h[i]) for i in range(1, 4)), "masks shared"
  # The norms are the gradients of the masks drawn: recompute them from the aux masks.
  for i in range(4):
    with tf.GradientTape() as tape:
      loss = sce(y[i][None], dense(tf.constant(h[i])[None]))
    g = tape.gradient(loss, dense.trainable_variables)
    np.testing.assert_allclose(norms[i], math.sqrt(sum(float(tf.reduce_sum(t * t)) for t in g)),
                               rtol=1e-4)


def test_poisson_sampled_batch_sizes_one_trace():
  """Poisson sampling gives a different batch size every step, sometimes 0: one
  tf.function with a [None] signature serves them all."""
  p = _mlp_params()
  loss_fn = _mlp_loss(p)
  x_all, y_all = _mlp_batch(12, seed=40)
  traces = []

  @tf.function(input_signature=[tf.TensorSpec([None, 4]), tf.TensorSpec([None], tf.int32)])
  def step(xb, yb):
    traces.append(1)
    return vectorize.clipped_gradient_sum(loss_fn, p, xb, yb, l2_norm_clip=0.6,
                                          return_norms=True)

  rng = np.random.RandomState(40)
  for size in (3, 0, 7, 1, 5):
    pick = np.sort(rng.choice(12, size, replace=False)).astype("int32")
    xb, yb = tf.gather(x_all, pick), tf.gather(y_all, pick)
    sums, norms = step(xb, yb)
    assert tuple(norms.shape) == (size,)
    if size == 0:
      for k, v in p.items():
        close(sums[k], np.zeros(v.shape), what=k)
      continue
    rs, rn = ref_clipped(loss_fn, p, (xb, yb), 0.6)
    _check_dict((sums, norms), rs, rn, p)
  assert len(traces) == 1, f"{len(traces)} traces"


# ----------------------------------------------------------------------------- schedules


def _smoothed_loss(p, get_smoothing):
  def loss_fn(xi, yi):
    h = tf.nn.tanh(tf.matmul(xi[None], p["w1"]) + p["b1"])
    logits = tf.matmul(h, p["w2"]) + p["b2"]
    s = get_smoothing()
    target = tf.one_hot(yi[None], 3) * (1.0 - s) + s / 3.0
    return tf.reduce_sum(tf.nn.softmax_cross_entropy_with_logits(target, logits))
  return loss_fn


def test_schedule_in_global_is_followed():
  """A label-smoothing schedule read from a rebound module global: each eager call must
  use the current value, as the loop does."""
  global _SMOOTHING
  p = _mlp_params()
  x, y = _mlp_batch(5)
  global_loss = _smoothed_loss(p, lambda: _SMOOTHING)
  for s in (0.0, 0.3):
    _SMOOTHING = s
    rs, rn = ref_clipped(global_loss, p, (x, y), 0.5)
    _check_dict(vclip(global_loss, p, (x, y), 0.5), rs, rn, p)


_SMOOTHING = 0.0


def test_schedule_in_config_dict_is_followed():
  p = _mlp_params()
  x, y = _mlp_batch(5)
  cfg = {"smoothing": 0.0}
  loss_fn = _smoothed_loss(p, lambda: cfg["smoothing"])
  for s in (0.0, 0.3):
    cfg["smoothing"] = s
    rs, rn = ref_clipped(loss_fn, p, (x, y), 0.5)
    _check_dict(vclip(loss_fn, p, (x, y), 0.5), rs, rn, p)


def test_tensor_clip_bound_must_be_positive():
  p = _mlp_params()
  x, y = _mlp_batch(4)
  loss_fn = _mlp_loss(p)
  with pytest.raises((ValueError, tf.errors.InvalidArgumentError)):
    vectorize.clipped_gradient_sum(loss_fn, p, x, y, l2_norm_clip=tf.constant(-1.0))
  step = tf.function(lambda a, b, c: vectorize.clipped_gradient_sum(loss_fn, p, a, b,
                                                                    l2_norm_clip=c))
  with pytest.raises(tf.errors.InvalidArgumentError):
    step(x, y, tf.constant(-1.0))


def test_python_list_labels_error_is_clear():
  p = _mlp_params()
  x, _ = _mlp_batch(4)
  with pytest.raises(ValueError) as err:
    vectorize.clipped_gradient_sum(_mlp_loss(p), p, x, [0, 1, 2, 0], l2_norm_clip=1.0)
  msg = str(err.value)
  assert "args_0_1" not in msg, msg
