"""TensorList ops (tf.TensorArray, and the accumulators of while-loop gradients).

A stacked list is a `DenseList`: buffer `[n, capacity] + element_shape` and lengths `[n]`.
Each op becomes a gather or scatter on the buffer at per-iteration positions (`[j, index_j]`
for iteration j), so lists of different lengths per iteration (push/pop stacks in loops
with per-iteration trip counts) need no loop.

Where every iteration runs every step together (no active subset; dynamic shapes), a list
written at one index in every iteration (a push, a pop, a set or a read at an invariant
index; an unstacked tensor) is a `UniformList` instead: a real TensorList of stacked
elements, which TensorFlow writes in place. A loop of T steps pushing onto one costs O(T)
where the DenseList's scatter, copying its buffer at every step, costs O(T^2). Ops that
need per-iteration positions take it as a DenseList.
"""

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import handle_data_util
from tensorflow.python.ops import list_ops

from vectorize import graph_io
from vectorize import indexing
from vectorize import lists
from vectorize import op_types
from vectorize import ragged
from vectorize import values
from vectorize.errors import ConversionError, Unvectorizable, user_location
from vectorize.lists import DenseList, UniformList
from vectorize.registry import register
from vectorize.values import Value, invariant, stacked


def _dense(op, i, element_shape=None):
  """Input i as a DenseList (an invariant TensorList is copied to every iteration).

  `element_shape` (of the items being written; by default those the op reads) and the op's
  element dtype complete an unknown element type.
  """
  v = op.value(i)
  if v.stacked:
    return lists.as_dense(v.tensor)
  if element_shape is None:
    element_shape = _read_element_shape(op)
  dtype = op.attr("element_dtype") if "element_dtype" in op.op.node_def.attr else None
  return lists.to_dense(v.tensor, op.ctx.n, element_shape, dtype)


def _uniform(op, i, element_shape=None):
  """Input i as a UniformList, or None where it cannot be one: a DenseList, or an invariant
  list where `uniform_here` says no or its element shape (completed by `element_shape`, of
  the items written) is not static."""
  v = op.value(i)
  if isinstance(v.tensor, UniformList):
    return v.tensor
  if v.stacked or not lists.uniform_here(op.ctx):
    return None
  if element_shape is None:
    element_shape = _read_element_shape(op)
  dtype = op.attr("element_dtype") if "element_dtype" in op.op.node_def.attr else None
  return lists.uniform(v.tensor, op.ctx.n, element_shape, dtype)


def _stacked_shape(u, dtype=tf.int32):
  """`[n] + element_shape` of a UniformList's elements, as a tensor (the shape of unset
  elements read as zeros)."""
  return tf.concat([tf.reshape(tf.cast(u.n, dtype), [1]),
                    tf.constant(u.element_shape.as_list(), dtype)], 0)


def _rows_first(rows):
  """`[length, n] + e` -> `[n, length] + e`."""
  return tf.transpose(rows, [1, 0] + list(range(2, rows.shape.rank)))


def _items(op, i):
  """Input i, the stacked items a write puts into a list; refused where they are lists
  themselves (the gradient of a dynamic-size TensorArray written in a loop keeps each
  step's list to read its length), which a DenseList cannot hold."""
  items = op.stacked(i)
  if isinstance(items, DenseList):
    raise Unvectorizable("a TensorList of per-iteration TensorLists (in a loop under a "
                         "tape, a dynamic-size TensorArray keeps each step's list for its "
                         "gradient); give the TensorArray a fixed size")
  return items


def _dense_to_write(op, items, lead=1):
  """Input 0 as a DenseList whose elements are shaped like `items` (`lead` dims, then an
  element), which a SetItem, PushBack or Scatter writes into it.

  With static shapes inside a loop or branch, a list whose element shape only the write
  tells cannot change shape there (XLA fixes the shapes of loop variables and branch
  outputs): refused.
  """
  dense = _dense(op, 0, items.shape[lead:])
  if (op.ctx.target.static_shapes and op.ctx.target.subset and
      not dense.buffer.shape[2:].is_fully_defined()):
    raise Unvectorizable("the element shape of the TensorList is known only from items "
                         "written in a loop or branch, which static shapes (XLA) cannot "
                         "grow into; give the TensorArray an element_shape")
  return lists.fit_elements(dense, items, lead)


def _grown(op, dense, needed):
  """`dense` with room for `needed` elements. Under static shapes (XLA) a list cannot grow:
  one with no room at all (a `dynamic_size` TensorArray of size 0, a loop accumulator with no
  `maximum_iterations`) is an error, where XLA itself would silently drop the writes."""
  if op.ctx.target.static_shapes and dense.buffer.shape[1] == 0 and op.ctx.static_n != 0:
    where, _ = op.ctx.target.cause
    raise ConversionError(
        f"Cannot vectorize {op.type} {op.op.name!r}{user_location(op.op)} {where}: "
        "it writes into a TensorList (TensorArray) with no room, which static shapes cannot "
        "grow (XLA would drop the writes). To fix: give the TensorArray a size that holds "
        "every write; for the accumulators of a loop's gradient, give the loop "
        "maximum_iterations.")
  return lists.ensure_capacity(dense, needed, op.ctx.target.static_shapes)


# Reading ops: (output, leading dims of it that are not the element's).
_READS = {"TensorListGetItem": (0, 0), "TensorListPopBack": (1, 0), "TensorListStack": (0, 1),
          "TensorListGather": (0, 1)}


def _read_element_shape(op):
  """The static shape of the elements that `op` reads, or None."""
  if op.type not in _READS:
    return None
  k, skip = _READS[op.type]
  shape = op.output_shape(k)
  return shape[skip:] if shape.rank is not None else None


def _at(dense, positions):
  """Coordinates `[n, 2]` of (iteration j, positions[j]) in the buffer."""
  return tf.stack([tf.range(tf.shape(dense.lengths)[0]), positions], axis=1)


def _known_elements(buffer, item):
  """The buffer with its element shape taken from the stacked item written into it."""
  buffer.set_shape(tf.TensorShape([None, None]).concatenate(item.shape[1:]))
  return buffer


def _same_spec(handle, like):
  """`handle` with the element type of the UniformList `like` (ops on variants lose it)."""
  handle_data_util.copy_handle_data(like.handle, handle)
  return handle


def _list_value(dense):
  return Value(dense, True)


@register("TensorListSetItem")
def _convert_tensor_list_set_item(op):
  item = _items(op, 2)
  u = None if op.is_stacked(1) else _uniform(op, 0, item.shape[1:])
  if u is not None:
    handle = tf.raw_ops.TensorListSetItem(
        input_handle=u.handle, index=op.invariant(1), item=item,
        resize_if_index_out_of_bounds=op.op.get_attr("resize_if_index_out_of_bounds"))
    return _list_value(UniformList(_same_spec(handle, u), u.n))
  dense = _dense_to_write(op, item)
  index = op.stacked(1)
  if op.op.get_attr("resize_if_index_out_of_bounds"):
    dense = _grown(op, dense, tf.reduce_max(index) + 1)
    dense = DenseList(dense.buffer, tf.maximum(dense.lengths, index + 1))
  buffer = indexing.tensor_scatter_nd_update(dense.buffer, _at(dense, index), item)
  return _list_value(DenseList(_known_elements(buffer, item), dense.lengths))


@register("TensorListReserve")
def _convert_tensor_list_reserve(op):
  """A list of a per-iteration size (`tf.TensorArray(size=...)` with a size that differs
  per iteration): unset (zero) elements up to the largest size, each iteration's length its
  own. Under static shapes (XLA) the capacity must be known at compile time: that of the
  list whose length sizes it (the gradient of a read reserves a list as long as the one
  read), else refused."""
  capacity = None
  if op.ctx.target.static_shapes:
    capacity = _capacity_of_measured_list(op)
    if capacity is None:
      raise Unvectorizable("a TensorList (TensorArray) whose size differs per iteration has "
                           "no static capacity under XLA; give it a size that is the same "
                           "in every iteration")
  sizes = tf.cast(op.stacked(1), tf.int32)
  shape_tensor = op.invariant(0)
  shape = tf.get_static_value(shape_tensor)
  if shape is not None and np.ndim(shape) == 1:
    element_shape = tf.TensorShape([None if d < 0 else int(d) for d in shape])
  elif shape is None and shape_tensor.shape.rank == 1 and shape_tensor.shape[0] is not None:
    # Known only at run time (a gradient's list shaped like the forward one): the first
    # write gives the dims (lists.fit_elements).
    element_shape = tf.TensorShape([None] * shape_tensor.shape[0])
  else:   # a TensorArray made without element_shape: the rank of what is written into it
    written = lists.written_element_shape(op.op.outputs[0])
    if written is None:
      raise Unvectorizable("a TensorList of a per-iteration size with elements of unknown "
                           "rank")
    element_shape = written   # its static dims too: at n = 0 nothing is written to fit
  return _list_value(lists.reserved(sizes, element_shape, op.attr("element_dtype"),
                                    capacity))


def _capacity_of_measured_list(op):
  """The static capacity of the stacked list whose `TensorListLength` is op's size (each
  iteration's length is at most that), or None."""
  size = graph_io.through_identities(op.op.inputs[1])
  if size.op.type != "TensorListLength":
    return None
  measured = op.converted(size.op.inputs[0])
  if measured is None or not isinstance(measured.tensor, DenseList):
    return None
  return measured.tensor.buffer.shape[1]


@register("TensorListGetItem")
def _convert_tensor_list_get_item(op):
  u = op.value(0).tensor
  if isinstance(u, UniformList) and not op.is_stacked(1):
    return stacked(list_ops.tensor_list_get_item(u.handle, op.invariant(1), u.element_dtype,
                                                 element_shape=_stacked_shape(u)))
  dense = _dense(op, 0)
  return stacked(indexing.gather_nd(dense.buffer, _at(dense, op.stacked(1))))


@register("TensorListPushBack")
def _convert_tensor_list_push_back(op):
  item = _items(op, 1)
  u = _uniform(op, 0, item.shape[1:])
  if u is not None:
    handle = list_ops.tensor_list_push_back(u.handle, item)
    return _list_value(UniformList(_same_spec(handle, u), u.n))
  dense = _dense_to_write(op, item)
  dense = _grown(op, dense, values.max_or_zero(dense.lengths) + 1)
  buffer = indexing.tensor_scatter_nd_update(dense.buffer, _at(dense, dense.lengths), item)
  return _list_value(DenseList(_known_elements(buffer, item), dense.lengths + 1))


@register("TensorListPopBack")
def _convert_tensor_list_pop_back(op):
  u = op.value(0).tensor
  if isinstance(u, UniformList):
    handle, item = tf.raw_ops.TensorListPopBack(input_handle=u.handle,
                                                element_shape=_stacked_shape(u),
                                                element_dtype=u.element_dtype)
    return [_list_value(UniformList(_same_spec(handle, u), u.n)), stacked(item)]
  dense = _dense(op, 0)
  lengths = tf.maximum(dense.lengths - 1, 0)
  item = indexing.gather_nd(dense.buffer, _at(dense, lengths))
  return [_list_value(DenseList(dense.buffer, lengths)), stacked(item)]


@register("TensorListStack")
def _convert_tensor_list_stack(op):
  """`[n, length] + element_shape` where every iteration's list is as long; else ragged."""
  u = op.value(0).tensor
  if isinstance(u, UniformList):
    rows = list_ops.tensor_list_stack(u.handle, u.element_dtype,
                                      num_elements=op.attr("num_elements"),
                                      element_shape=_stacked_shape(u))
    return stacked(_rows_first(rows))
  dense = _dense(op, 0)
  if _may_differ_in_length(op, dense, op.output_shape(0)[0]):
    return _ragged_elements(op, dense)
  length = _common_length(op, dense, op.output_shape(0)[0])
  return stacked(_at_least(dense.buffer, length)[:, :length])


def _may_differ_in_length(op, dense, static_length):
  """Whether input 0's lists may have other lengths in other iterations: the graph gives
  no length, and the list's length does not come (`lists.length_sources`) from invariant
  lists, ones made from a tensor (whose first axis every iteration shares) or resized to an
  invariant size. Under static shapes (XLA) a list with a static capacity is as long as
  that in every iteration, as XLA's own TensorLists are (it cannot grow)."""
  if static_length is not None or (op.ctx.target.static_shapes and
                                   dense.buffer.shape[1] is not None):
    return False

  def invariant(tensor):
    value = op.converted(tensor)
    return value is not None and not value.stacked

  def alike(source):
    return (invariant(source) or source.op.type == "TensorListFromTensor" or
            (source.op.type == "TensorListResize" and invariant(source.op.inputs[1])))

  return not all(alike(s) for s in lists.length_sources(op.op.inputs[0], invariant))


def _ragged_elements(op, dense):
  """Each iteration's elements, as many as its list holds: the ragged value that the loop's
  `tf.ragged.stack` gives (the lists padded to the longest would be a wrong answer)."""
  op.ctx.target.require_dynamic_shapes(
      op.op, "a TensorArray (TensorList) read whole",
      fix="give the TensorArray a fixed size (tf.TensorArray(dtype, size=bound)) and write "
      "every element")
  return ragged.ragged(lists.items(dense), dense.lengths)


def _at_least(buffer, length):
  """`buffer` padded to a capacity of `length` where its capacity is smaller or unknown. Only
  at n = 0 may a list hold fewer items than the graph says it stacks (the gradient of
  `TensorArray.unstack` sized by lengths that no iteration gives: fuzz seed 1240146); any
  other iteration would fail as the loop does."""
  capacity = buffer.shape[1] if buffer.shape.rank else None
  if not isinstance(length, int) or (capacity is not None and capacity >= length):
    return buffer
  missing = (length - capacity if capacity is not None else
             tf.maximum(length - tf.shape(buffer)[1], 0))   # a Pad of nothing moves no data
  return tf.pad(buffer, [[0, 0], [0, missing]] + [[0, 0]] * (buffer.shape.rank - 2))


@register("TensorListConcatV2")
def _convert_tensor_list_concat_v2(op):
  """The elements joined along their first axis, `[n, length * e0] + rest`, and the
  per-element lengths (e0 each): elements of a stacked list share one shape. Lists of other
  lengths in other iterations give both ragged."""
  dense = _dense(op, 0)
  if values.rank(dense.buffer) < 3:
    raise Unvectorizable("concatenating scalar elements")
  if _may_differ_in_length(op, dense, op.output_shape(1)[0]):
    items = _ragged_elements(op, dense).tensor.values      # [total, e0] + rest
    e0 = tf.shape(dense.buffer)[2]
    joined = tf.reshape(items, tf.concat([[-1], tf.shape(dense.buffer)[3:]], 0))
    lengths = tf.fill(tf.shape(items)[:1], tf.cast(e0, tf.int64))
    return [ragged.ragged(joined, dense.lengths * e0), ragged.ragged(lengths, dense.lengths)]
  length = _common_length(op, dense, op.output_shape(1)[0])
  items = dense.buffer[:, :length]                      # [n, length, e0] + rest
  shape = values.dynamic_shape(items)
  joined = tf.reshape(items, values.shape_vector([shape[0], shape[1] * shape[2]] + shape[3:]))
  lengths = tf.fill(tf.reshape(length, [1]), tf.cast(shape[2], tf.int64))
  return [stacked(joined), invariant(lengths)]


@register("TensorListFromTensor")
def _convert_tensor_list_from_tensor(op):
  tensor = op.stacked(0)                      # [n, length] + element_shape
  if lists.uniform_here(op.ctx) and tensor.shape[2:].is_fully_defined():
    return _list_value(lists.uniform_from_buffer(tensor, op.ctx.n))
  length = tf.shape(tensor)[1]
  return _list_value(DenseList(tensor, values.stack(invariant(length), op.ctx.n)))


@register("TensorListLength")
def _convert_tensor_list_length(op):
  u = op.value(0).tensor
  if isinstance(u, UniformList):
    return invariant(list_ops.tensor_list_length(u.handle))
  return stacked(_dense(op, 0).lengths)


@register("TensorListElementShape")
def _convert_tensor_list_element_shape(op):
  dtype = op.op.outputs[0].dtype
  if isinstance(op.value(0).tensor, UniformList):
    return invariant(tf.constant(op.value(0).tensor.element_shape.as_list(), dtype))
  dense = _dense(op, 0)
  if dense.buffer.shape[2:].is_fully_defined():
    return invariant(tf.constant(dense.buffer.shape[2:].as_list(), dtype))
  return invariant(tf.cast(tf.shape(dense.buffer)[2:], dtype))


@register("TensorListResize")
def _convert_tensor_list_resize(op):
  dense = _dense(op, 0)
  size = op.stacked(1)
  dense = _grown(op, dense, values.max_or_zero(size))
  return _list_value(DenseList(dense.buffer, size))


@register("TensorListGather")
def _convert_tensor_list_gather(op):
  u = op.value(0).tensor
  if isinstance(u, UniformList) and not op.is_stacked(1):
    rows = list_ops.tensor_list_gather(u.handle, op.invariant(1), u.element_dtype,
                                       element_shape=_stacked_shape(u))
    return stacked(_rows_first(rows))
  dense = _dense(op, 0)
  indices = op.value(1)
  if indices.stacked:
    return stacked(tf.gather(dense.buffer, indices.tensor, axis=1, batch_dims=1))
  return stacked(tf.gather(dense.buffer, indices.tensor, axis=1))


@ragged.register("TensorListGather")
def _convert_tensor_list_gather_of_ragged_indices(op):
  """Indices of a number of their own in each iteration (`array.gather(tf.range(i))`): each
  one read from its iteration's list, laid out like the indices."""
  if ragged.is_ragged(op.value(0)) or ragged.is_multi_axis(op.value(1)):
    raise Unvectorizable("a TensorList gather with indices ragged in several axes")
  rows = op.value(1).tensor
  dense = _dense(op, 0)
  at = tf.stack([rows.row_ids, tf.cast(rows.values, tf.int32)], axis=1)
  return ragged.same_rows(indexing.gather_nd(dense.buffer, at), rows)


@register("TensorListScatterIntoExistingList")
def _convert_tensor_list_scatter_into_existing_list(op):
  tensor = op.stacked(1)                      # [n, k] + element_shape
  dense = _dense_to_write(op, tensor, lead=2)
  indices = op.stacked(2)                     # [n, k]
  k = tf.shape(indices)[1]
  rows = tf.tile(tf.range(tf.shape(indices)[0])[:, None], [1, k])
  dense = _grown(op, dense, values.max_or_zero(indices) + 1)
  buffer = indexing.tensor_scatter_nd_update(dense.buffer, tf.stack([rows, indices], axis=2),
                                             tensor)
  return _list_value(DenseList(buffer, tf.maximum(dense.lengths, tf.reduce_max(
      tf.concat([indices + 1, tf.zeros_like(indices[:, :1])], 1), axis=1))))


def sum_of_lists(op):
  """AddN of TensorLists, one of them stacked: the DenseLists summed element by element;
  UniformLists (and invariant lists that can be one) by TensorFlow's own sum of lists,
  which skips unset elements (a loop gradient adds one read's cotangent per step)."""
  first = next((v.tensor for v in op.inputs if isinstance(v.tensor, UniformList)), None)
  if first is not None:
    uniforms = [_uniform(op, i, first.element_shape) for i in range(op.num_inputs)]
    if all(u is not None for u in uniforms):
      total = tf.math.add_n([u.handle for u in uniforms])
      return _list_value(UniformList(_same_spec(total, first), first.n))
  element_shape = next(lists.as_dense(v.tensor).buffer.shape[2:] for v in op.inputs
                       if v.stacked)
  return _list_value(lists.add([_dense(op, i, element_shape) for i in range(op.num_inputs)]))


def _common_length(op, dense, static_length):
  """The one length every iteration's list has where stacking or concatenating is
  meaningful: the op's static length, else under static shapes the buffer's static capacity
  where XLA could not compute the lengths at compile time (after a loop: XLA's own
  TensorList ops report the capacity too), else the longest list (the capacity when n = 0,
  as no list says how long it is)."""
  if static_length is not None:
    return static_length
  longest = tf.where(op.ctx.n > 0, values.max_or_zero(dense.lengths),
                     tf.shape(dense.buffer)[1])
  if (op.ctx.target.static_shapes and dense.buffer.shape[1] is not None and
      not _from_constants(longest)):
    return dense.buffer.shape[1]
  return longest


_RUN_TIME_OPS = frozenset(["Placeholder", "_Arg"]) | frozenset(op_types.CALLS)


def _from_constants(tensor, limit=200):
  """Whether `tensor` is computed from constants only, so XLA can fold it to a
  compile-time size (a bounded walk; a long history counts as not)."""
  seen, frontier = set(), [tensor.op]
  while frontier:
    o = frontier.pop()
    if o.type in _RUN_TIME_OPS or o._is_stateful or len(seen) > limit:  # pylint: disable=protected-access
      return False
    for t in o.inputs:
      if t.op.name not in seen:
        seen.add(t.op.name)
        frontier.append(t.op)
  return True

