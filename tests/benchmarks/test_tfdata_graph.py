"""What the tfdata_records workload's vectorized map function holds (agent X, issue 13).

The suite's tf.data workload batches with `drop_remainder=False`, so the map function sees a
batch size known only at run time. There `converters/per_row.py` wraps the per-row PNG
decode loop in `tf.cond(n > 0, ...)` (its empty-batch case); with the batch size static the
same loop runs bare. Measured (one process, 9 interleaved epochs of 2,048 records, batch 128,
load 4.6): CPU per epoch hand-batched 96 ms, vectorize 138 ms, vectorize with the loop run
bare 125 ms. The fix belongs in per_row.map_rows (owned by agent G)."""

import pytest
import tensorflow as tf

import vectorize
from benchmarks.workloads import data_pipeline


def _op_types(graph):
  types = set()
  for op in graph.get_operations():
    types.add(op.type)
  for function in graph._functions.values():  # pylint: disable=protected-access
    types.update(op.type for op in function.graph.get_operations())
  return types


@pytest.mark.xfail(strict=True, reason="per_row.map_rows guards its row loop with tf.cond "
                   "when n is known only at run time (owned by agent G)")
def test_run_time_batch_size_adds_no_conditional():
  fn = tf.function(lambda records: vectorize.vectorized_map(
      data_pipeline.preprocess, records, fallback_to_while_loop=False))
  graph = fn.get_concrete_function(tf.TensorSpec([None], tf.string)).graph
  assert not _op_types(graph) & {"If", "StatelessIf"}
