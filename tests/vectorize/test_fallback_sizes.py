"""The sequential fallback's outputs whose later sizes the graph leaves unknown: one shape in
every iteration stacks; a later axis that differs per iteration is a clear error naming the
op and the user's line (it was TensorFlow's 'Incompatible shapes during merge')."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

REPEATS = tf.constant([3, 1, 2, 1])


def test_a_later_axis_of_per_iteration_size_is_a_clear_error():
  def body(i):
    return tf.repeat(tf.constant([1, 2]), REPEATS[i])
  line = body.__code__.co_firstlineno + 1
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=rf"Tile.*test_fallback_sizes.py:{line}.*axis after the first"):
    vectorize.pfor(body, 4)


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])
def test_a_later_axis_of_one_size_stacks(mode):
  def body(i):
    return tf.ensure_shape(tf.repeat(tf.constant([1, 2]), REPEATS[0] + i * 0), [6])
  testing.assert_allclose(testing.run_pfor(body, 4, mode=mode, fallback=True),
                          testing.sequential(body, 4))


STRIDES = tf.constant([1, 2, 3, 4, 2])
CUBE = tf.reshape(tf.range(60.0), [5, 4, 3])


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])
@pytest.mark.parametrize("n", [0, 1, 5])
@pytest.mark.parametrize("body", [
    lambda i: CUBE[i, 0, ::STRIDES[i]],
    lambda i: CUBE[i, ::STRIDES[i], :],
    lambda i: CUBE[i, ::-STRIDES[i], 1:],
    lambda i: CUBE[i, 1::STRIDES[i], ..., 2],
    lambda i: CUBE[i, ::STRIDES[i], tf.newaxis, 0],
], ids=["vector", "rows", "reversed", "ellipsis_shrink", "newaxis_shrink"])
def test_strided_slice_with_strides_per_iteration_is_ragged(body, mode, n):
  """TensorFlow leaves such a slice's shape (rank included) unknown; the fallback reads the
  rank and the sizes it can from the spec, so the rows of per-iteration count come back
  ragged as tf.ragged.stack gives them (a code-blind finding: it was 'Incompatible shapes
  during merge')."""
  got = testing.pfor_in_mode(body, n, mode, fallback=True)
  assert isinstance(got, tf.RaggedTensor)
  want = tf.ragged.stack([body(tf.constant(i)) for i in range(n)]) if n else None
  assert got.shape[0] == n
  if n:
    assert got.to_list() == want.to_list()


LOGITS = tf.random.stateless_normal([4, 3, 5], seed=[1, 2])
TOKENS = tf.constant([[5, 2, 7, 0], [1, 3, 3, 8], [9, 0, 0, 0], [4, 4, 0, 0]])


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_a_sequential_op_on_a_slice_at_the_index_stacks_dense(mode):
  """`logits[i, :2]` has no static size in the body's graph (the slice's bounds are not
  constants); its batched value has, and the sampler's loop takes its output shape from
  there: a dense `[n, 2, 3]` as the loop's, not a RaggedTensor (nor, under XLA, a refusal)."""
  def body(i):
    return tf.random.stateless_categorical(LOGITS[i, :2], 3, seed=tf.stack([i, 7]))
  fn = lambda: vectorize.pfor(body, 4, fallback_to_while_loop=False)
  got = tf.function(fn, jit_compile=True)() if mode == "xla" else fn()
  assert isinstance(got, tf.Tensor) and got.shape == [4, 2, 3]
  if mode == "eager":
    testing.assert_allclose(got, testing.sequential(body, 4))


def test_equality_of_a_slice_at_the_index_with_a_scalar_converts():
  """`tokens[i, 1:] != 0` (TF's `!=` sets incompatible_shape_error=False): a scalar broadcasts
  with any shape, so the unknown size of the slice does not matter."""
  def body(i):
    return TOKENS[i, 1:] != 0, TOKENS[i, 1:] == TOKENS[0, 1:]
  got = vectorize.pfor(body, 4, fallback_to_while_loop=False)
  for g, w in zip(got, testing.sequential(body, 4)):
    assert isinstance(g, tf.Tensor) and g.shape == [4, 3]
    testing.assert_allclose(g, w)
