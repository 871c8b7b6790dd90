"""Per-row ops (converters/per_row.py) run in our own while loop: nested vectorization, rows
of different ranks, and no kernel of TF's own per-row machinery in the emitted graph."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

_PIXELS = np.random.default_rng(0).integers(0, 256, [3, 2, 4, 5, 3], np.uint8)
_PNGS = tf.constant([[tf.io.encode_png(p).numpy() for p in row] for row in _PIXELS])


def test_nested_decodes_equal_the_double_loop():
  def outer(i):
    return vectorize.pfor(lambda j: tf.io.decode_png(_PNGS[i, j], channels=3), 2,
                          fallback_to_while_loop=False)
  np.testing.assert_array_equal(testing.run_pfor(outer, 3), _PIXELS)


@pytest.mark.parametrize("mode", ["function", "dynamic"])
def test_the_loop_is_a_while_loop_of_ours(mode):
  fn = tf.function(lambda: vectorize.pfor(lambda i: tf.io.decode_png(_PNGS[0, i], channels=3),
                                          3, fallback_to_while_loop=False))
  types = testing.all_op_types(fn.get_concrete_function().graph)
  assert "MapDefun" not in types
  np.testing.assert_array_equal(testing.run_pfor(
      lambda i: tf.io.decode_png(_PNGS[i, 0], channels=3), 3, mode=mode), _PIXELS[:, 0])


def _graph_types(n_spec):
  fn = tf.function(lambda n: vectorize.pfor(lambda i: tf.io.decode_png(_PNGS[0, i], channels=3),
                                            n, fallback_to_while_loop=False))
  return set(testing.all_op_types(fn.get_concrete_function(n_spec).graph))


def test_a_run_time_n_needs_no_conditional():
  """Outputs of known rank stack with a run-time row shape, so no tf.cond guards n = 0 (a
  cond costs each tf.data iterator a Grappler pass over its branches)."""
  types = _graph_types(tf.TensorSpec([], tf.int32))
  assert not types & {"If", "StatelessIf"}
  assert "While" in types or "StatelessWhile" in types


@pytest.mark.parametrize("n", [0, 1, 2, 5, 6])
@pytest.mark.parametrize("mode", ["function", "dynamic"])
def test_n_equals_the_loop(n, mode):
  """Rows go several to a loop step, the last step repeating the last row: n below, at and
  past a step's rows."""
  pixels, pngs = _PIXELS.reshape([6, 4, 5, 3]), tf.reshape(_PNGS, [6])
  expected = pixels[:n] if n else np.zeros([0, 0, 0, 3], np.uint8)   # unknown dims 0
  testing.assert_allclose(testing.run_pfor(
      lambda i: tf.io.decode_png(pngs[i], channels=3), n, mode=mode), expected)


def test_rows_of_different_sizes_name_the_op_at_a_run_time_n():
  pngs = tf.constant([tf.io.encode_png(np.zeros([h, 2, 1], np.uint8)).numpy() for h in (2, 3)])
  with pytest.raises(tf.errors.InvalidArgumentError, match="DecodePng .* different sizes"):
    testing.run_pfor(lambda i: tf.io.decode_png(pngs[i]), 2, mode="dynamic")


def test_map_and_batch_with_a_short_last_batch():
  pngs = tf.reshape(_PNGS, [-1])
  dataset = tf.data.Dataset.from_tensor_slices(pngs)
  decode = lambda png: tf.io.decode_png(png, channels=3)
  expected = list(dataset.map(decode).batch(4))
  actual = list(dataset.apply(vectorize.data.map_and_batch(decode, 4,
                                                           fallback_to_while_loop=False)))
  assert [a.shape for a in actual] == [e.shape for e in expected]   # 4, 2
  for a, e in zip(actual, expected):
    np.testing.assert_array_equal(a, e)


def _shape_ops_written_to_lists(fn):
  """TensorListSetItem ops whose item is a Shape op's output (typed a shape tensor: TF's type
  inference calls such a graph invalid, a warning at every tf.data iterator start)."""
  return [op.name for op in testing.all_ops(fn.get_concrete_function().graph)
          if op.type == "TensorListSetItem" and op.inputs[2].op.type == "Shape"]


def test_row_shapes_are_written_as_plain_int32():
  fn = tf.function(lambda: vectorize.pfor(lambda i: tf.io.decode_png(_PNGS[0, i], channels=3),
                                          3, fallback_to_while_loop=False))
  assert not _shape_ops_written_to_lists(fn)
