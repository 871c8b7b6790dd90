"""Users6: per-example programs with LOOPS and SEQUENCES inside the body.

TensorArrays written in tf.while_loop / autograph loops, hand-written RNNs under tapes, Keras
recurrent layers (LSTM, GRU, SimpleRNN, Bidirectional, masking) through
`per_example_gradients` / `clipped_gradient_sum`, and jacobians of loop-based functions.

Every expected value is computed by a plain Python loop over the examples (eagerly), never by
vectorize. Every pfor-based call passes `fallback_to_while_loop=False` where it takes it.
"""
import numpy as np
import pytest
import tensorflow as tf
import keras

import vectorize


@pytest.fixture(autouse=True)
def _no_checked_env(monkeypatch):
  # keep the file fast on 2 cores: compare against our own loop only
  monkeypatch.delenv("VECTORIZE_CHECKED", raising=False)


NOFB = dict(fallback_to_while_loop=False)

# --------------------------------------------------------------------------------------
# the reference loop and the comparison
# --------------------------------------------------------------------------------------


def _stack(vals):
  if vals[0] is None:
    assert all(v is None for v in vals)
    return None
  shapes = {tuple(v.shape.as_list()) for v in vals}
  if len(shapes) == 1:
    return tf.stack(vals)
  return tf.ragged.stack(vals)


def ref_loop(body, n):
  """stack(body(i) for i in range(n)), ragged where sizes differ (n >= 1)."""
  outs = [body(tf.constant(i)) for i in range(n)]
  flat = [tf.nest.flatten(o) for o in outs]
  per = [_stack([f[k] for f in flat]) for k in range(len(flat[0]))]
  return tf.nest.pack_sequence_as(outs[0], per)


def tol(dtype):
  dtype = tf.as_dtype(dtype)
  if dtype == tf.float32:
    return dict(rtol=1e-4, atol=1e-5)
  if dtype == tf.float64:
    return dict(rtol=1e-9, atol=1e-11)
  return None


def assert_same(got, want, rtol=None, atol=None):
  gf = tf.nest.flatten(got)
  wf = tf.nest.flatten(want)
  assert len(gf) == len(wf), (len(gf), len(wf))
  for g, w in zip(gf, wf):
    if w is None:
      assert g is None, g
      continue
    assert g is not None
    assert isinstance(g, tf.RaggedTensor) == isinstance(w, tf.RaggedTensor), (
        type(g).__name__, type(w).__name__)
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    t = tol(w.dtype)
    if rtol is not None and t is not None:
      t = dict(rtol=rtol, atol=atol if atol is not None else t["atol"])
    if isinstance(w, tf.RaggedTensor):
      gl, wl = g.to_list(), w.to_list()
      assert len(gl) == len(wl)
      for a, b in zip(gl, wl):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, (a.shape, b.shape)
        if t is None:
          np.testing.assert_array_equal(a, b)
        else:
          np.testing.assert_allclose(a, b, **t)
      continue
    g = tf.convert_to_tensor(g).numpy()
    w = tf.convert_to_tensor(w).numpy()
    assert g.shape == w.shape, (g.shape, w.shape)
    if t is None:
      np.testing.assert_array_equal(g, w)
    else:
      np.testing.assert_allclose(g, w, **t)


def run_pfor(body, n, mode):
  if mode == "eager":
    return vectorize.pfor(body, n, **NOFB)
  if mode == "function":
    return tf.function(lambda: vectorize.pfor(body, n, **NOFB))()
  if mode == "xla":
    return tf.function(lambda: vectorize.pfor(body, n, **NOFB), jit_compile=True)()
  if mode == "runtime_n":
    f = tf.function(lambda k: vectorize.pfor(body, k, **NOFB),
                    input_signature=[tf.TensorSpec([], tf.int32)])
    return f(tf.constant(n))
  raise ValueError(mode)


def check_pfor(body, n, mode, rtol=None, atol=None):
  want = ref_loop(body, n)
  if mode == "n0":
    got = vectorize.pfor(body, 0, **NOFB)
    gf, wf = tf.nest.flatten(got), tf.nest.flatten(want)
    assert len(gf) == len(wf)
    for g, w in zip(gf, wf):
      assert g.dtype == w.dtype, (g.dtype, w.dtype)
      assert g.shape[0] == 0, g.shape
      if not isinstance(w, tf.RaggedTensor):
        assert not isinstance(g, tf.RaggedTensor), type(g)
        assert g.shape.as_list() == [0] + w.shape.as_list()[1:], (g.shape, w.shape)
    return
  if mode == "runtime_n0":
    f = tf.function(lambda k: vectorize.pfor(body, k, **NOFB),
                    input_signature=[tf.TensorSpec([], tf.int32)])
    got = f(tf.constant(0))
    for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
      assert g.dtype == w.dtype
      assert int(g.shape[0] if g.shape[0] is not None else tf.shape(g)[0]) == 0
      if not isinstance(w, tf.RaggedTensor):
        assert tf.shape(g).numpy().tolist() == [0] + w.shape.as_list()[1:]
    return
  assert_same(run_pfor(body, n, mode), want, rtol=rtol, atol=atol)


# --------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------

rng = np.random.default_rng(61)
B, T, D, H = 5, 6, 3, 4
X = tf.constant(rng.normal(size=[B, T, D]).astype(np.float32))
X64 = tf.constant(rng.normal(size=[B, T, D]))
XI = tf.constant(rng.integers(-5, 6, size=[B, T]).astype(np.int32))
LENS = tf.constant([3, 1, 6, 0, 4])            # per-example trip counts, one empty
LENS1 = tf.constant([3, 1, 6, 2, 4])           # every example at least one step
COLLATZ = tf.constant([6, 7, 1, 9, 12])
MATS = tf.constant(rng.normal(size=[B, 2, 2]) * 0.7)   # float64

# runtime_n runs inside a tf.function; a static n there would trace the conversion in a
# graph as eager and runtime_n do (CI time)
ALL = ("eager", "xla", "runtime_n", "n0")
NOXLA = ("eager", "function", "runtime_n", "n0")

# ---------------------------------------------------------------- area 1: TensorArrays


def p_fixed_ta_cumsum(i):
  ta = tf.TensorArray(tf.float32, size=T)
  acc = tf.zeros([D])
  for t in tf.range(T):
    acc = acc + X[i, t] * tf.cast(t + 1, tf.float32)
    ta = ta.write(t, acc)
  return ta.stack()


def p_dynamic_ta_per_example(i):
  ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[D])
  t = tf.constant(0)
  h = tf.zeros([D])
  while t < LENS[i]:
    h = tf.tanh(h + X[i, t])
    ta = ta.write(t, h)
    t += 1
  return ta.stack(), ta.size(), h


def p_fixed_ta_per_example_trip(i):
  # fixed size T, only LENS[i] elements written: the rest stack as zeros
  ta = tf.TensorArray(tf.float32, size=T, element_shape=[D])
  h = tf.zeros([D])
  for t in tf.range(LENS[i]):
    h = 0.5 * h + X[i, t]
    ta = ta.write(t, h)
  return ta.stack(), h


def p_unstack_reverse_f64(i):
  ta_in = tf.TensorArray(tf.float64, size=T).unstack(X64[i])
  ta_out = tf.TensorArray(tf.float64, size=T)
  for t in tf.range(T):
    ta_out = ta_out.write(T - 1 - t, ta_in.read(t) * 2.0 + tf.cast(t, tf.float64))
  return ta_out.stack()


def p_gather_read(i):
  ta = tf.TensorArray(tf.float32, size=T, clear_after_read=False)
  run = tf.zeros([D])
  for t in tf.range(T):
    run = run + X[i, t]
    ta = ta.write(t, run)
  return ta.gather([T - 1, 0, 2]), ta.read(1), ta.stack(), ta.size()


def p_concat_int32(i):
  ta = tf.TensorArray(tf.int32, size=T, element_shape=[2])
  for t in tf.range(T):
    ta = ta.write(t, tf.stack([XI[i, t], XI[i, t] * t]))
  return ta.concat()


def p_multi_dtype(i):
  ta_i = tf.TensorArray(tf.int32, size=T)
  ta_d = tf.TensorArray(tf.float64, size=T)
  ta_b = tf.TensorArray(tf.bool, size=T)
  best = tf.constant(-100, tf.int32)
  s = tf.constant(0.0, tf.float64)
  for t in tf.range(T):
    best = tf.maximum(best, XI[i, t])
    s = s + X64[i, t, 0] * X64[i, t, 1]
    ta_i = ta_i.write(t, best)
    ta_d = ta_d.write(t, s)
    ta_b = ta_b.write(t, XI[i, t] > 0)
  return {"best": ta_i.stack(), "s": ta_d.stack(), "pos": ta_b.stack()}


def p_nested_shared(i):
  ta = tf.TensorArray(tf.float32, size=T)
  for t in tf.range(T):
    acc = tf.zeros([])
    for s in tf.range(t + 1):
      acc = acc + tf.reduce_sum(X[i, s] * X[i, t])
    ta = ta.write(t, acc)
  return ta.stack()


def p_nested_per_example(i):
  ta = tf.TensorArray(tf.float32, size=T, element_shape=[])
  for t in tf.range(LENS[i]):
    acc = tf.constant(0.0)
    for s in tf.range(t):
      acc = acc + X[i, s, 0] * tf.cast(s + 1, tf.float32)
    ta = ta.write(t, acc + X[i, t, 1])
  return ta.stack()


W_NS = tf.constant(rng.normal(size=[D, H]).astype(np.float32))


def p_no_element_shape(i):
  ta = tf.TensorArray(tf.float32, size=T)          # element shape inferred from writes
  for t in tf.range(T):
    ta = ta.write(t, tf.nn.relu(tf.linalg.matvec(W_NS, X[i, t], transpose_a=True)))
  return tf.reduce_max(ta.stack(), axis=0), ta.stack()


def p_while_max_iter(i):
  # data-dependent stop, bounded by maximum_iterations
  def cond(t, h):
    return tf.norm(h) < 2.5

  def step(t, h):
    return t + 1, h + tf.abs(X[i, t])

  t, h = tf.while_loop(cond, step, (tf.constant(0), tf.zeros([D])), maximum_iterations=T)
  return t, h


def p_threshold_count(i):
  total = tf.constant(0.0)
  k = tf.constant(0)
  while total < 3.0 and k < T:
    total += tf.abs(X[i, k, 0]) + 0.1
    k += 1
  return k, total


def p_two_pass(i):
  fwd = tf.TensorArray(tf.float32, size=T)
  h = tf.zeros([D])
  for t in tf.range(T):
    h = 0.9 * h + X[i, t]
    fwd = fwd.write(t, h)
  bwd = tf.TensorArray(tf.float32, size=T)
  g = tf.zeros([D])
  for t in tf.range(T - 1, -1, -1):
    g = 0.5 * g + fwd.read(t)
    bwd = bwd.write(t, g)
  return bwd.stack()


def p_scan(i):
  return tf.scan(lambda a, x: 0.8 * a + x, X[i], initializer=tf.zeros([D]))


def p_foldl_int(i):
  return tf.foldl(lambda a, x: a * 2 + x, XI[i], initializer=tf.constant(0))


def p_inner_map_fn(i):
  return tf.map_fn(lambda row: tf.reduce_sum(tf.sin(row)) * row, X[i])


def p_collatz(i):
  m = COLLATZ[i]
  steps = tf.constant(0)
  while m != 1:
    if m % 2 == 0:
      m = m // 2
    else:
      m = 3 * m + 1
    steps += 1
  return steps


def p_tape_through_ta(i):
  xi = X[i]
  with tf.GradientTape() as tape:
    tape.watch(xi)
    ta = tf.TensorArray(tf.float32, size=T)
    h = tf.zeros([D])
    for t in tf.range(T):
      h = tf.tanh(h * 0.7 + xi[t])
      ta = ta.write(t, h * h)
    loss = tf.reduce_sum(ta.stack())
  return loss, tape.gradient(loss, xi)


def p_matrix_power_f64(i):
  ta = tf.TensorArray(tf.float64, size=T, element_shape=[2, 2])
  m = tf.eye(2, dtype=tf.float64)
  for t in tf.range(T):
    m = tf.matmul(m, MATS[i])
    ta = ta.write(t, m)
  return ta.stack()


def p_read_argmax(i):
  ta = tf.TensorArray(tf.float32, size=T, clear_after_read=False, element_shape=[D])
  for t in tf.range(T):
    ta = ta.write(t, X[i, t] * 2.0)
  k = tf.argmax(X[i, :, 0], output_type=tf.int32)
  return ta.read(k), ta.read(T - 1 - k), ta.stack()


NT = tf.Variable(4)


def p_trip_from_variable(i):
  # trip count read from a variable: shared by every example
  ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[D])
  for t in tf.range(NT):
    ta = ta.write(t, X[i, t] + 1.0)
  return ta.stack()


def p_ta_in_explicit_while(i):
  def step(t, h, ta):
    h = tf.sigmoid(h + X[i, t])
    return t + 1, h, ta.write(t, h)

  _, h, ta = tf.while_loop(lambda t, h, ta: t < LENS1[i], step,
                           (0, tf.zeros([D]), tf.TensorArray(tf.float32, size=T)),
                           parallel_iterations=4)
  return h, ta.stack()


def p_last_of_dynamic(i):
  # a dynamic-size array of per-example length, read only at its last element and size
  ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[D],
                      clear_after_read=False)
  for t in tf.range(LENS1[i]):
    ta = ta.write(t, X[i, t] * tf.cast(t + 1, tf.float32))
  return ta.read(ta.size() - 1), ta.read(0), ta.size()


def p_ta_of_inner_stacks(i):
  # an inner loop fills an inner TensorArray, its stack is written to the outer one
  outer = tf.TensorArray(tf.float32, size=T, element_shape=[3, D])
  for t in tf.range(T):
    inner = tf.TensorArray(tf.float32, size=3)
    for s in tf.range(3):
      inner = inner.write(s, X[i, t] * tf.cast(s, tf.float32) + X[i, (t + s) % T])
    outer = outer.write(t, inner.stack())
  return outer.stack()


def p_scatter_gather(i):
  ta = tf.TensorArray(tf.float32, size=T, element_shape=[D], clear_after_read=False)
  ta = ta.scatter(tf.constant([5, 3, 1, 0, 2, 4]), X[i])
  return ta.stack(), ta.gather(tf.range(2, 5))


def p_ta_split(i):
  # split a flat per-example vector into a TensorArray of 3 equal pieces
  tb = tf.TensorArray(tf.float32, size=3).split(tf.reshape(X[i], [-1]), [6, 6, 6])
  return tb.stack(), tb.read(1)


def p_break_per_example(i):
  # autograph loop with a per-example `break`
  ta = tf.TensorArray(tf.float32, size=T, element_shape=[])
  count = tf.constant(0)
  for t in tf.range(T):
    if X[i, t, 0] < -0.5:
      break
    ta = ta.write(t, X[i, t, 0])
    count += 1
  return count, ta.stack()


def p_continue_int32(i):
  total = tf.constant(0)
  for t in tf.range(T):
    if XI[i, t] % 2 == 0:
      continue
    total += XI[i, t] * (t + 1)
  return total


def p_read_previous(i):
  # each step reads the state written two steps earlier (a skip connection through the array)
  ta = tf.TensorArray(tf.float32, size=T, element_shape=[D], clear_after_read=False)
  h = tf.zeros([D])
  for t in tf.range(LENS1[i]):
    if t >= 2:
      skip = ta.read(t - 2)
    else:
      skip = tf.zeros([D])
    h = tf.tanh(0.5 * h + 0.5 * skip + X[i, t])
    ta = ta.write(t, h)
  return ta.stack(), h


PFOR_PROGRAMS = {
    "fixed_ta_cumsum": (p_fixed_ta_cumsum, ALL),
    "dynamic_ta_per_example": (p_dynamic_ta_per_example, NOXLA + ("runtime_n0",)),
    "fixed_ta_per_example_trip": (p_fixed_ta_per_example_trip, ALL),
    "unstack_reverse_f64": (p_unstack_reverse_f64, ALL),
    "gather_read": (p_gather_read, ALL),
    "concat_int32": (p_concat_int32, ALL),
    "multi_dtype": (p_multi_dtype, ALL),
    "nested_shared": (p_nested_shared, ALL),
    "nested_per_example": (p_nested_per_example, ALL),
    "no_element_shape": (p_no_element_shape, ALL),
    "while_max_iter": (p_while_max_iter, ALL),
    "threshold_count": (p_threshold_count, ALL),
    "two_pass": (p_two_pass, ALL),
    "scan": (p_scan, ALL),
    "foldl_int": (p_foldl_int, ALL),
    "inner_map_fn": (p_inner_map_fn, ALL),
    "collatz": (p_collatz, ALL + ("runtime_n0",)),
    "tape_through_ta": (p_tape_through_ta, ALL),
    "matrix_power_f64": (p_matrix_power_f64, ALL),
    "read_argmax": (p_read_argmax, ALL),
    "trip_from_variable": (p_trip_from_variable, NOXLA),
    "ta_in_explicit_while": (p_ta_in_explicit_while, ALL),
    "last_of_dynamic": (p_last_of_dynamic, NOXLA),    # TF's own XLA refuses it too
    "ta_of_inner_stacks": (p_ta_of_inner_stacks, ALL),
    "scatter_gather": (p_scatter_gather, ALL),
    "ta_split": (p_ta_split, ("eager", "function")),
    "break_per_example": (p_break_per_example, ALL),
    "continue_int32": (p_continue_int32, ALL),
    "read_previous": (p_read_previous, ALL),
}

# ---------------------------------------------------------------- area 2: hand RNNs

W = tf.Variable(rng.normal(size=[D, H]).astype(np.float32) * 0.5, name="W")
U = tf.Variable(rng.normal(size=[H, H]).astype(np.float32) * 0.4, name="U")
BIAS = tf.Variable(rng.normal(size=[H]).astype(np.float32) * 0.1, name="b")
V = tf.Variable(rng.normal(size=[H, 1]).astype(np.float32), name="V")
UNUSED = tf.Variable(tf.ones([2]), name="unused")
Y = tf.constant(rng.normal(size=[B]).astype(np.float32))
W64 = tf.Variable(rng.normal(size=[D, D]) * 0.4)
U64 = tf.Variable(rng.normal(size=[D, D]) * 0.4)


def p_tape_rnn_states(i):
  with tf.GradientTape() as tape:
    def step(t, h, ta):
      h = tf.tanh(tf.matmul(X[i, t][None], W) + tf.matmul(h, U) + BIAS)
      return t + 1, h, ta.write(t, h[0])
    _, _, ta = tf.while_loop(lambda t, h, ta: t < T, step,
                             (0, tf.zeros([1, H]), tf.TensorArray(tf.float32, size=T)),
                             maximum_iterations=T)
    states = ta.stack()
    loss = tf.reduce_mean(tf.square(states - 0.1))
  gw, gu, gb = tape.gradient(loss, [W, U, BIAS])
  return loss, gw, gu, gb


def p_tape_rnn_len_masked(i):
  # per-example length, fixed-size TA (zeros after the length), gradient w.r.t. weights
  # and the input sequence
  xi = X[i]
  with tf.GradientTape() as tape:
    tape.watch(xi)
    ta = tf.TensorArray(tf.float32, size=T, element_shape=[H])
    h = tf.zeros([H])
    for t in tf.range(LENS1[i]):
      tf.autograph.experimental.set_loop_options(maximum_iterations=T)
      h = tf.tanh(tf.linalg.matvec(W, xi[t], transpose_a=True) + tf.linalg.matvec(U, h,
                                                                                 transpose_a=True))
      ta = ta.write(t, h)
    loss = tf.reduce_sum(ta.stack() * tf.range(1.0, T + 1.0)[:, None])
  gw, gu, gx = tape.gradient(loss, [W, U, xi])
  return gw, gu, gx


WZ = tf.Variable(rng.normal(size=[D + H, H]).astype(np.float32) * 0.4)
WH = tf.Variable(rng.normal(size=[D + H, H]).astype(np.float32) * 0.4)


def p_gru_like_tape(i):
  xi = X[i]
  with tf.GradientTape() as tape:
    tape.watch(xi)
    def step(t, h):
      xh = tf.concat([xi[t][None], h], axis=1)
      z = tf.sigmoid(tf.matmul(xh, WZ))
      c = tf.tanh(tf.matmul(tf.concat([xi[t][None], h * z], 1), WH))
      return t + 1, (1 - z) * h + z * c
    _, h = tf.while_loop(lambda t, h: t < T, step, (0, tf.zeros([1, H])), maximum_iterations=T)
    loss = tf.reduce_sum(h * h)
  return tape.gradient(loss, [WZ, WH, xi])


PFOR_PROGRAMS.update({
    "tape_rnn_states": (p_tape_rnn_states, ALL),
    "tape_rnn_len_masked": (p_tape_rnn_len_masked, ("eager", "xla", "runtime_n")),
    "gru_like_tape": (p_gru_like_tape, ALL),
})


XLA_AUTOGRAPH_GRAD = (
    "ConversionError under XLA for a tape through an autograph `for t in tf.range(T)` loop of a "
    "static trip count, which TF's own XLA compiles (README: 'as in TensorFlow'); "
    "/tmp/users6/repro_1.py")
XLA_SET_LOOP_OPTIONS = (
    "under XLA, set_loop_options(maximum_iterations=T) (the fix the error suggests) gives an "
    "obscure 'no converter is registered for op type EmptyTensorList'; /tmp/users6/repro_2.py")
TA_SPLIT = ("TensorArray.split of a fixed size and equal piece lengths: ConversionError "
            "(TensorListSplit 'differs per iteration', even with the fallback on) whose "
            "suggested fix the program already follows; /tmp/users6/repro_3.py")
PFOR_XFAIL = {
    ("ta_split", "eager"): TA_SPLIT,
    ("ta_split", "function"): TA_SPLIT,
    ("tape_through_ta", "xla"): XLA_AUTOGRAPH_GRAD,
    ("tape_rnn_len_masked", "xla"): XLA_SET_LOOP_OPTIONS,
}


def _params():
  out = []
  for k, (_, ms) in PFOR_PROGRAMS.items():
    for m in ms:
      reason = PFOR_XFAIL.get((k, m))
      marks = [pytest.mark.xfail(strict=True, raises=vectorize.ConversionError,
                                 reason=reason)] if reason else []
      out.append(pytest.param(k, m, marks=marks, id=f"{k}-{m}"))
  return out


@pytest.mark.parametrize("name,mode", _params())
def test_pfor_program(name, mode):
  body = PFOR_PROGRAMS[name][0]
  check_pfor(body, B, mode)


# per-example gradient helpers ---------------------------------------------------------


def _dense(g):
  if g is None:
    return None
  return tf.convert_to_tensor(g)


def ref_per_example(loss_fn, variables, *batch):
  b = tf.nest.flatten(batch)[0].shape[0]
  per = []
  for k in range(b):
    ex = tf.nest.map_structure(lambda t: t[k], batch)
    with tf.GradientTape() as tape:
      loss = loss_fn(*ex)
    per.append([_dense(g) for g in tape.gradient(loss, tf.nest.flatten(variables))])
  out = []
  for j, v in enumerate(tf.nest.flatten(variables)):
    gs = [p[j] for p in per]
    if all(g is None for g in gs):     # the loss never uses the variable
      out.append(None)
    else:                              # unconnected in one example only (a zero-step loop)
      out.append(tf.stack([tf.zeros(v.shape, v.dtype) if g is None else g for g in gs]))
  return out


def ref_clipped(loss_fn, variables, *batch, clip):
  per = ref_per_example(loss_fn, variables, *batch)
  sq = sum(tf.reduce_sum(tf.reshape(g, [g.shape[0], -1]) ** 2, axis=1)
           for g in per if g is not None)
  norms = tf.sqrt(sq)
  f = tf.minimum(1.0, clip / norms)
  sums = [None if g is None else
          tf.reduce_sum(g * tf.reshape(tf.cast(f, g.dtype), [-1] + [1] * (g.shape.rank - 1)),
                        axis=0) for g in per]
  return sums, norms


def run_helper(fn, mode):
  if mode == "eager":
    return fn()
  if mode == "function":
    return tf.function(fn)()
  if mode == "xla":
    return tf.function(fn, jit_compile=True)()
  raise ValueError(mode)


def hand_rnn_loss(x, y):
  h = tf.zeros([1, H])
  for t in tf.range(T):
    h = tf.tanh(tf.matmul(x[t][None], W) + tf.matmul(h, U) + BIAS)
  return tf.reduce_sum(tf.square(tf.matmul(h, V) - y))


@pytest.mark.parametrize("mode", ["eager", "function", pytest.param("xla", marks=pytest.mark.xfail(
    strict=True, raises=vectorize.ConversionError, reason=XLA_AUTOGRAPH_GRAD))])
def test_per_example_hand_rnn(mode):
  vs = [W, U, BIAS, V]
  want = ref_per_example(hand_rnn_loss, vs, X, Y)
  got = run_helper(lambda: vectorize.per_example_gradients(hand_rnn_loss, vs, X, Y, **NOFB),
                   mode)
  assert_same(list(got), want)


def test_per_example_hand_rnn_empty_batch():
  vs = [W, U, BIAS, V]
  got = vectorize.per_example_gradients(hand_rnn_loss, vs, X[:0], Y[:0], **NOFB)
  assert [g.shape.as_list() for g in got] == [[0] + v.shape.as_list() for v in vs]


def test_per_example_hand_rnn_runtime_batch():
  vs = [W, U, BIAS, V]
  want = ref_per_example(hand_rnn_loss, vs, X[:3], Y[:3])
  f = tf.function(lambda x, y: vectorize.per_example_gradients(hand_rnn_loss, vs, x, y, **NOFB),
                  input_signature=[tf.TensorSpec([None, T, D]), tf.TensorSpec([None])])
  assert_same(list(f(X[:3], Y[:3])), want)


def len_rnn_loss(x, n):
  h = tf.zeros([1, H])
  t = tf.constant(0)
  while t < n:
    h = tf.tanh(tf.matmul(x[t][None], W) + tf.matmul(h, U))
    t += 1
  return tf.reduce_sum(h * tf.transpose(V))


@pytest.mark.parametrize("mode", ["eager"])
def test_per_example_len_rnn(mode):
  want = ref_per_example(len_rnn_loss, [W, U, V], X, LENS)
  got = run_helper(lambda: vectorize.per_example_gradients(len_rnn_loss, [W, U, V], X, LENS,
                                                           **NOFB), mode)
  assert_same(list(got), want)


def len_rnn_loss_bounded(x, n):
  h = tf.zeros([1, H])
  def step(t, h):
    return t + 1, tf.tanh(tf.matmul(x[t][None], W) + tf.matmul(h, U))
  _, h = tf.while_loop(lambda t, h: t < n, step, (0, h), maximum_iterations=T)
  return tf.reduce_sum(h * tf.transpose(V))


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_per_example_len_rnn_bounded(mode):
  want = ref_per_example(len_rnn_loss_bounded, [W, U, V], X, LENS)
  got = run_helper(lambda: vectorize.per_example_gradients(
      len_rnn_loss_bounded, [W, U, V], X, LENS, **NOFB), mode)
  assert_same(list(got), want)


def transposed_acc_loss(x):
  # hand-written accumulators with transposed matmuls
  def step(t, h, acc):
    xt = x[t][:, None]                                           # [D, 1]
    h = tf.tanh(tf.matmul(W, xt, transpose_a=True) + tf.matmul(U, h, transpose_a=True))
    return t + 1, h, acc + tf.matmul(h, tf.matmul(h, V, transpose_a=True))  # [H,1] @ [1,1]
  _, h, acc = tf.while_loop(lambda t, h, acc: t < T, step,
                            (0, tf.zeros([H, 1]), tf.zeros([H, 1])), maximum_iterations=T)
  return tf.reduce_sum(acc) + tf.reduce_sum(tf.matmul(acc, acc, transpose_a=True))


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_per_example_transposed_acc(mode):
  vs = {"W": W, "U": U, "V": V}
  want = ref_per_example(transposed_acc_loss, [vs["U"], vs["V"], vs["W"]], X)
  got = run_helper(lambda: vectorize.per_example_gradients(transposed_acc_loss, vs, X, **NOFB),
                   mode)
  assert isinstance(got, dict) and sorted(got) == ["U", "V", "W"]
  assert_same([got["U"], got["V"], got["W"]], want)


def shared_f64_loss(x):
  # the same weight applied twice per step (input and recurrence), float64
  def step(t, h):
    return t + 1, tf.tanh(tf.linalg.matvec(W64, x[t]) + tf.linalg.matvec(W64, h) * 0.5
                          + tf.linalg.matvec(U64, h, transpose_a=True))
  _, h = tf.while_loop(lambda t, h: t < T, step, (0, tf.zeros([D], tf.float64)),
                       maximum_iterations=T)
  return tf.reduce_sum(h ** 2)


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_per_example_shared_weights_f64(mode):
  want = ref_per_example(shared_f64_loss, [W64, U64], X64)
  got = run_helper(lambda: vectorize.per_example_gradients(shared_f64_loss, [W64, U64], X64,
                                                           **NOFB), mode)
  assert_same(list(got), want)


def test_per_example_unused_variable_is_none():
  want = ref_per_example(hand_rnn_loss, [W, UNUSED, U], X, Y)
  assert want[1] is None
  got = vectorize.per_example_gradients(hand_rnn_loss, [W, UNUSED, U], X, Y, **NOFB)
  assert_same(list(got), want)


def hand_rnn_loss_bounded(x, y):
  def step(t, h):
    return t + 1, tf.tanh(tf.matmul(x[t][None], W) + tf.matmul(h, U) + BIAS)
  _, h = tf.while_loop(lambda t, h: t < T, step, (0, tf.zeros([1, H])), maximum_iterations=T)
  return tf.reduce_sum(tf.square(tf.matmul(h, V) - y))


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_clipped_hand_rnn(mode):
  vs = [W, U, BIAS, V]
  want, want_norms = ref_clipped(hand_rnn_loss_bounded, vs, X, Y, clip=0.5)
  got, norms = run_helper(lambda: vectorize.clipped_gradient_sum(
      hand_rnn_loss_bounded, vs, X, Y, l2_norm_clip=0.5, return_norms=True, **NOFB), mode)
  assert_same(list(got), want)
  assert_same(norms, want_norms)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_clipped_len_rnn_bounded(mode):
  vs = [W, U, V]
  want, want_norms = ref_clipped(len_rnn_loss_bounded, vs, X, LENS1, clip=0.3)
  got, norms = run_helper(lambda: vectorize.clipped_gradient_sum(
      len_rnn_loss_bounded, vs, X, LENS1, l2_norm_clip=0.3, return_norms=True, **NOFB), mode)
  assert_same(list(got), want)
  assert_same(norms, want_norms)


def test_clipped_len_rnn_with_empty_sequence():
  # LENS has a zero-length example: its gradient is zero, its norm 0, its clip factor 1
  vs = [W, U, V]
  want, want_norms = ref_clipped(len_rnn_loss_bounded, vs, X, LENS, clip=0.3)
  assert float(want_norms[3]) == 0.0
  got, norms = vectorize.clipped_gradient_sum(len_rnn_loss_bounded, vs, X, LENS,
                                              l2_norm_clip=0.3, return_norms=True, **NOFB)
  assert_same(list(got), want)
  assert_same(norms, want_norms)


@pytest.mark.parametrize("name", ["collatz", "fixed_ta_per_example_trip", "read_previous"])
def test_pfor_parallel_iterations(name):
  body = PFOR_PROGRAMS[name][0]
  want = ref_loop(body, B)
  got = tf.function(lambda: vectorize.pfor(body, B, parallel_iterations=2, **NOFB))()
  assert_same(got, want)


# ---------------------------------------------------------------- area 3: Keras RNNs

KT = 5            # Keras sequence length
VOCAB = 11
TOK = tf.constant([[3, 5, 2, 0, 0], [7, 1, 0, 0, 0], [4, 4, 9, 10, 6], [2, 8, 3, 1, 0]],
                  tf.int32)
KY = tf.constant([1, 0, 2, 1], tf.int32)
KX = tf.constant(rng.normal(size=[4, KT, D]).astype(np.float32))


def _ce(y, logits):
  return tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits)


def build(layers, inp):
  keras.utils.set_random_seed(7)
  m = keras.Sequential([keras.Input(inp)] + layers)
  return m


LSTM_M = build([keras.layers.LSTM(4), keras.layers.Dense(3)], (KT, D))
GRU_SEQ_M = build([keras.layers.GRU(4, return_sequences=True), keras.layers.Dense(3)], (KT, D))
SRNN_EMB_M = build([keras.layers.Embedding(VOCAB, 3, mask_zero=True), keras.layers.SimpleRNN(4),
                    keras.layers.Dense(3)], (KT,))
BI_EMB_M = build([keras.layers.Embedding(VOCAB, 3, mask_zero=True),
                  keras.layers.Bidirectional(keras.layers.LSTM(3)), keras.layers.Dense(3)], (KT,))
GRU_POOL_M = build([keras.layers.Embedding(VOCAB, 3, mask_zero=True),
                    keras.layers.GRU(4, return_sequences=True),
                    keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(3)], (KT,))
STACKED_M = build([keras.layers.LSTM(4, return_sequences=True), keras.layers.GRU(3),
                   keras.layers.Dense(3)], (KT, D))
LSTM_EMB_SEQ_M = build([keras.layers.Embedding(VOCAB, 3, mask_zero=True),
                        keras.layers.LSTM(3, return_sequences=True), keras.layers.Dense(3)],
                       (KT,))


def loss_last(model):
  def loss_fn(x, y):
    return _ce(y, model(x[None])[0])
  return loss_fn


def loss_seq(model):
  def loss_fn(x, y):
    logits = model(x[None])[0]                         # [KT, 3]
    return tf.reduce_mean(_ce(tf.fill([KT], y), logits))
  return loss_fn


KX_PAD = tf.concat([KX[:, :3], tf.zeros([4, 2, D])], axis=1) * tf.constant(
    [1.0, 1.0, 1.0, 0.0], shape=[4, 1, 1]) + tf.concat(
        [tf.zeros([3, KT, D]), KX[3:]], axis=0)        # rows 0-2 padded after 3 steps
MASKING_LSTM_M = build([keras.layers.Masking(0.0), keras.layers.LSTM(4), keras.layers.Dense(3)],
                       (KT, D))
BI_GRU_SEQ_M = build([keras.layers.Embedding(VOCAB, 3, mask_zero=True),
                      keras.layers.Bidirectional(keras.layers.GRU(2, return_sequences=True)),
                      keras.layers.Dense(3)], (KT,))
CELL_UNROLL_M = build([keras.layers.RNN(keras.layers.LSTMCell(3), unroll=True),
                       keras.layers.Dense(3)], (KT, D))


def loss_seq_masked(model):
  # per-position loss only where the token is not padding
  def loss_fn(x, y):
    logits = model(x[None])[0]
    m = tf.cast(x > 0, tf.float32)
    return tf.reduce_sum(_ce(tf.fill([KT], y), logits) * m) / tf.maximum(tf.reduce_sum(m), 1.0)
  return loss_fn


KERAS_CASES = {
    "lstm": (LSTM_M, loss_last, KX),
    "gru_seq": (GRU_SEQ_M, loss_seq, KX),
    "srnn_emb_mask": (SRNN_EMB_M, loss_last, TOK),
    "bi_lstm_emb_mask": (BI_EMB_M, loss_last, TOK),
    "gru_pool_mask": (GRU_POOL_M, loss_last, TOK),
    "stacked_lstm_gru": (STACKED_M, loss_last, KX),
    "lstm_emb_seq_mask": (LSTM_EMB_SEQ_M, loss_seq, TOK),
    "masking_lstm": (MASKING_LSTM_M, loss_last, KX_PAD),
    "bi_gru_seq_masked_loss": (BI_GRU_SEQ_M, loss_seq_masked, TOK),
    "lstm_cell_unrolled": (CELL_UNROLL_M, loss_last, KX),
}


_REF_CACHE = {}


def cached(key, fn):
  if key not in _REF_CACHE:
    _REF_CACHE[key] = fn()
  return _REF_CACHE[key]


KERAS_PER_EXAMPLE = [(c, m) for c in KERAS_CASES for m in ("eager", "xla")
                     if (c, m) not in {("bi_lstm_emb_mask", "eager"), ("stacked_lstm_gru", "eager"),
                                       ("masking_lstm", "xla"), ("gru_pool_mask", "xla")}] + [
    ("lstm", "function"), ("srnn_emb_mask", "function")]


@pytest.mark.parametrize("case,mode", KERAS_PER_EXAMPLE)
def test_keras_per_example(case, mode):
  model, mk, x = KERAS_CASES[case]
  loss_fn = mk(model)
  want = cached(("pe", case), lambda: ref_per_example(loss_fn, model.trainable_variables, x, KY))
  got = run_helper(lambda: vectorize.per_example_gradients(loss_fn, model, x, KY, **NOFB), mode)
  assert_same([_dense(g) for g in got], want)


@pytest.mark.parametrize("case,mode", [
    ("lstm", "eager"), ("lstm", "xla"), ("bi_lstm_emb_mask", "eager"),
    ("gru_pool_mask", "xla"), ("srnn_emb_mask", "function"),
    ("lstm_emb_seq_mask", "xla"), ("masking_lstm", "eager"), ("bi_gru_seq_masked_loss", "xla")])
def test_keras_clipped(case, mode):
  model, mk, x = KERAS_CASES[case]
  loss_fn = mk(model)
  want, want_norms = cached(("clip", case), lambda: ref_clipped(
      loss_fn, model.trainable_variables, x, KY, clip=0.2))
  got, norms = run_helper(lambda: vectorize.clipped_gradient_sum(
      loss_fn, model, x, KY, l2_norm_clip=0.2, return_norms=True, **NOFB), mode)
  assert_same([_dense(g) for g in got], want)
  assert_same(norms, want_norms)


def test_keras_clipped_has_aux_lstm():
  model = LSTM_M

  def loss_fn(x, y):
    logits = model(x[None])[0]
    return _ce(y, logits), {"logits": logits, "pred": tf.argmax(logits, output_type=tf.int32)}

  want, want_norms = ref_clipped(lambda x, y: loss_fn(x, y)[0], model.trainable_variables,
                                 KX, KY, clip=0.2)
  want_aux = ref_loop(lambda i: loss_fn(KX[i], KY[i])[1], 4)
  got, norms, aux = tf.function(lambda: vectorize.clipped_gradient_sum(
      loss_fn, model, KX, KY, l2_norm_clip=0.2, return_norms=True, has_aux=True, **NOFB))()
  assert_same(list(got), want)
  assert_same(norms, want_norms)
  assert_same(aux, want_aux)


def test_keras_empty_batch_rnn_mask():
  model = SRNN_EMB_M
  got = vectorize.per_example_gradients(loss_last(model), model, TOK[:0], KY[:0], **NOFB)
  assert [g.shape.as_list() for g in got] == [[0] + v.shape.as_list()
                                              for v in model.trainable_variables]


# ---------------------------------------------------------------- area 4: jacobians


def ref_jacobian(f, x):
  """d f(x)[k...] / d x, one gradient per output element, eagerly."""
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(x)
    y = f(x)
    ys = tf.reshape(y, [-1])
    parts = [ys[k] for k in range(ys.shape[0])]
  rows = [tape.gradient(p, x) for p in parts]
  return tf.reshape(tf.stack(rows), y.shape.as_list() + x.shape.as_list())


def cumprod_loop(x):
  ta = tf.TensorArray(x.dtype, size=T)
  p = tf.ones([], x.dtype)
  for t in tf.range(T):
    p = p * x[t]
    ta = ta.write(t, p)
  return ta.stack()


XV = tf.constant(rng.uniform(0.5, 1.5, size=[T]).astype(np.float32))


def test_jacobian_cumprod_loop():
  want = ref_jacobian(cumprod_loop, XV)

  @tf.function
  def f(x):
    return vectorize.jacobian(cumprod_loop(x), x)
  assert_same(f(XV), want)


def test_jacobian_cumprod_loop_xla():
  want = ref_jacobian(cumprod_loop, XV)

  @tf.function(jit_compile=True)
  def f(x):
    return vectorize.jacobian(cumprod_loop(x), x)
  assert_same(f(XV), want)


def rnn_final_batched(x):          # x [b, T, D] -> [b, H]
  h = tf.zeros([tf.shape(x)[0], H])
  for t in tf.range(T):
    h = tf.tanh(tf.matmul(x[:, t], W) + tf.matmul(h, U))
  return h


def ref_batch_jacobian(f, x):
  rows = []
  for k in range(x.shape[0]):
    rows.append(ref_jacobian(lambda xk: f(xk[None])[0], x[k]))
  return tf.stack(rows)


@pytest.mark.parametrize("jit", [False, True])
def test_batch_jacobian_rnn(jit):
  want = ref_batch_jacobian(rnn_final_batched, X)

  @tf.function(jit_compile=jit)
  def f(x):
    return vectorize.batch_jacobian(rnn_final_batched(x), x)
  got = f(X)
  assert got.shape.as_list() == [B, H, T, D]
  assert_same(got, want)


def ta_scan_batched(x):            # [b, T, D] -> [b, T, D] via a TensorArray
  ta = tf.TensorArray(tf.float32, size=T)
  a = tf.zeros_like(x[:, 0])
  for t in tf.range(T):
    a = tf.sin(a) + x[:, t] * 0.5
    ta = ta.write(t, a)
  return tf.transpose(ta.stack(), [1, 0, 2])


def test_batch_jacobian_fn_ta_scan():
  want = ref_batch_jacobian(ta_scan_batched, X[:3])
  got = vectorize.batch_jacobian_fn(ta_scan_batched)(X[:3])
  assert_same(got, want)


A4 = tf.constant(rng.normal(size=[3, 3]).astype(np.float32))


def power_iter(m):
  v = tf.ones([3]) / tf.sqrt(3.0)
  for _ in tf.range(5):
    w = tf.linalg.matvec(m, v)
    v = w / tf.norm(w)
  return tf.stack([tf.tensordot(v, tf.linalg.matvec(m, v), 1), v[0]])


def test_jacobian_fn_power_iteration():
  m = tf.matmul(A4, A4, transpose_b=True) + 3.0 * tf.eye(3)
  want = ref_jacobian(power_iter, m)
  got = vectorize.jacobian_fn(power_iter)(m)
  assert_same(got, want, rtol=1e-3, atol=1e-4)


def newton_sqrt(x):                # elementwise, per-element trip count
  def one(a):
    y = a
    k = tf.constant(0)
    while tf.abs(y * y - a) > 1e-6 * a and k < 30:
      y = 0.5 * (y + a / y)
      k += 1
    return y
  return tf.stack([one(x[k]) for k in range(x.shape[0])])


def test_jacobian_newton_sqrt_while():
  x = tf.constant([4.0, 2.0, 9.0], tf.float64)
  want = ref_jacobian(newton_sqrt, x)

  @tf.function
  def f(x):
    return vectorize.jacobian(newton_sqrt(x), x)
  got = f(x)
  assert_same(got, want, rtol=1e-6, atol=1e-9)


def test_jacobian_wrt_variable_rnn_states():
  def states(_):
    ta = tf.TensorArray(tf.float32, size=T)
    h = tf.zeros([H])
    for t in tf.range(T):
      h = tf.tanh(tf.linalg.matvec(W, X[0, t], transpose_a=True) + tf.linalg.matvec(U, h,
                                                                                  transpose_a=True))
      ta = ta.write(t, h)
    return ta.stack()                       # [T, H]

  with tf.GradientTape(persistent=True) as tape:
    y = states(None)
    parts = [y[a, b] for a in range(T) for b in range(H)]
  want = tf.reshape(tf.stack([tape.gradient(p, U) for p in parts]), [T, H, H, H])

  @tf.function
  def f():
    return vectorize.jacobian(states(None), U)
  assert_same(f(), want)


# ---------------------------------------------------------------- map_fn / vectorized_map


def masked_rnn_elem(elem):
  x, n = elem
  h = tf.zeros([D])
  for t in tf.range(n):
    h = tf.tanh(h * 0.5 + x[t])
  return h, n * 2


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
def test_map_fn_loop_inside(mode):
  want = ref_loop(lambda i: masked_rnn_elem((X[i], LENS[i])), B)
  got = run_helper(lambda: vectorize.map_fn(
      masked_rnn_elem, (X, LENS), fn_output_signature=(tf.float32, tf.int32)), mode)
  assert_same(got, want)


def dict_rnn_elem(e):
  ta = tf.TensorArray(tf.float64, size=T)
  h = tf.zeros([D], tf.float64)
  for t in tf.range(T):
    h = tf.tanh(tf.linalg.matvec(W64, e["x"][t]) + h * e["decay"])
    ta = ta.write(t, h)
  return {"states": ta.stack(), "last": h}


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
def test_vectorized_map_dict_rnn(mode):
  decay = tf.constant([0.1, 0.5, 0.9, 0.0, 1.0], tf.float64)
  want = ref_loop(lambda i: dict_rnn_elem({"x": X64[i], "decay": decay[i]}), B)
  got = run_helper(lambda: vectorize.vectorized_map(dict_rnn_elem, {"x": X64, "decay": decay},
                                                     **NOFB), mode)
  assert_same(got, want)
