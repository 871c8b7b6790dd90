"""Grouped convolutions (images with a multiple of the filter's input channels, as Keras
`Conv2D(groups=g)` makes): a filter the same in every iteration folds and keeps its groups;
a per-iteration filter or filter gradient is refused (packing iterations into channels would
mix the groups), so it falls back to the loop, and with the fallback off the error names it."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

RNG = np.random.default_rng(0)
X = tf.constant(RNG.standard_normal([3, 1, 6, 6, 4]), tf.float32)     # 4 channels
F = tf.constant(RNG.standard_normal([3, 3, 3, 2, 6]), tf.float32)     # 2 groups of 2
DY = tf.constant(RNG.standard_normal([3, 1, 4, 4, 6]), tf.float32)


def _forward_invariant_filter(i):
  return tf.nn.conv2d(X[i], F[0], 1, "VALID")


def _forward_stacked_filter(i):
  return tf.nn.conv2d(X[0], F[i], 1, "VALID")


def _input_gradient_stacked_filter(i):
  return tf.compat.v1.nn.conv2d_backprop_input([1, 6, 6, 4], F[i], DY[i], [1, 1, 1, 1],
                                               "VALID")


def _filter_gradient_both_stacked(i):
  return tf.compat.v1.nn.conv2d_backprop_filter(X[i], [3, 3, 2, 6], DY[i], [1, 1, 1, 1],
                                                "VALID")


def _per_example_gradient(i):
  with tf.GradientTape() as tape:
    tape.watch(F)
    loss = tf.reduce_sum(tf.nn.conv2d(X[i], F[1], 1, "VALID") ** 2)
  return tape.gradient(loss, F)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_a_filter_the_same_in_every_iteration_converts(mode):
  testing.assert_allclose(testing.run_pfor(_forward_invariant_filter, 3, mode=mode),
                          testing.sequential(_forward_invariant_filter, 3), 1e-4)


@pytest.mark.parametrize("body", [_forward_stacked_filter, _input_gradient_stacked_filter,
                                  _filter_gradient_both_stacked, _per_example_gradient])
def test_per_iteration_filters_fall_back_to_the_loop(body):
  testing.assert_allclose(testing.run_pfor(body, 3, fallback=True),
                          testing.sequential(body, 3), 1e-4)
  with pytest.raises(vectorize.ConversionError, match="grouped convolution"):
    testing.run_pfor(body, 3, fallback=False)
