"""A tape over a tape over a while-loop RNN that writes its states into a TensorArray: the
gradient of the loop's gradient carries TensorLists whose loop variables have no handle
data, and the dry run of that loop's body held them as a bare variant ('Converter for
Identity produced shape () ... expected (3,)'); it now takes their element type from the
lists that feed them."""

import numpy as np
import pytest
import tensorflow as tf

from tests import testing

X = tf.constant(np.random.default_rng(0).standard_normal([3, 5, 4]), tf.float32)
W = tf.constant(np.random.default_rng(1).standard_normal([4, 4]) * 0.3, tf.float32)


def _states(xs, w):
  def step(t, h, states):
    h = tf.tanh(tf.linalg.matvec(w, h) + xs[t])
    return t + 1, h, states.write(t, h)
  states = tf.TensorArray(tf.float32, size=5, element_shape=[4])
  return tf.while_loop(lambda t, h, s: t < 3, step, (0, tf.zeros([4]), states))[2].stack()


def _second_order(reduce):
  def body(i):
    w = tf.identity(W)
    with tf.GradientTape() as outer:
      outer.watch(w)
      with tf.GradientTape() as inner:
        inner.watch(w)
        states = _states(X[i], w)
      g = inner.gradient(states, w)
      y = tf.reduce_sum(g * g) if reduce else g
    return outer.gradient(y, w)
  return body


# A caller's tf.function for one variant: an eager pfor of a static n traces the same graph
# in a tf.function of its own.
@pytest.mark.parametrize("reduce,mode", [(True, "eager"), (True, "function"), (True, "dynamic"),
                                         (False, "eager"), (False, "dynamic")])
def test_gradient_of_the_gradient_of_a_loop_writing_an_array(reduce, mode):
  testing.check_against_loop(_second_order(reduce), 3, mode=mode, tol=1e-4)
