"""PartitionedCall / StatefulPartitionedCall: nested `tf.function` calls inside the body.

The callee's graph is converted in line, with the caller's context: its inputs are the
call's converted inputs, and its outputs become the call's outputs. Effects of the callee
(stateful ops that no output depends on) are kept as control dependencies of the outputs.
"""

import tensorflow as tf

from vectorize import graph_io
from vectorize import walker
from vectorize.registry import register
from vectorize.values import Value


@register("PartitionedCall", "StatefulPartitionedCall")
def _convert_partitioned_call(op):
  graph = graph_io.function_graph(op.op, "f")
  outputs, effects = walker.convert_graph(graph, list(op.inputs), op.ctx)
  if not op.op.outputs:
    return tf.group(effects) if effects else tf.no_op()
  if effects:
    with tf.control_dependencies(effects):
      outputs = [Value(tf.identity(v.tensor), v.stacked) for v in outputs]
  return outputs
