"""TensorLists (TensorArrays) whose length differs per iteration, read whole, with the
fallback off: the stack, concat or gather of each iteration's list is as long as the loop's,
so the result equals `tf.ragged.stack` of the loop (a zero-padded dense result was a silent
wrong answer). Lists of one length in every iteration stay dense. Under XLA a ragged read
is a ConversionError naming the fix.
"""

import pytest
import tensorflow as tf

import vectorize
from tests import testing
from tests.converters.test_ragged import _reference, _run, assert_equal_to_loop

N = 4
X = tf.reshape(tf.range(N * 5 * 2, dtype=tf.float32), [N, 5, 2])


def _written_below(i, array, item=lambda i, j: X[i][j][0], extra=0):
  """`array` written at j = 0 .. i + extra - 1 in a loop of per-iteration trips."""
  return tf.while_loop(lambda j, a: j < i + extra,
                       lambda j, a: (j + 1, a.write(j, item(i, j))), (0, array))[1]


def _dynamic_stack(i):
  return _written_below(i, tf.TensorArray(tf.float32, size=0, dynamic_size=True)).stack()


def _per_iteration_size_stack(i):
  return _written_below(i, tf.TensorArray(tf.float32, size=i, element_shape=[])).stack()


def _dynamic_concat(i):
  array = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[1, 2])
  return _written_below(i, array, lambda i, j: X[i][j][None] * 2., extra=1).concat()


def _dynamic_stack_reduced(i):
  """A mean over the list's axis: padded rows would count in it."""
  array = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[2])
  return tf.reduce_mean(_written_below(i, array, lambda i, j: X[i][j], extra=1).stack(), 0)


def _gather_below(i):
  array = tf.TensorArray(tf.float32, size=5, element_shape=[2]).unstack(X[i] + 1.)
  return array.gather(tf.range(i + 1))  # (an eager gather of none loses the shape)


def _pushes_and_stack(i):
  """Pushes outside any loop: one length in every iteration, dense."""
  array = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[2])
  return array.write(0, X[i][0]).write(1, X[i][i]).stack()


def _fixed_size_in_a_loop_concat(i):
  """A fixed-size array written in a loop of per-iteration trips: dense."""
  array = tf.TensorArray(tf.float32, size=3, element_shape=[1, 2])
  return _written_below(tf.math.floormod(i, 3), array, lambda i, j: X[i][j][None]).concat()


BODIES = {
    "dynamic_stack": _dynamic_stack,
    "per_iteration_size_stack": _per_iteration_size_stack,
    "dynamic_concat": _dynamic_concat,
    "dynamic_stack_reduced": _dynamic_stack_reduced,
    "gather_below": _gather_below,
}
# Of one length in every iteration, though the graph does not know it: the stacked loop.
DENSE_BODIES = {
    "pushes_and_stack": _pushes_and_stack,
    "fixed_size_in_a_loop_concat": _fixed_size_in_a_loop_concat,
}


# Every body eagerly and with a run-time n; "dynamic_stack" in a caller's tf.function too. An eager
# pfor of a static n traces the same `pfor_in_graph` in a tf.function of its own, so the
# caller's function adds nothing that depends on the body.
@pytest.mark.parametrize("name,n,mode", [
    pytest.param(name, n, mode, id=f"{name}-{n}-{mode}") for name in sorted(BODIES)
    for n in (N, 0) for mode in ("eager", "function", "dynamic")
    if mode != "function" or name == "dynamic_stack"])
def test_list_of_per_iteration_length_equals_loop(name, n, mode):
  body = BODIES[name]
  assert_equal_to_loop(_run(body, n, mode), _reference(body, n))


# (Under XLA a dynamic-size array has no room for writes, a refusal of its own.)
@pytest.mark.parametrize("mode", ["eager", "function", "dynamic", "xla"])
@pytest.mark.parametrize("n", [N, 0])
@pytest.mark.parametrize("name", sorted(DENSE_BODIES))
def test_list_of_one_length_stays_dense(name, n, mode):
  if name == "pushes_and_stack" and (mode == "xla" or n == 0):
    pytest.skip("a dynamic-size TensorArray has no room for writes under XLA; at n = 0 "
                "nothing tells the length of a list grown by writes")
  body = DENSE_BODIES[name]
  expected = testing.sequential(body, n, testing.example_spec(body))
  testing.assert_allclose(testing.run_pfor(body, n, mode=mode), expected)


def test_the_stack_of_the_users_report_is_ragged():
  """The report: rows of lengths 0, 1, 2, 3, not a zero-padded [4, 3]."""
  out = vectorize.pfor(_dynamic_stack, N, fallback_to_while_loop=False)
  assert isinstance(out, tf.RaggedTensor)
  assert out.to_list() == [[], [10.], [20., 22.], [30., 32., 34.]]


def test_the_users_report_under_xla_is_a_clear_error():
  """Under XLA a list cannot grow: the stack never pads, the writes are refused first."""
  fn = tf.function(lambda: vectorize.pfor(_dynamic_stack, N, fallback_to_while_loop=False),
                   jit_compile=True)
  with pytest.raises(vectorize.ConversionError, match=r"(?s)test_lists_of_per_iteration_length"
                     r".py.*give the TensorArray a size"):
    fn()
