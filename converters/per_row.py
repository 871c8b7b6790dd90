"""Ops with no kernel that takes a batch: image and audio codecs, file reads, serialization.

They run on every iteration's row in our own `tf.while_loop` (TensorArrays collect each
output; `parallel_iterations` lets rows overlap), the sequential loop of
vectorize/fallback.py with a check added: rows must give outputs of one size (else they
cannot be stacked), so each row's output shapes are compared with the first row's, with an
error naming the op and the fix. Loop-invariant inputs are passed whole. With no iteration
the loop does not run and the outputs are empty (unknown dims 0).
"""

import tensorflow as tf

from vectorize.registry import register
from vectorize.values import stacked

_PARALLEL_ROWS = 16


def check(condition, message):
  """An Assert of `all(condition)` with a string message (no tf.cond)."""
  return tf.debugging.Assert(tf.reduce_all(condition), [message])


def _same_shape(shape, first):
  """shape == first, elementwise, both padded with -1 to one length: ranks that differ
  give a False, not an error."""
  length = tf.maximum(tf.size(shape), tf.size(first))
  padded = [tf.pad(s, [[0, length - tf.size(s)]], constant_values=-1) for s in (shape, first)]
  return tf.equal(*padded)


def _empty(t):
  return tf.zeros([0] + [d or 0 for d in t.shape.as_list()] if t.shape.rank is not None
                  else [0], t.dtype)


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

  def run(n):
    first = [tf.shape(t) for t in row(0)]

    def body(i, *arrays):
      results = row(i)
      checks = [check(_same_shape(tf.shape(t), s), message) for t, s in zip(results, first)]
      with tf.control_dependencies(checks):
        return (i + 1,) + tuple(a.write(i, t) for a, t in zip(arrays, results))

    arrays = tuple(tf.TensorArray(t.dtype, size=n, element_shape=t.shape, infer_shape=False)
                   for t in outputs)
    arrays = tf.while_loop(lambda i, *_: i < n, body, (tf.constant(0),) + arrays,
                           parallel_iterations=_PARALLEL_ROWS)[1:]
    return [a.stack() for a in arrays]

  n = op.ctx.n
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

