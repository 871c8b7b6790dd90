"""Users, round 7: matrix products with batch dims of one (or several) inside the body,
Keras attention/dense layers on a per-example batch of one, and tf.while_loops of
per-example trip counts carrying growing values, TensorArrays, ragged reads and variable
updates. Every program is checked against a Python loop over the examples, in the modes
eager, tf.function, tf.function(jit_compile=True) and a run-time n.

Self-contained: only the public API (README) is used.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf
import keras

import vectorize

RNG = np.random.default_rng(7)


NMAX = 128

# ----------------------------------------------------------------------------------------
# harness
# ----------------------------------------------------------------------------------------

TOL = {
    tf.float32: dict(rtol=2e-4, atol=2e-4),
    tf.float64: dict(rtol=1e-10, atol=1e-10),
    tf.bfloat16: dict(rtol=3e-2, atol=3e-2),
    tf.float16: dict(rtol=3e-3, atol=3e-3),
    tf.complex64: dict(rtol=2e-5, atol=2e-5),
}


def _np(t):
  if isinstance(t, tf.Tensor) and t.dtype == tf.bfloat16:
    return tf.cast(t, tf.float32).numpy()
  if isinstance(t, (tf.Tensor, tf.Variable)):
    return t.numpy()
  return np.asarray(t)


def _tol(dtype):
  return TOL.get(tf.as_dtype(dtype), dict(rtol=0, atol=0))


def loop_reference(body, n, fn_mode=False):
  """The per-iteration values of body(i) for i < n, each a nested structure of numpy."""
  f = tf.function(body) if fn_mode else body
  return [tf.nest.map_structure(lambda t: t, f(tf.constant(i, tf.int32))) for i in range(n)]


def assert_leaf(got, wants, dtype, example_shape=None, name=""):
  tol = _tol(dtype)
  n = len(wants)
  shapes = {tuple(np.shape(_np(w))) for w in wants}
  if len(shapes) <= 1:
    if isinstance(got, tf.RaggedTensor):
      # a ragged result with uniform rows is still acceptable only if equal when densified
      got = got.to_tensor()
    g = _np(got)
    if n == 0:
      assert g.shape[0] == 0, (name, g.shape)
      if example_shape is not None:
        assert tuple(g.shape[1:]) == tuple(example_shape), (name, g.shape, example_shape)
      return
    w = np.stack([_np(x) for x in wants])
    assert g.shape == w.shape, (name, g.shape, w.shape)
    if g.dtype.kind in "fc":
      np.testing.assert_allclose(g, w, err_msg=name, **tol)
    else:
      np.testing.assert_array_equal(g, w, err_msg=name)
  else:
    assert isinstance(got, tf.RaggedTensor), (name, type(got), shapes)
    rows = got.to_list() if got.dtype != tf.bfloat16 else tf.cast(got, tf.float32).to_list()
    assert len(rows) == n, (name, len(rows), n)
    for k, (r, w) in enumerate(zip(rows, wants)):
      w = _np(w)
      r = np.asarray(r, dtype=w.dtype if w.dtype != object else object)
      assert r.shape == w.shape, (name, k, r.shape, w.shape)
      if w.dtype.kind in "fc":
        np.testing.assert_allclose(r, w, err_msg=f"{name} row {k}", **tol)
      else:
        np.testing.assert_array_equal(r, w, err_msg=f"{name} row {k}")


def assert_matches(got, wants, example=None):
  """got: pfor's result; wants: list of per-iteration structures; example: body(0) (for n=0)."""
  flat_got = tf.nest.flatten(got, expand_composites=False)
  flat_wants = [tf.nest.flatten(w) for w in wants]
  flat_ex = tf.nest.flatten(example) if example is not None else None
  for j, g in enumerate(flat_got):
    ws = [fw[j] for fw in flat_wants]
    ex = flat_ex[j] if flat_ex is not None else None
    dtype = g.dtype
    assert_leaf(g, ws, dtype, None if ex is None else np.shape(_np(ex)), name=f"output {j}")


def run_pfor(body, n, mode):
  if mode == "eager":
    return vectorize.pfor(body, n)
  if mode == "function":
    return tf.function(lambda: vectorize.pfor(body, n))()
  if mode == "jit":
    return tf.function(lambda: vectorize.pfor(body, n), jit_compile=True)()
  if mode == "runtime_n":
    f = tf.function(lambda k: vectorize.pfor(body, k),
                    input_signature=[tf.TensorSpec([], tf.int32)])
    return f(tf.constant(n, tf.int32))
  raise ValueError(mode)


def check(body, n, mode, ref_fn_mode=False):
  wants = loop_reference(body, n, fn_mode=ref_fn_mode)
  example = body(tf.constant(0, tf.int32)) if n == 0 else None
  got = run_pfor(body, n, mode)
  assert_matches(got, wants, example)
  return got, wants


# No "function" form here: eager and run-time n already trace the conversion in a graph.
MODES = ["eager", "jit", "runtime_n"]
NOJIT = ["eager", "function", "runtime_n"]
# to keep the file's run time short, most programs run in two of the four modes, alternating
A = ["eager", "jit"]
B = ["function", "runtime_n"]
DTYPE_MODES = [(tf.float32, "eager"), (tf.float32, "function"), (tf.bfloat16, "jit"),
               (tf.float64, "runtime_n")]
N_MODES = [(0, "eager"), (1, "runtime_n"), (3, "function"), (16, "jit")]


def xfail_if(cond, reason):
  return pytest.mark.xfail(cond, strict=True, reason=reason) if cond else []


def cast(a, dtype):
  return tf.constant(np.asarray(a, np.float64), dtype=tf.float64) if dtype == tf.float64 \
      else tf.cast(tf.constant(np.asarray(a, np.float32)), dtype)


# ----------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------

X_MK = RNG.normal(size=[NMAX, 2, 4])          # per example [m=2, k=4]
W_1KP = RNG.normal(size=[1, 4, 3])            # [1, k, p]
B_1K = RNG.normal(size=[NMAX, 1, 4])          # per example [1, k]
LENGTHS = RNG.integers(1, 6, size=[NMAX]).astype(np.int32)
SEQ = RNG.normal(size=[NMAX, 5, 8]).astype(np.float32)    # [T=5, d=8]

# ----------------------------------------------------------------------------------------
# 1. matrix products with batch dims of one
# ----------------------------------------------------------------------------------------

DTYPES = [tf.float32, tf.bfloat16, tf.float64]


@pytest.mark.parametrize("dtype, n", [(tf.float32, 0), (tf.float32, 1), (tf.float32, 128), (tf.bfloat16, 3), (tf.float64, 16)], ids=str)
def test_rank2_row_times_rank3_weight(dtype, n):
  """x[i][None] @ W with W [1, k, p]: per example [1, m, k] @ [1, k, p] -> [1, m, p]."""
  x, w = cast(X_MK, dtype), cast(W_1KP, dtype)

  def body(i):
    return x[i][None] @ w

  check(body, n, "eager")


@pytest.mark.parametrize("dtype, mode", DTYPE_MODES, ids=str)
def test_rank2_row_times_rank3_weight_modes(dtype, mode):
  x, w = cast(X_MK, dtype), cast(W_1KP, dtype)

  def body(i):
    return tf.nn.relu(x[i][None] @ w) + 1

  check(body, 3, mode)


@pytest.mark.parametrize("dtype, mode", DTYPE_MODES, ids=str)
def test_matmul_transpose_b_both_stacked(dtype, mode):
  """tf.matmul(a, b, transpose_b=True), a [1, m, k] and b [1, 1, k], both per example."""
  a, b = cast(X_MK, dtype), cast(B_1K, dtype)

  def body(i):
    return tf.matmul(a[i][None], b[i][None], transpose_b=True)   # [1, m, 1]

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_matmul_transpose_b_invariant_b(mode):
  a = cast(X_MK, tf.float32)
  b = cast(B_1K[:1], tf.float32)                  # [1, 1, k], the same for every example

  def body(i):
    return tf.matmul(a[i][None], b, transpose_b=True)

  check(body, 3, mode)


@pytest.mark.parametrize("mode", ["eager"])
def test_matmul_transpose_a_adjoint_b(mode):
  a = cast(X_MK, tf.float32)                     # [1, m, k] -> transpose_a: [1, k, m]
  b = cast(RNG.normal(size=[NMAX, 1, 3, 2]), tf.float32)

  def body(i):
    return tf.matmul(a[i][None], b[i], transpose_a=True, adjoint_b=True)   # [1, k, 3]

  check(body, 3, mode)


@pytest.mark.parametrize("mode", ["jit"])
def test_several_batch_rows_times_rank3_weight(mode):
  """The per-example value has a batch dim of 3: [3, m, k] @ [1, k, p]."""
  x = cast(RNG.normal(size=[NMAX, 3, 2, 4]), tf.float32)
  w = cast(W_1KP, tf.float32)

  def body(i):
    return x[i] @ w

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["function"])
def test_per_example_weight_matmul(mode):
  x = cast(X_MK, tf.float32)
  ws = cast(RNG.normal(size=[NMAX, 4, 3]), tf.float32)

  def body(i):
    return x[i][None] @ ws[i][None]                 # [1, m, k] @ [1, k, p]

  check(body, 16, mode)


@pytest.mark.parametrize("mode", MODES)
def test_rank4_batch_one_one(mode):
  """[1, 1, m, k] @ [1, 1, k, p] in the body (same batch dims on both sides)."""
  x = cast(X_MK, tf.float32)
  w = cast(W_1KP, tf.float32)

  def body(i):
    return tf.matmul(x[i][None, None], w[None])

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_matvec_batch_one(mode):
  x = cast(X_MK, tf.float32)
  v = cast(RNG.normal(size=[NMAX, 1, 4]), tf.float32)

  def body(i):
    return tf.linalg.matvec(x[i][None], v[i])     # [1, m, k] . [1, k] -> [1, m]

  check(body, 3, mode)


@pytest.mark.parametrize("dtype, mode", [(tf.float32, "eager"), (tf.float32, "jit"), (tf.bfloat16, "runtime_n"), (tf.float64, "function")], ids=str)
def test_einsum_ellipsis_weight(dtype, mode):
  x = cast(SEQ, dtype)
  w = cast(RNG.normal(size=[8, 6]), dtype)

  def body(i):
    return tf.einsum("...td,de->...te", x[i][None], w)

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["eager"])
def test_einsum_ellipsis_scores_both_stacked(mode):
  x = cast(SEQ, tf.float32)

  def body(i):
    q = x[i][None]
    k = x[(i + 1) % NMAX][None] * 0.5
    return tf.nn.softmax(tf.einsum("...qd,...kd->...qk", q, k))

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["jit"])
def test_einsum_broadcast_batch_dims(mode):
  """'...' broadcasts a per-example [2, T, d] against an invariant [1, d, e]."""
  x = cast(RNG.normal(size=[NMAX, 2, 3, 4]), tf.float32)
  w = cast(RNG.normal(size=[1, 4, 5]), tf.float32)

  def body(i):
    return tf.einsum("...ij,...jk->...ik", x[i], w)

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["jit"])
def test_einsum_bij_bjk(mode):
  x = cast(X_MK, tf.float32)
  w = cast(W_1KP, tf.float32)

  def body(i):
    return tf.einsum("bij,bjk->bik", x[i][None], w)

  check(body, 3, mode)


@pytest.mark.parametrize("mode", ["runtime_n", "jit"])
def test_self_attention_by_hand(mode):
  x = cast(SEQ, tf.float32)
  wq, wk, wv = (cast(RNG.normal(size=[1, 8, 8]) / 3, tf.float32) for _ in range(3))

  def body(i):
    h = x[i][None]                                   # [1, T, d]
    q, k, v = h @ wq, h @ wk, h @ wv
    s = tf.matmul(q, k, transpose_b=True) / np.sqrt(8.0)
    return tf.matmul(tf.nn.softmax(s), v)

  check(body, 16, mode)


# Keras layers on a per-example batch of one ---------------------------------------------

def _dense():
  keras.utils.set_random_seed(1)
  layer = keras.layers.Dense(6, activation="tanh")
  layer.build((None, 5, 8))
  return layer


def _mha():
  keras.utils.set_random_seed(2)
  layer = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
  layer(tf.zeros([1, 5, 8]), tf.zeros([1, 5, 8]))
  return layer


@pytest.mark.parametrize("n, mode", [(0, "function"), (16, "jit")])
def test_keras_dense_on_batch_of_one(n, mode):
  layer = _dense()
  x = cast(SEQ, tf.float32)

  def body(i):
    return layer(x[i][None])

  check(body, n, mode)


@pytest.mark.parametrize("n, mode", [(0, "eager"), (16, "jit")])
def test_keras_mha_self_attention(n, mode):
  layer = _mha()
  x = cast(SEQ, tf.float32)

  def body(i):
    h = x[i][None]
    return layer(h, h)

  check(body, n, mode)


@pytest.mark.parametrize("mode", ["function"])
def test_keras_mha_padding_mask_and_scores(mode):
  layer = _mha()
  x = cast(SEQ, tf.float32)
  lengths = tf.constant(LENGTHS)

  def body(i):
    h = x[i][None]
    valid = tf.sequence_mask(lengths[i], 5)          # [T]
    mask = valid[None, :, None] & valid[None, None, :]
    out, scores = layer(h, h, attention_mask=mask, return_attention_scores=True)
    return out * tf.cast(valid, tf.float32)[None, :, None], scores

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_keras_attention_layer(mode):
  keras.utils.set_random_seed(3)
  layer = keras.layers.Attention(use_scale=True)
  x = cast(SEQ, tf.float32)
  layer([tf.zeros([1, 5, 8]), tf.zeros([1, 5, 8])])

  def body(i):
    q = x[i][None]
    v = x[(i + 3) % NMAX][None]
    return layer([q, v])

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["eager"])
def test_keras_attention_causal_with_mask(mode):
  layer = keras.layers.Attention()
  x = cast(SEQ, tf.float32)
  lengths = tf.constant(LENGTHS)

  def body(i):
    q = x[i][None]
    vmask = tf.sequence_mask(lengths[i], 5)[None]
    return layer([q, q], mask=[None, vmask], use_causal_mask=True)

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["jit"])
def test_keras_dense_gradient_in_body(mode):
  layer = _dense()
  x = cast(SEQ, tf.float32)

  def body(i):
    with tf.GradientTape() as tape:
      y = layer(x[i][None])
      loss = tf.reduce_mean(y ** 2)
    gk, gb = tape.gradient(loss, [layer.kernel, layer.bias])
    return loss, gk, gb

  check(body, 16, mode)


@pytest.mark.parametrize("dtype, mode", [(tf.float32, "eager"), (tf.float32, "jit"), (tf.bfloat16, "function"), (tf.float64, "runtime_n")], ids=str)
def test_weight_gradient_rank3_matmul_in_body(mode, dtype):
  x = cast(X_MK, dtype)
  w = tf.Variable(cast(W_1KP, dtype))

  def body(i):
    with tf.GradientTape() as tape:
      y = x[i][None] @ w
      loss = tf.reduce_sum(y * y)
    return tape.gradient(loss, w)

  check(body, 16, mode)


@pytest.mark.parametrize("n", [2])
def test_per_example_gradients_transformer_block(n):
  keras.utils.set_random_seed(4)
  inp = keras.Input((5, 8))
  h = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)(inp, inp)
  h = keras.layers.LayerNormalization()(h + inp)
  h = keras.layers.Dense(3)(keras.layers.GlobalAveragePooling1D()(h))
  model = keras.Model(inp, h)
  x = tf.constant(SEQ)
  y = tf.constant(RNG.integers(0, 3, size=[NMAX]).astype(np.int32))

  def loss_fn(xe, ye):
    logits = model(xe[None])[0]
    return tf.nn.sparse_softmax_cross_entropy_with_logits(ye, logits)

  got = vectorize.per_example_gradients(loss_fn, model, x[:n], y[:n])
  for j in range(n):
    with tf.GradientTape() as tape:
      loss = loss_fn(x[j], y[j])
    want = tape.gradient(loss, model.trainable_variables)
    for g, w in zip(got, want):
      np.testing.assert_allclose(g[j].numpy(), w.numpy(), rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("dtype", [tf.float64], ids=lambda d: d.name)
def test_batch_jacobian_rank3_matmul(dtype):
  w = cast(W_1KP, dtype)

  @tf.function
  def f(x):                                  # x: [b, k]
    y = tf.tanh(x[:, None, None, :] @ w)     # [b, 1, 1, p]
    return vectorize.batch_jacobian(y[:, 0, 0, :], x)

  x = cast(RNG.normal(size=[16, 4]), dtype)
  got = f(x)
  for j in range(16):
    with tf.GradientTape() as tape:
      xj = x[j]
      tape.watch(xj)
      yj = tf.tanh(xj[None][None] @ w)[0, 0]
    want = tape.jacobian(yj, xj)
    np.testing.assert_allclose(got[j].numpy(), want.numpy(), **_tol(dtype))


def test_jacobian_wrt_rank3_weight():
  x = cast(X_MK[:3], tf.float32)                  # [3, 2, 4]

  @tf.function
  def f(w):
    return vectorize.jacobian(tf.reduce_sum(x @ w, axis=-1), w)   # [3, 2] + [1, 4, 3]

  w = cast(W_1KP, tf.float32)
  got = f(w)
  with tf.GradientTape() as tape:
    tape.watch(w)
    y = tf.reduce_sum(x @ w, axis=-1)
  want = tape.jacobian(y, w)
  np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_jacobian_fn_of_mha_input():
  layer = _mha()

  def f(h):                                          # h: [1, T, d]
    return tf.reduce_sum(layer(h, h), axis=-1)       # [1, T]

  h = tf.constant(SEQ[:1])
  got = vectorize.jacobian_fn(f)(h)
  # reference: one gradient per output element (tape.jacobian's own pfor is not trusted
  # here: TF's pfor of this graph gives values of 1e21 on this oneDNN build)
  rows = []
  for t in range(5):
    with tf.GradientTape() as tape:
      tape.watch(h)
      y = f(h)[0, t]
    rows.append(tape.gradient(y, h).numpy())
  want = np.stack(rows)[None]                         # [1, T] + [1, T, d]
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["eager", "function", "jit"])
def test_vectorized_map_rows_times_rank3(mode):
  w = cast(W_1KP, tf.float32)
  xs = cast(X_MK[:16], tf.float32)

  def fn(row):
    return row[None] @ w

  def run():
    return vectorize.vectorized_map(fn, xs)

  got = run() if mode == "eager" else tf.function(run, jit_compile=(mode == "jit"))()
  want = np.stack([fn(xs[j]).numpy() for j in range(16)])
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------------
# 2. while loops with per-example trip counts
# ----------------------------------------------------------------------------------------

XV = RNG.normal(size=[NMAX, 8]).astype(np.float32)
INTS = RNG.integers(1, 30, size=[NMAX]).astype(np.int32)


@pytest.mark.parametrize("n, mode", N_MODES)
def test_while_j_less_than_i_sum(n, mode):
  x = tf.constant(XV)

  def body(i):
    k = tf.minimum(i, 7)

    def cond(j, acc):
      return j < k

    def step(j, acc):
      return j + 1, acc + x[i, j]

    j, acc = tf.while_loop(cond, step, [tf.constant(0), tf.constant(0.0)])
    return j, acc

  check(body, n, mode)


@pytest.mark.parametrize("mode", ["function"])
def test_while_collatz_data_dependent(mode):
  ints = tf.constant(INTS)

  def body(i):
    def step(v, c):
      v = tf.where(v % 2 == 0, v // 2, 3 * v + 1)
      return v, c + 1
    _, c = tf.while_loop(lambda v, c: v > 1, step, [ints[i], tf.constant(0)])
    return c

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_while_matrix_state_variable_length_rnn(mode):
  x = tf.constant(SEQ)
  w = tf.constant(RNG.normal(size=[8, 8]).astype(np.float32) / 4)
  lengths = tf.constant(LENGTHS)

  def body(i):
    def step(t, h):
      return t + 1, tf.tanh(h @ w + x[i][t][None])
    _, h = tf.while_loop(lambda t, h: t < lengths[i], step, [tf.constant(0), tf.zeros([1, 8])])
    return h

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["jit"])
def test_while_rnn_gradient_in_body(mode):
  x = tf.constant(SEQ)
  w = tf.Variable(RNG.normal(size=[8, 8]).astype(np.float32) / 4)
  lengths = tf.constant(LENGTHS)

  def body(i):
    with tf.GradientTape() as tape:
      def step(t, h):
        return t + 1, tf.tanh(h @ w + x[i][t][None])
      _, h = tf.while_loop(lambda t, h: t < lengths[i], step,
                           (tf.constant(0), tf.zeros([1, 8])), maximum_iterations=5)
      loss = tf.reduce_sum(h ** 2)
    return loss, tape.gradient(loss, w)

  check(body, 16, mode)


def test_per_example_gradients_variable_length_rnn():
  x = tf.constant(SEQ[:16])
  lengths = tf.constant(LENGTHS[:16])
  w = tf.Variable(RNG.normal(size=[8, 8]).astype(np.float32) / 4)

  def loss_fn(xe, le):
    def step(t, h):
      return t + 1, tf.tanh(h @ w + xe[t][None])
    _, h = tf.while_loop(lambda t, h: t < le, step, (tf.constant(0), tf.zeros([1, 8])),
                         maximum_iterations=5)
    return tf.reduce_sum(h ** 2)

  got = vectorize.per_example_gradients(loss_fn, w, x, lengths)
  for j in range(16):
    with tf.GradientTape() as tape:
      loss = loss_fn(x[j], lengths[j])
    np.testing.assert_allclose(got[j].numpy(), tape.gradient(loss, w).numpy(),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n, mode", [(0, "eager"), (4, "runtime_n")])
def test_while_growing_concat_shape_invariant(n, mode):
  """The loop grows v by concat under shape invariant [None]: ragged result."""
  x = tf.constant(XV)

  def body(i):
    def step(j, v):
      return j + 1, tf.concat([v, [x[i, j] * 2.0]], 0)
    _, v = tf.while_loop(lambda j, v: j < i % 5, step, [tf.constant(0), tf.zeros([0])],
                         shape_invariants=[tf.TensorShape([]), tf.TensorShape([None])])
    return v

  check(body, n, mode)


@pytest.mark.parametrize("mode", ["eager"])
def test_while_growing_2d_shape_invariant(mode):
  x = tf.constant(XV)

  def body(i):
    def step(j, v):
      row = tf.stack([x[i, j], x[i, j] ** 2, tf.cast(j, tf.float32)])[None]
      return j + 1, tf.concat([v, row], 0)
    _, v = tf.while_loop(lambda j, v: j < 1 + i % 4, step,
                         [tf.constant(0), tf.zeros([0, 3])],
                         shape_invariants=[tf.TensorShape([]), tf.TensorShape([None, 3])])
    return v

  check(body, 6, mode)


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_tensorarray_dynamic_size_trip_i(mode):
  x = tf.constant(XV)

  def body(i):
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)

    def step(j, ta):
      return j + 1, ta.write(j, x[i, j] + tf.cast(j, tf.float32))
    _, ta = tf.while_loop(lambda j, ta: j < i % 5, step, [tf.constant(0), ta])
    return ta.stack()

  check(body, 8, mode)


@pytest.mark.parametrize("mode", ["eager"])
def test_tensorarray_fixed_size_trip_i(mode):
  x = tf.constant(XV)

  def body(i):
    ta = tf.TensorArray(tf.float32, size=8, element_shape=[])

    def step(j, ta):
      return j + 1, ta.write(j, x[i, j] * 3.0)

    j, ta = tf.while_loop(lambda j, ta: j < i % 8, step, [tf.constant(0), ta])

    def fill(j, ta):
      return j + 1, ta.write(j, 0.0)
    _, ta = tf.while_loop(lambda j, ta: j < 8, fill, [j, ta])
    return ta.stack()

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["jit"])
def test_tensorarray_unstack_read_in_loop(mode):
  x = tf.constant(SEQ)
  lengths = tf.constant(LENGTHS)

  def body(i):
    ta = tf.TensorArray(tf.float32, size=5, clear_after_read=False).unstack(x[i])

    def step(t, acc):
      return t + 1, acc + ta.read(t) * tf.cast(t + 1, tf.float32)
    _, acc = tf.while_loop(lambda t, acc: t < lengths[i], step, [tf.constant(0), tf.zeros([8])])
    return acc

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["function"])
def test_nested_while_trip_i_and_j(mode):
  def body(i):
    def outer(j, total):
      def inner(k, s):
        return k + 1, s + k * j
      _, s = tf.while_loop(lambda k, s: k < j, inner, [tf.constant(0), tf.constant(0)])
      return j + 1, total + s
    _, total = tf.while_loop(lambda j, t: j < i % 6, outer, [tf.constant(0), tf.constant(0)])
    return total

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_while_with_cond_inside(mode):
  x = tf.constant(XV)

  def body(i):
    def step(j, pos, neg):
      v = x[i, j]
      pos, neg = tf.cond(v > 0, lambda: (pos + v, neg), lambda: (pos, neg - v))
      return j + 1, pos, neg
    _, pos, neg = tf.while_loop(lambda j, p, q: j < 1 + i % 8, step,
                                [tf.constant(0), tf.constant(0.0), tf.constant(0.0)])
    return pos, neg

  check(body, 16, mode)


@pytest.mark.parametrize("mode", A)
def test_while_first_index_above_threshold(mode):
  x = tf.constant(XV)

  def body(i):
    j = tf.while_loop(lambda j: (j < 8) & ((j >= 8) | (x[i, tf.minimum(j, 7)] < 0.5)),
                      lambda j: (j + 1,), (tf.constant(0),))[0]
    return j

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["eager"])
def test_autograph_python_while_in_body(mode):
  x = tf.constant(XV)

  def body(i):
    j = tf.constant(0)
    acc = tf.constant(0.0)
    while j < i % 7:
      if x[i, j] > 0:
        acc += x[i, j]
      else:
        acc -= 1.0
      j += 1
    return acc

  check(body, 16, mode, ref_fn_mode=True)


SENTENCES = tf.constant([
    "the cat sat on the mat", "a dog", "the the the", "hello world again and again",
    "x", "one two three four five six", "the end", "in the middle of the night",
] * 4)


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_string_split_tokens_read_in_loop_with_cond(mode):
  def body(i):
    toks = tf.strings.split(SENTENCES[i])

    def step(j, total, thes):
      tok = toks[j]
      total, thes = tf.cond(tf.equal(tok, "the"),
                            lambda: (total, thes + 1),
                            lambda: (total + tf.strings.length(tok), thes))
      return j + 1, total, thes
    _, total, thes = tf.while_loop(lambda j, a, b: j < tf.size(toks), step,
                                   [tf.constant(0), tf.constant(0), tf.constant(0)])
    return total, thes

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["function"])
def test_boolean_mask_values_read_in_loop_with_cond(mode):
  x = tf.constant(XV)

  def body(i):
    vals = tf.boolean_mask(x[i], x[i] > 0)

    def step(j, acc):
      v = vals[j]
      return j + 1, tf.cond(v > 1.0, lambda: acc + 2.0 * v, lambda: acc + v)
    _, acc = tf.while_loop(lambda j, acc: j < tf.size(vals), step, [tf.constant(0), 0.0])
    return acc, tf.size(vals)

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["eager"])
def test_unique_ids_loop_embedding_sum(mode):
  ids = tf.constant(RNG.integers(0, 5, size=[NMAX, 6]).astype(np.int32))
  emb = tf.constant(RNG.normal(size=[5, 3]).astype(np.float32))

  def body(i):
    u = tf.unique(ids[i]).y

    def step(j, acc):
      return j + 1, acc + emb[u[j]] * tf.cast(j + 1, tf.float32)
    _, acc = tf.while_loop(lambda j, acc: j < tf.size(u), step, [tf.constant(0), tf.zeros([3])])
    return acc, u

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_boolean_mask_loop_result_ragged(mode):
  """Loop over masked values writing a dynamic TensorArray: per-example length output."""
  x = tf.constant(XV)

  def body(i):
    vals = tf.boolean_mask(x[i], x[i] > 0)
    ta = tf.TensorArray(tf.float32, size=tf.size(vals))

    def step(j, ta):
      return j + 1, ta.write(j, tf.cond(vals[j] > 1.0, lambda: vals[j] * 10., lambda: vals[j]))
    _, ta = tf.while_loop(lambda j, ta: j < tf.size(vals), step, [tf.constant(0), ta])
    return ta.stack()

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["eager"])
def test_while_carrying_masked_value_halving(mode):
  """A loop carries a per-example-length value of unchanged size (halving until small)."""
  x = tf.constant(np.abs(XV))

  def body(i):
    vals = tf.boolean_mask(x[i], x[i] > 0.3)

    def step(c, v):
      return c + 1, v * 0.5
    c, v = tf.while_loop(lambda c, v: tf.reduce_sum(v) > 0.5, step, [tf.constant(0), vals])
    return c, tf.reduce_sum(v)

  check(body, 16, mode)


# variables ---------------------------------------------------------------------------------

def run_with_variable(var, init, body, n, mode):
  """Output and final variable state of pfor against the loop's, from the same start."""
  var.assign(init)
  wants = loop_reference(body, n)
  want_final = var.numpy().copy()
  var.assign(init)
  got = run_pfor(body, n, mode)
  got_final = var.numpy().copy()
  assert_matches(got, wants)
  np.testing.assert_allclose(got_final, want_final, rtol=1e-5, atol=1e-5)


@pytest.mark.unchecked   # pfor's own variable state (the checked mode keeps the loop's)
@pytest.mark.parametrize("n, mode", N_MODES)
def test_variable_assign_add_in_loop_trip_i(n, mode):
  x = tf.constant(XV)
  v = tf.Variable(0.0)

  def body(i):
    def step(j):
      v.assign_add(x[i, j])
      return (j + 1,)
    j = tf.while_loop(lambda j: j < i % 8, step, (tf.constant(0),))[0]
    return j

  run_with_variable(v, 0.0, body, n, mode)


@pytest.mark.unchecked   # pfor's own variable state (the checked mode keeps the loop's)
@pytest.mark.parametrize("mode", ["runtime_n"])
def test_variable_counter_data_dependent_loop(mode):
  ints = tf.constant(INTS)
  steps = tf.Variable(0, dtype=tf.int32)

  def body(i):
    def step(v):
      steps.assign_add(1)
      return (tf.where(v % 2 == 0, v // 2, 3 * v + 1),)
    return tf.while_loop(lambda v: v > 1, step, (ints[i],))[0]

  run_with_variable(steps, 0, body, 16, mode)


@pytest.mark.unchecked   # pfor's own variable state (the checked mode keeps the loop's)
@pytest.mark.parametrize("mode", ["eager"])
def test_variable_vector_assign_add_in_cond_in_loop(mode):
  x = tf.constant(XV)
  hist = tf.Variable(tf.zeros([2]))

  def body(i):
    def step(j, s):
      v = x[i, j]
      tf.cond(v > 0, lambda: hist.assign_add([v, 0.0]), lambda: hist.assign_add([0.0, v]))
      return j + 1, s + v
    return tf.while_loop(lambda j, s: j < 1 + i % 8, step, [tf.constant(0), tf.constant(0.0)])[1]

  run_with_variable(hist, tf.zeros([2]), body, 16, mode)


@pytest.mark.unchecked   # pfor's own variable state (the checked mode keeps the loop's)
@pytest.mark.parametrize("mode", ["eager"])
def test_variable_assign_add_over_string_tokens(mode):
  count = tf.Variable(0, dtype=tf.int32)

  def body(i):
    toks = tf.strings.split(SENTENCES[i])

    def step(j):
      count.assign_add(tf.strings.length(toks[j]))
      return (j + 1,)
    return tf.while_loop(lambda j: j < tf.size(toks), step, (tf.constant(0),))[0]

  run_with_variable(count, 0, body, 16, mode)


@pytest.mark.unchecked   # pfor's own variable state (the checked mode keeps the loop's)
@pytest.mark.parametrize("mode", ["jit"])
def test_variable_assign_add_matrix_in_rnn_loop(mode):
  """Accumulate h^T h products into a variable inside a per-example-length recurrence."""
  x = tf.constant(SEQ)
  lengths = tf.constant(LENGTHS)
  w = tf.constant(RNG.normal(size=[8, 8]).astype(np.float32) / 4)
  gram = tf.Variable(tf.zeros([8, 8]))

  def body(i):
    def step(t, h):
      h = tf.tanh(h @ w + x[i][t][None])
      gram.assign_add(tf.matmul(h, h, transpose_a=True))
      return t + 1, h
    return tf.while_loop(lambda t, h: t < lengths[i], step, [tf.constant(0), tf.zeros([1, 8])])[1]

  run_with_variable(gram, tf.zeros([8, 8]), body, 16, mode)


@pytest.mark.parametrize("mode", ["jit"])
def test_variable_in_checked_mode_no_false_alarm(mode):
  """The same kind of body under the checked mode (the conftest's default): no CheckError."""
  x = tf.constant(XV)
  v = tf.Variable(0.0)

  def body(i):
    def step(j, acc):
      v.assign_add(x[i, j])
      return j + 1, acc + x[i, j]
    return tf.while_loop(lambda j, a: j < i % 8, step, (tf.constant(0), tf.constant(0.0)))[1]

  run_with_variable(v, 0.0, body, 16, mode)


@pytest.mark.unchecked
@pytest.mark.parametrize("mode", MODES)
def test_variable_read_after_write_in_loop(mode):
  """Reads the variable after each write: the value depends on earlier examples' writes."""
  v = tf.Variable(0.0)

  def body(i):
    def step(j, acc):
      v.assign_add(1.0)
      return j + 1, acc + v.read_value()
    return tf.while_loop(lambda j, a: j < i % 4, step, (tf.constant(0), tf.constant(0.0)))[1]

  run_with_variable(v, 0.0, body, 6, mode)


@pytest.mark.unchecked
@pytest.mark.parametrize("mode", MODES)
def test_variable_affine_recurrence_in_loop(mode):
  x = tf.constant(XV)
  v = tf.Variable(0.0)

  def body(i):
    def step(j):
      v.assign(v * 0.5 + x[i, j])
      return (j + 1,)
    return tf.while_loop(lambda j: j < i % 4, step, (tf.constant(0),))[0]

  run_with_variable(v, 1.0, body, 6, mode)


@pytest.mark.unchecked
@pytest.mark.parametrize("mode", ["function"])
def test_variable_scatter_nd_add_in_loop(mode):
  x = tf.constant(XV)
  hist = tf.Variable(tf.zeros([8]))

  def body(i):
    def step(j):
      hist.scatter_nd_add([[j]], [x[i, j]])
      return (j + 1,)
    return tf.while_loop(lambda j: j < 1 + i % 8, step, (tf.constant(0),))[0]

  run_with_variable(hist, tf.zeros([8]), body, 6, mode)


@pytest.mark.unchecked
@pytest.mark.parametrize("mode", MODES)
def test_variable_loop_condition_reads_state(mode):
  """The loop's condition reads the variable its body adds to: trips depend on order."""
  x = tf.constant(XV)
  v = tf.Variable(0.0)

  def body(i):
    def step(c):
      v.assign_add(tf.abs(x[i, c % 8]))
      return (c + 1,)
    return tf.while_loop(lambda c: v < 3.0 * tf.cast(i + 1, tf.float32), step,
                         (tf.constant(0),))[0]

  run_with_variable(v, 0.0, body, 5, mode)


@pytest.mark.unchecked
@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_variable_whole_body_sequential_n100(mode):
  """x[i:i + 1] and a read after a loop of writes: a sequential body, n = 100 under XLA."""
  x = tf.constant(XV)
  v = tf.Variable(0.0)

  def body(i):
    xi = x[i:i + 1]

    def step(j):
      v.assign_add(xi[0, j])
      return (j + 1,)
    tf.while_loop(lambda j: j < i % 5, step, (tf.constant(0),))
    return xi * v.read_value()

  run_with_variable(v, 0.0, body, 100, mode)


# more matrix products ---------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_batch_one_broadcast_against_batch_three(mode):
  """[1, m, k] @ [3, k, p] -> [3, m, p]: the per-example batch of one broadcasts."""
  x = cast(X_MK, tf.float32)
  w = cast(RNG.normal(size=[3, 4, 5]), tf.float32)

  def body(i):
    return x[i][None] @ w

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["function", "jit"])
def test_rank4_cross_broadcast(mode):
  """[2, 1, m, k] @ [1, 3, k, p] -> [2, 3, m, p]."""
  x = cast(RNG.normal(size=[NMAX, 2, 1, 2, 4]), tf.float32)
  w = cast(RNG.normal(size=[1, 3, 4, 5]), tf.float32)

  def body(i):
    return x[i] @ w

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_gradient_wrt_broadcast_weight_and_input(mode):
  """W [1, k, p] broadcast over a per-example batch of 3: its gradient sums over it."""
  x = cast(RNG.normal(size=[NMAX, 3, 2, 4]), tf.float32)
  w = tf.Variable(cast(W_1KP, tf.float32))

  def body(i):
    with tf.GradientTape() as tape:
      xi = x[i]
      tape.watch(xi)
      loss = tf.reduce_sum(tf.sin(xi @ w))
    return tape.gradient(loss, [w, xi])

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["eager"])
def test_einsum_broadcast_gradient_size_one_operand(mode):
  a = cast(RNG.normal(size=[NMAX, 1, 3, 3]), tf.float32)
  b = cast(RNG.normal(size=[NMAX, 2, 1, 3, 4]), tf.float32)

  def body(i):
    with tf.GradientTape() as tape:
      ai = a[i]
      tape.watch(ai)
      loss = tf.reduce_sum(tf.sin(tf.einsum("...ij,...jk->...ik", ai, b[i])))
    return tape.gradient(loss, ai)

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["jit"])
def test_einsum_diag_trace_and_three_operands(mode):
  a = cast(RNG.normal(size=[NMAX, 1, 3, 3]), tf.float32)
  w = cast(RNG.normal(size=[3, 2]), tf.float32)

  def body(i):
    return (tf.einsum("...ii->...i", a[i]), tf.einsum("...ii->...", a[i]),
            tf.einsum("...ij,...jk,kl->...il", a[i], a[(i + 1) % NMAX], w))

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["function"])
def test_integer_and_complex_batch_matmul(mode):
  xi = tf.constant(RNG.integers(-3, 4, size=[NMAX, 2, 4]).astype(np.int32))
  wi = tf.constant(RNG.integers(-3, 4, size=[1, 4, 3]).astype(np.int32))
  c = tf.complex(cast(X_MK, tf.float32), cast(X_MK, tf.float32) * 0.5)

  def body(i):
    return xi[i][None] @ wi, tf.matmul(c[i][None], c[i][None], adjoint_a=True)

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_empty_batch_and_empty_rows(mode):
  x = cast(X_MK, tf.float32)
  w = cast(W_1KP, tf.float32)

  def body(i):
    return x[i][None][:0] @ w, x[i][None][:, :0] @ w

  check(body, 3, mode)


@pytest.mark.parametrize("mode", ["eager"])
def test_ragged_rows_matmul_batch_of_one_pooled(mode):
  """Each example's own rows x[i][:L[i]], as a batch of one, times W [1, k, p], pooled."""
  x = tf.constant(RNG.normal(size=[NMAX, 6, 4]).astype(np.float32))
  lengths = tf.constant(RNG.integers(1, 7, size=[NMAX]).astype(np.int32))
  w = cast(W_1KP, tf.float32)

  def body(i):
    rows = x[i][:lengths[i]]
    return tf.reduce_sum(rows[None] @ w, axis=1), tf.einsum("lk,kp->lp", rows, w[0])

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_keras_mha_on_own_length_sequence_pooled(mode):
  layer = _mha()
  x = cast(SEQ, tf.float32)
  lengths = tf.constant(LENGTHS)

  def body(i):
    h = x[i][:lengths[i]][None]                      # [1, L_i, d]
    return tf.reduce_mean(layer(h, h), axis=1)

  check(body, 8, mode)


@pytest.mark.parametrize("dtype, mode", [
    ("float64", "jit"), ("mixed_bfloat16", "runtime_n"), ("bfloat16", "jit")])
def test_keras_mha_dtypes(dtype, mode):
  keras.utils.set_random_seed(5)
  layer = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, dtype=dtype)
  compute = {"float64": tf.float64, "bfloat16": tf.bfloat16, "mixed_bfloat16": tf.float32}[dtype]
  x = tf.cast(tf.constant(SEQ), compute)
  layer(x[:1], x[:1])

  def body(i):
    h = x[i][None]
    return layer(h, h)

  check(body, 8, mode)


def test_checked_mode_jit_bf16_matmul_cast_to_float32():
  """Was a false CheckError at the Cast (bf16 matmul cast to float32, the checked mode under
  jit_compile=True); fixed in 6c95598. Repro: /tmp/users7/repro_checked_jit_bf16_matmul_cast.py"""
  x = cast(SEQ[:, :, :4], tf.bfloat16)
  w = cast(RNG.normal(size=[4, 4]), tf.bfloat16)

  def body(i):
    return tf.cast(x[i] @ w, tf.float32)

  with vectorize.checked():
    check(body, 4, "jit")


@pytest.mark.unchecked
def test_unchecked_jit_bf16_matmul_cast_to_float32():
  x = cast(SEQ[:, :, :4], tf.bfloat16)
  w = cast(RNG.normal(size=[4, 4]), tf.bfloat16)

  def body(i):
    return tf.cast(x[i] @ w, tf.float32)

  got, wants = check(body, 4, "jit")
  np.testing.assert_array_equal(got.numpy(), np.stack([w_.numpy() for w_ in wants]))


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_keras_einsum_dense_and_additive_attention(mode):
  keras.utils.set_random_seed(6)
  ed = keras.layers.EinsumDense("btd,dh->bth", output_shape=(None, 6), bias_axes="h")
  att = keras.layers.AdditiveAttention()
  x = tf.constant(SEQ)
  h0 = ed(x[:1])
  att([h0, h0])

  def body(i):
    h = ed(x[i][None])
    return att([h, ed(x[(i + 1) % NMAX][None])])

  check(body, 8, mode)


@pytest.mark.parametrize("mode", ["jit"])
def test_keras_embedding_mask_zero_mha_model_gradients(mode):
  keras.utils.set_random_seed(8)
  toks = tf.constant(np.where(RNG.random([NMAX, 6]) < 0.3, 0,
                              RNG.integers(1, 20, [NMAX, 6])).astype(np.int32))
  inp = keras.Input((6,), dtype="int32")
  e = keras.layers.Embedding(20, 8, mask_zero=True)(inp)
  h = keras.layers.MultiHeadAttention(2, 4)(e, e)
  model = keras.Model(inp, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(h)))

  def body(i):
    with tf.GradientTape() as tape:
      out = model(toks[i][None])
      loss = tf.reduce_sum(out ** 2)
    return out, [tf.convert_to_tensor(g) for g in tape.gradient(loss, model.trainable_variables)]

  check(body, 4, mode)


def test_jit_body_reads_function_argument():
  x = tf.constant(SEQ)
  f = tf.function(lambda w: vectorize.pfor(lambda i: tf.nn.softmax(x[i][None] @ w), 6),
                  jit_compile=True)
  w = cast(RNG.normal(size=[1, 8, 3]), tf.float32)
  want = np.stack([tf.nn.softmax(x[i][None] @ w).numpy() for i in range(6)])
  np.testing.assert_allclose(f(w).numpy(), want, rtol=1e-5, atol=1e-6)


def test_jit_with_runtime_n():
  x = tf.constant(SEQ)
  w = cast(RNG.normal(size=[1, 8, 3]), tf.float32)
  lengths = tf.constant(LENGTHS)

  def body(i):
    acc = tf.while_loop(lambda t, a: t < lengths[i], lambda t, a: (t + 1, a + x[i][t][None] @ w[0]),
                        (tf.constant(0), tf.zeros([1, 3])))[1]
    return tf.nn.relu(x[i][None] @ w), acc

  f = tf.function(lambda k: vectorize.pfor(body, k),
                  input_signature=[tf.TensorSpec([], tf.int32)], jit_compile=True)
  got = f(tf.constant(5))
  assert_matches(got, loop_reference(body, 5))


# more loops ---------------------------------------------------------------------------------

def test_per_example_gradients_text_rnn():
  emb = tf.Variable(RNG.normal(size=[20, 4]).astype(np.float32))
  w = tf.Variable(RNG.normal(size=[4, 4]).astype(np.float32) / 2)

  def loss_fn(s):
    ids = tf.strings.to_hash_bucket_fast(tf.strings.split(s), 20)

    def step(t, h):
      return t + 1, tf.tanh(h @ w + tf.gather(emb, ids[t])[None])
    _, h = tf.while_loop(lambda t, h: t < tf.size(ids), step, (tf.constant(0), tf.zeros([1, 4])))
    return tf.reduce_sum(h ** 2)

  got = vectorize.per_example_gradients(loss_fn, [emb, w], SENTENCES[:8])
  for j in range(8):
    with tf.GradientTape() as tape:
      loss = loss_fn(SENTENCES[j])
    ge, gw = tape.gradient(loss, [emb, w])
    np.testing.assert_allclose(got[0][j].numpy(), tf.convert_to_tensor(ge).numpy(), atol=1e-5)
    np.testing.assert_allclose(got[1][j].numpy(), gw.numpy(), atol=1e-5)


@pytest.mark.parametrize("mode", ["eager"])
def test_rank3_state_recurrence_gradient(mode):
  """State [1, 1, d] times W [1, d, d] in a loop of each example's own length, under a tape."""
  x = tf.constant(SEQ)
  w = tf.Variable(RNG.normal(size=[1, 8, 8]).astype(np.float32) / 3)
  lengths = tf.constant(LENGTHS)

  def body(i):
    with tf.GradientTape() as tape:
      def step(t, h):
        return t + 1, tf.tanh(h @ w + x[i][t][None, None])
      _, h = tf.while_loop(lambda t, h: t < lengths[i], step, (tf.constant(0), tf.zeros([1, 1, 8])),
                           maximum_iterations=5)
      loss = tf.reduce_sum(h)
    return tape.gradient(loss, w)

  check(body, 8, mode)


@pytest.mark.parametrize("mode", ["jit"])
def test_cond_in_loop_gradient(mode):
  x = tf.constant(SEQ)
  w = tf.Variable(RNG.normal(size=[8, 8]).astype(np.float32) / 3)
  lengths = tf.constant(LENGTHS)

  def body(i):
    with tf.GradientTape() as tape:
      def step(t, h):
        h = tf.cond(x[i, t, 0] > 0, lambda: tf.tanh(h @ w), lambda: h * 0.5 + x[i][t][None])
        return t + 1, h
      _, h = tf.while_loop(lambda t, h: t < lengths[i], step, (tf.constant(0), tf.ones([1, 8])),
                           maximum_iterations=5)
      loss = tf.reduce_sum(h)
    return tape.gradient(loss, w, unconnected_gradients="zero")

  check(body, 4, mode)


def test_xla_loop_gradient_without_maximum_iterations_is_conversion_error():
  """Documented: under XLA a differentiated loop needs maximum_iterations."""
  x = tf.constant(SEQ)
  w = tf.Variable(RNG.normal(size=[8, 8]).astype(np.float32) / 3)

  def body(i):
    with tf.GradientTape() as tape:
      h = tf.while_loop(lambda t, h: t < 5, lambda t, h: (t + 1, tf.tanh(h @ w + x[i][t][None])),
                        (tf.constant(0), tf.zeros([1, 8])))[1]
      loss = tf.reduce_sum(h)
    return tape.gradient(loss, w)

  with pytest.raises(vectorize.ConversionError, match="maximum_iterations"):
    run_pfor(body, 4, "jit")


def test_xla_dynamic_tensorarray_of_own_length_is_conversion_error():
  x = tf.constant(XV)

  def body(i):
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    _, ta = tf.while_loop(lambda j, ta: j < i % 5, lambda j, ta: (j + 1, ta.write(j, x[i, j])),
                          (tf.constant(0), ta))
    return ta.stack()

  with pytest.raises(vectorize.ConversionError, match="TensorArray"):
    run_pfor(body, 6, "jit")


@pytest.mark.parametrize("mode", ["jit"])
def test_while_inside_cond_per_example(mode):
  x = tf.constant(XV)
  lengths = tf.constant(LENGTHS)

  def body(i):
    def loop():
      return tf.while_loop(lambda j, a: j < lengths[i], lambda j, a: (j + 1, a + x[i, j]),
                           (tf.constant(0), tf.constant(0.0)))[1]
    return tf.cond(x[i, 0] > 0, loop, lambda: -1.0)

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["eager"])
def test_namedtuple_and_dict_loop_vars(mode):
  import collections
  State = collections.namedtuple("State", "j acc m")
  x = tf.constant(XV)
  lengths = tf.constant(LENGTHS)

  def body(i):
    def step(s):
      v = x[i, s.j]
      return [State(s.j + 1, {"sum": s.acc["sum"] + v, "sq": s.acc["sq"] + v * v},
                    tf.maximum(s.m, v))]
    s = tf.while_loop(lambda s: s.j < lengths[i], step,
                      [State(tf.constant(0), {"sum": tf.constant(0.0), "sq": tf.constant(0.0)},
                             tf.constant(-1e9))])[0]
    return s.acc, s.m

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["jit"])
def test_maximum_iterations_truncating_and_per_example(mode):
  x = tf.constant(XV)
  lengths = tf.constant(LENGTHS)

  def body(i):
    a = tf.while_loop(lambda j, a: j < lengths[i], lambda j, a: (j + 1, a + x[i, j]),
                      (tf.constant(0), tf.constant(0.0)), maximum_iterations=3)
    b = tf.while_loop(lambda j, a: j < 7, lambda j, a: (j + 1, a + x[i, j]),
                      (tf.constant(0), tf.constant(0.0)), maximum_iterations=lengths[i])
    return a, b

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["function"])
def test_int64_counter_float16_carry(mode):
  lengths = tf.constant(LENGTHS)

  def body(i):
    return tf.while_loop(lambda j, a: j < tf.cast(lengths[i], tf.int64),
                         lambda j, a: (j + 1, a * tf.constant(1.5, tf.float16)),
                         (tf.constant(0, tf.int64), tf.constant(1.0, tf.float16)))

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["function"])
def test_tensorarray_written_then_read_backwards_in_second_loop(mode):
  x = tf.constant(XV)
  lengths = tf.constant(LENGTHS)

  def body(i):
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, clear_after_read=False,
                        element_shape=[])
    _, ta = tf.while_loop(lambda j, ta: j < lengths[i], lambda j, ta: (j + 1, ta.write(j, x[i, j])),
                          (tf.constant(0), ta))

    def rd(j, acc):
      return j + 1, acc + ta.read(ta.size() - 1 - j) * tf.cast(j + 1, tf.float32)
    return tf.while_loop(lambda j, acc: j < ta.size(), rd, (tf.constant(0), tf.constant(0.0)))[1]

  check(body, 16, mode)


@pytest.mark.parametrize("mode", ["eager"])
def test_tensorarray_default_clear_after_read_like_a_function(mode):
  """Documented: pfor reads a TensorArray as a tf.function does (the element stays)."""
  x = tf.constant(XV)
  lengths = tf.constant(LENGTHS)

  def body(i):
    ta = tf.TensorArray(tf.float32, size=8).unstack(x[i])
    a = ta.read(lengths[i] - 1)
    return a + ta.stack()

  check(body, 8, mode, ref_fn_mode=True)


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_while_growing_concat_shared_trip_count(mode):
  """Every example grows its value three times: sizes agree, dense result. Under XLA plain
  TensorFlow itself refuses a loop variable that grows (so does pfor's output, with XLA's
  own 'Input and output shapes of loop body do not match'); the static-shape conversion is
  checked instead, with vectorize.static_shapes()."""
  x = tf.constant(XV)

  def body(i):
    def step(j, v):
      return j + 1, tf.concat([v, [x[i, j]]], 0)
    return tf.while_loop(lambda j, v: j < 3, step, (tf.constant(0), tf.zeros([0])),
                         shape_invariants=(tf.TensorShape([]), tf.TensorShape([None])))[1]

  if mode == "jit":
    with vectorize.static_shapes():
      got = tf.function(lambda: vectorize.pfor(body, 6))()
    assert_matches(got, loop_reference(body, 6))
  else:
    check(body, 6, mode)


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_shrinking_loops_over_unique_and_mask(mode):
  x = tf.constant(XV)
  ids = tf.constant(RNG.integers(0, 5, size=[NMAX, 8]).astype(np.int32))

  def body(i):
    def drop_first(c, v):
      u = tf.unique(v).y
      return c + 1, tf.boolean_mask(v, tf.not_equal(v, u[0]))
    c1, v1 = tf.while_loop(lambda c, v: tf.size(tf.unique(v).y) > 2, drop_first,
                           (tf.constant(0), ids[i]),
                           shape_invariants=(tf.TensorShape([]), tf.TensorShape([None])))

    def drop_min(c, v):
      return c + 1, tf.boolean_mask(v, v > tf.reduce_min(v))
    c2, v2 = tf.while_loop(lambda c, v: tf.size(v) > 1, drop_min, (tf.constant(0), x[i]),
                           shape_invariants=(tf.TensorShape([]), tf.TensorShape([None])))
    return c1, v1, c2, tf.reduce_sum(v2)

  check(body, 8, mode)


RAGGED_CARRY_REASON = (
    "a while loop whose loop variable starts at a per-example size (tf.boolean_mask, "
    "tf.range(i % 4)) and changes size in the loop (concat / slice, shape invariant [None]) "
    "fails at run time with InvalidArgumentError 'assertion failed: [vectorize: loop variable 3 "
    "changes its size inside the loop]' instead of falling back (README: loops do not carry "
    "ragged values, the op falls back whole) or raising ConversionError; same with "
    "fallback_to_while_loop=False. Repro: /tmp/users7/repro_grow_ragged_initial_invariant_trips.py")


@pytest.mark.xfail(strict=True, raises=tf.errors.InvalidArgumentError, reason=RAGGED_CARRY_REASON)
@pytest.mark.parametrize("mode", ["function"])
def test_grow_value_of_per_example_initial_size(mode):
  x = tf.constant(XV)

  def body(i):
    v0 = tf.boolean_mask(x[i], x[i] > 0)

    def step(j, v):
      return j + 1, tf.concat([v, v[:1] * 2.0], 0)
    return tf.while_loop(lambda j, v: j < 2, step, (tf.constant(0), v0),
                         shape_invariants=(tf.TensorShape([]), tf.TensorShape([None])))[1]

  check(body, 6, mode)


@pytest.mark.xfail(strict=True, raises=tf.errors.InvalidArgumentError, reason=RAGGED_CARRY_REASON)
def test_append_to_range_of_per_example_length():
  def body(i):
    v0 = tf.range(i % 4, dtype=tf.float32)

    def step(j, v):
      return j + 1, tf.concat([v, [1.0]], 0)
    return tf.while_loop(lambda j, v: j < 2, step, (tf.constant(0), v0),
                         shape_invariants=(tf.TensorShape([]), tf.TensorShape([None])))[1]

  check(body, 6, "eager")


@pytest.mark.xfail(strict=True, raises=tf.errors.InvalidArgumentError, reason=RAGGED_CARRY_REASON)
def test_shrink_masked_value_per_example_trips():
  x = tf.constant(XV)

  def body(i):
    v0 = tf.boolean_mask(x[i], x[i] > 0)

    def step(j, v):
      return j + 1, v[1:]
    return tf.while_loop(lambda j, v: (j < i % 3) & (tf.size(v) > 0), step, (tf.constant(0), v0),
                         shape_invariants=(tf.TensorShape([]), tf.TensorShape([None])))[1]

  check(body, 6, "eager")


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_vectorized_map_over_ragged_elems_with_while(mode):
  rt = tf.RaggedTensor.from_row_lengths(tf.range(20, dtype=tf.float32), [3, 0, 5, 2, 10])

  def fn(row):
    return tf.while_loop(lambda j, a: j < tf.size(row), lambda j, a: (j + 1, a * 0.5 + row[j]),
                         (tf.constant(0), tf.constant(0.0)))[1]

  want = np.stack([fn(rt[k]).numpy() for k in range(5)])
  if mode == "jit":
    with pytest.raises(vectorize.ConversionError):   # documented: ragged under XLA
      tf.function(lambda: vectorize.vectorized_map(fn, rt), jit_compile=True)()
    return
  got = vectorize.vectorized_map(fn, rt) if mode == "eager" else \
      tf.function(lambda: vectorize.vectorized_map(fn, rt))()
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_batch_jacobian_through_while_loop_and_hessian():
  w = tf.constant(RNG.normal(size=[8, 8]).astype(np.float32) / 3)

  def rnn(x):
    return tf.while_loop(lambda t, h: t < 3, lambda t, h: (t + 1, tf.tanh(h @ w)), (0, x))[1]

  @tf.function
  def bj(x):
    return vectorize.batch_jacobian(rnn(x), x)

  x = tf.constant(XV[:4])
  got = bj(x)
  for k in range(4):
    with tf.GradientTape(persistent=True) as tape:
      xk = x[k:k + 1]
      tape.watch(xk)
      yk = rnn(xk)
    want = tape.jacobian(yk, xk, experimental_use_pfor=False)[0, :, 0, :]
    np.testing.assert_allclose(got[k].numpy(), want.numpy(), rtol=1e-4, atol=1e-5)

  def f(v):
    return tf.reduce_sum(tf.tanh(v[None] @ w[None]) ** 2)

  h = vectorize.hessian(f, x[0])
  with tf.GradientTape(persistent=True) as t2:
    v = x[0]
    t2.watch(v)
    with tf.GradientTape() as t1:
      t1.watch(v)
      y = f(v)
    g = t1.gradient(y, v)
  want = t2.jacobian(g, v, experimental_use_pfor=False)
  np.testing.assert_allclose(h.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)
