"""Random ops: stateful samplers, tf.random.Generator ops and stateless (seeded) samplers.

Stateful samplers draw a fresh, independent sample per iteration, so the trick is to widen
the sample: a per-iteration shape `s` becomes `[n] + s` and one op draws every iteration's
sample at once (their shape input must be loop-invariant). The values differ from a
sequential run's, as any two runs of a stateful sampler do; only the distribution and the
independence between iterations are promised.

tf.random.Generator methods read and advance the generator's state with `RngReadAndSkip`
and sample with a stateless op keyed by that state. Its converter advances the state by n
skips and gives iteration k the state the k-th sequential call would have read, so the
samples equal a sequential run's exactly.

Stateless samplers are pure functions of their seed: with a loop-invariant seed the walker
emits them once, unchanged. A seed (or key and counter) that differs per iteration, as Keras
layers drawing from their seed generator have, needs a key per iteration, which no kernel
takes: uniform, normal and integer samplers (V1 and V2) and the seed-to-key ops then compute
the kernels' Philox streams in TF ops for all iterations at once (converters/philox.py;
uniform and integer samples bit for bit, normal ones to the last bit or so; under XLA, whose
kernels make floats and keys their own way, the V2 float32/float64 uniform and normal
samplers (normal ones of rank 0 or 1), the integer samplers and the key ops follow XLA's,
bit for bit). The rest (under XLA V1 samplers, 16-bit floats and normal samples of higher
rank; truncated normal, gamma, Poisson, binomial,
multinomial; and the generator's binomial, `StatefulRandomBinomial`) run iteration by
iteration, on purpose (exact, not counted as a fallback). Two have an exact vectorized form when only
their other inputs differ per iteration: integer samplers with stacked bounds reduce the same
random bits modulo each iteration's range, as the kernels do, and a stateless shuffle is one
permutation gathered from every iteration's value. `RandomGammaGrad`, the reparameterization
gradient of the gamma samplers, is elementwise.
"""

import tensorflow as tf

from converters import philox
from vectorize import family
from vectorize import values
from vectorize.errors import Unvectorizable
from vectorize.family import register_elementwise, register_sequential
from vectorize.registry import register
from vectorize.values import invariant, stacked

_PHILOX = 1  # the `alg` value of the Philox counter-based generator
_AUTO_SELECT = 3  # picks Philox on CPU and GPU


# ----------------------------------------------------------------------------- helpers

def _widened_shape(op, i):
  """Invariant shape input i with the loop axis in front: `s -> [n] + s`."""
  return values.prepend_loop_length(op.invariant(i), op.ctx.n, op.ctx.static_n)


def _shape_length(op, i):
  """The static length of shape input i, i.e. the rank of the sample it asks for."""
  length = op.input_shape(i).num_elements()
  if length is None:
    raise Unvectorizable(f"the length of shape input {i} is not known at trace time")
  return length


def _per_iteration(op):
  """Runs the op iteration by iteration: exact, for a seed that differs per iteration."""
  return family.run_sequential(op)


def _as_shape(dims):
  """A list of ints and scalar tensors as a shape argument (a list when all are static)."""
  if all(isinstance(d, int) for d in dims):
    return dims
  return tf.stack([tf.cast(d, tf.int32) for d in dims])


_UNSIGNED = {tf.int32: tf.uint32, tf.int64: tf.uint64}


def _uniform_int_from_bits(bits, minval, maxval):
  """`minval + bits % (maxval - minval)` in unsigned arithmetic, as TF's integer kernels do.

  `bits` (a Value, `[n] + s` or `s`) holds uniform bits in the bounds' signed dtype (XLA has
  no unsigned 32-bit full-range stateless kernel); the bounds are Values of per-iteration
  scalars; at least one of the three is stacked. The same bits give the kernels' integers.
  """
  bits, lo, hi = values.align_ranks([bits, minval, maxval])
  bits = tf.bitcast(bits, _UNSIGNED[minval.dtype])
  check = tf.raw_ops.Assert(condition=tf.reduce_all(lo < hi),
                            data=[tf.constant("Need minval < maxval in every iteration")])
  with tf.control_dependencies([check]):
    lo_bits = tf.bitcast(lo, bits.dtype)
    span = tf.bitcast(hi, bits.dtype) - lo_bits
    return stacked(tf.bitcast(lo_bits + bits % span, minval.dtype))


# ----------------------------------------------------------------------------- stateful samplers

def _register_widened(*op_types, shape_input):
  """Samplers filling `shape` (their other inputs invariant): draw `[n] + shape` at once."""

  def convert(op):
    inputs = [_widened_shape(op, i) if i == shape_input else op.invariant(i)
              for i in range(op.num_inputs)]
    return stacked(op.rebuild(inputs)[0])

  register(*op_types)(convert)


def _register_parameterized(*op_types):
  """Samplers of `shape + param.shape` (RandomGamma, RandomPoissonV2): one draw per parameter.

  Invariant parameters: draw `[n] + shape`. Stacked parameters `[n] + p`: draw
  `shape + [n] + p` and move the loop axis to the front.
  """

  def convert(op):
    shape, param = op.invariant(0), op.value(1)
    if not param.stacked:
      return stacked(op.rebuild([_widened_shape(op, 0), param.tensor])[0])
    k = _shape_length(op, 0)
    sample = op.rebuild([shape, param.tensor])[0]  # shape + [n] + p
    r = values.rank(sample)
    return stacked(tf.transpose(sample, [k] + list(range(k)) + list(range(k + 1, r))))

  register(*op_types)(convert)


@register("RandomUniformInt")
def _convert_random_uniform_int(op):
  """Invariant bounds: one wider draw. Stacked bounds: uniform bits reduced per iteration."""
  shape = _widened_shape(op, 0)
  if not (op.is_stacked(1) or op.is_stacked(2)):
    return stacked(op.rebuild([shape, op.invariant(1), op.invariant(2)])[0])
  unsigned = _UNSIGNED[op.value(1).dtype]
  # Exactly uniform 32-bit words: int64 draws from [0, 2**32); int64 samples take two words.
  words = 1 if unsigned == tf.uint32 else 2
  draws = op.rebuild([tf.concat([tf.constant([words], shape.dtype), shape], 0),
                      tf.constant(0, tf.int64),
                      tf.constant(2**32, tf.int64)], attrs={"Tout": tf.int64})[0]
  if words == 1:
    bits = tf.bitcast(tf.cast(draws[0], tf.uint32), tf.int32)
  else:
    bits = tf.bitcast(tf.bitwise.left_shift(tf.cast(draws[0], tf.uint64),
                                            tf.constant(32, tf.uint64)) |
                      tf.cast(draws[1], tf.uint64), tf.int64)
  return _uniform_int_from_bits(stacked(bits), op.value(1), op.value(2))


@register("StatefulUniformInt")
def _convert_stateful_uniform_int(op):
  """Invariant bounds: one wider draw. Stacked bounds: the generator's full-range bits."""
  resource, algorithm, shape = op.invariant(0), op.invariant(1), _widened_shape(op, 2)
  if not (op.is_stacked(3) or op.is_stacked(4)):
    return stacked(op.rebuild([resource, algorithm, shape, op.invariant(3), op.invariant(4)])[0])
  bits = op.rebuild([resource, algorithm, shape], attrs={"dtype": op.value(3).dtype},
                    op_type="StatefulUniformFullInt")[0]
  return _uniform_int_from_bits(stacked(bits), op.value(3), op.value(4))


@register("StatefulRandomBinomial")
def _convert_stateful_random_binomial(op):
  """Iteration by iteration: the kernel skips the generator's counter by an amount that is
  not linear in the sample's size (TF 2.21: 256 * (150 + 50 k) for k values, more where the
  parameters broadcast), so one wide draw would leave the state where no loop leaves it."""
  return family.run_sequential(op)


@register("Multinomial")
def _convert_multinomial(op):
  """Stacked logits `[n, b, c]` fold into the batch axis; invariant logits draw n times as many
  samples per row, `[b, n*s] -> [b, n, s] -> [n, b, s]`."""
  num_samples = op.invariant(1)
  if op.is_stacked(0):
    logits = op.value(0).tensor
    b = values.dynamic_shape(logits)[1]
    sample = op.rebuild([values.merge_leading(logits), num_samples])[0]  # [n*b, s]
    return stacked(values.split_leading(sample, op.ctx.n, b))
  logits = op.invariant(0)
  n = values.loop_length(op.ctx)
  sample = op.rebuild([logits, num_samples * tf.cast(n, num_samples.dtype)])[0]
  b = values.dynamic_shape(logits)[0]
  s = tf.get_static_value(num_samples)
  s = int(s) if s is not None else num_samples
  return stacked(tf.transpose(tf.reshape(sample, _as_shape([b, n, s])), [1, 0, 2]))


@register("RandomShuffle")
def _convert_random_shuffle(op):
  """An independent permutation per iteration: argsort of fresh uniform keys, then a gather."""
  v = op.value(0)
  if values.rank(v.tensor) == (1 if v.stacked else 0):
    return v  # a scalar shuffles to itself
  length = values.dynamic_shape(v.tensor)[1 if v.stacked else 0]
  n = values.loop_length(op.ctx)
  # float64 keys: ties, which would bias the permutation, have probability ~ length**2 / 2**53.
  keys = op.rebuild([_as_shape([n, length])], attrs={"dtype": tf.float64, "T": tf.int32},
                    op_type="RandomUniform")[0]
  permutations = tf.argsort(keys, axis=1)  # [n, length]
  if v.stacked:
    return stacked(tf.gather(v.tensor, permutations, batch_dims=1))
  return stacked(tf.gather(v.tensor, permutations))


# ----------------------------------------------------------------------------- generator state

@register("RngReadAndSkip")
def _convert_rng_read_and_skip(op):
  """Skips the state once for iteration 0 and once for the rest; iteration k reads the state
  plus k single skips, which is what the k-th sequential call reads.

  The two reads give the step one skip adds to Philox's 128-bit counter (the kernel's own
  multiplier, whatever it is); the per-iteration states are `[n, 3]` int64, `[counter low,
  counter high, key]`, computed in uint64 with the carry into the high word. Assumes that
  n skips add less than 2**64 to the counter (about 2**56 samples).

  Exact when the body draws once from the generator per iteration; with several draws each
  op takes its own block of n skips, so the draws are still independent and the generator
  ends where the sequential loop leaves it, but iterations get other blocks than there.
  Inside a conditional converted with static shapes every lane draws, so the generator
  advances further than in a sequential loop.
  """
  resource, alg, delta = op.invariant(0), op.invariant(1), op.invariant(2)
  if op.static_value(1) != _PHILOX:
    raise Unvectorizable("only the Philox generator's state layout is known")
  n = tf.cast(op.ctx.n, tf.uint64)
  first_count = tf.minimum(n, 1)
  first = op.rebuild([resource, alg, delta * first_count])[0]
  with tf.control_dependencies([first]):
    second = op.rebuild([resource, alg, delta * (n - first_count)])[0]
  start, after_one = tf.bitcast(first, tf.uint64), tf.bitcast(second, tf.uint64)
  step = after_one[0] - start[0]
  low = start[0] + tf.cast(tf.range(op.ctx.n), tf.uint64) * step
  high = start[1] + tf.cast(low < start[0], tf.uint64)
  key = tf.broadcast_to(start[2], tf.shape(low))
  return stacked(tf.bitcast(tf.stack([low, high, key], axis=1), tf.int64))


@register("RngSkip")
def _convert_rng_skip(op):
  """n skips of `delta` (or the sum of the per-iteration deltas) as one skip."""
  resource, algorithm, delta = op.invariant(0), op.invariant(1), op.value(2)
  if delta.stacked:
    total = tf.reduce_sum(delta.tensor)
  else:
    total = delta.tensor * tf.cast(op.ctx.n, delta.dtype)
  return op.rebuild([resource, algorithm, total])


# ----------------------------------------------------------------------------- stateless samplers

def _register_stateless_uniform_int(op_type, bits_op_type, num_seed_inputs):
  """Stateless integer samplers: inputs are (shape, seed inputs..., minval, maxval).

  Stacked shape or seed: per iteration. Only the bounds stacked: the full-range bits of the
  same seed, reduced per iteration, which are bit for bit the kernel's results.
  """
  lo, hi = 1 + num_seed_inputs, 2 + num_seed_inputs

  def convert(op):
    if op.is_stacked(0):
      return _per_iteration(op)
    if any(op.is_stacked(i) for i in range(1, lo)):
      key_counter = _keys_per_iteration(op, num_seed_inputs)
      if key_counter is None:
        return _per_iteration(op)
      bits = philox.full_int(*key_counter, op.invariant(0), op.value(lo).dtype,
                             xla=op.ctx.target.xla)
      return _uniform_int_from_bits(stacked(bits), op.value(lo), op.value(hi))
    bits = op.rebuild([op.invariant(i) for i in range(lo)], attrs={"dtype": op.value(lo).dtype},
                      op_type=bits_op_type)[0]
    return _uniform_int_from_bits(invariant(bits), op.value(lo), op.value(hi))

  register(op_type)(convert)


@register("StatelessShuffle")
def _convert_stateless_shuffle(op):
  """Invariant key: the permutation depends only on the key and the length, so shuffle the
  positions once and gather every iteration's value with it."""
  v = op.value(0)
  if any(op.is_stacked(i) for i in (1, 2, 3)) or values.rank(v.tensor) < 2:
    return _per_iteration(op)
  length = values.dynamic_shape(v.tensor)[1]
  positions = tf.range(length, dtype=tf.int64)
  permutation = op.rebuild([positions] + [op.invariant(i) for i in (1, 2, 3)],
                           attrs={"T": tf.int64})[0]
  return stacked(tf.gather(v.tensor, permutation, axis=1))


def _keys_per_iteration(op, num_seed_inputs):
  """(key `[n, 1]`, counter `[n, 2]`) uint64 for a sampler whose seed inputs (a seed, or key,
  counter and alg) differ per iteration, or None where only the kernel reproduces them (XLA
  draws V1 samplers its own way)."""
  if num_seed_inputs == 1:
    return None if op.ctx.target.xla else philox.key_counter_from_seed(op.stacked(1))
  alg = tf.get_static_value(op.value(3).tensor) if not op.is_stacked(3) else None
  if alg is None or int(alg) not in (_PHILOX, _AUTO_SELECT):
    return None
  return op.stacked(1), op.stacked(2)


def _register_keyed_sampler(op_type, sample, supported, num_seed_inputs):
  """Samplers of (shape, seed inputs...): a stacked seed draws every iteration's stream in TF
  ops (`sample(key, counter, shape, dtype, xla)`) where `supported(dtype, xla, rank)`, else
  the kernel runs per iteration."""

  def convert(op):
    dtype, xla = op.op.outputs[0].dtype, op.ctx.target.xla
    key_counter = None
    if not op.is_stacked(0) and supported(dtype, xla, op.output_shape().rank):
      key_counter = _keys_per_iteration(op, num_seed_inputs)
    if key_counter is None:
      return _per_iteration(op)
    return stacked(sample(*key_counter, op.invariant(0), dtype, xla=xla))

  register(op_type)(convert)


@register("StatelessRandomGetKeyCounter", "StatelessRandomGetKeyCounterAlg")
def _convert_stateless_random_get_key_counter(op):
  """Per-iteration seeds: the kernel's seed scrambling for all seeds at once."""
  key, counter = philox.key_counter_from_seed(op.stacked(0), xla=op.ctx.target.xla)
  outputs = [stacked(key), stacked(counter)]
  if op.type == "StatelessRandomGetKeyCounterAlg":
    outputs.append(invariant(op.rebuild([_any_seed(op)])[2]))
  return outputs


def _any_seed(op):
  """A seed of the op's dtype, for ops whose other outputs do not depend on it (alg)."""
  return tf.zeros([2], op.value(0).dtype)


@register("StatelessRandomGetAlg")
def _convert_stateless_random_get_alg(op):
  """Marked stateful, but a constant of the device: emitted once, invariant."""
  return invariant(op.rebuild([])[0])


# ----------------------------------------------------------------------------- registration

_register_parameterized("RandomGamma", "RandomPoissonV2")
register_elementwise("RandomGammaGrad")
_register_stateless_uniform_int("StatelessRandomUniformInt",
                                bits_op_type="StatelessRandomUniformFullInt", num_seed_inputs=1)
_register_stateless_uniform_int("StatelessRandomUniformIntV2",
                                bits_op_type="StatelessRandomUniformFullIntV2", num_seed_inputs=3)
_register_widened("RandomStandardNormal", "RandomUniform", "TruncatedNormal", shape_input=0)
_register_widened("StatefulStandardNormalV2", "StatefulTruncatedNormal", "StatefulUniform",
                  "StatefulUniformFullInt", shape_input=2)
_register_keyed_sampler("StatelessRandomUniform", philox.uniform, philox.uniform_supported,
                        num_seed_inputs=1)
_register_keyed_sampler("StatelessRandomUniformV2", philox.uniform, philox.uniform_supported,
                        num_seed_inputs=3)
_register_keyed_sampler("StatelessRandomNormal", philox.normal, philox.normal_supported,
                        num_seed_inputs=1)
_register_keyed_sampler("StatelessRandomNormalV2", philox.normal, philox.normal_supported,
                        num_seed_inputs=3)
_register_keyed_sampler("StatelessRandomUniformFullInt", philox.full_int,
                        philox.full_int_supported, num_seed_inputs=1)
_register_keyed_sampler("StatelessRandomUniformFullIntV2", philox.full_int,
                        philox.full_int_supported, num_seed_inputs=3)
register_sequential(
    "StatelessMultinomial",
    "StatelessParameterizedTruncatedNormal",
    "StatelessRandomBinomial",
    "StatelessRandomGammaV2",
    "StatelessRandomGammaV3",
    "StatelessRandomPoisson",
    "StatelessTruncatedNormal",
    "StatelessTruncatedNormalV2",
)
