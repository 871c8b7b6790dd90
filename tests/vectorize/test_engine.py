"""engine: the loop body traced for the loop index, the Contexts of a whole loop and of a
chunk, and the conversion entry."""

import numpy as np
import tensorflow as tf

import vectorize
from vectorize import engine
from vectorize.active_set import Masked, Partitioned

X = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3))


def test_the_engine_fills_the_registry_with_the_families_and_control_flow():
  assert {"MatMul", "If", "While", "PartitionedCall", "Conv2D"} <= set(
      vectorize.registered_op_types())


def test_trace_loop_body_passes_a_pfor_config_when_asked():
  body = engine.trace_loop_body(lambda i, pfor_config: i)
  assert body.config is not None
  assert engine.trace_loop_body(lambda i: i).config is None
  assert body.graph.inputs[0].dtype == tf.int32 and body.graph.inputs[0].shape == []


def test_whole_loop_context_is_partitioned_with_indices_a_range():

  @tf.function
  def f():
    ctx = engine.whole_loop_context(tf.constant(3), 3, True, None)
    strategy = ctx.target.active_set
    assert isinstance(strategy, Partitioned) and strategy.indices_are_range
    assert not ctx.target.static_shapes and not ctx.target.xla and not ctx.target.subset
    return ctx.indices

  np.testing.assert_array_equal(f(), [0, 1, 2])


def test_a_context_under_xla_has_a_static_masked_target():

  @tf.function(jit_compile=True)
  def f():
    ctx = engine.whole_loop_context(tf.constant(3), 3, True, None)
    assert ctx.target.xla and ctx.target.static_shapes and ctx.target.masked
    assert "XLA" in ctx.target.cause[0]
    return ctx.indices

  np.testing.assert_array_equal(f(), [0, 1, 2])


def test_contexts_are_masked_under_static_shapes():

  @tf.function
  def f():
    with vectorize.static_shapes():
      ctx = engine.chunk_context(tf.constant(2), tf.constant(3), True, None)
    strategy = ctx.target.active_set
    assert isinstance(strategy, Masked) and not strategy.indices_are_range
    assert ctx.target.static_shapes and not ctx.target.xla
    assert "vectorize.static_shapes()" in ctx.target.cause[0]
    assert ctx.static_n is None
    return ctx.indices

  np.testing.assert_array_equal(f(), [2, 3, 4])


def test_vectorize_loop_stacks_outputs_and_records_a_report():

  @tf.function
  def f():
    return engine.vectorize_loop(lambda i: (tf.reduce_sum(X[i]), 1.0), tf.constant(4), 4,
                                 fallback_allowed=False)

  total, one = f()
  np.testing.assert_array_equal(total, [3, 12, 21, 30])
  np.testing.assert_array_equal(one, [1, 1, 1, 1])
  assert engine.last_report().num_fallbacks == 0


def test_vectorize_loop_in_chunks_equals_the_whole_loop():

  @tf.function
  def f(n):
    return engine.vectorize_loop(lambda i: X[i] * 2.0, n, None, fallback_allowed=False,
                                 chunk_size=3)

  np.testing.assert_array_equal(f(tf.constant(4)), X.numpy() * 2)
  assert f(tf.constant(0)).shape == (0, 3)
