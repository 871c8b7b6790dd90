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
from vectorize.values import stacked


def warn_once(op, ctx, reason):
  if ctx.report.warn and op.type not in ctx.report.warned_types:
    ctx.report.warned_types.add(op.type)
    logging.warning(
        "vectorize: op type %s (e.g. %s) has no vectorized form here (%s); it runs in a "
        "sequential while loop over the iterations, which is slow.", op.type, op.name, reason)


def run_sequentially(op, inputs, ctx):
  """Emits a while loop computing `op` iteration by iteration; returns stacked outputs.

  A ragged input is read one iteration's rows at a time. An output whose per-iteration
  first dimension is unknown (and the rest known) may differ in size between iterations:
  its values are concatenated and it comes back ragged, with one row length per iteration.
  """
  dtypes = [t.dtype for t in op.outputs]
  if any(t.dtype == tf.variant for t in list(op.inputs) + list(op.outputs)):
    raise ConversionError(
        f"Op {op.name} ({op.type}) takes or makes a TensorList or other variant that differs "
        "per iteration; it has no vectorized form and cannot run in a sequential loop.")
  sized = [ragged.first_dim_varies(t.shape) for t in op.outputs]
  if any(sized) or any(ragged.is_ragged(v) for v in inputs):
    ragged.require_dynamic_shapes(op, "a value of the loop that falls back here")
  read = [_reader(v) for v in inputs]

  def body(i, *arrays):
    new_op = graph_io.copy_op(op, [r(i) for r in read])
    if not dtypes:
      with tf.control_dependencies([new_op]):
        return (i + 1,)
    values = tuple(a.write(i, t) for a, t in zip(arrays, new_op.outputs))
    lengths = tuple(a.write(i, tf.shape(t, out_type=tf.int32)[0])
                    for a, t in zip(arrays[len(dtypes):], _sized(new_op.outputs, sized)))
    return (i + 1,) + values + lengths

  arrays = tuple(
      tf.TensorArray(t.dtype, size=ctx.n, element_shape=t.shape, infer_shape=not s)
      for t, s in zip(op.outputs, sized))
  arrays += tuple(tf.TensorArray(tf.int32, size=ctx.n, element_shape=[])
                  for _ in _sized(op.outputs, sized))
  results = tf.while_loop(lambda i, *_: i < ctx.n, body, (tf.constant(0),) + arrays)
  if not dtypes:
    return results[0].op
  lengths = iter(results[1 + len(dtypes):])
  return [ragged.ragged(a.concat(), next(lengths).stack()) if s else
          stacked(_stack(a, t.shape, ctx))
          for a, t, s in zip(results[1:], op.outputs, sized)]


def _sized(outputs, sized):
  return [t for t, s in zip(outputs, sized) if s]


def _reader(value):
  """i -> iteration i's input: its row of a stacked tensor or of a ragged value."""
  if ragged.is_ragged(value):
    splits = value.tensor.row_splits
    return lambda i: ragged.row(value.tensor, i, splits)
  if value.stacked:
    return lambda i: tf.gather(value.tensor, i)
  return lambda i: value.tensor


def _stack(array, shape, ctx):
  """The array stacked; with no iteration, an empty tensor even if a dim is unknown (0)."""
  if shape.is_fully_defined() or ctx.static_n:
    return array.stack()
  empty_shape = [0] + [d if d is not None else 0 for d in shape.as_list()] \
      if shape.rank is not None else [0]
  return tf.cond(ctx.n > 0, array.stack, lambda: tf.zeros(empty_shape, array.dtype))
