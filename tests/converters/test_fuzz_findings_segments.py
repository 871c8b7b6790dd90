"""Fuzz findings in segment reductions (converters/reductions.py, not ours to edit): strict
xfails until the owner fixes them; the fix makes them pass, then remove the mark."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize

X = tf.constant(np.random.default_rng(3).standard_normal([4, 3, 2]), tf.float32)
# Sorted segment ids whose last id differs per iteration: 2, 3, 1 and 3 segments.
IDS = tf.constant([[0, 0, 1], [0, 1, 2], [0, 0, 0], [1, 1, 2]])
OPS = [tf.math.segment_sum, tf.math.segment_max, tf.math.segment_min, tf.math.segment_prod,
       tf.math.segment_mean]


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="converters/reductions.py "
                   "_sorted_num_segments: stacked sorted ids take the largest last id over all "
                   "iterations, so every iteration gets as many segments as the longest (zero "
                   "rows appended), a silent wrong answer; per-iteration counts should give a "
                   "ragged value (ragged.ragged(values, last id + 1))")
@pytest.mark.parametrize("op", OPS, ids=lambda op: op.__name__)
def test_sorted_segments_whose_count_differs_per_iteration(op):
  """Fuzz seeds 1100017 (segment_max returned; dense where the loop's sizes differ) and
  1100036 (reduce_max of a segment_prod: wrong values)."""
  body = lambda i: tf.reduce_max(op(X[i], IDS[i]), 0)
  expected = np.stack([body(tf.constant(i)) for i in range(4)])
  actual = vectorize.pfor(body, 4, fallback_to_while_loop=False)
  np.testing.assert_allclose(actual, expected, rtol=1e-5)
