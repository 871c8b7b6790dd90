"""TF1 TensorArrays (`TensorArrayV3` and friends) and stacks (`StackV2`), as tf.compat.v1
graph code and control flow v1 make them.

These are stateful resources ordered by a `flow` tensor, so they cannot be held as a
`DenseList`. An array created in the body becomes one array whose elements carry the loop
axis (element k holds `[n] + element_shape`, the k-th element of every iteration); it is
recognized downstream by its name prefix. An array captured from outside the body is one
array for all iterations: per-iteration reads become one gather, per-iteration writes to
distinct indices one scatter (TF1 arrays refuse a second write to an index, so a loop
writing one index from every iteration fails in TensorFlow too). Handles and flows stay
invariant: every op that takes them is stateful and reaches these converters.

Not converted: `TensorArrayGradV3`, `TensorArraySplitV3`, reads or writes of an array
created in the body at indices that differ per iteration where that would need a scatter
into one element, and stacks captured from outside the body.
"""

import tensorflow as tf

from vectorize import graph_io
from vectorize import values
from vectorize.errors import Unvectorizable
from vectorize.registry import register
from vectorize.values import invariant, stacked

_PREFIX = "vectorize_batched_"


def _creator(handle):
  """The op that made a handle, through Identity ops."""
  return graph_io.through_identities(handle).op


def _batched(op):
  """Whether input 0 is an array or stack created in the body (its elements are stacked)."""
  creator = _creator(op.invariant(0))
  name_attr = {"TensorArrayV3": "tensor_array_name", "StackV2": "stack_name"}.get(creator.type)
  return name_attr is not None and creator.get_attr(name_attr).decode().startswith(_PREFIX)


def _invariant_outputs(op, inputs):
  out = op.rebuild(inputs)
  return out if isinstance(out, tf.Operation) else [invariant(t) for t in out]


def _all_invariant(op):
  return not any(v.stacked for v in op.inputs)


def _rename(op, attr):
  return _PREFIX + op.attr(attr).decode()


# ----------------------------------------------------------------------------- creation

@register("TensorArrayV3")
def _convert_tensor_array_v3(op):
  """One array of the same size whose elements carry the loop axis. Its elements may be
  read more than once (a per-iteration index reads one element for several iterations)."""
  return _invariant_outputs_with(op, [op.invariant(0)], {
      "element_shape": _batched_shape(op, op.attr("element_shape")),
      "tensor_array_name": _rename(op, "tensor_array_name"), "clear_after_read": False})


@register("StackV2")
def _convert_stack_v2(op):
  return _invariant_outputs_with(op, [op.invariant(0)],
                                 {"stack_name": _rename(op, "stack_name")})


def _invariant_outputs_with(op, inputs, attrs):
  return [invariant(t) for t in op.rebuild(inputs, attrs)]


# ----------------------------------------------------------------------------- arrays

@register("TensorArrayWriteV3")
def _convert_tensor_array_write_v3(op):
  handle, flow = op.invariant(0), op.invariant(3)
  index = op.value(1)
  if _batched(op):
    if index.stacked:
      raise Unvectorizable("writing a TensorArray made in the body at an index that differs "
                           "per iteration")
    return _invariant_outputs(op, [handle, index.tensor, op.stacked(2), flow])
  if _all_invariant(op):
    return _invariant_outputs(op, [handle, index.tensor, op.value(2).tensor, flow])
  if not index.stacked:
    raise Unvectorizable("every iteration writes the same element of a TensorArray made "
                         "outside the body")
  return invariant(op.rebuild([handle, index.tensor, op.stacked(2), flow],
                              op_type="TensorArrayScatterV3")[0])


@register("TensorArrayScatterV3")
def _convert_tensor_array_scatter_v3(op):
  handle, flow = op.invariant(0), op.invariant(3)
  indices = op.value(1)
  if _batched(op):
    if indices.stacked:
      raise Unvectorizable("scattering into a TensorArray made in the body at indices that "
                           "differ per iteration")
    value = op.stacked(2)                                   # [n, k] + element
    perm = [1, 0] + list(range(2, values.rank(value)))
    return _invariant_outputs(op, [handle, indices.tensor, tf.transpose(value, perm), flow])
  if _all_invariant(op):
    return _invariant_outputs(op, [handle, indices.tensor, op.value(2).tensor, flow])
  if not indices.stacked:
    raise Unvectorizable("every iteration writes the same elements of a TensorArray made "
                         "outside the body")
  return _invariant_outputs(op, [handle, values.merge_leading(indices.tensor),
                                 values.merge_leading(op.stacked(2)), flow])


@register("TensorArrayReadV3")
def _convert_tensor_array_read_v3(op):
  handle, flow = op.invariant(0), op.invariant(2)
  index = op.value(1)
  dtype = op.attr("dtype")
  if not index.stacked:
    value = op.rebuild([handle, index.tensor, flow])[0]
    return stacked(value) if _batched(op) else invariant(value)
  if _batched(op):
    elements = _all_elements(op, handle, flow, op.output_shape(0))
    return stacked(tf.gather(elements, index.tensor, axis=1, batch_dims=1))
  return stacked(tf.raw_ops.TensorArrayGatherV3(
      handle=handle, indices=index.tensor, flow_in=flow, dtype=dtype,
      element_shape=op.output_shape(0)))


@register("TensorArrayGatherV3")
def _convert_tensor_array_gather_v3(op):
  handle, flow = op.invariant(0), op.invariant(2)
  indices = op.value(1)
  batched = _batched(op)
  attrs = {"element_shape": _batched_shape(op, op.attr("element_shape"))} if batched else {}
  if not indices.stacked:
    value = op.rebuild([handle, indices.tensor, flow], attrs)[0]   # [k, n] + e if batched
    if not batched:
      return invariant(value)
    return stacked(tf.transpose(value, [1, 0] + list(range(2, values.rank(value)))))
  if batched:
    elements = _all_elements(op, handle, flow, op.attr("element_shape"))
    return stacked(tf.gather(elements, indices.tensor, axis=1, batch_dims=1))
  shape = values.dynamic_shape(indices.tensor)                      # [n, k]
  flat = op.rebuild([handle, values.merge_leading(indices.tensor), flow])[0]
  return stacked(values.split_leading(flat, shape[0], shape[1]))    # [n, k] + e


def _all_elements(op, handle, flow, element_shape):
  """Every element of an array made in the body, `[n, size] + element_shape`."""
  element_shape = tf.TensorShape(element_shape)
  if element_shape.rank is None:   # the array's own, after the loop axis
    element_shape = tf.TensorShape(_creator(handle).get_attr("element_shape"))[1:]
  size = tf.raw_ops.TensorArraySizeV3(handle=handle, flow_in=flow)
  items = tf.raw_ops.TensorArrayGatherV3(
      handle=handle, indices=tf.range(size), flow_in=flow, dtype=op.attr("dtype"),
      element_shape=_batched_shape(op, element_shape))              # [size, n] + e
  if element_shape.rank is None:
    raise Unvectorizable("the TensorArray's elements have unknown rank")
  items.set_shape(tf.TensorShape([None, op.ctx.static_n]).concatenate(element_shape))
  return tf.transpose(items, [1, 0] + list(range(2, items.shape.rank)))


def _batched_shape(op, shape):
  """An element shape attr with the loop axis in front (unknown stays unknown)."""
  shape = tf.TensorShape(shape)
  return shape if shape.rank is None else tf.TensorShape([op.ctx.static_n]).concatenate(shape)


@register("TensorArrayConcatV3")
def _convert_tensor_array_concat_v3(op):
  """Elements of one shape, `[n, k * e0] + rest`: every element of every iteration."""
  handle, flow = op.invariant(0), op.invariant(1)
  if not _batched(op):
    return _invariant_outputs(op, [handle, flow])
  items = _all_elements(op, handle, flow, tf.TensorShape(None))
  shape = values.dynamic_shape(items)                               # [n, k, e0] + rest
  joined = values.reshape(items, [shape[0], shape[1] * shape[2]] + shape[3:])
  lengths = tf.fill(tf.reshape(shape[1], [1]), tf.cast(shape[2], tf.int64))
  return [stacked(joined), invariant(lengths)]


@register("TensorArraySizeV3", "TensorArrayCloseV3", "StackCloseV2")
def _convert_tensor_array_metadata(op):
  """The same in every iteration (arrays made in the body grow alike)."""
  return _invariant_outputs(op, [op.invariant(i) for i in range(op.num_inputs)])


# ----------------------------------------------------------------------------- stacks

@register("StackPushV2")
def _convert_stack_push_v2(op):
  if not _batched(op):
    raise Unvectorizable("pushing per-iteration values onto a stack made outside the body")
  return stacked(op.rebuild([op.invariant(0), op.stacked(1)])[0])


@register("StackPopV2")
def _convert_stack_pop_v2(op):
  if not _batched(op):
    raise Unvectorizable("popping from a stack made outside the body in every iteration")
  return stacked(op.rebuild([op.invariant(0)])[0])
