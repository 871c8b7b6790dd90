"""Elementwise ops: unary and binary math, comparisons, logical and bitwise ops, casts, select.

The trick: per-iteration shapes broadcast from the right, so a stacked input whose
per-iteration rank is lower than the others' gets unit dims just after its loop axis; then
the op itself broadcasts stacked against stacked and stacked against invariant.

Ops whose kernels do not broadcast (the activation gradients, ApproximateEqual, ClipByValue,
Betainc, FakeQuantWithMinMaxArgsGradient) get their inputs broadcast to the stacked result
shape first; stacked inputs already at that shape pass through, invariant ones are tiled
unless the kernel takes them as scalars. The old `Select` (a vector condition picks rows)
and `AddN` (no broadcasting, variadic) are rewritten to broadcasting ops.
"""

import functools

import tensorflow as tf

from converters import backprop
from converters import fusions
from converters import tensor_lists
from vectorize import values
from vectorize.errors import Unvectorizable
from vectorize.family import register_elementwise
from vectorize.registry import register
from vectorize.values import invariant, stacked


def _broadcast_to_result_shape(op, scalar_inputs):
  """The inputs aligned and broadcast to the stacked result shape, for non-broadcasting ops.

  Stacked inputs that already have the result shape are passed as they are; so are
  invariant scalars among `scalar_inputs` (inputs the kernel accepts as scalars).
  """
  tensors = op.align_for_broadcast()
  result = functools.reduce(tf.broadcast_static_shape, [t.shape for t in tensors])
  per_iteration = result[1:]
  target = None
  out = []
  for i, (v, t) in enumerate(zip(op.inputs, tensors)):
    if not v.stacked and i in scalar_inputs and t.shape.rank == 0:
      out.append(t)
    elif v.stacked and per_iteration.is_fully_defined() and t.shape[1:] == per_iteration:
      out.append(t)
    else:
      if target is None:
        target = result.as_list() if result.is_fully_defined() else functools.reduce(
            tf.broadcast_dynamic_shape, [tf.shape(t) for t in tensors])
      out.append(tf.broadcast_to(t, target))
  return out


def _register_same_shape(*op_types, scalar_inputs=()):
  """Elementwise ops whose kernels need equal input shapes (scalars only for `scalar_inputs`)."""

  def convert(op):
    inputs = _broadcast_to_result_shape(op, scalar_inputs)
    return [stacked(t) for t in op.rebuild(inputs)]

  register(*op_types)(convert)


@register("Mul")
def _convert_mul(op):
  """Broadcasts; a stacked chain of products by invariants multiplies the invariants first,
  and a difference with per-example statistics times a factor is one compiled call (see
  converters/fusions.py)."""
  return (fusions.product_chain(op) or fusions.scaled_difference(op) or
          [stacked(t) for t in op.rebuild(op.align_for_broadcast())])


@register("AddN")
def _convert_add_n(op):
  """Sums the stacked and the invariant inputs apart, then adds the two (which broadcasts);
  a sum of matrix products becomes one product, a sum of slice gradients one stack (see
  converters/fusions.py)."""
  fused = fusions.sum_of_matmuls(op) or fusions.sum_of_slice_gradients(op)
  if fused is not None:
    return fused
  if op.attr("T") == tf.variant:
    return tensor_lists.sum_of_lists(op)
  stacked_terms = [v.tensor for v in op.inputs if v.stacked]
  invariant_terms = [v.tensor for v in op.inputs if not v.stacked]
  total = stacked_terms[0] if len(stacked_terms) == 1 else tf.math.add_n(stacked_terms)
  if invariant_terms:
    total += invariant_terms[0] if len(invariant_terms) == 1 else tf.math.add_n(
        invariant_terms)
  return stacked(total)


@register("Equal", "NotEqual")
def _convert_equality(op):
  """Broadcasts like any binary op, keeping incompatible_shape_error.

  With incompatible_shape_error=False, per-iteration shapes that do not broadcast give the
  same scalar in every iteration (False for Equal, True for NotEqual): an invariant result.
  """
  if not op.attr("incompatible_shape_error"):
    broadcasts = _broadcasts(op.known_input_shape(0), op.known_input_shape(1))
    if broadcasts is None:
      raise Unvectorizable("incompatible_shape_error=False needs known per-iteration shapes")
    if not broadcasts:
      return invariant(tf.constant(op.type == "NotEqual"))
  return [stacked(t) for t in op.rebuild(op.align_for_broadcast())]


def _broadcasts(x_shape, y_shape):
  """Whether two static shapes broadcast: True or False when their known dims decide it
  (a scalar broadcasts with anything; `x[i, 1:] != 0` has no static size), else None."""
  if x_shape.rank == 0 or y_shape.rank == 0:
    return True
  if x_shape.rank is None or y_shape.rank is None:
    return None
  decided = True
  for a, b in zip(reversed(x_shape.as_list()), reversed(y_shape.as_list())):
    if a == 1 or b == 1 or (a is not None and a == b):
      continue
    if a is None or b is None:
      decided = None
    else:
      return False
  return decided


@register("Select")
def _convert_select(op):
  """Emits SelectV2, which broadcasts.

  A vector condition picks rows of higher-rank x and y, so it gets trailing unit dims first:
  per iteration `[a] -> [a, 1, ..., 1]`.
  """
  condition_rank = op.input_shape(0).rank
  x_rank = op.input_shape(1).rank
  if condition_rank is None or x_rank is None:
    raise Unvectorizable("Select needs the per-iteration ranks of condition and x")
  condition = op.value(0)
  if condition_rank == 1 and x_rank > 1:
    t = condition.tensor
    for _ in range(x_rank - 1):
      t = tf.expand_dims(t, -1)
    condition = values.Value(t, condition.stacked)
  inputs = values.align_ranks([condition, op.value(1), op.value(2)])
  return [stacked(t) for t in op.rebuild(inputs, op_type="SelectV2")]


@register("SelectV2")
def _convert_select_v2(op):
  """Broadcasts; a stacked condition of one element per iteration picks rows instead.

  A per-example choice such as Keras's random flip, `tf.where(flip, flipped, image)`, gives a
  condition of shape [n, 1, ..., 1]; TF's broadcasting select over the full rank took 20x the
  time of `Select` with an [n] condition, which picks whole rows of equally shaped x and y.
  A choice between x and its reverse is one compiled pass (see converters/fusions.py).
  """
  flipped = fusions.conditional_flip(op)
  if flipped is not None:
    return flipped
  result_shape = op.output_shape(0)
  if (op.is_stacked(0) and op.input_shape(0).num_elements() == 1
      and result_shape.is_fully_defined()
      and all(op.is_stacked(k) and op.input_shape(k).as_list() == result_shape.as_list()
              for k in (1, 2))):
    condition = tf.reshape(op.stacked(0), [-1])
    return [stacked(tf.raw_ops.Select(condition=condition, x=op.stacked(1), y=op.stacked(2)))]
  return [stacked(t) for t in op.rebuild(op.align_for_broadcast())]


_register_same_shape(
    "ApproximateEqual",
    "EluGrad",
    "FakeQuantWithMinMaxArgsGradient",
    "InvGrad",
    "LeakyReluGrad",
    "ReciprocalGrad",
    "Relu6Grad",
    "RsqrtGrad",
    "SeluGrad",
    "SoftplusGrad",
    "SoftsignGrad",
    "SqrtGrad",
)
register("ReluGrad")(backprop.relu_grad)
register("SigmoidGrad")(backprop.sigmoid_grad)
register("TanhGrad")(backprop.tanh_grad)
_register_same_shape("Betainc", scalar_inputs=(0, 1, 2))
_register_same_shape("ClipByValue", scalar_inputs=(1, 2))
register_elementwise(
    "Abs",
    "Acos",
    "Acosh",
    "Add",
    "AddV2",
    "Angle",
    "Asin",
    "Asinh",
    "Atan",
    "Atan2",
    "Atanh",
    "BesselI0",
    "BesselI0e",
    "BesselI1",
    "BesselI1e",
    "BesselJ0",
    "BesselJ1",
    "BesselK0",
    "BesselK0e",
    "BesselK1",
    "BesselK1e",
    "BesselY0",
    "BesselY1",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
    "Bucketize",
    "Cast",
    "Ceil",
    "Complex",
    "ComplexAbs",
    "Conj",
    "Cos",
    "Cosh",
    "Dawsn",
    "Digamma",
    "Div",
    "DivNoNan",
    "Elu",
    "Erf",
    "Erfc",
    "Erfinv",
    "Exp",
    "Expint",
    "Expm1",
    "FakeQuantWithMinMaxArgs",
    "Floor",
    "FloorDiv",
    "FloorMod",
    "FresnelCos",
    "FresnelSin",
    "Greater",
    "GreaterEqual",
    "Igamma",
    "IgammaGradA",
    "Igammac",
    "Imag",
    "Inv",
    "Invert",
    "IsFinite",
    "IsInf",
    "IsNan",
    "LeakyRelu",
    "LeftShift",
    "Less",
    "LessEqual",
    "Lgamma",
    "Log",
    "Log1p",
    "LogicalAnd",
    "LogicalNot",
    "LogicalOr",
    "Maximum",
    "Minimum",
    "Mod",
    "MulNoNan",
    "Ndtri",
    "Neg",
    "NextAfter",
    "Polygamma",
    "PopulationCount",
    "Pow",
    "Real",
    "RealDiv",
    "Reciprocal",
    "Relu",
    "Relu6",
    "RightShift",
    "Rint",
    "Round",
    "Rsqrt",
    "Selu",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Softplus",
    "Softsign",
    "Spence",
    "Sqrt",
    "Square",
    "SquaredDifference",
    "Sub",
    "Tan",
    "Tanh",
    "TruncateDiv",
    "TruncateMod",
    "Xdivy",
    "Xlog1py",
    "Xlogy",
    "Zeta",
)
