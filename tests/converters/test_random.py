"""Random converters beyond the OpCase table: statistics over many iterations, parameters that
differ per iteration landing in the right iteration, tf.random.Generator state, and the
stateless samplers under XLA (compared with XLA's own sequential loop, since XLA's kernels
draw other values than the CPU kernels)."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing


def _pfor(body, n, mode="function", fallback=False):
  return testing.run_pfor(body, n, mode=mode, fallback=fallback)


def _sequential(body, n):
  return np.stack([np.asarray(body(tf.constant(i))) for i in range(n)])


# ----------------------------------------------------------------------------- stateful samplers

def test_normal_draws_are_independent_across_1000_iterations():
  k = 64
  samples = _pfor(lambda i: tf.random.normal([k]), 1000)
  assert samples.shape == (1000, k)
  means = samples.mean(axis=1)  # each ~ N(0, 1/sqrt(k))
  assert abs(means.mean()) < 5 / np.sqrt(1000 * k)
  assert 0.85 < means.std() * np.sqrt(k) < 1.15
  assert 0.95 < samples.std() < 1.05
  correlations = np.corrcoef(samples)[np.triu_indices(1000, 1)]  # each ~ N(0, 1/sqrt(k))
  assert abs(correlations.mean()) < 0.01
  assert 0.85 < correlations.std() * np.sqrt(k) < 1.15


def test_normal_with_run_time_n_gives_independent_rows():
  samples = _pfor(lambda i: tf.random.normal([256]), 5, mode="dynamic")
  correlations = np.corrcoef(samples)[np.triu_indices(5, 1)]
  assert np.all(np.abs(correlations) < 0.4)


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_uniform_int_bounds_per_iteration_hold_and_are_uniform(mode):
  highs = tf.constant([2, 3, 5, 7], tf.int64)
  samples = _pfor(lambda i: tf.random.uniform([7000], 0, highs[i], dtype=tf.int64), 4, mode)
  for row, high in zip(samples, highs.numpy()):
    counts = np.bincount(row, minlength=high)
    assert len(counts) == high and row.min() >= 0
    expected = 7000 / high
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected))


def test_uniform_int32_bounds_near_the_type_limits():
  lows = tf.constant([-2**31, -5], tf.int32)
  highs = tf.constant([2**31 - 1, 2**31 - 1], tf.int32)
  samples = _pfor(lambda i: tf.random.uniform([4000], lows[i], highs[i], dtype=tf.int32), 2)
  spreads = samples.astype(np.float64).std(axis=1) / np.array([2**32, 2**31])
  np.testing.assert_allclose(spreads, 1 / np.sqrt(12), rtol=0.1)  # uniform over each range
  assert samples[0].min() < 0 and samples[1].min() >= -5


def test_uniform_int_bounds_not_increasing_raise():
  highs = tf.constant([3, 0])
  with pytest.raises(tf.errors.InvalidArgumentError, match="minval < maxval"):
    _pfor(lambda i: tf.random.uniform([4], 0, highs[i], dtype=tf.int32), 2)


def test_gamma_alpha_per_iteration_lands_in_its_iteration():
  alphas = tf.constant([[1.0, 50.0], [200.0, 5.0], [20.0, 100.0]])
  samples = _pfor(lambda i: tf.random.gamma([4000], alphas[i]), 3)
  assert samples.shape == (3, 4000, 2)
  np.testing.assert_allclose(samples.mean(axis=1), alphas.numpy(), rtol=0.1)


def test_poisson_rate_per_iteration_lands_in_its_iteration():
  rates = tf.constant([1.0, 30.0, 8.0])
  samples = _pfor(lambda i: tf.random.poisson([4000], rates[i]), 3)
  np.testing.assert_allclose(samples.mean(axis=1), rates.numpy(), rtol=0.1)


def test_binomial_counts_per_iteration_land_in_their_iteration():
  generator = tf.random.Generator.from_seed(3)
  counts = tf.constant([5.0, 50.0, 500.0])
  samples = _pfor(lambda i: generator.binomial([2000, 2], counts[i], [0.1, 0.9]), 3)
  assert samples.shape == (3, 2000, 2)
  np.testing.assert_allclose(samples.mean(axis=1), counts.numpy()[:, None] * [0.1, 0.9],
                             rtol=0.1)


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_multinomial_logits_per_iteration_land_in_their_iteration(mode):
  logits = 30.0 * tf.eye(4)  # iteration i draws class i (almost surely)
  samples = _pfor(lambda i: tf.random.categorical(logits[i:i + 1], 50), 4, mode)
  np.testing.assert_array_equal(samples, np.broadcast_to(np.arange(4)[:, None, None],
                                                         (4, 1, 50)))


def test_multinomial_invariant_logits_frequencies():
  probs = np.array([0.2, 0.3, 0.5])
  samples = _pfor(lambda i: tf.random.categorical(np.log([probs]), 2), 5000)
  assert samples.shape == (5000, 1, 2)
  frequencies = np.bincount(samples.ravel(), minlength=3) / samples.size
  np.testing.assert_allclose(frequencies, probs, atol=0.02)
  assert 0.0 < np.mean(samples[:, 0, 0] == samples[:, 0, 1]) < 0.5  # the two draws differ


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_shuffle_gives_every_permutation_equally_often(mode):
  samples = _pfor(lambda i: tf.random.shuffle(tf.range(3)), 6000, mode)
  _, counts = np.unique(samples, axis=0, return_counts=True)
  assert len(counts) == 6
  assert np.all(np.abs(counts - 1000) < 5 * np.sqrt(1000))


def test_shuffle_of_a_stacked_value_permutes_each_iteration_own_rows():
  x = tf.reshape(tf.range(40), [4, 10])
  samples = _pfor(lambda i: tf.random.shuffle(x[i]), 4)
  np.testing.assert_array_equal(np.sort(samples, axis=1), x.numpy())
  assert not np.array_equal(samples, x.numpy())


# ----------------------------------------------------------------------------- tf.random.Generator

def _converted_without_fallback(*op_types):
  records = vectorize.last_report().records
  return {r.op_type: r.kind for r in records if r.op_type in op_types}


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
def test_generator_normal_equals_sequential_calls_and_advances_the_state(mode):
  generator = tf.random.Generator.from_seed(5)
  body = lambda i: generator.normal([3])
  # Bitcast (of the state, elementwise family) may still fall back; it is exact either way.
  actual = _pfor(body, 8, mode, fallback=True)
  kinds = _converted_without_fallback("RngReadAndSkip", "StatelessRandomNormalV2")
  assert kinds and "fallback" not in kinds.values(), kinds
  state_after = generator.state.numpy()
  generator.reset_from_seed(5)
  if mode == "xla":
    expected = tf.function(lambda: tf.stack([body(i) for i in range(8)]), jit_compile=True)()
  else:
    expected = _sequential(body, 8)
  np.testing.assert_array_equal(actual, expected)
  np.testing.assert_array_equal(state_after, generator.state.numpy())
  assert len({tuple(row) for row in actual}) == 8


def test_generator_with_zero_iterations_keeps_its_state():
  generator = tf.random.Generator.from_seed(5)
  before = generator.state.numpy()
  out = _pfor(lambda i: generator.uniform([3]), 0, "dynamic", fallback=True)
  assert out.shape == (0, 3)
  np.testing.assert_array_equal(before, generator.state.numpy())


def test_generator_two_draws_per_iteration_are_independent_and_end_in_sequential_state():
  generator = tf.random.Generator.from_seed(9)
  body = lambda i: tf.concat([generator.normal([128]), generator.normal([128])], 0)
  samples = _pfor(body, 6, fallback=True)
  state_after = generator.state.numpy()
  halves = samples.reshape(12, 128)
  correlations = np.corrcoef(halves)[np.triu_indices(12, 1)]
  assert np.all(np.abs(correlations) < 0.5)
  generator.reset_from_seed(9)
  _sequential(body, 6)
  np.testing.assert_array_equal(state_after, generator.state.numpy())


def test_generator_uniform_int_with_bounds_per_iteration_equals_sequential():
  generator = tf.random.Generator.from_seed(2)
  highs = tf.constant([2, 9, 1000])
  body = lambda i: generator.uniform([5], 0, highs[i], dtype=tf.int32)
  actual = _pfor(body, 3, fallback=True)
  generator.reset_from_seed(2)
  np.testing.assert_array_equal(actual, _sequential(body, 3))


def test_rng_skip_advances_the_state_like_sequential_skips():
  generator = tf.random.Generator.from_seed(4)

  def body(i):
    tf.raw_ops.RngSkip(resource=generator.state.handle, algorithm=generator.algorithm,
                       delta=tf.cast(i, tf.int64) + 1)
    return i

  _pfor(body, 5)
  state_after = generator.state.numpy()
  generator.reset_from_seed(4)
  _sequential(body, 5)
  np.testing.assert_array_equal(state_after, generator.state.numpy())


def test_raw_generator_op_draws_differ_per_iteration_and_advance_the_state():
  generator = tf.random.Generator.from_seed(6)
  before = generator.state.numpy()
  samples = _pfor(lambda i: tf.raw_ops.StatefulStandardNormalV2(
      resource=generator.state.handle, algorithm=generator.algorithm, shape=[64]), 4)
  assert not np.array_equal(before, generator.state.numpy())
  correlations = np.corrcoef(samples)[np.triu_indices(4, 1)]
  assert np.all(np.abs(correlations) < 0.6)


# ----------------------------------------------------------------------------- stateless under XLA

def _key_counter_alg(seed):
  return tf.raw_ops.StatelessRandomGetKeyCounterAlg(seed=seed)


_STATELESS = {
    "normal_v2": lambda seed, x: tf.random.stateless_normal([4, 3], seed) * x,
    "uniform_v2": lambda seed, x: tf.random.stateless_uniform([4, 3], seed) * x,
    "truncated_normal_v2": lambda seed, x: tf.random.stateless_truncated_normal([4, 3], seed),
    "uniform_int_v2": lambda seed, x: tf.random.stateless_uniform(
        [6], seed, 0, tf.cast(x[0, 0] * 5, tf.int32) + 1, dtype=tf.int32),
    "normal_v1": lambda seed, x: tf.raw_ops.StatelessRandomNormal(shape=[4, 3], seed=seed),
    "uniform_v1": lambda seed, x: tf.raw_ops.StatelessRandomUniform(shape=[4, 3], seed=seed),
    "multinomial": lambda seed, x: tf.random.stateless_categorical(x, 5, seed),
    "parameterized_truncated_normal": lambda seed, x:
        tf.random.stateless_parameterized_truncated_normal([4, 3], seed, x[0]),
}


@pytest.mark.parametrize("name", sorted(_STATELESS))
@pytest.mark.parametrize("stacked_seed", [True, False])
def test_stateless_sampler_under_xla_equals_xla_loop(name, stacked_seed):
  sampler = _STATELESS[name]
  seeds = tf.constant([[1, 2], [3, 4], [5, 6]])
  xs = tf.constant(np.random.default_rng(0).uniform(1, 2, [3, 4, 3]), tf.float32)

  def body(i):
    return sampler(seeds[i] if stacked_seed else seeds[0], xs[i])

  @tf.function(jit_compile=True)
  def both():
    return vectorize.pfor(body, 3, fallback_to_while_loop=False), \
        tf.stack([body(tf.constant(i)) for i in range(3)])

  actual, expected = both()
  np.testing.assert_array_equal(actual, expected)


# ----------------------------------------------------------------------------- per-iteration seeds

_SEEDS = tf.constant(np.random.default_rng(3).integers(-2**31, 2**31, [7, 2]), tf.int64)

_KEYED = {
    "uniform_v2_float32": lambda seed: tf.random.stateless_uniform([5, 3], seed),
    "uniform_v2_float64": lambda seed: tf.random.stateless_uniform([5, 3], seed,
                                                                   dtype=tf.float64),
    "uniform_v2_float16": lambda seed: tf.random.stateless_uniform([7], seed, dtype=tf.float16),
    "uniform_v2_bfloat16": lambda seed: tf.random.stateless_uniform([7], seed,
                                                                    dtype=tf.bfloat16),
    "uniform_v2_scalar": lambda seed: tf.random.stateless_uniform([], seed),
    "uniform_int_v2_int64": lambda seed: tf.random.stateless_uniform(
        [9], seed, -3, 2**40, dtype=tf.int64),
    "full_int_v2_uint32": lambda seed: tf.random.stateless_uniform(
        [9], seed, None, None, dtype=tf.uint32),
    "uniform_v1": lambda seed: tf.raw_ops.StatelessRandomUniform(shape=[3, 3], seed=seed),
    "full_int_v1_int64": lambda seed: tf.raw_ops.StatelessRandomUniformFullInt(
        shape=[5], seed=seed, dtype=tf.int64),
    "uniform_int_v1": lambda seed: tf.raw_ops.StatelessRandomUniformInt(
        shape=[5], seed=tf.cast(seed, tf.int32), minval=0, maxval=7),
    "int32_seed": lambda seed: tf.random.stateless_uniform([4], tf.cast(seed, tf.int32)),
}


# Under XLA, whose kernels make floats and keys their own way: the V2 float32/float64 uniform
# and integer samplers are batched too; V1 samplers and 16-bit floats run per iteration.
_BATCHED_UNDER_XLA = ("uniform_v2_float32", "uniform_v2_float64", "uniform_v2_scalar",
                      "uniform_int_v2_int64", "full_int_v2_uint32", "int32_seed")


@pytest.mark.unchecked   # counts the ops pfor emits: the check adds its own loop
@pytest.mark.parametrize("name", sorted(_KEYED))
@pytest.mark.parametrize("mode", ["function", "dynamic", "xla"])
def test_per_iteration_seeds_draw_the_kernels_bits_without_a_loop(name, mode):
  sampler = _KEYED[name]
  body = lambda i: sampler(_SEEDS[i])
  if mode == "xla" and name in ("uniform_v1", "full_int_v1_int64"):
    pytest.skip("XLA's V1 kernels take int32 seeds only")
  if mode == "xla":
    expected = tf.function(lambda: tf.stack([body(tf.constant(i)) for i in range(7)]),
                           jit_compile=True)().numpy()
  else:
    expected = _sequential(body, 7)
  actual = _pfor(body, 7, mode)
  assert actual.dtype == expected.dtype
  np.testing.assert_array_equal(actual.view(np.uint8), expected.view(np.uint8))
  if mode == "xla" and name not in _BATCHED_UNDER_XLA:
    return
  graph = tf.function(lambda: vectorize.pfor(body, 7, fallback_to_while_loop=False),
                      jit_compile=mode == "xla", autograph=False).get_concrete_function().graph
  assert not {"While", "StatelessWhile"} & set(testing.all_op_types(graph))


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_per_iteration_seeds_normal_samples_under_xla_equal_xla_loop_with_no_loop(dtype):
  """Under XLA the Box-Muller transform uses XLA's own log, sin and cos, as XLA's kernel."""
  body = lambda i: tf.random.stateless_normal([65], _SEEDS[i], dtype=dtype)
  expected = tf.function(lambda: tf.stack([body(tf.constant(i)) for i in range(7)]),
                         jit_compile=True)().numpy()
  np.testing.assert_array_equal(_pfor(body, 7, "xla"), expected)
  graph = tf.function(lambda: vectorize.pfor(body, 7, fallback_to_while_loop=False),
                      jit_compile=True, autograph=False).get_concrete_function().graph
  assert not {"While", "StatelessWhile"} & set(testing.all_op_types(graph))


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.float16])
def test_per_iteration_seeds_normal_samples_within_an_ulp_of_the_kernel(dtype):
  body = lambda i: tf.random.stateless_normal([64], _SEEDS[i], dtype=dtype)
  actual, expected = _pfor(body, 7), _sequential(body, 7)
  np.testing.assert_allclose(actual, expected, rtol=2 * np.finfo(actual.dtype).eps, atol=1e-7)
  assert np.mean(actual == expected) > 0.75   # most bits agree: same formula, other libm


def test_per_iteration_seeds_with_zero_iterations():
  body = lambda i: tf.random.stateless_normal([3], _SEEDS[i])
  assert _pfor(body, 0, "dynamic").shape == (0, 3)



@pytest.mark.parametrize("mode", ["function", "xla"])
def test_per_iteration_counters_carry_across_their_words(mode):
  """Counters near 2**64 and 2**128: the 128-bit block counter carries as the kernels'."""
  keys = tf.constant([[5], [2**63 + 11], [0]], tf.uint64)
  counters = tf.constant([[2**64 - 3, 7], [2**64 - 1, 2**64 - 1], [2**32 - 2, 0]], tf.uint64)

  def body(i):
    return tf.raw_ops.StatelessRandomUniformV2(shape=[40], key=keys[i], counter=counters[i],
                                               alg=1)

  if mode == "xla":
    expected = tf.function(lambda: tf.stack([body(tf.constant(i)) for i in range(3)]),
                           jit_compile=True)().numpy()
  else:
    expected = _sequential(body, 3)
  np.testing.assert_array_equal(_pfor(body, 3, mode), expected)
