"""The sequential converter: runs one op per iteration in a `tf.while_loop`.

Used when an op has no converter or its converter raised `Unvectorizable`. Each step slices
the stacked inputs at the step's position, re-emits the original op on the slices, and writes
its outputs into one TensorArray per output, stacked at the end: `[n] + output shape`.
An absl warning names each op type that falls back, once per conversion.
"""

from absl import logging
import tensorflow as tf

from vectorize import graph_io
from vectorize import ragged
from vectorize.errors import ConversionError
from vectorize.locations import user_location
from vectorize.values import stacked


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
  dtypes = [t.dtype for t in op.outputs]
  if any(t.dtype == tf.variant for t in list(op.inputs) + list(op.outputs)):
    raise ConversionError(
        f"Cannot vectorize op {op.name!r} ({op.type}){user_location(op)}: it takes or makes a "
        "TensorList (a TensorArray) or other variant that differs per iteration, which has "
        "no vectorized form here and cannot run in a sequential loop. To fix: give the "
        "TensorArray a size and element shape that are the same in every iteration (pad "
        "per-example lengths and keep the length beside it), or build the value with "
        "tf.concat / tf.stack of tensors instead.")
  takes_ragged = any(ragged.is_ragged(v) for v in inputs)
  sized = [_varying_axes(t.shape, takes_ragged) for t in op.outputs]
  if any(sized) or takes_ragged:
    ragged.require_dynamic_shapes(op, "a value of the loop that falls back here")
  read = [_reader(v) for v in inputs]
  # Stacked outputs the graph leaves a later size of unknown: one shape in every iteration,
  # checked (a later axis that differs per iteration cannot be held here).
  unsure = [not k and t.shape.rank is not None and not t.shape.is_fully_defined()
            for t, k in zip(op.outputs, sized)]

  live = ctx.live_lanes if op._is_stateful else None  # pylint: disable=protected-access

  def body(i, *arrays):
    if not dtypes and live is not None:   # an effect: a dead lane of a masked region has none
      new_op = tf.cond(live[i], lambda: graph_io.copy_op(op, [r(i) for r in read]), tf.no_op)
    else:
      new_op = graph_io.copy_op(op, [r(i) for r in read])
    if not dtypes:
      with tf.control_dependencies([new_op]):
        return (i + 1,)
    values = tuple(a.write(i, _merged(t, k)) for a, t, k in zip(arrays, new_op.outputs, sized))
    sizes = tuple(a.write(i, tf.shape(t, out_type=tf.int32)[:k])
                  for a, (t, k) in zip(arrays[len(dtypes):], _sized(new_op.outputs, sized)))
    shapes = tuple(a.write(i, tf.shape(t, out_type=tf.int32)) for a, t in
                   zip(arrays[len(dtypes) + len(sizes):], _unsure(new_op.outputs, unsure)))
    return (i + 1,) + values + sizes + shapes

  arrays = tuple(
      tf.TensorArray(t.dtype, size=ctx.n, infer_shape=not k,
                     element_shape=tf.TensorShape([None]).concatenate(t.shape[k:]) if k else
                     t.shape)
      for t, k in zip(op.outputs, sized))
  arrays += tuple(tf.TensorArray(tf.int32, size=ctx.n, element_shape=[k])
                  for _, k in _sized(op.outputs, sized))
  arrays += tuple(tf.TensorArray(tf.int32, size=ctx.n, element_shape=[t.shape.rank])
                  for t in _unsure(op.outputs, unsure))
  results = tf.while_loop(lambda i, *_: i < ctx.n, body, (tf.constant(0),) + arrays)
  if not dtypes:
    return results[0].op
  num_sized = len(_sized(op.outputs, sized))
  sizes = iter(results[1 + len(dtypes):1 + len(dtypes) + num_sized])
  shapes = iter(results[1 + len(dtypes) + num_sized:])
  return [ragged.multi_axis(a.concat(), next(sizes).stack()) if k else
          stacked(_stack(a, t.shape, ctx, _one_shape(op, next(shapes).stack()) if u else None))
          for a, t, k, u in zip(results[1:], op.outputs, sized, unsure)]


def _unsure(outputs, unsure):
  return [t for t, u in zip(outputs, unsure) if u]


def _one_shape(op, shapes):
  """An assertion that every iteration gave op's output one shape (`shapes`: `[n, rank]`)."""
  same = tf.reduce_all(tf.equal(shapes, shapes[:1]))
  return tf.debugging.Assert(same, [
      f"vectorize: op {op.name!r} ({op.type}){user_location(op)} falls back to a sequential "
      "loop, and its output differs in size per iteration in an axis after the first, which "
      "pfor cannot hold (only a first axis of per-iteration size). Shapes per iteration:",
      shapes, "To fix: make that size the same in every iteration (pad it), or flatten the "
      "value so that its first axis varies (tf.reshape(x, [-1]) in the same op's place)."],
      summarize=12)


def _varying_axes(shape, takes_ragged):
  """How many leading axes of an output of this shape may differ in size per iteration: 1
  where only the first is unknown; with a ragged input (sizes that differ flow in), up to
  the last unknown one (`x[None]` of a ragged x: `[1, None, d]`); else 0 (stacked)."""
  if ragged.first_dim_varies(shape):
    return 1
  if not takes_ragged or shape.rank is None or shape.is_fully_defined():
    return 0
  return 1 + max(k for k, d in enumerate(shape.as_list()) if d is None)


def _merged(tensor, k):
  """`tensor` with its first k axes merged into one (as a value of k varying axes is held)."""
  if k <= 1:
    return tensor
  return tf.reshape(tensor, tf.concat([[-1], tf.shape(tensor)[k:]], 0))


def _sized(outputs, sized):
  return [(t, k) for t, k in zip(outputs, sized) if k]


def _reader(value):
  """i -> iteration i's input: its row of a stacked tensor or of a ragged value."""
  if ragged.is_ragged(value):
    splits = value.tensor.row_splits
    return lambda i: ragged.row(value.tensor, i, splits)
  if value.stacked:
    return lambda i: tf.gather(value.tensor, i)
  return lambda i: value.tensor


def _stack(array, shape, ctx, check=None):
  """The array stacked (after `check`); with no iteration, an empty tensor even if a dim is
  unknown (0)."""
  if check is not None:
    with tf.control_dependencies([check]):
      return _stack(array, shape, ctx)
  if shape.is_fully_defined() or ctx.static_n:
    return array.stack()
  empty_shape = [0] + [d if d is not None else 0 for d in shape.as_list()] \
      if shape.rank is not None else [0]
  return tf.cond(ctx.n > 0, array.stack, lambda: tf.zeros(empty_shape, array.dtype))
