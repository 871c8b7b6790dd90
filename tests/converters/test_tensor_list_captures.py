"""TensorLists built outside the body (loop-invariant captures) and pushed to, popped from
and read inside it, with the fallback off.

A list made by eager code reaches the body as a capture whose handle data is missing (an
empty list) or wrong (TF records the whole tensor's shape for `tensor_list_from_tensor`):
the element type then comes from the op using the list.
"""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import list_ops

import vectorize
from tests import testing

X = tf.constant(np.arange(6, dtype=np.float32).reshape(3, 2))

MAKERS = {
    "empty": lambda: list_ops.empty_tensor_list([2], tf.float32),
    "empty_unknown_shape": lambda: list_ops.empty_tensor_list(None, tf.float32),
    "empty_with_capacity": lambda: list_ops.empty_tensor_list([2], tf.float32,
                                                              max_num_elements=4),
    "reserve": lambda: list_ops.tensor_list_reserve([2], 2, tf.float32),
}


def _push_pop_body(outer):
  def body(i):
    x = tf.gather(X, i)
    lst = list_ops.tensor_list_push_back(outer, x)
    lst = list_ops.tensor_list_push_back(lst, x * 2.)
    lst, top = list_ops.tensor_list_pop_back(lst, tf.float32)
    return (top, list_ops.tensor_list_length(lst),
            list_ops.tensor_list_get_item(lst, 0, tf.float32, element_shape=[2]))
  return body


def _pfor(make, n):
  return vectorize.pfor(_push_pop_body(make()), n, fallback_to_while_loop=False)


def _run(make, n, mode):
  """Eager: the list is made by eager code; function and dynamic (n known only at run
  time): in the caller's graph."""
  if mode == "eager":
    out = _pfor(make, n)
  elif mode == "function":
    out = tf.function(lambda: _pfor(make, n), autograph=False)()
  else:
    out = tf.function(lambda m: _pfor(make, m), autograph=False,
                      input_signature=[tf.TensorSpec([], tf.int32)])(tf.constant(n))
  return tf.nest.map_structure(np.asarray, out)


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])
@pytest.mark.parametrize("n", [3, 0])
@pytest.mark.parametrize("maker", sorted(MAKERS))
def test_push_pop_on_a_captured_list(maker, n, mode):
  body = _push_pop_body(MAKERS[maker]())
  expected = testing.sequential(body, n, testing.example_spec(body))
  testing.assert_allclose(_run(MAKERS[maker], n, mode), expected)


def test_pop_from_a_captured_list_with_elements():
  """A captured list with elements (built in the caller's graph), popped per iteration."""
  def body_for(outer):
    def body(i):
      lst, top = list_ops.tensor_list_pop_back(
          list_ops.tensor_list_push_back(outer, tf.gather(X, i)), tf.float32)
      lst, below = list_ops.tensor_list_pop_back(lst, tf.float32)
      return top, below, list_ops.tensor_list_length(lst)
    return body

  def make():
    return list_ops.tensor_list_from_tensor(tf.constant([[9., 9.], [8., 8.]]),
                                            element_shape=[2])

  actual = tf.function(lambda: vectorize.pfor(body_for(make()), 3,
                                              fallback_to_while_loop=False))()
  body = body_for(make())
  testing.assert_allclose(tf.nest.map_structure(np.asarray, actual),
                          testing.sequential(body, 3, testing.example_spec(body)))
