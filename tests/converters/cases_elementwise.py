"""OpCases for converters/elementwise.py.

Binary cases rotate through per-iteration shape pairs of different ranks ([2, 3] vs [3],
[] vs [2, 3], [2, 1] vs [3], ...) so that every broadcasting combination meets every
stacking pattern somewhere.
"""

import numpy as np
import tensorflow as tf

from tests.converters.op_cases import (OpCase, indices_below, nonzero_ints, positive,
                                       unit_interval)

F32, F64, I32, I64, U8 = tf.float32, tf.float64, tf.int32, tf.int64, tf.uint8
C64, C128, BOOL, STR = tf.complex64, tf.complex128, tf.bool, tf.string
FLOATS = (F32, F64)

MATRIX_ROW = [[2, 3], [3]]
ROW_MATRIX = [[3], [2, 3]]
SCALAR_MATRIX = [[], [2, 3]]
MATRIX_SCALAR = [[2, 3], []]
COLUMN_ROW = [[2, 1], [3]]
SAME = [[2, 3], [2, 3]]
RANK3_COLUMN = [[2, 1, 3], [2, 1]]

NO_XLA_KERNEL = "XLA has no kernel for this op"


def _np(dtype):
  return tf.as_dtype(dtype).as_numpy_dtype


def above_one(rng, shape, dtype):
  """Values in [1.1, 3): for acosh and the zeta exponent."""
  return rng.uniform(1.1, 3.0, shape).astype(_np(dtype))


def probabilities(rng, shape, dtype):
  """Values in [0.05, 0.95]: for ndtri and betainc."""
  return rng.uniform(0.05, 0.95, shape).astype(_np(dtype))


def negative(rng, shape, dtype):
  """Values in [-1.5, -0.5): lower clip bounds."""
  return rng.uniform(-1.5, -0.5, shape).astype(_np(dtype))


def with_specials(rng, shape, dtype):
  """Normal values with about a third replaced by nan, inf or -inf."""
  x = rng.standard_normal(shape)
  pick = rng.integers(0, 9, shape)
  x = np.where(pick == 0, np.nan, np.where(pick == 1, np.inf, np.where(pick == 2, -np.inf, x)))
  return x.astype(_np(dtype))


def some_zeros(rng, shape, dtype):
  """Normal values (small ints for integer dtypes) with about a third set to zero."""
  x = rng.standard_normal(shape) if tf.as_dtype(dtype).is_floating else rng.integers(1, 6,
                                                                                       shape)
  return np.where(rng.integers(0, 3, shape) == 0, 0, x).astype(_np(dtype))


def nonzero_signed(rng, shape, dtype):
  """Integers in [-5, -1] and [1, 5]: divisors whose sign matters (floor vs truncate)."""
  x = rng.integers(1, 6, shape) * np.where(rng.random(shape) < 0.5, -1, 1)
  return x.astype(_np(dtype))


def small_orders(rng, shape, dtype):
  """Whole numbers 0..3 as floats: polygamma orders."""
  return rng.integers(0, 4, shape).astype(_np(dtype))


def _unary(name, fn, dtypes=FLOATS, make=None, shape=(2, 3), **kwargs):
  return OpCase(name, fn, [list(shape)], dtypes=dtypes, make=[make] if make else None,
                **kwargs)


def _binary(name, fn, shapes, dtypes=FLOATS, make=None, **kwargs):
  return OpCase(name, fn, shapes, dtypes=dtypes, make=make, **kwargs)


def _vjp(f):
  """builder(x, dy): the gradient of f at x against the output gradient dy."""

  def build(x, dy):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = f(x)
    return tape.gradient(y, x, output_gradients=dy)

  return build


def _special(name, fn, make=None, tol=1e-4):
  return _unary(name, fn, make=make, tol=tol, xla=NO_XLA_KERNEL)


UNARY_CASES = [
    OpCase("Abs", tf.abs, [[2, 3]], dtypes=[F32, I32, I64]),
    _unary("Acos", tf.math.acos, make=unit_interval),
    _unary("Acosh", tf.math.acosh, make=above_one),
    _unary("Angle", tf.math.angle, dtypes=(C64, C128)),
    _unary("Asin", tf.math.asin, make=unit_interval),
    _unary("Asinh", tf.math.asinh),
    _unary("Atan", tf.math.atan, shape=()),
    _unary("Atanh", tf.math.atanh, make=unit_interval),
    _unary("BesselI0e", tf.math.special.bessel_i0e),
    _unary("BesselI1e", tf.math.special.bessel_i1e),
    _unary("Bucketize", lambda x: tf.raw_ops.Bucketize(input=x, boundaries=[-1.0, 0.0, 0.5]),
           dtypes=(F32, I32)),
    _unary("Cast-float_to_int", lambda x: tf.cast(x * 4, tf.int32), op_types=("Cast",)),
    _unary("Cast-int_to_float", lambda x: tf.cast(x, tf.float32), dtypes=(I32, I64),
           op_types=("Cast",)),
    _unary("Cast-to_bool", lambda x: tf.cast(x, tf.bool), dtypes=(I32, F32),
           make=indices_below(2), op_types=("Cast",)),
    _unary("Cast-from_bool", lambda x: tf.cast(x, tf.float64), dtypes=(BOOL,),
           op_types=("Cast",)),
    _unary("Cast-to_complex", lambda x: tf.cast(x, tf.complex64), shape=(),
           op_types=("Cast",)),
    _unary("Cast-truncate", lambda x: tf.raw_ops.Cast(x=x, DstT=tf.float16, Truncate=True),
           dtypes=(F32,), op_types=("Cast",)),
    _unary("Ceil", tf.math.ceil),
    _unary("ComplexAbs", tf.abs, dtypes=(C64, C128)),
    _unary("Conj", tf.math.conj, dtypes=(C64, C128)),
    _unary("Cos", tf.math.cos, dtypes=(F32, F64, C64)),
    _unary("Cosh", tf.math.cosh, dtypes=(F32, F64, C64)),
    _unary("Digamma", tf.math.digamma, make=positive, tol=1e-4),
    _unary("Elu", tf.nn.elu),
    _unary("Erf", tf.math.erf),
    _unary("Erfc", tf.math.erfc),
    _unary("Erfinv", tf.math.erfinv, make=unit_interval, tol=1e-4),
    _unary("Exp", tf.math.exp, dtypes=(F32, F64, C64)),
    _unary("Expm1", tf.math.expm1, shape=(4,)),
    _unary("FakeQuantWithMinMaxArgs",
           lambda x: tf.quantization.fake_quant_with_min_max_args(x, -1.0, 1.5, num_bits=4),
           dtypes=(F32,)),
    _unary("Floor", tf.math.floor),
    _unary("Imag", tf.math.imag, dtypes=(C64, C128)),
    _unary("Inv", lambda x: tf.raw_ops.Inv(x=x), make=positive),
    _unary("Invert", tf.bitwise.invert, dtypes=(I32, I64, U8)),
    _unary("IsFinite", tf.math.is_finite, make=with_specials),
    _unary("IsInf", tf.math.is_inf, make=with_specials),
    _unary("IsNan", tf.math.is_nan, make=with_specials),
    _unary("LeakyRelu", lambda x: tf.nn.leaky_relu(x, alpha=0.3)),
    _unary("Lgamma", tf.math.lgamma, tol=1e-4),
    _unary("Log", tf.math.log, dtypes=(F32, F64, C64), make=positive),
    _unary("Log1p", tf.math.log1p, make=positive),
    _unary("LogicalNot", tf.math.logical_not, dtypes=(BOOL,)),
    _unary("Ndtri", tf.math.ndtri, make=probabilities, tol=1e-4),
    _unary("Neg", tf.negative, dtypes=(F32, I32, C64)),
    _unary("PopulationCount", lambda x: tf.raw_ops.PopulationCount(x=x),
           dtypes=(I32, I64, U8)),
    _unary("Real", tf.math.real, dtypes=(C64, C128)),
    _unary("Reciprocal", tf.math.reciprocal, dtypes=(F32, F64, C64), make=positive),
    _unary("Relu", tf.nn.relu, dtypes=(F32, F64, I32)),
    _unary("Relu6", lambda x: tf.nn.relu6(x * 4), dtypes=(F32, I32)),
    _unary("Rint", lambda x: tf.math.rint(x * 2)),
    _unary("Round", lambda x: tf.math.round(x * 2), dtypes=(F32, F64, I32)),
    _unary("Rsqrt", tf.math.rsqrt, make=positive),
    _unary("Selu", tf.nn.selu),
    _unary("Sigmoid", tf.math.sigmoid, dtypes=(F32, F64, C64)),
    _unary("Sign", tf.math.sign, dtypes=(F32, I32, C64)),
    _unary("Sin", tf.math.sin, dtypes=(F32, F64, C64)),
    _unary("Sinh", tf.math.sinh, dtypes=(F32, F64, C64)),
    _unary("Softplus", tf.math.softplus),
    _unary("Softsign", tf.nn.softsign),
    _unary("Sqrt", tf.math.sqrt, dtypes=(F32, F64, C64), make=positive),
    _unary("Square", tf.math.square, dtypes=(F32, I64, C64)),
    _unary("Tan", tf.math.tan),
    _unary("Tanh", tf.math.tanh, dtypes=(F32, F64, C64)),
]

SPECIAL_CASES = [
    _special("BesselI0", tf.math.special.bessel_i0),
    _special("BesselI1", tf.math.special.bessel_i1),
    _special("BesselJ0", tf.math.special.bessel_j0),
    _special("BesselJ1", tf.math.special.bessel_j1),
    _special("BesselK0", tf.math.special.bessel_k0, make=positive),
    _special("BesselK0e", tf.math.special.bessel_k0e, make=positive),
    _special("BesselK1", tf.math.special.bessel_k1, make=positive),
    _special("BesselK1e", tf.math.special.bessel_k1e, make=positive),
    _special("BesselY0", tf.math.special.bessel_y0, make=positive),
    _special("BesselY1", tf.math.special.bessel_y1, make=positive),
    _special("Dawsn", tf.math.special.dawsn),
    _special("Expint", tf.math.special.expint, make=positive),
    _special("FresnelCos", tf.math.special.fresnel_cos),
    _special("FresnelSin", tf.math.special.fresnel_sin),
    _special("Spence", tf.math.special.spence, make=positive),
]

BINARY_CASES = [
    _binary("Add", lambda x, y: tf.raw_ops.Add(x=x, y=y), MATRIX_ROW, dtypes=(F32, I32, STR)),
    _binary("AddV2", tf.add, MATRIX_ROW, dtypes=(F32, I64, C64)),
    _binary("AddV2-scalar", tf.add, SCALAR_MATRIX, dtypes=(F32, I32)),
    _binary("AddV2-column", tf.add, COLUMN_ROW),
    _binary("AddV2-rank3", tf.add, RANK3_COLUMN),
    _binary("ApproximateEqual",
            lambda x, y: tf.raw_ops.ApproximateEqual(x=x, y=y, tolerance=0.5), SAME),
    _binary("Atan2", tf.math.atan2, ROW_MATRIX),
    _binary("BitwiseAnd", tf.bitwise.bitwise_and, MATRIX_SCALAR, dtypes=(I32, I64, U8)),
    _binary("BitwiseOr", tf.bitwise.bitwise_or, COLUMN_ROW, dtypes=(I32, I64, U8)),
    _binary("BitwiseXor", tf.bitwise.bitwise_xor, MATRIX_ROW, dtypes=(I32, I64, U8)),
    _binary("Complex", tf.complex, SCALAR_MATRIX),
    _binary("Div", lambda x, y: tf.raw_ops.Div(x=x, y=y), COLUMN_ROW, dtypes=(F32, I32),
            make=[None, nonzero_signed]),
    _binary("DivNoNan", tf.math.divide_no_nan, MATRIX_ROW, make=[None, some_zeros]),
    _binary("Equal", tf.equal, MATRIX_ROW, dtypes=(I32, F32, BOOL),
            make=[indices_below(2)] * 2),
    _binary("Equal-no_shape_error", lambda x, y: x == y, COLUMN_ROW, dtypes=(I64, F64),
            make=[indices_below(3)] * 2, op_types=("Equal",)),
    _binary("Equal-incompatible_shapes", lambda x, y: x == y, [[2], [3]], dtypes=(I32,),
            make=[indices_below(3)] * 2, op_types=("Equal",)),
    _binary("FloorDiv", tf.math.floordiv, ROW_MATRIX, dtypes=(I32, I64, F32),
            make=[None, nonzero_signed]),
    _binary("FloorMod", tf.math.floormod, MATRIX_SCALAR, dtypes=(I32, I64, F32),
            make=[None, nonzero_signed]),
    _binary("Greater", tf.math.greater, SCALAR_MATRIX, dtypes=(F32, I32),
            make=[indices_below(3)] * 2),
    _binary("GreaterEqual", tf.math.greater_equal, RANK3_COLUMN, dtypes=(F32, I64),
            make=[indices_below(3)] * 2),
    _binary("Igamma", tf.math.igamma, MATRIX_ROW, make=[positive, positive], tol=1e-4),
    _binary("IgammaGradA", lambda a, x: tf.raw_ops.IgammaGradA(a=a, x=x), COLUMN_ROW,
            make=[positive, positive], tol=1e-4),
    _binary("Igammac", tf.math.igammac, SCALAR_MATRIX, make=[positive, positive], tol=1e-4),
    _binary("LeftShift", tf.bitwise.left_shift, MATRIX_ROW, dtypes=(I32, I64),
            make=[None, indices_below(5)]),
    _binary("Less", tf.math.less, MATRIX_ROW, dtypes=(F32, I32), make=[indices_below(3)] * 2),
    _binary("LessEqual", tf.math.less_equal, COLUMN_ROW, dtypes=(F32, I64),
            make=[indices_below(3)] * 2),
    _binary("LogicalAnd", tf.math.logical_and, MATRIX_ROW, dtypes=(BOOL,)),
    _binary("LogicalOr", tf.math.logical_or, SCALAR_MATRIX, dtypes=(BOOL,)),
    _binary("Maximum", tf.math.maximum, RANK3_COLUMN, dtypes=(F32, I32, I64)),
    _binary("Minimum", tf.math.minimum, ROW_MATRIX, dtypes=(F32, I32, I64)),
    _binary("Mod", lambda x, y: tf.raw_ops.Mod(x=x, y=y), MATRIX_ROW, dtypes=(I32, F32),
            make=[None, nonzero_signed]),
    _binary("Mul", tf.multiply, COLUMN_ROW, dtypes=(F32, I32, C64)),
    _binary("MulNoNan", tf.math.multiply_no_nan, MATRIX_ROW, dtypes=(F32, F64),
            make=[with_specials, some_zeros]),
    _binary("NextAfter", tf.math.nextafter, SCALAR_MATRIX),
    _binary("NotEqual", tf.math.not_equal, ROW_MATRIX, dtypes=(I32, F32, BOOL),
            make=[indices_below(2)] * 2),
    _binary("NotEqual-no_shape_error", lambda x, y: x != y, MATRIX_SCALAR, dtypes=(I32,),
            make=[indices_below(3)] * 2, op_types=("NotEqual",)),
    _binary("NotEqual-incompatible_shapes", lambda x, y: x != y, [[2, 3], [2]], dtypes=(F32,),
            op_types=("NotEqual",)),
    _binary("Polygamma", tf.math.polygamma, MATRIX_ROW, make=[small_orders, positive],
            tol=1e-4),
    _binary("Pow", tf.pow, COLUMN_ROW, dtypes=(F32, F64, C64), make=[positive, None],
            tol=1e-4),
    _binary("Pow-int", tf.pow, MATRIX_SCALAR, dtypes=(I32, I64), make=[None, nonzero_ints],
            op_types=("Pow",)),
    _binary("RealDiv", tf.math.truediv, SCALAR_MATRIX, dtypes=(F32, F64, C64),
            make=[None, positive]),
    _binary("RightShift", tf.bitwise.right_shift, COLUMN_ROW, dtypes=(I32, I64, U8),
            make=[None, indices_below(5)]),
    _binary("SquaredDifference", tf.math.squared_difference, RANK3_COLUMN,
            dtypes=(F32, I32, C64)),
    _binary("Sub", tf.subtract, ROW_MATRIX, dtypes=(F32, I64)),
    _binary("TruncateDiv", tf.truncatediv, MATRIX_ROW, dtypes=(I32, I64),
            make=[None, nonzero_signed]),
    _binary("TruncateMod", tf.truncatemod, COLUMN_ROW, dtypes=(I32, I64, F32),
            make=[None, nonzero_signed]),
    _binary("Xdivy", tf.math.xdivy, MATRIX_ROW, make=[some_zeros, positive]),
    _binary("Xlog1py", tf.math.xlog1py, SCALAR_MATRIX, make=[some_zeros, positive]),
    _binary("Xlogy", tf.math.xlogy, COLUMN_ROW, make=[some_zeros, positive]),
    _binary("Zeta", tf.math.zeta, ROW_MATRIX, make=[above_one, positive], tol=1e-4),
]

GRADIENT_CASES = [
    _binary("EluGrad", lambda dy, y: tf.raw_ops.EluGrad(gradients=dy, outputs=y), SAME),
    _binary("EluGrad-tape", lambda x, dy: _vjp(tf.nn.elu)(x, dy), SAME, op_types=("EluGrad",)),
    _binary("FakeQuantWithMinMaxArgsGradient",
            lambda dy, x: tf.quantization.fake_quant_with_min_max_args_gradient(dy, x, -1.0, 1.5),
            SAME, dtypes=(F32,)),
    _binary("InvGrad", lambda y, dy: tf.raw_ops.InvGrad(y=y, dy=dy), SAME, xla=NO_XLA_KERNEL),
    _binary("LeakyReluGrad",
            lambda dy, x: tf.raw_ops.LeakyReluGrad(gradients=dy, features=x, alpha=0.3), SAME),
    _binary("ReciprocalGrad", lambda y, dy: tf.raw_ops.ReciprocalGrad(y=y, dy=dy), SAME),
    _binary("Relu6Grad", lambda dy, x: tf.raw_ops.Relu6Grad(gradients=dy, features=x * 4),
            SAME),
    _binary("ReluGrad", lambda dy, x: tf.raw_ops.ReluGrad(gradients=dy, features=x), SAME),
    _binary("ReluGrad-scalar", lambda dy, x: tf.raw_ops.ReluGrad(gradients=dy, features=x),
            [[], []], op_types=("ReluGrad",)),
    _binary("ReluGrad-tape", lambda x, dy: _vjp(tf.nn.relu)(x, dy), SAME,
            op_types=("ReluGrad",)),
    _binary("RsqrtGrad", lambda y, dy: tf.raw_ops.RsqrtGrad(y=y, dy=dy), SAME),
    _binary("SeluGrad", lambda dy, y: tf.raw_ops.SeluGrad(gradients=dy, outputs=y), SAME),
    _binary("SigmoidGrad", lambda y, dy: tf.raw_ops.SigmoidGrad(y=y, dy=dy), SAME,
            dtypes=(F32, F64, C64)),
    _binary("SigmoidGrad-tape", lambda x, dy: _vjp(tf.math.sigmoid)(x, dy), SAME,
            op_types=("SigmoidGrad",)),
    _binary("SoftplusGrad", lambda dy, x: tf.raw_ops.SoftplusGrad(gradients=dy, features=x),
            SAME),
    _binary("SoftsignGrad", lambda dy, x: tf.raw_ops.SoftsignGrad(gradients=dy, features=x),
            SAME),
    _binary("SqrtGrad", lambda y, dy: tf.raw_ops.SqrtGrad(y=y, dy=dy), SAME,
            make=[positive, None]),
    _binary("TanhGrad", lambda y, dy: tf.raw_ops.TanhGrad(y=y, dy=dy), SAME),
    _binary("TanhGrad-tape", lambda x, dy: _vjp(tf.math.tanh)(x, dy), SAME,
            op_types=("TanhGrad",)),
]


def _clip(t, lo, hi):
  return tf.raw_ops.ClipByValue(t=t, clip_value_min=lo, clip_value_max=hi)


def _where_v1(c, x, y):
  return tf.compat.v1.where(c, x, y)


OTHER_CASES = [
    OpCase("AddN", lambda a, b, c: tf.math.add_n([a, b, c]), [[2, 3]] * 3, dtypes=(F32, I32)),
    OpCase("AddN-two", lambda a, b: tf.math.add_n([a, b]), [[3]] * 2, dtypes=(F64,),
           op_types=("AddN",)),
    OpCase("Betainc", tf.math.betainc, [[2, 3]] * 3, dtypes=FLOATS,
           make=[positive, positive, probabilities], tol=1e-4),
    OpCase("Betainc-scalars", tf.math.betainc, [[], [], [2, 3]], dtypes=FLOATS,
           make=[positive, positive, probabilities], tol=1e-4, op_types=("Betainc",)),
    OpCase("ClipByValue", _clip, [[2, 3], [], []], dtypes=(F32, I32),
           make=[None, negative, positive]),
    OpCase("ClipByValue-same_shape", _clip, [[2, 3]] * 3, dtypes=(F32,),
           make=[None, negative, positive], op_types=("ClipByValue",)),
    OpCase("ClipByValue-scalar", _clip, [[]] * 3, dtypes=(F64,),
           make=[None, negative, positive], op_types=("ClipByValue",)),
    OpCase("Select", _where_v1, [[2, 3]] * 3, dtypes=[(BOOL, F32, F32), (BOOL, I32, I32)]),
    OpCase("Select-rows", _where_v1, [[2], [2, 3], [2, 3]], dtypes=[(BOOL, F32, F32)],
           op_types=("Select",)),
    OpCase("Select-rows_rank3", _where_v1, [[2], [2, 3, 2], [2, 3, 2]],
           dtypes=[(BOOL, I64, I64)], op_types=("Select",)),
    OpCase("Select-scalar", _where_v1, [[], [2, 3], [2, 3]], dtypes=[(BOOL, F32, F32)],
           op_types=("Select",)),
    OpCase("Select-vectors", _where_v1, [[3], [3], [3]], dtypes=[(BOOL, F64, F64)],
           op_types=("Select",)),
    OpCase("SelectV2", tf.where, [[2, 1], [3], [2, 3]], dtypes=[(BOOL, F32, F32),
                                                               (BOOL, I32, I32)]),
    OpCase("SelectV2-scalars", tf.where, [[2, 3], [], [3]], dtypes=[(BOOL, F64, F64)],
           op_types=("SelectV2",)),
]

CASES = UNARY_CASES + SPECIAL_CASES + BINARY_CASES + GRADIENT_CASES + OTHER_CASES
