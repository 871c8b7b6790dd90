"""Pad with per-iteration paddings at n = 0: no iteration says how much the paddings add, so
the result's shape is unknown; a clear refusal, not an empty result of a wrong shape."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize

X = tf.constant(np.random.default_rng(3).standard_normal([4, 5, 3]), tf.float32)


def _slice_gradient(i):
  x = X[i]
  with tf.GradientTape() as tape:
    tape.watch(x)
    loss = tf.reduce_sum(tf.square(tf.slice(x, tf.stack([tf.math.floormod(i, 3), 0]),
                                            [2, -1])))
  return tape.gradient(loss, x)


def test_refused_at_n0_with_the_reason():
  with pytest.raises(vectorize.ConversionError, match="per-iteration paddings"):
    tf.function(lambda: vectorize.pfor(_slice_gradient, 0, fallback_to_while_loop=False),
                autograph=False)()


def test_runs_at_n3():
  expected = np.stack([_slice_gradient(tf.constant(i)) for i in range(3)])
  got = tf.function(lambda: vectorize.pfor(_slice_gradient, 3, fallback_to_while_loop=False),
                    autograph=False)()
  np.testing.assert_allclose(got, expected, rtol=1e-6)


V = tf.constant(np.arange(24, dtype=np.float32).reshape(4, 6) + 1.0)


def _pad_first_axis(i):
  """Each iteration's vector grows by a total of its own: the loop stacks them ragged."""
  return tf.pad(V[i], tf.stack([[i % 2, i % 3 + 1]]))


def _mean_of_padded(i):
  return tf.reduce_mean(_pad_first_axis(i))


def _shape_of_padded(i):
  return tf.shape(_pad_first_axis(i))


def _pad_later_axis(i):
  return tf.pad(tf.reshape(V[i], [3, 2]), tf.stack([[0, 0], [0, i % 2 + 1]]))


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic", "xla"])
@pytest.mark.parametrize("body", [_shape_of_padded, _mean_of_padded,
                                  lambda i: tf.shape(_pad_later_axis(i))],
                         ids=["first_axis_shape", "first_axis_mean", "later_axis_shape"])
def test_paddings_of_a_total_of_their_own_are_refused(body, mode):
  """Session 22 (found beside code-blind round 15): the totals were taken as the largest
  iteration's, and every iteration's value came out that long: its shape, its mean over
  the extra zeros were wrong. Now an error naming the op and the fix; under XLA (where a
  run-time check cannot stop the program) a reshape that only compiles where the totals
  agree, here folded when converting."""
  from tests import testing   # pylint: disable=import-outside-toplevel
  with pytest.raises((tf.errors.InvalidArgumentError, vectorize.ConversionError)) as caught:
    testing.run_pfor(body, 4, mode=mode)
  assert "different total" in str(caught.value)


def test_paddings_of_one_total_on_a_later_axis_stay_dense():
  from tests import testing   # pylint: disable=import-outside-toplevel

  def body(i):   # the shape is unknown to the trace, the same in every iteration
    return tf.pad(tf.reshape(V[i], [3, 2]), tf.stack([[0, 0], [i % 2, 1 - i % 2]]))
  np.testing.assert_array_equal(testing.run_pfor(body, 4, mode="function"),
                                np.stack([body(tf.constant(i)) for i in range(4)]))


@pytest.mark.parametrize("mode", ["xla", "dynamic"])
def test_paddings_of_one_total_the_trace_does_not_know_convert_under_xla(mode):
  """Code-blind round 15: `tf.pad(x[i], [[i % 3, 2 - i % 3]])` is 2 longer in every
  iteration; refused under XLA by the first fix of the above, now converted."""
  from tests import testing   # pylint: disable=import-outside-toplevel

  def body(i):
    return tf.pad(V[i], tf.stack([[i % 3, 2 - i % 3]]))
  np.testing.assert_array_equal(testing.run_pfor(body, 4, mode=mode),
                                np.stack([body(tf.constant(i)) for i in range(4)]))


M3 = tf.constant(np.arange(40, dtype=np.float32).reshape(4, 2, 5))


def _mirror_padded(mode):
  def body(i):
    extra = 1 if mode == "SYMMETRIC" else 0
    return tf.pad(M3[i], tf.stack([[0, 1], [i % 3, 2 - i % 3 + extra]]), mode=mode)
  return body


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic", "xla"])
@pytest.mark.parametrize("pad_mode", ["REFLECT", "SYMMETRIC"])
def test_mirror_paddings_per_iteration(pad_mode, mode):
  """Code-blind round 15: a REFLECT pad by per-iteration paddings fell back, and under XLA
  failed in TensorFlow ('Input 1 to node pfor/while/MirrorPad ... must be a compile-time
  constant'): each output position now gathers its mirrored source."""
  from tests import testing   # pylint: disable=import-outside-toplevel
  body = _mirror_padded(pad_mode)
  np.testing.assert_array_equal(testing.run_pfor(body, 4, mode=mode),
                                np.stack([body(tf.constant(i)) for i in range(4)]))
  if mode == "dynamic":   # no iteration says how much the paddings add: empty all the same
    assert testing.run_pfor(body, 0, mode=mode).shape[0] == 0


@pytest.mark.parametrize("jit_compile", [False, True])
def test_mirror_paddings_past_the_size_are_an_error(jit_compile):
  """Under XLA too (a dropped run-time check would let the gather clamp: wrong values)."""
  def body(i):
    return tf.pad(M3[i], tf.stack([[0, 0], [i % 2 + 4, 1 - i % 2]]), mode="REFLECT")
  with pytest.raises((tf.errors.InvalidArgumentError, vectorize.ConversionError),
                     match="REFLECT needs paddings"):
    tf.function(lambda: vectorize.pfor(body, 4, fallback_to_while_loop=False),
                jit_compile=jit_compile)()


def test_mirror_paddings_refused_at_a_static_n0():
  """Fuzz seed 4300255: at n = 0 the mirror pad came out unpadded ([0, 4, 3] for [0, 5, 5])
  and a later concat failed; refused as the constant pad is."""
  with pytest.raises(vectorize.ConversionError, match="per-iteration paddings"):
    tf.function(lambda: vectorize.pfor(_mirror_padded("REFLECT"), 0,
                                       fallback_to_while_loop=False))()
