"""OpCases for converters/tensor_lists.py: TensorList ops on per-iteration lists."""

import tensorflow as tf
from tensorflow.python.ops import gen_math_ops
from tensorflow.python.ops import list_ops

from tests.converters.op_cases import OpCase, indices_below


def _set_get(x, index):
  lst = list_ops.tensor_list_reserve([2], 4, x.dtype)
  lst = list_ops.tensor_list_set_item(lst, index, x)
  lst = list_ops.tensor_list_set_item(lst, 3 - index, x * 2)
  return list_ops.tensor_list_get_item(lst, index, x.dtype), list_ops.tensor_list_stack(
      lst, x.dtype, element_shape=[2])


def _push_pop(x, y):
  lst = list_ops.empty_tensor_list([2], x.dtype, max_num_elements=4)
  lst = list_ops.tensor_list_push_back(lst, x)
  lst = list_ops.tensor_list_push_back(lst, y)
  lst, top = list_ops.tensor_list_pop_back(lst, x.dtype)
  return top, list_ops.tensor_list_length(lst), list_ops.tensor_list_stack(
      lst, x.dtype, element_shape=[2])


def _from_tensor_gather(x, indices):
  lst = list_ops.tensor_list_from_tensor(x, element_shape=[2])
  return (list_ops.tensor_list_gather(lst, indices, x.dtype, element_shape=[2]),
          list_ops.tensor_list_element_shape(lst, tf.int32))


def _resize(x, size):
  lst = list_ops.tensor_list_from_tensor(x, element_shape=[2])
  lst = list_ops.tensor_list_resize(lst, size)
  return list_ops.tensor_list_length(lst), list_ops.tensor_list_get_item(lst, 0, x.dtype)


def _scatter(x, updates, indices):
  lst = list_ops.tensor_list_from_tensor(x, element_shape=[2])
  lst = list_ops.tensor_list_scatter_into_existing_list(lst, updates, indices)
  # (The graph's length: without it, per-iteration indices may give lists of other lengths
  # in other iterations, which stack ragged.)
  return list_ops.tensor_list_stack(lst, x.dtype, element_shape=[2], num_elements=4)


def _distinct_pair(rng, shape, dtype):
  """Two distinct indices in [0, 4) per iteration (scatter needs no duplicates)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  flat = [rng.permutation(4)[:2] for _ in range(int(np.prod(shape[:-1])))]
  return np.reshape(np.array(flat), shape).astype(tf.as_dtype(dtype).as_numpy_dtype)


# Not tested: an invariant list grown by pushes, then a stacked push (pattern invariant,
# stacked of TensorListPushBack) under XLA: XLA's TensorListLength reports the capacity, so
# the stacked copy starts at the wrong length. Loop accumulators start empty and are exact.
CASES = [
    OpCase("TensorListSetItem", _set_get, [[2], []], dtypes=[(tf.float32, tf.int32)],
           make=[None, indices_below(4)],
           op_types=("TensorListSetItem", "TensorListGetItem", "TensorListStack")),
    # n = 0 is left out: with no iteration, the length of a list grown by pushes is unknown.
    OpCase("TensorListPushBack", _push_pop, [[2], [2]], dtypes=[tf.float32, tf.int32],
           loop_lengths=(1, 3), patterns=[(True, True), (True, False)],
           op_types=("TensorListPushBack", "TensorListPopBack", "TensorListLength")),
    OpCase("TensorListPushBack-onto_invariant_pushes", _push_pop, [[2], [2]],
           loop_lengths=(1, 3), patterns=[(False, True)], op_types=("TensorListPushBack",),
           xla="XLA's TensorListLength reports the capacity of a list grown by pushes"),
    OpCase("TensorListFromTensor", _from_tensor_gather, [[4, 2], [3]],
           dtypes=[(tf.float32, tf.int32)], make=[None, indices_below(4)],
           op_types=("TensorListFromTensor", "TensorListGather", "TensorListElementShape")),
    OpCase("TensorListResize", _resize, [[4, 2], []], dtypes=[(tf.float32, tf.int32)],
           make=[None, lambda rng, shape, dtype: rng.integers(1, 6, shape).astype("int32")],
           patterns=[(True, False), (False, True), (True, True)], xla="resizing to a size "
           "known only at run time has no static shape"),
    OpCase("TensorListScatterIntoExistingList", _scatter, [[4, 2], [2, 2], [2]],
           dtypes=[(tf.float32, tf.float32, tf.int32)], make=[None, None, _distinct_pair]),
]


def _concat(x):
  lst = list_ops.tensor_list_from_tensor(x, element_shape=[2, 3])
  return list_ops.tensor_list_concat(lst, x.dtype, element_shape=[2, 3])


CASES.append(OpCase("TensorListConcatV2", _concat, [[4, 2, 3]], dtypes=[tf.float32, tf.int32]))


def _add_lists(x, y, index):
  """AddN of TensorLists (a loop gradient sums list cotangents): the elements added; an unset
  element adds as zeros."""
  full = list_ops.tensor_list_from_tensor(x, element_shape=[2])
  sparse = list_ops.tensor_list_reserve([2], 4, x.dtype)
  sparse = list_ops.tensor_list_set_item(sparse, index, y)
  total = gen_math_ops.add_n([full, sparse, full])
  return list_ops.tensor_list_stack(total, x.dtype, element_shape=[2])


CASES.append(OpCase("AddN-tensor_lists", _add_lists, [[4, 2], [2], []],
                    dtypes=[(tf.float32, tf.float32, tf.int32)],
                    make=[None, None, indices_below(4)], op_types=("AddN",)))


def _scalar_elements(x, index):
  """A list of scalars (element shape `[]`): the zeros of an unset element need an int32
  shape even though the element shape is empty."""
  lst = list_ops.tensor_list_reserve([], 2, x.dtype)
  lst = list_ops.tensor_list_set_item(lst, index, x)
  return list_ops.tensor_list_stack(lst, x.dtype, element_shape=[])


def _scalars_in_loop(x, trips):
  """A TensorArray of scalars written by a loop with a per-iteration trip count."""
  ta = tf.TensorArray(x.dtype, 5, element_shape=[])
  _, ta = tf.while_loop(lambda k, ta: k < trips, lambda k, ta: (k + 1, ta.write(k, x[k])),
                        (0, ta))
  return ta.stack()


CASES += [
    OpCase("TensorListSetItem-scalar_elements", _scalar_elements, [[], []],
           dtypes=[(tf.int32, tf.int32), (tf.float32, tf.int32)],
           make=[None, indices_below(2)], op_types=("TensorListSetItem",)),
    OpCase("TensorListSetItem-scalars_in_loop", _scalars_in_loop, [[5], []],
           dtypes=[(tf.float32, tf.int32)], make=[None, indices_below(6)],
           patterns=[(False, True), (True, True)], op_types=("TensorListSetItem",)),
]


def _concat_after_loop(x, trips):
  """`TensorArray.concat()` after a loop with a per-iteration trip count: the length is not
  static, and under XLA the buffer's static capacity gives it."""
  ta = tf.TensorArray(x.dtype, 5, element_shape=[1, 2])
  _, ta = tf.while_loop(lambda k, ta: k < trips,
                        lambda k, ta: (k + 1, ta.write(k, x[k:k + 1])), (0, ta))
  return ta.concat()


CASES.append(OpCase("TensorListConcatV2-after_loop", _concat_after_loop, [[5, 2], []],
                    dtypes=[(tf.float32, tf.int32)], make=[None, indices_below(6)],
                    patterns=[(False, True), (True, True)],
                    op_types=("TensorListConcatV2",)))


def _unknown_shape_in_loop(x, trips):
  """A TensorArray with no element shape written in a loop with a value of unknown static
  shape (a slice with run-time bounds, of a length the graph fixes): the first write gives
  the elements their shape."""
  start = tf.math.floormod(trips, 1)
  item = x[start:start + 2]
  ta = tf.TensorArray(x.dtype, 4)
  _, ta = tf.while_loop(lambda k, ta: k < trips,
                        lambda k, ta: (k + 1, ta.write(k, item * tf.cast(k, x.dtype))), (0, ta))
  return ta.stack()


def _at_least_one_trip(rng, shape, dtype):
  return rng.integers(1, 5, shape).astype(tf.as_dtype(dtype).as_numpy_dtype)


def _created_in_loop(x, trips):
  """TensorArrays created inside the body of a loop with a per-iteration trip count, of
  scalars and written with a value of unknown static shape."""
  start = tf.math.floormod(trips, 1)
  unknown = x[start:start + 2]   # static shape [None], a length the graph fixes

  def body(k, acc):
    scalars = tf.TensorArray(x.dtype, 2).unstack(acc).write(0, acc[1] * 2.).stack()
    rows = tf.TensorArray(x.dtype, 2).write(0, unknown * acc).write(1, x).stack()
    return k + 1, scalars + tf.reduce_sum(rows, 0)
  return tf.while_loop(lambda k, acc: k < trips, body, (0, x))[1]


def _dynamic_size_in_loop(x, trips):
  """A TensorArray of dynamic size created inside the body of such a loop."""
  def body(k, acc):
    rows = tf.TensorArray(x.dtype, 0, dynamic_size=True).write(0, acc).write(1, x).stack()
    return k + 1, tf.reduce_sum(rows, 0) * 0.5
  return tf.while_loop(lambda k, acc: k < trips, body, (0, x))[1]


CASES += [
    # At least one trip (TF cannot stack unwritten elements of unknown shape); n = 0 is left
    # out: no write tells the element shape then.
    OpCase("TensorListSetItem-unknown_shape_in_loop", _unknown_shape_in_loop, [[2], []],
           dtypes=[(tf.float32, tf.int32)], make=[None, _at_least_one_trip],
           patterns=[(False, True), (True, True), (True, False)], loop_lengths=(1, 3),
           op_types=("TensorListSetItem",),
           xla="a loop under XLA cannot give a TensorList its element shape on the first "
           "write (refused with a ConversionError)"),
    OpCase("TensorListFromTensor-created_in_loop", _created_in_loop, [[2], []],
           dtypes=[(tf.float32, tf.int32)], make=[None, indices_below(4)],
           patterns=[(False, True), (True, True), (True, False)],
           op_types=("TensorListFromTensor", "TensorListSetItem")),
    OpCase("TensorListSetItem-dynamic_size_in_loop", _dynamic_size_in_loop, [[2], []],
           dtypes=[(tf.float32, tf.int32)], make=[None, indices_below(4)],
           patterns=[(False, True), (True, True), (True, False)],
           op_types=("TensorListSetItem",),
           xla="a TensorArray of dynamic size has no static capacity under XLA (TF's own "
           "loop under XLA gives zeros)"),
]


def _empty_elements(x, index):
  """Elements holding no values (`[0]`): TF's gather_nd and scatter kernels refuse a list
  buffer with no values although each read and write is of an empty slice."""
  lst = list_ops.tensor_list_from_tensor(x, element_shape=[0])      # x: [3, 0]
  lst = list_ops.tensor_list_set_item(lst, index, x[0] * 2.)
  lst = list_ops.tensor_list_push_back(lst, x[1])
  lst, top = list_ops.tensor_list_pop_back(lst, x.dtype)
  return (list_ops.tensor_list_get_item(lst, index, x.dtype), top,
          list_ops.tensor_list_stack(lst, x.dtype, element_shape=[0]))


def _scatter_empty_elements(x, updates, indices):
  lst = list_ops.tensor_list_from_tensor(x, element_shape=[2, 0])   # x: [4, 2, 0]
  lst = list_ops.tensor_list_scatter_into_existing_list(lst, updates, indices)
  return list_ops.tensor_list_stack(lst, x.dtype, element_shape=[2, 0], num_elements=4)


def _array_of_empty_rows(x):
  """`TensorArray.unstack` of a `[3, 0]` value, then a read (fuzz seed 3758)."""
  return tf.TensorArray(x.dtype, 3).unstack(x).read(1)


CASES += [
    OpCase("TensorListSetItem-empty_elements", _empty_elements, [[3, 0], []],
           dtypes=[(tf.float32, tf.int32)], make=[None, indices_below(3)],
           op_types=("TensorListSetItem", "TensorListGetItem", "TensorListPushBack",
                     "TensorListPopBack")),
    OpCase("TensorListScatterIntoExistingList-empty_elements", _scatter_empty_elements,
           [[4, 2, 0], [2, 2, 0], [2]], dtypes=[(tf.float32, tf.float32, tf.int32)],
           make=[None, None, _distinct_pair]),
    OpCase("TensorListGetItem-array_of_empty_rows", _array_of_empty_rows, [[3, 0]]),
]


def _reserve_per_iteration(x, size):
  """A TensorArray whose size differs per iteration, written and read below that size."""
  ta = tf.TensorArray(x.dtype, size=size, element_shape=[2], clear_after_read=False)
  ta = ta.write(0, x)
  return ta.read(0), ta.size(), ta.read(size - 1)


CASES.append(OpCase(
    "TensorListReserve-per_iteration_size", _reserve_per_iteration, [[2], []],
    dtypes=[(tf.float32, tf.int32)], make=[None, lambda rng, shape, dtype: rng.integers(
        1, 4, shape).astype("int32")], patterns=[(True, True), (False, True)],
    op_types=("TensorListReserve",),
    xla="a size that differs per iteration has no static capacity (refused)"))


def _zeros_like_list(x, item, index):
  """ZerosLike of a per-iteration TensorList (a loop's gradient zeroes its accumulators;
  fuzz seeds 3924, 4207): the same lengths, zero elements."""
  lst = list_ops.tensor_list_from_tensor(x, element_shape=[2])
  lst = list_ops.tensor_list_set_item(lst, index, item)
  zeros = tf.raw_ops.ZerosLike(x=lst)
  return (list_ops.tensor_list_stack(zeros, x.dtype, element_shape=[2]),
          list_ops.tensor_list_length(zeros))


CASES.append(OpCase("ZerosLike-tensor_list", _zeros_like_list, [[3, 2], [2], []],
                    dtypes=[(tf.float32, tf.float32, tf.int32)],
                    make=[None, None, indices_below(3)], op_types=("ZerosLike",)))


# ----------------------------------------------------------------------------- TF1 arrays

_RAW = tf.raw_ops


def _tf1_array(x, index):
  """A TF1 TensorArray made in the body: writes, reads at invariant and per-iteration
  indices, gathers, scatter, concat, size, close."""
  h, flow = _RAW.TensorArrayV3(size=4, dtype=x.dtype, element_shape=[2],
                               clear_after_read=False)
  flow = _RAW.TensorArrayWriteV3(handle=h, index=0, value=x[0], flow_in=flow)
  flow = _RAW.TensorArrayWriteV3(handle=h, index=1, value=x[1] * 2, flow_in=flow)
  flow = _RAW.TensorArrayScatterV3(handle=h, indices=[3, 2], value=x[::-1], flow_in=flow)
  read = lambda i: _RAW.TensorArrayReadV3(handle=h, index=i, flow_in=flow, dtype=x.dtype)
  gather = lambda i: _RAW.TensorArrayGatherV3(handle=h, indices=i, flow_in=flow,
                                              dtype=x.dtype, element_shape=[2])
  outputs = (read(1), read(index), gather([2, 0]), gather(tf.stack([index, 3 - index])),
             _RAW.TensorArrayConcatV3(handle=h, flow_in=flow, dtype=x.dtype)[0],
             _RAW.TensorArraySizeV3(handle=h, flow_in=flow))
  with tf.control_dependencies(outputs):
    close = _RAW.TensorArrayCloseV3(handle=h)
  with tf.control_dependencies([close]):
    return tf.nest.map_structure(tf.identity, outputs)


def _tf1_stack(x, y):
  """A TF1 stack made in the body: pushes and pops in order."""
  h = _RAW.StackV2(max_size=2, elem_type=x.dtype)   # XLA needs a bound
  pushed = _RAW.StackPushV2(handle=h, elem=x)
  with tf.control_dependencies([pushed]):
    second = _RAW.StackPushV2(handle=h, elem=y)
  with tf.control_dependencies([second]):
    top = _RAW.StackPopV2(handle=h, elem_type=x.dtype)
  with tf.control_dependencies([top]):
    below = _RAW.StackPopV2(handle=h, elem_type=x.dtype)
  with tf.control_dependencies([below]):
    close = _RAW.StackCloseV2(handle=h)
  with tf.control_dependencies([close]):
    return tf.identity(top), tf.identity(below) * 2, pushed


CASES += [
    OpCase("TensorArrayV3", _tf1_array, [[2, 2], []], dtypes=[(tf.float32, tf.int32)],
           make=[None, indices_below(4)],
           op_types=("TensorArrayV3", "TensorArrayWriteV3", "TensorArrayReadV3",
                     "TensorArrayGatherV3", "TensorArrayScatterV3", "TensorArrayConcatV3",
                     "TensorArraySizeV3", "TensorArrayCloseV3")),
    OpCase("StackV2", _tf1_stack, [[2], [2]], dtypes=[tf.float32, tf.int32],
           op_types=("StackV2", "StackPushV2", "StackPopV2", "StackCloseV2")),
]
