"""converters/reductions.py: segment reductions whose segment count (last id + 1) differs per
iteration (sorted segment ids; fuzz findings)."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize

X = tf.constant(np.random.default_rng(3).standard_normal([4, 3, 2]), tf.float32)
# Sorted segment ids whose last id differs per iteration: 2, 3, 1 and 3 segments.
IDS = tf.constant([[0, 0, 1], [0, 1, 2], [0, 0, 0], [1, 1, 2]])
OPS = [tf.math.segment_sum, tf.math.segment_max, tf.math.segment_min, tf.math.segment_prod,
       tf.math.segment_mean]


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.__name__)
def test_sorted_segments_whose_count_differs_per_iteration(op):
  """Fuzz seeds 1100017 (segment_max returned; dense where the loop's sizes differ) and
  1100036 (reduce_max of a segment_prod: wrong values)."""
  body = lambda i: tf.reduce_max(op(X[i], IDS[i]), 0)
  expected = np.stack([body(tf.constant(i)) for i in range(4)])
  actual = vectorize.pfor(body, 4, fallback_to_while_loop=False)
  np.testing.assert_allclose(actual, expected, rtol=1e-5)


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.__name__)
def test_sorted_segments_returned_are_ragged(op):
  """The result itself has a size of its own in every iteration: tf.ragged.stack of the loop."""
  body = lambda i: op(X[i], IDS[i])
  expected = tf.ragged.stack([body(tf.constant(i)) for i in range(4)])
  actual = vectorize.pfor(body, 4, fallback_to_while_loop=False)
  assert isinstance(actual, tf.RaggedTensor)
  np.testing.assert_array_equal(actual.row_lengths(), [2, 3, 1, 3])
  for got, want in zip(actual.to_list(), expected.to_list()):
    np.testing.assert_allclose(np.array(got).reshape([-1, 2]), np.array(want).reshape([-1, 2]),
                               rtol=1e-5)


def test_sparse_segment_sum_whose_count_differs_per_iteration():
  indices = tf.constant([[0, 1, 2], [2, 1, 0], [1, 1, 1], [0, 2, 2]])
  body = lambda i: tf.reduce_min(tf.sparse.segment_sum(X[i], indices[i], IDS[i]), 0)
  expected = np.stack([body(tf.constant(i)) for i in range(4)])
  actual = vectorize.pfor(body, 4, fallback_to_while_loop=False)
  np.testing.assert_allclose(actual, expected, rtol=1e-5)


def test_sorted_segments_with_one_count_stay_dense_in_a_function():
  ids = tf.constant([[0, 0, 1], [0, 1, 1], [0, 0, 1], [1, 1, 1]])
  body = lambda i: tf.math.segment_max(X[i], ids[i])
  expected = np.stack([body(tf.constant(i)) for i in range(4)])
  actual = tf.function(lambda: vectorize.pfor(body, 4, fallback_to_while_loop=False))()
  np.testing.assert_allclose(actual.to_tensor() if isinstance(actual, tf.RaggedTensor)
                             else actual, expected, rtol=1e-5)


_INF = np.inf
_EXTREMES = tf.constant([[_INF, _INF, 1.0, -_INF], [-_INF, -_INF, _INF, _INF],
                         [2.0, _INF, -_INF, 0.5]], tf.float32)
_LENGTHS = tf.constant([2, 4, 3])


def _sorted_extremes(i):
  ids = tf.constant([0, 0, 1, 1])
  return tf.math.segment_min(_EXTREMES[i], ids), tf.math.segment_max(_EXTREMES[i], ids)


def _ragged_extremes(i):
  row = _EXTREMES[i, :_LENGTHS[i]]
  return tf.reduce_min(row), tf.reduce_max(row), tf.argmax(row), tf.argmin(row)


def _stacked_ids_extremes(i):
  ids = tf.sort(tf.constant([[1, 1, 2, 2], [0, 0, 0, 1], [0, 1, 1, 1]])[i])
  return tf.math.segment_min(tf.constant([_INF, _INF, -_INF, -_INF]), ids)


def _as_list(t):
  return t.to_list() if isinstance(t, tf.RaggedTensor) else t.numpy().tolist()


@pytest.mark.parametrize("body,jit", [(_sorted_extremes, False), (_sorted_extremes, True),
                                      (_ragged_extremes, False), (_stacked_ids_extremes, False)],
                         ids=["sorted", "sorted_xla", "ragged_rows", "stacked_ids"])
def test_segments_of_only_infinities(body, jit):
  """A segment (or ragged row) of only inf has min inf, as the loop's kernels give; the
  unsorted kernels that compute it vectorized gave the largest float (fuzz seed 3101902)."""
  want = [body(tf.constant(i)) for i in range(3)]
  got = tf.function(lambda: vectorize.pfor(body, 3, fallback_to_while_loop=False),
                    jit_compile=jit, autograph=False)()
  for k, g in enumerate(tf.nest.flatten(got)):
    rows = [tf.nest.flatten(w)[k] for w in want]
    stacked = tf.ragged.stack(rows) if isinstance(g, tf.RaggedTensor) else tf.stack(rows)
    assert _as_list(g) == _as_list(stacked), k
