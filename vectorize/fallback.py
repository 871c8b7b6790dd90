"""The sequential converter: runs one op per iteration in a `tf.while_loop`.

Used when an op has no converter or its converter raised `Unvectorizable`. Each step slices
the stacked inputs at the step's position, re-emits the original op on the slices, and writes
its outputs into one TensorArray per output, stacked at the end: `[n] + output shape`.
An absl warning names each op type that falls back, once per conversion.
"""

from absl import logging
import tensorflow as tf

from vectorize import graph_io
from vectorize import iteration_outputs
from vectorize import ragged
from vectorize import errors
from vectorize.errors import ConversionError, user_location
from vectorize import values
from vectorize.values import invariant


def warn_once(op, ctx, reason):
  if ctx.report.warn and op.type not in ctx.report.warned_types:
    ctx.report.warned_types.add(op.type)
    logging.warning(
        "vectorize: op type %s (e.g. %s%s) has no vectorized form here (%s); it runs in a "
        "sequential while loop over the iterations, which is slow.", op.type, op.name,
        user_location(op), reason)


def run_sequentially(op, inputs, ctx):
  """Emits a while loop computing `op` iteration by iteration; returns stacked outputs.

  A ragged input is read one iteration's rows at a time. An op with effects and no outputs
  (a write) runs only for the live lanes of a masked region (`ctx.live_lanes`). An output whose per-iteration
  first dimension is unknown (and the rest known) may differ in size between iterations:
  its values are concatenated and it comes back ragged, with one row length per iteration.
  """
  if op.type.startswith("Optional"):
    raise ConversionError(
        f"Cannot vectorize op {op.name!r} ({op.type}){user_location(op)}: {errors.OPTIONALS}.")
  if any(t.dtype == tf.variant for t in list(op.inputs) + list(op.outputs)):
    raise ConversionError(
        f"Cannot vectorize op {op.name!r} ({op.type}){user_location(op)}: it takes or makes a "
        "TensorList (a TensorArray) or other variant that differs per iteration, which has "
        "no vectorized form here and cannot run in a sequential loop. To fix: give the "
        "TensorArray a size and element shape that are the same in every iteration (pad "
        "per-example lengths and keep the length beside it), or build the value with "
        "tf.concat / tf.stack of tensors instead.")
  takes_ragged = any(ragged.is_ragged(v) for v in inputs)
  handles = _handles_passed_through(op, inputs)
  known = None if takes_ragged else _shapes_from_batched_inputs(op, inputs)
  produced = [tf.TensorSpec(_shape(op, t, known[k] if known else None), t.dtype)
              for k, t in enumerate(op.outputs) if t.dtype != tf.resource]
  outputs = iteration_outputs.IterationOutputs(
      produced, [_varying_axes(t.shape, takes_ragged) for t in produced],
      f"op {op.name!r} ({op.type}){user_location(op)} falls back to a sequential loop, and "
      "its output differs in size per iteration in an axis after the first, which pfor "
      "cannot hold (only a first axis of per-iteration size). To fix: make that size the "
      "same in every iteration (pad it), or flatten the value so that its first axis varies "
      "(tf.reshape(x, [-1]) in the same op's place).")
  if outputs.any_varying or takes_ragged:
    ctx.target.require_dynamic_shapes(op, "a value of the loop that falls back here")
  read = [_reader(v) for v in inputs]
  live = ctx.live_lanes if op._is_stateful else None  # pylint: disable=protected-access

  def body(i, *arrays):
    if not op.outputs and live is not None:   # an effect: a dead lane has none
      new_op = tf.cond(live[i], lambda: graph_io.copy_op(op, [r(i) for r in read]), tf.no_op)
    else:
      new_op = graph_io.copy_op(op, [r(i) for r in read])
    if not op.outputs:
      with tf.control_dependencies([new_op]):
        return (i + 1,)
    return (i + 1,) + outputs.write(
        arrays, i, [t for t in new_op.outputs if t.dtype != tf.resource])

  results = tf.while_loop(lambda i, *_: i < ctx.n, body,
                          (tf.constant(0),) + outputs.arrays(ctx.n))
  if not op.outputs:
    return results[0].op
  produced = iter(outputs.values(results[1:], ctx.n, ctx.static_n))
  return [handles[k] if k in handles else next(produced) for k in range(len(op.outputs))]


def _shapes_from_batched_inputs(op, inputs):
  """The op's output shapes inferred again from its inputs' per-iteration shapes as their
  batched values know them (`x[i, :2]` has no static size in the body's graph, but its
  batched value has), or None. An output left unknown would come back ragged."""
  if all(t.shape.is_fully_defined() for t in op.outputs) or any(
      t.dtype in (tf.resource, tf.variant) for t in op.inputs) or any(
          graph_io.function_names(op)):
    return None
  scratch = tf.Graph()
  try:
    with scratch.as_default():
      args = []
      for t, v in zip(op.inputs, inputs):
        constant = tf.get_static_value(t) if t.shape.num_elements() in range(65) else None
        if constant is not None:     # small constants: sizes and counts shapes depend on
          args.append(tf.constant(constant, t.dtype))
          continue
        shape = values.static_iteration_shape(v)
        if not t.shape.is_compatible_with(shape):
          return None
        args.append(tf.compat.v1.placeholder(t.dtype, t.shape.merge_with(shape)))
      copy = scratch.create_op(op.type, args, [t.dtype for t in op.outputs],
                               attrs=dict(op.node_def.attr))
    return [t.shape for t in copy.outputs]
  except (ValueError, TypeError, tf.errors.OpError):
    return None


def _shape(op, t, inferred=None):
  """One iteration's static shape of output t, with what `inferred` knows besides.
  TensorFlow leaves the shape of a strided slice with strides it cannot read
  (`x[i, ::s[i]]`) unknown, rank included, though its spec sets the rank and the sizes of
  the entries it can read."""
  if inferred is not None and t.shape.is_compatible_with(inferred):
    t_shape = t.shape.merge_with(inferred)
    if t_shape.rank is not None:
      return t_shape
  if t.shape.rank is not None or op.type != "StridedSlice":
    return t.shape
  dims = op.inputs[0].shape
  spec = [tf.get_static_value(op.inputs[k], partial=True) for k in (1, 2, 3)]
  if dims.rank is None or any(v is None for v in spec):
    return t.shape
  mask = lambda name, k: bool(op.get_attr(name) >> k & 1)
  real = sum(not (mask("ellipsis_mask", k) or mask("new_axis_mask", k))
             for k in range(len(spec[2])))
  shape, axis = [], 0
  for k, (begin, end, stride) in enumerate(zip(*spec)):
    if mask("ellipsis_mask", k):
      shape += dims[axis:axis + dims.rank - real].as_list()
      axis += dims.rank - real
    elif mask("new_axis_mask", k):
      shape.append(1)
    else:
      if not mask("shrink_axis_mask", k):
        known = stride not in (None, 0) and dims[axis] is not None and (
            begin is not None or mask("begin_mask", k)) and (
                end is not None or mask("end_mask", k))
        bounds = slice(None if mask("begin_mask", k) else begin,
                       None if mask("end_mask", k) else end, stride)
        shape.append(len(range(*bounds.indices(dims[axis]))) if known else None)
      axis += 1
  return tf.TensorShape(shape + dims[axis:].as_list())


def _handles_passed_through(op, inputs):
  """{output index: Value} for resource outputs (variable handles a while loop carries
  unchanged): the input handle, the same in every iteration. A TensorArray of handles has no
  kernel, and nothing else returns one."""
  handles = {}
  for k, t in enumerate(op.outputs):
    if t.dtype != tf.resource:
      continue
    if op.type not in ("While", "StatelessWhile") or inputs[k].stacked:
      raise ConversionError(
          f"Cannot vectorize op {op.name!r} ({op.type}){user_location(op)}: it falls back to "
          "a sequential loop and returns a resource (a variable's handle) that differs per "
          "iteration, which cannot be stacked. To fix: choose the variable outside the "
          "loop body, or index one variable holding every row.")
    handles[k] = invariant(inputs[k].tensor)
  return handles


def _varying_axes(shape, takes_ragged):
  """How many leading axes of an output of this shape may differ in size per iteration: 1
  where only the first is unknown; with a ragged input (sizes that differ flow in), up to
  the last unknown one (`x[None]` of a ragged x: `[1, None, d]`); else 0 (stacked)."""
  if ragged.first_dim_varies(shape):
    return 1
  if not takes_ragged or shape.rank is None or shape.is_fully_defined():
    return 0
  return 1 + max(k for k, d in enumerate(shape.as_list()) if d is None)


def _reader(value):
  """i -> iteration i's input: its row of a stacked tensor or of a ragged value."""
  if ragged.is_ragged(value):
    splits = value.tensor.row_splits
    return lambda i: ragged.row(value.tensor, i, splits)
  if value.stacked:
    return lambda i: tf.gather(value.tensor, i)
  known = _small_constant(value.tensor)
  if known is not None:   # made again inside the loop: a capture would lose its value,
    return lambda i: tf.constant(known, value.tensor.dtype)   # which shape inputs need
  return lambda i: value.tensor


def _small_constant(tensor):
  """The value of a small tensor the graph knows (an op's shape or size argument: a
  `RaggedTensorToTensor` needs its `shape` known, -1 for unknown), else None."""
  size = tensor.shape.num_elements()
  if size is None or size > 64 or tensor.dtype in (tf.resource, tf.variant):
    return None
  return tf.get_static_value(tensor)
