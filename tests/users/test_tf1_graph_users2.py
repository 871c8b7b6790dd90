"""TF1-style programs: a tf.Graph with a Session and placeholders fed by feed_dict, variables
made inside the body, tf.gradients, v1 while loops; disable_v2_behavior only in a subprocess.
The checked mode stays on (conftest), so each pfor here is also checked against the loop."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import vectorize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
XV = (np.arange(12, dtype=np.float32).reshape(4, 3) - 5) / 3


def run_script(src):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  p = subprocess.run([sys.executable, "-c", textwrap.dedent(src)], env=env, cwd=ROOT,
                     capture_output=True, text=True, timeout=300)
  assert p.returncode == 0 and "OK" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]
  return p.stdout


def graph_loop(body, n):
  return tf.stack([body(tf.constant(i)) for i in range(n)])


def test_placeholder_feed_various_batch_sizes_including_zero():
  with tf.Graph().as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3])
    out = vectorize.pfor(lambda i: tf.tanh(x[i]) * tf.reduce_max(x[i]), tf.shape(x)[0])
    with tf.compat.v1.Session() as s:
      for k in (4, 1, 0):
        got = s.run(out, {x: XV[:k]})
        assert got.shape == (k, 3) and got.dtype == np.float32
        np.testing.assert_allclose(got, np.tanh(XV[:k]) * XV[:k].max(1, keepdims=True), rtol=1e-6)


def test_placeholder_ragged_output_in_session():
  with tf.Graph().as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3])
    out = vectorize.pfor(lambda i: tf.boolean_mask(x[i], x[i] > 0), tf.shape(x)[0])
    with tf.compat.v1.Session() as s:
      got = s.run(out, {x: XV})
  assert got.to_list() == [[float(v) for v in row if v > 0] for row in XV]


def test_get_variable_inside_body():
  with tf.Graph().as_default():
    x = tf.constant(XV)
    def body(i):
      with tf.compat.v1.variable_scope("dense", reuse=tf.compat.v1.AUTO_REUSE):
        w = tf.compat.v1.get_variable("w", initializer=tf.reshape(tf.range(6.0), [3, 2]) / 5)
        b = tf.compat.v1.get_variable("b", initializer=tf.ones([2]))
      return tf.nn.relu(tf.matmul(x[i][None], w)[0] + b)
    out = vectorize.pfor(body, 4)
    ref = graph_loop(body, 4)
    with tf.compat.v1.Session() as s:
      s.run(tf.compat.v1.global_variables_initializer())
      g, r = s.run([out, ref])
  np.testing.assert_allclose(g, r, rtol=1e-6)


def test_tf_gradients_wrt_placeholder_input():
  with tf.Graph().as_default():
    x = tf.compat.v1.placeholder(tf.float32, [4, 3])
    w = tf.constant([[1.0], [-2.0], [0.5]])
    def body(i):
      xi = x[i]
      y = tf.reduce_sum(tf.sin(tf.matmul(xi[None], w)))
      return tf.gradients(y, xi)[0]
    out = vectorize.pfor(body, 4)
    ref = graph_loop(body, 4)
    with tf.compat.v1.Session() as s:
      g, r = s.run([out, ref], {x: XV})
  np.testing.assert_allclose(g, r, rtol=1e-5)


def test_graph_while_tensorarray_per_example_trips():
  with tf.Graph().as_default():
    x = tf.compat.v1.placeholder(tf.float32, [4, 3])
    def body(i):
      ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[3])
      def st(t, ta):
        return t + 1, ta.write(t, x[i] * tf.cast(t, tf.float32))
      _, ta = tf.while_loop(lambda t, ta: t < i + 1, st, (0, ta))
      return tf.reduce_sum(ta.stack(), 0), ta.size()
    out = vectorize.pfor(body, 4)
    with tf.compat.v1.Session() as s:
      g, sz = s.run(out, {x: XV})
  np.testing.assert_array_equal(sz, [1, 2, 3, 4])
  np.testing.assert_allclose(g, XV * np.array([0, 1, 3, 6])[:, None], rtol=1e-6)


def test_graph_resource_variable_assign_add_run_twice():
  with tf.Graph().as_default():
    x = tf.constant(XV)
    v = tf.Variable(tf.zeros([3]))
    out = vectorize.pfor(lambda i: v.assign_add(x[i]).read_value() * 0 + x[i], 4)
    with tf.compat.v1.Session() as s:
      s.run(v.initializer)
      s.run(out)
      s.run(out)
      np.testing.assert_allclose(s.run(v), 2 * XV.sum(0), rtol=1e-5)


def test_graph_checked_mode_all_passes_correct_program(monkeypatch):
  monkeypatch.setenv("VECTORIZE_CHECKED", "all")
  with tf.Graph().as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3])
    out = vectorize.pfor(lambda i: tf.cumsum(x[i]) + tf.cast(i, tf.float32), tf.shape(x)[0])
    with tf.compat.v1.Session() as s:
      got = s.run(out, {x: XV})
  np.testing.assert_allclose(got, np.cumsum(XV, 1) + np.arange(4)[:, None], rtol=1e-6)


def test_v1_while_loop_tensorarray_subprocess():
  run_script("""
    import numpy as np, tensorflow as tf
    tf.compat.v1.disable_v2_behavior()
    import vectorize
    xv = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    x = tf.compat.v1.placeholder(tf.float32, [None, 3])
    def body(i):
      ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[3])
      def st(t, ta): return t + 1, ta.write(t, x[i] * tf.cast(t, tf.float32))
      _, ta = tf.compat.v1.while_loop(lambda t, ta: t < i + 1, st, (0, ta))
      return tf.reduce_sum(ta.stack(), 0), ta.size()
    out = vectorize.pfor(body, tf.shape(x)[0])
    with tf.compat.v1.Session() as s:
      g, sz = s.run(out, {x: xv})
      np.testing.assert_array_equal(sz, [1, 2, 3, 4])
      np.testing.assert_allclose(g, xv * np.array([0, 1, 3, 6])[:, None])
      g0, sz0 = s.run(out, {x: xv[:0]})
      assert g0.shape == (0, 3) and sz0.shape == (0,), (g0.shape, sz0.shape)
    print("OK")
  """)


def test_v1_get_variable_cond_and_gradients_subprocess():
  run_script("""
    import numpy as np, tensorflow as tf
    tf.compat.v1.disable_v2_behavior()
    import vectorize
    xv = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    x = tf.compat.v1.placeholder(tf.float32, [4, 3])
    def body(i):
      with tf.compat.v1.variable_scope("m", reuse=tf.compat.v1.AUTO_REUSE):
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([0.5, -1.0, 2.0]), use_resource=True)
      y = tf.compat.v1.cond(tf.reduce_sum(x[i]) > 0, lambda: tf.reduce_sum(x[i] * w) ** 2,
                            lambda: tf.reduce_sum(tf.sin(x[i] * w)))
      return tf.gradients(y, w)[0]
    out = vectorize.pfor(body, 4)
    ref = tf.stack([body(tf.constant(k)) for k in range(4)])
    with tf.compat.v1.Session() as s:
      s.run(tf.compat.v1.global_variables_initializer())
      g, r = s.run([out, ref], {x: xv})
      np.testing.assert_allclose(g, r, rtol=1e-5)
    print("OK")
  """)



def test_v1_resource_variable_assign_add_in_v1_while_subprocess():
  run_script("""
    import numpy as np, tensorflow as tf
    tf.compat.v1.disable_v2_behavior()
    import vectorize
    xv = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    x = tf.constant(xv)
    v = tf.compat.v1.get_variable("acc", initializer=tf.zeros([3]), use_resource=True)
    def body(i):
      def st(t):
        with tf.control_dependencies([v.assign_add(x[i])]):
          return t + 1
      return tf.compat.v1.while_loop(lambda t: t < i, st, [tf.constant(0)])
    out = vectorize.pfor(body, 4)
    with tf.compat.v1.Session() as s:
      s.run(tf.compat.v1.global_variables_initializer())
      got = s.run(out)
      np.testing.assert_array_equal(np.reshape(got, [-1]), [0, 1, 2, 3])
      np.testing.assert_allclose(s.run(v), (xv * np.arange(4)[:, None]).sum(0))
    print("OK")
  """)


def test_v1_ref_variable_assign_add_subprocess():
  """A TF1 reference variable cannot be written by a traced body: the error says so and
  names the fix (it was TensorFlow's 'input types ... not compatible with ... float32_ref')."""
  run_script("""
    import numpy as np, tensorflow as tf
    tf.compat.v1.disable_v2_behavior()
    import vectorize
    xv = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    x = tf.constant(xv)
    v = tf.compat.v1.Variable(tf.zeros([3]))
    def body(i):
      with tf.control_dependencies([v.assign_add(x[i])]):
        return x[i] * 2
    try:
      vectorize.pfor(body, 4)
    except TypeError as e:
      assert "use_resource=True" in str(e) and "reference variable" in str(e), str(e)
      print("OK")
  """)


def test_v1_checked_mode_error_in_session_names_problem_subprocess():
  """A body that raises at run time for one example: in a Session the error is TF's
  InvalidArgumentError (as for the loop), not a silent result, also in checked mode."""
  run_script("""
    import numpy as np, tensorflow as tf
    tf.compat.v1.disable_v2_behavior()
    import vectorize
    x = tf.compat.v1.placeholder(tf.float32, [None, 3])
    def body(i):
      with tf.control_dependencies([tf.debugging.assert_non_negative(x[i], message="neg example")]):
        return tf.sqrt(x[i])
    out = vectorize.pfor(body, tf.shape(x)[0])
    with tf.compat.v1.Session() as s:
      np.testing.assert_allclose(s.run(out, {x: [[1., 4., 9.]]}), [[1., 2., 3.]])
      try:
        s.run(out, {x: [[1., 4., 9.], [1., -1., 0.]]})
      except tf.errors.InvalidArgumentError as e:
        assert "neg example" in str(e), str(e)[:2000]
      else:
        raise AssertionError("no error")
    print("OK")
  """)


def test_graph_session_assign_add_in_while_loop():
  with tf.Graph().as_default():
    x = tf.constant(XV)
    v = tf.Variable(tf.zeros([3]))
    def body(i):
      def st(t):
        with tf.control_dependencies([v.assign_add(x[i])]):
          return t + 1
      return tf.while_loop(lambda t: t < i, st, [tf.constant(0)])
    out = vectorize.pfor(body, 4)
    with tf.compat.v1.Session() as s:
      s.run(v.initializer)
      np.testing.assert_array_equal(np.reshape(s.run(out), [-1]), [0, 1, 2, 3])
      np.testing.assert_allclose(s.run(v), (XV * np.arange(4)[:, None]).sum(0), rtol=1e-6)


def test_graph_session_assign_add_in_while_loop_unchecked(monkeypatch):
  """The same program with the checked mode off: right values and state."""
  monkeypatch.delenv("VECTORIZE_CHECKED", raising=False)
  with tf.Graph().as_default():
    x = tf.constant(XV)
    v = tf.Variable(tf.zeros([3]))
    def body(i):
      def st(t):
        with tf.control_dependencies([v.assign_add(x[i])]):
          return t + 1
      return tf.while_loop(lambda t: t < i, st, [tf.constant(0)])
    out = vectorize.pfor(body, 4)
    with tf.compat.v1.Session() as s:
      s.run(v.initializer)
      np.testing.assert_array_equal(np.reshape(s.run(out), [-1]), [0, 1, 2, 3])
      np.testing.assert_allclose(s.run(v), (XV * np.arange(4)[:, None]).sum(0), rtol=1e-6)
