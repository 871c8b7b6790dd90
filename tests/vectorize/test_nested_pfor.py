"""A pfor inside a pfor's body: the outer loop converts what the inner one emitted.

Each body here calls `vectorize.pfor` (or a helper built on it) for one outer iteration; the
result must equal the doubly nested loop, in every mode, with the fallback off, also where
the inner loop's control flow diverges differently in every outer iteration.
"""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

OUTER, INNER = 4, 5
X = tf.constant(np.random.RandomState(0).standard_normal([OUTER, INNER, 3]).astype(np.float32))


def _nested(inner_body, inner_n=INNER):
  """The outer body: iteration i runs `inner_body(i, j)` for j in range(inner_n) by pfor."""
  return lambda i: vectorize.pfor(lambda j: inner_body(i, j), inner_n,
                                  fallback_to_while_loop=False)


def _loop(inner_body, inner_n=INNER):
  """The reference: the same doubly nested loop, one iteration at a time."""
  return lambda i: tf.stack([inner_body(i, tf.constant(j)) for j in range(inner_n)])


def _cond(i, j):
  x = X[i, j]
  return tf.cond(x[0] > 0, lambda: x * 2.0, lambda: tf.sin(x) - 1.0)


def _while(i, j):
  x = X[i, j]
  steps = tf.cast(tf.abs(x[0]) * 3.0, tf.int32) + 1
  return tf.while_loop(lambda k, s: k < steps, lambda k, s: (k + 1, s * 0.5 + x),
                       (0, tf.zeros([3])))[1]


def _invariant_inner(i, j):
  return X[i, j] * tf.cast(i + 1, tf.float32)


def _outer_index_only(i, j):
  del j
  return tf.reduce_sum(X[i], 0)


BODIES = {"elementwise": _invariant_inner, "cond": _cond, "while": _while,
          "inner_invariant": _outer_index_only}


@pytest.mark.parametrize("mode", testing.MODES)
@pytest.mark.parametrize("name", sorted(BODIES))
def test_nested_pfor_equals_the_nested_loop(name, mode):
  body = BODIES[name]
  actual = testing.run_pfor(_nested(body), OUTER, mode=mode)
  testing.assert_allclose(actual, testing.sequential(_loop(body), OUTER))


@pytest.mark.parametrize("name", ["cond", "while"])
def test_nested_pfor_with_no_outer_iterations(name):
  actual = testing.run_pfor(_nested(BODIES[name]), 0, mode="dynamic")
  assert actual.shape == (0, INNER, 3)


def test_nested_pfor_inside_a_branch_of_the_outer_body():
  def inner(i, j):
    return _cond(i, j)

  def outer(i):
    return tf.cond(i % 2 == 0, lambda: _nested(inner)(i), lambda: -_nested(_while)(i))

  def reference(i):
    return tf.cond(i % 2 == 0, lambda: _loop(inner)(i), lambda: -_loop(_while)(i))

  for mode in ("function", "xla"):
    testing.assert_allclose(testing.run_pfor(outer, OUTER, mode=mode),
                            testing.sequential(reference, OUTER))


def test_gradient_through_nested_pfor_with_divergent_control_flow():
  def loss(scale):
    def inner(i, j):
      x = X[i, j] * scale
      return tf.cond(x[0] > 0, lambda: x * x, lambda: tf.sin(x))
    return tf.reduce_sum(vectorize.pfor(_nested(inner), OUTER, fallback_to_while_loop=False))

  def reference(scale):
    return tf.reduce_sum(tf.stack([
        tf.cond(X[i, j, 0] * scale > 0, lambda: (X[i, j] * scale) ** 2,
                lambda: tf.sin(X[i, j] * scale)) for i in range(OUTER) for j in range(INNER)]))

  scale = tf.constant(1.5)
  for fn in (loss, reference):
    with tf.GradientTape() as tape:
      tape.watch(scale)
      value = fn(scale)
    if fn is loss:
      actual = tape.gradient(value, scale)
    else:
      expected = tape.gradient(value, scale)
  np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-5)


def test_jacobian_of_a_body_holding_a_divergent_pfor():
  """The outer pfor (a jacobian's) converts the gradient of a graph the inner pfor emitted
  for a conditional that differs per element."""
  def f(x):
    return vectorize.pfor(lambda j: tf.cond(x[j] > 0, lambda: x[j] ** 3, lambda: tf.sin(x[j])),
                          4, fallback_to_while_loop=False)

  def reference(x):
    return tf.stack([tf.cond(x[j] > 0, lambda: x[j] ** 3, lambda: tf.sin(x[j]))
                     for j in range(4)])

  x = tf.constant([0.5, -1.0, 2.0, -0.3])
  actual = vectorize.hessian(lambda x: tf.reduce_sum(f(x)), x)
  with tf.GradientTape(persistent=True) as outer:
    outer.watch(x)
    with tf.GradientTape() as inner:
      inner.watch(x)
      y = tf.reduce_sum(reference(x))
    gradient = inner.gradient(y, x)
  expected = outer.jacobian(gradient, x, experimental_use_pfor=False)
  np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_inner_pfor_keeps_ragged_values_outside_xla():
  """Masked control flow for a nested pfor does not mean static shapes: the inner loop's
  per-iteration sizes stay ragged values."""
  def inner_body(i, j):
    return tf.reduce_sum(tf.range(i + j))

  actual = testing.run_pfor(_nested(inner_body), OUTER, mode="function")
  testing.assert_allclose(actual, testing.sequential(_loop(inner_body), OUTER))


_TRIPS = tf.constant([2, 0, 3])


def _growing_array(j, k):
  """A dynamic_size TensorArray written in a loop of per-iteration trips, stacked."""
  def step(t, ta):
    return t + 1, ta.write(t, tf.cast(t * j + k, tf.float32))
  _, ta = tf.while_loop(lambda t, ta: t < _TRIPS[j], step,
                        (0, tf.TensorArray(tf.float32, size=0, dynamic_size=True,
                                           element_shape=[])))
  return ta.stack()


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])
@pytest.mark.parametrize("outer", [0, 2])
def test_inner_loop_growing_a_tensor_array(mode, outer):
  """The inner pfor's loop runs masked (inside a body being traced) but not for XLA: its
  TensorArray may grow, and the rows are ragged (fuzz seed 3100661: refused 'under XLA')."""
  def body(k):
    return vectorize.pfor(lambda j: _growing_array(j, k), 3, fallback_to_while_loop=False)

  got = testing.pfor_in_mode(body, outer, mode)
  assert got.shape[0] == outer
  want = [[_growing_array(tf.constant(j), tf.constant(k)).numpy().tolist() for j in range(3)]
          for k in range(outer)]
  assert got.to_list() == want


@pytest.mark.parametrize("mode", ["function", "dynamic"])
def test_tensorflow_vectorized_map_inside_a_body(mode):
  """A library inside the body may call TensorFlow's own vectorized_map: its emitted
  conditional (partition, branches, stitch, with each outer iteration's own counts) converts."""
  def body(i):
    return tf.vectorized_map(lambda r: tf.cond(r[0] > 0, lambda: r * 2.0, lambda: -r), X[i])

  actual = testing.run_pfor(body, OUTER, mode=mode)
  testing.assert_allclose(actual, testing.sequential(_loop(
      lambda i, j: tf.cond(X[i, j, 0] > 0, lambda: X[i, j] * 2.0, lambda: -X[i, j])), OUTER))



def _adding_in_a_loop(v, i, j):
  """Adds to `v` in a while loop of a per-(i, j) trip count; returns the loop's value."""
  x = X[i, j, 0]
  steps = tf.cast(tf.abs(x) * 2.0, tf.int32) + 1

  def step(k, s):
    v.assign_add(tf.tanh(s) * 0.5, read_value=False)
    return k + 1, s + x

  return tf.while_loop(lambda k, s: k < steps, step, (0, x))[1]


def _adding_in_the_body(v, i, j):
  v.assign_add(X[i, j, 1] * 0.5, read_value=False)
  return X[i, j, 1]


@pytest.mark.parametrize("mode", testing.MODES)
@pytest.mark.parametrize("outer", [0, 3])
@pytest.mark.parametrize("inner", [_adding_in_a_loop, _adding_in_the_body])
def test_commutative_additions_in_a_nested_pfor(inner, outer, mode):
  """An inner pfor adds to a variable; the outer one sums the additions (fuzz seed 3900216:
  refused, the inner pfor's in-order additions read as a read-modify-write to the outer)."""
  v = tf.Variable(0.25)
  got = testing.run_pfor(lambda i: vectorize.pfor(lambda j: inner(v, i, j), 2,
                                                  fallback_to_while_loop=False), outer,
                         mode=mode)
  got_state = v.numpy()
  v.assign(0.25)
  want = testing.sequential(lambda i: tf.stack([inner(v, i, tf.constant(j)) for j in range(2)]),
                            outer, output_spec=tf.TensorSpec([2], tf.float32))
  testing.assert_allclose(got, want)
  np.testing.assert_allclose(got_state, v.numpy(), rtol=1e-5)
