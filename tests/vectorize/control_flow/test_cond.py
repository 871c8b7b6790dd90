"""Conditionals inside the body: invariant and stacked predicates, switch_case, nesting,
gradients, and the static-shape (XLA) form with no junk leaking from untaken branches."""

import functools

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

RNG = np.random.default_rng(3)
X = tf.constant(RNG.standard_normal([6, 3]), tf.float32)
MODES = ["function", "dynamic", "eager", "xla"]
_check = functools.partial(testing.check_against_loop, n=6)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("flag", [True, False])
def test_invariant_predicate(flag, mode):
  pred = tf.constant(flag)
  _check(lambda i: tf.cond(pred, lambda: tf.gather(X, i) * 2.0, lambda: tf.gather(X, i) + 1.0),
         mode=mode)


def test_invariant_predicate_emits_no_partition_or_stitch():
  pred = tf.constant(True)
  graph = tf.function(lambda: vectorize.pfor(
      lambda i: tf.cond(pred, lambda: tf.gather(X, i) * 2.0, lambda: tf.gather(X, i)), 6,
      fallback_to_while_loop=False)).get_concrete_function().graph
  types = testing.all_op_types(graph)
  assert "DynamicPartition" not in types and "DynamicStitch" not in types


def test_invariant_predicate_with_invariant_and_stacked_branch_outputs():
  pred = tf.constant(False)
  _check(lambda i: tf.cond(pred, lambda: tf.ones([3]), lambda: tf.gather(X, i)))


def test_invariant_predicate_with_invariant_outputs_stays_invariant():
  pred = tf.constant(True)
  _check(lambda i: tf.cond(pred, lambda: tf.ones([3]), lambda: tf.zeros([3])) +
         tf.cast(i, tf.float32))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("threshold", [-10.0, 0.0, 10.0], ids=["all_true", "some", "none"])
def test_stacked_predicate(threshold, mode):
  def body(i):
    x = tf.gather(X, i)
    return tf.cond(tf.reduce_sum(x) > threshold, lambda: x * 2.0, lambda: -x)
  _check(body, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_stacked_predicate_with_invariant_branch_outputs(mode):
  def body(i):
    return tf.cond(i % 2 == 0, lambda: tf.constant([1.0, 2.0]), lambda: tf.constant([3.0, 4.0]))
  _check(body, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_loop_index_inside_a_branch_is_the_iteration_id(mode):
  def body(i):
    return tf.cond(i > 2, lambda: tf.cast(i * 10, tf.float32), lambda: tf.cast(i, tf.float32))
  _check(body, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_switch_case_with_stacked_index(mode):
  def body(i):
    x = tf.gather(X, i)
    return tf.switch_case(i % 4, [lambda: x * 2.0, lambda: x + 1.0, lambda: tf.sin(x),
                                  lambda: tf.ones([3])])
  _check(body, mode=mode)


def test_switch_case_out_of_range_index_takes_the_last_branch():
  def body(i):
    return tf.switch_case(i - 2, [lambda: tf.constant(1.0), lambda: tf.constant(2.0),
                                  lambda: tf.constant(3.0)])
  _check(body)


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_switch_case_with_invariant_index(mode):
  index = tf.constant(1)
  _check(lambda i: tf.switch_case(index, [lambda: tf.gather(X, i), lambda: tf.gather(X, i) * 3.0,
                                          lambda: tf.zeros([3])]), mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_nested_conds(mode):
  def body(i):
    x = tf.gather(X, i)
    return tf.cond(x[0] > 0,
                   lambda: tf.cond(x[1] > 0, lambda: x * 2.0, lambda: x * 3.0),
                   lambda: tf.cond(i % 2 == 0, lambda: x - 1.0, lambda: tf.zeros([3])))
  _check(body, mode=mode)


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_cond_with_several_outputs(mode):
  def body(i):
    x = tf.gather(X, i)
    return tf.cond(x[0] > 0, lambda: (x, tf.reduce_sum(x)), lambda: (-x, tf.constant(0.0)))
  _check(body, mode=mode)


@pytest.mark.parametrize("mode", ["function", "xla", "dynamic"])
def test_zero_iterations(mode):
  def body(i):
    x = tf.gather(X, i)
    return tf.cond(x[0] > 0, lambda: x, lambda: -x)
  _check(body, n=0, mode="function" if mode == "dynamic" else mode)


# ----------------------------------------------------------------------------- gradients

def _safe_log_body(x_source):
  def body(i):
    x = tf.gather(x_source, i)
    return tf.cond(x > 0, lambda: tf.math.log(x), lambda: -x)
  return body


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_gradient_inside_the_body_through_a_cond(mode):
  values = tf.constant([1.5, -2.0, 0.5, -1.0, 3.0, 2.0])

  def body(i):
    x = tf.gather(values, i)
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = tf.cond(x > 0, lambda: tf.math.log(x) * x, lambda: x * x)
    return tape.gradient(y, x)
  _check(body, mode=mode)


@pytest.mark.parametrize("static_shapes", [False, True])
def test_gradient_outside_through_a_converted_cond(static_shapes):
  values = tf.Variable([1.5, -2.0, 0.5, -1.0, 3.0, 2.0])
  with vectorize.static_shapes(static_shapes):
    with tf.GradientTape() as tape:
      out = tf.reduce_sum(vectorize.pfor(_safe_log_body(values), 6,
                                         fallback_to_while_loop=False))
  grad = tf.convert_to_tensor(tape.gradient(out, values)).numpy()
  expected = np.where(values.numpy() > 0, 1.0 / values.numpy(), -1.0)
  np.testing.assert_allclose(grad, expected, rtol=1e-6)


@pytest.mark.parametrize("fn", ["log", "reciprocal", "sqrt"])
def test_static_shapes_leak_no_junk_from_untaken_branches(fn):
  """Branches valid only where taken give finite values and gradients for every lane."""
  op = {"log": tf.math.log, "reciprocal": tf.math.reciprocal, "sqrt": tf.sqrt}[fn]
  values = tf.Variable([1.5, -2.0, 0.0, -1.0, 3.0, 2.0])

  def body(i):
    x = tf.gather(values, i)
    return tf.cond(x > 0, lambda: op(x), lambda: x * 0.5)

  @tf.function(jit_compile=True)
  def vectorized():
    with tf.GradientTape() as tape:
      out = vectorize.pfor(body, 6, fallback_to_while_loop=False)
      total = tf.reduce_sum(out)
    return out, tf.convert_to_tensor(tape.gradient(total, values))

  out, grad = vectorized()
  with tf.GradientTape() as tape:
    looped = tf.stack([body(tf.constant(i)) for i in range(6)])
    total = tf.reduce_sum(looped)
  expected_grad = tf.convert_to_tensor(tape.gradient(total, values))
  assert np.all(np.isfinite(out)) and np.all(np.isfinite(grad))
  np.testing.assert_allclose(out, looped, rtol=1e-6)
  np.testing.assert_allclose(grad, expected_grad, rtol=1e-6)


def test_static_shapes_option_matches_dynamic_form():
  body = _safe_log_body(tf.constant([1.5, -2.0, 0.5, -1.0, 3.0, 2.0]))
  with vectorize.static_shapes():
    static = tf.function(lambda: vectorize.pfor(body, 6, fallback_to_while_loop=False))()
  dynamic = tf.function(lambda: vectorize.pfor(body, 6, fallback_to_while_loop=False))()
  np.testing.assert_allclose(static, dynamic)


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])   # XLA: see the note
def test_gradient_intermediates_of_a_branch_not_taken_by_all(mode):
  """Fuzz seed 103: under a tape, a cond whose one branch slices `x[i:i + 1]` and whose
  other reads a TensorArray. TF declares the slice's gradient intermediate with the shape of
  the FakeParam standing in for it in the other branch, [0]; the converted [n, 1] was
  refused as a wrong shape. (Under XLA the array's gradient list, of the branch's size,
  has no static capacity: a clear ConversionError, left.)"""
  x = tf.constant([[1.0, -2.0, 0.5], [0.3, 0.2, -0.1], [2.0, 1.0, 0.0], [-1.0, 0.5, 0.25]])
  y = tf.constant([0.5, -1.0, 2.0, 3.0])

  def body(i):
    row = x[i]
    with tf.GradientTape() as tape:
      tape.watch(row)

      def reads_an_array():
        return tf.tanh(row) + tf.TensorArray(tf.float32, 3).unstack(row).read(1)

      def slices():
        return row - tf.squeeze(y[i:i + 1], 0)
      out = tf.cond(i < 2, reads_an_array, slices)
      loss = tf.reduce_sum(tf.square(out))
    return tape.gradient(loss, row)
  testing.assert_allclose(testing.run_pfor(body, 4, mode), testing.sequential(body, 4), 1e-5)
