"""OpCases for converters/random.py.

Stateful samplers cannot equal the sequential reference value for value (two runs draw
differently), so their cases compare with `same_distribution`: shapes, dtypes and range as
the reference, loose agreement of mean and spread with the reference's samples, and
independence between iterations (no two iterations' samples correlated). Their builders
scale or offset the sample by a per-iteration argument, so that the pattern in which the
sampler's own inputs are all invariant is tested too; identical draws would then show as
rows correlated exactly. Stateless samplers are compared value for value.
"""

import numpy as np
import tensorflow as tf

from tests.converters.op_cases import OpCase, positive

_GEN = tf.random.Generator.from_seed(1234)
_XLA_VALUES = ("XLA's kernel for this stateless sampler draws other values than the CPU kernel "
               "of the reference (test_random.py compares it with XLA's own loop)")
_NO_XLA_KERNEL = "XLA has no kernel for this sampler"


def ints_in(low, high):
  """Integers in [low, high)."""
  def make(rng, shape, dtype):
    return rng.integers(low, high, shape).astype(tf.as_dtype(dtype).as_numpy_dtype)
  return make


def between(low, high):
  """Floats in [low, high)."""
  def make(rng, shape, dtype):
    return rng.uniform(low, high, shape).astype(tf.as_dtype(dtype).as_numpy_dtype)
  return make


def _rows(x):
  return x.reshape(x.shape[0], -1).astype(np.float64)


def _correlation(x, y):
  if x.std() == 0 or y.std() == 0:
    return 0.0
  return np.corrcoef(x, y)[0, 1]


def _assert_independent(actual, expected=None, max_correlation=0.6):
  """No two iterations' samples correlate (identical draws would correlate exactly), beyond
  what the reference's do (per-element parameters alone can correlate iterations)."""
  rows = _rows(actual)
  reference = _rows(expected) if expected is not None else None
  for i in range(len(rows)):
    for j in range(i + 1, len(rows)):
      r = _correlation(rows[i], rows[j])
      allowed = max_correlation
      if reference is not None:
        allowed = max(allowed, abs(_correlation(reference[i], reference[j])) + 0.3)
      assert abs(r) < min(allowed, 0.99), f"iterations {i} and {j} correlate: {r:.3f}"


def same_distribution(low=-np.inf, high=np.inf):
  """Compares stateful samples with the reference's by distribution, not by value.

  Bounds are loose (about 5 standard errors for samples of a few hundred values per
  iteration), so that a correct sampler fails them with negligible probability.
  """

  def compare(actual, expected):
    a, e = np.asarray(actual), np.asarray(expected)
    assert a.shape == e.shape, f"shape {a.shape} != expected {e.shape}"
    assert a.dtype == e.dtype, f"dtype {a.dtype} != expected {e.dtype}"
    if a.size == 0:
      return
    assert low <= a.min() and a.max() <= high, f"samples outside [{low}, {high}]"
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    spread = e64.std()
    assert abs(a64.mean() - e64.mean()) <= 0.45 * spread + 1e-12, (
        f"mean {a64.mean()} vs reference {e64.mean()} (spread {spread})")
    if spread > 0:
      assert 0.7 < a64.std() / spread < 1.4, f"spread {a64.std()} vs reference {spread}"
    _assert_independent(a, e)

  return compare


def same_rows_shuffled(actual, expected):
  """Each iteration's result is a permutation of the reference's; iterations independent."""
  a, e = np.asarray(actual), np.asarray(expected)
  assert a.shape == e.shape and a.dtype == e.dtype
  if a.size == 0:
    return
  np.testing.assert_array_equal(np.sort(a, axis=1), np.sort(e, axis=1))
  _assert_independent(a, e, max_correlation=0.75)


def _generator_op(op, **kwargs):
  return op(resource=_GEN.state.handle, algorithm=_GEN.algorithm, **kwargs)


def _rng_skip(delta):
  tf.raw_ops.RngSkip(resource=_GEN.state.handle, algorithm=_GEN.algorithm, delta=delta)
  return delta + 1


def _gamma_v3(seed, alpha):
  key, counter, alg = tf.raw_ops.StatelessRandomGetKeyCounterAlg(seed=seed)
  return tf.raw_ops.StatelessRandomGammaV3(shape=[4, 2], key=key, counter=counter, alg=alg,
                                           alpha=alpha)


_SEED = ints_in(0, 1000)
_LOW, _HIGH = ints_in(-5, 0), ints_in(1, 10)
_INT_BOUNDS = [(tf.int32, tf.int32), (tf.int64, tf.int64)]
_SEED_AND_BOUNDS = [(tf.int32, tf.int32, tf.int32), (tf.int64, tf.int64, tf.int64)]
_WIDE_LOW, _WIDE_HIGH = ints_in(-2**31, -2**31 + 10), ints_in(2**31 - 10, 2**31 - 1)

CASES = [
    # Stateful samplers: one wider draw.
    OpCase("RandomStandardNormal",
           lambda scale: tf.random.normal([512], stddev=scale, dtype=scale.dtype), [[]],
           dtypes=[tf.float32, tf.float64], make=[positive], compare=same_distribution()),
    OpCase("RandomUniform",
           lambda scale: tf.random.uniform([512], maxval=scale, dtype=scale.dtype), [[]],
           dtypes=[tf.float32, tf.float64], make=[positive],
           compare=same_distribution(0.0, 2.0)),
    OpCase("TruncatedNormal",
           lambda scale: tf.random.truncated_normal([512], stddev=scale, dtype=scale.dtype),
           [[]], dtypes=[tf.float32, tf.float64], make=[positive],
           compare=same_distribution(-4.0, 4.0)),
    OpCase("RandomUniformInt",
           lambda lo, hi: tf.random.uniform([512], lo, hi, dtype=lo.dtype), [[], []],
           dtypes=_INT_BOUNDS, make=[_LOW, _HIGH], compare=same_distribution(-5, 9)),
    OpCase("RandomUniformInt-invariant_bounds",
           lambda offset: tf.random.uniform([512], -5, 10, dtype=offset.dtype) + offset, [[]],
           dtypes=[tf.int32, tf.int64], make=[ints_in(0, 3)],
           compare=same_distribution(-5, 11)),
    OpCase("RandomGamma",
           lambda alpha, scale: tf.raw_ops.RandomGamma(shape=[256], alpha=alpha) * scale,
           [[2], []], dtypes=[tf.float32, tf.float64], make=[between(3.0, 5.0), positive],
           compare=same_distribution(0.0), xla=_NO_XLA_KERNEL),
    OpCase("RandomGammaGrad",
           lambda alpha, sample: tf.raw_ops.RandomGammaGrad(alpha=alpha, sample=sample),
           [[3], [2, 3]], dtypes=[tf.float32, tf.float64], make=[positive, positive]),
    OpCase("RandomPoissonV2", lambda rate, scale: tf.random.poisson([256], rate) * scale,
           [[2], []], make=[between(3.0, 6.0), positive], compare=same_distribution(0.0),
           xla=_NO_XLA_KERNEL),
    OpCase("Multinomial",
           lambda logits, offset: tf.random.categorical(logits, 256) + offset, [[2, 4], []],
           dtypes=[(tf.float32, tf.int64), (tf.float64, tf.int64)],
           make=[None, ints_in(0, 3)], compare=same_distribution(0, 6)),
    OpCase("RandomShuffle", lambda x, scale: tf.random.shuffle(x) * scale, [[64], []],
           dtypes=[tf.float32, tf.float64], make=[None, positive], compare=same_rows_shuffled),
    OpCase("RandomShuffle-matrix", lambda x, scale: tf.random.shuffle(x) * scale, [[64, 2], []],
           make=[None, positive], compare=same_rows_shuffled),
    # tf.random.Generator's raw stateful ops.
    OpCase("StatefulUniform",
           lambda scale: _generator_op(tf.raw_ops.StatefulUniform, shape=[512]) * scale, [[]],
           make=[positive], compare=same_distribution(0.0, 2.0)),
    OpCase("StatefulStandardNormalV2",
           lambda scale: _generator_op(tf.raw_ops.StatefulStandardNormalV2, shape=[512]) * scale,
           [[]], make=[positive], compare=same_distribution()),
    OpCase("StatefulTruncatedNormal",
           lambda scale: _generator_op(tf.raw_ops.StatefulTruncatedNormal, shape=[512]) * scale,
           [[]], make=[positive], compare=same_distribution(-4.0, 4.0)),
    OpCase("StatefulUniformFullInt",
           lambda offset: _generator_op(tf.raw_ops.StatefulUniformFullInt, shape=[512],
                                        dtype=offset.dtype) + offset,
           [[]], dtypes=[tf.int64, tf.int32], make=[ints_in(0, 3)],
           compare=same_distribution()),
    OpCase("StatefulUniformInt",
           lambda lo, hi: _generator_op(tf.raw_ops.StatefulUniformInt, shape=[512], minval=lo,
                                        maxval=hi),
           [[], []], dtypes=_INT_BOUNDS, make=[_LOW, _HIGH], compare=same_distribution(-5, 9)),
    OpCase("StatefulUniformInt-invariant_bounds",
           lambda offset: _generator_op(
               tf.raw_ops.StatefulUniformInt, shape=[512], minval=tf.constant(-5, offset.dtype),
               maxval=tf.constant(10, offset.dtype)) + offset,
           [[]], dtypes=[tf.int32, tf.int64], make=[ints_in(0, 3)],
           compare=same_distribution(-5, 11)),
    OpCase("StatefulRandomBinomial",
           lambda counts, probs, offset: _GEN.binomial([256, 2], counts, probs) + offset,
           [[], [], []], dtypes=[(tf.float32, tf.float32, tf.int32)],
           make=[ints_in(5, 20), between(0.2, 0.8), ints_in(0, 3)],
           compare=same_distribution(0, 22), xla=_NO_XLA_KERNEL),
    # tf.random.Generator methods: RngReadAndSkip + a stateless sampler keyed per iteration.
    # Bitcast (of the state) has no converter yet; it falls back, exact either way.
    OpCase("RngReadAndSkip", lambda scale: _GEN.normal([512]) * scale, [[]], make=[positive],
           op_types=("RngReadAndSkip", "StatelessRandomNormalV2"), allow_fallback=True,
           compare=same_distribution()),
    OpCase("RngSkip", _rng_skip, [[]], dtypes=[tf.int64], make=[ints_in(0, 10)]),
    # Stateless samplers: exact.
    OpCase("StatelessRandomNormalV2", lambda seed: tf.random.stateless_normal([4, 3], seed),
           [[2]], dtypes=[tf.int32, tf.int64], make=[_SEED], xla=_XLA_VALUES,
           op_types=("StatelessRandomGetKeyCounter", "StatelessRandomNormalV2")),
    OpCase("StatelessRandomUniformV2",
           lambda seed: tf.random.stateless_uniform([4, 3], seed, dtype=tf.float64), [[2]],
           dtypes=[tf.int64], make=[_SEED], xla=_XLA_VALUES),
    OpCase("StatelessTruncatedNormalV2",
           lambda seed: tf.random.stateless_truncated_normal([4, 3], seed), [[2]],
           dtypes=[tf.int32], make=[_SEED], xla=_XLA_VALUES),
    OpCase("StatelessRandomUniformIntV2",
           lambda seed, lo, hi: tf.random.stateless_uniform([16], seed, lo, hi, dtype=lo.dtype),
           [[2], [], []], dtypes=_SEED_AND_BOUNDS, make=[_SEED, _LOW, _HIGH]),
    OpCase("StatelessRandomUniformIntV2-wide_range",
           lambda seed, lo, hi: tf.random.stateless_uniform([16], seed, lo, hi, dtype=lo.dtype),
           [[2], [], []], dtypes=[(tf.int32, tf.int32, tf.int32)],
           make=[_SEED, _WIDE_LOW, _WIDE_HIGH]),
    OpCase("StatelessRandomUniformFullIntV2",
           lambda seed: tf.random.stateless_uniform([8], seed, None, None, dtype=tf.int64),
           [[2]], dtypes=[tf.int32], make=[_SEED]),
    OpCase("StatelessRandomGetKeyCounterAlg",
           lambda seed: tf.raw_ops.StatelessRandomGetKeyCounterAlg(seed=seed), [[2]],
           dtypes=[tf.int32, tf.int64], make=[_SEED]),
    OpCase("StatelessRandomGetAlg",
           lambda x: x + tf.cast(tf.raw_ops.StatelessRandomGetAlg(), x.dtype), [[3]]),
    OpCase("StatelessRandomNormal",
           lambda seed: tf.raw_ops.StatelessRandomNormal(shape=[4, 3], seed=seed), [[2]],
           dtypes=[tf.int32, tf.int64], make=[_SEED], xla=_XLA_VALUES),
    OpCase("StatelessRandomUniform",
           lambda seed: tf.raw_ops.StatelessRandomUniform(shape=[4, 3], seed=seed,
                                                          dtype=tf.float64),
           [[2]], dtypes=[tf.int64], make=[_SEED], xla=_XLA_VALUES),
    OpCase("StatelessTruncatedNormal",
           lambda seed: tf.raw_ops.StatelessTruncatedNormal(shape=[4, 3], seed=seed), [[2]],
           dtypes=[tf.int32], make=[_SEED], xla=_XLA_VALUES),
    OpCase("StatelessRandomUniformInt",
           lambda seed, lo, hi: tf.raw_ops.StatelessRandomUniformInt(shape=[16], seed=seed,
                                                                     minval=lo, maxval=hi),
           [[2], [], []], dtypes=_SEED_AND_BOUNDS, make=[_SEED, _LOW, _HIGH]),
    OpCase("StatelessRandomUniformFullInt",
           lambda seed: tf.raw_ops.StatelessRandomUniformFullInt(shape=[8], seed=seed,
                                                                 dtype=tf.int64),
           [[2]], dtypes=[tf.int32, tf.int64], make=[_SEED]),
    OpCase("StatelessMultinomial",
           lambda logits, seed: tf.random.stateless_categorical(logits, 5, seed), [[2, 4], [2]],
           dtypes=[(tf.float32, tf.int32), (tf.float64, tf.int64)], make=[None, _SEED],
           xla=_XLA_VALUES),
    OpCase("StatelessRandomGammaV3", _gamma_v3, [[2], [2]],
           dtypes=[(tf.int64, tf.float32)], make=[_SEED, between(0.5, 3.0)],
           op_types=("StatelessRandomGetKeyCounterAlg", "StatelessRandomGammaV3"),
           xla=_NO_XLA_KERNEL),
    OpCase("StatelessRandomGammaV2",
           lambda seed, alpha: tf.raw_ops.StatelessRandomGammaV2(shape=[4, 2], seed=seed,
                                                                 alpha=alpha),
           [[2], [2]], dtypes=[(tf.int64, tf.float32)], make=[_SEED, between(0.5, 3.0)],
           xla=_NO_XLA_KERNEL),
    OpCase("StatelessRandomPoisson",
           lambda seed, lam: tf.random.stateless_poisson([4, 2], seed, lam), [[2], [2]],
           dtypes=[(tf.int64, tf.float32)], make=[_SEED, between(0.5, 5.0)], xla=_NO_XLA_KERNEL),
    OpCase("StatelessRandomBinomial",
           lambda seed, counts, probs: tf.random.stateless_binomial([4, 2], seed, counts, probs),
           [[2], [2], [2]], dtypes=[(tf.int32, tf.float32, tf.float32)],
           make=[_SEED, ints_in(1, 20), between(0.1, 0.9)], xla=_NO_XLA_KERNEL),
    OpCase("StatelessParameterizedTruncatedNormal",
           lambda seed, means, stddevs: tf.random.stateless_parameterized_truncated_normal(
               [4, 2], seed, means, stddevs),
           [[2], [2], [2]], dtypes=[(tf.int32, tf.float32, tf.float32)],
           make=[_SEED, None, positive], xla=_XLA_VALUES),
    OpCase("StatelessShuffle",
           lambda x, seed: tf.random.experimental.stateless_shuffle(x, seed), [[6, 2], [2]],
           dtypes=[(tf.float32, tf.int64), (tf.int32, tf.int64)], make=[None, _SEED],
           xla=_NO_XLA_KERNEL),
]
