"""The checked mode: pfor also runs the loop and raises where the two differ, naming the
first op whose vectorized value differs. Broken converters (patched into the registry) are
what it must catch; correct bodies of every kind must pass."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from vectorize import cache
from vectorize import registry
from vectorize.values import Value
from tests import testing

X = tf.constant(np.random.default_rng(7).standard_normal([6, 3]).astype(np.float32))
LENGTHS = tf.constant([0, 3, 1, 2, 3, 1])


def _run(body, n, mode):
  with vectorize.checked():
    return testing.run_pfor(body, n, mode=mode, fallback=True)


def _cond_body(i):
  return tf.cond(X[i, 0] > 0, lambda: tf.sin(X[i]), lambda: X[i] * 2.0)


def _while_body(i):
  return tf.while_loop(lambda k, s: k < LENGTHS[i], lambda k, s: (k + 1, s + X[i]),
                       (0, tf.zeros([3])))[1]


def _ragged_body(i):
  return tf.range(LENGTHS[i]) * 2


def _tensor_array_body(i):
  ta = tf.TensorArray(tf.float32, size=3, element_shape=[3])
  ta = tf.while_loop(lambda k, ta: k < LENGTHS[i], lambda k, ta: (k + 1, ta.write(k, X[i])),
                     (0, ta))[1]
  return ta.stack()


def _random_body(i):
  return tf.random.normal([3]) + X[i]        # not compared: the loop draws other numbers


NOISE = tf.Variable(tf.zeros([3]))


def _random_walk_body(i):
  """A variable written with random values: its reads (and its final state) are not compared
  where the loop draws other numbers (outside XLA for XLA, whose kernels draw others)."""
  seen = NOISE.read_value()     # what the earlier iterations' random steps left
  NOISE.assign_add(tf.random.stateless_normal([3], seed=tf.stack([i, 7])))
  return seen * 0.0 + X[i]


def _keras_body():
  layer = tf.keras.layers.Dense(4)
  layer.build([None, 3])

  def body(i):
    return layer(X[i][None])[0]
  return body


BODIES = {"cond": _cond_body, "while": _while_body, "tensor_array": _tensor_array_body,
          "random": _random_body, "random_walk": _random_walk_body, "keras": _keras_body()}


@pytest.mark.parametrize("name", sorted(BODIES))
@pytest.mark.parametrize("mode,n", [("eager", 6), ("function", 0), ("dynamic", 6),
                                    ("xla", 6)])
def test_correct_bodies_pass(name, mode, n):
  out = _run(BODIES[name], n, mode)
  if name != "random":
    testing.assert_allclose(out, testing.sequential(BODIES[name], n,
                                                    testing.output_spec(BODIES[name])))


def test_a_ragged_output_passes():
  with vectorize.checked():
    out = vectorize.pfor(_ragged_body, 6)
  assert out.to_list() == [list(range(0, 2 * k, 2)) for k in LENGTHS.numpy()]


def _wrong_sin(op):
  return [Value(tf.cos(op.value(0).tensor), op.value(0).stacked)]


def _sin_body(i):
  y = tf.sin(X[i])                                  # the line the error names
  return tf.reduce_sum(y * 2.0)


def test_a_wrong_converter_is_named_eagerly(monkeypatch):
  monkeypatch.setitem(registry._CONVERTERS, "Sin", _wrong_sin)
  with vectorize.checked(), pytest.raises(vectorize.CheckError) as raised:
    vectorize.pfor(lambda i: _sin_body(i), 6)
  message = str(raised.value)
  assert "Sin op" in message and "test_checked.py" in message
  assert "_wrong_sin" in message and "iteration 0" in message


def test_a_wrong_converter_fails_the_graph_in_a_function(monkeypatch):
  monkeypatch.setitem(registry._CONVERTERS, "Sin", _wrong_sin)
  fn = tf.function(lambda: vectorize.pfor(lambda i: _sin_body(i) + 1.0, 6))
  with vectorize.checked(sample=None), pytest.raises(tf.errors.InvalidArgumentError,
                                                     match="first value of the body"):
    fn()


def test_a_wrong_converter_is_caught_under_xla_at_trace_time(monkeypatch):
  monkeypatch.setitem(registry._CONVERTERS, "Sin", _wrong_sin)
  fn = tf.function(lambda: vectorize.pfor(lambda i: _sin_body(i) + 2.0, 6), jit_compile=True)
  with vectorize.checked(), pytest.raises(vectorize.CheckError, match="Sin op"):
    fn()


def test_the_environment_variable_turns_it_on(monkeypatch):
  monkeypatch.setitem(registry._CONVERTERS, "Sin", _wrong_sin)
  monkeypatch.setenv("VECTORIZE_CHECKED", "1")
  with pytest.raises(vectorize.CheckError):
    vectorize.pfor(lambda i: _sin_body(i) + 3.0, 6)


@pytest.mark.unchecked
def test_an_unchecked_conversion_is_not_reused_when_checking(monkeypatch):
  monkeypatch.setitem(registry._CONVERTERS, "Sin", _wrong_sin)
  body = lambda i: _sin_body(i) + 4.0                                  # pylint: disable=unnecessary-lambda-assignment
  vectorize.pfor(body, 6)                                             # cached, unchecked
  with vectorize.checked(), pytest.raises(vectorize.CheckError):
    vectorize.pfor(body, 6)


def test_a_wrong_variable_update_is_caught(monkeypatch):
  real = registry._CONVERTERS["AssignAddVariableOp"]

  def doubled(op):        # applies every update twice
    real(op)
    return real(op)
  monkeypatch.setitem(registry._CONVERTERS, "AssignAddVariableOp", doubled)
  v = tf.Variable(tf.zeros([3]))

  def body(i):
    v.assign_add(X[i])
    return X[i]
  with vectorize.checked(), pytest.raises(vectorize.CheckError, match="variable"):
    vectorize.pfor(body, 6)


def test_a_stateful_body_is_checked_and_leaves_the_loops_state():
  v = tf.Variable(tf.zeros([3]))

  def body(i):
    v.assign_add(X[i])
    return v.read_value() * 0.0 + X[i]
  with vectorize.checked():
    out = vectorize.pfor(body, 6)
  np.testing.assert_allclose(out, X.numpy(), rtol=1e-6)
  np.testing.assert_allclose(v.numpy(), X.numpy().sum(0), rtol=1e-5)


def test_sample_must_be_positive():
  with pytest.raises(ValueError, match="sample"):
    with vectorize.checked(sample=0):
      pass


@pytest.mark.parametrize("make_call", [
    lambda f, x: vectorize.per_example_gradients(f, [W], x),
    lambda f, x: vectorize.jacobian_fn(lambda x: f(x) * W)(x),
])
def test_helpers_keep_static_shapes_in_their_cache_keys(make_call):
  """Issue 24, 8: per_example_gradients and jacobian_fn reused the dynamic conversion
  inside static_shapes()."""
  def f(x):
    return tf.cond(tf.reduce_sum(x) > 0, lambda: tf.reduce_sum(x * W), lambda: -tf.reduce_sum(x))
  x = X[:, :3]
  make_call(f, x)
  before = set(cache._eager_cache)
  with vectorize.static_shapes():
    make_call(f, x)
  added = set(cache._eager_cache) - before   # the cache may evict others meanwhile
  assert len(added) == 1 and next(iter(added))[1][0], added


W = tf.Variable(tf.ones([3]))


def test_a_generator_drawing_in_the_body_is_left_as_the_loop_leaves_it():
  """The loop run beside pfor draws again: the generator's state is put back first, as a
  variable's is (it was advanced twice)."""
  def state_after(run):
    generator = tf.random.Generator.from_seed(5)
    run(lambda i: generator.normal([3]))
    return generator.state.numpy()
  want = state_after(lambda body: [body(i) for i in range(8)])
  with vectorize.checked():
    got = state_after(lambda body: vectorize.pfor(body, 8))
  np.testing.assert_array_equal(got, want)


def test_a_generator_skipped_by_its_raw_handle_is_not_checked_and_skipped_once():
  generator = tf.random.Generator.from_seed(4)

  def body(i):
    tf.raw_ops.RngSkip(resource=generator.state.handle, algorithm=generator.algorithm,
                       delta=tf.cast(i, tf.int64) + 1)
    return i
  with vectorize.checked():
    vectorize.pfor(body, 5)
  got = generator.state.numpy()
  generator.reset_from_seed(4)
  for i in range(5):
    body(tf.constant(i))
  np.testing.assert_array_equal(got, generator.state.numpy())


_BF16_X = tf.cast(tf.constant(np.random.default_rng(7).normal(size=[4, 5, 8]), tf.float32),
                  tf.bfloat16)
_BF16_W = tf.cast(tf.constant(np.random.default_rng(8).normal(size=[8, 8]), tf.float32),
                  tf.bfloat16)


def _bf16_scores(i):
  """A bfloat16 product cast to float32, as Keras attention casts its scores."""
  return tf.nn.softmax(tf.cast(_BF16_X[i] @ _BF16_W, tf.float32))


@pytest.mark.parametrize("jit", [False, True])
def test_float32_values_computed_from_bfloat16_are_compared_as_bfloat16(jit):
  """Under XLA the bfloat16 product rounds differently from the loop's kernel; the float32
  values after it carry that rounding and are not a difference (users round 7)."""
  expected = testing.sequential(_bf16_scores, 4)
  with vectorize.checked(sample=None):
    out = tf.function(lambda: vectorize.pfor(_bf16_scores, 4), jit_compile=jit)()
  testing.assert_allclose(out, expected, tol=1e-2)


def test_a_wrong_converter_after_a_bfloat16_value_is_still_caught(monkeypatch):
  monkeypatch.setitem(registry._CONVERTERS, "Sin", _wrong_sin)
  body = lambda i: tf.sin(tf.cast(_BF16_X[i], tf.float32))
  with vectorize.checked(), pytest.raises(vectorize.CheckError, match="Sin op"):
    vectorize.pfor(body, 4)


# Each kind of value the check compares (it joins the values of one dtype into one vector,
# flattens those of a static shape outside its loop, cuts those of a run-time shape to a common
# size): a converter that returns its input unchanged is caught for each, and named, not the
# correct value before it of the same dtype.
def _returns_its_input(op):
  return [op.value(0)]


WRONG_KINDS = {   # name: (the op type broken, the per-example input, the body on it)
    "float32": ("Neg", X, lambda x: tf.negative(x * 2.0) + 1.0),
    "float64": ("Neg", tf.cast(X, tf.float64), lambda x: tf.negative(x * 2.0) + 1.0),
    "bfloat16": ("Neg", tf.cast(X, tf.bfloat16), lambda x: tf.negative(x * 2.0)),
    "complex64": ("Neg", tf.complex(X, -X), lambda x: tf.negative(x * 2.0)),
    "int32": ("Neg", tf.constant([[1, 2, 3]] * 6), lambda x: tf.negative(x * 2) + 1),
    "bool": ("LogicalNot", X > 0, lambda x: tf.logical_not(tf.logical_and(x, x))),
    "string": ("StringUpper", tf.constant([["a", "bc", "d"]] * 6),
               lambda x: tf.strings.upper(tf.strings.join([x, "q"]))),
    "a matrix": ("Neg", tf.reshape(tf.range(36.0), [6, 2, 3]),
                 lambda x: tf.negative(x * 2.0)),
}


@pytest.mark.parametrize("kind", sorted(WRONG_KINDS))
@pytest.mark.parametrize("shapes", ["static", "run-time"])
def test_a_wrong_value_of_each_kind_is_caught_and_named(monkeypatch, kind, shapes):
  op_type, data, fn = WRONG_KINDS[kind]
  monkeypatch.setitem(registry._CONVERTERS, op_type, _returns_its_input)
  spec = tf.TensorSpec([None] * data.shape.rank, data.dtype)

  @tf.function(input_signature=[spec] if shapes == "run-time" else None)
  def run(x):
    return vectorize.pfor(lambda i: fn(x[i]), 6)

  with vectorize.checked(), pytest.raises(tf.errors.InvalidArgumentError) as raised:
    run(data)
  message = str(raised.value)
  assert f"{op_type} op" in message and "iteration 0" in message, message[:600]


def test_a_value_of_another_shape_is_caught(monkeypatch):
  """(Where the shapes are static, the walker's own check refuses it at conversion.)"""
  monkeypatch.setitem(registry._CONVERTERS, "Neg", lambda op: [
      Value(tf.concat([op.value(0).tensor] * 2, -1), op.value(0).stacked)])

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32)])
  def run(x):
    return vectorize.pfor(lambda i: tf.reduce_sum(tf.negative(x[i])), 6)

  with vectorize.checked(), pytest.raises(tf.errors.InvalidArgumentError, match="Neg op"):
    run(X)


def test_a_wrong_ragged_value_is_caught(monkeypatch):
  monkeypatch.setitem(registry._TABLES[registry.RAGGED], "Neg", _returns_its_input)  # pylint: disable=protected-access
  with vectorize.checked(), pytest.raises(vectorize.CheckError, match="Neg op"):
    vectorize.pfor(lambda i: tf.negative(tf.range(LENGTHS[i]) + 1), 6)


def test_a_difference_within_the_tolerance_passes(monkeypatch):
  real = registry._CONVERTERS["Neg"]
  monkeypatch.setitem(registry._CONVERTERS, "Neg", lambda op: [
      Value(v.tensor * (1.0 + 1e-5), v.stacked) for v in real(op)])
  with vectorize.checked():
    out = vectorize.pfor(lambda i: tf.negative(X[i]), 6)
  np.testing.assert_allclose(out, -X.numpy(), rtol=1e-4)
  monkeypatch.setitem(registry._CONVERTERS, "Neg", lambda op: [
      Value(v.tensor * 1.01, v.stacked) for v in real(op)])
  with vectorize.checked(), pytest.raises(vectorize.CheckError, match="Neg op"):
    vectorize.pfor(lambda i: tf.negative(X[i]) + 3.0, 6)


NESTED_COUNTER = tf.Variable(0.0)


def _writes_in_a_cond_in_a_loop(i):
  def step(j, c):
    def count():
      NESTED_COUNTER.assign_add(1.0, read_value=False)
      return 1.0
    return j + 1, c + tf.cond(i < 2, count, lambda: 0.0)
  return tf.while_loop(lambda j, c: j < i + 1, step, (0, 0.0))[1]


def test_a_variable_only_written_in_a_nested_function_is_not_checked_nor_updated_twice(caplog):
  """TF lists only the variables a graph reads: one written with `read_value=False` inside
  a cond in a while loop is not among the body's, so the check could not put it back (it
  ended with pfor's update and the loop's). Such a body is not checked, with a warning."""
  NESTED_COUNTER.assign(0.0)
  want = [_writes_in_a_cond_in_a_loop(tf.constant(i)) for i in range(4)]
  loop_state = NESTED_COUNTER.numpy()      # iterations 0 and 1 count 1 and 2 trips: 3
  NESTED_COUNTER.assign(0.0)
  with vectorize.checked():
    got = vectorize.pfor(_writes_in_a_cond_in_a_loop, 4)
  np.testing.assert_allclose(got, tf.stack(want))
  assert NESTED_COUNTER.numpy() == loop_state == 3.0
  assert "is not checked" in caplog.text


TABLE = tf.lookup.StaticHashTable(
    tf.lookup.KeyValueTensorInitializer(tf.constant([0, 1, 2], tf.int64),
                                        tf.constant([0.5, 1.5, 2.5])), -1.0)


def test_a_body_that_only_reads_resources_is_still_checked(monkeypatch, caplog):
  """Stateful ops on resources held outside the body that only read them (a lookup table, a
  variable) leave the body checked: only ops that may change such a resource (an iterator's
  get_next, a queue's enqueue) turn the check off."""
  monkeypatch.setitem(registry._CONVERTERS, "Sin", _wrong_sin)
  v = tf.Variable(2.0)
  body = lambda i: _sin_body(i) * TABLE.lookup(tf.cast(i % 3, tf.int64)) * v  # pylint: disable=unnecessary-lambda-assignment
  with vectorize.checked(), pytest.raises(vectorize.CheckError, match="Sin op"):
    vectorize.pfor(body, 6)
  assert "not checked" not in caplog.text


def test_a_body_that_pulls_from_an_iterator_is_not_checked(caplog):
  """The check's loop would pull the next elements: a false difference, the iterator moved
  on twice. Not checked, with a warning; pfor's answer and the iterator are the loop's."""
  it = iter(tf.data.Dataset.range(10))
  with vectorize.checked(sample=None):
    got = vectorize.pfor(lambda i: it.get_next() + tf.cast(i, tf.int64), 3)
  np.testing.assert_array_equal(got, [0, 2, 4])
  assert next(it).numpy() == 3
  assert "is not checked" in caplog.text


def _first_body_reading_an_argument(x):
  def body(i):
    return x[i] * 2.0
  return body


def _second_body_reading_an_argument(x):
  def body(i):
    return x[i] + 1.0
  return body


def test_each_body_not_checked_under_xla_says_so(caplog):
  """The once-per-body warning was keyed by pfor's own wrapper's code, the same for every
  body of one name: after the first, a second body named `body` was not checked silently."""
  x = tf.constant([1.0, 2.0, 3.0])
  for make in (_first_body_reading_an_argument, _second_body_reading_an_argument):
    caplog.clear()
    fn = tf.function(lambda x, make=make: vectorize.pfor(make(x), 3), jit_compile=True)
    with vectorize.checked():
      fn(x)
    assert "is not checked here" in caplog.text, make.__name__


def test_a_pfor_nested_in_a_body_is_checked_as_part_of_the_outer_one(caplog):
  """Checked on its own too, the inner pfor's check (a loop comparing joined rows) was then
  converted by the outer pfor into a graph TF could not run ("Incomplete graph"). Now only
  the outer pfor is checked, with a warning that the inner one is not on its own."""
  words = tf.constant([["Ab", "cD"], ["eF", "Gh"], ["iJ", "kl"]])

  def outer(i):
    return vectorize.pfor(lambda j: tf.strings.length(tf.strings.lower(words[i, j])), 2)

  with vectorize.checked(sample=None):
    got = tf.function(lambda: vectorize.pfor(outer, 3))()
  np.testing.assert_array_equal(got, [[2, 2], [2, 2], [2, 2]])
  assert "not checked on its own" in caplog.text
