"""Variables the loop body updates by an affine recurrence: the sequential reads, at once.

A sequential loop running `v.assign(a * v + b_i)` (or `v.assign_add(b_i)`) gives iteration
i the variable advanced i times. With `a` the same in every iteration that has a closed form
over all iterations:

    s_i = a**i * s_0 + sum_{j < i} a**(i-1-j) * b_j

For a = 1 (Keras's seed generator: `state <- state + [0, 1]`) it is an exclusive cumulative
sum, exact in integers; moving averages (`m <- momentum * m + (1 - momentum) * mean_i`) use
the general form, equal to the loop up to float rounding. One iteration may update the
variable several times (Keras's RandomTranslation draws two seeds from one generator): the
updates compose into one affine map per iteration, and a read after the m-th update of an
iteration sees that iteration's state with the first m updates applied, which is the value
the m-th update wrote (or the running sum of increments).

The updates are read from the body graph: an `AssignVariableOp` whose value is built from
reads of the variable made since the previous update by Add, Sub, Mul, Neg and division by
values that do not read the variable, an `AssignAddVariableOp` / `AssignSubVariableOp`, or a
`ResourceScatterAdd` / `ResourceScatterSub` (a dense addition of its rows).
The writes need nothing new: with exact reads, writing the last iteration's value (or the
summed increments) once leaves what the loop leaves (converters/state.py).

The state before the loop is read where the body first touches the variable (a read or an
update), before any converted update runs (`initial_state`).

Limits: the coefficient `a` must be loop-invariant (and a scalar). The general form takes log2(n) rounds over `[n] + the variable's shape`.
"""

import tensorflow as tf

from vectorize import graph_io
from vectorize import values
from vectorize import walker
from vectorize.values import invariant, stacked

READ, ASSIGN, ADD = "read", "assign", "add"   # the kinds of converters/state.py
_SCATTERS = ("ResourceScatterAdd", "ResourceScatterSub")
_SUBTRACTIONS = ("AssignSubVariableOp", "ResourceScatterSub")
_ONE = "one"   # a coefficient known to be 1 (None stands for 0)


class NotAffine(Exception):
  """The variable's updates are not an affine recurrence the converter can solve."""


def sequential_read(op, accesses, position):
  """The Value that read `op` sees in each iteration of a sequential loop.

  Args:
    op: the OpInput of a ReadVariableOp.
    accesses: [(graph op, kind)] of the variable in program order (kinds of state.py).
    position: the read's index in `accesses`.
  """
  updates, segment_of = _updates(accesses)
  segment = segment_of[position]
  variable = accesses[0][0]
  solving = op.ctx.variables_being_solved
  if variable in solving:
    raise NotAffine("its updates and another variable's read each other (a swap or a "
                    "rotation of variables)")
  solving.add(variable)
  try:
    if segment == 0:
      value = _state_at_iteration_start(op, accesses, updates)
    else:
      value = _after_update(op, accesses, updates, segment)
  finally:
    solving.discard(variable)
  return _differentiated_as_a_read(op, value)


def _differentiated_as_a_read(op, value):
  """`value` with the gradient of a read: 1 with respect to the variable and none through
  the updates' values (a tape does not differentiate through an assignment). Adds an exact
  zero, so the value keeps its bits (an infinite one too)."""
  if not (value.dtype.is_floating or value.dtype.is_complex):   # no gradient to carry
    return value
  current = op.rebuild([op.invariant(0)])[0]
  # (x - x is NaN for an infinite x: such entries add a plain zero, with no gradient.)
  zero = tf.where(_finite(current), current - tf.stop_gradient(current),
                  tf.zeros_like(current))
  if value.stacked:
    return stacked(tf.stop_gradient(value.tensor) + zero)
  return invariant(tf.stop_gradient(value.tensor) + zero)


def _finite(x):
  if x.dtype.is_complex:
    return tf.logical_and(tf.math.is_finite(tf.math.real(x)), tf.math.is_finite(tf.math.imag(x)))
  return tf.math.is_finite(x)


def _updates(accesses):
  """([(update op, kind, read outputs since the previous update)], segment of each access)."""
  updates, reads, segment_of = [], [], []
  for o, kind in accesses:
    segment_of.append(len(updates))
    if kind == READ:
      reads.extend(o.outputs)
    elif kind in (ASSIGN, ADD):
      updates.append((o, kind, reads))
      reads = []
    elif kind != "metadata":
      raise NotAffine(f"{o.type} {o.name!r} also uses the variable")
  return updates, segment_of


def _after_update(op, accesses, updates, m):
  """The state after the m-th update of each iteration."""
  update, kind, _ = updates[m - 1]
  if kind == ASSIGN:
    return _leaf(op, update.inputs[1])
  before = (_state_at_iteration_start(op, accesses, updates) if m == 1
            else _after_update(op, accesses, updates, m - 1))
  return _binary(tf.add, before, _increment(op, update, initial_state(op, accesses)))


def _increment(op, update, start):
  """What an addition adds to the state in each iteration, at the state's shape."""
  if update.type in _SCATTERS:
    increment = _scattered(op, update, start)
  else:
    increment = _leaf(op, update.inputs[1])
  return _negate(increment) if update.type in _SUBTRACTIONS else increment


def _scattered(op, update, start):
  """A scatter-add's rows as a dense per-iteration addition: `[n] + state shape`."""
  indices, rows = _leaf(op, update.inputs[1]), _leaf(op, update.inputs[2])
  if not (indices.stacked or rows.stacked):
    rows = tf.broadcast_to(rows.tensor, tf.concat([tf.shape(indices.tensor),
                                                   tf.shape(start)[1:]], 0))
    return invariant(tf.tensor_scatter_nd_add(tf.zeros_like(start),
                                              indices.tensor[..., tf.newaxis], rows))
  n = op.ctx.n
  indices = values.stack(indices, n)
  lanes = values.expand_after_loop_axis(tf.range(n, dtype=indices.dtype),
                                        values.rank(indices) - 1)
  at = tf.stack([tf.broadcast_to(lanes, tf.shape(indices)), indices], -1)
  rows = tf.broadcast_to(values.stack(rows, n) if rows.stacked else rows.tensor,
                         tf.concat([tf.shape(indices), tf.shape(start)[1:]], 0))
  return stacked(tf.scatter_nd(at, rows, tf.concat([[n], tf.shape(start)], 0)))


def _state_at_iteration_start(op, accesses, updates):
  """s_i for every iteration i: the closed form of the composed per-iteration update."""
  start = initial_state(op, accesses)
  a, b = _ONE, None
  for update, kind, reads in updates:
    read_refs = {t.ref() for t in reads}
    all_reads = {t.ref() for o, k in accesses if k == READ for t in o.outputs}
    if kind == ADD:   # state + value, or state - value
      step_a, step_b = _addition(op, update, read_refs, all_reads, start)
    else:
      step_a, step_b = _affine(op, update.inputs[1], read_refs, all_reads)
    a, b = _mul(step_a, a), _add(_mul(step_a, b), step_b)
  if isinstance(a, values.Value) and a.stacked:
    raise NotAffine("the coefficient of its update differs per iteration")
  return _solve(op.ctx, start, a, b)


def _addition(op, update, reads, all_reads, start):
  """(a, b) of `state + increment`, the increment itself affine in the state's reads; a
  scatter's rows must not read it."""
  if update.type in _SCATTERS:
    if any(_depends_on(t, all_reads) for t in update.inputs[1:]):
      raise NotAffine(f"the rows {update.name!r} scatters are computed from its reads")
    return _ONE, _increment(op, update, start)
  a, b = _affine(op, update.inputs[1], reads, all_reads)
  if update.type in _SUBTRACTIONS:
    a, b = _negate(a), _negate(b)
  return _plus_one(a), b


def initial_state(op, accesses):
  """s_0, the variable before the loop. Read once, by whichever access before the body's
  first update converts first (reads before it are not ordered against each other; the
  update waits for them): a read converted after the converted update has run would see
  the loop's final state."""
  key = (accesses[0][0], tf.compat.v1.get_default_graph())
  starts = op.ctx.variable_starts
  if key not in starts:
    position = next(k for k, (o, _) in enumerate(accesses) if o is op.op)
    first_update = next((k for k, (_, kind) in enumerate(accesses) if kind in (ASSIGN, ADD)),
                        len(accesses))
    if position > first_update:
      raise NotAffine("no access before its first update was converted before that update")
    starts[key] = tf.raw_ops.ReadVariableOp(resource=op.invariant(0),
                                            dtype=op.op.get_attr("dtype"))
  return starts[key]


# ----------------------------------------------------------------------------- decomposition

_LINEAR = ("Add", "AddV2", "Sub")


def _affine(op, tensor, reads, all_reads):
  """(a, b) with `tensor = a * state + b` per iteration; `reads` are the state's reads."""
  if tensor.ref() in reads:
    return _ONE, None
  if not _depends_on(tensor, all_reads):
    return None, _leaf(op, tensor)
  node = tensor.op
  if node.type in ("Identity", "Snapshot"):
    return _affine(op, node.inputs[0], reads, all_reads)
  if node.type == "Neg":
    a, b = _affine(op, node.inputs[0], reads, all_reads)
    return _negate(a), _negate(b)
  if node.type in _LINEAR:
    (a0, b0), (a1, b1) = [_affine(op, t, reads, all_reads) for t in node.inputs]
    if node.type == "Sub":
      a1, b1 = _negate(a1), _negate(b1)
    return _add(a0, a1), _add(b0, b1)
  if node.type in ("Mul", "RealDiv", "Div"):
    x, y = node.inputs
    if node.type == "Mul" and not _depends_on(x, all_reads):
      x, y = y, x
    if _depends_on(y, all_reads):
      raise NotAffine(f"{node.type} {node.name!r} multiplies two values read from it")
    a, b = _affine(op, x, reads, all_reads)
    factor = _leaf(op, y)
    if node.type == "Mul":
      return _mul(a, factor), _mul(b, factor)
    return _divide(a, factor), _divide(b, factor)
  raise NotAffine(f"its new value goes through {node.type} {node.name!r}, which is not an "
                  "addition or a multiplication by a value that does not read it")


def _depends_on(tensor, refs):
  """Whether `tensor` is computed from any tensor in `refs` (within its graph)."""
  seen, stack = set(), [tensor]
  while stack:
    t = stack.pop()
    if t.ref() in refs:
      return True
    if t.op in seen:
      continue
    seen.add(t.op)
    stack.extend(t.op.inputs)
  return False


def _leaf(op, tensor):
  """The converted Value of a body tensor, converting what
  it needs now (out of the walker's order) when the walker has not reached it yet. Reuses
  every value converted so far; reads of variables may be converted early (they come before
  their variable's writes), other stateful ops may not."""
  converted = op.converted(tensor)
  if converted is not None:
    return converted
  done, this_read = [], {t.ref() for t in op.op.outputs}
  for o in graph_io.ops_in_order([tensor]):
    outputs = [(t, op.converted(t)) for t in o.outputs]
    if outputs and all(v is not None for _, v in outputs):
      done.extend(outputs)
    elif o is op.op:   # reached by a control edge only (the value was checked not to read it)
      if _depends_on(tensor, this_read):
        raise NotAffine(f"{tensor.name} depends on the value read")
      done.extend((t, invariant(op.rebuild([op.invariant(0)])[0])) for t in o.outputs)
    elif o._is_stateful and o.type != "ReadVariableOp":  # pylint: disable=protected-access
      raise NotAffine(f"its update depends on {o.type} {o.name!r}, a stateful op the loop "
                      "body runs after the read")
  known = _Converted([t for t, _ in done])
  return walker.convert_graph(known, [v for _, v in done], op.ctx, outputs=[tensor],
                              control_outputs=[], outer=op.converted)[0][0]


class _Converted:
  """A view of the body for the walker: its inputs are the tensors converted so far, so a
  walk to one more tensor converts only what is missing."""

  def __init__(self, tensors):
    self.inputs = tensors


# ----------------------------------------------------------------------------- arithmetic

def _binary(fn, x, y):
  """fn of two Values, stacked if either is."""
  if not (x.stacked or y.stacked):
    return invariant(fn(x.tensor, y.tensor))
  a, b = values.align_ranks([x, y])
  return stacked(fn(a, b))


def _negate(x):
  if x is None:
    return None
  if x is _ONE:
    raise NotAffine("its update negates the variable")  # rare; keeps _ONE a plain 1
  return values.Value(tf.negative(x.tensor), x.stacked)


def _plus_one(x):
  if x is None:
    return _ONE
  if x is _ONE:
    raise NotAffine("its update adds the variable to itself")
  return _binary(tf.add, invariant(tf.ones([], x.dtype)), x)


def _mul(x, y):
  if x is None or y is None:
    return None
  if x is _ONE:
    return y
  if y is _ONE:
    return x
  return _binary(tf.multiply, x, y)


def _divide(x, y):
  if x is None:
    return None
  if x is _ONE:
    return _binary(tf.math.divide, invariant(tf.ones([], y.dtype)), y)
  return _binary(tf.math.divide, x, y)


def _add(x, y):
  if x is None:
    return y
  if y is None:
    return x
  if x is _ONE or y is _ONE:
    raise NotAffine("its update adds the variable to itself")
  return _binary(tf.add, x, y)


# ----------------------------------------------------------------------------- closed form

def _solve(ctx, start, a, b):
  """s_i = a**i * s_0 + sum_{j<i} a**(i-1-j) * b_j for i in range(n), as a Value."""
  if a is _ONE and b is None:
    return invariant(start)
  if start.shape.rank is None:
    raise NotAffine("the variable's rank is not known")
  n, dtype = ctx.n, start.dtype
  shape = values.dynamic_shape(start)
  full = values.shape_vector([n] + list(shape) if isinstance(shape, list) else
                             tf.concat([tf.reshape(n, [1]), shape], 0))
  steps = tf.range(n)
  if b is None:
    b_all = tf.zeros(full, dtype)
  else:
    b_all = values.stack(_as_state(b, start), n)
    b_all = values.expand_after_loop_axis(b_all, start.shape.rank + 1 - values.rank(b_all))
    b_all = tf.broadcast_to(b_all, full)
  if a is _ONE:   # a cumulative sum from the start: the loop's additions, in its order
    return stacked(running_sums(start, b_all)[:n])
  if a is None:   # each iteration overwrites: s_i = b_{i-1}
    return stacked(tf.concat([start[tf.newaxis], b_all], 0)[:n])
  coefficient = tf.cast(a.tensor, dtype)
  if coefficient.shape.rank != 0:
    raise NotAffine("its update multiplies it by a tensor, not a scalar")
  rank = start.shape.rank
  powers = tf.pow(coefficient, tf.cast(steps, dtype))                 # a**i
  carried = _decayed_prefix_sums(b_all, coefficient, steps, ctx)       # sum_{j<=i} a**(i-j) b_j
  carried = tf.concat([tf.zeros_like(b_all[:1]), carried], 0)[:n]      # exclusive: j < i
  return stacked(values.expand_after_loop_axis(powers, rank) * start + carried)


def running_sums(start, increments):
  """`[start, start + b_0, (start + b_0) + b_1, ...]` (n + 1 rows): added in the loop's
  order, so floats round as the loop's do (a CPU cumulative sum is sequential)."""
  return tf.cumsum(tf.concat([start[tf.newaxis], increments], 0), axis=0)


def _decayed_prefix_sums(b, a, steps, ctx):
  """`c_i = sum_{j<=i} a**(i-j) b_j` along axis 0 by doubling (log2 n rounds of
  `c_i += a**k c_{i-k}`, k = 1, 2, 4, ...): shapes stay `[n] + s`, as XLA needs."""
  mask_shape = lambda t: values.expand_after_loop_axis(t, b.shape.rank - 1)

  def one_round(c, power, shift):
    # A select, not a product with the mask: 0 * inf is NaN (fuzz seed 3630445).
    earlier = tf.where(mask_shape(steps >= shift), tf.roll(c, shift, axis=0),
                       tf.zeros_like(c))
    return c + power * earlier, power * power, shift * 2

  c, power, shift = b, a, tf.constant(1)
  if ctx.static_n is not None:
    for _ in range(max(ctx.static_n - 1, 0).bit_length()):
      c, power, shift = one_round(c, power, shift)
    return c
  return tf.while_loop(lambda c, power, shift: shift < ctx.n, one_round, (c, power, shift))[0]


def _as_state(value, start):
  """A Value cast to the state's dtype (the composed coefficients keep it already)."""
  if value.dtype == start.dtype:
    return value
  return values.Value(tf.cast(value.tensor, start.dtype), value.stacked)
