"""Linear algebra: matmul family, einsum, decompositions, solves, diagonal and band ops.

The trick: almost every linalg op takes leading batch dims, and the loop axis is one more of
them. Where two operands meet, the invariant one keeps its own shape and is broadcast
(BatchMatMulV2 and the triangular solves broadcast batch dims) rather than tiled; and where
the invariant operand is the expensive side, the loop axis is folded into the stacked
operand's rows or columns so the op runs once: `x_i @ W` is one 2-D MatMul on `[n*m, k]`,
and `solve(A, B_i)` factors A once for `[M, n*K]` right-hand sides.
"""

import string

import tensorflow as tf

from vectorize import graph_io
from vectorize.errors import Unvectorizable
from vectorize.family import register_elementwise, register_leading_batch
from vectorize.registry import register
from vectorize.values import (dynamic_shape, expand_after_loop_axis, invariant, product,
                              rank, reshape, stacked)


def _fold_rows_matmul(x, w, transpose_w):
  """Stacked `x` times an invariant matrix, as one 2-D MatMul over all rows.

  `[n, ..., m, k] -> [n*...*m, k]`, times `w` (`[k, p]`, or `[p, k]` if `transpose_w`),
  `-> [n, ..., m, p]`.
  """
  shape = dynamic_shape(x)
  out = graph_io.matmul(reshape(x, [product(shape[:-1]), shape[-1]]), w,
                        transpose_b=transpose_w)
  return reshape(out, shape[:-1] + [dynamic_shape(out)[-1]])


def _batch_matmul(x, y, transpose_x, transpose_y):
  """`x @ y` with transposes (not adjoints) of the last two dims, batch dims broadcast.

  BatchMatMulV2's adj flags also conjugate, so complex operands are conjugated first.
  """
  if transpose_x and x.dtype.is_complex:
    x = tf.math.conj(x)
  if transpose_y and y.dtype.is_complex:
    y = tf.math.conj(y)
  return graph_io.batch_matmul(x, y, adj_x=transpose_x, adj_y=transpose_y)


@register("MatMul")
def _convert_mat_mul(op):
  """Stacked a, invariant b: one 2-D MatMul on `[n*m, k]`; else a broadcasting batch matmul.

  Invariant a against stacked b stays a batch matmul: a 2-D form would need the loop axis
  moved into b's columns and back, two transposes of the stacked data, while BatchMatMulV2
  broadcasts a without copying it.
  """
  a, b = op.value(0), op.value(1)
  transpose_a, transpose_b = op.attr("transpose_a"), op.attr("transpose_b")
  if not b.stacked:
    x = tf.transpose(a.tensor, [0, 2, 1]) if transpose_a else a.tensor  # [n, k, m] -> [n, m, k]
    return stacked(_fold_rows_matmul(x, b.tensor, transpose_b))
  if not a.stacked and op.input_shape(1)[0 if transpose_b else 1] == 1:
    return stacked(_matrix_times_vectors(a.tensor, b.tensor, transpose_a))
  return stacked(_batch_matmul(a.tensor, b.tensor, transpose_a, transpose_b))


def _matrix_times_vectors(a, b, transpose_a):
  """An invariant matrix times a stacked column (`tf.linalg.matvec(W, h)`): the columns are
  the rows of one 2-D MatMul, `[n, k] @ a^T -> [n, m]`, with no data moved. As a batch matmul
  it was n matrix-vector products: 5x the time of one MatMul on a 128 x 128 matrix."""
  shape = dynamic_shape(b)                       # [n, k, 1] or [n, 1, k]
  n = shape[0]
  rows = reshape(b, [n, product(shape[1:])])     # [n, k]
  out = graph_io.matmul(rows, a, transpose_b=not transpose_a)     # [n, m]
  return tf.expand_dims(out, -1)


@register("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
def _convert_batch_mat_mul(op):
  """Broadcasts batch dims, so an invariant operand is never tiled.

  A stacked x against an invariant matrix y (rank 2, no adjoint on x) is one 2-D MatMul over
  all rows of x. BatchMatMul (V1) does not broadcast, so it becomes BatchMatMulV2, as does
  V3 of one dtype (graph_io.batch_matmul steers clear of a oneDNN kernel bug).
  """
  x, y = op.value(0), op.value(1)
  adj_x, adj_y = op.attr("adj_x"), op.attr("adj_y")
  same_dtype = x.dtype == y.dtype == op.op.outputs[0].dtype
  known_rank = x.tensor.shape.rank is not None
  if not y.stacked and not adj_x and y.tensor.shape.rank == 2 and same_dtype and known_rank:
    w = tf.math.conj(y.tensor) if adj_y and y.dtype.is_complex else y.tensor
    return stacked(_fold_rows_matmul(x.tensor, w, adj_y))
  xs, ys = op.align_for_broadcast()
  if op.type == "BatchMatMulV3" and not same_dtype:
    return stacked(op.rebuild([xs, ys])[0])
  return stacked(graph_io.batch_matmul(xs, ys, adj_x, adj_y))


@register("Einsum", "XlaEinsum")
def _convert_einsum(op):
  """Gives the stacked operands a fresh leading subscript, which also leads the output.

  The new subscript goes before any ellipsis, so `...` still broadcasts the per-iteration
  batch dims: `...ij,jk->...ik` with a stacked first operand becomes `a...ij,jk->a...ik`.
  """
  equation = op.attr("equation").decode().replace(" ", "")
  if "->" not in equation:
    raise Unvectorizable(f"einsum equation {equation!r} has no explicit output")
  operands, output = equation.split("->")
  free = [c for c in string.ascii_letters if c not in equation]
  if not free:
    raise Unvectorizable(f"einsum equation {equation!r} uses every subscript letter")
  loop = free[0]
  subscripts = [loop + s if op.is_stacked(i) else s for i, s in enumerate(operands.split(","))]
  new_equation = ",".join(subscripts) + "->" + loop + output
  return stacked(op.rebuild([v.tensor for v in op.inputs], {"equation": new_equation})[0])


def _solve_with_loop_in_columns(rhs, solve):
  """Solves for a stacked rhs against an invariant matrix with one call of `solve`.

  The loop axis moves into the columns, `[n, b..., M, K] -> [b..., M, n*K]`, so the matrix
  is factored once; the solution `[b..., N, n*K]` goes back to `[n, b..., N, K]`.
  """
  r = rank(rhs)
  shape = dynamic_shape(rhs)
  n, k = shape[0], shape[-1]
  moved = tf.transpose(rhs, list(range(1, r - 1)) + [0, r - 1])  # [b..., M, n, K]
  solution = solve(reshape(moved, shape[1:-1] + [n * k]))
  solution = reshape(solution, dynamic_shape(solution)[:-1] + [n, k])  # [b..., N, n, K]
  return tf.transpose(solution, [r - 2] + list(range(r - 2)) + [r - 1])


@register("MatrixSolve", "MatrixSolveLs", "TridiagonalSolve")
def _convert_solve(op):
  """Invariant matrix: one solve with the loop axis in the rhs columns (one factorization).

  A stacked matrix needs a stacked rhs (tiled if invariant): these ops do not broadcast.
  """
  rest = [op.invariant(i) for i in range(2, op.num_inputs)]
  if not op.is_stacked(0) and op.value(1).tensor.shape.rank is not None:
    matrix = op.value(0).tensor
    return stacked(_solve_with_loop_in_columns(
        op.value(1).tensor, lambda rhs: op.rebuild([matrix, rhs] + rest)[0]))
  return stacked(op.rebuild([op.stacked(0), op.stacked(1)] + rest)[0])


@register("MatrixBandPart")
def _convert_matrix_band_part(op):
  """Invariant bounds: the op on the stacked input. Stacked bounds: a band mask per iteration.

  The mask keeps entry (i, j) where `i - j <= lower` and `j - i <= upper` (a negative bound
  keeps the whole triangle), shaped `[n, 1, ..., 1, M, N]` to broadcast against the input.
  """
  x, lower, upper = op.value(0), op.value(1), op.value(2)
  if not lower.stacked and not upper.stacked:
    return stacked(op.rebuild([x.tensor, lower.tensor, upper.tensor])[0])
  if x.tensor.shape.rank is None:
    raise Unvectorizable("stacked band bounds need an input of known rank")
  per_iteration_rank = rank(x.tensor) - (1 if x.stacked else 0)
  shape = tf.shape(x.tensor, out_type=tf.int64)
  below = tf.range(shape[-2])[:, None] - tf.range(shape[-1])[None, :]  # i - j, [M, N]

  def bound(v):  # -> a scalar, or [n, 1, ..., 1] with per_iteration_rank unit dims
    t = tf.cast(v.tensor, tf.int64)
    return expand_after_loop_axis(t, per_iteration_rank) if v.stacked else t

  lo, hi = bound(lower), bound(upper)
  keep = tf.logical_and(tf.logical_or(lo < 0, below <= lo), tf.logical_or(hi < 0, -below <= hi))
  return stacked(tf.where(keep, x.tensor, tf.zeros([], x.dtype)))


@register("Eig", "SelfAdjointEigV2", "Svd")
def _convert_decomposition(op):
  """Leading batch dims; vector outputs left empty (`[0]`, not computed) stay invariant."""
  outputs = op.rebuild([op.stacked(0)])
  computes_vectors = op.attr("compute_uv" if op.type == "Svd" else "compute_v")
  return [stacked(outputs[0])] + [stacked(t) if computes_vectors else invariant(t)
                                  for t in outputs[1:]]


@register("MatrixSetDiag", "MatrixSetDiagV2", "MatrixSetDiagV3")
def _convert_matrix_set_diag(op):
  """Selects, by a band mask, between the input and the diagonals laid out as a matrix.

  The select broadcasts, so neither operand is tiled; and it avoids MatrixSetDiagV3's shape
  function, which rejects a band `k` when the input's leading dim is unknown.
  """
  x, diagonal = op.value(0), op.value(1)
  k = op.invariant(2) if op.num_inputs > 2 else tf.constant(0)
  align = op.attr("align") if op.type == "MatrixSetDiagV3" else "LEFT_LEFT"  # V2 packs left
  shape = dynamic_shape(x.tensor)
  rows, cols = shape[-2], shape[-1]
  matrix = tf.raw_ops.MatrixDiagV3(diagonal=diagonal.tensor, k=k, num_rows=rows, num_cols=cols,
                                   padding_value=tf.zeros([], x.dtype), align=align)
  offset = tf.range(cols)[None, :] - tf.range(rows)[:, None]  # j - i, [M, N]
  band = tf.logical_and(offset >= tf.reduce_min(k), offset <= tf.reduce_max(k))
  return stacked(tf.where(band, matrix, x.tensor))


@register("BandedTriangularSolve")
def _convert_banded_triangular_solve(op):
  """Broadcasts batch dims; skipped when n is 0, as the CPU kernel rejects empty operands.

  Not `rejects_empty`: its padded iteration would solve a zero (or a given invariant)
  matrix, which the kernel rejects as singular, so n = 0 emits the empty result instead.
  """
  bands, rhs = op.align_for_broadcast()
  if op.ctx.static_n is not None and op.ctx.static_n > 0:
    return stacked(op.rebuild([bands, rhs])[0])
  shape = op.output_shape(0)
  if not shape.is_fully_defined():
    raise Unvectorizable("the per-iteration output shape must be static when n may be 0")
  empty = tf.zeros([0] + shape.as_list(), op.op.outputs[0].dtype)
  if op.ctx.static_n == 0:
    return stacked(empty)
  return stacked(tf.cond(op.ctx.n > 0, lambda: op.rebuild([bands, rhs])[0], lambda: empty))


# The registration table. Leading batch dims: inputs that vary take the loop axis as one
# more batch dim (operands that must match are tiled); the triangular solve broadcasts batch
# dims between its operands, exactly as elementwise ops broadcast.
register_elementwise("MatrixTriangularSolve")
register_leading_batch(
    "Cholesky",
    "LogMatrixDeterminant",
    "Lu",
    "MatrixDeterminant",
    "MatrixDiag",
    "MatrixDiagPart",
    "MatrixDiagPartV2",
    "MatrixDiagPartV3",
    "MatrixDiagV2",
    "MatrixDiagV3",
    "MatrixInverse",
    "MatrixLogarithm",
    "MatrixSquareRoot",
    "Qr",
)
register_leading_batch("CholeskyGrad", "Cross", batch_inputs=(0, 1))
register_leading_batch("TridiagonalMatMul", batch_inputs=(0, 1, 2, 3))
