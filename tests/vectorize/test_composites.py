"""User composite values (a `tf.experimental.BatchableExtensionType`, a CompositeTensor with
a BatchableTypeSpec) returned by the body or passed as vectorized_map elems: batched as
TensorFlow's pfor batches them, equal to the sequential loop's values stacked."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize

X = tf.reshape(tf.range(24.0), [8, 3])
Y = tf.range(8.0)


class Point(tf.experimental.BatchableExtensionType):
  x: tf.Tensor
  y: tf.Tensor


def _body(i):
  return {"p": Point(x=X[i] * 2.0, y=tf.reduce_sum(X[i]) + Y[i]), "z": X[i]}


def _sequential():
  outs = [_body(tf.constant(i)) for i in range(8)]
  return (tf.stack([o["p"].x for o in outs]), tf.stack([o["p"].y for o in outs]),
          tf.stack([o["z"] for o in outs]))


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_pfor_returns_a_batched_extension_type(mode):
  run = (lambda: vectorize.pfor(_body, 8)) if mode == "eager" else \
      tf.function(lambda: vectorize.pfor(_body, 8))
  out = run()
  assert isinstance(out["p"], Point)
  for actual, expected in zip((out["p"].x, out["p"].y, out["z"]), _sequential()):
    np.testing.assert_allclose(actual, expected)


def test_pfor_extension_type_with_parallel_iterations():
  out = tf.function(lambda: vectorize.pfor(_body, 8, parallel_iterations=3))()
  np.testing.assert_allclose(out["p"].x, _sequential()[0])


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_vectorized_map_takes_an_extension_type(mode):
  points = Point(x=X, y=Y)
  fn = lambda p: p.x * p.y + 1.0
  run = (lambda: vectorize.vectorized_map(fn, points)) if mode == "eager" else \
      tf.function(lambda: vectorize.vectorized_map(fn, points))
  expected = tf.stack([fn(Point(x=X[i], y=Y[i])) for i in range(8)])
  np.testing.assert_allclose(run(), expected)


def test_indexed_slices_with_scalar_indices_still_return_dense():
  """An IndexedSlices whose TypeSpec cannot even be built (scalar indices) is no user
  composite: it is densified as before, as the loop's tf.convert_to_tensor gives."""
  def body(i):
    return tf.IndexedSlices(indices=i, values=tf.reshape(tf.cast(i, tf.float32), [1]),
                            dense_shape=[3, 1])

  expected = tf.stack([tf.convert_to_tensor(body(tf.constant(i))) for i in range(2)])
  np.testing.assert_allclose(tf.function(lambda: vectorize.pfor(body, 2))(), expected)
