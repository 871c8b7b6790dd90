"""kinds: every Value tensor has one kind, which checks its invariants, names its registry
table and packs a body output as the loop's result would be."""

import numpy as np
import pytest
import tensorflow as tf

from vectorize import kinds
from vectorize import lists
from vectorize import ragged
from vectorize import registry
from vectorize.values import Value


def _rows():
  return ragged.ragged(tf.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), tf.constant([2, 0, 4]))


def test_each_kind_holds_its_own_tensor_and_names_its_table():
  dense = lists.DenseList(tf.zeros([3, 2, 4]), tf.constant([1, 2, 0]))
  view = ragged.take_iterations(_rows(), tf.constant([2, 0]), view=True)
  multi = ragged.multi_axis(tf.zeros([6, 3]), tf.constant([[1, 2], [2, 2]]))
  cases = [(Value(tf.zeros([3, 2]), True), kinds.TENSOR, registry.TENSOR),
           (Value(dense, True), kinds.LIST, registry.TENSOR),
           (_rows(), kinds.RAGGED, registry.RAGGED),
           (multi, kinds.MULTI_AXIS, registry.MULTI_AXIS),
           (view, kinds.VIEW, registry.RAGGED)]
  for value, kind, table in cases:
    assert kinds.of(value) is kind
    assert kind.table == table
    assert kind.problems(value) == [], kind


def test_broken_invariants_are_named():
  assert kinds.TENSOR.problems(Value(tf.constant(1.0), True))
  bad_lengths = Value(ragged.RaggedRows(tf.zeros([3]), tf.constant([1, 2], tf.int64)), True)
  assert "row lengths" in kinds.RAGGED.problems(bad_lengths)[0]
  bad_list = Value(lists.DenseList(tf.zeros([3]), tf.constant([1, 2, 0])), True)
  assert "buffer" in kinds.LIST.problems(bad_list)[0]


def test_an_op_goes_to_the_table_of_its_most_specific_input():
  multi = ragged.multi_axis(tf.zeros([6, 3]), tf.constant([[1, 2], [2, 2]]))
  plain = Value(tf.zeros([2, 3]), True)
  assert kinds.dispatch_kind([plain, Value(tf.zeros([3]), False)]) == registry.TENSOR
  assert kinds.dispatch_kind([plain, _rows()]) == registry.RAGGED
  assert kinds.dispatch_kind([_rows(), multi, plain]) == registry.MULTI_AXIS
  assert kinds.dispatch_kind([]) == registry.TENSOR


def test_packing_gives_what_the_loop_stacks():
  expected = tf.ragged.stack([tf.constant([1.0, 2.0]), tf.zeros([0]),
                              tf.constant([3.0, 4.0, 5.0, 6.0])])
  packed = kinds.of(_rows()).pack(_rows(), 3)
  assert packed.row_splits.dtype == tf.int64
  assert packed.to_list() == expected.to_list()
  view = ragged.take_iterations(_rows(), tf.constant([2, 0]), view=True)
  assert kinds.VIEW.pack(view, 2).to_list() == [[3.0, 4.0, 5.0, 6.0], [1.0, 2.0]]
  images = [tf.reshape(tf.range(2.0), [1, 2]), tf.reshape(tf.range(4.0), [2, 2])]
  multi = ragged.multi_axis(tf.concat([tf.reshape(x, [-1]) for x in images], 0)[:, None],
                            tf.constant([[1, 2], [2, 2]]))
  packed = kinds.MULTI_AXIS.pack(multi, 2)
  assert packed.ragged_rank == 2
  assert packed.to_list() == [[[[0.0], [1.0]]], [[[0.0], [1.0]], [[2.0], [3.0]]]]
  tiled = tf.function(lambda: kinds.TENSOR.pack(Value(tf.constant([1, 2]), False), 3))()
  np.testing.assert_array_equal(tiled, [[1, 2]] * 3)


@pytest.mark.parametrize("kind", kinds.KINDS, ids=lambda k: k.name)
def test_every_kind_has_a_name_and_a_registry_table(kind):
  assert kind.name and kind.table in registry.KINDS
