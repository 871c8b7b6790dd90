"""Ragged converters for the ops of model layers on a value of per-iteration length (a
sequence of tokens, rows of a padded batch cut to their length): projections of each row
(matmul, einsum, bias), and ops within each iteration's rows (softmax, argmax, sorts,
one-hot). Over a later axis they run on the flat values as they are; over the ragged axis
they work per iteration through the row ids (`ragged_consumers.segment_reduce`).
"""

import tensorflow as tf

from converters import ragged_consumers
from vectorize import ragged
from vectorize import values
from vectorize.errors import Unvectorizable
from vectorize.values import stacked


@ragged.register("BiasAdd")
def _convert_bias_add(op):
  """The channel axis keeps its index in the flat values, in either data format."""
  if op.is_stacked(1):
    raise Unvectorizable("a per-iteration bias added to a value of per-iteration size")
  rows = op.value(0).tensor
  return ragged.same_rows(op.rebuild([rows.values, op.invariant(1)])[0], rows)


@ragged.register("Softmax", "LogSoftmax")
def _convert_softmax(op):
  """Over a later axis: on the flat values. Over the ragged axis itself (a vector of
  per-iteration length, attention weights over a sequence): normalized per iteration."""
  rows = op.value(0).tensor
  x = rows.values
  if values.rank(x) > 1:
    return ragged.same_rows(op.rebuild([x])[0], rows)
  shifted = x - tf.gather(ragged_consumers.segment_reduce("Max", x, rows.row_ids, op.ctx.n), rows.row_ids)
  totals = tf.gather(ragged_consumers.segment_reduce("Sum", tf.exp(shifted), rows.row_ids, op.ctx.n),
                     rows.row_ids)
  if op.type == "LogSoftmax":
    return ragged.same_rows(shifted - tf.math.log(totals), rows)
  return ragged.same_rows(tf.exp(shifted) / totals, rows)


@ragged.register("ArgMax", "ArgMin")
def _convert_arg_max(op):
  """Along a later axis: on the flat values. Along the ragged axis: each iteration's first
  row holding its extreme value (the segment's max or min), as the kernel picks it."""
  rows = op.value(0).tensor
  x = rows.values
  axis = int(op.static_value(1)) % values.rank(x)
  if axis:
    return ragged.same_rows(op.rebuild([x, op.invariant(1)])[0], rows)
  nonempty = tf.debugging.Assert(tf.reduce_all(rows.row_lengths > 0), [
      f"vectorize: {op.op.name}: an {op.type} over an empty axis in some iteration"])
  n, ids = op.ctx.n, rows.row_ids
  extreme = ragged_consumers.segment_reduce("Max" if op.type == "ArgMax" else "Min", x, ids, n)
  positions = values.expand_after_loop_axis(rows.positions, values.rank(x) - 1)
  candidates = tf.where(tf.equal(x, tf.gather(extreme, ids)), positions, tf.int32.max)
  with tf.control_dependencies([nonempty]):
    first = tf.math.unsorted_segment_min(candidates, ids, n)
  return stacked(tf.cast(first, op.attr("output_type")))


@ragged.register("OneHot")
def _convert_one_hot(op):
  """Indices of per-iteration length, the new axis last: on the flat indices."""
  rows = op.value(0).tensor
  axis = op.attr("axis")
  if axis not in (-1, values.rank(rows.values)):
    raise Unvectorizable("a one-hot axis before the axis of per-iteration size")
  if any(op.is_stacked(k) for k in (1, 2, 3)):
    raise Unvectorizable("a per-iteration depth or value of a one-hot of per-iteration size")
  args = [rows.values] + [op.invariant(k) for k in (1, 2, 3)]
  return ragged.same_rows(op.rebuild(args)[0], rows)


@ragged.register("Einsum")
def _convert_einsum(op):
  """A ragged first operand whose first (ragged) axis is the output's first and no other
  operand's (a projection of each row, as Keras' EinsumDense): the same equation on the
  flat values."""
  equation = op.attr("equation").decode()
  inputs, output = equation.replace(" ", "").split("->")
  subscripts = inputs.split(",")
  if (not ragged.is_ragged(op.value(0)) or "." in equation or not subscripts[0] or
      not output or subscripts[0][0] != output[0] or
      any(subscripts[0][0] in s for s in subscripts[1:]) or subscripts[0][0] in subscripts[0][1:]):
    raise Unvectorizable("an einsum mixing the axis of per-iteration size with others")
  if any(op.is_stacked(k) for k in range(1, len(subscripts))):
    raise Unvectorizable("an einsum of a value of per-iteration size and a per-iteration one")
  rows = op.value(0).tensor
  args = [rows.values] + [op.invariant(k) for k in range(1, len(subscripts))]
  return ragged.same_rows(op.rebuild(args)[0], rows)


@ragged.register("TopKV2")
def _convert_top_k(op):
  """Along a later axis: on the flat values. Along the ragged axis (tf.sort, tf.argsort or
  top_k of a vector of per-iteration length): all iterations ordered at once, by iteration
  and then by value (both stable, so ties keep the lower index first, as the kernel does),
  and each iteration's first k kept."""
  rows = op.value(0).tensor
  x = rows.values
  if values.rank(x) > 1:
    if op.is_stacked(1):
      raise Unvectorizable("a per-iteration k along a later axis of a value of "
                           "per-iteration size")
    return [ragged.same_rows(t, rows) for t in op.rebuild([x, op.invariant(1)])]
  k = tf.cast(op.value(1).tensor, tf.int32) + tf.zeros_like(rows.row_lengths)
  fits = tf.debugging.Assert(tf.reduce_all(k <= rows.row_lengths), [
      f"vectorize: {op.op.name}: k larger than the vector's size in some iteration"])
  by_value = tf.argsort(x, direction="DESCENDING", stable=True)
  order = tf.gather(by_value, tf.argsort(tf.gather(rows.row_ids, by_value), stable=True))
  with tf.control_dependencies([fits]):
    out = ragged.RaggedRows(x[:0], tf.identity(k))
  source = tf.gather(order, tf.gather(rows.row_starts, out.row_ids) + out.positions)
  index = tf.cast(tf.gather(rows.positions, source), op.op.outputs[1].dtype)
  return [ragged.ragged(tf.gather(x, source), out.row_lengths),
          ragged.ragged(index, out.row_lengths)]


@ragged.register("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
def _convert_matmul(op):
  """A ragged left operand's rows times a right matrix (a Dense layer on a sequence of
  per-example length): one matmul on the flat rows. The right matrix, invariant, is used as
  is; stacked, each flat row meets its iteration's matrix."""
  x, y = op.value(0), op.value(1)
  transpose_x = op.attr("transpose_a") if op.type == "MatMul" else op.attr("adj_x")
  transpose_y = op.attr("transpose_b") if op.type == "MatMul" else op.attr("adj_y")
  if not ragged.is_ragged(x) or ragged.is_ragged(y) or transpose_x:
    raise Unvectorizable("a matmul that sums over the axis of per-iteration size")
  rows = x.tensor
  if values.rank(rows.values) != 2 or values.rank(y.tensor) != 2 + y.stacked:
    raise Unvectorizable("a batched matmul of a value of per-iteration size")
  if y.dtype.is_complex and transpose_y and op.type != "MatMul":
    y = values.Value(tf.math.conj(y.tensor), y.stacked)
  if not y.stacked:
    return ragged.same_rows(tf.matmul(rows.values, y.tensor, transpose_b=transpose_y), rows)
  matrices = tf.gather(y.tensor, rows.row_ids)                  # [total, k, p]
  product = tf.matmul(rows.values[:, None, :], matrices, transpose_b=transpose_y)
  return ragged.same_rows(product[:, 0, :], rows)
