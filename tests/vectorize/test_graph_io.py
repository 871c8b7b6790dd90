"""graph_io.folded: invariant shape arithmetic on small integer constants becomes constants.

(Its use under XLA, a Keras RNN's loop capacity computed by reduce_max, is tested through
per-example gradients of a bidirectional LSTM in test_keras_rnn_gradients.py.)"""

import numpy as np
import tensorflow as tf

from vectorize import graph_io


def _folded(build):
  """`build()` traced in a fresh graph; its op folded on its own inputs."""
  with tf.Graph().as_default():
    out = build()
    result = graph_io.folded(out.op, list(out.op.inputs))
    return None if result is None else [tf.get_static_value(t) for t in result]


def test_reduction_of_a_constant_is_folded():
  assert _folded(lambda: tf.reduce_max(tf.constant([3, 7, 5]))) == [7]


def test_range_of_constants_is_folded():
  np.testing.assert_array_equal(_folded(lambda: tf.range(tf.constant(1), 9, 3))[0], [1, 4, 7])


def test_float_results_are_not_folded():
  assert _folded(lambda: tf.reduce_max(tf.constant([3.0, 7.0]))) is None


def test_large_results_are_not_folded():
  assert _folded(lambda: tf.range(tf.constant(0), 1000)) is None


def test_non_constant_inputs_are_not_folded():
  assert _folded(lambda: tf.reduce_max(tf.compat.v1.placeholder(tf.int32, [3]))) is None


def test_invalid_ops_are_left_to_run_time():
  assert _folded(lambda: tf.math.floordiv(tf.constant(1), tf.constant(0))) is None


def test_seeds_of_random_ops_are_not_folded():
  """Under XLA a random op draws other numbers from a constant seed than from a computed
  one: the loop's seed stays computed."""
  with tf.Graph().as_default():
    seed = tf.strided_slice(tf.constant([[1, 2], [3, 4]]), [0], [1], shrink_axis_mask=1)
    tf.random.stateless_normal([2], seed)
    assert graph_io.folded(seed.op, list(seed.op.inputs)) is None


def test_repeated_shape_arithmetic_runs_once_and_folds_alike(monkeypatch):
  """An unrolled loop repeats the same folding: it runs eagerly once, each copy folds to
  the same values, and a fold that fails stays unfolded every time."""
  runs = []
  execute = graph_io._execute   # pylint: disable=protected-access
  monkeypatch.setattr(graph_io, "_execute", lambda *a: runs.append(a[0].type) or execute(*a))
  monkeypatch.setattr(graph_io, "_folded_results", {})
  for _ in range(3):
    assert _folded(lambda: tf.reduce_max(tf.constant([3, 11, 5]))) == [11]
    assert _folded(lambda: tf.reduce_min(tf.constant([3, 11, 5]))) == [3]
    assert _folded(lambda: tf.math.floordiv(tf.constant(2), tf.constant(0))) is None
  assert sorted(runs) == ["FloorDiv", "Max", "Min"]
