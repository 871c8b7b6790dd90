"""TensorFlow's stateless samplers written in TF ops, for a different key in every iteration.

The stateless kernels take one Philox key and counter. A body whose seed differs per
iteration (every Keras layer that draws with a seed from its seed generator) needs a key per
iteration, which no kernel takes; here the same computation runs for all of them at once:

- a seed `[s0, s1]` becomes a key and counter by one Philox4x32-10 block of the seed's words
  under a fixed key (the first two output words are the key, the last two the counter's high
  half), as `StatelessRandomGetKeyCounter` and the V1 samplers do;
- output element groups are Philox blocks of consecutive counters (counter + g for group g,
  a 128-bit add); the words are used in order: one per 32-bit sample, two (low word first)
  per 64-bit sample;
- words become samples as the kernels make them: a float in [1, 2) from the mantissa bits,
  minus one; Box-Muller on word pairs for normal samples.

Uniform floats and integers equal the kernels bit for bit. Normal samples use TF's log,
sqrt, sin and cos where the kernels use the C library's, so they may differ in the last bit
or two. Counters advance by less than 2**32 blocks per sample (16G values per iteration).

XLA's kernels (measured on TF 2.21) draw the same words from a key and counter but make
floats from the high bits of a word (or of two words, low first, for doubles), and turn a
seed into a key and counter from the low 32 bits of each seed element; `xla=True` follows
them (float32 and float64 uniform samples, normal ones of rank 0 or 1, integers, keys and
counters).
"""

import math

import tensorflow as tf

from vectorize.compiled_calls import compiled_on_cpu


_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
_KEY_STEPS = (0x9E3779B9, 0xBB67AE85)
_SEED_SCRAMBLE_KEY = (0x3EC8F720, 0x02461E29)
_ROUNDS = 10


def _u32(x):
  return tf.constant(x, tf.uint32)


def _u64(x):
  return tf.constant(x, tf.uint64)


def _low_high(x):
  """The two 32-bit words of a uint64 tensor, low first."""
  return tf.cast(x, tf.uint32), tf.cast(tf.bitwise.right_shift(x, _u64(32)), tf.uint32)


def _join(low, high):
  """A uint64 from two 32-bit words."""
  return tf.bitwise.bitwise_or(tf.cast(low, tf.uint64),
                               tf.bitwise.left_shift(tf.cast(high, tf.uint64), _u64(32)))


def block(counter, key):
  """Philox4x32-10 of 4 counter words under 2 key words (uint32 tensors; the counter words of
  one shape, the key words broadcasting to it).

  The two multiplied words and the two others travel as pairs (`[2] + shape` uint64 holding
  32-bit values), so a round is 8 ops instead of 16.
  """
  c0, c1, c2, c3 = counter
  rank = c0.shape.rank
  pair = lambda a, b: tf.cast(tf.stack([a, b]), tf.uint64)
  multiplied, other = pair(c0, c2), pair(c1, c3)            # (c0, c2), (c1, c3)
  k0, k1 = (tf.broadcast_to(k, tf.shape(c0)) if k.shape.rank != rank else k for k in key)
  steps = tf.constant([[r * s % 2**32 for s in _KEY_STEPS] for r in range(_ROUNDS)],
                      tf.uint32)
  keys = tf.unstack(tf.cast(tf.stack([k0, k1])[tf.newaxis] +         # every round's
                            tf.reshape(steps, [_ROUNDS, 2] + [1] * rank), tf.uint64))
  multipliers = tf.reshape(_u64(_MULTIPLIERS), [2] + [1] * rank)
  low_bits, shift, first_axis = _u64(0xFFFFFFFF), _u64(32), tf.constant([0])
  for r in range(_ROUNDS):
    product = multiplied * multipliers                       # (c0 * m0, c2 * m1), exact
    high = tf.bitwise.right_shift(product, shift)
    low = tf.bitwise.bitwise_and(product, low_bits)
    # c0 <- high(c2 m1) ^ c1 ^ k0, c2 <- high(c0 m0) ^ c3 ^ k1, c1 <- low(c2 m1), c3 <- low(c0 m0)
    multiplied = tf.bitwise.bitwise_xor(tf.reverse(high, first_axis),
                                        tf.bitwise.bitwise_xor(other, keys[r]))
    other = tf.reverse(low, first_axis)
  c0, c2 = tf.unstack(tf.cast(multiplied, tf.uint32))
  c1, c3 = tf.unstack(tf.cast(other, tf.uint32))
  return c0, c1, c2, c3


# On the CPU outside XLA, the key and the words are XLA-compiled calls (integer arithmetic:
# the same bits). Each tf.data iterator start runs Grappler over its map function's whole
# graph, and unrolled, two Philox blocks per sampler were most of an augmentation
# pipeline's nodes (Keras RandomFlip: 426 nodes, 245 with compiled blocks, 134 so).
@compiled_on_cpu
def key_counter_from_seed(seed, xla=False):
  """`[n, 2]` int32/int64 seeds -> (key `[n, 1]` uint64, counter `[n, 2]` uint64)."""
  if xla:   # the low 32 bits, zero-extended
    seed = tf.cast(tf.cast(seed, tf.uint32), tf.uint64)
  else:     # int32 seeds sign-extend
    seed = tf.bitcast(tf.cast(seed, tf.int64), tf.uint64)
  s0, s1 = _low_high(seed[:, 0]), _low_high(seed[:, 1])
  mixed = block(s0 + s1, tuple(_u32(k) for k in _SEED_SCRAMBLE_KEY))
  key = _join(mixed[0], mixed[1])[:, tf.newaxis]
  counter = tf.stack([tf.zeros_like(key[:, 0]), _join(mixed[2], mixed[3])], axis=1)
  return key, counter


@compiled_on_cpu
def words(key, counter, count):
  """`[n, count]` uint32: the first `count` words of each iteration's stream (count a scalar,
  at least the words needed; rounded up to whole blocks inside)."""
  k0, k1 = _low_high(key[:, :1])                              # [n, 1]
  c0, c1 = _low_high(counter[:, :1])
  c2, c3 = _low_high(counter[:, 1:2])
  blocks = (tf.cast(count, tf.int64) + 3) // 4
  g = tf.cast(tf.range(blocks), tf.uint32)[tf.newaxis, :]    # [1, blocks]
  # counter + g, a 128-bit add with carries (g < 2**32)
  d0 = c0 + g
  carry = tf.cast(d0 < g, tf.uint32)
  d1 = c1 + carry
  carry = carry * tf.cast(tf.equal(d1, 0), tf.uint32)
  d2 = c2 + carry
  carry = carry * tf.cast(tf.equal(d2, 0), tf.uint32)
  d3 = c3 + carry
  out = block((d0, d1, d2, d3), (k0, k1))                    # 4 x [n, blocks]
  n = tf.shape(key, out_type=tf.int64)[0]
  return tf.reshape(tf.stack(out, axis=2), tf.stack([n, blocks * 4]))[:, :count]


def _unit_float(bits, dtype):
  """Floats in [0, 1) from 32-bit words, as the kernels make them (mantissa bits of a float
  in [1, 2), minus one)."""
  if dtype == tf.float32:
    mantissa = tf.bitwise.bitwise_and(bits, _u32(0x7FFFFF))
    one_to_two = tf.bitcast(tf.bitwise.bitwise_or(mantissa, _u32(127 << 23)), tf.float32)
    return one_to_two - 1.0
  if dtype in (tf.float16, tf.bfloat16):
    mantissa_bits, exponent = (10, 15) if dtype == tf.float16 else (7, 127)
    mantissa = tf.bitwise.bitwise_and(bits, _u32((1 << mantissa_bits) - 1))
    pattern = tf.cast(tf.bitwise.bitwise_or(mantissa, _u32(exponent << mantissa_bits)),
                      tf.uint16)
    return tf.bitcast(pattern, dtype) - tf.constant(1.0, dtype)
  raise TypeError(dtype)


def _unit_double(high_bits, low_bits):
  """Doubles in [0, 1) from two words: 20 mantissa bits from the first, 32 from the second."""
  mantissa = _join(low_bits, tf.bitwise.bitwise_and(high_bits, _u32(0xFFFFF)))
  one_to_two = tf.bitcast(tf.bitwise.bitwise_or(mantissa, _u64(1023 << 52)), tf.float64)
  return one_to_two - 1.0


def _per_iteration_size(shape):
  return tf.reduce_prod(tf.cast(shape, tf.int64))


def _shaped(flat, n, shape):
  return tf.reshape(flat, tf.concat([tf.reshape(n, [1]), tf.cast(shape, tf.int64)], 0))


def _unit_from_high_bits(bits, dtype):
  """XLA's floats in [0, 1): the high mantissa bits of a word (float32) or of a 64-bit
  value (float64) under the exponent of 1, minus one."""
  if dtype == tf.float32:
    mantissa = tf.bitwise.right_shift(bits, _u32(32 - 23))
    return tf.bitcast(tf.bitwise.bitwise_or(mantissa, _u32(127 << 23)), tf.float32) - 1.0
  mantissa = tf.bitwise.right_shift(bits, _u64(64 - 52))
  return tf.bitcast(tf.bitwise.bitwise_or(mantissa, _u64(1023 << 52)), tf.float64) - 1.0


def uniform_supported(dtype, xla, rank):
  del rank
  return not xla or dtype in (tf.float32, tf.float64)


def uniform(key, counter, shape, dtype, xla=False):
  """`StatelessRandomUniformV2` for every iteration's key and counter: `[n] + shape`."""
  n, size = tf.shape(key, out_type=tf.int64)[0], _per_iteration_size(shape)
  if dtype == tf.float64:
    w = words(key, counter, 2 * size)
    if xla:
      flat = _unit_from_high_bits(_join(w[:, 0::2], w[:, 1::2]), dtype)
    else:
      flat = _unit_double(w[:, 0::2], w[:, 1::2])
  elif xla:
    flat = _unit_from_high_bits(words(key, counter, size), dtype)
  else:
    flat = _unit_float(words(key, counter, size), dtype)
  return _shaped(flat, n, shape)


def full_int_supported(dtype, xla, rank):
  del dtype, xla, rank
  return True


def full_int(key, counter, shape, dtype, xla=False):
  """`StatelessRandomUniformFullIntV2`: every bit uniform; 64-bit values take two words, the
  first one low (XLA's too)."""
  del xla
  n, size = tf.shape(key, out_type=tf.int64)[0], _per_iteration_size(shape)
  if dtype.size == 8:
    w = words(key, counter, 2 * size)
    flat = tf.bitcast(_join(w[:, 0::2], w[:, 1::2]), dtype)
  else:
    flat = tf.bitcast(words(key, counter, size), dtype)
  return _shaped(flat, n, shape)


def _rounded(fn, x):
  """fn of a float32 tensor computed in double and rounded once, as the C library's float
  functions (which the kernels call) nearly always are; TF's float kernels are not."""
  if x.dtype != tf.float32:
    return fn(x)
  return tf.cast(fn(tf.cast(x, tf.float64)), tf.float32)


def normal_supported(dtype, xla, rank):
  """Under XLA: samples of rank 0 or 1 (XLA pairs the uniform samples of higher ranks in
  another order, not reproduced here)."""
  return not xla or (dtype in (tf.float32, tf.float64) and rank is not None and rank <= 1)


def normal(key, counter, shape, dtype, xla=False):
  """`StatelessRandomNormalV2`: Box-Muller on pairs of uniform samples (one word each for
  floats, two for doubles), the sine first; under XLA with XLA's uniform samples."""
  n, size = tf.shape(key, out_type=tf.int64)[0], _per_iteration_size(shape)
  if dtype == tf.float64:
    w = words(key, counter, 4 * ((size + 1) // 2))               # 4 words per 2 samples
    if xla:
      radius_u = _unit_from_high_bits(_join(w[:, 0::4], w[:, 1::4]), dtype)
      angle_u = _unit_from_high_bits(_join(w[:, 2::4], w[:, 3::4]), dtype)
    else:
      radius_u, angle_u = _unit_double(w[:, 0::4], w[:, 1::4]), _unit_double(w[:, 2::4],
                                                                              w[:, 3::4])
    angle = 2.0 * math.pi * angle_u
    epsilon = tf.constant(1e-7, tf.float64)
  else:
    w = words(key, counter, 2 * ((size + 1) // 2))               # 2 words per 2 samples
    if xla:
      radius_u = _unit_from_high_bits(w[:, 0::2], tf.float32)
      angle = 2.0 * math.pi * _unit_from_high_bits(w[:, 1::2], tf.float32)
    else:
      radius_u = _unit_float(w[:, 0::2], tf.float32)
      # The kernel multiplies by 2*pi in double, then rounds to float.
      angle = tf.cast(2.0 * math.pi * tf.cast(_unit_float(w[:, 1::2], tf.float32),
                                              tf.float64), tf.float32)
    epsilon = tf.constant(1e-7, tf.float32)
  # Under XLA the kernel's own float functions are XLA's, as here: no double detour.
  libm = (lambda fn, x: fn(x)) if xla else _rounded
  radius = tf.sqrt(-2.0 * libm(tf.math.log, tf.maximum(radius_u, epsilon)))
  pairs = tf.stack([libm(tf.sin, angle) * radius, libm(tf.cos, angle) * radius], axis=2)
  flat = tf.reshape(pairs, tf.stack([n, 2 * tf.shape(angle, out_type=tf.int64)[1]]))[:, :size]
  return _shaped(tf.cast(flat, dtype), n, shape)
