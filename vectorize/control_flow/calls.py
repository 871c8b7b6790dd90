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
from vectorize import op_types
from vectorize import ragged
from vectorize import walker
from vectorize.errors import ConversionError, user_location
from vectorize.registry import register
from vectorize.values import Value


@ragged.register("PartitionedCall", "StatefulPartitionedCall", op_types.LEGACY_CALL)
@register("PartitionedCall", "StatefulPartitionedCall", op_types.LEGACY_CALL)
def _convert_partitioned_call(op):
  if graph_io.is_legacy_call(op.op) and op.ctx.static_n == 0:
    # A legacy function's graph, built from its definition, has values of unknown shape;
    # one the fallback computes (tf.nn.ctc_loss's dense form has some) takes its shape from
    # the iterations, and there are none.
    raise ConversionError(
        f"Cannot vectorize the call of legacy function {op.type}{user_location(op.op)} at "
        "a static n = 0: its values have no static shapes, and with no iteration the "
        "fallback inside it has none to give. To fix: skip the call when there are no "
        "examples (for tf.nn.ctc_loss, sparse labels avoid the legacy function).")
  graph = graph_io.called_graph(op.op)
  # The first outputs only: a gradient taken of the function elsewhere (eagerly) appends
  # its intermediates to the outputs of the same FuncGraph.
  outputs, effects = walker.convert_graph(graph, list(op.inputs), op.ctx,
                                          outputs=graph.outputs[:len(op.op.outputs)],
                                          ragged_outputs=True)
  if not op.op.outputs:
    return tf.group(effects) if effects else tf.no_op()
  if effects:
    with tf.control_dependencies(effects):
      # a DenseList is a pair of tensors, RaggedRows a tuple with optional parts
      outputs = [Value(tf.nest.map_structure(lambda t: t if t is None else tf.identity(t),
                                             v.tensor), v.stacked) for v in outputs]
  return outputs
