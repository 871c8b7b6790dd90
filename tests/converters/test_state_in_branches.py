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
