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


_FEATURES = tf.constant([[-1.0, 2.0, 0.0, 3.0, -0.5]])
_RELU_COTANGENTS = tf.constant([[[np.inf, 1.0, -2.0, np.nan, -4.0]],
                                [[1.0, -np.inf, 5.0, -6.0, 7.0]],
                                [[-1.0, 2.0, np.inf, 4.0, -np.inf]]])


def _relu_gradient(i):
  return tf.raw_ops.ReluGrad(gradients=_RELU_COTANGENTS[i], features=_FEATURES)


@pytest.mark.parametrize("mode", ["function", "eager", "xla", "dynamic"])
def test_relu_gradient_of_infinite_cotangents_equals_the_loop(mode):
  """The kernel multiplies by the mask: an infinite cotangent where features <= 0 is NaN."""
  testing.check_against_loop(_relu_gradient, 3, mode=mode)


@pytest.mark.unchecked   # counts the ops pfor emits (or the prints): the check adds its own
def test_relu_gradient_alone_multiplies_by_a_mask():
  graph = tf.function(lambda: vectorize.pfor(_relu_gradient, 3)).get_concrete_function().graph
  ops = testing.all_ops(graph)
  assert "ReluGrad" not in [op.type for op in ops]
  masks = [op for op in ops if op.type == "Greater"]
  assert [c.type for m in masks for c in m.outputs[0].consumers()] == ["Cast"]
  assert [c.type for c in masks[0].outputs[0].consumers()[0].outputs[0].consumers()] == ["Mul"]
