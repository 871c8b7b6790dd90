"""While / StatelessWhile: loops inside the loop body.

First, which loop variables are stacked is decided by a bounded fixpoint, before anything is
emitted: start from the inputs' flags; OR in the flags of the converted body's outputs; and
when the condition is stacked (iterations stop at different trips), every variable the body
changes becomes stacked too (its final value depends on the trip count). Variables the body
passes through unchanged (captured tensors, `maximum_iterations`) stay invariant.

Invariant condition: one `tf.while_loop` over the converted body; the loop state is the
variables at their flags' shapes.

Stacked condition: one loop over the *active set* (`active_set.py`). The condition is
evaluated for every iteration and those that fail leave the set; then each step runs the
body on the live iterations, keeps its values, re-evaluates the condition on them and drops
those that finished; the loop ends when none is left. Partitioned (dynamic shapes): the
state is (positions of the live iterations, `[m]`; the variables, the stacked ones the body
changes at `[m] + shape`; one accumulator per such variable, `[n] + shape`, into which the
finished iterations' values are scattered). Masked (static shapes, XLA; and wherever a
stacked TensorList is carried): the state is (a mask `[n]`, the variables at `[n] + shape`);
the body runs on all lanes, finished ones borrowing the variables of a live lane (valid
inputs, so no NaN or Inf leaks into values or gradients), and finished lanes keep their
old values.

Ragged variables (`_RaggedVariables`) are invariant to both strategies: one the body only
reads (a sequence a recurrence steps through) stays outside the state and each step gets a
view of its live iterations; one the body changes without resizing it (that sequence's
gradient, in the loop's gradient) is held as its flat values at every iteration, each step
writing back its live iterations' rows.
"""

import dataclasses

import tensorflow as tf
from tensorflow.python.ops import list_ops

from vectorize import graph_io
from vectorize import indexing
from vectorize import lists
from vectorize import ragged
from vectorize import walker
from vectorize import whole_body_loop
from vectorize.errors import ConversionError, Unvectorizable, user_location
from vectorize.registry import register
from vectorize.values import Value, stack


@register("While", "StatelessWhile")
@ragged.register("While", "StatelessWhile")
def _convert_while(op):
  cond_graph = graph_io.function_graph(op.op, "cond")
  body_graph = graph_io.function_graph(op.op, "body")
  _refuse_state_read_and_written(op, cond_graph, body_graph)
  body = _Body(body_graph, _live_outputs(op, cond_graph, body_graph))
  _check_static_list_growth(op, body)
  reads = _ragged_variables(op, body)
  flags, cond_stacked, element_shapes = _loop_flags(op, cond_graph, body, reads)
  if cond_stacked:
    _check_no_resizing(op, body, flags, reads)
  ctx = op.ctx
  flags = [f and k not in reads.values for k, f in enumerate(flags)]
  sums = {} if cond_stacked else _sums_of_products(op, cond_graph, body, flags, reads)
  # (a sum's initial value is added once after the loop, as it is: not tiled)
  init = [v if k in sums else Value(_initial(v, ctx, shape) if f else v.tensor, f)
          for k, (v, f, shape) in enumerate(zip(op.inputs, flags, element_shapes))]
  for k in reads.values:
    init[k] = Value(reads.initial_state(op, k), False)
  if not cond_stacked:
    init = _uniform_lists(op, body, init, flags, reads)
    results = _invariant_loop(op, cond_graph, body, init, flags, reads, sums)
  else:
    init = [Value(lists.as_dense(v.tensor), v.stacked) for v in init]
    # Per-iteration TensorLists (DenseLists) grow at each lane's own pace: they are kept
    # at all n lanes, which only the masked strategy does.
    carries_lists = any(f and t.dtype == tf.variant for t, f in zip(op.op.inputs, flags))
    loop_ctx = (dataclasses.replace(ctx, target=ctx.target.running_masked())
                if carries_lists else ctx)
    results = _stacked_loop(op, loop_ctx, cond_graph, body, init, flags, reads)
  return reads.finals(results)


class _RaggedVariables:
  """The loop variables of a per-iteration size (ragged). One the body only reads (a
  sequence the loop steps through) stays out of the loop's state: each step takes the
  iterations it runs from the value outside (`ragged.take_iterations`). One the body
  changes keeping each iteration's size (a loop gradient's gradient of such a sequence) is
  held in the state as its flat values at every iteration; each step takes its iterations'
  rows and writes back the rows of those still live. Both are invariant to the strategies.
  """

  def __init__(self, values, changing):
    self.values = values        # {loop variable index: ragged Value entering the loop}
    self.changing = changing    # the indices of those the body changes

  def initial_state(self, op, k):
    if k in self.changing:
      return self.values[k].tensor.values
    shape = op.op.outputs[k].shape     # an empty stand-in
    dims = [0] if shape.rank is None else [0 if d is None else d for d in shape.as_list()]
    return tf.zeros(dims, op.op.outputs[k].dtype)

  def _whole(self, k, state):
    if k in self.changing:
      return ragged.same_rows(state[k], self.values[k].tensor)
    return self.values[k]

  def at(self, state, rows=None):
    """{k: ragged variable k at the iterations `rows` (all where None)}, from the loop's
    state tensors `state`; a view of those the body only reads."""
    return {k: self._whole(k, state) if rows is None else
            ragged.take_iterations(self._whole(k, state), rows, view=k not in self.changing)
            for k in self.values}

  def into(self, values, taken):
    """`values` with the ragged variables `taken` (`at`)."""
    values = list(values)
    for k, v in taken.items():
      values[k] = v
    return values

  def written(self, k, state_tensor, new, lanes=None, iterations=None):
    """Variable k's state after a step that gave it `new` at its lanes: the rows of
    `lanes` (all where None) written at `iterations`' rows of the flat values."""
    layout = self.values[k].tensor
    if not ragged.is_ragged(new) or ragged.is_multi_axis(new):
      raise Unvectorizable(f"loop variable {k} has a different size in every iteration "
                           "(ragged) and the loop gives it another form")
    if lanes is not None:
      new = ragged.take_iterations(new, lanes)
    want = layout.row_lengths if iterations is None else tf.gather(layout.row_lengths,
                                                                     iterations)
    rows = new.tensor
    checks = [] if rows.row_lengths is want else [tf.debugging.Assert(
        tf.reduce_all(tf.equal(rows.row_lengths, want)),
        [f"vectorize: loop variable {k} changes its size inside the loop"])]
    with tf.control_dependencies(checks):
      if iterations is None:
        return tf.identity(rows.values)
      at = tf.gather(layout.row_starts, iterations)
      flat = tf.gather(at, rows.row_ids) + rows.positions
      return indexing.tensor_scatter_nd_update(state_tensor, flat[:, None], rows.values)

  def finals(self, results):
    return [self._whole(k, [v.tensor for v in results]) if k in self.values else v
            for k, v in enumerate(results)]


def _ragged_variables(op, body):
  ragged_inputs = {k: v for k, v in enumerate(op.inputs) if ragged.is_ragged(v)}
  for k in ragged_inputs:
    if ragged.is_multi_axis(ragged_inputs[k]):
      raise Unvectorizable(f"loop variable {k} differs per iteration in several axes")
  return _RaggedVariables(ragged_inputs,
                          {k for k in ragged_inputs if not body.passes_through(k)})


class _Body:
  """The loop body's graph and the outputs converted for it (`_live_outputs`)."""

  def __init__(self, graph, outputs):
    self.graph = graph
    self.outputs = outputs

  def passes_through(self, k):
    """Whether body output k is body input k, possibly through Identity ops."""
    return graph_io.through_identities(self.outputs[k]) is self.graph.inputs[k]


def _refuse_state_read_and_written(op, cond_graph, body_graph):
  """A loop whose steps read a variable (or a table) they also change: vectorized, step k
  of every iteration runs before step k + 1 of any, so a read sees the other iterations'
  steps, where the sequential loop reads its own iteration's (a counter read after its
  assign_add, a Keras seed generator drawing in the loop). The whole body runs as a loop.
  (A probe of which outputs are ragged converts the loop anyway: its sizes are right.)"""
  if whole_body_loop.probing():
    return
  for k, t in enumerate(op.op.inputs):
    if t.dtype != tf.resource or k >= len(body_graph.inputs):
      continue
    users = (whole_body_loop.resource_users(cond_graph.inputs[k]) +
             whole_body_loop.resource_users(body_graph.inputs[k]))
    if whole_body_loop.reads_and_writes(users):
      raise whole_body_loop.StatefulRefusal(
          f"Cannot vectorize the tf.while_loop {op.op.name!r}{user_location(op.op)}: "
          f"its steps read a variable or table that they also change ({t.name}); vectorized, "
          "each step of every iteration would run before the next step of any, so a read "
          "would see the other iterations' steps. Read or update it outside the loop, or "
          "run the loop sequentially.")


def _live_outputs(op, cond_graph, body_graph):
  """The body's outputs, each dead loop variable's replaced by its input (passed through).

  A variable is dead when nothing reads it: not the body's callers (its output is unused),
  not the condition, and in the body nothing but its own next value (a TensorArray written
  in the loop and never read). XLA's own loop leaves such a variable out; updating it could
  only fail (a dynamic-size array has no room under static shapes).
  """
  outputs = list(body_graph.outputs)
  cond_reads = _reads(cond_graph.outputs, ())
  dead = {k for k in range(len(outputs))
          if not op.output_used(k) and cond_graph.inputs[k].ref() not in cond_reads}
  while True:
    live = [t for k, t in enumerate(outputs) if k not in dead]
    reads = _reads(live, getattr(body_graph, "control_outputs", []))
    still = {k for k in dead if body_graph.inputs[k].ref() not in reads}
    if still == dead:
      return [body_graph.inputs[k] if k in dead else t for k, t in enumerate(outputs)]
    dead = still


def _reads(outputs, control_outputs):
  """The refs of the tensors that `outputs` and `control_outputs` depend on."""
  ops = graph_io.ops_in_order(outputs, control_outputs)
  return {t.ref() for o in ops for t in o.inputs} | {t.ref() for t in outputs}


def _loop_flags(op, cond_graph, body, reads):
  """The stacked flag of each loop variable, whether the condition is stacked, and the
  element shape of each stacked TensorList variable as the body writes it (or None)."""
  passthrough = [body.passes_through(k) for k in range(len(op.inputs))]
  flags = [walker.RAGGED if k in reads.values else v.stacked for k, v in enumerate(op.inputs)]
  for _ in range(len(flags) + 1):
    body_outputs = walker.dry_run(body.graph, flags, op.ctx, body.outputs, op.inputs)
    cond_stacked = walker.output_flags(cond_graph, flags, op.ctx)[0]
    new = [f or v.stacked or (cond_stacked and not p)
           for f, v, p in zip(flags, body_outputs, passthrough)]
    if new == flags:
      element_shapes = [lists.as_dense(v.tensor).buffer.shape[2:]
                        if isinstance(v.tensor, lists.DenseList) else
                        v.tensor.element_shape if isinstance(v.tensor, lists.UniformList)
                        else None for v in body_outputs]
      return flags, cond_stacked, element_shapes
    flags = new
  raise AssertionError("the stackedness fixpoint of a while loop did not converge")


def _check_static_list_growth(op, body):
  """Under XLA, a loop that grows a list of unbounded size (a loop's gradient accumulating
  one value per step) cannot compile: a ConversionError naming the loop and the fix, as
  TensorFlow asks of its own loops, instead of a shape error deep in the emitted graph."""
  if not op.ctx.target.static_shapes or _maximum_iterations(op, body) is not None:
    return
  for k, t in enumerate(op.op.inputs):
    if t.dtype != tf.variant or body.passes_through(k):
      continue
    t = graph_io.through_identities(t)
    if t.op.type != "EmptyTensorList":
      continue
    limit = tf.get_static_value(t.op.inputs[1])
    if limit is not None and limit < 0:
      raise ConversionError(
          f"Cannot vectorize the while loop {op.op.name!r}{user_location(op.op)} "
          "under XLA: it grows a TensorList of unbounded size (as the gradient of a loop "
          "does, storing one value per step) and has no maximum_iterations, so XLA cannot "
          "give it a static shape. To fix: pass maximum_iterations to tf.while_loop, as "
          "TensorFlow requires for differentiating a loop under XLA.")


def _check_no_resizing(op, body, flags, reads):
  """Refuses a loop of per-iteration trips whose body may resize a variable: one whose
  shape invariant leaves out a size its initial value has (a sequence grown by `tf.concat`,
  shape invariant `[None, 3]`). Each iteration would end at a size of its own (a ragged
  value, which the loop's state cannot hold), where the stacked state has one size for all
  lanes."""
  for k, t in enumerate(op.op.inputs):
    if not flags[k] or k in reads.values or t.dtype == tf.variant or body.passes_through(k):
      continue
    initial, relaxed = t.shape, body.graph.inputs[k].shape
    if relaxed.rank is not None and initial.rank == relaxed.rank and all(
        r is not None or i is None for i, r in zip(initial.as_list(), relaxed.as_list())):
      continue
    raise Unvectorizable(
        f"a variable of the while loop has the shape invariant {relaxed} (its initial "
        f"value: {initial}), and the loop runs a number of trips of its own in each "
        "iteration: it would end at a size of its own in each iteration, which a loop cannot "
        "carry. To fix: give the variable a fixed size (pad it to a bound), or write the "
        "steps into a TensorArray")


def _initial(value, ctx, element_shape):
  """The initial value of a stacked loop variable (an invariant one tiled)."""
  if value.stacked:
    return value.tensor
  if value.tensor.dtype == tf.variant:
    return lists.to_dense(value.tensor, ctx.n, element_shape)
  return stack(value, ctx.n)


def _uniform_lists(op, body, init, flags, reads):
  """`init` with the stacked TensorList variables of a loop that every iteration runs the
  same trips of held as UniformLists (written in place at each step) where the body keeps
  each one a UniformList: an invariant list entering the loop is made one, a DenseList
  stays. Checked on a dry run of the body, as a write at per-iteration positions (a set at
  a stacked index) turns a list into a DenseList, which the loop's state cannot change to;
  those stay DenseLists."""
  candidates = {k for k, (v, f) in enumerate(zip(init, flags))
                if f and v.tensor.dtype == tf.variant} if lists.uniform_here(op.ctx) \
      else set()
  init = list(init)
  dense = list(init)
  for k in list(candidates):
    source = op.inputs[k]
    if isinstance(source.tensor, lists.UniformList):
      init[k] = source
      continue
    made = None if source.stacked else lists.uniform(
        source.tensor, op.ctx.n, lists.as_dense(init[k].tensor).buffer.shape[2:])
    if made is None:
      candidates.discard(k)
    else:
      init[k] = Value(made, True)
  while candidates:
    dry_flags = [walker.RAGGED if k in reads.values else f for k, f in enumerate(flags)]
    outputs = walker.dry_run(body.graph, dry_flags, op.ctx, body.outputs, init)
    kept = {k for k in candidates if isinstance(outputs[k].tensor, lists.UniformList)}
    if kept == candidates:
      break
    for k in candidates - kept:
      init[k] = Value(lists.as_dense(dense[k].tensor), True)
    candidates = kept
  return [v if k in candidates or not isinstance(v.tensor, lists.UniformList) else
          Value(lists.as_dense(v.tensor), True) for k, v in enumerate(init)]


def _maximum_iterations(op, body):
  """The loop's `maximum_iterations` (while_v2 carries it as variable 1; a gradient loop,
  its forward loop's), or None.

  Passed on to the emitted loop: XLA needs it to differentiate a loop.
  """
  if len(op.inputs) < 2 or op.is_stacked(1) or not body.passes_through(1):
    return None
  # while_v2's loops count their steps in variable 0 (a gradient loop carries its forward
  # loop's bound, which bounds the steps it retraces; Keras passes a Max of lengths)
  if ("maximum_iterations" not in body.graph.inputs[1].op.name and
      not op.op.inputs[0].op.name.endswith(("loop_counter", "grad_counter"))):
    return None
  limit = op.invariant(1)
  static = tf.get_static_value(limit)
  if static is not None and static < 0:
    return None
  # A bound known now as a number: while_v2 sizes a gradient's accumulators from it, which
  # XLA needs fixed (an outer tape through pfor's loop); a tensor it cannot read would
  # leave them unbounded ("XLA compilation requires a fixed tensor list size").
  return int(static) if static is not None else limit


def _shape_invariant(op, k, value, flag):
  """The shape invariant of loop variable k, held as `value` (a tensor or DenseList)."""
  ctx = op.ctx
  if isinstance(value, lists.DenseList):
    return lists.shape_invariant(value, ctx.static_n, ctx.target.static_shapes)
  if isinstance(value, lists.UniformList):
    return lists.UniformList(tf.TensorShape([]), tf.TensorShape([]))
  # A legacy loop (a `Defun` body: `tf.nn.ctc_loss`'s dense form) declares its variables'
  # entry shapes, which its body may leave less specific.
  body_output = graph_io.function_graph(op.op, "body").outputs[k].shape
  shape = op.op.outputs[k].shape.most_specific_compatible_shape(body_output)
  return tf.TensorShape([ctx.static_n]).concatenate(shape) if flag else shape


def _run_body(body, values, flags, ctx, reads, state_tensors, write, sums=None):
  """The converted body's outputs, stacked ones tiled as `flags` demand; for the ragged
  variables, the state tensors: unchanged for those it reads, `write(k, new)` for those it
  changes; for the sums of products (`sums`), their factor lists with this step's pushed."""
  sums = sums or {}
  wanted = [k for k in range(len(body.outputs))
            if (k not in reads.values or k in reads.changing) and k not in sums]
  factors = [t for k in sums for t in sums[k].factors]
  outputs, _ = walker.convert_graph(body.graph, values, ctx,
                                    [body.outputs[k] for k in wanted] + factors,
                                    ragged_outputs=True)
  outputs, factor_values = outputs[:len(wanted)], outputs[len(wanted):]
  results = list(state_tensors)
  for j, k in enumerate(sums):
    results[k] = sums[k].pushed(state_tensors[k], factor_values[2 * j:2 * j + 2], ctx,
                                step=state_tensors[0])
  for k, v in zip(wanted, outputs):
    if k in reads.values:
      results[k] = write(k, v)
    elif ragged.is_ragged(v):
      raise Unvectorizable(f"loop variable {k} becomes ragged in the loop")
    elif isinstance(state_tensors[k], lists.DenseList):
      results[k] = lists.as_dense(stack(v, ctx.n))
    else:
      results[k] = _with_static_n(stack(v, ctx.n), ctx) if flags[k] else v.tensor
  return results


def _with_static_n(tensor, ctx):
  """`tensor` with its loop axis as long as the context knows it is, as the loop's shape
  invariant says (a value tiled by a run-time n would leave it unknown)."""
  if ctx.static_n is not None and isinstance(tensor, tf.Tensor) and tensor.shape.rank:
    tensor.set_shape(tf.TensorShape([ctx.static_n]).concatenate(tensor.shape[1:]))
  return tensor


def _invariant_loop(op, cond_graph, body, init, flags, reads, sums):
  """One loop of the trips every iteration shares. A variable in `sums` (a sum of matrix
  products, `_sums_of_products`) is carried as two lists of the products' factors, pushed
  at each step, and summed by one product after the loop."""
  ctx = op.ctx

  def typed(state):
    return [lists.with_spec_of(t, v.tensor) for t, v in zip(state, init)]

  def as_values(state):
    values = [init[k] if k in sums else Value(t, f)
              for k, (t, f) in enumerate(zip(state, flags))]
    return reads.into(values, reads.at(state))

  def cond(*state):
    return walker.convert_graph(cond_graph, as_values(typed(state)), ctx)[0][0].tensor

  def step(*state):
    state = typed(state)
    return _run_body(body, as_values(state), flags, ctx, reads, state,
                     lambda k, new: reads.written(k, state[k], new), sums)

  start = [sums[k].empty_factors(ctx) if k in sums else v.tensor for k, v in enumerate(init)]
  results = graph_io.while_loop(
      cond, step, start,
      shape_invariants=[_FACTOR_LISTS if k in sums else _shape_invariant(op, k, v.tensor, f)
                        for k, (v, f) in enumerate(zip(init, flags))],
      parallel_iterations=op.attr("parallel_iterations"),
      maximum_iterations=_maximum_iterations(op, body))
  results = [sums[k].total(init[k], t, ctx) if k in sums else t
             for k, t in enumerate(typed(results))]
  return [Value(t, f) for t, f in zip(results, flags)]


_FACTOR_LISTS = (tf.TensorShape([]), tf.TensorShape([]))
SUM_OVER_STEPS = "sum_of_products_over_steps"   # the name of the one product after the loop


class _SumOfProducts:
  """A loop variable the body only adds a matrix product to (`acc + a @ b`, a weight's
  gradient accumulated by a loop's gradient, one outer product per step and iteration):
  carried as the lists of the factors a and b, so that a step writes `[n] + a.shape` and
  `[n] + b.shape` instead of reading and writing `[n] + acc.shape`; after the loop, one
  contraction over the steps gives the sum. With static shapes (XLA) the lists have the
  loop's bound of steps, reserved, each step setting its own row (rows no step sets stay
  zero and add nothing)."""

  def __init__(self, product, steps=None):
    self.product = product                    # the MatMul op of the body
    self.factors = list(product.inputs)       # a, b (body tensors)
    self.steps = steps                        # the static bound of steps, where reserved

  def _element_shape(self, t, ctx):
    return tf.concat([tf.reshape(ctx.n, [1]), tf.constant(t.shape.as_list(), tf.int32)], 0)

  def empty_factors(self, ctx):
    if self.steps is not None:
      return tuple(list_ops.tensor_list_reserve(self._element_shape(t, ctx), self.steps,
                                                t.dtype) for t in self.factors)
    return tuple(list_ops.empty_tensor_list(self._element_shape(t, ctx), t.dtype)
                 for t in self.factors)

  def pushed(self, lists_, factor_values, ctx, step):
    if self.steps is not None:
      return tuple(list_ops.tensor_list_set_item(handle, step, stack(v, ctx.n))
                   for handle, v in zip(lists_, factor_values))
    return tuple(list_ops.tensor_list_push_back(handle, stack(v, ctx.n))
                 for handle, v in zip(lists_, factor_values))

  def total(self, initial, lists_, ctx):
    """initial + sum over steps of a_t @ b_t, per iteration."""
    rows = [list_ops.tensor_list_stack(
        handle, t.dtype, element_shape=self._element_shape(t, ctx),
        num_elements=-1 if self.steps is None else self.steps)
            for handle, t in zip(lists_, self.factors)]         # [steps, n] + factor shape
    left = _steps_end_to_end(rows[0], contracted_last=not self.product.get_attr("transpose_a"))
    right = _steps_end_to_end(rows[1], contracted_last=self.product.get_attr("transpose_b"))
    total = tf.matmul(left, right, transpose_a=True, name=SUM_OVER_STEPS)
    if initial.stacked:
      return initial.tensor + total
    start = tf.get_static_value(initial.tensor)   # a gradient's accumulator starts at zero
    if start is not None and not start.any():
      return total
    return total + initial.tensor   # broadcast over the loop axis: no `[n] + shape` tile


def _steps_end_to_end(rows, contracted_last):
  """[steps, n, x, y] factors -> [n, steps * q, m], the contracted axis q (y if
  `contracted_last`, else x) laid end to end over the steps, m the kept one: the sum over
  steps is then one batch matmul (an einsum of the 4-d factors ran 2-3x slower on CPU)."""
  perm = [1, 0, 3, 2] if contracted_last else [1, 0, 2, 3]
  rows = tf.transpose(rows, perm)
  return tf.reshape(rows, tf.concat([tf.shape(rows)[:1], [-1], tf.shape(rows)[3:]], 0))


def _sums_of_products(op, cond_graph, body, flags, reads):
  """{k: _SumOfProducts} for the stacked variables the body changes only by adding a
  matrix product of values it does not compute from them, where every iteration runs the
  loop's steps together (dynamic shapes: the factors' lists are written in place) and the
  factors are smaller than the product."""
  steps = None
  if op.ctx.target.subset:
    return {}
  if not lists.uniform_here(op.ctx):   # static shapes: lists of the loop's static bound
    steps = _static_bound_of_steps(op, body)
    if steps is None:
      return {}
  found = {}
  for k, flag in enumerate(flags):
    if not flag or k in reads.values or k >= len(body.graph.inputs):
      continue
    product = _added_product(body, k)
    if product is None or cond_graph.inputs[k].consumers():
      continue
    a, b = product.inputs
    if not (a.shape.is_fully_defined() and b.shape.is_fully_defined() and
            a.shape.rank == 2 and b.shape.rank == 2):
      continue
    p, q = reversed(a.shape.as_list()) if product.get_attr("transpose_a") else a.shape
    r = b.shape[0] if product.get_attr("transpose_b") else b.shape[1]
    if q * (p + r) < p * r:
      found[k] = _SumOfProducts(product, steps)
  return found


def _static_bound_of_steps(op, body):
  """A static bound of the steps of a loop `tf.while_loop` made (while_v2), or None.

  while_v2 counts the steps in variable 0 (its `loop_counter`, or a gradient loop's
  `grad_counter`) and carries the `maximum_iterations` in variable 1 (-1 for none): the
  loop's own, which its condition compares with the count, or for a gradient loop the
  forward loop's, which bounds the forward steps the gradient loop retraces."""
  if len(op.inputs) < 2 or op.is_stacked(0) or op.is_stacked(1) or \
      not body.passes_through(1) or not _counts_steps(op, body):
    return None
  if not op.op.inputs[0].op.name.endswith(("loop_counter", "grad_counter")):
    return None
  bound = tf.get_static_value(op.invariant(1))   # a Max of constants (Keras) folds here
  return None if bound is None or bound < 0 else int(bound)


def _counts_steps(op, body):
  """Whether loop variable 0 starts at 0 and each step adds 1 to it."""
  if tf.get_static_value(op.op.inputs[0]) != 0:
    return False
  out = graph_io.through_identities(body.outputs[0])
  if out.op.type not in ("AddV2", "Add"):
    return False
  a, b = out.op.inputs
  return ((a is body.graph.inputs[0] and tf.get_static_value(b) == 1) or
          (b is body.graph.inputs[0] and tf.get_static_value(a) == 1))


def _added_product(body, k):
  """The MatMul whose output the body adds to loop variable k to make its next value (k's
  only use), or None."""
  variable = body.graph.inputs[k]
  total = graph_io.through_identities(body.outputs[k])
  if total.op.type not in ("AddV2", "AddN") or len(total.op.inputs) != 2:
    return None
  terms = [graph_io.through_identities(t) for t in total.op.inputs]
  if terms[1] is variable:
    terms.reverse()
  if terms[0] is not variable or terms[1].op.type != "MatMul":
    return None
  # The variable is read only on its way into the sum, and the sum only on its way out.
  frontier = [variable]
  while frontier:
    t = frontier.pop()
    for consumer in t.consumers():
      if consumer is total.op:
        continue
      if consumer.type != "Identity":
        return None
      frontier.extend(consumer.outputs)
  t = body.outputs[k]
  if t.consumers():
    return None
  while t is not total:
    if len(t.op.inputs[0].consumers()) != 1:
      return None
    t = t.op.inputs[0]
  return terms[1].op


def _stacked_loop(op, ctx, cond_graph, body, init, flags, reads):
  """The loop over the active set of `ctx` (`active_set.py`): the condition is evaluated
  for every iteration, then each step runs the body on the live iterations, keeps its
  values, re-evaluates the condition on them and drops those that finished."""
  strategy = ctx.target.active_set
  # A stacked variable the body passes through (a sequence the loop reads) stays whole in
  # the state, all n rows, and is read at the live rows each step (so a read of one step's
  # row is one small gather); it needs no keeping and no accumulator.
  fixed = [f and body.passes_through(k) for k, f in enumerate(flags)]

  def condition(lane_ctx, values):
    pred = walker.convert_graph(cond_graph, values, lane_ctx)[0][0]
    return stack(pred, lane_ctx.n)

  def with_condition(state, lane_ctx, values):
    return strategy.restrict(state, condition(lane_ctx, values), fixed)

  masked = ctx.target.masked
  state = strategy.start(ctx, init, fixed)
  lane_ctx, rows = strategy.lanes(ctx, state)
  tensors = [v.tensor for v in state.values]
  state = with_condition(state, lane_ctx,
                         reads.into(strategy.read(state, rows, fixed), reads.at(tensors, rows)))

  def step(state):
    lane_ctx, rows = strategy.lanes(ctx, state)
    tensors = [v.tensor for v in state.values]
    values = reads.into(strategy.read(state, rows, fixed), reads.at(tensors, rows))
    def write(k, new):
      """The rows of the lanes whose new values are kept written back: every lane
      (Partitioned, at the live positions), or the live ones (Masked: the others ran on
      borrowed inputs)."""
      if not masked:
        return reads.written(k, tensors[k], new, iterations=rows)
      lanes = tf.cast(tf.where(state.live)[:, 0], tf.int32)
      return reads.written(k, tensors[k], new, lanes, tf.gather(rows, lanes))

    new = _run_body(body, values, flags, lane_ctx, reads, tensors, write)
    state = strategy.keep(state, [Value(t, f) for t, f in zip(new, flags)], fixed)
    new_tensors = [v.tensor for v in state.values]
    return with_condition(state, lane_ctx, reads.into(
        strategy.read(state, rows, fixed, reused=values), reads.at(new_tensors, rows)))

  full_shapes = [_shape_invariant(op, k, v.tensor, f) for k, (v, f) in
                 enumerate(zip(init, flags))]
  invariants = strategy.shape_invariants(ctx, state, full_shapes, fixed)
  results = graph_io.while_loop(
      lambda *loop: strategy.any_live(_unpack(loop, state)),
      lambda *loop: _pack(step(_unpack(loop, state))),
      _pack(state), shape_invariants=(invariants.live, invariants.values, invariants.carry),
      parallel_iterations=op.attr("parallel_iterations"),
      maximum_iterations=_maximum_iterations(op, body))
  return strategy.finals(_unpack(results, state), init, fixed)


def _pack(state):
  """A LoopState as the loop's variables: (live, tensors of the values, carry)."""
  return (state.live, [v.tensor for v in state.values],
          list(state.carry))


def _unpack(loop, like):
  """The loop's variables back as a LoopState shaped like `like`."""
  live, tensors, carry = loop
  values = [Value(t, v.stacked) for t, v in zip(tensors, like.values)]
  return like._replace(live=live, values=values, carry=list(carry))
