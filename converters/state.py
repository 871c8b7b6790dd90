"""Stateful ops on variables, assertions and printing.

The trick: a vectorized body runs each op for every iteration before the next op, while a
sequential loop runs every op of one iteration before the next iteration. The two orders
agree on a variable when

- the body only reads it: reads are loop-invariant, emitted once;
- it writes a loop-invariant value (`Assign`): written once, when n > 0; reads after that
  write, before any other write, see that value in every iteration;
- it writes a value that differs per iteration (`Assign`) that no later read sees: the
  sequential result is the last iteration's value, written once;
- it adds to it (`AssignAdd`, `AssignSub`, `ResourceScatterAdd/Sub`), commutative updates:
  the values are summed over the loop axis (or multiplied by n) and applied once, unless an
  `Assign` comes first in the body (only the last iteration's additions would survive).

A read that a write in the body precedes or follows sees a different value in each
iteration of a sequential loop. Where the writes are an affine recurrence with invariant
coefficients (`state <- state + increment`, Keras's seed generator; `m <- a*m + b_i`, moving
averages) each iteration reads the state advanced as many times as the loop would, in closed
form (converters/recurrences.py); the writes stay as above, since their per-iteration values
are then exact.

Anything else (updates that are not such a recurrence; a variable also passed to a function,
branch or loop of the body that writes it; reads of a written variable inside a branch or a
loop of the body) is a `ConversionError` naming the user's layer (name scope) and line, not a
silent wrong result. The order is read from the body graph: ops are listed in program order,
following the variable through `Identity`.

Limits: the order is checked within one function body; a variable read in one function of
the body and written in another is refused before any converter runs
(`whole_body_loop.unordered_state`: the whole body runs as a loop). Inside a
conditional or loop converted with masks (under XLA; a loop carrying a TensorArray), where
dead lanes run too, additions, assertions and prints take the live lanes only
(`ctx.live_lanes`). An `Assign` inside any conditional or loop that only some iterations
run is a `ConversionError` (with the fallback on, the whole body runs as a loop): the value
the loop leaves is the last iteration's last write.

`Assert` checks the condition of every iteration at once. `tf.print` prints what the loop
prints: each iteration's values formatted on their own (`StringFormat`, a loop over the
iterations), one line per iteration in iteration order, written by one print (inside a
converted while loop, one such print per step). TensorFlow's pfor prints iteration 0's
line only.
"""

import tensorflow as tf

from converters import recurrences
from vectorize import graph_io
from vectorize import op_types
from vectorize import ragged
from vectorize import trace
from vectorize import values
from vectorize import whole_body_loop
from vectorize.errors import Unvectorizable, user_location
from vectorize.family import run_sequential
from vectorize.registry import register
from vectorize.values import Value, invariant, stacked

_READ, _METADATA, _ASSIGN, _ADD, _CALL_READ, _OTHER = (
    "read", "metadata", "assign", "add", "call that only reads", "other")
_KINDS = {
    "ReadVariableOp": _READ,
    "ResourceGather": _READ,
    "ResourceGatherNd": _READ,
    "VariableShape": _METADATA,
    "VarIsInitializedOp": _METADATA,
    "AssignVariableOp": _ASSIGN,
    "AssignAddVariableOp": _ADD,
    "AssignSubVariableOp": _ADD,
    "ResourceScatterAdd": _ADD,
    "ResourceScatterSub": _ADD,
}
_WRITES = (_ASSIGN, _ADD, _OTHER)


# ----------------------------------------------------------------------------- ordering

def _accesses(graph, resource):
  """The ops of `graph` that take `resource` (or an Identity of it), in program order."""
  resource = graph_io.through_identities(resource)
  # Follows consumers rather than scanning the graph: a body reading many variables would
  # otherwise cost (reads x ops).
  aliases, users, frontier = {resource.ref()}, {}, [resource]
  while frontier:
    for o in frontier.pop().consumers():
      if o.graph is not graph:
        continue
      if o.type == "Identity":
        if o.outputs[0].ref() not in aliases:
          aliases.add(o.outputs[0].ref())
          frontier.append(o.outputs[0])
      else:
        users[o._id] = o  # pylint: disable=protected-access
  return [(users[k], [j for j, t in enumerate(users[k].inputs) if t.ref() in aliases])
          for k in sorted(users)]   # ids grow in creation (program) order


def _kind(o, positions):
  """How op `o` uses the variable it takes at input `positions`."""
  kind = _KINDS.get(o.type)
  if kind is not None:
    return kind
  if o.type not in op_types.CALLS:
    return _OTHER
  attrs, offset = op_types.CALLS[o.type]
  for graph in graph_io.called_graphs(o, attrs):
    for j in positions:
      if j < offset or j - offset >= len(graph.inputs):
        return _OTHER
      for inner, inner_positions in _accesses(graph, graph.inputs[j - offset]):
        if _kind(inner, inner_positions) in _WRITES:
          return _OTHER
  return _CALL_READ


def _ordered_accesses(op, i=0):
  """(kinds of the accesses to input i's variable in program order, this op's position)."""
  accesses = _accesses(op.op.graph, op.op.inputs[i])
  kinds = [(o, _kind(o, positions)) for o, positions in accesses]
  position = next(k for k, (o, _) in enumerate(kinds) if o is op.op)
  return kinds, position


def _refuse(op, reason):
  scope = op.op.name.rpartition("/")[0]
  scope = scope[:-len("/Read")] if scope.endswith("/Read") else scope   # Variable.read_value
  layer = f" in layer (name scope) {scope!r}" if scope else ""
  whole_body_loop.refuse_state(
      f"Cannot vectorize {op.type} {op.op.name!r}{layer}{user_location(op.op)}: a "
      f"stateful op cannot be vectorized when {reason}; a sequential loop would give each "
      "iteration a different value. Read or update the variable outside the loop (return "
      "per-iteration values from the body), or run the loop sequentially.")


def _refuse_assign_in_a_region(op):
  """An Assign inside a branch or loop that only some iterations run: the loop leaves the
  value of the last iteration's last write, which the region's steps (each over its live
  iterations) do not know; under masks, dead lanes would write too."""
  if op.ctx.live_lanes is not None:
    _refuse(op, "it assigns inside a conditional or loop converted with masks (under XLA, "
            "or a loop carrying a TensorArray), where lanes that do not run it compute too")
  if op.ctx.target.subset:
    _refuse(op, "it assigns inside a conditional or loop that only some iterations run, "
            "where the write the loop leaves last (the last iteration's) is not known")


def _live_only(op, value):
  """A Value's per-lane update with the dead lanes' zeroed (`ctx.live_lanes`): in a masked
  region they compute too, and the loop never applies their updates. An invariant value
  becomes stacked there."""
  live = op.ctx.live_lanes
  if live is None:
    return value
  tensor = value.tensor if value.stacked else values.stack(value, op.ctx.n)
  return stacked(values.select_lanes(live, tensor, tf.zeros_like(tensor)))


def _check_read(op):
  """Every iteration reads the same value: no write in the body, or the nearest write before
  this read is an Assign of an invariant value. Refuses otherwise."""
  reason = _why_read_differs(op)
  if reason:
    _refuse(op, reason)


def _why_read_differs(op):
  """Why iterations of a sequential loop would read different values, or None."""
  outputs = {t.ref() for t in getattr(op.op.graph, "outputs", [])}
  if not any(t.consumers() or t.ref() in outputs for t in op.op.outputs):
    return None  # nothing sees the value
  kinds, position = _ordered_accesses(op)
  writes = [(o, kind) for o, kind in kinds if kind in _WRITES]
  if not writes:
    return None
  before = [(o, kind) for o, kind in kinds[:position] if kind in _WRITES]
  if before and before[-1][1] == _ASSIGN and not _assigns_stacked(op, before[-1][0]):
    return None
  writer, _ = before[-1] if before else writes[0]
  return (f"it reads a variable that the loop body also writes ({writer.type} "
          f"{writer.name!r}) {'before' if before else 'after'} the read")


def _assigns_stacked(op, assign):
  value = op.converted(assign.inputs[1])
  return value is None or value.stacked


def _sequential_read(op, reason):
  """What each iteration of a sequential loop reads, where the body's updates of the variable
  are an affine recurrence; refuses with `reason` and why not otherwise."""
  if op.ctx.target.subset:
    _refuse(op, f"{reason}, inside a branch or loop of the body")
  kinds, position = _ordered_accesses(op)
  try:
    return recurrences.sequential_read(op, kinds, position)
  except recurrences.NotAffine as e:
    _refuse(op, f"{reason}, and its updates are not an affine recurrence with loop-invariant "
            f"coefficients: {e}")


def _check_write(op, value_stacked):
  """Refuses writes whose once-applied form differs from the sequential loop's effect.
  Reads the state before the loop first, where later reads need it: returns that read, for
  the write to wait on (a TF1 graph orders nothing by itself)."""
  kinds, position = _ordered_accesses(op)
  before = []
  if _sees_the_state_before_the_loop(kinds, position):
    before = [recurrences.initial_state(op, kinds)]
  if _KINDS[op.type] != _ADD:
    _refuse_assign_in_a_region(op)
  for o, kind in kinds:
    if kind in (_CALL_READ, _OTHER):
      _refuse(op, f"the variable it writes is also used by {o.type} {o.name!r}, whose "
              "order against the writes cannot be checked")
  if _KINDS[op.type] == _ADD:
    for o, kind in kinds[:position]:
      if kind == _ASSIGN:
        _refuse(op, f"it adds to a variable assigned earlier in the body ({o.name!r}): only "
                "the last iteration's additions would survive")
  elif value_stacked and op.ctx.target.subset:
    for o, kind in kinds[position + 1:]:
      if kind == _ASSIGN:
        break
      if kind == _READ:
        _refuse(op, f"it assigns a value that differs per iteration and {o.type} "
                f"{o.name!r} reads it back, inside a branch or loop of the body")
  return before


def _when_any_iteration(op, write):
  """Runs `write()` (which emits one op) only when n > 0; returns the operation."""
  if op.ctx.static_n is not None:
    return write() if op.ctx.static_n > 0 else tf.no_op()
  return tf.cond(op.ctx.n > 0, write, tf.no_op).op


def _times_n(op, value):
  """A loop-invariant update applied n times, as one update: none at n = 0, even of an
  infinite or NaN value (whose product with 0 is NaN)."""
  n = tf.cast(op.ctx.n, value.dtype)
  if value.dtype.is_floating or value.dtype.is_complex:
    return tf.math.multiply_no_nan(value, n)
  return value * n


# ----------------------------------------------------------------------------- reads

@register("ReadVariableOp")
def _convert_read_variable_op(op):
  """Loop-invariant (read once), or, for a variable the body updates, each iteration's
  state as a sequential loop would read it."""
  reason = _why_read_differs(op)
  if reason:
    return _sequential_read(op, reason)
  kinds, position = _ordered_accesses(op)
  if _sees_the_state_before_the_loop(kinds, position):
    return invariant(recurrences.initial_state(op, kinds))
  return invariant(op.rebuild([op.invariant(0)])[0])


def _sees_the_state_before_the_loop(kinds, position):
  """Whether the access at `position` comes no later than the variable's first write, which
  a read follows: that read's sequential value starts from the state before the loop, which
  must be read before the converted write runs."""
  written = [k for k, (_, kind) in enumerate(kinds) if kind in _WRITES]
  return (bool(written) and position <= written[0] and
          any(kind == _READ for _, kind in kinds[written[0]:]))


@register("ResourceGather")
def _convert_resource_gather(op):
  """One gather with the stacked indices; with batch dims, the loop axis moves just behind
  them in the indices (`[n, b, i] -> [b, n, i]`) and back in the result."""
  _check_read(op)
  resource, indices = op.invariant(0), op.value(1)
  if not indices.stacked:
    return invariant(op.rebuild([resource, indices.tensor])[0])
  batch_dims = op.attr("batch_dims")
  if batch_dims == 0:
    return stacked(op.rebuild([resource, indices.tensor])[0])
  r = values.rank(indices.tensor)
  to_batch = list(range(1, batch_dims + 1)) + [0] + list(range(batch_dims + 1, r))
  gathered = op.rebuild([resource, tf.transpose(indices.tensor, to_batch)])[0]
  out_rank = values.rank(gathered)
  to_front = [batch_dims] + list(range(batch_dims)) + list(range(batch_dims + 1, out_rank))
  return stacked(tf.transpose(gathered, to_front))


@ragged.register("ResourceGather")
def _convert_resource_gather_ragged(op):
  """Indices of per-iteration length (an embedding lookup of a token sequence): one gather
  of the flat indices."""
  _check_read(op)
  if op.attr("batch_dims") != 0:
    raise Unvectorizable("gather with batch_dims at indices of per-iteration size")
  rows = op.value(1).tensor
  return ragged.same_rows(op.rebuild([op.invariant(0), rows.values])[0], rows)


@register("ResourceGatherNd")
def _convert_resource_gather_nd(op):
  """The stacked indices' loop axis is one more leading dim, which gather_nd takes as is."""
  _check_read(op)
  resource, indices = op.invariant(0), op.value(1)
  return Value(op.rebuild([resource, indices.tensor])[0], indices.stacked)


@register("VariableShape", "VarIsInitializedOp")
def _convert_variable_metadata(op):
  """Loop-invariant: writes in the body keep a variable's shape and initialization."""
  return invariant(op.rebuild([op.invariant(0)])[0])


# ----------------------------------------------------------------------------- writes

@register("AssignVariableOp")
def _convert_assign_variable_op(op):
  """Writes the invariant value, or the last iteration's value, once (nothing when n = 0)."""
  value = op.value(1)
  before = _check_write(op, value.stacked)
  resource = op.invariant(0)

  def write():
    last = tf.gather(value.tensor, op.ctx.n - 1) if value.stacked else value.tensor
    with tf.control_dependencies(before):
      return op.rebuild([resource, last])

  return _when_any_iteration(op, write)


@register("AssignAddVariableOp", "AssignSubVariableOp")
def _convert_assign_add_variable_op(op):
  """Commutative: the per-iteration values summed over the loop axis (the live lanes'),
  applied once."""
  value = op.value(1)
  before = _check_write(op, value.stacked)
  value = _live_only(op, value)
  if _adds_in_the_loops_order(op, value):
    return _write_running_sum(op, value, before)
  total = tf.reduce_sum(value.tensor, axis=0) if value.stacked else _times_n(op, value.tensor)
  with tf.control_dependencies(before):
    return op.rebuild([op.invariant(0), total])


def _adds_in_the_loops_order(op, value):
  """Whether the additions are applied one after another from the variable's state (as the
  loop rounds them, and as the sequential reads see them, `recurrences.running_sums`) rather
  than summed first: floats of per-iteration values, the variable's only write. Not in a
  body another vectorization traces (a nested pfor): there the read and write would be a
  read-modify-write to the outer one, which can sum an `AssignAdd` again."""
  kinds, _ = _ordered_accesses(op)
  return (value.stacked and not trace.inside_a_traced_body() and (value.dtype.is_floating or value.dtype.is_complex)
          and sum(kind in _WRITES for _, kind in kinds) == 1)


def _write_running_sum(op, value, before):
  """Assigns the state after every iteration's addition, added in the loop's order."""
  resource, dtype = op.invariant(0), op.op.get_attr("dtype")
  increments = -value.tensor if op.type == "AssignSubVariableOp" else value.tensor
  with tf.control_dependencies(before):
    current = tf.raw_ops.ReadVariableOp(resource=resource, dtype=dtype)
    final = recurrences.running_sums(current, tf.cast(increments, dtype))[-1]
    return tf.raw_ops.AssignVariableOp(resource=resource, value=final)


@register("ResourceScatterAdd", "ResourceScatterSub")
def _convert_resource_scatter_add(op):
  """Commutative: stacked indices scatter every iteration's updates in one op (the loop axis
  is one more index dim); invariant indices take the updates summed over the loop axis.
  Dead lanes of a masked region scatter zeros."""
  indices, updates = op.value(1), op.value(2)
  before = _check_write(op, indices.stacked or updates.stacked)
  resource = op.invariant(0)
  updates = _live_only(op, updates)
  if not indices.stacked:
    total = (tf.reduce_sum(updates.tensor, axis=0) if updates.stacked
             else _times_n(op, updates.tensor))
    scattered = total
  else:
    if updates.stacked and values.rank(updates.tensor) == 1:
      raise Unvectorizable("scalar updates that differ per iteration need the variable's "
                           "shape")
    scattered = (values.stack(updates, op.ctx.n) if values.rank(updates.tensor) > 0
                 else updates.tensor)
  with tf.control_dependencies(before):
    return op.rebuild([resource, indices.tensor, scattered])


# ----------------------------------------------------------------------------- assert, print

@register("Assert")
def _convert_assert(op):
  """One assertion over every iteration's condition (none fails when n = 0); the data is
  printed stacked."""
  condition = op.value(0)
  if op.ctx.live_lanes is not None:   # a dead lane's check is not the loop's
    condition = stacked(tf.logical_or(tf.logical_not(op.ctx.live_lanes),
                                      values.stack(condition, op.ctx.n)))
  if condition.stacked:
    holds = tf.reduce_all(condition.tensor)
  else:
    holds = tf.logical_or(tf.equal(op.ctx.n, 0), condition.tensor)
  return op.rebuild([holds] + [v.tensor for v in op.inputs[1:]])


@register("PrintV2")
def _convert_print_v2(op):
  """What the loop prints: every iteration's string followed by `end`, in iteration order
  (a string the same in every iteration too, n times; a dead lane's left out), in one
  print."""
  end = tf.constant(op.attr("end"), tf.string)
  lines = tf.strings.join([values.stack(op.value(0), op.ctx.n), end])
  if op.ctx.live_lanes is not None:
    lines = tf.where(op.ctx.live_lanes, lines, "")
  return op.rebuild([tf.strings.reduce_join(lines)], attrs={"end": ""})


@register("StringFormat")
def _convert_string_format(op):
  """Each iteration's values formatted on their own, as the loop formats them (a summarized
  tensor's `...` included): a loop over the iterations."""
  return run_sequential(op)
