"""The user API: argument checks, output structures, modes, caching, config, chunking."""

import collections
import functools

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from vectorize import api
from tests import testing

X = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3))


def _body(i):
  return tf.gather(X, i) * 2.0 + 1.0


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("iters", [-1, -5])
def test_negative_iters_raise_value_error(iters):
  with pytest.raises(ValueError, match="non-negative"):
    vectorize.pfor(_body, iters)


@pytest.mark.parametrize("iters", [2.5, "3", None, True, [3]])
def test_non_integer_iters_raise_type_error(iters):
  with pytest.raises(TypeError, match="iters"):
    vectorize.pfor(_body, iters)


def test_float_tensor_iters_raise_type_error():
  with pytest.raises(TypeError, match="integer tensor"):
    vectorize.pfor(_body, tf.constant(3.0))


def test_negative_constant_tensor_iters_raise_value_error():
  with pytest.raises(ValueError, match="non-negative"):
    vectorize.pfor(_body, tf.constant(-2))


def test_non_scalar_tensor_iters_raise_value_error():
  with pytest.raises(ValueError, match="scalar"):
    vectorize.pfor(_body, tf.constant([3]))


@pytest.mark.parametrize("parallel_iterations", [0, -1])
def test_bad_parallel_iterations_raise(parallel_iterations):
  with pytest.raises(ValueError, match="parallel_iterations"):
    vectorize.pfor(_body, 3, parallel_iterations=parallel_iterations)


def test_body_returning_an_object_raises_type_error_naming_it():
  with pytest.raises(TypeError, match="object of type object"):
    vectorize.pfor(lambda i: (_body(i), object()), 3)


def test_body_returning_none_passes_it_through():
  assert vectorize.pfor(lambda i: {"a": None}, 3) == {"a": None}
  assert tf.function(lambda: vectorize.pfor(lambda i: None, 3))() is None


def test_body_returning_a_sparse_tensor_gives_one_with_a_loop_axis():
  sparse = tf.sparse.from_dense(tf.eye(2))
  stacked = vectorize.pfor(lambda i: sparse, 3)
  assert isinstance(stacked, tf.SparseTensor)
  np.testing.assert_array_equal(tf.sparse.to_dense(stacked), tf.stack([tf.eye(2)] * 3))


def _set_difference_body(i):
  """ListDiff (no converter: its output size depends on the data) of [i, i + 1, i] and
  [i + 1], with its size made known again."""
  difference = tf.raw_ops.ListDiff(x=tf.stack([i, i + 1, i]), y=tf.stack([i + 1]))[0]
  return tf.ensure_shape(difference, [2])


def test_op_without_converter_raises_conversion_error_when_fallback_is_off():
  assert "ListDiff" not in vectorize.registered_op_types()
  with pytest.raises(vectorize.ConversionError, match="ListDiff.*fallback_to_while_loop"):
    vectorize.pfor(_set_difference_body, 3, fallback_to_while_loop=False)


def test_converter_returning_wrong_dtype_raises_conversion_error():
  from vectorize import registry
  from vectorize.values import stacked

  @registry.register("TestOnlyWrongDtype")
  def _convert(op):
    return stacked(tf.zeros([op.ctx.n], tf.int32))

  try:
    from vectorize import walker
    from vectorize.context import Context

    def build():
      graph = tf.function(lambda i: tf.cast(i, tf.float32) * 2.0).get_concrete_function(
          tf.TensorSpec([], tf.int32)).graph
      mul = [op for op in graph.get_operations() if op.type == "Mul"][0]
      mul._set_attr  # the op exists; swap its type through the registry lookup instead
      original = registry._CONVERTERS["Mul"]
      registry._CONVERTERS["Mul"] = _convert
      try:
        ctx = Context(n=tf.constant(3), indices=tf.range(3), static_n=3,
                      fallback_allowed=False)
        from vectorize.values import stacked as s
        walker.convert_graph(graph, [s(tf.range(3))], ctx)
      finally:
        registry._CONVERTERS["Mul"] = original

    with pytest.raises(vectorize.ConversionError, match="changed the dtype"):
      tf.function(build)()
  finally:
    registry._CONVERTERS.pop("TestOnlyWrongDtype")


# ----------------------------------------------------------------------------- outputs

def test_nested_output_structures_are_kept():
  Pair = collections.namedtuple("Pair", "a b")

  def body(i):
    row = tf.gather(X, i)
    return {"pair": Pair(row, tf.reduce_sum(row)), "list": [row * 2.0, 7], "scalar": 1.5}

  actual = testing.run_pfor(body, 4)
  expected = testing.sequential(body, 4)
  testing.assert_allclose(actual, expected)
  assert isinstance(vectorize.pfor(body, 4)["pair"], Pair)


def test_python_scalars_and_invariant_outputs_are_tiled():
  out = vectorize.pfor(lambda i: (3, tf.constant([1.0, 2.0])), 5)
  np.testing.assert_array_equal(out[0], [3] * 5)
  np.testing.assert_array_equal(out[1], [[1.0, 2.0]] * 5)


def test_indexed_slices_outputs_become_dense():
  params = tf.Variable(tf.ones([5, 2]))

  def body(i):
    with tf.GradientTape() as tape:
      y = tf.reduce_sum(tf.gather(params, tf.stack([i, i + 1])))
    return tape.gradient(y, params)

  actual = testing.run_pfor(body, 3, fallback=True)
  expected = testing.sequential(lambda i: tf.convert_to_tensor(body(i)), 3)
  testing.assert_allclose(actual, expected)


@pytest.mark.parametrize("mode", testing.MODES)
def test_modes_agree_with_the_sequential_reference(mode):
  testing.assert_allclose(testing.run_pfor(_body, 4, mode=mode), testing.sequential(_body, 4))


@pytest.mark.parametrize("mode", ["function", "eager", "xla"])
def test_zero_iterations_give_empty_outputs(mode):
  out = testing.run_pfor(lambda i: (tf.gather(X, i), tf.constant(1.0)), 0, mode=mode)
  assert out[0].shape == (0, 3) and out[1].shape == (0,)


def test_run_time_iters_of_zero():
  fn = tf.function(lambda n: vectorize.pfor(lambda i: tf.gather(X, i) * 2.0, n))
  assert fn(tf.constant(0)).shape == (0, 3)


def test_int64_run_time_iters():
  fn = tf.function(lambda n: vectorize.pfor(_body, n),
                   input_signature=[tf.TensorSpec([], tf.int64)])
  testing.assert_allclose(fn(tf.constant(4, tf.int64)).numpy(), testing.sequential(_body, 4))


# ----------------------------------------------------------------------------- callables

class _Scale:

  def __init__(self, factor):
    self.factor = factor

  def __call__(self, i):
    return tf.gather(X, i) * self.factor


def _scaled(i, factor):
  return tf.gather(X, i) * factor


@pytest.mark.parametrize("loop_fn", [
    _Scale(3.0),
    functools.partial(_scaled, factor=3.0),
    tf.function(lambda i: tf.gather(X, i) * 3.0),
], ids=["callable_object", "partial", "tf_function"])
def test_loop_fn_kinds(loop_fn):
  testing.assert_allclose(testing.run_pfor(loop_fn, 4), (X * 3.0).numpy())


# ----------------------------------------------------------------------------- eager cache

def test_eager_calls_reuse_the_conversion():
  calls = []

  def body(i):
    calls.append(1)
    return tf.gather(X, i) + 1.0

  first = vectorize.pfor(body, 4)
  second = vectorize.pfor(body, 4)
  np.testing.assert_array_equal(first, second)
  assert len(calls) == 1


def test_eager_cache_sees_a_rebound_closure_variable():
  def make(value):
    t = tf.constant(value)
    return lambda i: t * tf.cast(i, tf.float32)

  np.testing.assert_array_equal(vectorize.pfor(make(1.0), 3), [0.0, 1.0, 2.0])
  np.testing.assert_array_equal(vectorize.pfor(make(2.0), 3), [0.0, 2.0, 4.0])


def test_vectorized_map_does_not_retrace_for_same_shapes():
  calls = []

  def fn(row):
    calls.append(1)
    return tf.reduce_sum(row * row)

  a = vectorize.vectorized_map(fn, tf.ones([4, 3]))
  b = vectorize.vectorized_map(fn, tf.ones([4, 3]) * 2.0)
  np.testing.assert_allclose(a, [3.0] * 4)
  np.testing.assert_allclose(b, [12.0] * 4)
  assert len(calls) == 1


# ----------------------------------------------------------------------------- vectorized_map

def test_vectorized_map_on_nested_elems():
  elems = {"a": tf.reshape(tf.range(6.0), [3, 2]), "b": tf.constant([1.0, 2.0, 3.0])}
  out = vectorize.vectorized_map(lambda e: (e["a"] * e["b"], tf.reduce_sum(e["a"])), elems)
  expected = tf.map_fn(lambda e: (e["a"] * e["b"], tf.reduce_sum(e["a"])), elems,
                       fn_output_signature=(tf.float32, tf.float32))
  testing.assert_allclose(tf.nest.map_structure(np.asarray, out),
                          tf.nest.map_structure(np.asarray, expected))


@pytest.mark.unchecked
def test_vectorized_map_of_one_run_time_batch_adds_no_assert():
  """A batch's own size needs no range or agreement check: an Assert would gate the whole
  function (a tf.data map function waits on it). Two elems still check that they agree."""
  one = tf.function(lambda x: vectorize.vectorized_map(lambda r: r * 2.0, x),
                    input_signature=[tf.TensorSpec([None, 3])])
  ops = [op.type for op in one.get_concrete_function().graph.get_operations()]
  assert "Assert" not in ops
  np.testing.assert_allclose(one(tf.ones([4, 3])), 2 * np.ones([4, 3]))
  assert one(tf.ones([0, 3])).shape == (0, 3)
  two = tf.function(lambda x, y: vectorize.vectorized_map(lambda a: a[0] * a[1], (x, y)),
                    input_signature=[tf.TensorSpec([None, 3]), tf.TensorSpec([None, 1])])
  with pytest.raises(tf.errors.InvalidArgumentError, match="same leading dimension"):
    two(tf.ones([4, 3]), tf.ones([3, 1]))


def test_vectorized_map_broadcasts_a_leading_one_against_no_examples():
  """A leading 1 broadcasts against a batch of 0 too (no iteration), statically and at run
  time; all leading dimensions 1 make one iteration."""
  row = tf.constant([[1.0, 2.0, 3.0]])
  fn = lambda e: e[0] * e[1]
  assert vectorize.vectorized_map(fn, (tf.zeros([0, 3]), row)).shape == (0, 3)
  assert vectorize.vectorized_map(fn, (row, tf.zeros([0, 3]))).shape == (0, 3)
  two = tf.function(lambda x, y: vectorize.vectorized_map(fn, (x, y)),
                    input_signature=[tf.TensorSpec([None, 3]), tf.TensorSpec([None, 3])])
  assert two(tf.zeros([0, 3]), row).shape == (0, 3)
  assert two(row, tf.zeros([0, 3])).shape == (0, 3)
  np.testing.assert_allclose(two(row, 2 * row), [[2.0, 8.0, 18.0]])
  np.testing.assert_allclose(two(tf.ones([2, 3]), row), [[1.0, 2.0, 3.0]] * 2)
  with pytest.raises(ValueError, match="same leading dimension"):
    vectorize.vectorized_map(fn, (tf.zeros([0, 3]), tf.zeros([2, 3])))


# ----------------------------------------------------------------------------- pfor_config

def test_pfor_config_reduce_sum_gives_a_batch_statistic():
  def body(i, pfor_config):
    row = tf.gather(X, i)
    total = pfor_config.reduce_sum(row)
    return row / total

  actual = testing.run_pfor(body, 4)
  np.testing.assert_allclose(actual, (X / tf.reduce_sum(X, 0)).numpy(), rtol=1e-6)


def test_pfor_config_reduce_mean_and_concat():
  def body(i, pfor_config):
    row = tf.gather(X, i)
    return pfor_config.reduce_mean(row), pfor_config.reduce_concat(row)

  mean, concat = testing.run_pfor(body, 4)
  np.testing.assert_allclose(mean, np.tile(np.mean(X, 0), [4, 1]))
  np.testing.assert_allclose(concat, np.tile(X[None], [4, 1, 1]))   # [n] + [n, 3], as TF


LENGTHS = tf.constant([4, 0, 2])


def _sum_first_values_until_every_iteration_is_done(i, pfor_config):
  """A loop whose condition is loop-invariant by a reduction (any iteration not done): each
  iteration sums its first LENGTHS[i] values, the loop masking the ones that are done."""
  row, length = tf.gather(X, i), tf.gather(LENGTHS, i)

  def cond(not_done, j, total):
    del j, total
    return tf.reduce_any(pfor_config.reduce_concat(not_done))

  def body(not_done, j, total):
    not_done = tf.logical_and(not_done, j < length)
    step = (j + 1, total + tf.gather(row, tf.minimum(j, 2)))
    return (not_done,) + tuple(tf.where(not_done, a, b) for a, b in zip(step, (j, total)))

  return tf.while_loop(cond, body, (True, 0, 0.0))[1:]


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
def test_pfor_config_reduction_in_a_while_loops_condition(mode):
  """The reduction was cached from the dry run that decides the loop's stacked variables (a
  scratch graph) and reused in the real one: "must be from the same graph"."""
  run = lambda: vectorize.pfor(_sum_first_values_until_every_iteration_is_done, 3)  # pylint: disable=unnecessary-lambda-assignment
  if mode != "eager":
    run = tf.function(run, jit_compile=mode == "xla")
  j, total = run()
  x = X.numpy() if hasattr(X, "numpy") else np.asarray(X)
  want = [sum(x[k, min(t, 2)] for t in range(m)) for k, m in enumerate([4, 0, 2])]
  np.testing.assert_array_equal(j, [4, 0, 2])
  np.testing.assert_allclose(total, want, rtol=1e-6)


def test_pfor_config_with_parallel_iterations_raises():
  with pytest.raises(ValueError, match="parallel_iterations"):
    vectorize.pfor(lambda i, pfor_config: pfor_config.reduce_sum(tf.gather(X, i)), 4,
                   parallel_iterations=2)


# ----------------------------------------------------------------------------- chunks

@pytest.mark.parametrize("n,chunk", [(4, 3), (4, 1), (4, 4), (4, 8), (0, 2)])
def test_parallel_iterations_splits_into_chunks(n, chunk):
  actual = testing.run_pfor(_body, n, parallel_iterations=chunk)
  testing.assert_allclose(actual, testing.sequential(_body, n, testing.output_spec(_body)))


def test_parallel_iterations_with_run_time_n():
  actual = testing.run_pfor(_body, 4, mode="dynamic", parallel_iterations=3)
  testing.assert_allclose(actual, testing.sequential(_body, 4))


def test_parallel_iterations_traces_the_body_once():
  calls = []

  def body(i):
    calls.append(1)
    return tf.gather(X, i)

  tf.function(lambda: vectorize.pfor(body, 4, parallel_iterations=3))()
  assert len(calls) == 1


# ----------------------------------------------------------------------------- misc

def test_registered_op_types_lists_converters():
  types = vectorize.registered_op_types()
  assert "AddV2" in types and types == sorted(types)


def test_last_report_counts_conversions():
  tf.function(lambda: vectorize.pfor(_body, 4))()
  counts = vectorize.last_report().counts()
  assert counts["Mul"]["vectorized"] == 1
  assert vectorize.last_report().num_fallbacks == 0


def test_fallback_warns_once_per_op_type_and_is_correct():
  def body(i):
    return _set_difference_body(i) + _set_difference_body(i + 2)

  with _absl_warnings() as logs:
    actual = testing.run_pfor(body, 3, fallback=True, warn=True)
  testing.assert_allclose(actual, testing.sequential(body, 3))
  assert sum("ListDiff" in m for m in logs) == 1
  assert vectorize.last_report().num_fallbacks == 2


class _absl_warnings:
  """Collects absl warning messages."""

  def __enter__(self):
    from absl import logging
    self.messages = []
    self._original = logging.warning
    logging.warning = lambda msg, *args: self.messages.append(msg % args)
    return self.messages

  def __exit__(self, *exc):
    from absl import logging
    logging.warning = self._original
    return False
