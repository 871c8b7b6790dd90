"""Fuzz findings in converters/arrays.py, kept as regression tests."""

import tensorflow as tf

from tests import testing

X = tf.constant([[1, 2], [0, 0], [2, 2]])


def test_bincount_with_fixed_length_at_n0():
  """Fuzz seeds 1000267, 1000793."""
  def body(i):
    return tf.math.bincount(tf.math.floormod(X[i], 3), minlength=3, maxlength=3)
  expected = testing.sequential(None, 0, testing.example_spec(body))   # (0, 3)
  testing.assert_allclose(testing.run_pfor(body, 0), expected)


def test_bincount_with_fixed_length_at_n2():
  def body(i):
    return tf.math.bincount(tf.math.floormod(X[i], 3), minlength=3, maxlength=3)
  testing.check_against_loop(body, 2)
