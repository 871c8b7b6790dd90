"""Bugs the differential fuzzer found (tests/fuzz, pattern pool of seeds from 3,000,000),
each reduced by hand from its shrunk repro and checked against the sequential loop (or
`map().batch()`). Strict xfails: remove the mark when the bug is fixed."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize


# Fuzz seeds 3000003, 3000004, 3000008, 3000009 (data mode, drop_remainder=True: "variable
# state: float values differ").
@pytest.mark.xfail(strict=True, reason="map_and_batch(drop_remainder=True) batches before "
                   "mapping, so fn never runs on the dropped remainder: a variable fn updates "
                   "ends with another value than after map(fn).batch(b, drop_remainder=True), "
                   "which maps every element and drops the last batch afterwards")
def test_map_and_batch_drop_remainder_keeps_the_dropped_elements_side_effects():
  v = tf.Variable(0.0)

  def fn(i):
    v.assign_add(tf.cast(i, tf.float32) + 1.0)
    return tf.cast(i, tf.float32) * 2.0

  ds = tf.data.Dataset.range(3).map(lambda k: tf.cast(k, tf.int32))
  want = [b.numpy() for b in ds.map(fn).batch(2, drop_remainder=True)]
  want_state = v.numpy()  # 1 + 2 + 3: the third element is mapped, then dropped
  v.assign(0.0)
  got = [b.numpy() for b in ds.apply(vectorize.data.map_and_batch(
      fn, 2, drop_remainder=True, fallback_to_while_loop=False))]
  assert len(got) == len(want)
  for g, w in zip(got, want):
    np.testing.assert_array_equal(g, w)
  assert v.numpy() == want_state, (v.numpy(), want_state)


# Fuzz seed 3000030 (n0 mode: "shape (0, 0, 3) != expected (0, 2, 3)"); shrunk repro
# /tmp/fuzz_campaign/chunk_0/repro_6.py.
@pytest.mark.xfail(strict=True, reason="stack() of a dynamic-size TensorArray that a while "
                   "loop of a loop-invariant trip count (2) fills: pfor gives (n, 2, 3) for "
                   "n = 1 but (0, 0, 3) for n = 0, where stacking no iteration of a (2, 3) "
                   "value gives (0, 2, 3)")
@pytest.mark.parametrize("compiled", [False, True])
def test_dynamic_tensor_array_of_invariant_length_at_n0(compiled):
  x = tf.constant([[1, 2, 3], [4, 5, 6]])

  def body(i):
    a = tf.gather(x, i)
    _, ta = tf.while_loop(
        lambda j, ta: j < 2, lambda j, ta: (j + 1, ta.write(j, a)),
        (0, tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[3])))
    return ta.stack()

  assert body(tf.constant(0)).shape == (2, 3)
  run = lambda n: vectorize.pfor(body, n, fallback_to_while_loop=False)
  if compiled:
    run = tf.function(run, autograph=False)
  assert run(1).shape == (1, 2, 3)
  assert run(0).shape == (0, 2, 3), run(0).shape
