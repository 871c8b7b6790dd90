"""The walker: loop invariance visible in the output graph, gradients through pfor outputs,
nested pfor, and control edges kept."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

RNG = np.random.default_rng(1)
X = tf.constant(RNG.standard_normal([5, 4]), tf.float32)
W = tf.constant(RNG.standard_normal([4, 3]), tf.float32)


def _converted_graph(body, n):
  return tf.function(lambda: vectorize.pfor(body, n, fallback_to_while_loop=False)
                     ).get_concrete_function().graph


@pytest.mark.unchecked
def test_invariant_weight_gives_one_matmul_and_no_tile():
  graph = _converted_graph(lambda i: tf.matmul(X[i:i + 1], W), 5)
  ops = testing.all_ops(graph)
  matmuls = [op for op in ops if op.type in ("MatMul", "BatchMatMulV2", "BatchMatMulV3")]
  assert len(matmuls) == 1 and matmuls[0].type == "MatMul"
  assert matmuls[0].inputs[0].shape.as_list() == [5, 4]
  assert not [op for op in ops if op.type == "Tile"]
  testing.assert_allclose(testing.run_pfor(lambda i: tf.matmul(X[i:i + 1], W), 5),
                          testing.sequential(lambda i: tf.matmul(X[i:i + 1], W), 5))


@pytest.mark.unchecked
def test_invariant_body_has_no_per_iteration_computation():
  graph = _converted_graph(lambda i: tf.tanh(tf.matmul(X, W)) * 2.0, 5)
  ops = testing.all_ops(graph)
  tanh = [op for op in ops if op.type == "Tanh"]
  assert len(tanh) == 1 and tanh[0].outputs[0].shape.as_list() == [5, 3]
  # Only the final tiling of the invariant output depends on n.
  assert not [op for op in ops if op.type in ("While", "StatelessWhile", "TensorListReserve")]


def test_gradient_through_pfor_output_equals_gradient_through_loop():
  w = tf.Variable(W)

  def body(i):
    return tf.reduce_sum(tf.tanh(tf.matmul(tf.gather(X, i)[None], w)) ** 2)

  with tf.GradientTape() as tape:
    vectorized = tf.reduce_sum(vectorize.pfor(body, 5, fallback_to_while_loop=False) ** 3)
  with tf.GradientTape() as tape_loop:
    looped = tf.reduce_sum(tf.stack([body(tf.constant(i)) for i in range(5)]) ** 3)
  np.testing.assert_allclose(vectorized, looped, rtol=1e-5)
  np.testing.assert_allclose(tape.gradient(vectorized, w), tape_loop.gradient(looped, w),
                             rtol=1e-4, atol=1e-5)


def test_gradient_with_respect_to_a_stacked_input():
  x = tf.Variable(X)

  def body(i):
    return tf.reduce_sum(tf.sin(tf.gather(x, i)) * tf.cast(i + 1, tf.float32))

  with tf.GradientTape() as tape:
    out = tf.reduce_sum(vectorize.pfor(body, 5, fallback_to_while_loop=False))
  expected = np.cos(X.numpy()) * np.arange(1, 6)[:, None]
  np.testing.assert_allclose(tf.convert_to_tensor(tape.gradient(out, x)), expected, rtol=1e-5)


def test_nested_pfor_equals_double_loop():
  def inner(i):
    return lambda j: tf.gather(X, i) * tf.cast(j + 1, tf.float32)

  def outer(i):
    return vectorize.pfor(inner(i), 3, fallback_to_while_loop=False)

  actual = testing.run_pfor(outer, 5)
  expected = np.stack([np.stack([X.numpy()[i] * (j + 1) for j in range(3)]) for i in range(5)])
  testing.assert_allclose(actual, expected)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_tape_inside_a_tf_function_sees_the_converted_ops(jit_compile):
  """Ops the walker emits are recorded on tapes, as TF's own op wrappers are."""
  w = tf.Variable(W)

  def body(i):
    return tf.reduce_sum(tf.sin(tf.matmul(tf.gather(X, i)[None], w)) * tf.exp(w[0]))

  @tf.function(jit_compile=jit_compile)
  def vectorized_gradient():
    with tf.GradientTape() as tape:
      out = tf.reduce_sum(vectorize.pfor(body, 5, fallback_to_while_loop=False) ** 2)
    return tape.gradient(out, w)

  with tf.GradientTape() as tape:
    looped = tf.reduce_sum(tf.stack([body(tf.constant(i)) for i in range(5)]) ** 2)
  np.testing.assert_allclose(vectorized_gradient(), tape.gradient(looped, w), rtol=1e-4,
                             atol=1e-5)


@pytest.mark.unchecked
def test_gather_at_the_loop_index_of_all_rows_is_no_copy():
  graph = _converted_graph(lambda i: tf.gather(X, i) * 2.0, 5)
  assert "GatherV2" not in testing.all_op_types(graph)
  testing.check_against_loop(lambda i: tf.gather(X, i) * 2.0, 5)


def test_gather_at_the_loop_index_of_more_rows_than_iterations_still_gathers():
  testing.check_against_loop(lambda i: tf.gather(X, i) * 2.0, 3)
  testing.check_against_loop(lambda i: tf.gather(X, i) * 2.0, 4, mode="dynamic")


def test_unique_of_an_invariant_under_xla_is_a_clear_error():
  """Fuzz seed 1240049: tf.unique of a loop-invariant value under jit_compile. XLA computes
  it wrongly by itself (an empty result, no vectorize involved) and crashed the process once
  the result was tiled; it is refused, while the same pfor without XLA equals the loop."""
  w = tf.constant([5, 1, 7])
  body = lambda i: tf.math.cumprod(tf.unique(tf.math.floormod(tf.identity(w), 3))[0])
  fn = tf.function(lambda ws: vectorize.pfor(
      lambda i: tf.math.cumprod(tf.unique(tf.math.floormod(ws, 3))[0]), 3,
      fallback_to_while_loop=False), jit_compile=True)
  with pytest.raises(vectorize.ConversionError, match="output's size depends on the data"):
    fn(w)
  np.testing.assert_array_equal(vectorize.pfor(body, 3), [[2, 2]] * 3)


V11 = tf.Variable([-0.3])


def test_boolean_mask_of_an_invariant_under_xla_is_a_clear_error():
  """Fuzz seeds 1260067, 1240109: tf.boolean_mask of a loop-invariant value (a variable's
  value) under jit_compile, given to every iteration, came back with a garbage shape
  ((21862, 646229280) for (1, 0)) or a dynamic_padder RET_CHECK; XLA miscompiles such
  data-dependent sizes by itself too (a gather from an empty one aborts the process). It is
  refused, while the same pfor without XLA equals the loop."""
  body = lambda i: tf.boolean_mask(tf.identity(V11), tf.identity(V11) > 0.0)
  fn = tf.function(lambda: vectorize.pfor(body, 1, fallback_to_while_loop=False),
                   jit_compile=True)
  with pytest.raises(vectorize.ConversionError, match="Where.*output's size depends on the data"):
    fn()
  testing.check_against_loop(body, 2)
