"""converters/backprop.py: a max pool's routing then the relu before it, with invariant
forward values and stacked cotangents (the jacobian pattern), apply one combined mask; the
values equal the loop, an infinite cotangent at a masked position included."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

_X = tf.constant(np.random.default_rng(0).standard_normal([1, 4, 6, 3]).astype(np.float32))
_COTANGENTS = np.random.default_rng(1).standard_normal([5, 1, 2, 3, 3]).astype(np.float32)
_COTANGENTS[2, 0, 1, 1, 0] = np.inf   # in a window whose maximum may be a negative value
_COTANGENTS = tf.constant(_COTANGENTS)


def _relu_pool_gradient(i):
  with tf.GradientTape() as tape:
    tape.watch(_X)
    pooled = tf.nn.max_pool2d(tf.nn.relu(_X), 2, 2, "VALID")
  return tape.gradient(pooled, _X, output_gradients=_COTANGENTS[i])


@pytest.mark.parametrize("mode", ["function", "eager", "xla", "dynamic"])
def test_relu_then_max_pool_gradient_equals_the_loop(mode):
  testing.check_against_loop(_relu_pool_gradient, 5, mode=mode)


def test_masks_combine_into_one_select():
  graph = tf.function(lambda: vectorize.pfor(_relu_pool_gradient, 5)
                      ).get_concrete_function().graph
  assert "LogicalAnd" in testing.all_op_types(graph)
