"""Where the chunks of a chunked loop (`parallel_iterations`) put their outputs.

Concatenating a TensorArray of chunks holds the output twice at the end: once in the chunks,
once in the concatenation. Outside XLA each output is one buffer of its full shape instead,
allocated once, uninitialised, and every chunk writes its rows into it in place
(`InplaceUpdate` aliases its input: no copy). Under XLA, which plans its own buffers, and for
outputs whose per-iteration shape is known only at run time, chunks go to a TensorArray.
"""

import tensorflow as tf
from tensorflow.python.ops import gen_array_ops

from vectorize.values import merge_leading, shape_vector


def for_output(dtype, shape, n, chunk_size, xla):
  """The place for one output `[n] + shape`: a `RowBuffer` where it can be, else a
  `ChunkArray` (under XLA, `xla`, always)."""
  if shape.is_fully_defined() and not xla:
    return RowBuffer(dtype, shape, n)
  return ChunkArray(dtype, shape, n, chunk_size)


class RowBuffer:
  """The output's rows in one buffer, written in place chunk by chunk."""

  def __init__(self, dtype, shape, n):
    self.dtype, self.shape, self.n = dtype, shape, n

  def initial(self):
    return gen_array_ops.empty(shape_vector([self.n] + self.shape.as_list()), self.dtype,
                               init=False)

  def write(self, buffer, start, chunk):
    """`buffer` with rows `[start, start + len(chunk))` set to `chunk`."""
    return _write_rows(buffer, tf.range(start, start + tf.shape(chunk)[0]), chunk)

  def result(self, buffer):
    return buffer


class ChunkArray:
  """The output's chunks in a TensorArray, concatenated at the end."""

  def __init__(self, dtype, shape, n, chunk_size):
    self.chunk_size = chunk_size
    # A chunk's element shape, where known, lets the concat of no chunks (n = 0) be empty.
    self.array = tf.TensorArray(dtype, size=(n + chunk_size - 1) // chunk_size, infer_shape=False,
                                element_shape=tf.TensorShape([None]).concatenate(shape)
                                if shape.is_fully_defined() else None)

  def initial(self):
    return self.array

  def write(self, array, start, chunk):
    return array.write(start // self.chunk_size, chunk)

  def result(self, array):
    return array.concat()


class FullChunks:
  """The outputs of a fixed number of chunks of one static size (XLA's chunked loop): a
  TensorArray of `[chunk_size] + shape` chunks, stacked and merged into rows at the end."""

  def __init__(self, dtype, shape, num_chunks, chunk_size):
    self.array = tf.TensorArray(dtype, size=num_chunks,
                                element_shape=tf.TensorShape([chunk_size]).concatenate(shape))

  def initial(self):
    return self.array

  def write(self, array, k, chunk):
    return array.write(k, chunk)

  def result(self, array):
    return merge_leading(array.stack())


@tf.custom_gradient
def _write_rows(buffer, rows, chunk):
  """`buffer[rows] = chunk`, in place. Every row is written exactly once and the buffer
  starts uninitialised, so the buffer's cotangent passes through whole and the chunk's is
  its rows of it."""

  def gradient(upstream):
    return upstream, None, tf.gather(upstream, rows)

  return gen_array_ops.inplace_update(buffer, rows, chunk), gradient
