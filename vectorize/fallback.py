"""The sequential converter: runs one op per iteration in a `tf.while_loop`.

Used when an op has no converter or its converter raised `Unvectorizable`. Each step slices
the stacked inputs at the step's position, re-emits the original op on the slices, and writes
its outputs into one TensorArray per output, stacked at the end: `[n] + output shape`.
An absl warning names each op type that falls back, once per conversion.
"""

from absl import logging
import tensorflow as tf

from vectorize import graph_io
from vectorize.errors import ConversionError
from vectorize.values import stacked


def warn_once(op, ctx, reason):
  if ctx.report.warn and op.type not in ctx.report.warned_types:
    ctx.report.warned_types.add(op.type)
    logging.warning(
        "vectorize: op type %s (e.g. %s) has no vectorized form here (%s); it runs in a "
        "sequential while loop over the iterations, which is slow.", op.type, op.name, reason)


def run_sequentially(op, inputs, ctx):
  """Emits a while loop computing `op` iteration by iteration; returns stacked outputs."""
  dtypes = [t.dtype for t in op.outputs]
  if any(t.dtype == tf.variant for t in list(op.inputs) + list(op.outputs)):
    raise ConversionError(
        f"Op {op.name} ({op.type}) takes or makes a TensorList or other variant that differs "
        "per iteration; it has no vectorized form and cannot run in a sequential loop.")

  def body(i, *arrays):
    args = [tf.gather(v.tensor, i) if v.stacked else v.tensor for v in inputs]
    new_op = graph_io.copy_op(op, args)
    if not dtypes:
      with tf.control_dependencies([new_op]):
        return (i + 1,)
    return (i + 1,) + tuple(a.write(i, t) for a, t in zip(arrays, new_op.outputs))

  arrays = tuple(
      tf.TensorArray(t.dtype, size=ctx.n, element_shape=t.shape, infer_shape=True)
      for t in op.outputs)
  results = tf.while_loop(lambda i, *_: i < ctx.n, body, (tf.constant(0),) + arrays)
  if not dtypes:
    return results[0].op
  return [stacked(_stack(a, t.shape, ctx)) for a, t in zip(results[1:], op.outputs)]


def _stack(array, shape, ctx):
  """The array stacked; with no iteration, an empty tensor even if a dim is unknown (0)."""
  if shape.is_fully_defined() or ctx.static_n:
    return array.stack()
  empty_shape = [0] + [d if d is not None else 0 for d in shape.as_list()] \
      if shape.rank is not None else [0]
  return tf.cond(ctx.n > 0, array.stack, lambda: tf.zeros(empty_shape, array.dtype))
