"""Emitted graphs must give the loop's answer after Grappler rewrites them.

A Sum over no axes (`reduce_sum` of a per-iteration scalar) inside a branch taken by some
iterations, with n known only at run time, came back from Grappler (constant folding with
arithmetic and dependency optimization) as an empty float32 tensor: a silent wrong shape
and dtype. Reductions over no axes now emit nothing.
"""

import numpy as np
import pytest
import tensorflow as tf

from tests import testing

X = tf.constant([1, 3, 0, 2], tf.int32)


def _cond_sum(i):
  x = tf.gather(X, i)
  return tf.cond(tf.equal(tf.math.floormod(i, 2), 0), lambda: x + tf.reduce_sum(x), lambda: x)


def _switch_case_sum(i):
  x = tf.cast(tf.gather(X, i), tf.float32)
  return tf.switch_case(tf.math.floormod(i, 2),
                        [lambda: x + tf.reduce_sum(tf.cast(x, tf.float32)), lambda: x])


def _reductions_of_a_scalar(i):
  x = tf.cast(tf.gather(X, i), tf.float32)
  return tf.cond(x > 1.0, lambda: tf.reduce_max(x) + tf.reduce_mean(x) * tf.reduce_prod(x),
                 lambda: tf.reduce_min(x))


@pytest.mark.parametrize("mode", testing.MODES)
@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("body", [_cond_sum, _switch_case_sum, _reductions_of_a_scalar])
def test_reduction_over_no_axes_in_a_branch(body, n, mode):
  testing.assert_allclose(testing.run_pfor(body, n, mode), testing.sequential(body, n))
