"""Users' programs, round 17: sequence decoding, sequence losses and metrics, written for ONE
example from the README alone and checked against the per-example loop.

Greedy and beam-search decoders (tf.while_loop and autograph `for ... in tf.range` with
`break`, top_k, gathers of beams, finished flags, length penalties, TensorArrays of emitted
tokens, Keras cells as the step model), CTC (sparse-label losses, greedy and beam decoders with
sparse outputs, edit distances, per-example gradients and jacobians), sampled losses and
candidate samplers, Keras losses and metrics, and the sequence utilities around them.

Known bugs are kept as minimal `xfail(strict=True)` programs at the end of the file.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.users._util import assert_same, loop

def run(body, n, mode):
  """pfor of `body` over n iterations, in the README's modes (each test picks a few of them:
  CI time)."""
  if mode == "eager":
    return vectorize.pfor(body, n)
  if mode == "function":
    return tf.function(lambda: vectorize.pfor(body, n))()
  if mode == "xla":
    return tf.function(lambda: vectorize.pfor(body, n), jit_compile=True)()
  if mode == "runtime_n":
    f = tf.function(lambda k: vectorize.pfor(body, k),
                    input_signature=[tf.TensorSpec([], tf.int32)])
    return f(tf.constant(n))
  raise ValueError(mode)


def rank1(rt):
  """`tf.ragged.stack` of dense rows marks every axis ragged; pfor keeps the inner axes
  uniform (ragged rank 1, as the README says). The loop's value in pfor's form."""
  if not isinstance(rt, tf.RaggedTensor) or rt.ragged_rank == 1:
    return rt
  rows_ = [rt[k].to_tensor() if isinstance(rt[k], tf.RaggedTensor) else rt[k]
           for k in range(rt.shape[0])]
  inner = next((r.shape[1:] for r in rows_ if r.shape[0]), rows_[0].shape[1:])
  rows_ = [r if r.shape[0] else tf.zeros([0] + inner.as_list(), r.dtype) for r in rows_]
  return tf.RaggedTensor.from_row_lengths(tf.concat(rows_, 0), [r.shape[0] for r in rows_])


def expected(body, n):
  return tf.nest.map_structure(rank1, loop(body, n))


def check(body, n, mode, exp=None, **kw):
  exp = expected(body, n) if exp is None else exp
  assert_same(run(body, n, mode), exp, **kw)


def sparse_stack(sps):
  """The loop's SparseTensors stacked as the README says pfor returns them."""
  return tf.sparse.concat(0, [tf.sparse.expand_dims(s, 0) for s in sps],
                          expand_nonconcat_dims=True)


def assert_same_sparse(got, exp):
  assert isinstance(got, tf.SparseTensor), type(got)
  np.testing.assert_array_equal(got.dense_shape.numpy(), exp.dense_shape.numpy())
  np.testing.assert_array_equal(got.indices.numpy(), exp.indices.numpy())
  np.testing.assert_array_equal(got.values.numpy(), exp.values.numpy())
  np.testing.assert_array_equal(tf.sparse.to_dense(got).numpy(), tf.sparse.to_dense(exp).numpy())


# ---------------------------------------------------------------- a small decoder's weights
V, H, T, N, K = 6, 4, 5, 4, 3
EOS = 0
_rng = np.random.RandomState(17)
EMB = tf.Variable(_rng.randn(V, H).astype(np.float32), name="emb")
CELL = keras.layers.GRUCell(H)
CELL.build((None, H))
CELL.set_weights([_rng.randn(*w.shape).astype(np.float32) * 0.7 for w in CELL.get_weights()])
PROJ = keras.layers.Dense(V)
PROJ.build((None, H))
_w, _b = PROJ.get_weights()
_b = np.zeros_like(_b)
_b[EOS] = 0.5
PROJ.set_weights([_rng.randn(*_w.shape).astype(np.float32), _b])
U = tf.Variable((_rng.randn(H, H) * 0.5).astype(np.float32), name="U")
_rng.randn(H, V)   # (drawn and dropped: H0 stays the same draw)
_wout = np.random.RandomState(3).randn(H, V).astype(np.float32)
_wout[:, EOS] += 0.3
WOUT = tf.Variable(_wout, name="wout")
H0 = tf.constant(_rng.randn(N, H).astype(np.float32))


def greedy_gru(i):
  """Greedy decoding, GRU cell + Dense, stops at EOS (per-example step counts)."""
  ta = tf.TensorArray(tf.int32, size=T, clear_after_read=False)

  def cond(t, tok, h, ta, fin, score):
    return tf.logical_and(t < T, tf.logical_not(fin))

  def body(t, tok, h, ta, fin, score):
    out, [h2] = CELL(tf.gather(EMB, tok)[None], [h])
    logits = PROJ(out)[0]
    nxt = tf.argmax(logits, output_type=tf.int32)
    lp = tf.nn.log_softmax(logits)
    return t + 1, nxt, h2, ta.write(t, nxt), tf.equal(nxt, EOS), score + lp[nxt]

  t, _, _, ta, _, score = tf.while_loop(
      cond, body, (0, tf.constant(1), H0[i][None], ta, tf.constant(False), tf.constant(0.0)))
  return ta.stack(), t, score


@pytest.mark.parametrize("mode", ("xla",))
def test_greedy_gru_decoder_while_loop(mode):
  exp = expected(greedy_gru, N)
  steps = exp[1].numpy()
  assert len(set(steps.tolist())) > 1, steps   # the examples stop at different steps
  check(greedy_gru, N, mode, exp)


@pytest.mark.parametrize("mode", ("eager",))
def test_greedy_gru_decoder_no_examples(mode):
  toks, steps, score = run(greedy_gru, 0, mode)
  assert (toks.shape, steps.shape, score.shape) == ((0, T), (0,), (0,))
  assert (toks.dtype, steps.dtype, score.dtype) == (tf.int32, tf.int32, tf.float32)


ALPHA = 0.6


def beam_search(i):
  """Beam search: top_k over beams x vocab, gathers of beams and histories, finished beams
  extend with EOS only, stop when all beams end, GNMT length penalty."""
  h = tf.tile(H0[i][None], [K, 1])
  scores = tf.constant([0.0] + [-1e9] * (K - 1))
  hist = tf.zeros([T, K], tf.int32)
  eos_only = tf.one_hot(EOS, V, on_value=0.0, off_value=-1e9)

  def cond(t, toks, h, scores, fin, lens, hist):
    return tf.logical_and(t < T, tf.logical_not(tf.reduce_all(fin)))

  def body(t, toks, h, scores, fin, lens, hist):
    out, [h2] = CELL(tf.gather(EMB, toks), [h])
    lp = tf.nn.log_softmax(PROJ(out))
    lp = tf.where(fin[:, None], eos_only[None], lp)
    top, idx = tf.math.top_k(tf.reshape(scores[:, None] + lp, [-1]), k=K)
    src, tok = idx // V, idx % V
    hist = tf.tensor_scatter_nd_update(tf.gather(hist, src, axis=1), [[t]], tok[None])
    fin2 = tf.gather(fin, src)
    lens2 = tf.gather(lens, src) + tf.cast(tf.logical_not(fin2), tf.int32)
    return (t + 1, tok, tf.gather(h2, src), top, tf.logical_or(fin2, tf.equal(tok, EOS)),
            lens2, hist)

  t, _, _, scores, fin, lens, hist = tf.while_loop(
      cond, body, (0, tf.ones([K], tf.int32), h, scores, tf.zeros([K], tf.bool),
                   tf.zeros([K], tf.int32), hist))
  normed = scores / ((5.0 + tf.cast(lens, tf.float32)) / 6.0) ** ALPHA
  best = tf.argmax(normed, output_type=tf.int32)
  return tf.transpose(hist)[best], normed, t, lens, fin


@pytest.mark.parametrize("mode", ("xla",))
def test_beam_search_while_loop(mode):
  exp = expected(beam_search, N)
  assert len(set(exp[2].numpy().tolist())) > 1
  check(beam_search, N, mode, exp)


def beam_backtrack(i):
  """Autograph: `for t in tf.range(T)` with `break` once the best beam has ended, parent
  pointers and tokens in TensorArrays, then a backward `for` that follows the pointers."""
  h = tf.tile(H0[i][None], [K, 1])
  tok = tf.fill([K], 1)
  score = tf.constant([0.0] + [-1e9] * (K - 1))
  fin = tf.zeros([K], tf.bool)
  parents = tf.TensorArray(tf.int32, size=T, clear_after_read=False)
  tokens = tf.TensorArray(tf.int32, size=T, clear_after_read=False)
  steps = tf.constant(0)
  for t in tf.range(T):
    h = tf.tanh(tf.matmul(h, U) + tf.gather(EMB, tok))
    lp = tf.nn.log_softmax(tf.matmul(h, WOUT))
    lp = tf.where(fin[:, None], tf.one_hot(EOS, V, 0.0, -1e9)[None], lp)
    top, idx = tf.math.top_k(tf.reshape(score[:, None] + lp, [-1]), K)
    par, tok = idx // V, idx % V
    parents = parents.write(t, par)
    tokens = tokens.write(t, tok)
    h = tf.gather(h, par)
    fin = tf.logical_or(tf.gather(fin, par), tok == EOS)
    score = top
    steps = t + 1
    if fin[0]:
      break
  out = tf.TensorArray(tf.int32, size=T)
  b = tf.constant(0)
  for s in tf.range(steps - 1, -1, -1):
    out = out.write(s, tokens.read(s)[b])
    b = parents.read(s)[b]
  return out.stack(), steps, score


@pytest.mark.parametrize("mode", ("function",))
def test_beam_search_autograph_break_and_backtrack(mode):
  exp = expected(beam_backtrack, N)
  assert len(set(exp[1].numpy().tolist())) > 1
  check(beam_backtrack, N, mode, exp)


def greedy_ragged(i):
  """Autograph decoding into a dynamic-size TensorArray: each example's own length (ragged)."""
  h = H0[i]
  tok = tf.constant(1)
  ta = tf.TensorArray(tf.int32, size=0, dynamic_size=True)
  for t in tf.range(T):
    h = tf.tanh(tf.linalg.matvec(U, h, transpose_a=True) + tf.gather(EMB, tok))
    tok = tf.argmax(tf.linalg.matvec(WOUT, h, transpose_a=True), output_type=tf.int32)
    ta = ta.write(t, tok)
    if tok == EOS:
      break
  return ta.stack()


@pytest.mark.parametrize("mode", ("runtime_n",))
def test_greedy_decoder_dynamic_tensorarray_ragged(mode):
  exp = expected(greedy_ragged, N)
  assert isinstance(exp, tf.RaggedTensor)
  check(greedy_ragged, N, mode, exp)


def grow_by_concat(i):
  """Tokens appended by tf.concat under a `[None]` shape invariant (README: the fallback)."""
  def body(t, h, tok, seq):
    h = tf.tanh(h + tf.gather(EMB, tok))
    nt = tf.argmax(tf.linalg.matvec(WOUT, h, transpose_a=True), output_type=tf.int32)
    return t + 1, h, nt, tf.concat([seq, nt[None]], 0)

  def cond(t, h, tok, seq):
    return tf.logical_and(t < T, tf.logical_or(t == 0, tok != EOS))

  out = tf.while_loop(cond, body, (0, H0[i], 1, tf.zeros([0], tf.int32)),
                      shape_invariants=(tf.TensorShape([]), tf.TensorShape([H]),
                                        tf.TensorShape([]), tf.TensorShape([None])))
  return out[3], out[0]


@pytest.mark.parametrize("mode", ("eager", "runtime_n"))
def test_decoder_grows_sequence_by_concat(mode):
  check(grow_by_concat, N, mode)


SEEDS = tf.constant(_rng.randint(0, 1000, size=(N, 2)), tf.int32)


def sampling_decoder(i):
  """Sampling with per-example, per-step stateless seeds (README: equal to the loop)."""
  def body(t, h, tok, ta):
    h = tf.tanh(h + tf.gather(EMB, tok))
    logits = tf.linalg.matvec(WOUT, h, transpose_a=True)
    nt = tf.random.stateless_categorical(logits[None], 1, seed=SEEDS[i] + t,
                                         dtype=tf.int32)[0, 0]
    return t + 1, h, nt, ta.write(t, nt)
  ta = tf.TensorArray(tf.int32, size=T)
  return tf.while_loop(lambda t, *_: t < T, body, (0, H0[i], 1, ta))[3].stack()


def nucleus_step(i):
  logits = tf.linalg.matvec(WOUT, H0[i], transpose_a=True)
  sl, si = tf.math.top_k(logits, V)
  keep = tf.cumsum(tf.nn.softmax(sl), exclusive=True) < 0.7
  k = tf.random.stateless_categorical(tf.where(keep, sl, -1e9)[None], 3, seed=SEEDS[i],
                                      dtype=tf.int32)[0]
  u = tf.random.stateless_uniform([2], seed=SEEDS[i])
  g = tf.random.stateless_uniform([3], seed=SEEDS[i], minval=0, maxval=V, dtype=tf.int32)
  return tf.gather(si, k), u, g


def sampling_programs(i):
  return sampling_decoder(i), nucleus_step(i)


@pytest.mark.parametrize("mode", ("runtime_n",))
def test_stateless_sampling_decoders(mode):
  check(sampling_programs, N, mode)


SCORES = tf.constant([[3, 1, 3, 2, 3], [0, 0, 0, 0, 0], [5, 4, 5, 4, 5], [1, 2, 3, 4, 5]])
BEAM_H = tf.constant(_rng.randn(N, 2, 3, H).astype(np.float32))
PARENTS = tf.constant(_rng.randint(0, 3, size=(N, 2, 3)), tf.int32)


def ties_and_beams(i):
  v, ix = tf.math.top_k(SCORES[i], 3)
  s = tf.argsort(SCORES[i], direction="DESCENDING", stable=True)
  _, ixf = tf.math.top_k(tf.cast(SCORES[i], tf.float32), 2)
  g = tf.gather(BEAM_H[i], PARENTS[i], axis=1, batch_dims=1)
  return v, ix, s, ixf, tf.argmax(SCORES[i]), tf.argmin(SCORES[i]), g, \
      tf.reduce_logsumexp(BEAM_H[i], axis=0)


@pytest.mark.parametrize("mode", ("eager",))
def test_top_k_ties_and_beam_gathers(mode):
  check(ties_and_beams, N, mode)


SEQ_MODEL = keras.Sequential([keras.Input((H,)), keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(V)])
_seq_rng = np.random.RandomState(0)
_seq_w = [_seq_rng.randn(*w.shape).astype(np.float32) * 0.8 for w in SEQ_MODEL.get_weights()]
_seq_w[3] = np.zeros_like(_seq_w[3])
_seq_w[3][EOS] = 1.0
SEQ_MODEL.set_weights(_seq_w)


def conditional_writes(i):
  """Write a token only while not finished (tf.cond in the loop), element shape given."""
  ta = tf.TensorArray(tf.int32, size=T, element_shape=[], clear_after_read=False)

  def body(t, h, tok, ta, fin, n):
    h = tf.tanh(h + tf.gather(EMB, tok))
    nt = tf.argmax(SEQ_MODEL(h[None])[0], output_type=tf.int32)
    ta = tf.cond(fin, lambda: ta, lambda: ta.write(n, nt))
    n = tf.where(fin, n, n + 1)
    return t + 1, h, nt, ta, tf.logical_or(fin, nt == EOS), n
  _, _, _, ta, fin, n = tf.while_loop(lambda t, *a: t < T, body,
                                      (0, H0[i], 1, ta, False, 0))
  return ta.stack(), n, fin


@pytest.mark.parametrize("mode", ("xla",))
def test_conditional_tensorarray_writes_keras_step_model(mode):
  exp = expected(conditional_writes, N)
  assert len(set(exp[1].numpy().tolist())) > 1
  check(conditional_writes, N, mode, exp)


# ---------------------------------------------------------------------------------- CTC
CT, CC, CL = 6, 5, 3
CTC_LOGITS = tf.constant(_rng.randn(N, CT, CC).astype(np.float32))
CTC_LABELS = tf.constant(_rng.randint(1, CC, size=(N, CL)), tf.int32)
LABEL_LEN = tf.constant([3, 2, 1, 2])
LOGIT_LEN = tf.constant([6, 5, 4, 6])
PADDED_LABELS = CTC_LABELS * tf.cast(tf.sequence_mask(LABEL_LEN, CL), tf.int32)


def ctc_sparse(i):
  labels = tf.sparse.from_dense(PADDED_LABELS[i][None])   # zeros (padding) dropped
  bm = tf.nn.ctc_loss(labels, CTC_LOGITS[i][None], None, LOGIT_LEN[i][None],
                      logits_time_major=False, blank_index=0)
  shifted = tf.SparseTensor(labels.indices, labels.values - 1, labels.dense_shape)
  tm = tf.nn.ctc_loss(shifted, tf.transpose(CTC_LOGITS[i][None], [1, 0, 2]),
                      None, LOGIT_LEN[i][None], logits_time_major=True, blank_index=-1)
  return bm, tm


@pytest.mark.parametrize("mode", ("runtime_n",))
def test_ctc_loss_sparse_labels_both_layouts(mode):
  check(ctc_sparse, N, mode)


def test_ctc_loss_sparse_labels_under_xla_is_a_clear_refusal():
  # The labels' tf.where has a per-example size (README: refused under XLA); CTCLoss has no
  # XLA kernel anyway.
  with pytest.raises(vectorize.ConversionError, match="jit_compile"):
    run(ctc_sparse, N, "xla")


DEC_LOGITS = tf.constant(_rng.randn(N, 7, 4).astype(np.float32) * 2)
DEC_LEN = tf.constant([7, 5, 3, 6])
REFS = tf.constant([[1, 2, 3, 0], [2, 2, 0, 0], [3, 0, 0, 0], [1, 3, 1, 2]], tf.int64)


def ctc_greedy(i):
  lg = tf.transpose(DEC_LOGITS[i][None], [1, 0, 2])
  (dec,), neg = tf.nn.ctc_greedy_decoder(lg, DEC_LEN[i][None], merge_repeated=True,
                                         blank_index=0)
  return dec, neg


def ctc_beam(i):
  lg = tf.transpose(DEC_LOGITS[i][None], [1, 0, 2])
  decs, lp = tf.nn.ctc_beam_search_decoder(lg, DEC_LEN[i][None], beam_width=4, top_paths=2)
  return decs[0], decs[1], lp


@pytest.mark.parametrize("mode", ("function",))
def test_ctc_beam_search_decoder_top_paths(mode):
  got = run(ctc_beam, N, mode)
  exp = [ctc_beam(tf.constant(k)) for k in range(N)]
  assert_same_sparse(got[0], sparse_stack([e[0] for e in exp]))
  assert_same_sparse(got[1], sparse_stack([e[1] for e in exp]))
  assert_same(got[2], tf.stack([e[2] for e in exp]))


def ctc_greedy_and_edit_distance(i):
  dec, neg = ctc_greedy(i)
  truth = tf.sparse.from_dense(REFS[i][None])
  return (dec, neg, tf.edit_distance(dec, truth, normalize=True),
          tf.edit_distance(dec, truth, normalize=False))


@pytest.mark.parametrize("mode", ("eager", "runtime_n"))
def test_ctc_greedy_decoder_sparse_output_and_edit_distance(mode):
  got = run(ctc_greedy_and_edit_distance, N, mode)
  exp = [ctc_greedy_and_edit_distance(tf.constant(k)) for k in range(N)]
  assert_same_sparse(got[0], sparse_stack([e[0] for e in exp]))
  assert_same(list(got[1:]), [tf.stack(e) for e in list(zip(*exp))[1:]])


def keras_ctc_decode(i):
  probs = tf.nn.softmax(DEC_LOGITS[i][None])
  g, glp = keras.ops.ctc_decode(probs, DEC_LEN[i][None], strategy="greedy", mask_index=0)
  b, blp = keras.ops.ctc_decode(probs, DEC_LEN[i][None], strategy="beam_search",
                                beam_width=3, top_paths=2, mask_index=0)
  return g, glp, b, blp


def test_keras_ops_ctc_decode():
  check(keras_ctc_decode, N, "eager")


CTC_FEATS = tf.constant(_rng.randn(N, CT, 3).astype(np.float32))
CTC_DENSE = keras.layers.Dense(CC)
CTC_DENSE.build((None, 3))


def ctc_example_loss(x, y, ll):
  logits = CTC_DENSE(x[None])
  return tf.reduce_sum(tf.nn.ctc_loss(tf.sparse.from_dense(y[None]), logits, None, ll[None],
                                      logits_time_major=False, blank_index=0))


def _tape_per_example(loss_fn, variables, *batch):
  grads = []
  for k in range(batch[0].shape[0]):
    with tf.GradientTape() as tape:
      loss = loss_fn(*[b[k] for b in batch])
    grads.append(tape.gradient(loss, variables))
  return [tf.stack(g) for g in zip(*grads)]


@pytest.mark.parametrize("mode", ("function",))
def test_per_example_gradients_of_ctc_loss(mode):
  args = (ctc_example_loss, CTC_DENSE, CTC_FEATS, PADDED_LABELS, LOGIT_LEN)
  f = lambda: vectorize.per_example_gradients(*args)
  got = f() if mode == "eager" else tf.function(f)()
  assert_same(list(got), _tape_per_example(ctc_example_loss, CTC_DENSE.trainable_variables,
                                           *args[2:]))


def test_jacobians_of_ctc_loss_in_graph():
  labels = tf.sparse.from_dense(PADDED_LABELS)

  @tf.function
  def jac(lg):
    loss = tf.nn.ctc_loss(labels, lg, None, LOGIT_LEN, logits_time_major=False, blank_index=0)
    return vectorize.batch_jacobian(loss[:, None], lg), vectorize.jacobian(loss, lg)

  with tf.GradientTape(persistent=True) as tape:
    tape.watch(CTC_LOGITS)
    loss = tf.nn.ctc_loss(labels, CTC_LOGITS, None, LOGIT_LEN, logits_time_major=False,
                          blank_index=0)
  full = tape.jacobian(loss, CTC_LOGITS, experimental_use_pfor=False)
  bj, j = jac(CTC_LOGITS)
  assert_same(j, full)
  assert_same(bj, tf.stack([full[b, b] for b in range(N)])[:, None])


# ----------------------------------------------------------------- sampled losses, samplers
NC, S, D = 20, 5, 3
SW = tf.Variable(_rng.randn(NC, D).astype(np.float32))
SB = tf.Variable(_rng.randn(NC).astype(np.float32))
SX = tf.constant(_rng.randn(N, D).astype(np.float32))
SY = tf.constant(_rng.randint(0, NC, size=(N, 1)), tf.int64)
SAMPLED = tf.random.log_uniform_candidate_sampler(SY[:1], 1, S, True, NC, seed=3)


def sampled_losses_given(i):
  ssm = tf.nn.sampled_softmax_loss(SW, SB, SY[i][None], SX[i][None], S, NC,
                                   sampled_values=SAMPLED, remove_accidental_hits=True)
  nce = tf.nn.nce_loss(SW, SB, SY[i][None], SX[i][None], S, NC, sampled_values=SAMPLED)
  return ssm, nce


@pytest.mark.parametrize("mode", ("runtime_n",))
def test_sampled_softmax_and_nce_with_sampled_values(mode):
  check(sampled_losses_given, N, mode)


Y2 = tf.constant(_rng.randint(0, 12, size=(N, 2)), tf.int64)


def samplers(i):
  a = tf.random.log_uniform_candidate_sampler(Y2[i][None], 2, S, True, 12, seed=1)
  u = tf.random.uniform_candidate_sampler(Y2[i][None], 2, S, True, 12, seed=2)
  f = tf.random.fixed_unigram_candidate_sampler(Y2[i][None], 2, S, False, 12,
                                                unigrams=list(range(1, 13)), seed=3)
  ssm = tf.nn.sampled_softmax_loss(SW, SB, SY[i][None], SX[i][None], S, NC, seed=11)
  return a, u, f, ssm


@pytest.mark.parametrize("mode, n", [("eager", N)])
def test_candidate_samplers_with_seeds_draw_valid_candidates(mode, n):
  # Random draws: the README compares no values of stateful random ops; check what the
  # samplers (and a sampled softmax seeded by op seed) promise for each example.
  a, u, f, ssm = run(samplers, n, mode)
  assert ssm.shape == (n, 1) and ssm.dtype == tf.float32
  assert np.all(np.isfinite(ssm.numpy())) and np.all(ssm.numpy() > 0)
  for s in (a, u, f):
    assert s.sampled_candidates.shape == (n, S) and s.sampled_candidates.dtype == tf.int64
    assert s.true_expected_count.shape == (n, 1, 2)
    assert s.sampled_expected_count.shape == (n, S)
    c = s.sampled_candidates.numpy()
    assert np.all((c >= 0) & (c < 12))
  for s in (a, u):   # unique=True
    assert all(len(set(r.tolist())) == S for r in s.sampled_candidates.numpy())
  # uniform: every class equally likely, so true and sampled expected counts agree
  np.testing.assert_allclose(u.true_expected_count.numpy()[:, 0, 0],
                             u.sampled_expected_count.numpy()[:, 0], rtol=1e-6)
  # fixed unigram without unique: expected count = p(class) * num_sampled
  p = (Y2.numpy()[:n] + 1) / sum(range(1, 13))
  np.testing.assert_allclose(f.true_expected_count.numpy()[:, 0], p * S, rtol=1e-5)


# ----------------------------------------------------------------------- losses, metrics
LT, LC = 5, 3
_lrng = np.random.RandomState(3)
LOGITS64 = _lrng.randn(N, LT, LC)
TARGETS64 = (_lrng.rand(N, LT, LC) > 0.5).astype(np.float64)
LAB = tf.constant(_lrng.randint(0, LC, size=(N, LT)), tf.int64)
SEQ_LEN = tf.constant([5, 2, 0, 3])


def loss_programs(dtype):
  logits = tf.constant(LOGITS64, dtype)
  tgt = tf.constant(TARGETS64, dtype)
  bce = keras.losses.BinaryCrossentropy(from_logits=True, label_smoothing=0.1, reduction=None)
  cce = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.2,
                                             reduction="sum")
  scce = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
  huber = keras.losses.Huber(delta=0.5, reduction="sum_over_batch_size")

  def weighted(i):
    return tf.nn.weighted_cross_entropy_with_logits(tgt[i], logits[i],
                                                    pos_weight=tf.constant(2.5, dtype))

  def keras_objects(i):
    oh = tf.one_hot(LAB[i], LC, dtype=dtype)
    return (bce(tgt[i], logits[i]), cce(oh, logits[i]), scce(LAB[i], logits[i]),
            huber(tgt[i], logits[i]))

  def masked_sequence(i):
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(LAB[i], logits[i])
    m = tf.sequence_mask(SEQ_LEN[i], LT, dtype=dtype)
    return tf.math.divide_no_nan(tf.reduce_sum(ce * m), tf.reduce_sum(m))

  def smoothed(i):
    oh = tf.one_hot(LAB[i], LC, dtype=dtype)
    a = tf.nn.softmax_cross_entropy_with_logits(oh * 0.9 + 0.1 / LC, logits[i])
    b = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(tgt[i] * 0.9 + 0.05, logits[i]),
                       -1)
    c = tf.compat.v1.losses.softmax_cross_entropy(oh, logits[i], label_smoothing=0.1,
                                                  reduction="none")
    return a, b, c

  return dict(weighted=weighted, keras_objects=keras_objects,
              masked_sequence=masked_sequence, smoothed=smoothed)


def all_losses(dtype):
  programs = loss_programs(dtype)
  return lambda i: {name: body(i) for name, body in programs.items()}


@pytest.mark.parametrize("mode, dtype", [("runtime_n", tf.float64)], ids=("n-f64",))
def test_sequence_losses(mode, dtype):
  check(all_losses(dtype), N, mode)


MLOGITS = tf.constant(LOGITS64, tf.float32)
MLAB = tf.cast(LAB, tf.int32)


def metric_functions(i):
  return (keras.metrics.sparse_categorical_accuracy(MLAB[i], MLOGITS[i]),
          keras.metrics.sparse_top_k_categorical_accuracy(MLAB[i], MLOGITS[i], k=2),
          keras.metrics.categorical_accuracy(tf.one_hot(MLAB[i], LC), MLOGITS[i]))


@pytest.mark.parametrize("mode", ("eager",))
def test_keras_metric_functions_per_example(mode):
  check(metric_functions, N, mode)


@pytest.mark.unchecked   # compares pfor's own variable state with the loop's
@pytest.mark.parametrize("mode", ("function",))
def test_stateful_keras_metrics_updated_per_example(mode):
  acc = keras.metrics.SparseCategoricalAccuracy()
  auc = keras.metrics.AUC(num_thresholds=5)
  mean = keras.metrics.Mean()
  probs = tf.constant(_lrng.rand(N, LT).astype(np.float32))
  ys = tf.constant((_lrng.rand(N, LT) > 0.5).astype(np.float32))
  metrics = (acc, auc, mean)

  def body(i):
    acc.update_state(MLAB[i], MLOGITS[i])
    auc.update_state(ys[i], probs[i])
    mean.update_state(probs[i], sample_weight=tf.sequence_mask(SEQ_LEN[i], LT, tf.float32))
    return acc.result(), auc.result(), mean.result()   # running values, in loop order

  for m in metrics:
    m.reset_state()
  exp = loop(body, N)
  exp_state = [v.numpy() for m in metrics for v in m.variables]
  for m in metrics:
    m.reset_state()
  got = run(body, N, mode)
  assert_same(got, exp)
  for a, e in zip([v.numpy() for m in metrics for v in m.variables], exp_state):
    np.testing.assert_allclose(a, e, rtol=1e-6)


MASK_X = tf.constant(_rng.randn(3, 5, 3).astype(np.float32))
MASK_LEN = tf.constant([5, 2, 3])
MASKED_GRU = keras.layers.GRU(H, return_sequences=True, return_state=True)
MASKED_GRU.build((None, 5, 3))


def masked_gru(i):
  seq, state = MASKED_GRU(MASK_X[i][None], mask=tf.sequence_mask(MASK_LEN[i], 5)[None])
  return seq[0], state[0]


@pytest.mark.parametrize("mode", ("eager",))
def test_keras_gru_with_per_example_mask(mode):
  check(masked_gru, 3, mode)


# --------------------------------------------------------------------- sequence utilities
UX64 = _rng.randn(N, 6, 3)
ULEN = tf.constant([6, 2, 0, 4])
SEGS = tf.constant([[0, 0, 1, 1, 1, 2], [0, 1, 1, 1, 2, 3], [0, 0, 0, 0, 0, 0],
                    [0, 2, 2, 3, 3, 3]])
EDGES64 = np.sort(_rng.randn(N, 5), axis=1)


def utility_programs(dtype):
  x = tf.constant(UX64, dtype)
  edges = tf.constant(EDGES64, dtype)

  def reverse_sequence(i):
    a = tf.reverse_sequence(x[i][None], ULEN[i][None], seq_axis=1, batch_axis=0)[0]
    b = tf.reverse_sequence(tf.transpose(x[i])[:, :, None],
                            tf.fill([3], tf.cast(ULEN[i], tf.int64)), seq_axis=1, batch_axis=0)
    c = tf.reverse_sequence(x[i][:, None, :], ULEN[i][None], seq_axis=0, batch_axis=1)
    return a, b, c

  def cumulative(i):
    v = x[i][:, 0]
    return (tf.cumsum(v, exclusive=True), tf.cumsum(v, reverse=True),
            tf.cumsum(v, exclusive=True, reverse=True), tf.math.cumprod(v, exclusive=True),
            tf.math.cumprod(v, reverse=True),
            tf.math.cumprod(x[i], axis=0, exclusive=True, reverse=True),
            tf.math.cumulative_logsumexp(v, reverse=True))

  def segments(i):
    return (tf.math.segment_sum(x[i], SEGS[i]),            # per-example count: ragged
            tf.math.unsorted_segment_sum(x[i], SEGS[i], 4),
            tf.math.segment_mean(x[i][:, 0], SEGS[i]),
            tf.math.segment_max(x[i], SEGS[i]))

  def searchsorted(i):
    v = x[i][:, 0]
    return (tf.searchsorted(edges[i], v, side="left"),
            tf.searchsorted(edges[i], v, side="right", out_type=tf.int64),
            tf.searchsorted(edges[0], v), tf.searchsorted(edges[i], edges[0][None])[0])

  def masks(i):
    return (tf.sequence_mask(ULEN[i], 6),
            tf.sequence_mask(tf.stack([ULEN[i], ULEN[i] // 2]), maxlen=6, dtype=dtype),
            tf.sequence_mask(tf.cast(ULEN[i], tf.int64) + 1))   # per-example maxlen: ragged

  return dict(reverse_sequence=reverse_sequence, cumulative=cumulative, segments=segments,
              searchsorted=searchsorted, masks=masks)


def all_utilities(dtype, skip=()):
  programs = utility_programs(dtype)
  return lambda i: {name: body(i) for name, body in programs.items() if name not in skip}


@pytest.mark.parametrize("mode, dtype", [("runtime_n", tf.float64)], ids=("n-f64",))
def test_sequence_utilities(mode, dtype):
  check(all_utilities(dtype), N, mode)


WAV64 = _rng.randn(3, 32)
WAV_LEN = tf.constant([32, 20, 9])


@pytest.mark.parametrize("mode, dtype", [("eager", tf.float32)], ids=("eager-f32",))
def test_signal_framing_and_stft(mode, dtype):
  wav = tf.constant(WAV64, dtype)

  def body(i):
    f1 = tf.signal.frame(wav[i], 8, 4)
    f2 = tf.signal.frame(wav[i], 8, 6, pad_end=True, pad_value=0.5)
    ola = tf.signal.overlap_and_add(f1 * tf.signal.hann_window(8, dtype=dtype), 4)
    st = tf.signal.stft(wav[i], frame_length=8, frame_step=4, fft_length=8)
    out = f1, f2, ola, tf.abs(st), tf.signal.inverse_stft(st, 8, 4, 8)
    if mode != "xla":   # frames of each example's own length: ragged (refused under XLA)
      out += (tf.signal.frame(wav[i][:WAV_LEN[i]], 8, 4),)
    return out
  check(body, 3, mode)


EMB_TABLE = tf.Variable(_rng.randn(10, 4).astype(np.float32))
SP_IDS = tf.constant([[1, 3, 0, 0], [5, 5, 7, 2], [0, 0, 0, 0]], tf.int64)   # 0: padding
SP_W = tf.constant(_rng.rand(3, 4).astype(np.float32))


def sparse_lookups(i):
  sp = tf.sparse.from_dense(SP_IDS[i][None])
  spw = tf.SparseTensor(sp.indices, tf.gather_nd(SP_W[i][None], sp.indices), sp.dense_shape)
  return (tf.nn.embedding_lookup_sparse(EMB_TABLE, sp, None, combiner="sum"),
          tf.nn.embedding_lookup_sparse(EMB_TABLE, sp, spw, combiner="mean"),
          tf.nn.embedding_lookup_sparse(EMB_TABLE, sp, None, combiner="sqrtn"))


@pytest.mark.parametrize("mode", ("runtime_n",))
def test_embedding_lookup_sparse(mode):
  check(sparse_lookups, 3, mode)


# -------------------------------------------------------- gradients through decoder loops
TGT = tf.constant(_rng.randint(1, V, size=(3, T)), tf.int32)
TGT_LEN = tf.constant([5, 2, 3])
TF_CELL = keras.layers.SimpleRNNCell(H)
TF_CELL.build((None, H))
DEC_PARAMS = [EMB] + TF_CELL.trainable_variables + [WOUT]


def teacher_forced_loss(y, length, h):
  """Teacher-forced decoder loss over each example's own target length (Keras cell)."""
  def body(t, h, acc):
    prev = tf.where(t > 0, y[tf.maximum(t - 1, 0)], 0)
    o, [h2] = TF_CELL(tf.gather(EMB, prev)[None], [h[None]])
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(y[t], tf.matmul(o, WOUT)[0])
    return t + 1, h2[0], acc + ce
  _, _, acc = tf.while_loop(lambda t, h, acc: t < length, body, (0, h, 0.0),
                            maximum_iterations=T)
  return acc / tf.cast(length, tf.float32)


@pytest.mark.parametrize("mode", ("xla",))
def test_per_example_gradients_through_teacher_forced_decoder(mode):
  args = (TGT, TGT_LEN, H0[:3])
  f = lambda: vectorize.per_example_gradients(teacher_forced_loss, DEC_PARAMS, *args)
  got = f() if mode == "eager" else tf.function(f, jit_compile=True)()
  assert_same(list(got), _tape_per_example(teacher_forced_loss, DEC_PARAMS, *args))


BEAM_PARAMS = [EMB, WOUT, U]


def beam_sequence_loss(h, ref):
  """A sequence-level loss: the reference's first token against logsumexp of the beam
  scores (gradients through top_k and beam gathers in a while loop)."""
  kb = 2
  hb = tf.tile(h[None], [kb, 1])

  def body(t, hb, tok, score):
    hb = tf.tanh(tf.matmul(hb, U) + tf.gather(EMB, tok))
    lp = tf.nn.log_softmax(tf.matmul(hb, WOUT))
    top, idx = tf.math.top_k(tf.reshape(score[:, None] + lp, [-1]), kb)
    return t + 1, tf.gather(hb, idx // V), idx % V, top
  _, _, _, score = tf.while_loop(lambda t, *a: t < 3, body,
                                 (0, hb, tf.ones([kb], tf.int32), tf.constant([0.0, -1e9])),
                                 maximum_iterations=3)
  first = tf.nn.log_softmax(tf.linalg.matvec(WOUT, tf.tanh(h), transpose_a=True))[ref[0]]
  return tf.reduce_logsumexp(score) - first


def test_clipped_gradient_sum_and_norms_through_beam_search():
  args = (H0[:3], TGT)
  exp = _tape_per_example(beam_sequence_loss, BEAM_PARAMS, *args)
  norms = tf.sqrt(sum(tf.reduce_sum(tf.reshape(g, [3, -1]) ** 2, 1) for g in exp))
  clip = 0.5
  factor = tf.minimum(1.0, clip / norms)
  clipped = [tf.reduce_sum(g * tf.reshape(factor, [3] + [1] * (g.shape.rank - 1)), 0)
             for g in exp]
  got, got_norms = vectorize.clipped_gradient_sum(beam_sequence_loss, BEAM_PARAMS, *args,
                                                  l2_norm_clip=clip, return_norms=True)
  assert_same(list(got), clipped)
  assert_same(got_norms, norms)


def decode_scores(h):
  """[H] -> [3]: the greedy tokens' log-probabilities, as a function of the start state."""
  def body(t, h, tok, ta):
    h = tf.tanh(tf.linalg.matvec(U, h, transpose_a=True) + tf.one_hot(tok, H))
    lp = tf.nn.log_softmax(tf.linalg.matvec(WOUT, h, transpose_a=True))
    nt = tf.argmax(lp, output_type=tf.int32)
    return t + 1, h, nt % H, ta.write(t, lp[nt])
  ta = tf.TensorArray(tf.float32, size=3)
  return tf.while_loop(lambda t, *_: t < 3, body, (0, h, 0, ta))[3].stack()


def test_batch_jacobian_fn_through_greedy_decoder():
  hb = H0[:2]
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(hb)
    ys = tf.stack([decode_scores(hb[k]) for k in range(2)])
  exp = tape.batch_jacobian(ys, hb, experimental_use_pfor=False)
  batched = vectorize.batch_jacobian_fn(lambda b: tf.stack([decode_scores(b[k]) for k in range(2)]))
  assert_same(batched(hb), exp)


# ------------------------------------------------- found by this round, fixed (were raw errors)
@pytest.mark.parametrize("mode", ("eager", "runtime_n"))
def test_tf_function_body_with_variable_and_ragged_output(mode):
  x = tf.constant([[1, 2, 0, 3], [0, 1, 1, 1], [2, 2, 2, 2]])
  lengths = tf.constant([2, 1, 4])
  v = tf.Variable(1)

  @tf.function
  def body(i):
    return x[i, :lengths[i]] * v
  check(body, 3, mode)


def test_tf_function_greedy_decoder_ragged_tokens():
  check(tf.function(greedy_ragged), N, "eager")


@pytest.mark.parametrize("time_major,mode", [(False, "eager"), (True, "runtime_n")])
def test_ctc_loss_dense_labels(time_major, mode):
  """Its loops are legacy functions (`Defun`s called by name)."""
  def body(i):
    lg = CTC_LOGITS[i][None]
    lg = tf.transpose(lg, [1, 0, 2]) if time_major else lg
    return tf.nn.ctc_loss(CTC_LABELS[i][None], lg, LABEL_LEN[i][None], LOGIT_LEN[i][None],
                          logits_time_major=time_major, blank_index=0)
  check(body, N, mode)


def test_ctc_loss_dense_labels_at_a_static_n_0_is_refused_not_an_abort():
  def body(i):
    return tf.nn.ctc_loss(CTC_LABELS[i][None], CTC_LOGITS[i][None], LABEL_LEN[i][None],
                          LOGIT_LEN[i][None], logits_time_major=False, blank_index=0)
  with pytest.raises(vectorize.ConversionError, match="legacy function.*static n = 0"):
    vectorize.pfor(body, 0)


def test_keras_ctc_loss():
  ctc = keras.losses.CTC(reduction=None)
  check(lambda i: ctc(CTC_LABELS[i][None], tf.nn.softmax(CTC_LOGITS[i][None])), N, "eager")


# ---------------------------------------------------------------------------- known bugs
@pytest.mark.xfail(strict=True, reason="a per-example-size value padded to one fixed length "
                   "comes back as a RaggedTensor; the loop stacks a dense tensor")
def test_bug_pad_of_ragged_value_to_fixed_length_is_ragged():
  x = tf.constant([[1, 1, 2, 3], [2, 2, 2, 2], [1, 2, 3, 4]])

  def body(i):
    u = tf.unique(x[i]).y
    return tf.pad(u, [[0, 4 - tf.size(u)]])   # every example: length 4
  check(body, 3, "eager")


@pytest.mark.xfail(strict=True, reason="tf.nn.ctc_unique_labels (pads tf.unique to the label "
                   "length in a map_fn): ConversionError though every size is fixed")
def test_bug_ctc_unique_labels():
  check(lambda i: tf.nn.ctc_unique_labels(CTC_LABELS[i][None]), N, "eager")


@pytest.mark.parametrize("consumer,mode", [
    ("reduce_sum", "eager"), ("reduce_sum", "runtime_n")] + [
        pytest.param("edit_distance", mode, marks=pytest.mark.xfail(
            strict=True, reason="n = 0: the fallback's empty stand-in for an output of "
            "unknown rank has rank 1, and a later slice of its axis 1 fails"))
        for mode in ("eager", "runtime_n")])
def test_no_examples_decoded_sparse_into_fallback(consumer, mode):
  """Was a raw 'Tried to stack elements of an empty list with non-fully-defined
  element_shape: [?]': the fallback's shape check of an output of unknown rank."""
  def body(i):
    (dec,), _ = tf.nn.ctc_greedy_decoder(DEC_LOGITS[i][:, None], [7], blank_index=0)
    if consumer == "reduce_sum":
      return tf.sparse.reduce_sum(dec)
    return tf.edit_distance(dec, tf.sparse.from_dense(REFS[i][None]))[0]
  out = run(body, 0, mode)
  assert out.shape[0] == 0
  check(body, 3, mode)


@pytest.mark.xfail(strict=True, reason="TensorArray of fixed size without element_shape "
                   "written in a tf.cond inside a while loop: ConversionError ('differs per "
                   "iteration')")
def test_bug_tensorarray_written_in_cond_inside_loop_without_element_shape():
  x = tf.constant([[1, 2, 0, 3], [0, 1, 1, 1], [2, 2, 2, 2]])

  def body(i):
    ta = tf.TensorArray(tf.int32, size=4)

    def step(t, ta, n):
      ta = tf.cond(x[i, t] > 0, lambda: ta.write(n, x[i, t]), lambda: ta)
      return t + 1, ta, n + tf.cast(x[i, t] > 0, tf.int32)
    _, ta, n = tf.while_loop(lambda t, *a: t < 4, step, (0, ta, 0))
    return ta.stack(), n
  check(body, 3, "eager")


@pytest.mark.parametrize("mode", ("eager", "runtime_n"))
def test_fixed_size_tensorarray_written_in_cond_is_dense(mode):
  """Came back ragged: a list's length was not followed through a conditional whose every
  branch keeps the length of the list it takes."""
  x = tf.constant([[1, 2, 0, 3], [0, 1, 1, 1], [2, 2, 2, 2]])

  def body(i):
    ta = tf.TensorArray(tf.int32, size=4, element_shape=[])
    ta = tf.cond(x[i, 0] > 0, lambda: ta.write(0, x[i, 1]), lambda: ta.write(1, x[i, 2]))
    return ta.stack()
  check(body, 3, mode)
