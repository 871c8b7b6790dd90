"""map_fn: equal to tf.map_fn on nested inputs and outputs, in every mode; signature checks."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from vectorize.helpers.map_fn import map_fn
from tests import testing

RNG = np.random.default_rng(0)
X = tf.constant(RNG.standard_normal([4, 3]).astype(np.float32))
IDS = tf.constant([3, 0, 2, 1])
ELEMS = {"x": X, "pair": (IDS, X * 2.0)}
SIGNATURE = (tf.float32, {"id": tf.int32, "row": tf.TensorSpec([3], tf.float32)})


def _nested_fn(e):
  """dict of (tensor, tuple) in; tuple of (scalar, dict) out: a structure unlike elems'."""
  ids, doubled = e["pair"]
  total = tf.reduce_sum(e["x"] * doubled)
  return total, {"id": ids + 1, "row": tf.nn.softmax(e["x"])}


def _numpy(structure):
  return tf.nest.map_structure(np.asarray, structure)


def _run(mode, fn, elems, **kwargs):
  if mode == "eager":
    return _numpy(map_fn(fn, elems, **kwargs))
  if mode == "dynamic":   # leading dimensions known only at run time
    specs = tf.nest.map_structure(
        lambda t: tf.TensorSpec([None] + t.shape[1:].as_list(), t.dtype), elems)
    graph_fn = tf.function(lambda e: map_fn(fn, e, **kwargs), input_signature=[specs],
                           autograph=False)
    return _numpy(graph_fn(elems))
  graph_fn = tf.function(lambda: map_fn(fn, elems, **kwargs), autograph=False,
                         jit_compile=(mode == "xla"))
  return _numpy(graph_fn())


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic", "xla"])
def test_map_fn_nested_signature_equals_tf_map_fn(mode):
  expected = _numpy(tf.map_fn(_nested_fn, ELEMS, fn_output_signature=SIGNATURE))
  testing.assert_allclose(_run(mode, _nested_fn, ELEMS, fn_output_signature=SIGNATURE),
                          expected)


def test_map_fn_dtype_alias_equals_tf_map_fn():
  fn = lambda row: tf.argmax(row, output_type=tf.int32)   # float elems, int output
  testing.assert_allclose(_numpy(map_fn(fn, X, dtype=tf.int32)),
                          _numpy(tf.map_fn(fn, X, dtype=tf.int32)))


def test_map_fn_without_signature_keeps_elems_structure():
  fn = lambda e: [e[0] * 3.0, e[1] - 1]
  testing.assert_allclose(_numpy(map_fn(fn, [X, IDS])), _numpy(tf.map_fn(fn, [X, IDS])))


def test_map_fn_python_number_output_takes_signature_dtype():
  testing.assert_allclose(_numpy(map_fn(lambda row: 2, X, fn_output_signature=tf.float32)),
                          np.full([4], 2.0, np.float32))


def test_map_fn_is_vectorized_without_fallback():
  tf.function(lambda: map_fn(_nested_fn, ELEMS, fn_output_signature=SIGNATURE),
              autograph=False).get_concrete_function()
  report = vectorize.last_report()
  assert report.num_fallbacks == 0
  assert any(r.op_type == "Softmax" and r.kind == "vectorized" for r in report.records)


def _sign_dependent(row):
  if tf.reduce_sum(row) > 0:   # a Python `if` on a tensor: AutoGraph makes it a tf.cond
    return row * 2.0
  return -row


def test_map_fn_in_tf_function_converts_python_control_flow_of_fn():
  out = tf.function(lambda: map_fn(_sign_dependent, X))()
  testing.assert_allclose(_numpy(out), _numpy(tf.map_fn(_sign_dependent, X)))


def test_map_fn_zero_length_elems_give_empty_outputs():
  out = map_fn(lambda row: tf.reduce_sum(row) * 2.0, tf.zeros([0, 3]))
  assert out.shape == (0,) and out.dtype == tf.float32


def test_map_fn_eager_calls_are_cached_per_shape():
  traces = []

  def fn(row):
    traces.append(1)
    return row * 2.0

  map_fn(fn, X)
  first = len(traces)
  out = map_fn(fn, X + 1.0)             # same shapes: no new trace
  assert len(traces) == first
  np.testing.assert_allclose(out, (X + 1.0) * 2.0)
  map_fn(fn, tf.zeros([6, 3]))          # a new shape traces again
  assert len(traces) > first


def test_map_fn_gradient_equals_tf_map_fn():
  def loss(mapper):
    with tf.GradientTape() as tape:
      tape.watch(X)
      y = tf.reduce_sum(mapper(lambda row: tf.tanh(row) * row, X) ** 2)
    return tape.gradient(y, X).numpy()

  np.testing.assert_allclose(loss(map_fn), loss(tf.map_fn), rtol=1e-5, atol=1e-6)


def test_map_fn_back_prop_false_stops_gradients():
  with tf.GradientTape() as tape:
    tape.watch(X)
    y = tf.reduce_sum(map_fn(lambda row: row * 2.0, X, back_prop=False))
  assert tape.gradient(y, X) is None


def test_map_fn_ragged_elems_are_handed_to_tf_map_fn():
  ragged = tf.ragged.constant([[1.0, 2.0], [3.0]])
  out = map_fn(tf.reduce_sum, ragged, fn_output_signature=tf.float32)
  np.testing.assert_allclose(out, [3.0, 3.0])


# ----------------------------------------------------------------------------- errors

def test_map_fn_dtype_differing_from_signature_raises_type_error():
  with pytest.raises(TypeError, match="returned int32 at <top level>.*float32"):
    map_fn(lambda row: tf.cast(row, tf.int32), X)


def test_map_fn_structure_differing_from_elems_raises_naming_signature():
  with pytest.raises(ValueError, match="fn_output_signature"):
    map_fn(lambda row: (row, row), X)


def test_map_fn_shape_differing_from_spec_raises():
  with pytest.raises(ValueError, match="shape"):
    map_fn(lambda row: row, X, fn_output_signature=tf.TensorSpec([5], tf.float32))


def test_map_fn_dtype_and_signature_together_raise():
  with pytest.raises(ValueError, match="not both"):
    map_fn(lambda row: row, X, dtype=tf.float32, fn_output_signature=tf.float32)


def test_map_fn_scalar_elems_raise():
  with pytest.raises(ValueError, match="leading axis"):
    map_fn(lambda v: v, tf.constant(1.0))


def test_map_fn_different_leading_dimensions_raise():
  with pytest.raises(ValueError, match="leading dimension"):
    map_fn(lambda e: e[0], (X, tf.range(5)), fn_output_signature=tf.float32)
