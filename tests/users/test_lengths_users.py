"""Per-example lengths made by TensorArrays, growing loops, repeat, fill: the loop's tf.ragged.stack."""
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.users._util import assert_same, loop

LENS = tf.constant([3, 0, 2, 1])
LENS_POS = tf.constant([3, 1, 2, 1])


def test_autograph_tensorarray_per_example_length():
  @tf.function
  def fn(i):
    ta = tf.TensorArray(tf.int32, size=0, dynamic_size=True)
    for k in tf.range(LENS[i]):
      ta = ta.write(k, k * 10)
    return ta.stack()
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


def test_tensorarray_size_per_example():
  def fn(i):
    ta = tf.TensorArray(tf.float32, size=LENS[i], element_shape=[])
    ta = tf.while_loop(lambda k, ta: k < LENS[i],
                       lambda k, ta: (k + 1, ta.write(k, tf.cast(k, tf.float32))), (0, ta))[1]
    return ta.stack()
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


def test_tensorarray_per_example_length_sum_is_right():
  """Reduced to a dense value the padded form happens to be right."""
  @tf.function
  def fn(i):
    ta = tf.TensorArray(tf.int32, size=0, dynamic_size=True)
    for k in tf.range(LENS[i]):
      ta = ta.write(k, k * 10 + 1)
    return tf.reduce_sum(ta.stack()), ta.size()
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


def test_while_loop_growing_concat():
  def fn(i):
    return tf.while_loop(lambda k, a: k < LENS_POS[i],
                         lambda k, a: (k + 1, tf.concat([a, [tf.cast(k, tf.float32)]], 0)),
                         (0, tf.zeros([0])),
                         shape_invariants=(tf.TensorShape([]), tf.TensorShape([None])))[1]
  assert_same(vectorize.pfor(lambda i: tf.reduce_sum(fn(i)), 4), loop(lambda i: tf.reduce_sum(fn(i)), 4))


@pytest.mark.xfail(strict=True, reason="tf.repeat with per-example repeats: its Tile falls back and stops with a clear error (a later axis of per-iteration size), where the loop gives ragged rows")
def test_repeat_per_example():
  fn = lambda i: tf.repeat(tf.constant([1, 2]), LENS_POS[i])
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


@pytest.mark.xfail(strict=True, reason="LOUD: TensorArray.concat of per-example-size elements: ConversionError 'TensorListSetItem ... cannot run in a sequential loop'")
def test_tensorarray_concat_per_example():
  def fn(i):
    ta = tf.TensorArray(tf.float32, size=2, infer_shape=False)
    ta = ta.write(0, tf.ones([LENS[i]]))
    ta = ta.write(1, tf.zeros([1]))
    return ta.concat()
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


@pytest.mark.xfail(strict=True, reason="LOUD: tf.map_fn inside the body over a per-example-length range: ConversionError 'TensorListReserve ... cannot run in a sequential loop'")
def test_map_fn_inside_body_over_ragged():
  fn = lambda i: tf.map_fn(lambda x: x * 2, tf.range(LENS[i]))
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


def test_fill_per_example():
  fn = lambda i: tf.fill([LENS[i]], 1.5)
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


def test_cond_branches_of_different_lengths():
  fn = lambda i: tf.cond(i > 1, lambda: tf.range(2), lambda: tf.range(3))
  assert_same(vectorize.pfor(fn, 4), loop(fn, 4))


def test_zeros_2d_per_example_values():
  fn = lambda i: tf.zeros([LENS[i], 2]) + tf.cast(i, tf.float32)
  got = vectorize.pfor(fn, 4)
  assert isinstance(got, tf.RaggedTensor)
  assert got.to_list() == loop(fn, 4).to_list()
