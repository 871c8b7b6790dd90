"""OpCases for converters/shapes.py.

Ops that tf.shape / tf.zeros_like / tf.rank replace by constants when the shape is static
are called through tf.raw_ops so that the op really is in the traced body.
"""

import numpy as np
import tensorflow as tf

from tests.converters.op_cases import OpCase, indices_below

_F, _I, _B, _S = tf.float32, tf.int32, tf.bool, tf.string
_ANY = [_F, _I, _B, _S]
# For outputs without a static per-iteration shape: the harness builds the n = 0 reference
# from the static output shape.
_NO_ZERO = (1, 3)
_FALLBACK_XLA = "the fallback loop's op needs a compile-time shape argument"


def _same_row(row):
  """Every iteration gets the same vector `row` (for ops whose outputs would be ragged)."""
  def make(rng, shape, dtype):
    del rng
    return np.broadcast_to(np.asarray(row, tf.as_dtype(dtype).as_numpy_dtype), shape).copy()
  return make


def _permutations(rng, shape, dtype):
  """A random permutation of range(shape[-1]) in each row."""
  base = np.broadcast_to(np.arange(shape[-1]), shape)
  return rng.permuted(base, axis=-1).astype(tf.as_dtype(dtype).as_numpy_dtype)


def _reshape_runtime(cols):
  """`reshape(x, [-1, d])` with d (= cols) unknown at trace time: -1 is resolved at run time.

  A captured scalar would be folded into a constant; placeholder_with_default hides it. The
  result gets its static shape back so that the reference for n = 0 has one.
  """
  def build(x, d):
    out = tf.reshape(x, tf.stack([-1, tf.compat.v1.placeholder_with_default(d, [])]))
    return tf.ensure_shape(out, [x.shape.num_elements() // cols, cols])
  return build


def _stacked_shape_case(name, fn, shapes, row, dtypes=(_F, _I)):
  """`fn(x, s)` with the shape-like argument s stacked (every iteration gets `row`)."""
  return OpCase(name, fn, shapes, dtypes=[dtypes],
                patterns=[(True, True), (False, True)], make=[None, _same_row(row)],
                allow_fallback=True, loop_lengths=_NO_ZERO, xla=_FALLBACK_XLA)


def _concat_offset(a, b):
  """Two valid shapes for a concat on axis 1: `a` and `a` with dim 1 grown by `b`."""
  grown = a + b * tf.constant([0, 1, 0])
  return tf.raw_ops.ConcatOffset(concat_dim=1, shape=[a, grown])


def _broadcast_args(a, c, b):
  """`[a, c]` against a shorter shape that is c where b is 1 and 1 where b is 0."""
  return tf.raw_ops.BroadcastArgs(s0=tf.concat([a, c], 0), s1=c * b + 1 - b)


def _shape_n(x, y):
  return tf.raw_ops.ShapeN(input=[x, y], out_type=tf.int64)


CASES = [
    OpCase("Bitcast", lambda x: tf.bitcast(x, tf.int32), [[2, 3]]),
    OpCase("Bitcast-split", lambda x: tf.bitcast(x, tf.uint8), [[2]],
           dtypes=[tf.int32, tf.float32], op_types=("Bitcast",)),

    # Identity-like.
    OpCase("Identity", tf.identity, [[2, 3]], dtypes=_ANY),
    OpCase("StopGradient", tf.stop_gradient, [[2, 3]]),
    OpCase("Snapshot", lambda x: tf.raw_ops.Snapshot(input=x), [[2, 3]], dtypes=[_F, _B]),
    OpCase("PreventGradient", lambda x: tf.raw_ops.PreventGradient(input=x), [[3]]),
    OpCase("IdentityN", lambda x, y: tf.identity_n([x, y]), [[2, 3], [4]],
           dtypes=[_F, (_I, _S)]),
    OpCase("CheckNumerics", lambda x: tf.debugging.check_numerics(x, "bad"), [[2, 3]],
           dtypes=[_F, tf.float64]),
    OpCase("CheckNumericsV2", lambda x: tf.raw_ops.CheckNumericsV2(tensor=x, message="bad"),
           [[2, 3]], xla="XLA has no CheckNumericsV2 kernel"),
    OpCase("EnsureShape", lambda x: tf.ensure_shape(x, [2, 3]), [[2, 3]], dtypes=[_F, _S]),
    OpCase("EnsureShape-partial", lambda x: tf.ensure_shape(x, [None, 3]), [[2, 3]]),
    # Reshaping.
    OpCase("Reshape", lambda x: tf.reshape(x, [3, 2]), [[2, 3]], dtypes=_ANY),
    OpCase("Reshape-minus_one", lambda x: tf.reshape(x, [-1, 2]), [[2, 3, 2]],
           dtypes=[_F, _I]),
    OpCase("Reshape-to_scalar", lambda x: tf.reshape(x, []), [[1, 1]]),
    OpCase("Reshape-empty", lambda x: tf.ensure_shape(tf.reshape(x, [-1, 0]), [3, 0]),
           [[0, 3]], op_types=("Reshape", "EnsureShape")),
    OpCase("Reshape-runtime_shape", _reshape_runtime(3), [[2, 3, 2], []], dtypes=[(_F, _I)],
           patterns=[(True, False)], make=[None, _same_row(3)],
           op_types=("Reshape", "EnsureShape")),
    OpCase("Reshape-runtime_shape_empty", _reshape_runtime(2), [[0, 3], []],
           dtypes=[(_F, _I)], patterns=[(True, False)], make=[None, _same_row(2)]),
    OpCase("Reshape-stacked_shape", _reshape_runtime(6), [[2, 3, 2], []], dtypes=[(_F, _I)],
           patterns=[(True, True), (False, True)], make=[None, _same_row(6)],
           allow_fallback=True, loop_lengths=_NO_ZERO,
           xla="the fallback loop's Reshape needs a compile-time shape"),
    OpCase("Squeeze", tf.squeeze, [[1, 3, 1]], dtypes=[_F, _S]),
    OpCase("Squeeze-nothing_to_squeeze", tf.squeeze, [[2, 3]]),
    OpCase("Squeeze-axis", lambda x: tf.squeeze(x, [0]), [[1, 3, 1]], dtypes=[_F, _I]),
    OpCase("Squeeze-negative_axis", lambda x: tf.squeeze(x, [-1, -3]), [[1, 3, 1]]),
    OpCase("ExpandDims", lambda x: tf.expand_dims(x, 1), [[2, 3]], dtypes=[_F, _B, _S]),
    OpCase("ExpandDims-zero", lambda x: tf.expand_dims(x, 0), [[2, 3]]),
    OpCase("ExpandDims-negative", lambda x: tf.expand_dims(x, -1), [[2, 3]]),
    OpCase("ExpandDims-scalar", lambda x: tf.expand_dims(x, -1), [[]], dtypes=[_I]),
    OpCase("Transpose", lambda x: tf.transpose(x, [2, 0, 1]), [[2, 3, 4]], dtypes=_ANY),
    OpCase("Transpose-default_perm", tf.transpose, [[2, 3]]),
    OpCase("Transpose-int64_perm", lambda x: tf.transpose(x, tf.constant([1, 0], tf.int64)),
           [[2, 3]]),
    OpCase("ConjugateTranspose", lambda x: tf.transpose(x, [1, 0], conjugate=True), [[2, 3]],
           dtypes=[tf.complex64]),
    OpCase("Tile", lambda x: tf.tile(x, [2, 3]), [[2, 1]], dtypes=[_F, _I, _S]),
    OpCase("Tile-int64_multiples", lambda x: tf.tile(x, tf.constant([1, 2], tf.int64)),
           [[2, 3]]),
    OpCase("BroadcastTo", lambda x: tf.broadcast_to(x, [2, 3, 4]), [[3, 1]],
           dtypes=[_F, _I, _B]),
    OpCase("BroadcastTo-same_rank", lambda x: tf.broadcast_to(x, [2, 3]), [[1, 3]]),
    OpCase("Fill", lambda v: tf.fill([2, 3], v), [[]], dtypes=_ANY),
    # Joining and splitting.
    OpCase("ConcatV2", lambda x, y, z: tf.concat([x, y, z], 1), [[2, 3], [2, 1], [2, 2]],
           dtypes=[_F, _S]),
    OpCase("ConcatV2-negative_axis", lambda x, y: tf.concat([x, y], -2), [[2, 3], [1, 3]],
           dtypes=[_F, _B]),
    OpCase("ConcatV2-axis_zero", lambda x, y: tf.concat([x, y], 0), [[2], [3]], dtypes=[_I]),
    OpCase("Concat", lambda x, y: tf.raw_ops.Concat(concat_dim=1, values=[x, y]),
           [[2, 3], [2, 2]]),
    OpCase("Pack", lambda x, y: tf.stack([x, y], 1), [[2, 3], [2, 3]], dtypes=[_F, _I, _S]),
    OpCase("Pack-axis_zero", lambda x, y, z: tf.stack([x, y, z]), [[3], [3], [3]]),
    OpCase("Pack-negative_axis", lambda x, y: tf.stack([x, y], -1), [[2, 3], [2, 3]],
           dtypes=[_B]),
    OpCase("Unpack", lambda x: tf.unstack(x, axis=1), [[2, 3]], dtypes=[_F, _I, _S]),
    OpCase("Unpack-axis_zero", tf.unstack, [[2, 3]]),
    OpCase("Unpack-negative_axis", lambda x: tf.unstack(x, axis=-2), [[2, 3, 2]]),
    OpCase("Split", lambda x: tf.split(x, 2, axis=1), [[2, 4]], dtypes=[_F, _I, _S]),
    OpCase("Split-negative_axis", lambda x: tf.split(x, 3, axis=-2), [[3, 2]]),
    OpCase("SplitV", lambda x: tf.split(x, [1, 3], axis=-1), [[2, 4]], dtypes=[_F, _B]),
    OpCase("SplitV-minus_one", lambda x: tf.split(x, [1, -1], axis=0), [[3, 2]]),
    OpCase("ConcatOffset", _concat_offset, [[3], []], dtypes=[_I],
           make=[indices_below(4), indices_below(3)]),
    OpCase("ConcatOffset-runtime_axis",
           lambda a, d: tf.raw_ops.ConcatOffset(concat_dim=d, shape=[a, a, a]),
           [[3], []], dtypes=[_I], make=[indices_below(4), indices_below(3)]),
    # Padding.
    OpCase("Pad", lambda x: tf.pad(x, [[1, 0], [0, 2]]), [[2, 3]], dtypes=[_F, _I, _B, _S]),
    OpCase("PadV2", lambda x, c: tf.pad(x, [[1, 0], [2, 1]], constant_values=c),
           [[2, 3], []], dtypes=[_F, _I]),
    OpCase("PadV2-vector", lambda x, c: tf.pad(x, [[1, 2]], constant_values=c), [[3], []]),
    OpCase("MirrorPad", lambda x: tf.pad(x, [[1, 1], [0, 2]], mode="REFLECT"), [[2, 3]],
           dtypes=[_F, _I]),
    OpCase("MirrorPad-symmetric", lambda x: tf.pad(x, [[2, 1], [0, 3]], mode="SYMMETRIC"),
           [[2, 3]]),
    OpCase("MirrorPadGrad",
           lambda g: tf.raw_ops.MirrorPadGrad(input=g, paddings=[[1, 1], [0, 2]],
                                              mode="REFLECT"),
           [[4, 5]]),
    OpCase("MirrorPadGrad-symmetric",
           lambda g: tf.raw_ops.MirrorPadGrad(input=g, paddings=[[1, 0], [2, 1]],
                                              mode="SYMMETRIC"),
           [[3, 6]]),
    # Results that depend on the per-iteration shape only.
    OpCase("ZerosLike", lambda x: tf.raw_ops.ZerosLike(x=x), [[2, 3]], dtypes=[_F, _I, _B]),
    OpCase("OnesLike", lambda x: tf.raw_ops.OnesLike(x=x), [[2, 3]], dtypes=[_F, _I, _B]),
    OpCase("Shape", lambda x: tf.raw_ops.Shape(input=x), [[2, 3]], dtypes=[_F, _S]),
    OpCase("Shape-int64", lambda x: tf.raw_ops.Shape(input=x, out_type=tf.int64), [[0, 3]]),
    OpCase("ShapeN", _shape_n, [[2, 3], [4]], dtypes=[_F, _S]),
    OpCase("Size", lambda x: tf.raw_ops.Size(input=x), [[2, 3]], dtypes=[_F, _S]),
    OpCase("Size-int64", lambda x: tf.raw_ops.Size(input=x, out_type=tf.int64), [[4]]),
    OpCase("Rank", lambda x: tf.raw_ops.Rank(input=x), [[2, 3]], dtypes=[_F, _B]),
    OpCase("Rank-scalar", lambda x: tf.raw_ops.Rank(input=x), [[]]),
    OpCase("BroadcastArgs", _broadcast_args, [[1], [2], [2]], dtypes=[_I, tf.int64],
           make=[indices_below(4), indices_below(4), indices_below(2)]),
    OpCase("BroadcastGradientArgs-of_shapes",
           lambda x, y: tf.raw_ops.BroadcastGradientArgs(s0=tf.raw_ops.Shape(input=x),
                                                         s1=tf.raw_ops.Shape(input=y)),
           [[2, 3], [3]], op_types=("BroadcastGradientArgs", "Shape"), loop_lengths=_NO_ZERO),
    # Others.
    OpCase("OneHot", lambda i: tf.one_hot(i, 4), [[2, 3]], dtypes=[_I, tf.int64],
           make=[indices_below(5)]),
    OpCase("OneHot-axis_zero", lambda i: tf.one_hot(i, 4, axis=0), [[2, 3]], dtypes=[_I],
           make=[indices_below(4)]),
    OpCase("OneHot-axis_one", lambda i: tf.one_hot(i, 3, axis=1), [[2, 3]], dtypes=[_I],
           make=[indices_below(3)]),
    OpCase("OneHot-values", lambda i, a, b: tf.one_hot(i, 4, on_value=a, off_value=b),
           [[3], [], []], dtypes=[(_I, _F, _F), (_I, _I, _I)],
           make=[indices_below(4), None, None]),
    OpCase("OneHot-values_axis_zero",
           lambda i, a, b: tf.one_hot(i, 3, on_value=a, off_value=b, axis=0),
           [[2, 2], [], []], dtypes=[(_I, _F, _F)], make=[indices_below(3), None, None]),
    OpCase("ReverseV2", lambda x: tf.reverse(x, [1]), [[2, 3]], dtypes=[_F, _I, _S]),
    OpCase("ReverseV2-negative_axes", lambda x: tf.reverse(x, [-1, 0]), [[2, 3, 2]]),
    OpCase("PlaceholderWithDefault",
           lambda x: tf.raw_ops.PlaceholderWithDefault(input=x, shape=x.shape), [[2, 3]],
           dtypes=[_F, _I, _B]),
    OpCase("ReverseSequence", lambda x, lengths: tf.reverse_sequence(x, lengths, 1, 0),
           [[3, 4, 2], [3]], dtypes=[(_F, _I), (_I, tf.int64), (_S, _I)],
           make=[None, indices_below(5)]),
    OpCase("ReverseSequence-time_major",
           lambda x, lengths: tf.reverse_sequence(x, lengths, seq_axis=0, batch_axis=1),
           [[4, 3], [3]], dtypes=[(_F, tf.int64)], make=[None, indices_below(5)]),
    OpCase("ReverseSequence-batch_last",
           lambda x, lengths: tf.reverse_sequence(x, lengths, seq_axis=1, batch_axis=2),
           [[2, 4, 3], [3]], make=[None, indices_below(5)], dtypes=[(_F, _I)]),
    OpCase("Reverse", lambda x: tf.raw_ops.Reverse(tensor=x, dims=[True, False]), [[2, 3]]),
    OpCase("InvertPermutation", tf.math.invert_permutation, [[5]], dtypes=[_I, tf.int64],
           make=[_permutations]),
    # Shape-like inputs that differ per iteration: Unvectorizable, they fall back.
    _stacked_shape_case("Tile-stacked_multiples", tf.tile, [[2, 1], [2]], [1, 2]),
    _stacked_shape_case("Transpose-stacked_perm", tf.transpose, [[2, 3], [2]], [1, 0]),
    _stacked_shape_case("Pad-stacked_paddings", tf.pad, [[2, 3], [2, 2]], [[1, 0], [0, 2]]),
    _stacked_shape_case("ExpandDims-stacked_axis", tf.expand_dims, [[2, 3], []], 1),
    _stacked_shape_case("OneHot-stacked_depth", tf.one_hot, [[2, 3], []], 4, (_I, _I)),
    OpCase("Fill-stacked_dims", tf.fill, [[2], []], dtypes=[(_I, _F)],
           patterns=[(True, True), (True, False)], make=[_same_row([2, 3]), None],
           allow_fallback=True, loop_lengths=_NO_ZERO, xla=_FALLBACK_XLA),
    # Ops whose per-iteration output sizes depend on data give ragged values (Range and
    # Where convert, BroadcastGradientArgs falls back); every iteration gets the same size
    # here, which tf.ensure_shape states, so the results are stacked again.
    OpCase("Range", lambda x: tf.ensure_shape(tf.range(x), [4]), [[]], dtypes=[_I],
           make=[_same_row(4)], allow_fallback=True, loop_lengths=_NO_ZERO,
           xla=_FALLBACK_XLA, op_types=("Range", "EnsureShape")),
    OpCase("Where", lambda x: tf.ensure_shape(tf.where(x), [3, 2]), [[2, 3]], dtypes=[_B],
           make=[_same_row([[True, False, True], [False, False, True]])],
           allow_fallback=True, loop_lengths=_NO_ZERO, xla="Where's output size depends on data",
           op_types=("Where", "EnsureShape")),
    OpCase("BroadcastGradientArgs-stacked",
           lambda a, b: [tf.ensure_shape(r, [k]) for r, k in zip(
               tf.raw_ops.BroadcastGradientArgs(s0=a, s1=b), (1, 2))], [[3], [2]],
           dtypes=[_I], make=[_same_row([2, 1, 3]), _same_row([1, 3])], allow_fallback=True,
           loop_lengths=_NO_ZERO, xla="the outputs' sizes depend on data"),
]

# Per-iteration paddings: at n = 0 no iteration tells how much they add (the result's static
# shape is unknown), so n = 0 is left out.
def _pad_at(x, begin):
  """Per-iteration paddings that add the same size in every iteration: x placed at `begin`
  in a `[5, 4]` result."""
  paddings = tf.stack([tf.stack([begin, 3 - begin]), tf.constant([1, 0], begin.dtype)])
  return tf.pad(x, paddings)


def _slice_gradient(x, begin):
  """The gradient of a slice at a per-iteration begin is a Pad with per-iteration paddings
  (fuzz seed 3194)."""
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = tf.slice(x, tf.stack([begin, 0]), [2, -1])
    loss = tf.reduce_sum(y * y)
  return tape.gradient(loss, x)


CASES += [
    OpCase("Pad-per_iteration_paddings", _pad_at, [[2, 3], []],
           dtypes=[(_F, _I), (_I, tf.int64)], make=[None, indices_below(4)],
           patterns=[(True, True), (False, True)], loop_lengths=_NO_ZERO),
    OpCase("Pad-slice_gradient", _slice_gradient, [[5, 3], []], dtypes=[(_F, _I)],
           make=[None, indices_below(4)], patterns=[(True, True), (False, True)],
           op_types=("Pad",), loop_lengths=_NO_ZERO),
]


EXPECTED_FALLBACK = {
    "BroadcastGradientArgs": "per-iteration reduction indices differ in length (ragged)",
}
