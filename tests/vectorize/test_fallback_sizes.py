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
