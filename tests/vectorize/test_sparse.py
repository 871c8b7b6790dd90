"""SparseTensors in and out of the loop body, against the loop, with the fallback off.

A body's SparseTensor output comes back as one SparseTensor with a leading loop axis, equal
to `tf.sparse.concat` of the iterations' values (each with a new first axis, the dense
shape the largest over the iterations). `vectorized_map` over SparseTensor elems gives fn
each row as a SparseTensor.
"""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.converters.test_ragged import LIMS, N, X, _run

STACKED = tf.sparse.from_dense(tf.constant([[[1., 0.], [0., 2.]], [[0., 0.], [0., 0.]],
                                            [[3., 4.], [5., 0.]]]))


def _sparse_stack(items, rank):
  if not items:
    return None
  return tf.sparse.concat(0, [tf.sparse.expand_dims(s, 0) for s in items],
                          expand_nonconcat_dims=True)


def _assert_same_sparse(actual, expected, n, rank):
  assert isinstance(actual, tf.SparseTensor)
  if expected is None:
    assert actual.indices.shape[0] == 0 and actual.dense_shape.numpy()[0] == 0
    assert actual.dense_shape.shape == [rank + 1]
    return
  np.testing.assert_array_equal(actual.indices, expected.indices)
  np.testing.assert_array_equal(actual.values, expected.values)
  np.testing.assert_array_equal(actual.dense_shape, expected.dense_shape)
  assert actual.dense_shape.numpy()[0] == n


RETURNS_SPARSE = {
    "from_dense": (lambda i: tf.sparse.from_dense(X[i]), 1),
    "own_dense_shape": (lambda i: tf.sparse.from_dense(tf.range(LIMS[i])), 1),
    "eye_scaled": (lambda i: tf.sparse.map_values(
        tf.multiply, tf.sparse.eye(3), tf.cast(i, tf.float32)), 2),
    "invariant": (lambda i: tf.sparse.eye(2), 2),
}


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])
@pytest.mark.parametrize("n", [N, 0])
@pytest.mark.parametrize("name", sorted(RETURNS_SPARSE))
def test_body_returning_a_sparse_tensor_equals_sparse_concat(name, n, mode):
  body, rank = RETURNS_SPARSE[name]
  expected = _sparse_stack([body(tf.constant(i)) for i in range(n)], rank)
  _assert_same_sparse(_run(body, n, mode), expected, n, rank)


def test_sparse_tensors_nested_beside_dense_ones():
  body = lambda i: {"sparse": tf.sparse.from_dense(X[i]), "dense": X[i] * 2.}
  actual = vectorize.pfor(body, N, fallback_to_while_loop=False)
  expected = _sparse_stack([tf.sparse.from_dense(X[i]) for i in range(N)], 1)
  _assert_same_sparse(actual["sparse"], expected, N, 1)
  np.testing.assert_allclose(actual["dense"], X * 2.)


def _row(sparse, i):
  """Row i of a SparseTensor, as the loop reads it."""
  shape = sparse.dense_shape.numpy()
  piece = tf.sparse.slice(sparse, [i] + [0] * (len(shape) - 1), [1] + list(shape[1:]))
  return tf.sparse.reshape(piece, shape[1:])


MAPPED = {
    "to_dense": lambda s: tf.sparse.to_dense(s),
    "to_dense_scaled": lambda s: tf.sparse.to_dense(s, default_value=-1.) * 2.,
    "reduce_sum": lambda s: tf.sparse.reduce_sum(s),
    "reduce_sum_axis": lambda s: tf.sparse.reduce_sum(s, 1),
    "reduce_sum_keepdims": lambda s: tf.sparse.reduce_sum(s, -1, keepdims=True),
    "row_itself": lambda s: s,
    "values_sum": lambda s: tf.reduce_sum(s.values),
}


@pytest.mark.parametrize("eager", [True, False])
@pytest.mark.parametrize("name", sorted(MAPPED))
def test_vectorized_map_of_sparse_elems(name, eager):
  fn = MAPPED[name]
  mapped = lambda e: vectorize.vectorized_map(fn, e, fallback_to_while_loop=False)
  actual = mapped(STACKED) if eager else tf.function(mapped)(STACKED)
  items = [fn(_row(STACKED, i)) for i in range(3)]
  if isinstance(items[0], tf.SparseTensor):
    _assert_same_sparse(actual, _sparse_stack(items, 2), 3, 2)
  else:
    np.testing.assert_allclose(actual, np.stack(items))


def test_vectorized_map_of_sparse_and_dense_elems():
  fn = lambda e: tf.sparse.reduce_sum(e[0]) + e[1]
  actual = vectorize.vectorized_map(fn, (STACKED, tf.constant([1., 2., 3.])),
                                    fallback_to_while_loop=False)
  np.testing.assert_allclose(actual, [4., 2., 15.])


def test_vectorized_map_refuses_sparse_elems_of_rank_one():
  with pytest.raises(ValueError, match="rank 2 or more"):
    vectorize.vectorized_map(lambda s: s, tf.sparse.from_dense(tf.constant([1., 0.])))
