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
