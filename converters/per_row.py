"""Ops with no kernel that takes a batch: image and audio codecs, file reads, serialization.

They run on every iteration's row in our own `tf.while_loop` (TensorArrays collect each
output; `parallel_iterations` lets rows overlap), the sequential loop of
vectorize/fallback.py with a check added: rows must give outputs of one size (else they
cannot be stacked), so each row's output shapes are compared with the first row's, with an
error naming the op and the fix (per row for outputs of unknown rank, else once after the
loop: fewer ops in each step). Loop-invariant inputs are passed whole. With no iteration
the loop does not run and the outputs are empty (unknown dims 0).

Where every output's rank is known, the loop runs bare even when n is known only at run
time: the stack takes its row shape at run time (the first row's, or the static shape with
unknown dims 0 when there is no row), so no `tf.cond` guards the empty case. A conditional
there costs each tf.data iterator a Grappler pass over two more functions.
"""

import tensorflow as tf
from tensorflow.python.ops import list_ops

from vectorize.registry import register
from vectorize.values import stacked

_PARALLEL_ROWS = 16
_ROWS_PER_STEP = 4


def check(condition, message):
  """An Assert of `all(condition)` with a string message (no tf.cond)."""
  return tf.debugging.Assert(tf.reduce_all(condition), [message])


def row_shape(t):
  """`tf.shape(t)` as int32, for a TensorArray of row shapes: read as int64 and cast, since a
  Shape op's int32 output is typed a shape tensor, and one written into an int32 TensorList
  makes TF's type inference report an invalid graph (a warning at every tf.data iterator
  start)."""
  return tf.cast(tf.shape(t, out_type=tf.int64), tf.int32)


def _same_shape(shape, first):
  """shape == first, elementwise, both padded with -1 to one length: ranks that differ
  give a False, not an error."""
  length = tf.maximum(tf.size(shape), tf.size(first))
  padded = [tf.pad(s, [[0, length - tf.size(s)]], constant_values=-1) for s in (shape, first)]
  return tf.equal(*padded)


def _static_or_zero(t):
  """The output's static row shape, unknown dims 0: the shape of an empty stack."""
  return [d or 0 for d in t.shape.as_list()]


def _empty(t):
  return tf.zeros([0] + _static_or_zero(t) if t.shape.rank is not None else [0], t.dtype)


def _stacked_rows(array, row_shapes, like):
  """The rows of `array` stacked, `[n] + row shape`: the first row's shape (`row_shapes`,
  `[n, rank]`) or, with no row, the static one with unknown dims 0."""
  first = tf.concat([row_shapes, [_static_or_zero(like)]], 0)[0]
  rows = list_ops.tensor_list_stack(array.flow, like.dtype, element_shape=first)
  rows.set_shape(tf.TensorShape([None]).concatenate(like.shape))
  return rows


def map_rows(op):
  """The op's outputs for every iteration: a while loop over the stacked inputs' rows."""
  outputs = op.op.outputs
  inputs = [op.value(i) for i in range(op.num_inputs)]
  message = (f"{op.type} ({op.op.name}) in a vectorized loop: iterations give outputs of "
             "different sizes, which cannot be stacked into one tensor; make them one size "
             "(resize, pad or crop) where they are made, or run the op outside the "
             "vectorized function")

  def row(i):
    return op.rebuild([tf.gather(v.tensor, i) if v.stacked else v.tensor for v in inputs])

  # Outputs of known rank: each row's shape is collected and compared after the loop (before
  # the stack); of unknown rank, with the first row's inside the loop.
  ranked = [t.shape.rank is not None for t in outputs]

  def loop(n):
    """(TensorArrays of the outputs' rows, `[n, rank]` row shapes of the ranked ones)."""
    first = [tf.shape(t) for t in row(0)] if not all(ranked) else None

    def body(i, arrays, shape_arrays):
      # _ROWS_PER_STEP rows per step (the last step repeats row n - 1): the loop's own ops
      # run once for several rows
      for k in tf.unstack(tf.minimum(i + tf.range(_ROWS_PER_STEP), n - 1), _ROWS_PER_STEP):
        results = row(k)
        checks = [check(_same_shape(tf.shape(t), s), message)
                  for t, s, known in zip(results, first or results, ranked) if not known]
        with tf.control_dependencies(checks):
          arrays = [a.write(k, t) for a, t in zip(arrays, results)]
          shape_arrays = [a.write(k, row_shape(t)) for a, t in zip(shape_arrays, results)]
      return i + _ROWS_PER_STEP, arrays, shape_arrays

    arrays = [tf.TensorArray(t.dtype, size=n, element_shape=t.shape, infer_shape=False)
              for t in outputs]
    shape_arrays = [tf.TensorArray(tf.int32, size=n, element_shape=[t.shape.rank])
                    for t in outputs if t.shape.rank is not None]
    _, arrays, shape_arrays = tf.while_loop(
        lambda i, *_: i < n, body, (tf.constant(0), arrays, shape_arrays),
        parallel_iterations=_PARALLEL_ROWS)
    shapes = [a.stack() for a in shape_arrays]
    return arrays, shapes, [check(tf.equal(s, s[:1]), message) for s in shapes]

  n = op.ctx.n
  if all(ranked):        # no row needed before the loop: it may run zero times
    arrays, shapes, checks = loop(n)
    with tf.control_dependencies(checks):
      return [stacked(_stacked_rows(a, s, t)) for a, s, t in zip(arrays, shapes, outputs)]

  def run(n):
    arrays, _, checks = loop(n)
    with tf.control_dependencies(checks):
      return [a.stack() for a in arrays]

  if op.ctx.static_n is not None:
    return [stacked(t) for t in (run(n) if op.ctx.static_n else map(_empty, outputs))]
  return [stacked(t) for t in tf.cond(n > 0, lambda: run(n),
                                      lambda: [_empty(t) for t in outputs])]
register(
    "DecodeAndCropJpeg",
    "DecodeBmp",
    "DecodeGif",
    "DecodeImage",
    "DecodeJpeg",
    "DecodePng",
    "DecodeWav",
    "EncodeJpeg",
    "EncodeJpegVariableQuality",
    "EncodePng",
    "EncodeWav",
    "ExtractJpegShape",
    "ReadFile",
    "SerializeTensor",
)(map_rows)

