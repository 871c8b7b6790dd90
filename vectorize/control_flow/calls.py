"""Calls: nested `tf.function`s.

PartitionedCall / StatefulPartitionedCall: the callee's graph is converted in line, with the
caller's context: its inputs are the call's converted inputs, and its outputs become the
call's outputs. Effects of the callee (stateful ops that no output depends on) are kept as
control dependencies of the outputs. Calls are never copied as they are, even with
invariant inputs: TensorFlow attaches a call's gradient to the op object it created, so a
copy would have none. (Ops whose gradient is a Python function of their own:
`vectorize/custom_gradients.py`.)
"""

import tensorflow as tf

from vectorize import graph_io
from vectorize import ragged
from vectorize import walker
from vectorize.registry import register
from vectorize.values import Value


@ragged.register("PartitionedCall", "StatefulPartitionedCall")
@register("PartitionedCall", "StatefulPartitionedCall")
def _convert_partitioned_call(op):
  graph = graph_io.function_graph(op.op, "f")
  # The first outputs only: a gradient taken of the function elsewhere (eagerly) appends
  # its intermediates to the outputs of the same FuncGraph.
  outputs, effects = walker.convert_graph(graph, list(op.inputs), op.ctx,
                                          outputs=graph.outputs[:len(op.op.outputs)],
                                          ragged_outputs=True)
  if not op.op.outputs:
    return tf.group(effects) if effects else tf.no_op()
  if effects:
    with tf.control_dependencies(effects):
      outputs = [Value(tf.nest.map_structure(tf.identity, v.tensor), v.stacked)
                 for v in outputs]   # a DenseList is a pair of tensors
  return outputs
