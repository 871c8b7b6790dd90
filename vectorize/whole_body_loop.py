"""The whole body as a sequential loop, for bodies whose state cannot be vectorized.

A variable the body reads and updates by anything but an affine recurrence (e.g. `v <- v*v +
x_i`) gives each iteration the state the previous one left: no vectorized form exists, and
running only the refusing op in a loop would not help, since the other stateful ops around
it would already be emitted, and would run. So with the fallback on the engine decides first:
`refuses_state` converts the body in a scratch graph that is never run; when a stateful op
refuses there, the caller emits `run_sequentially` instead, one iteration after another.
"""

from absl import logging
import tensorflow as tf
from tensorflow.python.framework import func_graph

from vectorize import graph_io
from vectorize import iteration_outputs
from vectorize import options
from vectorize import ragged
from vectorize import trace as trace_module
from vectorize.errors import ConversionError
from vectorize.values import stack

VARIABLE_WRITES = ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
           "ResourceScatterUpdate", "ResourceScatterAdd", "ResourceScatterSub",
           "ResourceScatterMul", "ResourceScatterDiv", "ResourceScatterMin",
           "ResourceScatterMax", "ResourceScatterNdUpdate", "ResourceScatterNdAdd",
           "ResourceScatterNdSub")


def called_functions(op):
  """The names of the functions op calls (a call's f, a loop's cond and body, branches)."""
  for value in op.node_def.attr.values():
    if value.HasField("func"):
      yield value.func.name
    elif value.HasField("list"):
      yield from (f.name for f in value.list.func)


class StatefulRefusal(ConversionError):
  """A stateful op that has no vectorized form here: the whole body must run as a loop."""


def any_op(graph, holds, seen=None):
  """Whether `holds(op)` for an op of `graph` or of a function it calls, at any depth."""
  seen = set() if seen is None else seen
  for op in graph.get_operations():
    if holds(op):
      return True
    for name in called_functions(op):
      fn = graph_io.find_function(graph, name)
      if name not in seen and fn is not None:
        seen.add(name)
        if any_op(fn.graph, holds, seen):
          return True
  return False


def writes_variables(graph):
  """Whether the body graph, or a function it calls, writes a resource variable."""
  return any_op(graph, lambda op: op.type in VARIABLE_WRITES)


def refuses_state(convert):
  """The StatefulRefusal that `convert()` raises in a scratch graph (never run), or None."""
  scratch = func_graph.FuncGraph("pfor_trial_conversion")
  with scratch.as_default():
    try:
      convert()
    except StatefulRefusal as refusal:
      return refusal
  return None


def run_sequentially(loop_fn, traced, n, static_n, refusal):
  """`loop_fn(i)` for i in range(n), one iteration after another, stacked; `traced` (the
  body traced once) gives the output structure. Logs why."""
  if trace_module.OPERATION in traced.kinds:
    raise ConversionError(f"{refusal} (The body returns an Operation, which a sequential "
                          "loop of the whole body does not return.)")
  logging.warning("vectorize: the whole body runs as a sequential while loop, which is slow: "
                  "%s", refusal)
  fn = trace_module.autograph_like_caller(loop_fn)
  # An output whose first axis the trace leaves unknown may differ in size per iteration:
  # ragged, as the converted body returns it (not under XLA, which needs one size).
  varying = [0 if options.static_shapes_wanted() else int(ragged.first_dim_varies(t.shape))
             for t in traced.graph.outputs]
  outputs = iteration_outputs.IterationOutputs(
      traced.graph.outputs, varying, "the body runs as a sequential loop, and its")

  def step(i, *arrays):
    leaves = tf.nest.flatten(fn(i), expand_composites=False)
    for op in tf.compat.v1.get_default_graph().get_operations():   # the body's own conds
      graph_io.keep_unlowered_where_grappler_breaks(op)
    tensors = [tf.convert_to_tensor(part) for leaf, kind in zip(leaves, traced.kinds)
               for part in _parts(leaf, kind)]
    return (i + 1,) + outputs.write(arrays, i, tensors)

  results = tf.while_loop(lambda i, *_: i < n, step, (tf.constant(0),) + outputs.arrays(n),
                          parallel_iterations=1)
  graph_io.keep_unlowered(results[0])
  flat = []
  for value, t in zip(outputs.values(results[1:], n, static_n), traced.graph.outputs):
    out = ragged.output_tensor(value, n, stack)
    if isinstance(out, tf.Tensor):
      out.set_shape(tf.TensorShape([static_n]).concatenate(t.shape))
    flat.append(out)
  return traced.pack(flat, [])


def _parts(leaf, kind):
  """The tensors the trace keeps for one output leaf (a RaggedTensor's components)."""
  if kind == trace_module.TENSOR:
    return [leaf]
  if kind == trace_module.RAGGED:
    return [leaf.flat_values] + list(leaf.nested_row_splits)
  return []
