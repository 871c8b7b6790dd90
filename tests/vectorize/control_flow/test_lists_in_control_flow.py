"""TensorArrays carried through nested while loops, and read inside a conditional that a
GradientTape in the body differentiates: each compared with the sequential loop."""

import numpy as np
import pytest
import tensorflow as tf

from tests import testing

RNG = np.random.default_rng(9)
X = tf.constant(RNG.standard_normal([5, 6, 2]), tf.float32)
TRIPS = tf.constant([2, 0, 3, 1, 2])
V = tf.constant(RNG.standard_normal([5, 3]), tf.float32)
W = tf.constant([0.5, -1., 2.])


def _check(body, n, mode):
  expected = testing.sequential(body, n, testing.output_spec(body))
  testing.assert_allclose(testing.run_pfor(body, n, mode=mode), expected)


def _nested_loops_growing_a_list(outer_trips):
  """An outer loop carries a TensorArray that an inner loop of per-iteration trips grows."""
  def body(i):
    x, trips = tf.gather(X, i), tf.gather(TRIPS, i)
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[6, 2])

    def outer(t, ta):
      def inner(s, ta):
        return s + 1, ta.write(ta.size(), x * tf.cast(s + t, tf.float32))
      return t + 1, tf.while_loop(lambda s, ta: s < trips, inner, (0, ta))[1]

    limit = trips if outer_trips == "per_iteration" else 2
    ta = tf.while_loop(lambda t, ta: t < limit, outer, (0, ta))[1]
    return tf.reduce_sum(ta.stack(), 0)
  return body


# Under XLA a dynamic-size TensorArray needs a static size, so only n = 0 runs there.
@pytest.mark.parametrize("outer_trips", ["per_iteration", "invariant"])
@pytest.mark.parametrize("n,mode", [(5, "function"), (5, "dynamic"), (0, "function"),
                                    (0, "dynamic"), (0, "xla")])
def test_nested_while_loops_carrying_a_tensor_array(outer_trips, n, mode):
  _check(_nested_loops_growing_a_list(outer_trips), n, mode)


def _list_read_in_a_differentiated_cond(read):
  """The cond's gradient needs the list of the taken branch (an intermediate), for which
  the other branch has a FakeParam."""
  def body(i):
    v, w = tf.gather(V, i), tf.identity(W)
    with tf.GradientTape() as tape:
      tape.watch(w)

      def with_list():
        ta = tf.TensorArray(tf.float32, size=2, element_shape=[3]).write(0, w).write(1, w * 2.)
        return (ta.read(1) if read == "read" else tf.reduce_sum(ta.gather([1, 0]), 0)) * v

      y = tf.cond(V[0, 0] > 0., with_list, lambda: w * v)
    return tape.gradient(y, w)
  return body


@pytest.mark.parametrize("read", ["read", "gather"])
@pytest.mark.parametrize("mode", testing.MODES)
@pytest.mark.parametrize("n", [5, 0])
def test_tensor_array_in_one_branch_of_a_differentiated_cond(read, mode, n):
  _check(_list_read_in_a_differentiated_cond(read), n, mode)


def _array_of_per_iteration_size_without_element_shape(inside_a_cond):
  """A TensorArray of size i + 1 made without element_shape (its list's elements of unknown
  rank), written in a while loop; the rank comes from what is written (fuzz seeds 3102028
  and six more: refused before)."""
  def fill(i):
    def step(j, ta):
      return j + 1, ta.write(j, tf.fill([2], tf.cast(i * 10 + j, tf.float32)))
    _, ta = tf.while_loop(lambda j, ta: j < i + 1, step, (0, tf.TensorArray(tf.float32, i + 1)))
    return tf.reduce_sum(ta.stack(), 0)   # (an eager read would clear the element)

  def body(i):
    if not inside_a_cond:
      return fill(i)
    return tf.cond(i < 2, lambda: tf.zeros([2]), lambda: fill(i))
  return body


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])
@pytest.mark.parametrize("inside_a_cond", [False, True])
@pytest.mark.parametrize("n", [0, 4])
def test_array_without_element_shape_of_per_iteration_size(inside_a_cond, mode, n):
  """At n = 0 nothing is written: the element's static shape comes from the write's (fuzz
  seed 3102704 returned (0, 1) for (0, 2))."""
  body = _array_of_per_iteration_size_without_element_shape(inside_a_cond)
  testing.assert_allclose(testing.run_pfor(body, n, mode),
                          testing.sequential(body, n, tf.TensorSpec([2], tf.float32)))
