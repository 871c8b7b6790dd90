"""A static n = 0 must not kill the process in Grappler.

With n a Python 0, values computed from the loop index and constants fold to empty
constants, and Grappler's ArithmeticOptimizer divided by zero (SIGFPE) rewriting a product of
such a constant with another empty value it broadcasts (TF 2.21). Each case runs in a
subprocess, so an abort fails the test instead of killing the test worker.
"""

import os
import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    import vectorize

    x = tf.random.normal([4, 6, 1])

    def body(i):   # x[i] [6, 1] times a [1, 1, 5] computed from i and constants
      return x[i] * (tf.reshape(tf.cast(i, tf.float32), [1, 1, 1]) * tf.ones([1, 1, 5]))

    def one_hot_body(i):
      return x[i] * tf.one_hot(i, 5)[None]

    for fn, want in ((body, [0, 1, 6, 5]), (one_hot_body, [0, 6, 5])):
      assert fn(tf.constant(0)).shape == want[1:]
      convert = lambda: vectorize.pfor(fn, 0, fallback_to_while_loop=False)
      for mode, got in (("eager", convert()), ("function", tf.function(convert)()),
                        ("xla", tf.function(convert, jit_compile=True)())):
        assert got.shape == want, (fn.__name__, mode, got.shape)
      mapped = vectorize.vectorized_map(lambda e: e * tf.one_hot(2, 5)[None],
                                        tf.zeros([0, 6, 1]))
      assert mapped.shape == [0, 6, 5], mapped.shape
      # n = 3 still equals the loop
      got = vectorize.pfor(fn, 3, fallback_to_while_loop=False)
      np.testing.assert_allclose(got, tf.stack([fn(tf.constant(i)) for i in range(3)]))
    print("ok")
""")


def test_products_of_index_constants_at_static_n0_do_not_abort():
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  result = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
  assert result.returncode == 0 and result.stdout.strip().endswith("ok"), (
      f"exit code {result.returncode}:\n{result.stderr[-3000:]}")
