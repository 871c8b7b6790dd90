"""Effects inside masked conditionals and loops, where dead lanes compute too: a loop that
carries a TensorArray runs masked whatever the enclosing strategy, and XLA masks every
conditional and loop. The update of a dead lane is one the loop never makes (issue 24, 1:
the variable held 12.0 where the loop leaves 6.0)."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

X = tf.constant(np.random.default_rng(3).standard_normal([5, 3]).astype(np.float32))


def _effect(make_body, initial, n, mode):
  """(output and variable after pfor, output and variable after the loop)."""
  variable = tf.Variable(initial)
  out = testing.run_pfor(make_body(variable), n, mode=mode)
  after_pfor = variable.numpy()
  variable.assign(initial)
  body = make_body(variable)
  expected = testing.sequential(body, n, testing.output_spec(body))
  return (out, after_pfor), (expected, variable.numpy())


def _trips_with_a_tensor_array(v):
  """Iteration i runs i trips; the TensorArray makes the loop masked."""
  def body(i):
    ta = tf.TensorArray(tf.float32, size=4, element_shape=[])

    def step(j, ta):
      v.assign_add(1.0)
      return j + 1, ta.write(j, tf.cast(j, tf.float32))
    _, ta = tf.while_loop(lambda j, ta: j < i, step, [0, ta])
    return ta.stack()
  return body


def _stacked_updates_with_a_tensor_array(v):
  """Per-trip updates of a vector that differ per iteration."""
  def body(i):
    ta = tf.TensorArray(tf.float32, size=4, element_shape=[3])

    def step(j, ta):
      v.assign_add(X[i] * tf.cast(j + 1, tf.float32))
      return j + 1, ta.write(j, X[i])
    _, ta = tf.while_loop(lambda j, ta: j < i % 4, step, [0, ta])
    return ta.stack()
  return body


def _scatter_in_a_masked_loop(v):
  def body(i):
    ta = tf.TensorArray(tf.float32, size=4, element_shape=[])

    def step(j, ta):
      v.scatter_add(tf.IndexedSlices(X[i, :1], [j % 3]))
      return j + 1, ta.write(j, 1.0)
    _, ta = tf.while_loop(lambda j, ta: j < i % 4, step, [0, ta])
    return ta.stack()
  return body


def _assign_add_in_a_conditional(v):
  def body(i):
    def add():
      v.assign_add(X[i])
      return X[i]
    return tf.cond(X[i, 0] > 0, add, lambda: X[i] * 2.0)
  return body


@pytest.mark.parametrize("make_body,initial", [
    (_trips_with_a_tensor_array, 0.0),
    (_stacked_updates_with_a_tensor_array, np.zeros(3, np.float32)),
    (_scatter_in_a_masked_loop, np.zeros(3, np.float32)),
    (_assign_add_in_a_conditional, np.zeros(3, np.float32)),
])
@pytest.mark.parametrize("mode,n", [("function", 0), ("eager", 4), ("dynamic", 4),
                                    ("xla", 4)])
def test_dead_lanes_leave_no_update(make_body, initial, mode, n):
  actual, expected = _effect(make_body, initial, n, mode)
  testing.assert_allclose(actual, expected)


def test_an_assert_of_a_dead_lane_does_not_fire():
  """A dead lane borrows a live lane's inputs but keeps its own trip count: its check is
  not one the loop makes."""
  def body(i):
    ta = tf.TensorArray(tf.float32, size=4, element_shape=[])

    def step(j, ta):
      tf.debugging.assert_less(j, i, message="past the end")
      return j + 1, ta.write(j, 1.0)
    _, ta = tf.while_loop(lambda j, ta: j < i, step, [0, ta])
    return ta.stack()
  testing.assert_allclose(testing.run_pfor(body, 4, mode="function"),
                          testing.sequential(body, 4))


def test_an_assign_in_a_masked_loop_is_refused_naming_the_mask():
  v = tf.Variable(0.0)

  def body(i):
    ta = tf.TensorArray(tf.float32, size=4, element_shape=[])

    def step(j, ta):
      v.assign(tf.cast(j, tf.float32))
      return j + 1, ta.write(j, 1.0)
    _, ta = tf.while_loop(lambda j, ta: j < i, step, [0, ta])
    return ta.stack()
  with pytest.raises(vectorize.ConversionError, match="converted with masks"):
    testing.run_pfor(body, 4, mode="function")


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_a_write_in_the_fallback_runs_for_live_lanes_only(mode):
  """ResourceScatterNdAdd has no converter: its fallback ran for dead lanes too under XLA
  (a user's histogram came out [5, 26, 1, 3, 13, 2] where the loop leaves [4, 6, 1, 3, 4, 2])."""
  trips = tf.constant([2, 0, 3, 1, 4])

  def make_body(v):
    def body(i):
      def step(t):
        v.scatter_nd_add([[(i + t) % 6]], [t + 1])
        return [t + 1]
      return tf.while_loop(lambda t: t < trips[i], step, [tf.constant(0)])[0]
    return body
  variable = tf.Variable(tf.zeros([6], tf.int32))
  testing.run_pfor(make_body(variable), 5, mode=mode, fallback=True)
  after_pfor = variable.numpy()
  variable.assign(tf.zeros([6], tf.int32))
  for i in range(5):
    make_body(variable)(tf.constant(i))
  np.testing.assert_array_equal(after_pfor, variable.numpy())
