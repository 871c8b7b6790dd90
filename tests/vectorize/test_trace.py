"""trace: a Python function traced once, its output structure packed back, its errors."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from vectorize import trace

INDEX = [tf.TensorSpec([], tf.int32)]


def test_trace_records_the_structure_and_packs_it_back():
  Pair = collections.namedtuple("Pair", "a b")
  traced = trace.trace(lambda i: {"p": Pair(i + 1, None), "k": [tf.cast(i, tf.float32)]},
                       INDEX)
  assert sorted(traced.kinds) == sorted([trace.TENSOR, trace.TENSOR, trace.NONE])
  assert len(traced.graph.outputs) == 2
  packed = traced.pack(["x", "y"], [])
  assert packed["p"].b is None and isinstance(packed["p"], Pair)
  assert sorted([packed["p"].a, packed["k"][0]]) == ["x", "y"]


def test_trace_passes_extra_arguments_after_the_traced_ones():
  seen = []
  trace.trace(lambda i, config: seen.append(config) or i, INDEX, extra_args=("cfg",))
  assert seen == ["cfg"]


def test_trace_keeps_a_returned_operation_as_a_marker():
  v = tf.Variable(0)
  traced = trace.trace(lambda i: (v.assign_add(i).op, i), INDEX)
  assert traced.kinds == [trace.OPERATION, trace.TENSOR]
  assert len(traced.markers) == 1 and traced.markers[0].type == "NoOp"
  assert traced.pack([7], ["op"]) == ("op", 7)


def test_captured_inputs_are_the_outer_tensors():
  outer = tf.constant([1.0, 2.0])
  traced = trace.trace(lambda i: tf.gather(outer, i), INDEX)

  @tf.function
  def f():
    captured = traced.captured_inputs()
    assert len(captured) == 1
    return captured[0]

  np.testing.assert_array_equal(f(), [1.0, 2.0])


def test_trace_names_the_function_and_path_of_a_bad_output():
  with pytest.raises(TypeError, match=r"my_body returned an object of type str at x"):
    trace.trace(lambda i: {"x": "no"}, INDEX, name="my_body")
  with pytest.raises(TypeError, match="SparseTensor.*dense"):
    trace.trace(lambda i: tf.sparse.from_dense([[i]]), INDEX)


def test_trace_applies_autograph_when_the_caller_has_it():

  def body(i):
    if i > 1:          # a Python `if` on a tensor: needs autograph
      return i * 2
    return i

  with trace.autograph_enabled():
    traced = trace.trace(body, INDEX)
  assert any(op.type in ("If", "StatelessIf") for op in traced.graph.get_operations())


def _frame_file(record):
  import sys  # pylint: disable=g-import-not-at-top
  record.append(sys._getframe(1).f_code.co_filename)  # pylint: disable=protected-access


def test_a_body_that_runs_as_python_is_traced_unconverted():
  """Autograph runs every library function the body calls converted (a circuit simulator's
  tracing took 6x as long): a body that traces as plain Python is not converted, as in TF's
  pfor and vectorized_map."""
  files = []

  def body(i):
    _frame_file(files)
    return i * 2

  with trace.autograph_enabled():
    trace.trace(trace.autograph_like_caller(body), INDEX)
  assert files == [__file__]


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_a_body_that_needs_autograph_is_traced_again_converted_once(mode):
  """A Python `if` on a tensor fails as plain Python: the body is traced again converted,
  and the graph holds what the converted trace made only (one update, not two)."""
  import vectorize  # pylint: disable=g-import-not-at-top
  v = tf.Variable(0.0)
  x = tf.constant([1.0, -2.0, 3.0])

  def body(i):
    v.assign_add(x[i])
    if x[i] > 0:
      return x[i] * 2
    return -x[i]

  run = lambda: vectorize.pfor(body, 3)
  got = run() if mode == "eager" else tf.function(run)()
  np.testing.assert_allclose(got, [2.0, 2.0, 6.0])
  assert v.numpy() == 2.0


def test_a_body_that_needs_a_static_shape_of_the_index_says_why_tracing_differs():
  """Fuzz seed 4400059: `tf.unstack` of a value padded by per-iteration paddings runs in the
  loop with Python ints, and fails traced for a symbolic index. The error says why, once,
  where pfors nest, and keeps its type."""
  import vectorize   # pylint: disable=import-outside-toplevel

  def body(i):
    padded = tf.pad(tf.zeros([2, 2]), [[tf.math.floormod(i, 2), 0], [0, 0]])
    return tf.unstack(padded)[0]

  assert body(tf.constant(1)).shape == [2]   # the loop runs
  with pytest.raises(ValueError, match=r"(?s)Cannot infer argument `num`.*traced .* once, "
                     r"its loop index .* symbolic.*To fix: keep such shapes static") as e:
    vectorize.pfor(body, 3)
  assert str(e.value).count("To fix: keep such shapes static") == 1
  with pytest.raises(ValueError) as nested:
    vectorize.pfor(lambda j: vectorize.pfor(body, 2), 2)
  assert str(nested.value).count("To fix: keep such shapes static") == 1
