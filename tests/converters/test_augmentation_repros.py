"""What kept Keras augmentation under vectorized_map slow, fixed and kept from coming back.

Keras RandomFlip picks each image or its flip with `tf.where(flag, flipped, image)`, a
condition of one element per image. Converted, that is SelectV2 of an `[n, 1, 1, 1, 1]`
condition broadcast against `[n, 1, 64, 64, 3]` images: TF's broadcasting SelectV2 took
16 ms at n = 128 where Select with an `[n]` condition (it picks rows) took 0.8 ms and the
same SelectV2 on a rank-2 view 2.4 ms (2-core CPU, load 0.7). Two such selects were 16 of
the 37 ms of the whole augmentation.
"""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

_IMAGES = tf.constant(np.random.default_rng(0).uniform(0, 1, [4, 1, 8, 8, 3]), tf.float32)
_FLAGS = tf.constant([[[[True]]], [[[False]]], [[[True]]], [[[False]]]])


def _body(i):
  return tf.where(_FLAGS[i], tf.reverse(_IMAGES[i], [2]), _IMAGES[i])


def test_a_select_with_one_condition_per_iteration_equals_the_loop():
  testing.assert_allclose(testing.run_pfor(_body, 4), testing.sequential(_body, 4))


def test_a_select_with_one_condition_per_iteration_picks_rows():
  fn = tf.function(lambda: vectorize.pfor(_body, 4, fallback_to_while_loop=False))
  graph = fn.get_concrete_function().graph
  image_selects = [op for op in graph.get_operations()
                   if op.type in ("Select", "SelectV2") and op.outputs[0].shape.rank == 5]
  assert [(op.type, op.inputs[0].shape.rank) for op in image_selects] == [("Select", 1)]
