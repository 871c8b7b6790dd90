"""The eager cache (cache.py): what a body reads through the names, containers and objects
it closes over is in the key, so rebinding any of them converts anew as the loop would read
the new value, and calling again with nothing rebound converts nothing.

Rebinding a global callable (a Keras layer) that the body calls must convert anew (a silent
wrong answer before `cache.callable_key` counted globals); so must rebinding an attribute
that a bound method reads, or an entry of a dict or list a closure reads (silent wrong
answers found by code-blind round 10: the conversion of the old tensor was reused)."""

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

import vectorize


class _Scale:
  """A callable object, as a Keras layer is."""

  def __init__(self, factor):
    self.factor = factor

  def __call__(self, x):
    return x * self.factor


_scale = _Scale(1.0)


def _body(i):
  return _scale(tf.cast(i, tf.float32))


def test_rebinding_a_global_callable_object_converts_anew():
  global _scale
  np.testing.assert_array_equal(vectorize.pfor(_body, 3), [0.0, 1.0, 2.0])
  _scale = _Scale(2.0)
  try:
    np.testing.assert_array_equal(vectorize.pfor(_body, 3), [0.0, 2.0, 4.0])
  finally:
    _scale = _Scale(1.0)


_X = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4))


class _Scaler:

  def __init__(self):
    self.scale = tf.constant(2.0)
    self.traces = 0

  def body(self, i):
    self.traces += 0   # an attribute the body does not change: no new key
    return _X[i] * self.scale


def test_rebinding_an_attribute_a_bound_method_reads_converts_anew():
  s = _Scaler()
  np.testing.assert_allclose(vectorize.pfor(s.body, 3), _X * 2.0)
  s.scale = tf.constant(-3.0)
  np.testing.assert_allclose(vectorize.pfor(s.body, 3), _X * -3.0)


@pytest.mark.parametrize("container", ["dict", "list", "nested object"])
def test_rebinding_an_entry_a_closure_reads_converts_anew(container):
  class Config:
    pass

  if container == "dict":
    holder = {"scale": tf.constant(2.0)}
    body = lambda i: _X[i] * holder["scale"]
    rebind = lambda t: holder.__setitem__("scale", t)
  elif container == "list":
    holder = [tf.constant(1.0), tf.constant(2.0)]
    body = lambda i: _X[i] * holder[1]
    rebind = lambda t: holder.__setitem__(1, t)
  else:
    holder = Config()
    holder.inner = Config()
    holder.inner.scale = tf.constant(2.0)
    body = lambda i: _X[i] * holder.inner.scale
    rebind = lambda t: setattr(holder.inner, "scale", t)
  np.testing.assert_allclose(vectorize.pfor(body, 3), _X * 2.0)
  rebind(tf.constant(7.0))
  np.testing.assert_allclose(vectorize.pfor(body, 3), _X * 7.0)


def test_a_callable_objects_attribute_rebound_converts_anew():
  scale = _Scale(tf.constant(2.0))
  body = lambda i: scale(_X[i])
  np.testing.assert_allclose(vectorize.pfor(body, 3), _X * 2.0)
  scale.factor = tf.constant(5.0)
  np.testing.assert_allclose(vectorize.pfor(body, 3), _X * 5.0)


class _Model(keras.Model):

  def __init__(self):
    super().__init__()
    self.dense = keras.layers.Dense(4, kernel_initializer="ones")
    self.scale = tf.constant(2.0)

  def call(self, x):
    return self.dense(x) * self.scale


def test_a_keras_models_public_attribute_rebound_converts_anew_and_nothing_else_does():
  model = _Model()
  traces = itertools.count()   # keyed by identity: counting changes no key

  def body(i):
    next(traces)
    return model(_X[i][None])[0]

  first = vectorize.pfor(body, 3)
  vectorize.pfor(body, 3)   # the first call built the model (`built`): one new key
  count = next(traces)
  np.testing.assert_allclose(vectorize.pfor(body, 3), first)
  assert next(traces) == count + 1   # the model's own bookkeeping (`_called`, ...): no new key
  model.scale = tf.constant(3.0)
  np.testing.assert_allclose(vectorize.pfor(body, 3), first * 1.5, rtol=1e-6)


def test_a_python_number_in_a_dict_or_attribute_converts_anew():
  """A hyperparameter a body reads from a config dict or an object's attribute at trace time
  (code-blind round 11: a label-smoothing schedule was silently stale)."""
  config = {"scale": 2.0}
  holder = _Scale(3.0)
  x = tf.constant([1.0, 2.0, 3.0])

  def body(i):
    return x[i] * config["scale"] + holder.factor

  for scale, factor in ((2.0, 3.0), (5.0, 3.0), (5.0, -1.0)):
    config["scale"], holder.factor = scale, factor
    np.testing.assert_allclose(vectorize.pfor(body, 3), x.numpy() * scale + factor)


def test_a_counter_the_body_changes_while_traced_does_not_retrace_every_call():
  """A trace counter kept in a dict changes the key during the trace: the converted function
  is found under the key after it, so the next calls trace nothing."""
  stats = {"traces": 0}
  x = tf.constant([1.0, 2.0, 3.0])

  def body(i):
    stats["traces"] += 1
    return x[i] * 2.0

  for _ in range(3):
    np.testing.assert_allclose(vectorize.pfor(body, 3), x.numpy() * 2.0)
  assert stats["traces"] == 1
