"""OpCases for converters/linalg.py.

Decompositions and solves get well-conditioned inputs from the generators below (SPD,
diagonally dominant, triangular with a strong diagonal), so float32 results agree within
1e-4. Decompositions whose factors are unique only up to column signs (Qr, Svd,
SelfAdjointEigV2) compare absolute values; XLA may pick other signs than the CPU kernels.
"""

import numpy as np
import tensorflow as tf

from tests import testing
from tests.converters.op_cases import OpCase

F = (tf.float32, tf.float64)
DECOMPOSITION_TOL = 1e-4


def _numpy_dtype(dtype):
  return tf.as_dtype(dtype).as_numpy_dtype


def _eye_like(shape):
  return np.broadcast_to(np.eye(shape[-2], shape[-1]), shape)


def well_conditioned(rng, shape, dtype):
  """Square matrices `3 I + 0.3 N(0, 1)`: invertible, determinants away from 0."""
  return (3 * _eye_like(shape) + 0.3 * rng.standard_normal(shape)).astype(_numpy_dtype(dtype))


def spd(rng, shape, dtype):
  """Symmetric positive definite matrices `a a^T + I`, for Cholesky and sqrtm."""
  a = rng.standard_normal(shape)
  return (a @ np.swapaxes(a, -1, -2) + _eye_like(shape)).astype(_numpy_dtype(dtype))


def symmetric(rng, shape, dtype):
  """Symmetric matrices `(a + a^T) / 2`: for eigh (eigenvalues distinct almost surely)."""
  a = rng.standard_normal(shape)
  return ((a + np.swapaxes(a, -1, -2)) / 2).astype(_numpy_dtype(dtype))


def lower_triangular(rng, shape, dtype):
  """Lower triangular matrices with diagonal in [2, 3): well-conditioned triangular solves."""
  a = np.tril(0.3 * rng.standard_normal(shape), -1)
  return (a + _eye_like(shape) * rng.uniform(2, 3, shape)).astype(_numpy_dtype(dtype))


def upper_triangular(rng, shape, dtype):
  return np.swapaxes(lower_triangular(rng, shape, dtype), -1, -2).copy()


def lower_bands(rng, shape, dtype):
  """Banded lower triangular `[..., K, M]`: row 0 is the diagonal, in [2, 3)."""
  a = 0.3 * rng.standard_normal(shape)
  a[..., 0, :] = rng.uniform(2, 3, shape[:-2] + [shape[-1]])
  return a.astype(_numpy_dtype(dtype))


def tridiagonal(rng, shape, dtype):
  """Compact tridiagonal `[..., 3, M]` (super, main, sub), diagonally dominant."""
  a = 0.5 * rng.standard_normal(shape)
  a[..., 1, :] = rng.uniform(3, 4, shape[:-2] + [shape[-1]])
  return a.astype(_numpy_dtype(dtype))


def near_identity_complex(rng, shape, dtype):
  """`I + 0.2 N(0, 1)` in complex: a principal logarithm exists."""
  return (_eye_like(shape) + 0.2 * testing.random_array(rng, shape, dtype)).astype(
      _numpy_dtype(dtype))


def band_bounds(rng, shape, dtype):
  """Band bounds in [-1, 2]: -1 keeps a whole triangle."""
  return rng.integers(-1, 3, shape).astype(_numpy_dtype(dtype))


def up_to_sign(tol=DECOMPOSITION_TOL):
  """Compares absolute values: factors are unique only up to the sign of each column."""

  def compare(actual, expected):
    testing.assert_allclose(tf.nest.map_structure(np.abs, actual),
                            tf.nest.map_structure(np.abs, expected), tol)

  return compare


def _cholesky_gradient(x, upstream):
  """The gradient of Cholesky (triangular solves, band part, set_diag), by a tape."""
  with tf.GradientTape() as tape:
    tape.watch(x)
    factor = tf.linalg.cholesky(x)
  return tape.gradient(factor, x, output_gradients=upstream)


def _solve_ls(a, b, l2_regularizer, fast=True):
  """The MatrixSolveLs op itself (tf.linalg.lstsq emits other ops for static shapes)."""
  return tf.raw_ops.MatrixSolveLs(matrix=a, rhs=b, fast=fast,
                                  l2_regularizer=tf.constant(l2_regularizer, tf.float64))


MATMUL_DTYPES = (tf.float32, tf.float64, tf.complex64, tf.int32)

CASES = [
    # MatMul: every transpose combination; complex checks transposes do not conjugate.
    OpCase("MatMul", tf.matmul, [[2, 3], [3, 4]], dtypes=MATMUL_DTYPES),
    OpCase("MatMul-transpose_a", lambda a, b: tf.matmul(a, b, transpose_a=True),
           [[3, 2], [3, 4]], dtypes=MATMUL_DTYPES),
    OpCase("MatMul-transpose_b", lambda a, b: tf.matmul(a, b, transpose_b=True),
           [[2, 3], [4, 3]], dtypes=MATMUL_DTYPES),
    OpCase("MatMul-transpose_ab",
           lambda a, b: tf.matmul(a, b, transpose_a=True, transpose_b=True),
           [[3, 2], [4, 3]], dtypes=MATMUL_DTYPES),
    # A matrix times one column (matvec): an invariant matrix is one 2-D MatMul over the
    # stacked columns.
    OpCase("MatMul-column", tf.matmul, [[2, 3], [3, 1]], dtypes=MATMUL_DTYPES),
    OpCase("MatMul-column_transpose_ab",
           lambda a, b: tf.matmul(a, b, transpose_a=True, transpose_b=True),
           [[3, 2], [1, 3]], dtypes=MATMUL_DTYPES),
    OpCase("MatMul-matvec", tf.linalg.matvec, [[4, 3], [3]], dtypes=F),
    OpCase("MatMul-tensordot", lambda a, b: tf.tensordot(a, b, axes=[[1], [0]]),
           [[2, 3, 4], [3, 5]], dtypes=F),
    # BatchMatMul family: equal batch dims, broadcast batch dims of several ranks, adjoints.
    OpCase("BatchMatMul", lambda x, y: tf.raw_ops.BatchMatMul(x=x, y=y),
           [[2, 2, 3], [2, 3, 4]], dtypes=F),
    OpCase("BatchMatMul-adjoint", lambda x, y: tf.raw_ops.BatchMatMul(x=x, y=y, adj_x=True,
                                                                      adj_y=True),
           [[2, 3, 2], [2, 4, 3]], dtypes=(tf.float32, tf.complex64)),
    OpCase("BatchMatMulV2", tf.matmul, [[2, 2, 3], [2, 3, 4]], dtypes=F + (tf.int32,)),
    OpCase("BatchMatMulV2-matrix_rhs", tf.matmul, [[2, 2, 3], [3, 4]], dtypes=F),
    OpCase("BatchMatMulV2-matrix_lhs", tf.matmul, [[2, 3], [2, 3, 4]], dtypes=F),
    OpCase("BatchMatMulV2-broadcast", tf.matmul, [[2, 1, 2, 3], [4, 3, 5]], dtypes=F),
    OpCase("BatchMatMulV2-adjoint_a", lambda x, y: tf.matmul(x, y, adjoint_a=True),
           [[2, 3, 2], [3, 4]], dtypes=(tf.float32, tf.complex64)),
    OpCase("BatchMatMulV2-adjoint_b", lambda x, y: tf.matmul(x, y, adjoint_b=True),
           [[2, 2, 3], [4, 3]], dtypes=(tf.float32, tf.complex64)),
    OpCase("BatchMatMulV3", lambda x, y: tf.raw_ops.BatchMatMulV3(x=x, y=y, Tout=x.dtype),
           [[2, 2, 3], [3, 4]], dtypes=F),
    OpCase("BatchMatMulV3-int8", lambda x, y: tf.raw_ops.BatchMatMulV3(x=x, y=y, Tout=tf.int32),
           [[2, 2, 3], [3, 4]], dtypes=(tf.int8,)),
    # Einsum: the loop subscript leads stacked operands and the output, before any ellipsis.
    OpCase("Einsum", lambda a, b: tf.einsum("ij,jk->ik", a, b), [[2, 3], [3, 4]], dtypes=F),
    OpCase("Einsum-batch", lambda a, b: tf.einsum("bij,bjk->bik", a, b),
           [[2, 2, 3], [2, 3, 4]]),
    OpCase("Einsum-ellipsis", lambda a, b: tf.einsum("...ij,...jk->...ik", a, b),
           [[2, 2, 3], [3, 4]], dtypes=F),
    OpCase("Einsum-ellipsis_right", lambda a, b: tf.einsum("i...,ij->j...", a, b),
           [[3, 2, 2], [3, 4]]),
    OpCase("Einsum-three", lambda a, b, c: tf.einsum("ij,jk,kl->il", a, b, c),
           [[2, 3], [3, 4], [4, 2]]),
    OpCase("Einsum-outer", lambda a, b: tf.einsum("i,j->ij", a, b), [[2], [3]]),
    OpCase("Einsum-transpose_sum", lambda a: tf.einsum("ijk->ki", a), [[2, 3, 4]]),
    OpCase("Einsum-diagonal", lambda a: tf.einsum("ii->i", a), [[3, 3]]),
    # Decompositions and inverses.
    OpCase("Cholesky", tf.linalg.cholesky, [[3, 3]], dtypes=F, make=[spd],
           tol=DECOMPOSITION_TOL),
    OpCase("Cholesky-batch", tf.linalg.cholesky, [[2, 3, 3]], make=[spd],
           tol=DECOMPOSITION_TOL),
    OpCase("Cholesky-gradient", _cholesky_gradient, [[3, 3], [3, 3]], dtypes=F,
           make=[spd, None], tol=DECOMPOSITION_TOL,
           op_types=("Cholesky", "MatrixTriangularSolve", "MatrixBandPart", "MatrixSetDiagV3")),
    OpCase("CholeskyGrad", lambda l, g: tf.raw_ops.CholeskyGrad(l=l, grad=g), [[3, 3], [3, 3]],
           dtypes=F, make=[lower_triangular, None], tol=DECOMPOSITION_TOL,
           xla="XLA has no CholeskyGrad kernel"),
    OpCase("Eig", tf.linalg.eigvals, [[3, 3]], dtypes=F, make=[spd], tol=DECOMPOSITION_TOL,
           xla="XLA has no Eig kernel"),
    OpCase("Lu", tf.linalg.lu, [[3, 3]], dtypes=F, make=[well_conditioned],
           tol=DECOMPOSITION_TOL, xla="XLA has no Lu kernel"),
    OpCase("MatrixDeterminant", tf.linalg.det, [[3, 3]], dtypes=F, make=[well_conditioned],
           tol=DECOMPOSITION_TOL, xla="XLA has no MatrixDeterminant kernel"),
    OpCase("LogMatrixDeterminant", tf.linalg.slogdet, [[3, 3]], dtypes=F,
           make=[well_conditioned], tol=DECOMPOSITION_TOL,
           xla="XLA has no LogMatrixDeterminant kernel"),
    OpCase("MatrixInverse", tf.linalg.inv, [[3, 3]], dtypes=F, make=[well_conditioned],
           tol=DECOMPOSITION_TOL),
    OpCase("MatrixInverse-adjoint", lambda a: tf.linalg.inv(a, adjoint=True), [[2, 3, 3]],
           make=[well_conditioned], tol=DECOMPOSITION_TOL),
    OpCase("MatrixLogarithm", tf.linalg.logm, [[3, 3]], dtypes=(tf.complex64, tf.complex128),
           make=[near_identity_complex], tol=DECOMPOSITION_TOL,
           xla="XLA has no MatrixLogarithm kernel"),
    OpCase("MatrixSquareRoot", tf.linalg.sqrtm, [[3, 3]], dtypes=F, make=[spd],
           tol=DECOMPOSITION_TOL, xla="XLA has no MatrixSquareRoot kernel"),
    OpCase("Qr", tf.linalg.qr, [[4, 3]], dtypes=F, tol=DECOMPOSITION_TOL,
           compare=up_to_sign()),
    OpCase("Qr-full_matrices", lambda a: tf.linalg.qr(a, full_matrices=True), [[2, 4, 3]],
           tol=DECOMPOSITION_TOL, compare=up_to_sign()),
    OpCase("SelfAdjointEigV2", tf.linalg.eigh, [[3, 3]], dtypes=F, make=[symmetric],
           tol=DECOMPOSITION_TOL, compare=up_to_sign()),
    OpCase("SelfAdjointEigV2-values", tf.linalg.eigvalsh, [[2, 3, 3]], make=[symmetric],
           tol=DECOMPOSITION_TOL),
    OpCase("Svd", tf.linalg.svd, [[4, 3]], dtypes=F, tol=DECOMPOSITION_TOL,
           compare=up_to_sign()),
    OpCase("Svd-values", lambda a: tf.linalg.svd(a, compute_uv=False), [[2, 3, 4]],
           tol=DECOMPOSITION_TOL),
    OpCase("Svd-full_matrices", lambda a: tf.linalg.svd(a, full_matrices=True), [[4, 3]],
           tol=DECOMPOSITION_TOL, compare=up_to_sign()),
    # Solves: stacked matrix, stacked rhs (loop axis in the columns), or both.
    OpCase("MatrixSolve", tf.linalg.solve, [[3, 3], [3, 2]], dtypes=F,
           make=[well_conditioned, None], tol=DECOMPOSITION_TOL),
    OpCase("MatrixSolve-adjoint_batch", lambda a, b: tf.linalg.solve(a, b, adjoint=True),
           [[2, 3, 3], [2, 3, 2]], make=[well_conditioned, None], tol=DECOMPOSITION_TOL),
    OpCase("MatrixSolveLs", lambda a, b: _solve_ls(a, b, 0.1), [[4, 3], [4, 2]], dtypes=F,
           tol=1e-3, xla="XLA has no MatrixSolveLs kernel"),
    OpCase("MatrixSolveLs-batch_slow", lambda a, b: _solve_ls(a, b, 0.0, fast=False),
           [[2, 4, 3], [2, 4, 2]], tol=1e-3, xla="XLA has no MatrixSolveLs kernel"),
    OpCase("MatrixTriangularSolve", tf.linalg.triangular_solve, [[3, 3], [3, 2]], dtypes=F,
           make=[lower_triangular, None], tol=DECOMPOSITION_TOL),
    OpCase("MatrixTriangularSolve-upper_adjoint",
           lambda a, b: tf.linalg.triangular_solve(a, b, lower=False, adjoint=True),
           [[3, 3], [3, 2]], make=[upper_triangular, None], tol=DECOMPOSITION_TOL),
    OpCase("MatrixTriangularSolve-broadcast_rhs", tf.linalg.triangular_solve,
           [[3, 3], [2, 3, 2]], make=[lower_triangular, None], tol=DECOMPOSITION_TOL),
    OpCase("MatrixTriangularSolve-broadcast_matrix", tf.linalg.triangular_solve,
           [[2, 3, 3], [3, 2]], make=[lower_triangular, None], tol=DECOMPOSITION_TOL),
    OpCase("BandedTriangularSolve", tf.linalg.banded_triangular_solve, [[2, 3], [3, 2]],
           dtypes=F, make=[lower_bands, None], tol=DECOMPOSITION_TOL,
           xla="XLA has no BandedTriangularSolve kernel"),
    OpCase("BandedTriangularSolve-broadcast", tf.linalg.banded_triangular_solve,
           [[2, 2, 3], [3, 2]], make=[lower_bands, None], tol=DECOMPOSITION_TOL,
           xla="XLA has no BandedTriangularSolve kernel"),
    OpCase("TridiagonalSolve",
           lambda d, b: tf.linalg.tridiagonal_solve(d, b, partial_pivoting=False),
           [[3, 4], [4, 2]], dtypes=F, make=[tridiagonal, None], tol=DECOMPOSITION_TOL),
    OpCase("TridiagonalSolve-pivoting", tf.linalg.tridiagonal_solve, [[2, 3, 4], [2, 4, 2]],
           make=[tridiagonal, None], tol=DECOMPOSITION_TOL,
           xla="XLA's TridiagonalSolve does not support partial pivoting"),
    OpCase("TridiagonalMatMul",
           lambda sup, main, sub, b: tf.raw_ops.TridiagonalMatMul(superdiag=sup, maindiag=main,
                                                                  subdiag=sub, rhs=b),
           [[1, 3], [1, 3], [1, 3], [3, 2]], dtypes=F),
    # Diagonal and band ops.
    OpCase("MatrixDiagV3", tf.linalg.diag, [[3]], dtypes=F + (tf.int32,)),
    OpCase("MatrixDiagV3-band",
           lambda d: tf.linalg.diag(d, k=(-1, 1), num_rows=4, num_cols=5, padding_value=7,
                                    align="LEFT_RIGHT"),
           [[3, 4]], dtypes=F),
    OpCase("MatrixDiagPartV3", tf.linalg.diag_part, [[3, 4]], dtypes=F + (tf.int32,)),
    OpCase("MatrixDiagPartV3-band",
           lambda a: tf.linalg.diag_part(a, k=(-1, 1), padding_value=9), [[2, 3, 4]], dtypes=F),
    OpCase("MatrixDiagPartV3-trace", tf.linalg.trace, [[3, 3]], dtypes=F,
           op_types=("MatrixDiagPartV3",)),
    OpCase("MatrixSetDiagV3", tf.linalg.set_diag, [[3, 4], [3]], dtypes=F + (tf.int32,)),
    OpCase("MatrixSetDiagV3-band", lambda a, d: tf.linalg.set_diag(a, d, k=(0, 1)),
           [[2, 3, 4], [2, 2, 3]], dtypes=F),
    OpCase("MatrixDiag", lambda d: tf.raw_ops.MatrixDiag(diagonal=d), [[2, 3]]),
    OpCase("MatrixDiagPart", lambda a: tf.raw_ops.MatrixDiagPart(input=a), [[3, 4]]),
    OpCase("MatrixSetDiag", lambda a, d: tf.raw_ops.MatrixSetDiag(input=a, diagonal=d),
           [[3, 4], [3]]),
    OpCase("MatrixDiagV2",
           lambda d: tf.raw_ops.MatrixDiagV2(diagonal=d, k=1, num_rows=-1, num_cols=-1,
                                             padding_value=0.0),
           [[3]]),
    OpCase("MatrixDiagPartV2",
           lambda a: tf.raw_ops.MatrixDiagPartV2(input=a, k=[-1, 0], padding_value=5.0),
           [[3, 4]]),
    OpCase("MatrixSetDiagV2",
           lambda a, d: tf.raw_ops.MatrixSetDiagV2(input=a, diagonal=d, k=-1), [[3, 4], [2]]),
    OpCase("MatrixBandPart", tf.linalg.band_part, [[3, 4], [], []],
           dtypes=[(tf.float32, tf.int64, tf.int64), (tf.float64, tf.int32, tf.int32)],
           make=[None, band_bounds, band_bounds]),
    OpCase("MatrixBandPart-batch", tf.linalg.band_part, [[2, 4, 3], [], []],
           dtypes=[(tf.float32, tf.int64, tf.int64)], make=[None, band_bounds, band_bounds]),
    OpCase("Cross", tf.linalg.cross, [[3], [3]], dtypes=F),
    OpCase("Cross-batch", tf.linalg.cross, [[2, 3], [2, 3]]),
]
