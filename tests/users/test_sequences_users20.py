"""Round 20 of the users' programs, written from the README and the public docstrings only:
SEQUENCES AND TEXT MODELS PER EXAMPLE.

Each program is written for ONE example and checked against the per-example loop (stacking
`body(i)`, `tf.ragged.stack` where sizes differ) eagerly, in a `tf.function`, under XLA, with a
run-time n and at n = 0 (each program runs eagerly and at n = 0, and under XLA wherever the
plain loop compiles; many also in a tf.function with a static or a run-time n), and, where
floats flow, the gradient of a weighted sum of the outputs taken by an outer tape around pfor
against the same around the loop.

Covered:
- variable-length sequences: slices of a padded batch by a per-example length (vectors and
  rows of features), rows of a captured `tf.RaggedTensor`, a `tf.RaggedTensor` of "sentences"
  built in the body, boolean masks, `tf.sequence_mask`, `tf.reverse_sequence`, position
  embeddings over `tf.range(length)`, `tf.ragged.boolean_mask`, top_k with a per-example k, a
  dynamic-size TensorArray in a fixed-trip loop;
- Keras Embedding (mask_zero), LSTM / Bidirectional SimpleRNN with masks (an all-padding
  example among them), Masking + GRU, SimpleRNN classifiers, an LSTMCell stepped over its own
  tokens, Conv1D, MultiHeadAttention (padding attention masks, causal masks),
  LayerNormalization (float64, float16 layers);
- greedy and sampled decoding (tf.while_loop, autograph for-loops over tf.range with
  TensorArray writes, early stop at an end token, stateless sampling with per-example seeds,
  Gumbel-max and stateless_categorical in one loop), beam-search-like top-k in a while loop
  of per-example trips, CTC greedy decoding (values and the SparseTensor itself);
- per-example sequence losses: masked sparse categorical cross-entropy (Keras loss, float64
  `tf.nn`), CTC (dense and sparse labels), unsorted / sorted segment ops over token ids,
  bincount (fixed and own bins), unique_with_counts;
- strings: split, substr (bytes and UTF8 chars), unicode_decode / encode, bytes_split, ngrams,
  reduce_join, regex_replace, StringLookup, TextVectorization, Hashing (strings and ints),
  to_hash_bucket_fast;
- vectorized_map / map_fn over padded (dict), ragged and string batches, map_fn against
  tf.map_fn on a Keras Conv1D encoder, per-example gradients of a Keras Embedding+SimpleRNN
  classifier (`per_example_gradients`) and of a causal Conv1D language model (tape in the body),
  and `vectorize.data.map_and_batch` over padded and variable-length text.

Where an intermediate or output is ragged, XLA is the README's documented `ConversionError`
("under XLA a ragged value is a ConversionError"): those cases check that refusal. An output
of rows of features `x[i, :L[i]]` comes back of ragged rank 1 with uniform later axes, as the
README says (the loop's `tf.ragged.stack` marks them ragged too): compared as such.

TensorFlow limits met where the plain per-example loop fails alike (not library bugs, not
tested):
- string ops (split, substr, unicode_decode, ngrams, StringLookup, TextVectorization,
  Hashing, also of integers: it formats them with AsString, to_hash_bucket_fast) have no XLA
  kernels: the loop under jit_compile fails too ("Detected unsupported operations"), so
  string programs skip XLA;
- `tf.nn.ctc_loss` with sparse labels (CTCLoss) and `tf.nn.ctc_greedy_decoder` have no XLA
  kernels (the dense-label ctc_loss compiles, in the loop and in pfor alike, when tried by
  hand: left out of the modes here for time);
- stateless random ops under XLA draw other numbers than the CPU kernels, in the loop too:
  under XLA the sampling programs are compared with the loop compiled by XLA;
- a dynamic-size TensorArray written in a `for t in tf.range(6)` loop gives an empty [4, 0]
  result in the loop under XLA (XLA drops the writes); pfor refuses it with a ConversionError
  that says so (tested as that refusal);
- `tf.nn.ctc_greedy_decoder` refuses a sequence_length above the time axis, in the loop too;
- an eager `tf.TensorArray` clears an element once read (README): decoders here read only by
  `stack()` or pass `clear_after_read=False`.

Library problems found (xfail, strict):
- (fixed) the gradient of `tf.nn.ctc_loss` with dense labels, by a tape around pfor, was a
  ConversionError ("the gradient of IdentityN ... reads ctc_loss_dense/mul_3:0, which the
  loop body computes but none of its outputs needs");
- (fixed) WRONG KIND: `x[i, a:b]` (a loop index and a constant range in one slice) has no
  static shape in the body's graph: `x[i, 1:] != 0` / `==` and
  `tf.random.stateless_categorical(x[i, :2], ...)` came back as a `tf.RaggedTensor`
  `[n, None]` where the loop stacks a dense `[n, 5]`, and under XLA as a ConversionError
  (tests: test_not_equal_on_shifted_targets, test_stateless_categorical_of_sliced_logits,
  test_tape_inside_body_causal_conv_language_model[xla]);
- tf.nn.ctc_loss with dense labels at n = 0 is a ConversionError (README: iters 0 included);
- `tf.reduce_sum(rt, axis=1)` of a RaggedTensor built in the body with per-example row lengths
  fails at run time, naming TF's own ragged internals (RaggedSplitsToSegmentIds/Repeat/Tile)
  and telling the user to pad them;
- a Keras LSTM layer over each example's own tokens (`lstm(emb(x[i, :L[i]][None]))`) is a
  ConversionError about a TensorArray the user never wrote, where the README says a Keras text
  model on each example's own token count converts.
"""
import os

import pytest
import tensorflow as tf
import keras

import vectorize
from tests.users._util import assert_same, loop, run_pfor

ALL = ["eager", "xla", "runtime_n", "zero"]
EXZ = ["eager", "xla", "zero"]


# ----------------------------------------------------------------------------- helpers

_EXPECTED = {}


def _program_key(tag):
  """This test's id without its mode: the loop's result is the same for every mode."""
  name = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
  for mode in ALL:
    name = name.replace(f"[{mode}-", "[").replace(f"-{mode}]", "]").replace(f"[{mode}]", "")
  return name, tag


def _cached(tag, compute):
  key = _program_key(tag)
  if key not in _EXPECTED:
    _EXPECTED[key] = compute()
  return _EXPECTED[key]


def _zero_of(expected):
  return tf.nest.map_structure(lambda t: t[:0], expected)


def _uniform_inner(t):
  """`tf.ragged.stack` of rows of features `[L_i, d]`, as pfor gives it (README): ragged rank
  1, later axes uniform."""
  if isinstance(t, tf.RaggedTensor) and t.ragged_rank > 1:
    return tf.RaggedTensor.from_row_splits(t.values.to_tensor(), t.row_splits)
  return t


def check(body, n, mode, xla_refused=False, xla_loop=False, feature_rows=False, **tols):
  """pfor(body, n) in `mode` equals the loop; `xla_refused`: the README's ConversionError;
  `xla_loop`: under XLA compare with the loop compiled by XLA (stateless random ops draw other
  numbers there than the CPU kernels, in the loop too); `feature_rows`: dense rows `[L_i, d]`
  of per-example length come back of ragged rank 1 (README)."""
  if mode == "xla" and xla_refused:
    with pytest.raises(vectorize.ConversionError):
      run_pfor(body, n, mode)
    return
  if mode == "xla" and xla_loop:
    expected = tf.function(lambda: loop(body, n), jit_compile=True)()
  else:
    expected = _cached("loop", lambda: loop(body, n))
  if feature_rows:
    expected = tf.nest.map_structure(_uniform_inner, expected)
  if mode == "zero":
    expected = _zero_of(expected)
  assert_same(run_pfor(body, n, mode), expected, **tols)


def _weighted_sum(outs):
  total = tf.constant(0., tf.float64)
  for k, o in enumerate(tf.nest.flatten(outs)):
    if isinstance(o, tf.RaggedTensor):
      o = o.flat_values
    if not o.dtype.is_floating:
      continue
    o = tf.reshape(tf.cast(o, tf.float64), [-1])
    total += tf.reduce_sum(o * tf.cos(tf.cast(tf.range(tf.size(o)), tf.float64) + k))
  return total


def _dense(g):
  return tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g


def check_grad(body, n, mode, params, **tols):
  """d/d params of a weighted sum of pfor's outputs, by a tape around pfor, equals the loop's."""
  params = list(params)

  def grads(run):
    with tf.GradientTape() as tape:
      tape.watch([p for p in params if isinstance(p, tf.Tensor)])
      loss = _weighted_sum(run())
    return [_dense(g) for g in tape.gradient(loss, params)]

  if mode == "eager":
    got = grads(lambda: vectorize.pfor(body, n))
  elif mode == "function":
    got = tf.function(lambda: grads(lambda: vectorize.pfor(body, n)))()
  elif mode == "xla":
    got = tf.function(lambda: grads(lambda: vectorize.pfor(body, n)), jit_compile=True)()
  elif mode == "runtime_n":
    got = tf.function(lambda k: grads(lambda: vectorize.pfor(body, k)),
                      input_signature=[tf.TensorSpec([], tf.int32)])(tf.constant(n))
  else:
    raise AssertionError(mode)
  expected = _cached("grad", lambda: grads(lambda: loop(body, n)))
  assert_same(got, expected, **tols)


def _normal(shape, seed, dtype=tf.float32):
  return tf.cast(tf.random.stateless_normal(shape, [seed, 20]), dtype)


# Padded token batch: 0 is padding, lengths 3, 6, 1, 2 (n = 4, T = 6).
TOKENS = tf.constant([[5, 2, 7, 0, 0, 0],
                      [1, 3, 3, 8, 2, 4],
                      [9, 0, 0, 0, 0, 0],
                      [4, 4, 0, 0, 0, 0]], tf.int32)
LENGTHS = tf.constant([3, 6, 1, 2], tf.int32)
# The same with an all-padding example (length 0).
TOKENS_PAD = tf.constant([[5, 2, 7, 0, 0, 0],
                          [1, 3, 3, 8, 2, 4],
                          [0, 0, 0, 0, 0, 0],
                          [4, 4, 0, 0, 0, 0]], tf.int32)
VOCAB = 10


# ------------------------------------------------------- variable-length sequences, masks


@pytest.mark.parametrize("mode", ["eager", "xla", "runtime_n", "zero"])
def test_mean_max_and_position_weighted_sum_of_prefix(mode):
  x = _normal([4, 6, 3], 1)
  x64 = _normal([4, 6, 3], 2, tf.float64)

  def body(i):
    seq = x[i, :LENGTHS[i]]
    pos = tf.cast(tf.range(1, LENGTHS[i] + 1), tf.float64)[:, None]
    weighted = tf.reduce_sum(tf.tanh(x64[i, :LENGTHS[i]]) * pos, 0)
    return tf.reduce_mean(seq, 0), tf.reduce_max(seq, 0), weighted

  check(body, 4, mode, xla_refused=True)
  if mode == "eager":
    check_grad(body, 4, mode, [x, x64])


@pytest.mark.parametrize("mode", ["eager", "xla", "runtime_n", "zero"])
def test_rows_of_features_output(mode):
  x = _normal([4, 6, 3], 26)

  def body(i):
    seq = x[i, :LENGTHS[i]]
    return seq * 2., tf.cumsum(seq[:, 0]), LENGTHS[i]

  check(body, 4, mode, xla_refused=True, feature_rows=True)


@pytest.mark.parametrize("mode", ALL)
def test_sequence_mask_masked_mean_float16(mode):
  x = _normal([4, 6, 2], 4, tf.float16)

  def body(i):
    m = tf.sequence_mask(LENGTHS[i], 6, dtype=tf.float16)
    s = tf.reduce_sum(x[i] * m[:, None], 0)
    return s / tf.cast(LENGTHS[i], tf.float16), m

  check(body, 4, mode)


@pytest.mark.parametrize("mode", EXZ)
def test_sequence_mask_where_gradient(mode):
  x = _normal([4, 6, 2], 5)

  def body(i):
    m = tf.sequence_mask(LENGTHS[i], 6)
    return tf.reduce_sum(tf.where(m[:, None], tf.sin(x[i]), 0.), 0)

  check(body, 4, mode)
  if mode == "xla":
    check_grad(body, 4, mode, [x])


@pytest.mark.parametrize("mode", ["eager", "xla", "runtime_n", "zero"])
def test_boolean_mask_non_padding_tokens(mode):
  def body(i):
    kept = tf.boolean_mask(TOKENS[i], TOKENS[i] != 0)
    return kept, tf.size(kept)

  check(body, 4, mode, xla_refused=True)


@pytest.mark.parametrize("mode", EXZ)
def test_ragged_boolean_mask_and_top_k_own_k(mode):
  x = _normal([4, 6], 27)

  def body(i):
    picked = tf.ragged.boolean_mask(x[i], TOKENS[i] > 2)
    top = tf.math.top_k(x[i], k=LENGTHS[i])
    return picked, top.indices

  check(body, 4, mode, xla_refused=True)


RT = tf.ragged.constant([[1., 2., 3.], [4.], [], [5., 6.]], dtype=tf.float32)


@pytest.mark.parametrize("mode", EXZ)
def test_rows_of_captured_ragged(mode):
  def body(i):
    row = RT[i]
    return tf.reduce_sum(row), tf.shape(row)[0], tf.reduce_max(tf.concat([row, [0.]], 0))

  check(body, 4, mode, xla_refused=True)


@pytest.mark.parametrize("mode", ["eager", "function", "xla", "zero"])
def test_reverse_sequence_per_example(mode):
  x = _normal([4, 6, 2], 6, tf.float64)

  def body(i):
    return tf.reverse_sequence(x[i][None], LENGTHS[i][None], seq_axis=1, batch_axis=0)[0]

  check(body, 4, mode)


@pytest.mark.parametrize("mode", EXZ)
def test_token_plus_position_embedding_own_tokens(mode):
  tok = _normal([VOCAB, 4], 28)
  pos = _normal([6, 4], 29)

  def body(i):
    toks = TOKENS[i, :LENGTHS[i]]
    h = tf.gather(tok, toks) + tf.gather(pos, tf.range(LENGTHS[i]))
    return tf.reduce_mean(tf.nn.relu(h), 0)

  check(body, 4, mode, xla_refused=True)
  if mode == "eager":
    check_grad(body, 4, mode, [tok, pos])


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_not_equal_on_shifted_targets(mode):
  def body(i):
    targets = TOKENS[i, 1:]
    return tf.cast(targets != 0, tf.float32), targets == 4

  check(body, 4, mode)


def _two_sentences(x, i):
  """Example i's 6 tokens as two "sentences": its first LENGTHS[i] tokens, then the rest."""
  return tf.RaggedTensor.from_row_lengths(x[i], tf.stack([LENGTHS[i], 6 - LENGTHS[i]]))


@pytest.mark.parametrize("mode", ["eager", "zero"])
def test_ragged_sentences_built_in_body(mode):
  x = _normal([4, 6], 35)

  def body(i):
    return _two_sentences(x, i)

  check(body, 4, mode)


@pytest.mark.xfail(strict=True, raises=tf.errors.InvalidArgumentError, reason=(
    "tf.reduce_sum over a RaggedTensor built in the body with per-example row lengths fails at "
    "run time: 'op RaggedReduceSum/RaggedSplitsToSegmentIds/Repeat/Tile ... falls back ... and "
    "its output differs in size per iteration in an axis after the first ... To fix: ... pad "
    "it' (TF's own internals of the ragged reduction, which the user cannot pad); the loop "
    "runs, and the same sums by tf.math.segment_sum convert"))
def test_ragged_sentences_reduce_sum_in_body():
  x = _normal([4, 6], 35)

  def body(i):
    return tf.reduce_sum(_two_sentences(x, i), axis=1)

  check(body, 4, "eager")


@pytest.mark.parametrize("mode", EXZ)
def test_dynamic_size_array_in_fixed_trip_loop(mode):
  """Under XLA the plain loop gives an empty [4, 0] (XLA drops the writes to a dynamic-size
  TensorArray); pfor refuses it with a ConversionError saying so."""
  x = _normal([4, 6], 36)

  def body(i):
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    for t in tf.range(6):
      ta = ta.write(t, x[i, t] * tf.cast(t < LENGTHS[i], tf.float32))
    return ta.stack()

  check(body, 4, mode, xla_refused=True)


# --------------------------------------------------------------------- Keras sequence layers


def _embedded(dim=4, mask_zero=True, seed=0):
  keras.utils.set_random_seed(seed)
  emb = keras.layers.Embedding(VOCAB, dim, mask_zero=mask_zero)
  emb.build((None, 6))
  return emb


def _variables(layers):
  out = []
  for layer in layers:
    out += layer.trainable_variables
  return out


@pytest.mark.parametrize("mode", EXZ)
def test_keras_rnns_with_masks(mode):
  """An LSTM and a Bidirectional SimpleRNN (sequences) under Embedding(mask_zero=True), and
  a GRU under a Masking layer on float inputs; one example is all padding."""
  emb = _embedded(seed=1)
  rnns = {"lstm": keras.layers.LSTM(3),
          "bidi": keras.layers.Bidirectional(keras.layers.SimpleRNN(2, return_sequences=True))}
  masking, gru = keras.layers.Masking(0.), keras.layers.GRU(2)
  e0 = emb(TOKENS_PAD[:1])
  for rnn in rnns.values():
    rnn(e0, mask=emb.compute_mask(TOKENS_PAD[:1]))
  x = _normal([4, 6, 3], 30) * tf.cast(TOKENS_PAD[..., None] != 0, tf.float32)
  gru(masking(x[:1]))

  def body(i):
    toks = TOKENS_PAD[i][None]
    e, mask = emb(toks), emb.compute_mask(toks)
    out = {k: rnn(e, mask=mask)[0] for k, rnn in rnns.items()}
    out["masking_gru"] = gru(masking(x[i][None]))[0]
    return out

  check(body, 4, mode)


def _cell_program(seed):
  """The paper's variable-length LSTM: an LSTMCell stepped over each example's own tokens."""
  emb = _embedded(mask_zero=False, seed=seed)
  cell = keras.layers.LSTMCell(3)
  cell(tf.zeros([1, 4]), [tf.zeros([1, 3]), tf.zeros([1, 3])])

  def body(i):
    e = emb(TOKENS[i, :LENGTHS[i]])
    h, c = tf.zeros([1, 3]), tf.zeros([1, 3])
    for t in tf.range(LENGTHS[i]):       # autograph: a while loop of per-example trips
      _, (h, c) = cell(e[t][None], [h, c])
    return h[0], c[0]

  return body, [emb, cell]


@pytest.mark.parametrize("mode", EXZ)
def test_lstm_cell_over_own_tokens(mode):
  body, layers = _cell_program(seed=2)
  check(body, 4, mode, xla_refused=True)
  if mode == "eager":
    check_grad(body, 4, mode, _variables(layers))


@pytest.mark.parametrize("mode", EXZ)
def test_embedding_dense_pool_over_own_tokens(mode):
  emb = _embedded(mask_zero=False, seed=4)
  dense = keras.layers.Dense(3, activation="tanh")
  pool = keras.layers.GlobalAveragePooling1D()
  pool(dense(emb(TOKENS[:1])))

  def body(i):
    return pool(dense(emb(TOKENS[i, :LENGTHS[i]][None])))[0]

  check(body, 4, mode, xla_refused=True)


@pytest.mark.xfail(strict=True, raises=vectorize.ConversionError, reason=(
    "README: 'a Keras text model on each example's own token count converts'; a "
    "keras.layers.LSTM on emb(x[i, :L[i]][None]) is a ConversionError about a TensorList "
    "'that differs per iteration', telling the user to size a TensorArray they never wrote "
    "(Keras's own unstack of the input); the loop runs"))
def test_keras_lstm_layer_over_own_tokens():
  emb = _embedded(mask_zero=False, seed=2)
  lstm = keras.layers.LSTM(3)
  lstm(emb(TOKENS[:1]))

  def body(i):
    return lstm(emb(TOKENS[i, :LENGTHS[i]][None]))[0]

  check(body, 4, "eager")


@pytest.mark.parametrize("mode", ["eager", "function", "xla", "runtime_n", "zero"])
def test_conv1d_causal_global_max_pool(mode):
  emb = _embedded(mask_zero=False, seed=3)
  conv = keras.layers.Conv1D(5, 3, padding="causal", activation="relu")
  conv(emb(TOKENS[:1]))
  pool = keras.layers.GlobalMaxPooling1D()

  def body(i):
    return pool(conv(emb(TOKENS[i][None])))[0]

  check(body, 4, mode)


@pytest.mark.parametrize("mode", EXZ)
def test_multi_head_attention_padding_mask(mode):
  emb = _embedded(seed=4)
  mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=3)
  norm = keras.layers.LayerNormalization()
  e0 = emb(TOKENS_PAD[:1])
  norm(e0 + mha(e0, e0))

  def body(i):
    toks = TOKENS_PAD[i][None]
    e = emb(toks)
    valid = toks != 0
    h = norm(e + mha(e, e, attention_mask=valid[:, :, None] & valid[:, None, :]))
    w = tf.cast(valid, h.dtype)[..., None]
    return tf.reduce_sum(h * w, 1)[0] / tf.maximum(tf.reduce_sum(w), 1.)

  check(body, 4, mode)


@pytest.mark.parametrize("mode", EXZ)
def test_multi_head_attention_causal_gradient(mode):
  keras.utils.set_random_seed(5)
  mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=2, output_shape=3)
  x = _normal([4, 5, 3], 7)
  mha(x[:1], x[:1], use_causal_mask=True)

  def body(i):
    return mha(x[i][None], x[i][None], use_causal_mask=True)[0]

  check(body, 4, mode)
  if mode == "eager":
    check_grad(body, 4, mode, [x] + mha.trainable_variables)


@pytest.mark.parametrize("mode", EXZ)
def test_layer_norm_float64_on_own_tokens(mode):
  keras.utils.set_random_seed(6)
  norm = keras.layers.LayerNormalization(dtype="float64")
  x = _normal([4, 6, 3], 8, tf.float64)
  norm(x[:1])

  def body(i):
    seq = norm(x[i, :LENGTHS[i]])
    return tf.reduce_sum(seq * seq, 0)

  check(body, 4, mode, xla_refused=True)


@pytest.mark.parametrize("mode", ["eager", "function", "xla", "zero"])
def test_float16_layer_norm_dense(mode):
  keras.utils.set_random_seed(11)
  norm = keras.layers.LayerNormalization(dtype="float16")
  dense = keras.layers.Dense(3, dtype="float16")
  x = _normal([4, 6, 5], 31, tf.float16)
  dense(norm(x[:1]))

  def body(i):
    h = dense(norm(x[i]))
    return tf.reduce_max(h, 0), tf.argmax(h, -1)

  check(body, 4, mode)


# ----------------------------------------------------------------------------- decoding

# A toy "language model": each token's greedy successor, ending at 0 (the end token).
# Starting at 1: 1 2 0; at 3: 3 4 5 6 0; at 5: 5 6 0; at 7: 7 8 9 1 2 0 (cut at 6 steps).
NEXT = tf.constant([0, 2, 0, 4, 5, 6, 0, 8, 9, 1], tf.int32)
START = tf.constant([1, 3, 5, 7], tf.int32)
END = 0
LOGITS_TABLE = tf.one_hot(NEXT, VOCAB) * 4. + _normal([VOCAB, VOCAB], 11) * 0.3
SEEDS = tf.constant([11, 22, 33, 44], tf.int32)


@pytest.mark.parametrize("mode", ["eager", "xla", "runtime_n", "zero"])
def test_greedy_decode_while_loop_fixed_array(mode):
  def body(i):
    ta = tf.TensorArray(tf.int32, size=6, clear_after_read=False)

    def cond(t, tok, ta, done):
      return (t < 6) & tf.logical_not(done)

    def step(t, tok, ta, done):
      nxt = tf.argmax(tf.gather(LOGITS_TABLE, tok), output_type=tf.int32)
      return t + 1, nxt, ta.write(t, nxt), tf.equal(nxt, END)

    t, _, ta, done = tf.while_loop(cond, step, [0, START[i], ta, False])
    return {"tokens": ta.stack(), "length": t, "ended": done}

  check(body, 4, mode)


@pytest.mark.parametrize("mode", EXZ)
def test_greedy_decode_autograph_break_ragged(mode):
  def body(i):
    ta = tf.TensorArray(tf.int64, size=0, dynamic_size=True)
    tok = tf.cast(START[i], tf.int64)
    for t in tf.range(6):
      tok = tf.argmax(tf.gather(LOGITS_TABLE, tok))
      ta = ta.write(t, tok)
      if tok == END:
        break
    return ta.stack()

  check(body, 4, mode, xla_refused=True)


def _rnn_decoder(dtype):
  emb = _normal([VOCAB, 4], 12, dtype)
  wh = _normal([4, 4], 13, dtype) * 0.5
  wo = tf.Variable(_normal([4, VOCAB], 14, dtype))

  def body(i):
    h = tf.gather(emb, START[i])
    score = tf.zeros([], dtype)
    toks = tf.TensorArray(tf.int32, size=5)
    for t in tf.range(5):
      logits = tf.linalg.matvec(wo, h, transpose_a=True)
      tok = tf.argmax(logits, output_type=tf.int32)
      score += tf.nn.log_softmax(logits)[tok]
      toks = toks.write(t, tok)
      h = tf.tanh(tf.linalg.matvec(wh, h, transpose_a=True) + tf.gather(emb, tok))
    return toks.stack(), score, h

  return body, [emb, wh, wo]


@pytest.mark.parametrize("mode", EXZ)
def test_rnn_greedy_decoder_float32(mode):
  body, params = _rnn_decoder(tf.float32)
  check(body, 4, mode)
  if mode == "eager":
    check_grad(body, 4, mode, params)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_stateless_categorical_of_sliced_logits(mode):
  logits = _normal([4, 3, VOCAB], 32)

  def body(i):
    return tf.random.stateless_categorical(logits[i, :2], 3, seed=tf.stack([SEEDS[i], 1]))

  check(body, 4, mode, xla_loop=True)


@pytest.mark.parametrize("mode", EXZ)
def test_sampled_decode_gumbel_max_and_categorical_early_stop(mode):
  """Two samplers with per-example seeds in one while loop: Gumbel-max over stateless uniform
  noise, and stateless_categorical; each stops at its own end token."""
  def body(i):
    ta = tf.TensorArray(tf.int32, size=6, clear_after_read=False)
    cat = tf.TensorArray(tf.int64, size=6, clear_after_read=False)

    def cond(t, tok, c, ta, cat):
      return (t < 6) & ((tok != END) | (c != END))

    def step(t, tok, c, ta, cat):
      seed = tf.stack([SEEDS[i], t])
      u = tf.random.stateless_uniform([VOCAB], seed=seed, minval=1e-6, maxval=1.)
      nxt = tf.argmax(tf.gather(LOGITS_TABLE, tok) - tf.math.log(-tf.math.log(u)),
                      output_type=tf.int32)
      nxt = tf.where(tok == END, END, nxt)
      logits = tf.gather(LOGITS_TABLE, tf.cast(c, tf.int32))[None] * 0.5
      c_next = tf.random.stateless_categorical(logits, 1, seed=seed + 1)[0, 0]
      c_next = tf.where(c == END, tf.constant(END, tf.int64), c_next)
      return t + 1, nxt, c_next, ta.write(t, nxt), cat.write(t, c_next)

    t, _, _, ta, cat = tf.while_loop(
        cond, step, [0, START[i], tf.cast(START[i], tf.int64), ta, cat])
    return ta.stack(), cat.stack(), t

  check(body, 4, mode, xla_loop=True)


@pytest.mark.parametrize("mode", ["eager", "xla", "runtime_n", "zero"])
def test_beam_top_k_in_while_loop_of_own_steps(mode):
  logp = tf.nn.log_softmax(LOGITS_TABLE * 0.4)

  def body(i):
    def step(t, scores, hist):
      cand = scores[:, None] + tf.gather(logp, hist[t])
      top, idx = tf.math.top_k(tf.reshape(cand, [-1]), k=2)
      hist = tf.gather(hist, idx // VOCAB, axis=1)
      hist = tf.tensor_scatter_nd_update(hist, [[t + 1]], (idx % VOCAB)[None])
      return t + 1, top, hist

    hist = tf.tensor_scatter_nd_update(tf.zeros([5, 2], tf.int32), [[0]],
                                       tf.fill([1, 2], START[i]))
    _, scores, hist = tf.while_loop(lambda t, s, h: t < 1 + i % 3, step,
                                    [0, tf.constant([0., -1e9]), hist])
    return tf.transpose(hist), scores

  check(body, 4, mode)


CTC_X = _normal([4, 6, 5], 33)


@pytest.mark.parametrize("mode", ["eager", "runtime_n", "zero"])
def test_ctc_greedy_decoder_values(mode):
  def body(i):
    decoded, neg_sum_logits = tf.nn.ctc_greedy_decoder(CTC_X[i][:, None, :], LENGTHS[i][None])
    return decoded[0].values, neg_sum_logits[0, 0]

  check(body, 4, mode)


@pytest.mark.parametrize("mode", ["eager", "zero"])
def test_ctc_greedy_decoder_sparse_output(mode):
  def body(i):
    decoded, _ = tf.nn.ctc_greedy_decoder(CTC_X[i][:, None, :], LENGTHS[i][None],
                                          blank_index=0)
    return decoded[0]

  if mode == "zero":
    got = run_pfor(body, 4, mode)
    assert isinstance(got, tf.SparseTensor)
    assert got.values.dtype == tf.int64 and got.values.shape[0] == 0
    assert got.dense_shape.numpy()[0] == 0 and got.indices.shape[1] == 3
    return
  outs = [body(tf.constant(k)) for k in range(4)]
  expected = tf.sparse.concat(0, [tf.sparse.expand_dims(s, 0) for s in outs],
                              expand_nonconcat_dims=True)
  got = run_pfor(body, 4, mode)
  assert isinstance(got, tf.SparseTensor)
  got, expected = tf.sparse.reorder(got), tf.sparse.reorder(expected)
  assert_same((got.indices, got.values, got.dense_shape),
              (expected.indices, expected.values, expected.dense_shape))


# ------------------------------------------------------------------------ sequence losses


@pytest.mark.parametrize("mode", EXZ)
def test_masked_sparse_categorical_cross_entropy(mode):
  logits = tf.Variable(_normal([4, 6, VOCAB], 15))
  sce = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

  def body(i):
    targets = TOKENS[i]
    mask = tf.cast(targets != 0, tf.float32)
    per_token = sce(targets, logits[i])
    return tf.reduce_sum(per_token * mask) / tf.reduce_sum(mask), per_token

  check(body, 4, mode)
  if mode == "eager":
    check_grad(body, 4, mode, [logits])


@pytest.mark.parametrize("mode", ["eager", "xla", "runtime_n", "zero"])
def test_sparse_softmax_ce_float64_by_length(mode):
  logits = _normal([4, 6, VOCAB], 16, tf.float64)

  def body(i):
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(TOKENS[i], logits[i])
    return tf.reduce_sum(ce * tf.sequence_mask(LENGTHS[i], 6, tf.float64))

  check(body, 4, mode)
  if mode == "runtime_n":
    check_grad(body, 4, mode, [logits])


CTC_LABELS = tf.constant([[1, 2, 0], [3, 3, 1], [2, 0, 0], [4, 1, 2]], tf.int32)
CTC_LABEL_LEN = tf.constant([2, 3, 1, 3], tf.int32)
CTC_LOGIT_LEN = tf.constant([5, 6, 3, 6], tf.int32)


def _ctc_dense_body(logits):
  def body(i):
    return tf.nn.ctc_loss(labels=CTC_LABELS[i][None], logits=logits[i][:, None, :],
                          label_length=CTC_LABEL_LEN[i][None],
                          logit_length=CTC_LOGIT_LEN[i][None], blank_index=0)[0]
  return body


@pytest.mark.parametrize("mode", [
    "eager",
    pytest.param("zero", marks=pytest.mark.xfail(strict=True, raises=vectorize.ConversionError,
                                                  reason=(
        "README: iters 'a Python int (0 included)'; tf.nn.ctc_loss with dense labels at n = 0 "
        "is a ConversionError: 'Cannot vectorize the call of legacy function ... at a static "
        "n = 0 ... To fix: skip the call when there are no examples'")))])
def test_ctc_loss_dense_labels(mode):
  check(_ctc_dense_body(_normal([4, 6, 5], 17)), 4, mode)


def test_ctc_loss_dense_labels_gradient():
  logits = _normal([4, 6, 5], 17)
  check_grad(_ctc_dense_body(logits), 4, "eager", [logits])


@pytest.mark.parametrize("mode", ["eager", "zero"])
def test_ctc_loss_sparse_labels(mode):
  logits = _normal([4, 6, 5], 18)

  def body(i):
    labels = tf.sparse.from_dense(CTC_LABELS[i][None])   # 0 is padding here
    return tf.nn.ctc_loss(labels=labels, logits=logits[i][:, None, :], label_length=None,
                          logit_length=CTC_LOGIT_LEN[i][None], blank_index=-1)[0]

  check(body, 4, mode)
  if mode == "eager":
    check_grad(body, 4, mode, [logits])


@pytest.mark.parametrize("mode", ["eager", "function", "xla", "zero"])
def test_unsorted_segment_ops_by_token_id(mode):
  x = _normal([4, 6, 2], 19, tf.float64)

  def body(i):
    sums = tf.math.unsorted_segment_sum(x[i], TOKENS[i], VOCAB)
    maxes = tf.math.unsorted_segment_max(x[i], TOKENS[i], VOCAB)
    return sums, maxes

  check(body, 4, mode)
  if mode == "eager":
    check_grad(body, 4, mode, [x])


@pytest.mark.parametrize("mode", EXZ)
def test_sorted_segment_ops_ragged(mode):
  x = _normal([4, 6], 20)

  def body(i):
    order = tf.argsort(TOKENS[i], stable=True)
    ids, vals = tf.gather(TOKENS[i], order), tf.gather(x[i], order)
    return tf.math.segment_sum(vals, ids), tf.math.segment_mean(vals, ids)

  check(body, 4, mode, xla_refused=True)


@pytest.mark.parametrize("mode", ALL)
def test_bincount_fixed_bins_weighted(mode):
  w = _normal([4, 6], 21)

  def body(i):
    counts = tf.math.bincount(TOKENS[i], minlength=VOCAB, maxlength=VOCAB)
    weighted = tf.math.bincount(TOKENS[i], weights=w[i], minlength=VOCAB, maxlength=VOCAB)
    return counts, weighted

  check(body, 4, mode)


@pytest.mark.parametrize("mode", EXZ)
def test_bincount_own_bins_ragged(mode):
  def body(i):
    return tf.math.bincount(TOKENS[i], dtype=tf.int64)

  check(body, 4, mode, xla_refused=True)


@pytest.mark.parametrize("mode", ["eager", "xla", "runtime_n", "zero"])
def test_unique_with_counts_per_example(mode):
  def body(i):
    y, idx, count = tf.unique_with_counts(TOKENS[i], out_idx=tf.int64)
    return y, idx, count, tf.size(y)

  check(body, 4, mode, xla_refused=True)


# --------------------------------------------------------------------------------- strings

SENTS = tf.constant(["the cat sat", "a dog", "", "the the end now"])
UNI = tf.constant(["héllo", "日本", "", "aé日"])
WORDS = ["the", "cat", "sat", "dog", "end"]


@pytest.mark.parametrize("mode", ["eager", "runtime_n", "zero"])
def test_split_words_counts_bigrams(mode):
  def body(i):
    words = tf.strings.split(tf.strings.regex_replace(SENTS[i], "the ", "THE "))
    return (words, tf.size(words), tf.strings.length(words),
            tf.strings.ngrams(words, 2, separator="_"),
            tf.strings.reduce_join(words, separator="|"))

  check(body, 4, mode)


@pytest.mark.parametrize("mode", ["eager", "zero"])
def test_string_lookup_and_hashing_split_words(mode):
  lookup = keras.layers.StringLookup(vocabulary=WORDS)
  hashing = keras.layers.Hashing(num_bins=8)
  int_hashing = keras.layers.Hashing(num_bins=5, salt=3)

  def body(i):
    words = tf.strings.split(SENTS[i])
    ids = lookup(words)
    return (ids, tf.math.bincount(ids, minlength=7, maxlength=7), hashing(words),
            tf.strings.to_hash_bucket_fast(words, 16), int_hashing(tf.cast(TOKENS[i], tf.int64)))

  check(body, 4, mode)


@pytest.mark.parametrize("mode", ["eager", "zero"])
def test_substr_and_unicode_codepoints(mode):
  pos = tf.constant([0, 2, 0, 4])

  def body(i):
    head = tf.strings.substr(SENTS[i], 0, 3)
    mid = tf.strings.substr(SENTS[i], pos[i], 2)
    upper = tf.strings.upper(tf.strings.substr(UNI[i], 0, 2, unit="UTF8_CHAR"))
    cps = tf.strings.unicode_decode(UNI[i], "UTF-8")
    return (head, mid, upper, cps, tf.reduce_sum(cps),
            tf.strings.unicode_encode(tf.reverse(cps, [0]), "UTF-8"),
            tf.strings.bytes_split(SENTS[i]))

  check(body, 4, mode)


@pytest.mark.parametrize("mode", ["eager", "zero"])
def test_text_vectorization_in_body(mode):
  tv = keras.layers.TextVectorization(vocabulary=WORDS, output_sequence_length=5)

  def body(i):
    return tv(SENTS[i][None])[0]

  check(body, 4, mode)


# ------------------------------------------------- vectorized_map / map_fn over batches


def run_map(fn, elems, mode, mapper=None, **kw):
  mapper = mapper or vectorize.vectorized_map
  if mode == "eager":
    return mapper(fn, elems, **kw)
  if mode == "function":
    return tf.function(lambda e: mapper(fn, e, **kw))(elems)
  if mode == "xla":
    return tf.function(lambda e: mapper(fn, e, **kw), jit_compile=True)(elems)
  if mode == "runtime_n":
    spec = tf.nest.map_structure(lambda t: tf.TensorSpec([None] + t.shape[1:], t.dtype), elems)
    return tf.function(lambda e: mapper(fn, e, **kw), input_signature=[spec])(elems)
  if mode == "zero":
    return mapper(fn, tf.nest.map_structure(lambda t: t[:0], elems), **kw)
  raise AssertionError(mode)


def rows(fn, elems):
  n = tf.nest.flatten(elems)[0].shape[0]
  outs = [fn(tf.nest.map_structure(lambda e: e[k], elems)) for k in range(n)]
  return tf.nest.map_structure(lambda *xs: tf.stack(xs), *outs)


def check_map(fn, elems, mode, mapper=None, **kw):
  expected = _cached("rows", lambda: rows(fn, elems))
  if mode == "zero":
    expected = _zero_of(expected)
  assert_same(run_map(fn, elems, mode, mapper, **kw), expected)


@pytest.mark.parametrize("mode", ALL)
def test_vectorized_map_padded_dict(mode):
  emb = _normal([VOCAB, 3], 22, tf.float64)
  elems = {"tokens": tf.cast(TOKENS, tf.int64), "length": LENGTHS}

  def fn(ex):
    m = tf.sequence_mask(ex["length"], 6, tf.float64)
    e = tf.gather(emb, ex["tokens"]) * m[:, None]
    return {"mean": tf.reduce_sum(e, 0) / tf.cast(ex["length"], tf.float64),
            "last": ex["tokens"][ex["length"] - 1]}

  check_map(fn, elems, mode)


@pytest.mark.parametrize("mode", ["eager", "function", "zero"])
def test_vectorized_map_ragged_rows(mode):
  rt = tf.RaggedTensor.from_tensor(TOKENS_PAD, lengths=[3, 6, 0, 2])
  emb = _normal([VOCAB, 3], 23)

  def fn(row):
    return tf.reduce_sum(tf.gather(emb, row), 0), tf.size(row), tf.reduce_max(
        tf.concat([row, [-1]], 0))

  expected = tuple(tf.stack(x) for x in zip(*[fn(rt[k]) for k in range(4)]))
  if mode == "zero":
    expected, got = _zero_of(expected), vectorize.vectorized_map(fn, rt[:0])
  elif mode == "eager":
    got = vectorize.vectorized_map(fn, rt)
  else:
    got = tf.function(lambda r: vectorize.vectorized_map(fn, r))(rt)
  assert_same(got, expected)


@pytest.mark.parametrize("mode", ["eager", "zero"])
def test_vectorized_map_strings(mode):
  def fn(s):
    words = tf.strings.split(s)
    return tf.size(words), tf.strings.to_hash_bucket_fast(tf.strings.reduce_join(words), 9)

  check_map(fn, SENTS, mode)


@pytest.mark.parametrize("mode", ["eager", "xla", "runtime_n", "zero"])
def test_map_fn_output_signature(mode):
  logits = _normal([4, 6, VOCAB], 24)

  def fn(args):
    lg, toks = args
    probs = tf.nn.softmax(lg)
    return tf.reduce_sum(tf.gather(probs, toks, batch_dims=1)), tf.argmax(lg, -1)

  check_map(fn, (logits, TOKENS), mode, mapper=vectorize.map_fn,
            fn_output_signature=(tf.float32, tf.int64))


@pytest.mark.parametrize("mode", EXZ)
def test_map_fn_matches_tf_map_fn_keras_conv_encoder(mode):
  keras.utils.set_random_seed(7)
  emb = keras.layers.Embedding(VOCAB, 3)
  conv = keras.layers.Conv1D(4, 2, activation="relu")
  conv(emb(TOKENS[:1]))

  def fn(toks):
    h = conv(emb(toks[None]))[0]
    valid = tf.cast(toks[1:] > 0, h.dtype)[:, None]
    return tf.reduce_sum(h * valid, 0)

  expected = _cached("tf.map_fn", lambda: tf.map_fn(fn, TOKENS, fn_output_signature=tf.float32))
  if mode == "zero":
    expected = expected[:0]
  assert_same(run_map(fn, TOKENS, mode, mapper=vectorize.map_fn,
                      fn_output_signature=tf.float32), expected)


# ---------------------------------------------------------------- per-example gradients

LABELS = tf.constant([0, 1, 1, 0], tf.int32)


@pytest.mark.parametrize("mode", EXZ)
def test_per_example_gradients_keras_rnn_classifier(mode):
  keras.utils.set_random_seed(8)
  model = keras.Sequential([keras.Input((6,), dtype="int32"),
                            keras.layers.Embedding(VOCAB, 4, mask_zero=True),
                            keras.layers.SimpleRNN(3),
                            keras.layers.Dense(2)])

  def loss_fn(toks, label):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(label, model(toks[None])[0])

  def loop_grads():
    out = []
    for k in range(4):
      with tf.GradientTape() as tape:
        loss = loss_fn(TOKENS_PAD[k], LABELS[k])
      out.append(tape.gradient(loss, model.trainable_variables))
    return [tf.stack(g) for g in zip(*out)]

  expected = _cached("grads", loop_grads)
  f = lambda t, l: vectorize.per_example_gradients(loss_fn, model, t, l)
  if mode == "eager":
    got = f(TOKENS_PAD, LABELS)
  elif mode == "xla":
    got = tf.function(f, jit_compile=True)(TOKENS_PAD, LABELS)
  else:
    got, expected = f(TOKENS_PAD[:0], LABELS[:0]), [e[:0] for e in expected]
  assert_same(list(got), expected)


@pytest.mark.parametrize("mode", ["eager", "zero", "xla"])
def test_tape_inside_body_causal_conv_language_model(mode):
  keras.utils.set_random_seed(9)
  emb = keras.layers.Embedding(VOCAB, 3)
  conv = keras.layers.Conv1D(4, 3, padding="causal", activation="tanh")
  head = keras.layers.Dense(VOCAB)
  head(conv(emb(TOKENS[:1])))
  variables = _variables([emb, conv, head])

  def body(i):
    toks = TOKENS[i][None]
    with tf.GradientTape() as tape:
      logits = head(conv(emb(toks)))[0, :-1]
      ce = tf.nn.sparse_softmax_cross_entropy_with_logits(TOKENS[i, 1:], logits)
      mask = tf.cast(TOKENS[i, 1:] != 0, tf.float32)
      loss = tf.reduce_sum(ce * mask) / tf.maximum(tf.reduce_sum(mask), 1.)
    return loss, [_dense(g) for g in tape.gradient(loss, variables)]

  check(body, 4, mode)


# ------------------------------------------------------------------------------- tf.data


def test_map_and_batch_padded_text():
  def fn(sent):
    words = tf.strings.split(sent)
    ids = tf.strings.to_hash_bucket_fast(words, 8)
    padded = tf.pad(ids, [[0, 4 - tf.minimum(tf.size(ids), 4)]])[:4]
    return {"ids": tf.ensure_shape(padded, [4]), "n": tf.size(words)}

  ds = tf.data.Dataset.from_tensor_slices(SENTS)
  got = list(ds.apply(vectorize.data.map_and_batch(fn, 3)))
  expected = list(ds.map(fn).batch(3))
  assert len(got) == len(expected) == 2
  for g, e in zip(got, expected):
    assert_same(g, e)


def test_map_and_batch_variable_length_tokens():
  emb = _normal([VOCAB, 3], 25)

  def fn(toks, label):
    return tf.reduce_mean(tf.gather(emb, toks), 0), tf.size(toks), label

  ds = tf.data.Dataset.from_tensor_slices((TOKENS, LENGTHS, LABELS)).map(
      lambda t, n, l: (t[:n], l))
  assert ds.element_spec[0].shape.as_list() == [None]
  got = list(ds.apply(vectorize.data.map_and_batch(fn, 3)))
  expected = list(ds.map(fn).batch(3))
  assert len(got) == len(expected) == 2
  for g, e in zip(got, expected):
    assert_same(g, e)
