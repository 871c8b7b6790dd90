"""What the tfdata_records workload's vectorized map function holds (agent X, issue 13).

The suite's tf.data workload batches with `drop_remainder=False`, so the map function sees a
batch size known only at run time. There `converters/per_row.py` wrapped the per-row PNG
decode loop in `tf.cond(n > 0, ...)` (its empty-batch case); with the batch size static the
same loop ran bare. Measured (one process, 9 interleaved epochs of 2,048 records, batch 128,
load 4.6): CPU per epoch hand-batched 96 ms, vectorize 138 ms, vectorize with the loop run
bare 125 ms. Fixed in per_row.map_rows (c374383): the row loop runs bare at a run-time n too.
"""

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


def test_run_time_batch_size_adds_no_conditional():
  fn = tf.function(lambda records: vectorize.vectorized_map(
      data_pipeline.preprocess, records, fallback_to_while_loop=False))
  graph = fn.get_concrete_function(tf.TensorSpec([None], tf.string)).graph
  assert not _op_types(graph) & {"If", "StatelessIf"}


def _dataset_function_op_types(dataset):
  graph = tf.compat.v1.GraphDef()
  graph.ParseFromString(dataset._as_serialized_graph().numpy())  # pylint: disable=protected-access
  return {node.op for function in graph.library.function for node in function.node_def}


@pytest.mark.unchecked   # counts the ops pfor emits (or the prints): the check adds its own
def test_map_and_batch_function_holds_no_assert():
  """A batch's own size needs no run-time check, and an Assert gating the map function costs
  tf.data dearly: data_pipeline's hand-batched map with one such Assert added took 1.36x the
  wall time (1.10x CPU) of the map without it; map_and_batch with drop_remainder=True (no
  check) took 0.90x (15 interleaved epochs, load 7.8). Fixed in fea6c1e: map_and_batch calls
  the engine with n read from the batch."""
  dataset = tf.data.Dataset.from_tensor_slices(tf.zeros([10, 4])).apply(
      vectorize.data.map_and_batch(tf.nn.l2_normalize, 4, fallback_to_while_loop=False))
  assert "Assert" not in _dataset_function_op_types(dataset)
