"""Kernels that abort the process on an empty batch must never see one.

oneDNN's MaxPoolGrad and MaxPool3DGrad abort (`Check failed: dtype() == expected_dtype`) on
an empty batch on some CPUs; which kernel runs depends on the CPU. `ONEDNN_MAX_CPU_ISA`
selects such a path on any x86 machine, so each case runs in a subprocess with it set: an
abort fails the test instead of killing the test worker.
"""

import os
import subprocess
import sys
import textwrap

import pytest

_SCRIPT = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    import vectorize

    def pool_grad_2d(x, dy):
      return tf.raw_ops.MaxPoolGrad(orig_input=x, orig_output=tf.nn.max_pool2d(x, 2, 2, "VALID"),
                                    grad=dy, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1],
                                    padding="VALID")

    def pool_grad_3d(x, dy):
      return tf.raw_ops.MaxPool3DGrad(orig_input=x, orig_output=tf.nn.max_pool3d(x, 2, 2, "VALID"),
                                      grad=dy, ksize=[1, 2, 2, 2, 1], strides=[1, 2, 2, 2, 1],
                                      padding="VALID")

    cases = [(pool_grad_2d, [1, 4, 4, 3], [1, 2, 2, 3]),
             (pool_grad_3d, [1, 4, 4, 4, 3], [1, 2, 2, 2, 3])]
    for grad, x_shape, dy_shape in cases:
      xs = tf.random.normal([2] + x_shape)
      dys = tf.random.normal([2] + dy_shape)
      body = lambda i: grad(xs[i], dys[i])
      static = tf.function(lambda: vectorize.pfor(body, 0, fallback_to_while_loop=False))()
      dynamic = tf.function(lambda n: vectorize.pfor(body, n, fallback_to_while_loop=False),
                            input_signature=[tf.TensorSpec([], tf.int32)])(tf.constant(0))
      assert static.shape == [0] + x_shape, static.shape
      assert dynamic.shape == [0] + x_shape, dynamic.shape
    print("ok")
""")


@pytest.mark.parametrize("isa", ["AVX2", "SSE41"])
def test_max_pool_gradients_at_n0_do_not_abort(isa):
  env = dict(os.environ, ONEDNN_MAX_CPU_ISA=isa, TF_ENABLE_ONEDNN_OPTS="1",
             TF_CPP_MIN_LOG_LEVEL="2")
  result = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
  assert result.returncode == 0 and result.stdout.strip().endswith("ok"), (
      f"exit code {result.returncode}:\n{result.stderr[-3000:]}")
