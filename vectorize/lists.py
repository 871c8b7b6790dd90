"""Stacked TensorLists, held as dense tensors.

A TensorList (what `tf.TensorArray` and the gradients of while loops use) that differs per
iteration is held as a `DenseList`: a buffer `[n, capacity] + element_shape` and the lengths
`[n]`, so each iteration has a list of its own length. This makes per-iteration push/pop
stacks (the accumulators of a loop's gradient, where each iteration made a different number
of trips) ordinary tensors that loops can mask and select lane by lane, and that XLA can
compile when the capacity is static. An invariant TensorList stays a real TensorList.
"""

from typing import NamedTuple

import tensorflow as tf
from tensorflow.core.framework import full_type_pb2
from tensorflow.python.ops import handle_data_util
from tensorflow.python.ops import list_ops

from vectorize import graph_io
from vectorize import op_types
from vectorize import errors
from vectorize.errors import Unvectorizable


class DenseList(NamedTuple):
  """A TensorList per iteration: `buffer[j, :lengths[j]]` are iteration j's elements."""
  buffer: tf.Tensor    # [n, capacity] + element_shape
  lengths: tf.Tensor   # [n] int32

  @property
  def dtype(self):
    return tf.variant

  @property
  def element_dtype(self):
    return self.buffer.dtype

  @property
  def capacity(self):
    return self.buffer.shape[1] if self.buffer.shape[1] is not None else \
        tf.shape(self.buffer)[1]


class UniformList(NamedTuple):
  """A TensorList per iteration, every iteration's list as long as the others': one real
  TensorList whose elements are the iterations' elements stacked, `[n] + element_shape`.

  Made only where every iteration runs every step together (no active subset, dynamic
  shapes): a loop of one trip count pushing, popping or setting at one index. TensorFlow
  writes such a list in place, where a `DenseList` buffer is copied at each write (a
  scatter into a loop-carried tensor): a loop of T steps writing one costs O(T), not
  O(T^2). Anything else takes it as a DenseList (`as_dense`)."""
  handle: tf.Tensor    # a TensorList variant of `[n] + element_shape` elements
  n: tf.Tensor         # int32 scalar: the number of iterations (for an empty list's shape)

  @property
  def dtype(self):
    return tf.variant

  @property
  def element_dtype(self):
    return element_spec(self.handle)[0]

  @property
  def element_shape(self):
    """The iterations' element shape (without the loop axis)."""
    return element_spec(self.handle)[1][1:]


def uniform_here(ctx):
  """Whether a UniformList may be made in the context `ctx`: every iteration runs (no
  active subset, whose lanes a list of stacked elements could not follow) and shapes are
  dynamic (under XLA a DenseList is written in place already)."""
  return ctx.target.grows_lists_in_place


def uniform(list_tensor, n, element_shape=None, element_dtype=None):
  """An invariant TensorList as a UniformList: every iteration's list the same. A reserved
  or empty list (what loop accumulators and the gradient of a read start from) stays
  unset, which costs nothing; one holding elements has them tiled."""
  dtype, shape = _hinted_spec(list_tensor, element_shape, element_dtype)
  if not shape.is_fully_defined():
    return None
  n = tf.convert_to_tensor(n, tf.int32)
  stacked_shape = tf.concat([tf.reshape(n, [1]), tf.constant(shape.as_list(), tf.int32)], 0)
  producer = list_tensor.op
  if producer.type == "TensorListReserve":
    handle = list_ops.tensor_list_reserve(stacked_shape, producer.inputs[1], dtype)
  elif producer.type == "EmptyTensorList":
    handle = list_ops.empty_tensor_list(stacked_shape, dtype, producer.inputs[1])
  else:
    dense = to_dense(list_tensor, n, shape, dtype)
    return uniform_from_buffer(dense.buffer, n)
  return UniformList(_with_stacked_spec(handle, dtype, shape, n), n)


def uniform_from_buffer(buffer, n):
  """A UniformList of the elements `buffer[:, k]` (`[n, length] + element_shape`)."""
  rank = buffer.shape.rank
  rows = tf.transpose(buffer, [1, 0] + list(range(2, rank)))
  shape = tf.shape(rows)[1:]
  handle = list_ops.tensor_list_from_tensor(rows, shape)
  return UniformList(_with_stacked_spec(handle, buffer.dtype, buffer.shape[2:], n), n)


def _with_stacked_spec(handle, dtype, element_shape, n):
  static_n = tf.get_static_value(n)
  stacked_shape = tf.TensorShape([None if static_n is None else int(static_n)]).concatenate(
      element_shape)
  data = handle_data_util.create_handle_data(stacked_shape, dtype)
  data.shape_and_type[0].type.type_id = full_type_pb2.TFT_ARRAY   # list ops' shape functions
  handle_data_util.set_handle_data(handle, data)
  return handle


def with_spec_of(value, like):
  """`value` with the element type of `like` where both are UniformLists (a loop's
  variables and outputs may lose the handle data saying what a TensorList holds: TF1
  loops do)."""
  if isinstance(value, UniformList) and isinstance(like, UniformList):
    handle_data_util.copy_handle_data(like.handle, value.handle)
  return value


def as_dense(value):
  """`value`, a UniformList as the DenseList of the same lists; anything else as it is."""
  if not isinstance(value, UniformList):
    return value
  dtype, shape = element_spec(value.handle)
  element_shape = tf.concat([tf.reshape(value.n, [1]),
                             tf.constant([-1 if d is None else d for d in shape[1:].as_list()],
                                         tf.int32)], 0)
  rows = list_ops.tensor_list_stack(value.handle, dtype, element_shape=element_shape)
  rank = rows.shape.rank
  buffer = tf.transpose(rows, [1, 0] + list(range(2, rank)))         # [n, length] + e
  buffer.set_shape(tf.TensorShape([shape[0], None]).concatenate(shape[1:]))
  length = list_ops.tensor_list_length(value.handle)
  return DenseList(buffer, tf.fill(tf.reshape(value.n, [1]), length))


def element_spec(list_tensor):
  """(dtype, shape) of the elements of a TensorList tensor, from its handle data."""
  data = handle_data_util.get_resource_handle_data(list_tensor)
  if list_tensor.op.type.startswith("Optional"):
    raise Unvectorizable(errors.OPTIONALS)
  if not data.is_set or not data.shape_and_type:
    raise Unvectorizable(f"the element type of TensorList {list_tensor.name} is unknown")
  spec = data.shape_and_type[0]
  return tf.as_dtype(spec.dtype), tf.TensorShape(spec.shape)


def _hinted_spec(list_tensor, element_shape, element_dtype):
  """(dtype, shape) of the elements from the handle data, completed by the hints of the op
  using the list. A list captured from eager code may have no handle data (an empty list)
  or a wrong one (`tensor_list_from_tensor` records the whole tensor's shape): the op's
  `element_dtype` and the shape of the items it writes or reads then stand in."""
  try:
    dtype, shape = element_spec(list_tensor)
  except Unvectorizable:
    if element_dtype is None:
      raise
    dtype, shape = element_dtype, tf.TensorShape(None)
  if element_shape is not None:
    element_shape = tf.TensorShape(element_shape)
    shape = (shape.merge_with(element_shape) if shape.is_compatible_with(element_shape)
             else element_shape)
  return dtype, shape


def _with_element_spec(list_tensor, dtype, shape):
  """`list_tensor`, through an Identity with corrected handle data where its own is missing
  or wrong (TF's shape inference of the ops reading it would otherwise fail)."""
  try:
    if element_spec(list_tensor) == (dtype, shape):
      return list_tensor
  except Unvectorizable:
    pass
  alias = tf.identity(list_tensor)
  handle_data_util.set_handle_data(alias, handle_data_util.create_handle_data(shape, dtype))
  return alias


def to_dense(list_tensor, n, element_shape=None, element_dtype=None):
  """An invariant TensorList as a DenseList with the same elements in every iteration.

  An empty list with a known `max_num_elements` (as while loops under XLA make) gets that
  capacity, so that pushes need no growth. `element_shape` and `element_dtype` (from the
  op using the list: the items it writes or reads) complete an unknown element type.
  """
  dtype, shape = _hinted_spec(list_tensor, element_shape, element_dtype)
  if shape.rank is None:
    raise Unvectorizable(f"TensorList {list_tensor.name} has elements of unknown rank")
  producer = list_tensor.op
  if producer.type == "TensorListReserve":            # no element set yet: zeros
    length = producer.inputs[1]
    items = _zeros(length, shape, dtype)
  elif producer.type == "EmptyTensorList":
    max_elements = tf.get_static_value(producer.inputs[1])
    items = _zeros(max(int(max_elements), 0) if max_elements is not None else 0, shape, dtype)
    length = tf.constant(0)
  else:
    list_tensor = _with_element_spec(list_tensor, dtype, shape)
    items = list_ops.tensor_list_stack(list_tensor, dtype, element_shape=shape)  # [cap] + e
    length = list_ops.tensor_list_length(list_tensor)   # under XLA, cap may exceed it
  buffer = tf.tile(items[None], [n, 1] + [1] * shape.rank)
  return DenseList(buffer, tf.fill(tf.reshape(n, [1]), length))


def reserved(sizes, element_shape, dtype, capacity=None):
  """A DenseList of unset (zero) elements, iteration j's list `sizes[j]` long; `capacity`
  (at least every size) by default the longest."""
  if capacity is None:
    capacity = tf.reduce_max(tf.concat([sizes, [0]], 0))
  items = _zeros(capacity, element_shape, dtype)                   # [capacity] + e
  buffer = tf.tile(items[None], [tf.shape(sizes)[0], 1] + [1] * element_shape.rank)
  return DenseList(buffer, sizes)


def _zeros(count, element_shape, dtype):
  """`[count] + element_shape` zeros; a static shape where `count` is known at trace time
  (XLA needs it), and int32 dims even for scalar elements (an empty shape list would
  otherwise become a float tensor).

  Element dims unknown until an item is written are 1 here and statically unknown: the
  first write broadcasts them to the item's (`fit_elements`), and a loop that writes
  its first item keeps a shape invariant and a lane select that broadcast.
  """
  dims = [1 if d is None else d for d in element_shape.as_list()]
  static = tf.get_static_value(count)
  if static is not None:
    zeros = tf.zeros([int(static)] + dims, dtype)
  else:
    zeros = tf.zeros(tf.concat([tf.reshape(tf.cast(count, tf.int32), [1]),
                                tf.constant(dims, tf.int32)], 0), dtype)
  if element_shape.is_fully_defined():
    return zeros
  return tf.compat.v1.placeholder_with_default(
      zeros, tf.TensorShape([static]).concatenate(element_shape))


def fit_elements(dense, items, lead=1):
  """`dense` with elements shaped like `items` (`lead` dims, then an element) where its
  element shape is not static: zeros of a list that has no element yet take the written
  element's shape (the elements of a stacked list share one)."""
  if dense.buffer.shape[2:].is_fully_defined():
    return dense
  shape = tf.concat([tf.shape(dense.buffer)[:2], tf.shape(items)[lead:]], 0)
  buffer = tf.broadcast_to(dense.buffer, shape)
  buffer.set_shape(dense.buffer.shape[:2].concatenate(items.shape[lead:]))
  return DenseList(buffer, dense.lengths)


def placeholder(list_tensor, static_n, like=None, static_capacity=False):
  """A DenseList of placeholders shaped for `list_tensor`'s elements (for dry runs).

  A list input whose element type is unknown takes it from `like`, the DenseList or
  TensorList that will feed it (the inputs of a loop's gradient of a gradient lack handle
  data); with neither (one a loop condition receives but never reads), a plain variant
  placeholder.
  """
  if isinstance(like, UniformList):
    handle = tf.compat.v1.placeholder(tf.variant, [])
    handle_data_util.copy_handle_data(like.handle, handle)
    return UniformList(handle, tf.compat.v1.placeholder(tf.int32, []))
  spec = _spec(list_tensor) or _spec(like)
  if spec is None:
    return tf.compat.v1.placeholder(tf.variant, [])
  dtype, shape = spec
  capacity = (like.buffer.shape[1] if static_capacity and isinstance(like, DenseList)
              else None)   # static shapes: a list keeps its capacity through loops
  buffer_shape = [static_n, capacity] + shape.as_list() if shape.rank is not None else None
  buffer = tf.compat.v1.placeholder(dtype, buffer_shape)
  return DenseList(buffer, tf.compat.v1.placeholder(tf.int32, [static_n]))


def _spec(list_value):
  """(dtype, element shape) of a DenseList or TensorList tensor, or None if unknown."""
  if isinstance(list_value, DenseList):
    return list_value.element_dtype, list_value.buffer.shape[2:]
  if isinstance(list_value, UniformList):
    return list_value.element_dtype, list_value.element_shape
  if list_value is None or getattr(list_value, "dtype", None) != tf.variant:
    return None
  try:
    return element_spec(list_value)
  except Unvectorizable:
    return None


def shape_invariant(dense, static_n, static_capacity):
  """Shape invariants for a DenseList loop variable."""
  capacity = dense.buffer.shape[1] if static_capacity else None
  return DenseList(
      tf.TensorShape([static_n, capacity]).concatenate(dense.buffer.shape[2:]),
      tf.TensorShape([static_n]))


def add(denses):
  """The elementwise sum of per-iteration lists (what AddN of TensorLists does: the gradient
  of a loop that reads a TensorArray sums list cotangents). Unset elements are zeros in a
  DenseList, so they add as TensorFlow's unset elements do."""
  denses = common_capacity(denses)
  return DenseList(tf.math.add_n([d.buffer for d in denses]),
                   tf.reduce_max(tf.stack([d.lengths for d in denses]), axis=0))


def common_capacity(denses):
  """DenseLists padded with unset (zero) elements to their largest capacity (lists that
  meet, in a sum, a select or a stitch, may have grown apart)."""
  sizes = [d.buffer.shape[1] for d in denses]
  if all(c is not None for c in sizes):
    capacity = max(sizes)
  else:
    capacity = tf.reduce_max(tf.stack([tf.shape(d.buffer)[1] for d in denses]))
  return [pad_capacity(d, capacity) for d in denses]


def pad_capacity(dense_or_buffer, capacity):
  """A DenseList or its buffer (`[n, c] + element_shape`) padded with zeros to `capacity`."""
  if isinstance(dense_or_buffer, DenseList):
    return DenseList(pad_capacity(dense_or_buffer.buffer, capacity), dense_or_buffer.lengths)
  buffer = dense_or_buffer
  if isinstance(capacity, int) and buffer.shape[1] == capacity:
    return buffer
  paddings = tf.concat([[[0, 0], [0, capacity - tf.shape(buffer)[1]]],
                        tf.zeros([tf.rank(buffer) - 2, 2], tf.int32)], 0)
  padded = tf.pad(buffer, paddings)
  padded.set_shape(buffer.shape[:1].concatenate(
      [capacity if isinstance(capacity, int) else None]).concatenate(buffer.shape[2:]))
  return padded


def ensure_capacity(dense, needed, static_shapes):
  """Grows the buffer to hold `needed` elements (dynamic shapes only; XLA needs them set)."""
  if static_shapes:
    return dense
  capacity = tf.shape(dense.buffer)[1]

  def grow():
    extra = tf.maximum(needed - capacity, capacity)
    pad = tf.concat([[[0, 0], [0, extra]], tf.zeros([tf.rank(dense.buffer) - 2, 2], tf.int32)],
                    0)
    return tf.pad(dense.buffer, pad)

  buffer = tf.cond(needed > capacity, grow, lambda: dense.buffer)
  buffer.set_shape(tf.TensorShape([dense.buffer.shape[0], None]).concatenate(
      dense.buffer.shape[2:]))
  return DenseList(buffer, dense.lengths)


def items(dense):
  """Each iteration's first `lengths[j]` elements, concatenated: `[sum(lengths)] +
  element_shape` (the flat values of the ragged stack of the lists)."""
  capacity = tf.shape(dense.buffer)[1]
  held = tf.range(capacity)[None] < dense.lengths[:, None]             # [n, capacity]
  return tf.boolean_mask(dense.buffer, held)


# Ops whose output list has its input list's length (input 0): in every iteration, and in
# every trip of a loop.
def _keeps_length(op):
  """Identity, ZerosLike (a loop gradient's zeroed accumulators), a SetItem that cannot grow
  the list."""
  return op.type in ("Identity", "ZerosLike") or (
      op.type == "TensorListSetItem" and not op.get_attr("resize_if_index_out_of_bounds"))


# Ops that change a list's length by the same amount in every iteration (run once per
# iteration, outside loops): input 0 is the list; the input, if any, that must be invariant.
_SHIFTS_LENGTH = {"TensorListPushBack": None, "TensorListPopBack": None,
                  "TensorListSetItem": 1, "TensorListScatterIntoExistingList": 2}


def length_sources(list_tensor, invariant):
  """The list tensors of the body whose lengths decide `list_tensor`'s alike in every
  iteration: walked back through ops that keep the length or shift it alike (by an index
  that `invariant(tensor)` says is the same in every iteration), through sums of lists (the
  longest), and through while loops whose body keeps it in every trip (a fixed-size
  TensorArray written in a loop of per-iteration trips)."""
  list_tensor = _follow(list_tensor, invariant)
  if list_tensor.op.type == "AddN":
    return [s for t in list_tensor.op.inputs for s in length_sources(t, invariant)]
  return [list_tensor]


def _follow(list_tensor, invariant=None):
  """Where a list's length comes from; without `invariant`, in a loop's body, where a trip
  may not shift a length (each iteration runs its own number of trips)."""
  while True:
    op = list_tensor.op
    if _keeps_length(op) or (invariant is not None and _shifts_alike(op, invariant)):
      list_tensor = op.inputs[0]
    elif op.type in ("While", "StatelessWhile"):
      k = list_tensor.value_index
      body = graph_io.function_graph(op, "body")
      if _follow(body.outputs[k]).ref() != body.inputs[k].ref():
        return list_tensor
      list_tensor = op.inputs[k]
    elif op.type in op_types.CONDITIONALS:
      # every branch keeps the length of one list it takes (a fixed-size TensorArray
      # written in a per-iteration tf.cond)
      k = list_tensor.value_index
      taken = set()
      for branch in graph_io.branch_graphs(op):
        source = _follow(branch.outputs[k]).ref()
        inputs = {j for j, t in enumerate(branch.inputs) if t.ref() == source}
        if not inputs:
          return list_tensor
        taken |= inputs
      if len(taken) != 1:
        return list_tensor
      list_tensor = op.inputs[taken.pop() + 1]
    else:
      return list_tensor


def _shifts_alike(op, invariant):
  if op.type not in _SHIFTS_LENGTH:
    return False
  k = _SHIFTS_LENGTH[op.type]
  return k is None or invariant(op.inputs[k])


# Where a list flows on (op type -> how its input k reaches a function's input): calls and
# loops pass input k as function input k, conditionals as input k - 1 (after the predicate).
_WRITES_ITEM_AT = {"TensorListSetItem": 2, "TensorListPushBack": 1}


def written_element_shape(list_tensor, seen=None):
  """The shape of the first item written into `list_tensor` (or a list it flows into
  through identities, loops, conditionals and calls), or None: the element shape of a list
  made with none (`tf.TensorArray` without `element_shape`)."""
  seen = set() if seen is None else seen
  if list_tensor.ref() in seen:
    return None
  seen.add(list_tensor.ref())
  for consumer in list_tensor.consumers():
    positions = [k for k, t in enumerate(consumer.inputs) if t is list_tensor]
    onward = []
    if consumer.type in _WRITES_ITEM_AT and positions == [0]:
      item = consumer.inputs[_WRITES_ITEM_AT[consumer.type]]
      if item.shape.rank is not None:
        return item.shape
      onward.append(consumer.outputs[0])
    elif consumer.type in ("Identity", "TensorListPopBack") or (
        consumer.type in _WRITES_ITEM_AT and 0 in positions):
      onward.append(consumer.outputs[0])
    else:
      shift = 1 if consumer.type in op_types.CONDITIONALS else 0
      for name in graph_io.function_names(consumer):
        fn = graph_io.find_function(consumer.graph, name)
        if fn is None or getattr(fn, "graph", None) is None:
          continue
        inputs = fn.graph.inputs
        onward += [inputs[k - shift] for k in positions if 0 <= k - shift < len(inputs)]
      if consumer.type in ("While", "StatelessWhile"):
        onward += [consumer.outputs[k] for k in positions if k < len(consumer.outputs)]
    for t in onward:
      shape = written_element_shape(t, seen)
      if shape is not None:
        return shape
  return None
