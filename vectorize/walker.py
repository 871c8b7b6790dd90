"""The walker: converts one traced graph, op by op, in topological order.

Each body tensor maps to a `Value`. An op goes through three stages (`_convert_op`):
- copy: an op whose inputs are all invariant and that is stateless is emitted once,
  unchanged, and its outputs stay invariant (`_copied`);
- dispatch: every other op goes to the converter registered for its type and the kind of
  its inputs (`_dispatch`, `kinds.py`), whose results are checked against the op and
  settled: a ragged result whose per-iteration shape the graph knows is stacked again
  (`_check_results`);
- fallback: an op with no converter, or whose converter raises `Unvectorizable`, runs in
  the sequential loop (`_fall_back`), or raises `ConversionError` when the context forbids
  fallback.
Control edges between body ops are kept between their conversions. Ops whose gradient is
their own Python function keep it (`custom_gradients.py`).
"""


import dataclasses

import tensorflow as tf
from tensorflow.python.framework import func_graph as func_graph_module
from tensorflow.python.ops import handle_data_util

from vectorize import custom_gradients
from vectorize import fallback
from vectorize import graph_io
from vectorize import kinds
from vectorize import lists
from vectorize import op_types
from vectorize import ragged
from vectorize import registry
from vectorize import whole_body_loop
from vectorize.context import Report
from vectorize.errors import ConversionError, Unvectorizable, user_location
from vectorize.op_input import OpInput
from vectorize.values import Value, invariant


def convert_graph(graph, input_values, ctx, outputs=None, control_outputs=None,
                  ragged_outputs=False, outer=None):
  """Converts `graph` for the loop of `ctx`.

  Args:
    graph: a FuncGraph (the body, or a called function's graph).
    input_values: one `Value` per `graph.inputs`.
    ctx: the Context.
    outputs: the graph tensors wanted (default `graph.outputs`).
    control_outputs: ops to run for their effects (default `graph.control_outputs`).
    ragged_outputs: whether the caller takes ragged output Values (conditionals and loops
      do not: a ragged output raises Unvectorizable, so the whole op falls back).
    outer: for a walk of part of a body out of the walker's order (converters/
      recurrences.py), the lookup of the Values the enclosing walk has converted, which
      converters that look past their inputs see too.

  Returns:
    (list of `Value`s, one per output; list of emitted ops standing for control outputs).
  """
  outputs = list(graph.outputs if outputs is None else outputs)
  if control_outputs is None:
    control_outputs = list(getattr(graph, "control_outputs", []))
  env = {t.ref(): v for t, v in zip(graph.inputs, input_values)}
  lookup = lambda t: env[t.ref()] if t.ref() in env else (outer(t) if outer else None)
  emitted = {}
  order = graph_io.ops_in_order(outputs, control_outputs)
  overridden = [op for op in order if custom_gradients.gradient_override(op) is not None]
  read_by_gradients = custom_gradients.tensors_their_gradients_read(overridden)
  if read_by_gradients:
    order = graph_io.ops_in_order(outputs + read_by_gradients, control_outputs)
    overridden = [op for op in order if custom_gradients.gradient_override(op) is not None]
  needed = {t.ref() for op in order for t in op.inputs} | {t.ref() for t in outputs}
  for op in order:
    if all(t.ref() in env for t in op.outputs) and op.outputs:
      continue
    deps = [d for c in op.control_inputs for d in _emitted_ops(emitted.get(c))]
    with tf.control_dependencies(deps) if deps else _no_scope():
      if op.name in ctx.reductions:
        results = _convert_reduction(op, env, ctx)
      else:
        inputs = [_lookup(env, t, op) for t in op.inputs]
        results = _convert_op(op, inputs, ctx, lookup, needed)
        if op in overridden:
          results = custom_gradients.with_own_gradient(op, inputs, results, ctx, lookup,
                                                       convert_graph)
    emitted[op] = results
    if isinstance(results, tf.Operation):
      continue
    for t, v in zip(op.outputs, results):
      env[t.ref()] = v
  out_values = [_lookup(env, t, None) for t in outputs]
  if not ragged_outputs:
    for t, v in zip(outputs, out_values):
      if ragged.is_ragged(v):
        raise Unvectorizable(f"{t.name} has a different size in every iteration (ragged), "
                             "and a conditional or loop cannot carry it yet")
  effects = [d for op in control_outputs for d in _emitted_ops(emitted.get(op))]
  return out_values, effects


def output_flags(graph, input_flags, ctx):
  """Which outputs of `graph` would be stacked, given which inputs are; emits nothing."""
  return [v.stacked for v in dry_run(graph, input_flags, ctx)]


# An input flag of `dry_run`: the input is ragged (its placeholder too).
RAGGED = "ragged"


def dry_run(graph, input_flags, ctx, outputs=None, like=None):
  """The output Values of `graph` (or of `outputs`, tensors of it) converted in a scratch
  graph (read flags and shapes only). A flag is True (stacked), False or RAGGED. `like`: the
  Values that will feed the inputs, whose lists tell element types the inputs may lack.

  Converts `graph` once, on placeholders shaped like its inputs (with a loop axis where
  stacked). Control flow uses it to decide the stackedness of branch outputs and loop
  variables before it emits anything.
  """
  scratch = func_graph_module.FuncGraph("vectorize_flags")
  with scratch.as_default():
    inputs = []
    for k, (t, flag) in enumerate(zip(graph.inputs, input_flags)):
      if flag is RAGGED:
        inputs.append(ragged.ragged(tf.compat.v1.placeholder(t.dtype, t.shape),
                                    tf.compat.v1.placeholder(tf.int32, [ctx.static_n])))
        continue
      payload = graph_io.optional_payload_spec(t) if t.dtype == tf.variant else None
      if payload is not None:   # an Optional, held as its value
        dtype, shape = payload
        shape = tf.TensorShape([ctx.static_n]).concatenate(shape) if flag else shape
        inputs.append(Value(tf.compat.v1.placeholder(dtype, shape), bool(flag)))
        continue
      if flag and t.dtype == tf.variant:
        inputs.append(Value(lists.placeholder(t, ctx.static_n, like and like[k].tensor,
                                              ctx.target.static_shapes), True))
        continue
      shape = tf.TensorShape([ctx.static_n]).concatenate(t.shape) if flag else t.shape
      placeholder = tf.compat.v1.placeholder(t.dtype, shape)
      if t.dtype in (tf.resource, tf.variant):
        handle_data_util.copy_handle_data(t, placeholder)
      inputs.append(Value(placeholder, flag))
    n = tf.compat.v1.placeholder(tf.int32, [])
    dry_ctx = dataclasses.replace(
        ctx, n=n, indices=tf.compat.v1.placeholder(tf.int32, [ctx.static_n]),
        fallback_allowed=True, report=Report())
    converted, _ = convert_graph(graph, inputs, dry_ctx, outputs, ragged_outputs=True)
  return converted


def _emitted_ops(results):
  """The ops that stand for a converted op in control edges: the Operation a converter
  returned, or the ops of its output tensors (looked up only where an edge needs them)."""
  if results is None:
    return []
  if isinstance(results, tf.Operation):
    return [results]
  return [v.tensor.op for v in results if hasattr(v.tensor, "op")]


class _no_scope:

  def __enter__(self):
    return None

  def __exit__(self, *args):
    return False


def _lookup(env, tensor, user):
  value = env.get(tensor.ref())
  if value is None:
    raise ConversionError(
        f"Tensor {tensor.name} (needed by {user.name if user else 'an output'}) was not "
        "converted: it comes from an op the walker cannot read, such as a placeholder.")
  return value


# Op types that must go through their converter even when all inputs are invariant:
# FakeParam (cond_v2's stand-in for an untaken branch's intermediate) yields uninitialized
# memory, which a masked conditional could otherwise mix into its lanes; a copied
# PartitionedCall would have no gradient (TensorFlow attaches it to the op it creates).
_NEVER_COPIED = frozenset(["FakeParam", "PartitionedCall", "OptionalFromValue",
                           "OptionalNone", "OptionalGetValue"])
# Ops whose output size depends on the data, which XLA (TF 2.21) compiles wrongly even
# outside any loop: a jit-compiled tf.unique gave an empty result, and tiled it crashed; a
# tf.boolean_mask (Where) result given to every iteration came back with a garbage shape
# (fuzz seed 1260067), and plain XLA code gathering from an empty one aborts the process.
_WRONG_UNDER_XLA = frozenset(["Unique", "UniqueV2", "UniqueWithCounts",
                              "UniqueWithCountsV2", "Where"])


def _convert_reduction(op, env, ctx):
  """A `pfor_config.reduce` placeholder: the reduction of its converted arguments."""
  reduction = ctx.reductions[op.name]
  ctx.report.add(op, "invariant", "pfor_config reduction")
  return [reduction.result(ctx, [_lookup(env, a, op) for a in reduction.args])]


def _convert_op(op, inputs, ctx, lookup=None, needed=None):
  """Converts one op; returns a list of Values, or an Operation for ops with no outputs.
  `needed`: the refs of the tensors that the graph's wanted outputs depend on.

  The stages: an op of invariant inputs is copied as it is (`_copied`); any other goes to
  the converter of its inputs' kind (`_dispatch`), whose results are checked and settled
  (`_check_results`: a ragged result whose shape the graph knows is stacked again); one
  that cannot convert runs in a sequential loop (`_fall_back`)."""
  if op.type == "Placeholder":
    raise ConversionError(
        f"Placeholder {op.name} in the loop body is not an input of the body; "
        "vectorize cannot feed it.")
  if (not any(v.stacked for v in inputs) and not op._is_stateful and  # pylint: disable=protected-access
      op.type not in _NEVER_COPIED and not _takes_optional_values(op, inputs)):
    return _copied(op, inputs, ctx)
  inputs = ragged.readable_inputs(op, inputs)
  converter = _dispatch(op, inputs, ctx)
  graph = tf.compat.v1.get_default_graph()
  first_emitted = len(graph.get_operations()) if _may_write(op) else None
  try:
    if converter is None:
      raise Unvectorizable(f"no converter is registered for op type {op.type}")
    results = _check_results(op, converter(OpInput(op, inputs, ctx, lookup, needed)), ctx,
                             inputs)
    outputs_stacked = not isinstance(results, tf.Operation) and any(v.stacked for v in results)
    ctx.report.add(op, "vectorized" if outputs_stacked else "invariant")
    return results
  except Unvectorizable as e:
    emitted = graph.get_operations()[first_emitted:] if first_emitted is not None else None
    return _fall_back(op, inputs, ctx, str(e), emitted)


def _copied(op, inputs, ctx):
  """An op of invariant inputs, emitted once as it is (small constants shared, integer
  shape arithmetic folded): its outputs are invariant."""
  ctx.report.add(op, "invariant")
  if op.type == "Const" and not op.control_inputs:
    shared = graph_io.copy_small_constant(op)
    if shared is not None:
      return [invariant(shared)]
  tensors = [v.tensor for v in inputs]
  constants = graph_io.folded(op, tensors)
  if constants is not None:
    return [invariant(t) for t in constants]
  if op.type in _WRONG_UNDER_XLA and ctx.target.static_shapes:
    where, way_out = ctx.target.cause
    raise ConversionError(
        f"Cannot vectorize op {op.name!r} of type {op.type}{user_location(op)} {where}: "
        "its output's size depends on the data, and XLA computes such values wrongly (an "
        f"empty result, a garbage shape) or crashes. To fix: {way_out}, or compute it "
        "outside the compiled function.")
  new_op = graph_io.copy_op(op, tensors)
  return [invariant(t) for t in new_op.outputs] if new_op.outputs else new_op


def _fall_back(op, inputs, ctx, reason, emitted):
  """The op run in a sequential loop over the iterations, where the context allows it and
  the converter that refused (`reason`) wrote nothing (`emitted`: what it emitted, where it
  may write variables) and the op shares no state the loop would order."""
  if not ctx.fallback_allowed:
    raise ConversionError(_describe_failure(op, reason)) from None
  if emitted is not None:
    _refuse_if_it_wrote(op, tf.compat.v1.get_default_graph(), emitted, reason)
  _refuse_if_it_shares_state(op, reason)
  ctx.report.add(op, "fallback", reason)
  fallback.warn_once(op, ctx, reason)
  return fallback.run_sequentially(op, inputs, ctx)


def _dispatch(op, inputs, ctx):
  """The converter of `op` for its inputs' kind (`kinds.py`): for tensors, its own (or the
  producer of values ragged in several axes, where every use takes them); for ragged
  inputs, the table of the most specific kind; else one raising Unvectorizable that says
  why."""
  kind = kinds.dispatch_kind(inputs)
  if kind == registry.TENSOR:
    converter = ragged.multi_axis_producer(op, ctx.target) or registry.lookup(op.type)
  else:
    converter = registry.converter_of(op, kind)
  if converter is None and graph_io.is_legacy_call(op):   # op type = the function's name
    converter = registry.lookup(op_types.LEGACY_CALL, kind)
  if converter is not None or kind == registry.TENSOR:
    return converter
  k = next(k for k, v in enumerate(inputs) if ragged.is_ragged(v))

  def refuse(_):
    raise Unvectorizable(
        f"input {k} ({op.inputs[k].name}) has a different size in every iteration (ragged), "
        f"and op type {op.type} has no converter for ragged inputs")

  return refuse


def _may_write(op):
  """Whether converting `op` may emit variable writes before it finds it cannot: a stateful
  op calling functions (a conditional, loop or call whose functions have effects)."""
  return op._is_stateful and any(graph_io.function_names(op))  # pylint: disable=protected-access


def _refuse_if_it_shares_state(op, reason):
  """An op with state that falls back runs for every iteration after the vectorized ops
  before it ran for all: where other ops of the body read what it changes, or change what
  it reads (a lookup table's insert beside its lookups), they would see the wrong order, so
  the whole body runs as a loop."""
  if not op._is_stateful or whole_body_loop.probing():  # pylint: disable=protected-access
    return
  for t in op.inputs:
    if t.dtype != tf.resource:
      continue
    users = whole_body_loop.resource_users(t)
    if len(users) > 1 and whole_body_loop.reads_and_writes(users):
      raise whole_body_loop.StatefulRefusal(
          f"Cannot vectorize {op.type} {op.name!r}{user_location(op)}: {reason}; and other "
          "ops of the body use its variable or table, so running it alone in a sequential "
          "loop would change the order in which they see it.")


def _refuse_if_it_wrote(op, graph, emitted, reason):
  """A converter that gave up after emitting variable writes leaves ops that would run
  beside the op's fallback, applying the writes twice: the whole body runs as a loop then."""
  if whole_body_loop.writes_variables(graph, emitted) and not whole_body_loop.probing():
    raise whole_body_loop.StatefulRefusal(
        f"Cannot vectorize {op.type} {op.name!r}{user_location(op)}: {reason}; and its "
        "branches or body write variables, so running it alone in a sequential loop would "
        "apply their writes twice.")


def _takes_optional_values(op, inputs):
  """Whether an input the op declares a variant is a tensor of another dtype: an Optional
  held as its value (control_flow/optionals.py), from which the op's variant outputs are
  derived the same way (a gradient's zeros for it)."""
  return any(t.dtype == tf.variant and isinstance(v.tensor, tf.Tensor) and
             v.tensor.dtype != tf.variant for t, v in zip(op.inputs, inputs))


def _check_results(op, results, ctx, inputs=()):
  """Checks a converter's results against the op: count, dtypes; sets static shapes. A
  variant output may be an Optional held as its value where the graph shows one
  (`graph_io.carries_optional`) or the op takes one (among `inputs`)."""
  if isinstance(results, tf.Operation):
    if op.outputs:
      raise ConversionError(f"Converter for {op.type} returned an Operation for {op.name}, "
                            "which has outputs.")
    return results
  if isinstance(results, Value):
    results = [results]
  results = list(results)
  if len(results) != len(op.outputs):
    raise ConversionError(
        f"Converter for {op.type} returned {len(results)} values for {op.name}, which has "
        f"{len(op.outputs)} outputs.")
  for k, (t, v) in enumerate(zip(op.outputs, results)):
    if not isinstance(v, Value):
      raise ConversionError(f"Converter for {op.type} returned {type(v).__name__} for output "
                            f"{k}, not a Value.")
    if (t.dtype == tf.variant and isinstance(v.tensor, tf.Tensor) and
        v.tensor.dtype != tf.variant and
        (_takes_optional_values(op, inputs) or graph_io.carries_optional(t))):
      continue   # an Optional held as its value (control_flow/optionals.py)
    if v.tensor.dtype != t.dtype:
      raise ConversionError(
          f"Converter for {op.type} changed the dtype of output {k} of {op.name}: "
          f"{t.dtype.name} became {v.tensor.dtype.name}.")
    if isinstance(v.tensor, lists.DenseList):
      _set_loop_length(v.tensor, ctx.static_n)
      continue
    if isinstance(v.tensor, lists.UniformList):
      continue
    if ragged.is_ragged(v):
      results[k] = ragged.settle(v, t.shape, ctx)
      continue
    if not isinstance(v.tensor, tf.Tensor) or hasattr(v.tensor, "numpy"):
      continue
    declared = _declared_shape(op, k)
    expected = tf.TensorShape([ctx.static_n]).concatenate(declared) if v.stacked else declared
    if not v.tensor.shape.is_compatible_with(expected):
      raise ConversionError(
          f"Converter for {op.type} produced shape {v.tensor.shape} for output {k} of "
          f"{op.name}; expected {expected} ({'stacked' if v.stacked else 'invariant'}).")
    if not v.tensor.shape.is_fully_defined():   # else it knows all that `expected` says
      v.tensor.set_shape(expected)
  return results


def _declared_shape(op, k):
  """Output k's static shape; for a conditional, the most general of the branches that
  compute it. TF declares a gradient intermediate with the shape of the FakeParam standing
  in for it in a branch that does not compute it (`[0]` where the other branch slices one
  element per iteration). A call passing on a conditional's output (the forward function TF
  wraps around a conditional for an outer tape) inherits that shape, seen through."""
  declared = op.outputs[k].shape
  if op.type in ("PartitionedCall", "StatefulPartitionedCall"):
    inner = graph_io.through_identities(graph_io.function_graph(op, "f").outputs[k])
    if inner.op.type in op_types.CONDITIONALS:
      return _declared_shape(inner.op, inner.value_index)
    return declared
  if op.type not in op_types.CONDITIONALS:
    return declared
  outputs = [g.outputs[k] for g in graph_io.branch_graphs(op)]
  computed = [t.shape for t in outputs if t.op.type != "FakeParam"]
  if not computed or len(computed) == len(outputs):
    return declared
  general = computed[0]
  for shape in computed[1:]:
    general = general.most_specific_compatible_shape(shape)
  return general


def _set_loop_length(dense, static_n):
  """Sets the loop axis of a stacked TensorList's tensors to n where n is static (a loop
  carrying the list needs it to match its initial value)."""
  for t in dense:
    if static_n is not None and t.shape.rank:
      t.set_shape(tf.TensorShape([static_n]).concatenate(t.shape[1:]))


def _describe_failure(op, reason):
  where = user_location(op)
  return (
      f"Cannot vectorize op {op.name!r} of type {op.type}{where}: {reason}. "
      "Fallback to a sequential loop is disabled (fallback_to_while_loop=False). To fix: "
      "enable the fallback, rewrite the body to avoid this op, or register a converter "
      "with vectorize.registry.register.")
