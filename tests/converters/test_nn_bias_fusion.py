"""converters/nn.py: an invariant bias added to a folded convolution's or matmul's output is
added before the output is split back to `[n, b, ...]`, next to its producer (which Grappler
fuses with it); the values equal the loop."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

RNG = np.random.default_rng(5)
IMAGES = tf.constant(RNG.standard_normal([4, 2, 6, 6, 3]), tf.float32)   # [n, b, h, w, c]
FILTER = tf.constant(RNG.standard_normal([3, 3, 3, 5]), tf.float32)
WEIGHTS = tf.constant(RNG.standard_normal([3, 5]), tf.float32)
BIAS = tf.constant(RNG.standard_normal([5]), tf.float32)


def _conv_bias_relu(i):
  return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(tf.gather(IMAGES, i), FILTER, 1, "SAME"),
                                   BIAS))


def _matmul_bias(i):
  return tf.nn.bias_add(tf.matmul(tf.gather(IMAGES, i)[:, 0, 0], WEIGHTS), BIAS)


BODIES = {"conv": (_conv_bias_relu, "Conv2D"), "matmul": (_matmul_bias, "MatMul")}


@pytest.mark.parametrize("name", sorted(BODIES))
@pytest.mark.parametrize("mode", testing.MODES)
def test_bias_after_a_folded_op_equals_the_loop(name, mode):
  testing.check_against_loop(BODIES[name][0], 4, mode=mode)


@pytest.mark.unchecked   # counts the ops pfor emits (or the prints): the check adds its own
@pytest.mark.parametrize("name", sorted(BODIES))
def test_bias_is_added_next_to_the_folded_op(name):
  body, producer = BODIES[name]
  graph = tf.function(lambda: vectorize.pfor(body, 4, fallback_to_while_loop=False)
                      ).get_concrete_function().graph
  biases = [op for op in testing.all_ops(graph) if op.type == "BiasAdd"]
  assert [op.inputs[0].op.type for op in biases] == [producer]
