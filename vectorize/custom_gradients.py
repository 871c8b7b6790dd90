"""Ops whose gradient is a Python function of their own (`tf.custom_gradient`,
`gradient_override_map`).

The gradient function is Python code over the body's tensors, which do not exist in the
vectorized graph. The op is converted as usual, and its outputs get a gradient that calls
the gradient function of one iteration, traced on the body's tensors, and converts that
trace with the walker (the body's tensors becoming their converted values). The walker
calls this module and hands it its `convert_graph`, so that this module needs no import of
the walker.
"""

import tensorflow as tf
from tensorflow.python.framework import func_graph as func_graph_module
from tensorflow.python.framework import ops as tf_ops

from vectorize import graph_io
from vectorize import lists
from vectorize.errors import ConversionError, user_location
from vectorize.values import Value, stack


def gradient_override(op):
  """The gradient name `op` was given by `gradient_override_map` (as `tf.custom_gradient`
  does), or None."""
  attr = op.node_def.attr.get("_gradient_op_type")   # get_attr raising costs 20x more
  return attr.s if attr is not None else None


def with_own_gradient(op, inputs, results, ctx, lookup, convert_graph):
  """`results` (op's converted outputs) with op's overridden gradient, vectorized: the
  gradient's trace converted by `convert_graph` (the walker's, which calls this).

  Where any input is stacked, every output is made stacked: the cotangent of an output
  tiled over the loop is then one per iteration, which a gradient function that depends on
  its iteration's inputs needs.
  """
  if isinstance(results, tf.Operation) or any(
      isinstance(v.tensor, (lists.DenseList, lists.UniformList))
      for v in list(inputs) + list(results)):
    return results
  if any(v.stacked for v in inputs):
    results = [Value(stack(v, ctx.n), True) for v in results]
  xs = [v.tensor for v in inputs]

  @tf.custom_gradient
  def attach(*args):
    del args   # the results are computed from them already

    def grad(*dys, variables=None):
      grads = _vectorized_gradient(op, inputs, results, dys, ctx, lookup, convert_graph)
      return (grads, [None] * len(variables)) if variables else grads

    return [tf.identity(v.tensor) for v in results], grad

  return [Value(t, v.stacked) for t, v in zip(attach(*xs), results)]


def tensors_their_gradients_read(ops):
  """The tensors of the ops' graph that the overridden gradients of `ops` (ops with a
  `gradient_override`) read (a `tf.custom_gradient` whose gradient closes over an
  intermediate its output does not depend on: `tf.nn.ctc_loss`'s dense form): the walker
  converts them too, so the gradient finds their values. A gradient that cannot be traced
  here reads nothing."""
  read = []
  for op in ops:
    try:
      graph = _traced_gradient(op)
    except Exception:  # pylint: disable=broad-except  (traced again, and raised, if asked for)
      continue
    read += [external for external, _ in graph.captures
             if getattr(external, "graph", None) is op.graph]   # not an eager tensor
  return read


def _vectorized_gradient(op, inputs, results, dys, ctx, lookup, convert_graph):
  """The gradients of op's converted inputs, given the cotangents `dys` of its outputs."""
  dys = [tf.zeros_like(v.tensor) if dy is None else tf.convert_to_tensor(dy)
         for dy, v in zip(dys, results)]
  graph = _traced_gradient(op)
  values = [Value(dy, v.stacked) for dy, v in zip(dys, results)]
  for external, _ in graph.captures:
    values.append(_captured_value(op, external, lookup))
  grads, _ = convert_graph(graph, values, ctx)
  grads = iter(grads)
  out = []
  for k, v in enumerate(inputs):
    if k not in graph.gradient_positions:
      out.append(None)
      continue
    g = next(grads)
    if v.stacked and not g.stacked:
      out.append(stack(g, ctx.n))
    elif g.stacked and not v.stacked:
      out.append(tf.reduce_sum(g.tensor, axis=0))   # an invariant input: every iteration's
    else:
      out.append(g.tensor)
  return out


def _traced_gradient(op):
  """The gradient function of one iteration, traced: a FuncGraph whose inputs are the
  cotangents of op's outputs and then the body tensors it captures, and whose outputs are
  the gradients that are not None (their input positions in `gradient_positions`)."""
  grad_fn = tf_ops._gradient_registry.lookup(gradient_override(op))  # pylint: disable=protected-access
  graph = func_graph_module.FuncGraph("vectorize_gradient_of_" + op.name.replace("/", "_"))
  with graph.as_default():
    dys = [tf.compat.v1.placeholder(t.dtype, t.shape) for t in op.outputs]
    grads = grad_fn(op, *dys)
    grads = [grads] if not isinstance(grads, (list, tuple)) else list(grads)
    graph.gradient_positions = [k for k, g in enumerate(grads) if g is not None]
    graph.outputs = [tf.convert_to_tensor(g) for g in grads if g is not None]
  graph.inputs = dys + list(graph.internal_captures)
  return graph


def _captured_value(op, external, lookup):
  """The converted value of a body tensor that op's gradient function reads."""
  graph = op.graph
  value = lookup(external) if lookup is not None else None
  if value is None:   # a tensor from outside op's graph, captured there
    internal = {e.ref(): i for e, i in graph.captures}.get(external.ref())
    value = lookup(internal) if internal is not None and lookup is not None else None
  if value is None:
    if external.graph is graph or isinstance(external.graph, func_graph_module.FuncGraph):
      raise ConversionError(
          f"The gradient of {op.type} {op.name!r}{user_location(op)} reads "
          f"{external.name}, which the loop body computes but none of its outputs needs, so "
          "vectorize has no value for it. Make the forward function compute it on the way "
          "to its result.")
    value = Value(graph_io.capture(external), False)
  return value
