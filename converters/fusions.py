"""Rewrites that look past one op: sums of per-iteration matrix products as one contraction.

A per-example weight gradient is a sum over uses of the weight (e.g. over the time steps of
an RNN) of `matmul(a_t, b_t, transpose_a=True)`. Converted one op at a time, each term is its
own `[n, i, j]` batch matmul, and the sum adds T of them: memory-bound and T times the
traffic. But a sum of products is one product of concatenations: `sum_t a_t^T b_t =
[a_1; ...; a_T]^T [b_1; ...; b_T]`, each operand concatenated along its contracted axis. The
AddN converter asks `sum_of_matmuls` first; the per-term matmuls it no longer needs are
dead code, pruned when the graph runs.
"""

import tensorflow as tf

from vectorize.values import stacked


def sum_of_matmuls(op):
  """One batch matmul for AddN of MatMuls with equal flags and stacked operands, or None."""
  producers = [t.op for t in op.op.inputs]
  if len(producers) < 2 or any(p.type != "MatMul" for p in producers):
    return None
  flags = {(p.get_attr("transpose_a"), p.get_attr("transpose_b")) for p in producers}
  if len(flags) != 1:
    return None
  transpose_a, transpose_b = flags.pop()
  operands = [[op.converted(p.inputs[0]), op.converted(p.inputs[1])] for p in producers]
  if any(v is None or not v.stacked for pair in operands for v in pair):
    return None
  # Per-iteration contracted axes: a's rows if transposed else its columns; b's the other way.
  a = tf.concat([pair[0].tensor for pair in operands], axis=1 if transpose_a else 2)
  b = tf.concat([pair[1].tensor for pair in operands], axis=2 if transpose_b else 1)
  return stacked(tf.linalg.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b))
