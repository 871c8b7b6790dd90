"""Variables read inside the branches of a `tf.switch_case` and elsewhere in the body: reads
only, so the body vectorizes (a branch that writes is still refused)."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

RNG = np.random.default_rng(5)
X = tf.constant(RNG.standard_normal([5, 3]), tf.float32)


def _reading_body(v, index):
  def body(i):
    x = tf.gather(X, i)
    k = tf.math.floormod(i, 3) if index == "per_iteration" else tf.constant(1)
    y = tf.switch_case(k, [lambda: v[0] * x, lambda: v[1] + x, lambda: x])
    return y + v[2]
  return body


@pytest.mark.parametrize("fallback", [False, True])
@pytest.mark.parametrize("index", ["per_iteration", "invariant"])
@pytest.mark.parametrize("mode", testing.MODES)
def test_switch_case_reading_a_variable_also_read_outside(fallback, index, mode):
  v = tf.Variable(RNG.standard_normal([4, 3]), dtype=tf.float32)
  body = _reading_body(v, index)
  testing.assert_allclose(testing.run_pfor(body, 5, mode=mode, fallback=fallback),
                          testing.sequential(body, 5))


def test_switch_case_writing_a_variable_read_outside_is_refused():
  v = tf.Variable(tf.zeros([3]))

  def body(i):
    x = tf.gather(X, i)

    def write():
      v.assign(x)
      return x

    y = tf.switch_case(tf.math.floormod(i, 2), [write, lambda: x])
    return y + v.read_value()

  with pytest.raises(vectorize.ConversionError, match="a stateful op cannot be vectorized"):
    testing.run_pfor(body, 5)


# A variable read in one function of the body and written in another (code-blind round 10,
# silent wrong answers): the converters order a variable's accesses within one graph, and
# the read saw no write there, so every iteration read the final state. The whole body now
# runs as a sequential loop (fallback on) or the conversion is refused.

_XS = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0])
_TAKE = tf.constant([False, True, False, True, False])


def _add_in_one_branch_read_in_the_other(v):
  def body(i):
    def add():
      v.assign_add(_XS[i])
      return tf.constant(-1.0)
    return tf.cond(_TAKE[i], add, v.read_value)
  return body


def _add_and_read_in_two_functions(v):
  @tf.function
  def add(d):
    v.assign_add(d)

  @tf.function
  def read():
    return v.read_value()

  def body(i):
    add(_XS[i])
    return read()
  return body


def _read_in_a_loop_written_in_a_branch(v):
  def body(i):
    tf.cond(_TAKE[i], lambda: v.assign_add(_XS[i]).read_value(), lambda: _XS[i])
    return tf.while_loop(lambda k, acc: k < 2, lambda k, acc: (k + 1, acc + v.read_value()),
                         (0, 0.0))[1]
  return body


_UNORDERED = [_add_in_one_branch_read_in_the_other, _add_and_read_in_two_functions,
              _read_in_a_loop_written_in_a_branch]


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
@pytest.mark.parametrize("make", _UNORDERED, ids=lambda f: f.__name__)
def test_a_variable_read_and_written_in_two_functions_gives_the_loops_answer(make, mode):
  v = tf.Variable(0.0)
  body = make(v)
  expected = tf.stack([tf.identity(body(tf.constant(i))) for i in range(5)])
  left = v.numpy()
  v.assign(0.0)
  run = {"eager": lambda: vectorize.pfor(body, 5),
         "function": tf.function(lambda: vectorize.pfor(body, 5)),
         "xla": tf.function(lambda: vectorize.pfor(body, 5), jit_compile=True)}[mode]
  np.testing.assert_allclose(run(), expected, rtol=1e-6)
  assert v.numpy() == left


@pytest.mark.parametrize("make", _UNORDERED, ids=lambda f: f.__name__)
def test_a_variable_read_and_written_in_two_functions_is_refused_without_fallback(make):
  body = make(tf.Variable(0.0))
  with pytest.raises(vectorize.ConversionError,
                     match="reads a variable .* in one function and writes it in another.*"
                     "To fix: read and write the variable in the same function"):
    vectorize.pfor(body, 5, fallback_to_while_loop=False)
