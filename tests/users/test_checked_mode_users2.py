"""The checked mode as the README documents it: correct programs of every kind pass with no
false alarm (Keras, tapes, random ops, strings, reductions, jacobians, XLA), its arguments
(sample=None, k, env =all / =<k>) work, bad arguments are rejected naming the problem."""
import os
import subprocess
import sys
import textwrap
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.users._util import assert_same, loop, rows
from tests.users._util_users2 import assert_ragged_values, ragged_loop

rng = np.random.default_rng(7)
X = tf.constant(rng.normal(size=[6, 4]).astype(np.float32))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def body_sin(i):
  return tf.sin(X[i]) * tf.cast(i, tf.float32) + tf.reduce_max(X[i])


@pytest.mark.parametrize("sample", [None, 1, 100])
def test_checked_sample_values_pass_correct_program(sample):
  with vectorize.checked(sample=sample):
    got = vectorize.pfor(body_sin, 6)
  assert_same(got, loop(body_sin, 6))


@pytest.mark.parametrize("env", ["all", "2", "1"])
def test_env_var_forms(monkeypatch, env):
  monkeypatch.setenv("VECTORIZE_CHECKED", env)
  got = tf.function(lambda: vectorize.pfor(body_sin, 6))()
  assert_same(got, loop(body_sin, 6))


@pytest.mark.parametrize("bad", [0, -1, 2.5, "all", [3]])
def test_bad_sample_rejected_clearly(bad):
  with pytest.raises((ValueError, TypeError)) as e:
    with vectorize.checked(sample=bad):
      vectorize.pfor(body_sin, 6)
  assert "sample" in str(e.value), str(e.value)


BAD_ENV_VALUES = ["-3", "yes-please", "0.5"]


def test_bad_env_value_rejected_clearly():
  """Each bad value in one fresh process (the variable is read at each call; the first is
  set before the import): three processes importing TensorFlow cost three times as much."""
  src = textwrap.dedent("""
    import os, sys
    import tensorflow as tf, vectorize
    for bad in sys.argv[1:]:
      os.environ["VECTORIZE_CHECKED"] = bad
      try:
        vectorize.pfor(lambda i: tf.cast(i, tf.float32) * 2.0, 3)
      except (ValueError, TypeError) as e:
        print(repr(bad), "ERR", e)
      else:
        print(repr(bad), "RAN")
  """)
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2",
             VECTORIZE_CHECKED=BAD_ENV_VALUES[0])
  p = subprocess.run([sys.executable, "-c", src] + BAD_ENV_VALUES, env=env, cwd=ROOT,
                     capture_output=True, text=True, timeout=200)
  out = p.stdout + p.stderr
  lines = [line for line in p.stdout.splitlines() if line.startswith("'")]
  assert len(lines) == len(BAD_ENV_VALUES), out[-2000:]
  for bad, line in zip(BAD_ENV_VALUES, lines):
    assert line.startswith(f"{bad!r} ERR") and "VECTORIZE_CHECKED" in line, out[-2000:]


def test_checked_nested_with_outer_none_inner_sample():
  with vectorize.checked(sample=None):
    with vectorize.checked(sample=2):
      a = vectorize.pfor(body_sin, 6)
    b = vectorize.vectorized_map(lambda x: tf.cumsum(x), X)
  assert_same(a, loop(body_sin, 6))
  assert_same(b, rows(lambda x: tf.cumsum(x), X))


def test_keras_model_vectorized_map_checked_all():
  model = keras.Sequential([keras.Input([4]), keras.layers.Dense(5, activation="gelu"),
                            keras.layers.LayerNormalization(), keras.layers.Dense(2)])
  fn = lambda x: model(x[None])[0]
  with vectorize.checked(sample=None):
    got = vectorize.vectorized_map(fn, X)
  assert_same(got, rows(fn, X))


def test_keras_conv_per_example_gradients_checked():
  model = keras.Sequential([keras.Input([5, 5, 1]), keras.layers.Conv2D(2, 3, activation="relu"),
                            keras.layers.Flatten(), keras.layers.Dense(3)])
  imgs = tf.constant(rng.normal(size=[4, 5, 5, 1]).astype(np.float32))
  ys = tf.constant([0, 2, 1, 1])
  def loss_fn(x, y):
    return keras.losses.sparse_categorical_crossentropy(y[None], model(x[None]), from_logits=True)[0]
  with vectorize.checked(sample=None):
    got = vectorize.per_example_gradients(loss_fn, model.trainable_variables, imgs, ys)
  def one(k):
    with tf.GradientTape() as t:
      l = loss_fn(imgs[k], ys[k])
    return t.gradient(l, model.trainable_variables)
  ref = [tf.stack(g) for g in zip(*[one(k) for k in range(4)])]
  for g, r in zip(tf.nest.flatten(got), ref):
    np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-4, atol=1e-5)


def test_cond_under_tape_no_false_alarm():
  w = tf.Variable([0.5, -1.0, 2.0, 1.0])
  def body(i):
    with tf.GradientTape() as tape:
      y = tf.cond(X[i][0] > 0, lambda: tf.reduce_sum(X[i] * w), lambda: tf.reduce_sum(X[i] * w * 2.0))
    return tape.gradient(y, w)
  with vectorize.checked():
    got = vectorize.pfor(body, 6)
  assert_same(got, loop(body, 6))


def test_cond_under_tape_values_right_unchecked(monkeypatch):
  monkeypatch.delenv("VECTORIZE_CHECKED", raising=False)
  w = tf.Variable([0.5, -1.0, 2.0, 1.0])
  def body(i):
    with tf.GradientTape() as tape:
      y = tf.cond(X[i][0] > 0, lambda: tf.reduce_sum(X[i] * w), lambda: tf.reduce_sum(X[i] * w * 2.0))
    return tape.gradient(y, w)
  assert_same(vectorize.pfor(body, 6), loop(body, 6))


def test_stateful_random_not_compared():
  """tf.random.normal draws other numbers than the loop: README says not compared."""
  def body(i):
    noise = tf.random.normal([4])
    return X[i] + 0.0 * noise, tf.shape(noise)
  with vectorize.checked(sample=None):
    got = vectorize.pfor(body, 6)
  assert_same(got, loop(body, 6))


def test_random_generator_not_compared_xla():
  g = tf.random.Generator.from_seed(3)
  def body(i):
    return X[i] * 0.0 + tf.ones([4]) + 0.0 * g.normal([4])
  with vectorize.checked():
    got = tf.function(lambda: vectorize.pfor(body, 6), jit_compile=True)()
  assert_same(got, loop(body, 6))


def test_stateless_random_per_example_seed_compared():
  def body(i):
    return tf.random.stateless_uniform([3], seed=tf.stack([i, 7]), maxval=10, dtype=tf.int32)
  with vectorize.checked(sample=None):
    got = vectorize.pfor(body, 6)
  assert_same(got, loop(body, 6))


def test_strings_checked():
  words = tf.constant(["alpha", "be", "gamma", "d", "epsilon", "zeta"])
  def body(i):
    w = words[i]
    return tf.strings.join([tf.strings.upper(w), tf.strings.as_string(i)], "-"), tf.strings.length(w)
  with vectorize.checked(sample=None):
    got = vectorize.pfor(body, 6)
  assert_same(got, loop(body, 6))


def test_ragged_output_checked():
  body = lambda i: tf.boolean_mask(X[i], X[i] > 0)
  with vectorize.checked(sample=None):
    got = tf.function(lambda: vectorize.pfor(body, 6))()
  assert_ragged_values(got, ragged_loop(body, 6))


def test_pfor_config_reduction_runs_unchecked_as_documented():
  def body(i, pfor_config):
    mean = pfor_config.reduce_mean(X[i])
    return X[i] - mean
  with vectorize.checked(sample=None):
    got = vectorize.pfor(body, 6)
  np.testing.assert_allclose(got.numpy(), (X - tf.reduce_mean(X, 0)).numpy(), rtol=1e-5, atol=1e-6)


def test_parallel_iterations_chunks_run():
  with vectorize.checked(sample=None):
    got = vectorize.pfor(body_sin, 6, parallel_iterations=4)
  assert_same(got, loop(body_sin, 6))


def test_checked_n_zero_and_runtime_n():
  f = tf.function(lambda n: vectorize.pfor(body_sin, n), input_signature=[tf.TensorSpec([], tf.int32)])
  with vectorize.checked(sample=None):
    assert_same(f(tf.constant(5)), loop(body_sin, 5))
    z = f(tf.constant(0))
    e = vectorize.pfor(body_sin, 0)
  assert z.shape == (0, 4) and e.shape == (0, 4)


def test_jacobian_fn_and_hessian_checked():
  f = lambda x: tf.tanh(x) * tf.reduce_sum(x ** 2)
  x = X[0]
  with vectorize.checked(sample=None):
    j = vectorize.jacobian_fn(f)(x)
    h = vectorize.hessian(lambda x: tf.reduce_sum(tf.sin(x) * x), x)
  with tf.GradientTape(persistent=True) as t:
    t.watch(x)
    y = f(x)
  np.testing.assert_allclose(j.numpy(), t.jacobian(y, x, experimental_use_pfor=False).numpy(), rtol=1e-5)
  with tf.GradientTape(persistent=True) as t2:
    t2.watch(x)
    with tf.GradientTape() as t1:
      t1.watch(x)
      s = tf.reduce_sum(tf.sin(x) * x)
    gr = t1.gradient(s, x)
  np.testing.assert_allclose(h.numpy(), t2.jacobian(gr, x, experimental_use_pfor=False).numpy(), rtol=1e-5, atol=1e-6)


def test_map_fn_ragged_signature_checked():
  fn = lambda x: tf.boolean_mask(x, x > 0)
  with vectorize.checked(sample=None):
    got = vectorize.map_fn(fn, X, fn_output_signature=tf.RaggedTensorSpec([None], tf.float32))
  ref = tf.map_fn(fn, X, fn_output_signature=tf.RaggedTensorSpec([None], tf.float32))
  assert isinstance(got, tf.RaggedTensor)
  assert got.to_list() == ref.to_list()


def test_xla_body_reading_args_warns_not_checked():
  """README: a body that reads the compiled function's own arguments is not checked under
  XLA, and a warning says so."""
  f = tf.function(lambda x: vectorize.pfor(lambda i: tf.sin(x[i]) * 2.0, 6), jit_compile=True)
  with vectorize.checked():
    from absl import logging as absl_logging
    import logging
    records = []
    h = logging.Handler()
    h.emit = lambda r: records.append(r.getMessage())
    logging.getLogger().addHandler(h)
    absl_logging.get_absl_logger().addHandler(h)
    try:
      with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = f(X)
    finally:
      logging.getLogger().removeHandler(h)
      absl_logging.get_absl_logger().removeHandler(h)
  msgs = records + [str(x.message) for x in w]
  assert any("check" in m.lower() for m in msgs), msgs
  np.testing.assert_allclose(got.numpy(), (tf.sin(X) * 2.0).numpy(), rtol=1e-5)


def test_tensorarray_while_xla_checked():
  lens = tf.constant([1, 3, 2, 4, 0, 2])
  def body(i):
    ta = tf.TensorArray(tf.float32, size=4, element_shape=[4])
    def st(t, ta):
      return t + 1, ta.write(t, X[i] * tf.cast(t, tf.float32))
    _, ta = tf.while_loop(lambda t, ta: t < lens[i], st, (0, ta), maximum_iterations=4)
    return ta.stack()
  with vectorize.checked(sample=None):
    got = tf.function(lambda: vectorize.pfor(body, 6), jit_compile=True)()
  assert_same(got, loop(body, 6))


def test_checkerror_is_assertionerror_subclass_and_exported():
  assert issubclass(vectorize.CheckError, AssertionError)
  assert issubclass(vectorize.ConversionError, ValueError)
