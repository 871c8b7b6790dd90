"""TF1 graph mode (placeholders, `tf.gradients`, Session), as older clients such as
differential-privacy optimizers use pfor: per-example gradients and jacobians with a batch
size (or rank) unknown until the Session runs."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import vectorize


@pytest.mark.parametrize("shape", [[None, 3], None], ids=["unknown_batch", "unknown_rank"])
def test_gradients_and_jacobians_of_unknown_shape(shape):
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, shape)
    y = tf.sin(x) * tf.reduce_sum(x, axis=1, keepdims=True)
    per_row = vectorize.pfor(lambda i: tf.gradients(tf.gather(y, i), x)[0], tf.shape(x)[0])
    batch_jacobian = vectorize.batch_jacobian(y, x)
    jacobian = vectorize.jacobian(y, x)
  value = np.random.default_rng(0).standard_normal([2, 3]).astype(np.float32)
  with tf.compat.v1.Session(graph=graph) as session:
    rows, batch, full = session.run([per_row, batch_jacobian, jacobian], {x: value})
  # d y[b, k] / d x[b, m] = cos(x[b, k]) s[b] [k == m] + sin(x[b, k]), s[b] = sum_m x[b, m]
  s = value.sum(axis=1)
  expected = (np.cos(value)[:, :, None] * s[:, None, None] * np.eye(3)[None] +
              np.sin(value)[:, :, None])
  np.testing.assert_allclose(batch, expected, rtol=1e-5)
  np.testing.assert_allclose(full[np.arange(2), :, np.arange(2)], expected, rtol=1e-5)
  np.testing.assert_allclose(full[0, :, 1], 0.0)
  # row i: the gradient of sum_k y[i, k], nonzero in example i only
  np.testing.assert_allclose(rows[np.arange(2), np.arange(2)], expected.sum(axis=1), rtol=1e-5)
  np.testing.assert_allclose(rows[0, 1], 0.0)


@pytest.mark.parametrize("n", [3, 0])
def test_gradients_over_the_trainable_variables_of_a_layer_built_in_the_body(n):
  """A Keras layer first called in the body: the body reads its variables back from the
  TF1 collection, as `tf.gradients(loss, tf.compat.v1.trainable_variables())` code does."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3))
    layer = tf.keras.layers.Dense(2, kernel_initializer="ones", bias_initializer="ones")

    def body(i):
      y = layer(tf.gather(x, i)[None])
      return tf.gradients(tf.reduce_sum(y * y), tf.compat.v1.trainable_variables())

    vectorized = vectorize.pfor(body, n)
    looped = [tf.stack(g)[:n] for g in zip(*[body(tf.constant(i)) for i in range(3)])]
    init = tf.compat.v1.global_variables_initializer()
  assert len(vectorized) == 2
  with tf.compat.v1.Session(graph=graph) as session:
    session.run(init)
    actual, expected = session.run([vectorized, looped])
  for a, e in zip(actual, expected):
    np.testing.assert_allclose(a, e, rtol=1e-6)


_TF1_BEHAVIOUR_SCRIPT = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.ops import list_ops
    import vectorize

    tf.compat.v1.disable_v2_behavior()   # shapes index to Dimensions, v1 control flow
    x = tf.compat.v1.placeholder_with_default(
        np.arange(12, dtype=np.float32).reshape(4, 3), [4, 3])

    def with_cond(i):
      return tf.cond(tf.reduce_sum(x[i]) > 10., lambda: x[i] * 2., lambda: x[i] - 1.)

    def with_while_loop(i):
      return tf.while_loop(lambda k, a: k < i, lambda k, a: (k + 1, a + x[i]),
                           (0, tf.zeros([3])))[1]

    def with_pushes(i):   # onto a reserved list: 5 unset elements, then 3 pushed
      items = list_ops.tensor_list_reserve([2], 5, tf.float32)
      for k in range(3):
        items = list_ops.tensor_list_push_back(items, tf.stack([x[i, 0], k + 1.]))
      return list_ops.tensor_list_stack(items, tf.float32)

    def map_fn_body(row):
      return tf.cond(row[0] > 3., lambda: row * 2., lambda: row)

    checks = []
    for body, sizes in ((with_cond, (4, 2, 0)), (with_while_loop, (4, 2, 0)),
                        (with_pushes, (4, 2))):
      looped = tf.stack([body(tf.constant(i)) for i in range(4)])
      checks += [(body.__name__, n, vectorize.pfor(body, n), looped[:n]) for n in sizes]
    for n in (4, 1, 0):
      checks.append(("vectorized_map", n, vectorize.vectorized_map(map_fn_body, x[:n]),
                     tf.stack([map_fn_body(x[i]) for i in range(n)]) if n else x[:0]))
    with tf.compat.v1.Session() as session:
      for name, n, actual, expected in checks:
        actual, expected = session.run([actual, expected])
        assert actual.shape == expected.shape, (name, n, actual.shape, expected.shape)
        np.testing.assert_allclose(actual, expected, err_msg=f"{name}, n = {n}")
    print("ok")
""")


def test_tf1_behaviour_dimensions():
  """Under `disable_v2_behavior`, shapes index to `Dimension`s (unhashable, never `is
  None`): conditionals crashed, a stacked TensorList took its buffer's capacity for its
  length (extra zero rows), and vectorized_map's leading-dimension check crashed. A
  subprocess, as the switch is process-wide."""
  result = subprocess.run([sys.executable, "-c", _TF1_BEHAVIOUR_SCRIPT], capture_output=True,
                          text=True, timeout=600, check=False, env=_env())
  assert result.returncode == 0 and result.stdout.strip().endswith("ok"), (
      f"exit code {result.returncode}:\n{result.stderr[-3000:]}")


_V1_CONTROL_FLOW_GRADIENTS_SCRIPT = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    import vectorize

    tf.compat.v1.disable_v2_behavior()
    tf.compat.v1.disable_control_flow_v2()   # Enter / Exit / Merge loops, TF1 TensorArrays
    x = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3) / 10.)

    def through_a_tensor_array(i):
      xi = x[i]
      ta = tf.compat.v1.TensorArray(tf.float32, size=3).unstack(xi)
      return tf.gradients(ta.read(0) * ta.read(2), xi)[0]

    def through_a_while_loop(i):   # i + 1 trips: a per-iteration trip count
      xi = x[i]
      _, y = tf.compat.v1.while_loop(lambda k, a: k < i + 1, lambda k, a: (k + 1, a * xi),
                                     (0, tf.ones([3])))
      return tf.gradients(tf.reduce_sum(y), xi)[0]

    def through_writes_in_a_while_loop(i):
      xi = x[i]
      _, ta = tf.compat.v1.while_loop(
          lambda k, t: k < 3, lambda k, t: (k + 1, t.write(k, xi[k] * xi[k])),
          (0, tf.compat.v1.TensorArray(tf.float32, size=3)))
      return tf.gradients(tf.reduce_sum(ta.stack()), xi)[0]

    checks = []
    for body in (through_a_tensor_array, through_a_while_loop, through_writes_in_a_while_loop):
      looped = tf.stack([body(tf.constant(i)) for i in range(4)])
      checks += [(body.__name__, n, vectorize.pfor(body, n, fallback_to_while_loop=False),
                  looped[:n]) for n in (4, 2, 0)]
    with tf.compat.v1.Session() as session:
      for name, n, actual, expected in checks:
        actual, expected = session.run([actual, expected])
        assert actual.shape == expected.shape, (name, n, actual.shape, expected.shape)
        np.testing.assert_allclose(actual, expected, rtol=1e-6, err_msg=f"{name}, n = {n}")
    print("ok")
""")


def test_tf1_gradients_through_v1_control_flow():
  """`tf.gradients` in the body through a TF1 TensorArray or a TF1 while loop, v1 control
  flow, converted without the fallback (a loop's trip count read as a `Dimension` failed,
  and so did the gradient of an unstack at n = 0)."""
  result = subprocess.run([sys.executable, "-c", _V1_CONTROL_FLOW_GRADIENTS_SCRIPT],
                          capture_output=True, text=True, timeout=600, check=False, env=_env())
  assert result.returncode == 0 and result.stdout.strip().endswith("ok"), (
      f"exit code {result.returncode}:\n{result.stderr[-3000:]}")


def _env():
  """This process's environment, with the repository on the path of the subprocess."""
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  return dict(os.environ, PYTHONPATH=os.pathsep.join(
      [root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))


_ROWS = np.array([[1.0, -2.0, 3.0, 0.5], [0.0, 4.0, -1.0, 2.0], [2.0, 2.0, 2.0, 2.0]],
                 np.float32)
_LENGTHS = np.array([2, 0, 4], np.int32)
_IMAGES = np.random.default_rng(1).random([3, 2, 2, 3]).astype(np.float32)


def _prefix_reductions(i):
  row = tf.constant(_ROWS)[i, :tf.constant(_LENGTHS)[i]]
  return (tf.reduce_all(row > 0.0), tf.reduce_any(row > 2.0), tf.reduce_max(row),
          tf.reduce_min(row))


def _hue(i):
  return tf.image.adjust_hue(tf.constant(_IMAGES)[i], tf.cast(i, tf.float32) * 0.2 - 0.2)


@pytest.mark.parametrize("body", [_prefix_reductions, _hue], ids=["prefix", "hue"])
def test_converters_comparing_tensors_in_a_graph(body):
  """In a tf.Graph (outside any function) `tensor == x` is Python identity, False: a
  converter written with `==` gave reduce_all of ragged rows as a constant False, a wrong
  hue and, for reduce_max, a reshape that failed (fuzz seed 3100010). Converters use
  tf.equal; this runs them in a graph against the loop."""
  graph = tf.Graph()
  with graph.as_default():
    got = vectorize.pfor(body, 3, fallback_to_while_loop=False)
    want = [body(tf.constant(i)) for i in range(3)]
  with tf.compat.v1.Session(graph=graph) as session:
    got, want = session.run([got, want])
  for k, g in enumerate(tf.nest.flatten(got)):
    np.testing.assert_allclose(g, np.stack([tf.nest.flatten(w)[k] for w in want]),
                               rtol=1e-5, atol=1e-6)
