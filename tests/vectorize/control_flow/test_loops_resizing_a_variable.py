"""A while loop that resizes a variable (grows it by `tf.concat`, shape invariant
`[None, 3]`) with a trip count of its own per iteration: each iteration ends at a size of
its own, which the stacked loop state cannot hold. It was a run-time crash ('Indices and
updates specified for empty output shape'); now it is refused at conversion: with the
fallback the loop runs sequentially and the result equals `tf.ragged.stack` of the loop,
without it a ConversionError names the loop's line and the fix.
"""

import pytest
import tensorflow as tf

import vectorize
from tests.converters.test_ragged import _reference, _run, assert_equal_to_loop

X = tf.reshape(tf.range(12, dtype=tf.float32), [4, 3])


def _grown(trips):
  def body(i):
    def step(k, rows):
      return k + 1, tf.concat([rows, X[i][None] * tf.cast(k + 1, tf.float32)], 0)
    return tf.while_loop(lambda k, rows: k < trips(i), step, (0, tf.zeros([0, 3])),
                         shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, 3])))[1]
  return body


_PER_ITERATION = _grown(lambda i: i)


def test_without_the_fallback_is_a_clear_error():
  with pytest.raises(vectorize.ConversionError,
                     match=r"(?s)test_loops_resizing_a_variable.py.*\(None, 3\).*fixed size"):
    vectorize.pfor(_PER_ITERATION, 4, fallback_to_while_loop=False)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])
@pytest.mark.parametrize("n", [4, 0])
def test_with_the_fallback_equals_the_loop(n, mode):
  pfor = lambda m: vectorize.pfor(_PER_ITERATION, m, fallback_to_while_loop=True)
  if mode == "eager":
    out = pfor(n)
  elif mode == "function":
    out = tf.function(lambda: pfor(n))()
  else:
    out = tf.function(pfor, input_signature=[tf.TensorSpec([], tf.int32)])(tf.constant(n))
  assert_equal_to_loop(out, _reference(_PER_ITERATION, n))


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])
def test_with_a_trip_count_of_every_iteration_converts(mode):
  body = _grown(lambda i: 2)
  out = _run(body, 4, mode)
  assert not isinstance(out, tf.RaggedTensor)
  assert out.shape == (4, 2, 3)
  expected = tf.stack([body(tf.constant(i)) for i in range(4)])
  tf.debugging.assert_equal(out, expected)
