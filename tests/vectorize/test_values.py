"""values: Value, stack, the shape toolkit (shape vectors, loop length, fold and split of the
loop axis), rank alignment, axis shifts and lane selection."""

import numpy as np
import pytest
import tensorflow as tf

from vectorize import lists
from vectorize import values
from vectorize.context import Context
from vectorize.values import invariant, stacked


def _in_graph(fn, *args):
  """`fn(*args)` run in a tf.function (the helpers emit graph ops)."""
  return tf.function(fn)(*args)


def test_stack_tiles_an_invariant_value_and_passes_a_stacked_one():
  x = tf.constant([1.0, 2.0])
  np.testing.assert_array_equal(_in_graph(lambda: values.stack(invariant(x), 3)),
                                [[1, 2]] * 3)
  s = tf.zeros([3, 2])
  assert values.stack(stacked(s), 3) is s


def test_stack_takes_a_run_time_n_and_n_zero():
  f = tf.function(lambda n: values.stack(invariant(tf.constant([1, 2])), n))
  assert f(tf.constant(0)).shape == (0, 2)
  np.testing.assert_array_equal(f(tf.constant(2)), [[1, 2], [1, 2]])


def test_shape_vector_is_a_constant_when_every_dim_is_known():

  @tf.function
  def f():
    v = values.shape_vector([2, np.int64(3)])
    assert tf.get_static_value(v).tolist() == [2, 3] and v.dtype == tf.int32
    return v

  f()


def test_shape_vector_packs_run_time_dims_in_the_asked_dtype():

  @tf.function
  def f(d):
    return values.shape_vector([2, d], tf.int64)

  out = f(tf.constant(5))
  assert out.dtype == tf.int64 and out.numpy().tolist() == [2, 5]


def test_product_stays_an_int_for_ints_and_multiplies_tensors():
  assert values.product([2, 3, 4]) == 24 and values.product([]) == 1
  assert int(values.product([2, tf.constant(5)])) == 10


def test_loop_length_is_the_static_n_when_known_else_the_tensor():
  n = tf.constant(4)
  assert values.loop_length(Context(n=n, indices=tf.range(4), static_n=4)) == 4
  assert values.loop_length(Context(n=n, indices=tf.range(4), static_n=0)) == 0
  assert values.loop_length(Context(n=n, indices=tf.range(4))) is n


def test_prepend_loop_length_to_a_numpy_shape_is_a_constant():

  @tf.function
  def f():
    out = values.prepend_loop_length(np.array([2, 3], np.int32), tf.constant(5), static_n=5)
    assert tf.get_static_value(out).tolist() == [5, 2, 3]
    return out

  f()


def test_prepend_loop_length_with_a_run_time_n():
  f = tf.function(lambda n: values.prepend_loop_length(tf.constant([2, 3]), n))
  assert f(tf.constant(0)).numpy().tolist() == [0, 2, 3]


@pytest.mark.parametrize("n", [0, 3])
def test_merge_then_split_leading_is_the_identity(n):
  x = tf.reshape(tf.range(n * 2 * 5, dtype=tf.float32), [n, 2, 5])
  merged = _in_graph(values.merge_leading, x)
  assert merged.shape == (n * 2, 5)
  np.testing.assert_array_equal(_in_graph(lambda m: values.split_leading(m, n, 2), merged), x)


def test_merge_leading_of_a_run_time_rank():
  f = tf.function(values.merge_leading,
                  input_signature=[tf.TensorSpec(None, tf.float32)])
  assert f(tf.zeros([3, 2, 4])).shape == (6, 4)


def test_align_ranks_pads_lower_rank_stacked_values_after_the_loop_axis():
  a, b, c = stacked(tf.zeros([3, 5])), stacked(tf.zeros([3, 4, 5])), invariant(tf.zeros([5]))
  out = _in_graph(lambda: values.align_ranks([a, b, c]))
  assert [t.shape.as_list() for t in out] == [[3, 1, 5], [3, 4, 5], [5]]


def test_align_ranks_with_a_rank_known_only_at_run_time():

  @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
  def f(x):
    return values.align_ranks([stacked(tf.zeros([3])), stacked(x)])[0]

  assert f(tf.zeros([3, 2, 2])).shape == (3, 1, 1)


@pytest.mark.parametrize("axis,expected", [(0, 1), (2, 3), (-1, -1)])
def test_shift_axis_moves_non_negative_axes_past_the_loop_axis(axis, expected):
  assert values.shift_axis(axis) == expected
  assert int(_in_graph(lambda: values.shift_axis(tf.constant(axis)))) == expected


def test_shift_axis_of_a_run_time_axis():
  f = tf.function(values.shift_axis, input_signature=[tf.TensorSpec([], tf.int32)])
  assert int(f(tf.constant(1))) == 2 and int(f(tf.constant(-2))) == -2


def test_select_lanes_picks_rows_by_mask():
  mask = tf.constant([True, False, True])
  out = _in_graph(lambda: values.select_lanes(mask, tf.ones([3, 2]), tf.zeros([3, 2])))
  np.testing.assert_array_equal(out, [[1, 1], [0, 0], [1, 1]])


def test_select_lanes_of_dense_lists_of_different_capacities():
  taken = lists.DenseList(tf.ones([2, 1, 3]), tf.constant([1, 1]))
  other = lists.DenseList(tf.zeros([2, 2, 3]), tf.constant([2, 0]))
  out = _in_graph(lambda: values.select_lanes(tf.constant([True, False]), taken, other))
  assert out.buffer.shape == (2, 2, 3)
  np.testing.assert_array_equal(out.lengths, [1, 0])
  np.testing.assert_array_equal(out.buffer[0, 0], [1, 1, 1])


def test_rank_of_an_unknown_rank_tensor_is_unvectorizable():

  @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
  def f(x):
    with pytest.raises(values.Unvectorizable, match="unknown rank"):
      values.rank(x)
    return x

  f(tf.zeros([1]))


def test_per_iteration_shape_drops_the_loop_axis_of_a_stacked_value_only():
  x = tf.zeros([3, 4, 5])
  np.testing.assert_array_equal(_in_graph(lambda: values.per_iteration_shape(stacked(x))),
                                [4, 5])
  shape = _in_graph(lambda: values.per_iteration_shape(invariant(x), tf.int64))
  assert shape.dtype == tf.int64 and shape.numpy().tolist() == [3, 4, 5]


def test_max_or_zero_is_zero_for_no_entries_where_reduce_max_is_the_lowest_value():
  f = tf.function(lambda x: values.max_or_zero(x),
                  input_signature=[tf.TensorSpec([None, None], tf.int64)])
  assert f(tf.zeros([0, 2], tf.int64)).numpy() == 0
  assert f(tf.constant([[3, 7], [5, 1]], tf.int64)).numpy() == 7
  assert f(tf.constant([[-3]], tf.int64)).numpy() == 0


@pytest.mark.parametrize("n", [0, 3])
def test_offset_by_iteration_moves_iteration_i_by_i_steps(n):
  ids = np.arange(n * 4, dtype=np.int64).reshape([n, 2, 2]) % 3
  out = _in_graph(lambda: values.offset_by_iteration(stacked(tf.constant(ids)), 3, n))
  np.testing.assert_array_equal(out, ids + 3 * np.arange(n)[:, None, None])


def test_offset_by_iteration_of_a_run_time_rank_and_n():
  f = tf.function(lambda ids, n: values.offset_by_iteration(stacked(ids), tf.constant(5), n),
                  input_signature=[tf.TensorSpec(None, tf.int32), tf.TensorSpec([], tf.int32)])
  np.testing.assert_array_equal(f(tf.constant([[1], [2]]), tf.constant(2)), [[1], [7]])


def test_offset_by_iteration_broadcasts_invariant_ids():
  out = _in_graph(lambda: values.offset_by_iteration(invariant(tf.constant([0, 2])), 3, 2))
  np.testing.assert_array_equal(out, [[0, 2], [3, 5]])


def test_expand_after_loop_axis_inserts_unit_dims_with_one_op_where_shapes_are_known():
  x = tf.reshape(tf.range(6.0), [3, 2])
  types = []

  def expand():
    out = values.expand_after_loop_axis(tf.identity(x), 2)
    types.append(out.op.type)
    return out

  np.testing.assert_array_equal(_in_graph(expand), tf.reshape(x, [3, 1, 1, 2]))
  assert types == ["Reshape"]


def test_expand_after_loop_axis_of_an_unknown_loop_length():

  @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32)])
  def f(x):
    return values.expand_after_loop_axis(x, 2)

  x = tf.reshape(tf.range(6.0), [3, 2])
  np.testing.assert_array_equal(f(x), tf.reshape(x, [3, 1, 1, 2]))
  assert f(tf.zeros([0, 2])).shape == (0, 1, 1, 2)
