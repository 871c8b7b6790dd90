"""TF1-style code: tf.compat.v1 graphs and Sessions; disable_v2_behavior in a subprocess."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import vectorize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_graph_and_session_pfor():
  g = tf.Graph()
  with g.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [4, 3])
    out = vectorize.pfor(lambda i: tf.reduce_sum(x[i] ** 2) * tf.cast(i, tf.float32), 4)
    ref = tf.stack([tf.reduce_sum(x[i] ** 2) * float(i) for i in range(4)])
    with tf.compat.v1.Session(graph=g) as sess:
      xv = np.random.default_rng(0).normal(size=[4, 3]).astype(np.float32)
      a, b = sess.run([out, ref], {x: xv})
  np.testing.assert_allclose(a, b, rtol=1e-6)


def test_graph_placeholder_runtime_n():
  g = tf.Graph()
  with g.as_default():
    n = tf.compat.v1.placeholder(tf.int32, [])
    out = vectorize.pfor(lambda i: tf.range(3) * i, n)
    with tf.compat.v1.Session(graph=g) as sess:
      np.testing.assert_array_equal(sess.run(out, {n: 3}), [[0, 0, 0], [0, 1, 2], [0, 2, 4]])
      assert sess.run(out, {n: 0}).shape == (0, 3)


def test_graph_variable_assign_add_op_output():
  g = tf.Graph()
  with g.as_default():
    v = tf.compat.v1.get_variable("v", initializer=0.0, use_resource=True)
    x = tf.constant([1.0, 2.0, 3.0])
    op = vectorize.pfor(lambda i: v.assign_add(x[i]).op, 3)
    with tf.compat.v1.Session(graph=g) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      sess.run(op)
      assert sess.run(v) == 6.0


def test_graph_jacobian_and_batch_jacobian():
  g = tf.Graph()
  with g.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [2, 3])
    y = tf.tanh(x) * tf.reduce_sum(x, axis=1, keepdims=True)
    jac = vectorize.jacobian(y, x)
    bj = vectorize.batch_jacobian(y, x)
    from tensorflow.python.ops.parallel_for import gradients as tfpg
    jac_ref = tfpg.jacobian(y, x, use_pfor=False)
    bj_ref = tf.stack([jac_ref[b, :, b, :] for b in range(2)])
    with tf.compat.v1.Session(graph=g) as sess:
      xv = np.random.default_rng(1).normal(size=[2, 3]).astype(np.float32)
      a, b, c, d = sess.run([jac, jac_ref, bj, bj_ref], {x: xv})
  np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(c, d, rtol=1e-5, atol=1e-6)


def test_graph_tf_gradients_per_example():
  g = tf.Graph()
  with g.as_default():
    w = tf.compat.v1.get_variable("w", initializer=tf.ones([3, 2]), use_resource=True)
    x = tf.constant(np.random.default_rng(2).normal(size=[4, 3]).astype(np.float32))
    def fn(i):
      loss = tf.reduce_sum(tf.matmul(x[i:i + 1], w) ** 2)
      return tf.gradients(loss, w)[0]
    out = vectorize.pfor(fn, 4)
    ref = tf.stack([fn(tf.constant(i)) for i in range(4)])
    with tf.compat.v1.Session(graph=g) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      a, b = sess.run([out, ref])
  np.testing.assert_allclose(a, b, rtol=1e-5)


def _run_script(code):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                       capture_output=True, text=True, timeout=240)
  assert res.returncode == 0, res.stderr[-3000:]
  return res.stdout


def test_disable_v2_behavior_ragged_and_gradients_subprocess():
  out = _run_script("""
      import numpy as np
      import tensorflow as tf
      tf.compat.v1.disable_v2_behavior()
      import vectorize
      x = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3) - 5)
      w = tf.compat.v1.get_variable("w", initializer=tf.ones([3]))
      out = vectorize.pfor(lambda i: tf.gradients(tf.reduce_sum(tf.sin(x[i] * w)), w)[0], 4)
      rag = vectorize.pfor(lambda i: tf.boolean_mask(x[i], x[i] > 0), 4)
      with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        got, r = sess.run([out, rag])
        xv = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
        np.testing.assert_allclose(got, np.cos(xv) * xv, rtol=1e-5)
        assert [list(a) for a in r.to_list()] == [[v for v in row if v > 0] for row in xv.tolist()], r
      print("OK")
  """)
  assert "OK" in out


def test_disable_v2_behavior_cond_minimal_subprocess():
  out = _run_script("""
      import numpy as np, tensorflow as tf
      tf.compat.v1.disable_v2_behavior()
      import vectorize
      x = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3) - 2)
      out = vectorize.pfor(lambda i: tf.cond(tf.reduce_sum(x[i]) > 0, lambda: x[i] * 2.0, lambda: -x[i]), 2)
      with tf.compat.v1.Session() as s:
        np.testing.assert_allclose(s.run(out), [[2., 1., 0.], [2., 4., 6.]])
      print("OK")
  """)
  assert "OK" in out


def test_disable_v2_behavior_while_subprocess():
  out = _run_script("""
      import numpy as np, tensorflow as tf
      tf.compat.v1.disable_v2_behavior()
      import vectorize
      xv = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
      x = tf.constant(xv)
      out = vectorize.pfor(lambda i: tf.while_loop(lambda k, a: k < i + 1,
                                                   lambda k, a: (k + 1, a + x[i]),
                                                   (0, tf.zeros([3])))[1], 2)
      with tf.compat.v1.Session() as s:
        np.testing.assert_allclose(s.run(out), [xv[0], 2 * xv[1]])
      print("OK")
  """)
  assert "OK" in out
