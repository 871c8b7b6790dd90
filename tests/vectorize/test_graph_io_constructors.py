"""graph_io's constructors (ops emitted without TF's Python op layer) equal TF's own ops, and
small constants, integer or float, are shared per graph."""

import numpy as np
import pytest
import tensorflow as tf

from vectorize import graph_io


def _run(build):
  """`build()` in a fresh graph, evaluated."""
  return tf.function(build)().numpy()


@pytest.mark.parametrize("op_type, fn", [("Mul", tf.multiply), ("Sub", tf.subtract),
                                         ("AddV2", tf.add), ("RealDiv", tf.divide)])
def test_binary_equals_tf_op(op_type, fn):
  x = np.random.RandomState(0).normal(size=[3, 4]).astype(np.float32)
  y = np.random.RandomState(1).normal(size=[4]).astype(np.float32) + 3
  np.testing.assert_array_equal(
      _run(lambda: graph_io.binary(op_type, tf.constant(x), tf.constant(y))),
      _run(lambda: fn(tf.constant(x), tf.constant(y))))


def test_binary_turns_numbers_into_constants_of_the_other_dtype():
  y = tf.constant([0.25, 0.5], tf.float64)
  np.testing.assert_array_equal(_run(lambda: graph_io.binary("Sub", 1, y)), [0.75, 0.5])
  out = tf.function(lambda: graph_io.binary("Mul", y, 2)).get_concrete_function().outputs[0]
  assert out.dtype == tf.float64


def test_binary_records_gradients():
  def gradient():
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = graph_io.binary("Mul", x, graph_io.binary("Sub", 1.0, x))   # x (1 - x)
    return tape.gradient(y, x)
  np.testing.assert_allclose(_run(gradient), [-1.0, -3.0])


@pytest.mark.parametrize("shape_a, shape_b", [([3, 4], [4, 5]), ([2, 3, 4], [2, 4, 5])])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_matmul_equals_tf_matmul(shape_a, shape_b, transpose_a, transpose_b):
  rng = np.random.RandomState(2)
  a = rng.normal(size=shape_a).astype(np.float32)
  b = rng.normal(size=shape_b).astype(np.float32)
  if transpose_a:
    a = np.swapaxes(a, -1, -2).copy()
  if transpose_b:
    b = np.swapaxes(b, -1, -2).copy()
  expected = _run(lambda: tf.linalg.matmul(a, b, transpose_a=transpose_a,
                                           transpose_b=transpose_b))
  np.testing.assert_array_equal(
      _run(lambda: graph_io.matmul(tf.constant(a), tf.constant(b), transpose_a=transpose_a,
                                   transpose_b=transpose_b)), expected)


def test_matmul_of_complex_batches_transposes_without_conjugating():
  a = tf.constant([[[1 + 1j, 2], [3, 4j]]], tf.complex64)
  np.testing.assert_array_equal(_run(lambda: graph_io.matmul(a, a, transpose_a=True)),
                                _run(lambda: tf.linalg.matmul(a, a, transpose_a=True)))


@pytest.mark.parametrize("adj_x", [False, True])
@pytest.mark.parametrize("adj_y", [False, True])
def test_batch_matmul_broadcasts_like_tf(adj_x, adj_y):
  rng = np.random.RandomState(3)
  x = rng.normal(size=[2, 1, 3, 3]).astype(np.float32)
  y = rng.normal(size=[4, 3, 3]).astype(np.float32)
  expected = _run(lambda: tf.linalg.matmul(x, y, adjoint_a=adj_x, adjoint_b=adj_y))
  got = _run(lambda: graph_io.batch_matmul(tf.constant(x), tf.constant(y), adj_x, adj_y))
  assert got.shape == (2, 4, 3, 3)
  np.testing.assert_array_equal(got, expected)


def test_float_constants_are_shared_per_graph():
  with tf.Graph().as_default():
    one = graph_io.constant(1.0, tf.float32)
    assert graph_io.constant(1.0, tf.float32) is one
    assert graph_io.constant(1.0, tf.float64) is not one
    assert graph_io.constant(-0.0, tf.float32) is not graph_io.constant(0.0, tf.float32)


def test_small_float_body_constants_are_copied_shared():
  with tf.Graph().as_default() as body:
    first, second = tf.constant(0.5), tf.constant(0.5)
  with tf.Graph().as_default():
    copies = [graph_io.copy_small_constant(c.op) for c in (first, second)]
    assert copies[0] is copies[1]
    assert tf.get_static_value(copies[0]) == 0.5
  del body


def test_a_reshape_back_is_the_tensor_it_came_from():
  """Folding the loop axis into a batch and unfolding it leaves the op that made the value,
  which kernels such as oneDNN's max-pool gradient look for; inside a control-dependency
  block a new op is made, to carry the dependency."""
  graph = tf.Graph()
  with graph.as_default():
    made = tf.zeros([6, 4, 5])
    folded = graph_io.reshape(made, [2, 3, 4, 5])
    twice = graph_io.reshape(graph_io.reshape(folded, [6, 20]), [3, 2, 20])
    assert graph_io.reshape(folded, [6, 4, 5]) is made
    assert twice.op.type == "Reshape" and twice.op.inputs[0] is made
    with tf.control_dependencies([tf.no_op()]):
      kept = graph_io.reshape(folded, [6, 4, 5])
    assert kept is not made and kept.op.control_inputs
