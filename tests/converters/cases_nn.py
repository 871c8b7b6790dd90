"""OpCases for converters/nn.py.

Gradient ops are reached through raw ops (shape inputs as constants) and through a
tf.GradientTape inside the builder, which also emits the ShapeN of the forward inputs.
Convolutions are channels-last only: the CPU kernels of the sequential reference support no
other layout.
"""

import numpy as np
import tensorflow as tf

from tests.converters.op_cases import OpCase, indices_below, positive

_F32_F64 = (tf.float32, tf.float64)
_TOL = 1e-4


def _grad(fn, wrt):
  """A builder: the gradient of `sum(fn(*args)**2) / 2` w.r.t. argument `wrt`, taken with
  `output_gradients` so that the tape emits only the op's own gradient ops."""

  def build(*args):
    args = list(args)
    with tf.GradientTape() as tape:
      tape.watch(args[wrt])
      y = fn(*args)
    return tape.gradient(y, args[wrt], output_gradients=tf.stop_gradient(y))

  return build


def _conv(strides=1, padding="SAME", dilations=1):
  return lambda x, f: tf.nn.conv2d(x, f, strides, padding, dilations=dilations)


def _conv_attrs(strides=(1, 1), padding="SAME", dilations=(1, 1), explicit=()):
  return dict(strides=[1, *strides, 1], padding=padding, dilations=[1, *dilations, 1],
              explicit_paddings=list(explicit))


def _backprop_input(op_type, input_sizes, **attrs):
  return lambda f, dy: getattr(tf.raw_ops, op_type)(input_sizes=input_sizes, filter=f,
                                                    out_backprop=dy, **attrs)


def _backprop_filter(op_type, filter_sizes, **attrs):
  return lambda x, dy: getattr(tf.raw_ops, op_type)(input=x, filter_sizes=filter_sizes,
                                                    out_backprop=dy, **attrs)


_EXPLICIT = [0, 0, 1, 2, 2, 0, 0, 0]


def _depthwise(strides=(1, 1), padding="SAME", explicit=()):
  return lambda x, f: tf.raw_ops.DepthwiseConv2dNative(
      input=x, filter=f, strides=[1, *strides, 1], padding=padding,
      explicit_paddings=list(explicit))


def _batch_norm(is_training, data_format="NHWC", factor=1.0, version="V3"):
  op = getattr(tf.raw_ops, "FusedBatchNorm" + version)

  def build(x, scale, offset, mean, variance):
    out = op(x=x, scale=scale, offset=offset, mean=mean, variance=variance, epsilon=0.01,
             exponential_avg_factor=factor, is_training=is_training, data_format=data_format)
    # Inference leaves the reserve spaces unspecified.
    return out[:5] if is_training else out[:3]

  return build


def _batch_norm_grad(is_training, data_format="NHWC", version="V3"):
  """The gradient of a training- or inference-mode batch norm w.r.t. x, scale and offset."""
  op = getattr(tf.raw_ops, "FusedBatchNorm" + version)

  def build(x, scale, offset, dy):
    with tf.GradientTape() as tape:
      tape.watch([x, scale, offset])
      mean = tf.zeros([0]) if is_training else tf.constant([0.1, -0.2, 0.3])
      variance = tf.zeros([0]) if is_training else tf.constant([1.5, 0.5, 2.0])
      y = op(
          x=x, scale=scale, offset=offset, mean=mean, variance=variance, epsilon=0.01,
          is_training=is_training, data_format=data_format)[0]
    return tape.gradient(y, [x, scale, offset], output_gradients=dy)

  return build


def _pool_grad(pool, **kwargs):
  """The gradient of a pooling op w.r.t. its input, for a given output gradient."""

  def build(x, dy):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = pool(x, **kwargs)
    return tape.gradient(y, x, output_gradients=dy)

  return build


def _max_pool_grad_grad(pool):
  """Second order: the gradient of a max-pooling gradient w.r.t. its output gradient."""

  def build(x, dy, ddx):
    with tf.GradientTape() as tape:
      tape.watch(dy)
      with tf.GradientTape() as inner:
        inner.watch(x)
        y = pool(x, 2, 2, "SAME")
      dx = inner.gradient(y, x, output_gradients=dy)
    return tape.gradient(dx, dy, output_gradients=ddx)

  return build


CASES = [
    # Bias, softmax, losses.
    OpCase("BiasAdd", tf.nn.bias_add, [[2, 3, 4], [4]], dtypes=_F32_F64),
    OpCase("BiasAdd-NCHW", lambda x, b: tf.nn.bias_add(x, b, data_format="NCHW"),
           [[2, 4, 3, 2], [4]]),
    OpCase("BiasAddV1", lambda x, b: tf.raw_ops.BiasAddV1(value=x, bias=b), [[2, 3, 4], [4]]),
    OpCase("BiasAddGrad", _grad(tf.nn.bias_add, 1), [[2, 3, 4], [4]], dtypes=_F32_F64,
           op_types=("BiasAddGrad",)),
    OpCase("BiasAddGrad-NCHW",
           lambda g: tf.raw_ops.BiasAddGrad(out_backprop=g, data_format="NCHW"),
           [[2, 4, 3, 2]]),
    OpCase("L2Loss", tf.nn.l2_loss, [[2, 3, 4]], dtypes=_F32_F64),
    OpCase("L2Loss-scalar", tf.nn.l2_loss, [[]]),
    OpCase("LogSoftmax", tf.nn.log_softmax, [[3, 5]], dtypes=_F32_F64),
    OpCase("Softmax", tf.nn.softmax, [[3, 5]], dtypes=_F32_F64),
    OpCase("Softmax-rank1", tf.nn.softmax, [[5]]),
    OpCase("SoftmaxCrossEntropyWithLogits",
           lambda f, l: tf.raw_ops.SoftmaxCrossEntropyWithLogits(features=f, labels=l),
           [[3, 5], [3, 5]], dtypes=_F32_F64),
    OpCase("SparseSoftmaxCrossEntropyWithLogits",
           lambda f, l: tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(features=f, labels=l),
           [[3, 5], [3]], dtypes=[(tf.float32, tf.int32), (tf.float64, tf.int64)],
           make=[None, indices_below(5)]),
    # Top-k.
    OpCase("InTopK", lambda p, t: tf.raw_ops.InTopK(predictions=p, targets=t, k=2),
           [[3, 5], [3]], dtypes=[(tf.float32, tf.int32)], make=[None, indices_below(5)],
           xla="XLA has no InTopK kernel"),
    OpCase("InTopKV2", lambda p, t: tf.math.in_top_k(t, p, 2), [[3, 5], [3]],
           dtypes=[(tf.float32, tf.int32), (tf.float32, tf.int64)],
           make=[None, indices_below(5)]),
    OpCase("NthElement", lambda x: tf.raw_ops.NthElement(input=x, n=1), [[3, 5]],
           dtypes=[tf.float32, tf.int32], xla="XLA has no NthElement kernel"),
    OpCase("TopKV2", lambda x: tf.math.top_k(x, 2), [[3, 5]], dtypes=[tf.float32, tf.int32]),
    # Convolutions.
    OpCase("Conv2D", _conv(), [[2, 6, 6, 3], [3, 3, 3, 4]], dtypes=_F32_F64, tol=_TOL),
    OpCase("Conv2D-strided-valid", _conv(2, "VALID"), [[2, 7, 6, 3], [3, 2, 3, 4]], tol=_TOL),
    OpCase("Conv2D-strided-same", _conv((2, 3), "SAME"), [[2, 7, 6, 3], [3, 2, 3, 4]],
           tol=_TOL),
    OpCase("Conv2D-dilated", _conv(1, "SAME", 2), [[2, 6, 7, 3], [3, 2, 3, 4]], tol=_TOL),
    OpCase("Conv2D-explicit", _conv((2, 1), [[0, 0], [1, 2], [2, 0], [0, 0]]),
           [[2, 6, 6, 3], [3, 3, 3, 4]], tol=_TOL),
    OpCase("Conv2D-tape-input", _grad(_conv(), 0), [[2, 6, 6, 3], [3, 3, 3, 4]], tol=_TOL,
           op_types=("Conv2D", "Conv2DBackpropInput")),
    OpCase("Conv2DBackpropFilter-tape", _grad(_conv(), 1), [[2, 6, 6, 3], [3, 3, 3, 4]],
           dtypes=_F32_F64, tol=_TOL, op_types=("Conv2D", "Conv2DBackpropFilter")),
    OpCase("Conv2DBackpropFilter-tape-strided",
           _grad(_conv((2, 1), [[0, 0], [1, 2], [2, 0], [0, 0]]), 1),
           [[2, 7, 6, 3], [3, 2, 3, 4]], tol=_TOL, op_types=("Conv2DBackpropFilter",)),
    OpCase("Conv2DBackpropFilter",
           _backprop_filter("Conv2DBackpropFilter", [3, 3, 3, 4], **_conv_attrs()),
           [[2, 6, 6, 3], [2, 6, 6, 4]], dtypes=_F32_F64, tol=_TOL),
    OpCase("Conv2DBackpropFilter-strided-valid",
           _backprop_filter("Conv2DBackpropFilter", [3, 2, 3, 4],
                            **_conv_attrs((2, 2), "VALID")),
           [[2, 7, 6, 3], [2, 3, 3, 4]], tol=_TOL),
    OpCase("Conv2DBackpropFilter-explicit",
           _backprop_filter("Conv2DBackpropFilter", [3, 3, 3, 4],
                            **_conv_attrs((2, 1), "EXPLICIT", explicit=_EXPLICIT)),
           [[2, 6, 6, 3], [2, 4, 6, 4]], tol=_TOL),
    OpCase("Conv2DBackpropInput",
           _backprop_input("Conv2DBackpropInput", [2, 6, 6, 3], **_conv_attrs()),
           [[3, 3, 3, 4], [2, 6, 6, 4]], dtypes=_F32_F64, tol=_TOL),
    # Into more than 4 channels: the forward convolution of a flipped filter (backprop.py).
    OpCase("Conv2DBackpropInput-as-conv",
           _backprop_input("Conv2DBackpropInput", [2, 6, 5, 6], **_conv_attrs()),
           [[3, 5, 6, 4], [2, 6, 5, 4]], dtypes=_F32_F64, tol=_TOL,
           op_types=("Conv2DBackpropInput",)),
    OpCase("Conv2DBackpropInput-strided-same",
           _backprop_input("Conv2DBackpropInput", [2, 7, 6, 3], **_conv_attrs((2, 3))),
           [[3, 2, 3, 4], [2, 4, 2, 4]], tol=_TOL),
    OpCase("Conv2DBackpropInput-strided-valid",
           _backprop_input("Conv2DBackpropInput", [2, 7, 6, 3],
                           **_conv_attrs((2, 2), "VALID")),
           [[3, 2, 3, 4], [2, 3, 3, 4]], tol=_TOL),
    OpCase("Conv2DBackpropInput-explicit",
           _backprop_input("Conv2DBackpropInput", [2, 6, 6, 3],
                           **_conv_attrs((2, 1), "EXPLICIT", explicit=_EXPLICIT)),
           [[3, 3, 3, 4], [2, 4, 6, 4]], tol=_TOL),
    OpCase("Conv2DBackpropInput-transpose",
           lambda dy, f: tf.nn.conv2d_transpose(dy, f, [2, 7, 6, 3], 2, "SAME"),
           [[2, 4, 3, 4], [3, 3, 3, 4]], tol=_TOL, op_types=("Conv2DBackpropInput",)),
    OpCase("Conv3D", lambda x, f: tf.nn.conv3d(x, f, [1, 1, 1, 1, 1], "SAME"),
           [[2, 4, 5, 4, 2], [2, 3, 2, 2, 3]], tol=_TOL),
    OpCase("Conv3D-strided-valid", lambda x, f: tf.nn.conv3d(x, f, [1, 2, 1, 2, 1], "VALID"),
           [[2, 5, 5, 4, 2], [2, 3, 2, 2, 3]], tol=_TOL),
    OpCase("Conv3DBackpropFilterV2",
           _grad(lambda x, f: tf.nn.conv3d(x, f, [1, 2, 1, 1, 1], "SAME"), 1),
           [[2, 5, 4, 4, 2], [2, 3, 2, 2, 3]], tol=_TOL, op_types=("Conv3DBackpropFilterV2",)),
    OpCase("Conv3DBackpropInputV2",
           _grad(lambda x, f: tf.nn.conv3d(x, f, [1, 2, 1, 2, 1], "SAME"), 0),
           [[2, 5, 4, 5, 2], [2, 3, 2, 2, 3]], tol=_TOL, op_types=("Conv3DBackpropInputV2",)),
    OpCase("DepthwiseConv2dNative", _depthwise(), [[2, 6, 6, 3], [3, 3, 3, 2]],
           dtypes=_F32_F64, tol=_TOL),
    OpCase("DepthwiseConv2dNative-strided-explicit",
           _depthwise((2, 2), "EXPLICIT", _EXPLICIT), [[2, 7, 6, 3], [3, 2, 3, 2]], tol=_TOL),
    OpCase("DepthwiseConv2dNativeBackpropFilter", _grad(_depthwise(), 1),
           [[2, 6, 6, 3], [3, 3, 3, 2]], dtypes=_F32_F64, tol=_TOL,
           op_types=("DepthwiseConv2dNativeBackpropFilter",)),
    OpCase("DepthwiseConv2dNativeBackpropFilter-strided-explicit",
           _grad(_depthwise((2, 2), "EXPLICIT", _EXPLICIT), 1), [[2, 7, 6, 3], [3, 2, 3, 2]],
           tol=_TOL, op_types=("DepthwiseConv2dNativeBackpropFilter",)),
    OpCase("DepthwiseConv2dNativeBackpropInput", _grad(_depthwise(), 0),
           [[2, 6, 6, 3], [3, 3, 3, 2]], dtypes=_F32_F64, tol=_TOL,
           op_types=("DepthwiseConv2dNativeBackpropInput",)),
    OpCase("DepthwiseConv2dNativeBackpropInput-strided-valid",
           _grad(_depthwise((2, 2), "VALID"), 0), [[2, 7, 6, 3], [3, 2, 3, 2]], tol=_TOL,
           op_types=("DepthwiseConv2dNativeBackpropInput",)),
    # Pooling and normalization.
    OpCase("AvgPool", lambda x: tf.nn.avg_pool2d(x, 2, 2, "SAME"), [[2, 5, 4, 3]],
           dtypes=_F32_F64),
    OpCase("AvgPool3D", lambda x: tf.nn.avg_pool3d(x, 2, 2, "VALID"), [[2, 4, 5, 4, 3]]),
    OpCase("AvgPoolGrad", _pool_grad(tf.nn.avg_pool2d, ksize=3, strides=2, padding="SAME"),
           [[2, 5, 4, 3], [2, 3, 2, 3]], dtypes=_F32_F64),
    OpCase("AvgPool3DGrad",
           _pool_grad(tf.nn.avg_pool3d, ksize=2, strides=2, padding="VALID"),
           [[2, 4, 5, 4, 3], [2, 2, 2, 2, 3]]),
    OpCase("LRN", lambda x: tf.nn.local_response_normalization(x, 2, 1.0, 0.5, 0.75),
           [[2, 3, 4, 5]]),
    OpCase("LRNGrad", _pool_grad(tf.nn.local_response_normalization, depth_radius=2,
                                 bias=1.0, alpha=0.5, beta=0.75),
           [[2, 3, 4, 5], [2, 3, 4, 5]], tol=_TOL),
    OpCase("MaxPool", lambda x: tf.nn.max_pool2d(x, 2, 2, "SAME"), [[2, 5, 4, 3]],
           dtypes=[tf.float32, tf.float64, tf.int32]),
    OpCase("MaxPool3D", lambda x: tf.nn.max_pool3d(x, 2, 1, "SAME"), [[2, 4, 3, 4, 3]]),
    OpCase("MaxPool3DGrad", _pool_grad(tf.nn.max_pool3d, ksize=2, strides=2, padding="SAME"),
           [[2, 4, 3, 4, 3], [2, 2, 2, 2, 3]]),
    OpCase("MaxPoolGrad", _pool_grad(tf.nn.max_pool2d, ksize=3, strides=2, padding="VALID"),
           [[2, 5, 6, 3], [2, 2, 2, 3]], dtypes=_F32_F64),
    # Windows that tile the input (ksize == strides): SAME with an odd size, SAME with padding
    # before the input, VALID with a remainder.
    OpCase("MaxPoolGrad-tiling",
           _pool_grad(tf.nn.max_pool2d, ksize=2, strides=2, padding="SAME"),
           [[2, 5, 4, 3], [2, 3, 2, 3]], dtypes=_F32_F64, op_types=("MaxPoolGrad",)),
    OpCase("MaxPoolGrad-tiling-3", _pool_grad(tf.nn.max_pool2d, ksize=3, strides=3,
                                              padding="SAME"),
           [[2, 7, 8, 3], [2, 3, 3, 3]], op_types=("MaxPoolGrad",)),
    OpCase("MaxPoolGrad-tiling-valid", _pool_grad(tf.nn.max_pool2d, ksize=2, strides=2,
                                                  padding="VALID"),
           [[2, 5, 5, 3], [2, 2, 2, 3]], op_types=("MaxPoolGrad",)),
    OpCase("MaxPool3DGradGrad", _max_pool_grad_grad(tf.nn.max_pool3d),
           [[2, 3, 4, 3, 2], [2, 2, 2, 2, 2], [2, 3, 4, 3, 2]], op_types=("MaxPool3DGradGrad",)),
    OpCase("MaxPoolGradGrad", _max_pool_grad_grad(tf.nn.max_pool2d),
           [[2, 5, 4, 3], [2, 3, 2, 3], [2, 5, 4, 3]], op_types=("MaxPoolGradGrad",)),
    OpCase("MaxPoolGradGradV2",
           lambda x, dy: tf.raw_ops.MaxPoolGradGradV2(
               orig_input=x, orig_output=tf.nn.max_pool2d(x, 2, 2, "SAME"), grad=dy,
               ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME"),
           [[2, 5, 4, 3], [2, 5, 4, 3]]),
    OpCase("MaxPoolWithArgmax",
           lambda x: tf.nn.max_pool_with_argmax(x, 2, 2, "SAME", include_batch_in_index=True),
           [[2, 5, 4, 3]], dtypes=_F32_F64, xla="XLA has no MaxPoolWithArgmax kernel"),
    OpCase("MaxPoolWithArgmax-per-image", lambda x: tf.nn.max_pool_with_argmax(x, 2, 1, "VALID"),
           [[2, 5, 4, 3]], xla="XLA has no MaxPoolWithArgmax kernel"),
    OpCase("MaxPoolGradWithArgmax",
           _pool_grad(lambda x, **kwargs: tf.nn.max_pool_with_argmax(x, **kwargs)[0], ksize=2,
                      strides=2, padding="SAME", include_batch_in_index=True),
           [[2, 5, 4, 3], [2, 3, 2, 3]], op_types=("MaxPoolGradWithArgmax",),
           xla="XLA has no MaxPoolWithArgmax kernel"),
    OpCase("MaxPoolGradWithArgmax-per-image",
           lambda x, dy, a: tf.raw_ops.MaxPoolGradWithArgmax(
               input=x, grad=dy, argmax=a, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1],
               padding="SAME"),
           [[2, 5, 4, 3], [2, 3, 2, 3], [2, 3, 2, 3]], dtypes=[(tf.float32,) * 2 + (tf.int64,)],
           make=[None, None, indices_below(60)], op_types=("MaxPoolGradWithArgmax",),
           xla="XLA has no MaxPoolGradWithArgmax kernel"),
    OpCase("MaxPoolV2",
           lambda x: tf.raw_ops.MaxPoolV2(input=x, ksize=[1, 2, 2, 1], strides=[1, 2, 1, 1],
                                          padding="SAME"), [[2, 5, 4, 3]]),
    OpCase("MaxPoolGradV2",
           lambda x, dy: tf.raw_ops.MaxPoolGradV2(
               orig_input=x, orig_output=tf.nn.max_pool2d(x, 2, 2, "SAME"), grad=dy,
               ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME"),
           [[2, 5, 4, 3], [2, 3, 2, 3]]),
    OpCase("FusedBatchNormV3-training", _batch_norm(True),
           [[2, 3, 2, 3], [3], [3], [0], [0]], tol=_TOL, op_types=("FusedBatchNormV3",),
           patterns=[(True, False, False, False, False), (True, True, True, False, False),
                     (False, True, False, False, False), (False, False, True, False, False)]),
    OpCase("FusedBatchNormV3-training-average", _batch_norm(True, factor=0.25),
           [[2, 3, 2, 3], [3], [3], [3], [3]], tol=_TOL, op_types=("FusedBatchNormV3",),
           make=[None, None, None, None, positive]),
    OpCase("FusedBatchNormV3-training-NCHW", _batch_norm(True, "NCHW"),
           [[2, 3, 2, 3], [3], [3], [0], [0]], tol=_TOL, op_types=("FusedBatchNormV3",),
           patterns=[(True, False, False, False, False), (True, True, True, False, False)]),
    OpCase("FusedBatchNormV3-inference", _batch_norm(False),
           [[2, 3, 2, 3], [3], [3], [3], [3]], tol=_TOL, op_types=("FusedBatchNormV3",),
           make=[None, None, None, None, positive]),
    OpCase("FusedBatchNorm", _batch_norm(True, version=""),
           [[2, 3, 2, 3], [3], [3], [0], [0]], tol=_TOL,
           patterns=[(True, False, False, False, False), (True, True, True, False, False)]),
    OpCase("FusedBatchNormV2-inference", _batch_norm(False, version="V2"),
           [[2, 3, 2, 3], [3], [3], [3], [3]], tol=_TOL, op_types=("FusedBatchNormV2",),
           make=[None, None, None, None, positive],
           patterns=[(True, False, False, False, False), (False, False, False, True, True),
                     (True, True, True, True, True)]),
    OpCase("FusedBatchNormGradV3-training", _batch_norm_grad(True),
           [[2, 3, 2, 3], [3], [3], [2, 3, 2, 3]], tol=_TOL,
           op_types=("FusedBatchNormV3", "FusedBatchNormGradV3")),
    OpCase("FusedBatchNormGradV3-training-NCHW", _batch_norm_grad(True, "NCHW"),
           [[2, 3, 2, 3], [3], [3], [2, 3, 2, 3]], tol=_TOL,
           op_types=("FusedBatchNormV3", "FusedBatchNormGradV3"),
           patterns=[(True, False, False, True), (True, True, True, True)]),
    OpCase("FusedBatchNormGrad", _batch_norm_grad(True, version=""),
           [[2, 3, 2, 3], [3], [3], [2, 3, 2, 3]], tol=_TOL,
           patterns=[(True, False, False, True), (False, True, True, True)]),
    OpCase("FusedBatchNormGradV2-inference", _batch_norm_grad(False, version="V2"),
           [[2, 3, 2, 3], [3], [3], [2, 3, 2, 3]], tol=_TOL, op_types=("FusedBatchNormGradV2",),
           patterns=[(True, False, False, True), (False, False, False, True)]),
    OpCase("FusedBatchNormGradV3-inference", _batch_norm_grad(False),
           [[2, 3, 2, 3], [3], [3], [2, 3, 2, 3]], tol=_TOL,
           op_types=("FusedBatchNormV3", "FusedBatchNormGradV3")),
]
