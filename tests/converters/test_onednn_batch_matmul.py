"""Batch matmuls with a per-iteration batch of one stay clear of a oneDNN kernel bug.

TF 2.21's oneDNN BatchMatMulV2 (CPU, float32 and bfloat16) returns garbage, or corrupts the
heap, for rank-4 operands whose batch dims are `[b, 1]` against `[1, 1]` (b >= 3, six rows
or more): exactly what the loop axis makes of a per-iteration `[1, m, k] @ [1, k, p]`. Each
case runs in a subprocess with oneDNN on, so a corrupted heap fails the test rather than
killing the test worker.
"""

import os
import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    import vectorize

    rng = np.random.default_rng(0)
    n = 16
    x = tf.constant(rng.standard_normal([n, 1, 10, 20]), tf.float32)
    w = tf.constant(rng.standard_normal([1, 20, 30]), tf.float32)
    w_t = tf.constant(rng.standard_normal([1, 1, 30, 20]), tf.float32)

    def plain(i):
      return tf.matmul(x[i], w)

    def adjoint_rhs(i):                  # a rank-4 invariant with batch dims of one
      return tf.matmul(x[i][None], w_t, transpose_b=True)

    def bfloat16(i):
      return tf.cast(tf.matmul(tf.cast(x[i], tf.bfloat16), tf.cast(w, tf.bfloat16)), tf.float32)

    def weight_gradient(i):              # the gradient's matmul takes an adjoint of x
      with tf.GradientTape() as tape:
        tape.watch(w)
        loss = tf.reduce_sum(tf.tanh(tf.matmul(x[i], w)))
      return tape.gradient(loss, w)

    def input_gradient(i):
      xi = x[i]
      with tf.GradientTape() as tape:
        tape.watch(xi)
        loss = tf.reduce_sum(tf.tanh(tf.matmul(xi, w)))
      return tape.gradient(loss, xi)

    for body in [plain, adjoint_rhs, bfloat16, weight_gradient, input_gradient]:
      expected = tf.stack([body(tf.constant(i)) for i in range(n)])
      for run in [lambda: vectorize.pfor(body, n, fallback_to_while_loop=False),
                  tf.function(lambda: vectorize.pfor(body, n, fallback_to_while_loop=False))]:
        out = run()
        tol = 0.1 if body is bfloat16 else 1e-4
        np.testing.assert_allclose(out, expected, rtol=tol, atol=tol, err_msg=body.__name__)
    print("ok")
""")


def test_batch_of_one_matmuls_against_broadcast_weights():
  env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1", TF_CPP_MIN_LOG_LEVEL="2")
  result = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
  assert result.returncode == 0 and result.stdout.strip().endswith("ok"), (
      f"exit code {result.returncode}:\n{result.stderr[-3000:]}")
