"""chunk_outputs: a chunked loop's outputs are written in place outside XLA and gathered
from a TensorArray under it; values and gradients equal the unchunked loop in every mode."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing
from vectorize import chunk_outputs

W = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3) / 7)


def _body(i):
  x = tf.cast(i, tf.float32) + 1.0
  return {"row": tf.sin(x * W), "scalar": x * x, "count": i * 2}


@pytest.mark.parametrize("mode", ["function", "dynamic", "eager"])
@pytest.mark.parametrize("n,chunk", [(7, 3), (0, 2), (2, 5)])
def test_chunked_outputs_equal_the_loop(mode, n, chunk):
  actual = testing.run_pfor(_body, n, mode=mode, parallel_iterations=chunk)
  testing.assert_allclose(actual, testing.sequential(_body, n, testing.output_spec(_body)))


@pytest.mark.parametrize("n,chunk", [(7, 3), (6, 3), (2, 5), (0, 2)])
def test_chunked_outputs_under_xla(n, chunk):
  # Full chunks in a loop, the rest converted once more: every chunk has a static size.
  actual = testing.run_pfor(_body, n, mode="xla", parallel_iterations=chunk)
  testing.assert_allclose(actual, testing.sequential(_body, n, testing.output_spec(_body)))


def test_chunks_under_xla_run_each_iteration_once():
  total = tf.Variable(0)

  def body(i):
    total.assign_add(i + 1)
    return i

  tf.function(lambda: vectorize.pfor(body, 7, parallel_iterations=3), jit_compile=True)()
  assert int(total.numpy()) == sum(range(1, 8))


@pytest.mark.parametrize("jit", [False, True])
def test_gradients_through_chunked_outputs_equal_the_unchunked(jit):
  w = tf.Variable(W)

  def loss(parallel_iterations):
    with tf.GradientTape() as tape:
      rows = vectorize.pfor(lambda i: tf.sin(tf.cast(i + 1, tf.float32) * w), 7,
                            parallel_iterations=parallel_iterations)
      total = tf.reduce_sum(rows * tf.range(7, dtype=tf.float32)[:, None, None])
    return tape.gradient(total, w)

  chunked = tf.function(lambda: loss(3), jit_compile=jit)()
  whole = tf.function(lambda: loss(None), jit_compile=jit)()
  np.testing.assert_allclose(chunked, whole, rtol=1e-5, atol=1e-6)


def test_outputs_are_row_buffers_outside_xla_and_chunk_arrays_under_it():
  shape = tf.TensorShape([2, 3])

  @tf.function
  def places():
    n = tf.constant(4)
    assert isinstance(chunk_outputs.for_output(tf.float32, shape, n, 2, xla=False),
                      chunk_outputs.RowBuffer)
    assert isinstance(chunk_outputs.for_output(tf.float32, tf.TensorShape([None]), n, 2,
                                               xla=False), chunk_outputs.ChunkArray)
    assert isinstance(chunk_outputs.for_output(tf.float32, shape, n, 2, xla=True),
                      chunk_outputs.ChunkArray)
    return 0

  places()
