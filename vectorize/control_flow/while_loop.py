"""While / StatelessWhile: loops inside the loop body.

First, which loop variables are stacked is decided by a bounded fixpoint, before anything is
emitted: start from the inputs' flags; OR in the flags of the converted body's outputs; and
when the condition is stacked (iterations stop at different trips), every variable the body
changes becomes stacked too (its final value depends on the trip count). Variables the body
passes through unchanged (captured tensors, `maximum_iterations`) stay invariant.

Invariant condition: one `tf.while_loop` over the converted body; the loop state is the
variables at their flags' shapes.

Stacked condition, dynamic shapes: a loop over the *active set*. The state is (positions of
the iterations still running, `[m]`; their variables, stacked ones `[m] + shape`; one
accumulator per stacked variable, `[n] + shape`, holding final values). Each step evaluates
the condition for the active iterations, scatters the finished ones' variables into the
accumulators, drops them, and runs the body for the rest; the loop ends when none is left.

Stacked condition, static shapes (XLA): the state is (an active mask `[n]`, the variables at
`[n] + shape`). Each step runs the body on all lanes, lanes that finished borrowing the
variables of an active lane (valid inputs, so no NaN or Inf leaks into values or gradients),
keeps the old values where a lane is inactive, and re-evaluates the condition.
"""

import tensorflow as tf

from vectorize import graph_io
from vectorize import lists
from vectorize import walker
from vectorize.errors import ConversionError
from vectorize.registry import register
from vectorize.values import Value, gather_rows, select_lanes, stack, stacked


@register("While", "StatelessWhile")
def _convert_while(op):
  cond_graph = graph_io.function_graph(op.op, "cond")
  body_graph = graph_io.function_graph(op.op, "body")
  _check_static_list_growth(op, body_graph)
  flags, cond_stacked, element_shapes = _loop_flags(op, cond_graph, body_graph)
  ctx = op.ctx
  init = [Value(_initial(v, ctx, shape) if f else v.tensor, f)
          for v, f, shape in zip(op.inputs, flags, element_shapes)]
  if not cond_stacked:
    return _invariant_loop(op, cond_graph, body_graph, init, flags)
  carries_lists = any(f and t.dtype == tf.variant for t, f in zip(op.op.inputs, flags))
  if ctx.static_shapes or carries_lists:
    return _masked_loop(op, cond_graph, body_graph, init, flags)
  return _active_set_loop(op, cond_graph, body_graph, init, flags)


def _loop_flags(op, cond_graph, body_graph):
  """The stacked flag of each loop variable, whether the condition is stacked, and the
  element shape of each stacked TensorList variable as the body writes it (or None)."""
  passthrough = [_is_passthrough(body_graph, k) for k in range(len(op.inputs))]
  flags = [v.stacked for v in op.inputs]
  for _ in range(len(flags) + 1):
    body_outputs = walker.dry_run(body_graph, flags, op.ctx)
    cond_stacked = walker.output_flags(cond_graph, flags, op.ctx)[0]
    new = [f or v.stacked or (cond_stacked and not p)
           for f, v, p in zip(flags, body_outputs, passthrough)]
    if new == flags:
      element_shapes = [v.tensor.buffer.shape[2:] if isinstance(v.tensor, lists.DenseList)
                        else None for v in body_outputs]
      return flags, cond_stacked, element_shapes
    flags = new
  raise AssertionError("the stackedness fixpoint of a while loop did not converge")


def _check_static_list_growth(op, body_graph):
  """Under XLA, a loop that grows a list of unbounded size (a loop's gradient accumulating
  one value per step) cannot compile: a ConversionError naming the loop and the fix, as
  TensorFlow asks of its own loops, instead of a shape error deep in the emitted graph."""
  if not op.ctx.static_shapes or _maximum_iterations(op, body_graph) is not None:
    return
  for k, t in enumerate(op.op.inputs):
    if t.dtype != tf.variant or _is_passthrough(body_graph, k):
      continue
    while t.op.type == "Identity":
      t = t.op.inputs[0]
    if t.op.type != "EmptyTensorList":
      continue
    limit = tf.get_static_value(t.op.inputs[1])
    if limit is not None and limit < 0:
      raise ConversionError(
          f"Cannot vectorize the while loop {op.op.name!r}{walker.user_location(op.op)} "
          "under XLA: it grows a TensorList of unbounded size (as the gradient of a loop "
          "does, storing one value per step) and has no maximum_iterations, so XLA cannot "
          "give it a static shape. To fix: pass maximum_iterations to tf.while_loop, as "
          "TensorFlow requires for differentiating a loop under XLA.")


def _initial(value, ctx, element_shape):
  """The initial value of a stacked loop variable (an invariant one tiled)."""
  if value.stacked:
    return value.tensor
  if value.tensor.dtype == tf.variant:
    return lists.to_dense(value.tensor, ctx.n, element_shape)
  return stack(value, ctx.n)


def _maximum_iterations(op, body_graph):
  """The loop's `maximum_iterations` (while_v2 carries it as variable 1), or None.

  Passed on to the emitted loop: XLA needs it to differentiate a loop.
  """
  if len(op.inputs) < 2 or op.is_stacked(1) or not _is_passthrough(body_graph, 1):
    return None
  if "maximum_iterations" not in body_graph.inputs[1].op.name:
    return None
  limit = op.invariant(1)
  static = tf.get_static_value(limit)
  if static is not None and static < 0:
    return None
  return limit


def _is_passthrough(body_graph, k):
  """Whether body output k is body input k, possibly through Identity ops."""
  t = body_graph.outputs[k]
  while t.op.type == "Identity":
    t = t.op.inputs[0]
  return t is body_graph.inputs[k]


def _shape_invariant(op, k, value, flag):
  """The shape invariant of loop variable k, held as `value` (a tensor or DenseList)."""
  ctx = op.ctx
  if isinstance(value, lists.DenseList):
    return lists.shape_invariant(value, ctx.static_n, ctx.static_shapes)
  shape = op.op.outputs[k].shape
  return tf.TensorShape([ctx.static_n]).concatenate(shape) if flag else shape


def _run_body(body_graph, values, flags, ctx):
  """The converted body's outputs, stacked ones tiled as `flags` demand."""
  outputs, _ = walker.convert_graph(body_graph, values, ctx)
  return [stack(v, ctx.n) if f else v.tensor for v, f in zip(outputs, flags)]


def _invariant_loop(op, cond_graph, body_graph, init, flags):
  ctx = op.ctx

  def cond(*state):
    values = [Value(t, f) for t, f in zip(state, flags)]
    return walker.convert_graph(cond_graph, values, ctx)[0][0].tensor

  def body(*state):
    return _run_body(body_graph, [Value(t, f) for t, f in zip(state, flags)], flags, ctx)

  results = tf.while_loop(
      cond, body, [v.tensor for v in init],
      shape_invariants=[_shape_invariant(op, k, v.tensor, f) for k, (v, f) in
                        enumerate(zip(init, flags))],
      parallel_iterations=op.attr("parallel_iterations"),
      maximum_iterations=_maximum_iterations(op, body_graph))
  return [Value(t, f) for t, f in zip(results, flags)]


def _active_set_loop(op, cond_graph, body_graph, init, flags):
  ctx = op.ctx
  # A stacked variable the body passes through (a sequence the loop reads) stays whole in
  # the state, all n rows, and is gathered to the active positions where it is read (so a
  # read of one step's row is one small gather). Only the variables the body changes shrink
  # with the active set and need accumulators for their final values.
  fixed = [f and _is_passthrough(body_graph, k) for k, f in enumerate(flags)]
  stacked_ids = [k for k, f in enumerate(flags) if f and not fixed[k]]
  unknown_n = tf.TensorShape([None])

  def live(positions, state):
    return [Value(tf.gather(t, positions), True) if fixed[k] else Value(t, f)
            for k, (t, f) in enumerate(zip(state, flags))]

  def evaluate_cond(positions, state):
    sub_ctx = ctx.subset(positions)
    pred = walker.convert_graph(cond_graph, live(positions, state), sub_ctx)[0][0]
    return stack(pred, sub_ctx.n)

  def step(positions, state, accumulators):
    running = evaluate_cond(positions, state)
    finished = tf.where(tf.logical_not(running))[:, 0]
    finished_positions = tf.gather(positions, finished)[:, None]
    accumulators = [
        tf.tensor_scatter_nd_update(acc, finished_positions, tf.gather(state[k], finished))
        for acc, k in zip(accumulators, stacked_ids)]
    keep = tf.where(running)[:, 0]
    positions = tf.gather(positions, keep)
    state = [tf.gather(t, keep) if f and not fixed[k] else t
             for k, (t, f) in enumerate(zip(state, flags))]
    new_state = _run_body(body_graph, live(positions, state), flags, ctx.subset(positions))
    state = [old if fixed[k] else new for k, (new, old) in enumerate(zip(new_state, state))]
    return positions, state, accumulators

  def loop_body(positions, state, accumulators):
    positions, state, accumulators = step(positions, list(state), list(accumulators))
    return positions, state, accumulators

  initial = (tf.range(ctx.n), [v.tensor for v in init], [init[k].tensor for k in stacked_ids])
  invariants = (
      unknown_n,
      [_shape_invariant(op, k, init[k].tensor, True) if fixed[k] else
       tf.TensorShape([None]).concatenate(op.op.outputs[k].shape) if f
       else op.op.outputs[k].shape for k, f in enumerate(flags)],
      [_shape_invariant(op, k, init[k].tensor, True) for k in stacked_ids])
  _, state, accumulators = tf.while_loop(
      lambda positions, *_: tf.size(positions) > 0, loop_body, initial,
      shape_invariants=invariants, parallel_iterations=op.attr("parallel_iterations"))
  finals = dict(zip(stacked_ids, accumulators))
  return [stacked(finals.get(k, init[k].tensor)) if f else Value(t, False)
          for k, (t, f) in enumerate(zip(state, flags))]


def _masked_loop(op, cond_graph, body_graph, init, flags):
  ctx = op.ctx
  lanes = tf.range(ctx.n)
  # Stacked variables the body returns unchanged (captured inputs, such as a sequence the
  # loop reads) keep their value: no select after the body, and one borrowing per step.
  fixed = [f and _is_passthrough(body_graph, k) for k, f in enumerate(flags)]

  def sources(active):
    """Inactive lanes take the variables of the first active lane."""
    first_active = tf.reduce_min(tf.where(active, lanes, ctx.n - 1))
    return tf.where(active, lanes, first_active)

  def borrowed(source, state, fixed_values=None):
    return [fixed_values[k] if fixed_values and fixed[k] else
            Value(gather_rows(t, source), True) if f else Value(t, False)
            for k, (t, f) in enumerate(zip(state, flags))]

  def evaluate_cond(source, values):
    pred = walker.convert_graph(cond_graph, values, ctx.subset(source, ctx.static_n))[0][0]
    return stack(pred, ctx.n)

  def loop_body(active, *state):
    source = sources(active)
    values = borrowed(source, state)
    new_state = _run_body(body_graph, values, flags, ctx.subset(source, ctx.static_n))
    state = [old if fixed[k] else
             select_lanes(active, new, old) if f
             else new for k, (new, old, f) in enumerate(zip(new_state, state, flags))]
    active = tf.logical_and(active, evaluate_cond(source, borrowed(source, state, values)))
    return (active,) + tuple(state)

  values = [Value(v.tensor, f) for v, f in zip(init, flags)]
  active = evaluate_cond(lanes, values)
  results = tf.while_loop(
      lambda active, *_: tf.reduce_any(active), loop_body,
      (active,) + tuple(v.tensor for v in init),
      shape_invariants=(tf.TensorShape([ctx.static_n]),) + tuple(
          _shape_invariant(op, k, v.tensor, f) for k, (v, f) in enumerate(zip(init, flags))),
      parallel_iterations=op.attr("parallel_iterations"),
      maximum_iterations=_maximum_iterations(op, body_graph))
  return [Value(t, f) for t, f in zip(results[1:], flags)]
