"""The program-keyed cache: eager calls whose body is a new closure over new tensors reuse
the conversion of the same program, and convert again where the program differs."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from vectorize import cache
from vectorize import engine
from vectorize import program_cache

X = tf.constant(np.arange(12.0).reshape(4, 3), tf.float32)


@pytest.fixture
def conversions(monkeypatch):
  """How many conversions run (the walker over a whole loop body)."""
  count = [0]
  convert = engine._convert   # pylint: disable=protected-access

  def counted(*args, **kwargs):
    count[0] += 1
    return convert(*args, **kwargs)

  monkeypatch.setattr(engine, "_convert", counted)
  monkeypatch.setattr(program_cache, "_programs", type(program_cache._programs)())  # pylint: disable=protected-access
  monkeypatch.setattr(cache, "_eager_cache", type(cache._eager_cache)())  # pylint: disable=protected-access
  return count


def _loop(body, n):
  return np.stack([np.asarray(body(tf.constant(i))) for i in range(n)])


def _scaled_rows(w, big):
  return lambda i: tf.reduce_sum(X[i] * w) + big[i]


def test_a_new_closure_over_new_tensors_reuses_the_conversion(conversions):
  """Each call closes over new tensors (a small one TF captures as a constant, a large one
  it captures as a placeholder) of the same signature: one conversion, each call's values."""
  for k in range(3):
    w = tf.constant(np.full([3], k + 1.0, np.float32))
    big = tf.constant(np.linspace(0, k, 200, dtype=np.float32))
    body = _scaled_rows(w, big)
    np.testing.assert_allclose(vectorize.pfor(body, 4), _loop(body, 4), rtol=1e-6)
  assert conversions[0] == 1


def test_n_zero_through_the_program_cache(conversions):
  for k in range(2):
    w = tf.constant(np.full([3], k + 1.0, np.float32))
    got = vectorize.pfor(lambda i: X[i] * w, 0)
    assert got.shape == (0, 3)
  assert conversions[0] == 1


def _program(kind, k):
  """A body whose program differs from `_program(kind, 0)`'s in one thing when k = 1."""
  if kind == "attr":
    return lambda i: tf.reduce_sum(X[i] * 2.0, keepdims=bool(k))
  if kind == "dtype":
    w = tf.constant([1.0, 2.0, 3.0], [tf.float32, tf.float64][k])
    return lambda i: tf.cast(X[i], w.dtype) * w
  if kind == "shape":
    w = tf.ones([[3], [1, 3]][k])
    return lambda i: X[i] * w
  if kind == "python constant":
    scale = [2.0, 3.0][k]
    return lambda i: X[i] * scale
  if kind == "integer tensor":      # captured as a constant; a shape the conversion reads
    shape = tf.constant([[3, 1], [1, 3]][k])
    return lambda i: tf.reshape(X[i], shape)
  raise ValueError(kind)


@pytest.mark.parametrize("kind", ["attr", "dtype", "shape", "python constant",
                                  "integer tensor"])
def test_a_different_program_converts_again(conversions, kind):
  for k in range(2):
    body = _program(kind, k)
    np.testing.assert_allclose(vectorize.pfor(body, 4), _loop(body, 4), rtol=1e-6)
  assert conversions[0] == 2


def test_vectorized_map_of_new_closures_and_new_elements(conversions):
  """TensorCircuit's pattern: `vectorized_map(lambda x: f(x, weights), xs)` with new weights
  and xs in every call; and the same closure again over new elements."""
  def energy(x, weights):
    return tf.reduce_sum(tf.sin(x * weights[:3]) * weights[3])

  for k in range(3):
    weights = tf.constant(np.arange(4.0, dtype=np.float32) + k)
    xs = tf.constant(np.random.default_rng(k).standard_normal([5, 3]).astype(np.float32))
    fn = lambda x, weights=weights: energy(x, weights)
    want = np.stack([energy(x, weights) for x in xs])
    np.testing.assert_allclose(vectorize.vectorized_map(fn, xs), want, rtol=1e-5)
    other = xs[::-1] * 2.0         # the same closure, new elements
    np.testing.assert_allclose(vectorize.vectorized_map(fn, other),
                               np.stack([energy(x, weights) for x in other]), rtol=1e-5)
  assert conversions[0] == 1


def test_elements_the_function_also_closes_over_stay_apart():
  """fn closes over the tensor first mapped; mapped again over other elements, fn must still
  read the tensor it closes over."""
  xs = tf.constant([[1.0, 2.0], [3.0, 4.0]])
  fn = lambda x: x * tf.reduce_sum(xs)
  first = vectorize.vectorized_map(fn, xs)
  np.testing.assert_allclose(first, xs.numpy() * 10.0)
  ys = tf.constant([[5.0, 6.0], [7.0, 8.0]])
  np.testing.assert_allclose(vectorize.vectorized_map(fn, ys), ys.numpy() * 10.0)


def test_gradients_flow_to_each_closures_tensors():
  for k in range(2):
    w = tf.Variable(np.full([3], k + 1.0, np.float32))   # not cached: a resource
    v = tf.constant(np.full([3], k + 2.0, np.float32))
    with tf.GradientTape(persistent=True) as tape:
      tape.watch(v)
      got = tf.reduce_sum(vectorize.vectorized_map(lambda x: tf.sin(x * v) * w, X))
      want = tf.reduce_sum(tf.stack([tf.sin(x * v) * w for x in X]))
    for source in (v, w):
      np.testing.assert_allclose(tape.gradient(got, source), tape.gradient(want, source),
                                 rtol=1e-5)


def test_a_body_that_captures_a_variable_converts_per_closure(conversions):
  for k in range(2):
    v = tf.Variable(np.full([3], k + 1.0, np.float32))
    body = lambda i, v=v: X[i] * v
    np.testing.assert_allclose(vectorize.pfor(body, 4), _loop(body, 4))
  assert conversions[0] == 2


def test_a_body_outside_the_program_cache_is_traced_once(conversions):
  """A body that captures a variable is converted from the trace made for its key, not
  traced a second time."""
  v = tf.Variable([1.0, 2.0, 3.0])
  traces = []

  def body(i):
    traces.append(i)
    return X[i] * v

  np.testing.assert_allclose(vectorize.pfor(body, 4), X.numpy() * v.numpy())
  np.testing.assert_allclose(vectorize.vectorized_map(lambda x: x * v, X), X.numpy() * v)
  assert len(traces) == 1 and conversions[0] == 2


def test_a_captured_float_whose_value_sets_a_size_is_read_per_call():
  """A size computed from a captured float (`tf.range` to a limit): traced as a placeholder,
  so the conversion kept for the first closure serves every limit."""
  for limit in (3.0, 5.0, 2.0):
    bound = tf.constant(limit)
    body = lambda i, bound=bound: tf.reduce_sum(tf.range(0.0, bound)) + X[i, 0]
    np.testing.assert_allclose(vectorize.pfor(body, 4), _loop(body, 4))
    # A per-iteration value of that size: a constant limit would fix the reshape's rows.
    body = lambda i, bound=bound: tf.reshape(X[i, 0] * tf.range(0.0, bound), [-1, 1])
    np.testing.assert_allclose(vectorize.pfor(body, 4), _loop(body, 4))


def test_small_integer_elements_are_read_per_call():
  table = tf.constant(np.arange(40.0).reshape(10, 4), tf.float32)
  fn = lambda row: tf.gather(table, row)
  for k in range(3):
    rows = tf.constant(np.random.default_rng(k).integers(0, 10, [5, 2]), tf.int32)
    np.testing.assert_allclose(vectorize.vectorized_map(fn, rows),
                               np.stack([tf.gather(table, r) for r in rows]))


def test_a_tape_watches_a_captured_variable_on_every_call():
  """helper-21's repro: the body traced for its key outside the call's function left the
  variable unwatched on cached calls (the gradient was None from the second call on)."""
  v = tf.Variable([1.0, 2.0, 3.0])
  fn = lambda x: tf.reduce_sum(x * v)
  for _ in range(3):
    with tf.GradientTape() as tape:
      y = tf.reduce_sum(vectorize.vectorized_map(fn, X[:2]))
    np.testing.assert_allclose(tape.gradient(y, v), tf.reduce_sum(X[:2], 0))
    with tf.GradientTape() as tape:
      y = tf.reduce_sum(vectorize.pfor(lambda i: fn(X[i]), 2))
    np.testing.assert_allclose(tape.gradient(y, v), tf.reduce_sum(X[:2], 0))


def test_a_shape_inferred_from_a_large_captured_integer_tensor_is_in_the_key():
  """helper-21's repro: a reshape to a slice of a captured int tensor of 302 elements (a
  placeholder, whose values TF's shape inference reads all the same) kept the first shape."""
  xs = tf.reshape(tf.range(24.0), [2, 12])
  for shape in ([2, 6], [3, 4]):
    table = tf.constant(shape + list(range(300)), tf.int32)
    fn = lambda x, table=table: tf.reduce_sum(tf.reshape(x, table[:2]), -1)
    np.testing.assert_allclose(vectorize.vectorized_map(fn, xs),
                               np.stack([fn(x) for x in xs]))


def test_a_body_that_needs_autograph_is_a_program_too(conversions):
  """A Python `if` on a tensor: traced again with autograph for its key, then reused."""
  def fn(x):
    if tf.reduce_sum(x) > 0:
      return x * 2.0
    return -x

  for k in range(3):
    xs = tf.constant(np.random.default_rng(k).standard_normal([4, 3]).astype(np.float32))
    shift = tf.constant(float(k))     # a tensor: the same program for every k
    np.testing.assert_allclose(vectorize.vectorized_map(lambda x: fn(x) + shift, xs),
                               np.stack([fn(x) + shift for x in xs]), rtol=1e-6)
  assert conversions[0] == 1
