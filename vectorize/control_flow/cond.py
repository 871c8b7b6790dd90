"""If / StatelessIf / Case / StatelessCase: conditionals inside the loop body.

Loop-invariant predicate (or branch index): one conditional over the converted branches.
Which outputs are stacked is decided first (`walker.output_flags`, OR-ed over branches); a
branch whose output is invariant where another's is stacked tiles it, so that all branches
agree.

Stacked predicate: one algorithm over the context's active set (`active_set.py`). It
`split`s the iterations by branch; each branch is converted for its part (its stacked inputs
gathered to the part's rows, the loop index becoming those rows' indices) inside a
`tf.cond` that skips it when no iteration takes it; the outputs are `merge`d back per
iteration. Every output is stacked. Partitioned (dynamic shapes): a part is the positions
taking the branch (`tf.dynamic_partition`), merged by `tf.dynamic_stitch`. Masked (static
shapes, XLA): a part is all n lanes, those not taking the branch borrowing the inputs of the
first that does (valid inputs for that branch, so no NaN or Inf is produced, in values or
gradients), merged by selecting per lane by the branch mask.

An output whose first dimension the branches give different static sizes (the gradient of
a gather in one branch, an IndexedSlices of as many rows as indices) is merged as a ragged
value, and an output that every branch computes as the same constant (that gradient's dense
shape) stays loop-invariant. Under static shapes (XLA) the former is refused.

A TensorList output that differs per iteration (a `DenseList`) may have another capacity in
each branch: it is padded to the largest before branches are combined. The gradient of a
conditional outputs the branches' intermediates, with a `FakeParam` where a branch lacks
one; a TensorList one becomes an empty list of the element type the other branch has.
"""

import tensorflow as tf
from tensorflow.python.ops import cond_v2
from tensorflow.python.ops import control_flow_v2_func_graphs
from tensorflow.python.ops import handle_data_util
from tensorflow.python.ops import list_ops

from vectorize import graph_io
from vectorize import lists
from vectorize import ragged
from vectorize import walker
from vectorize import active_set
from vectorize.control_flow import optionals
from vectorize.errors import ConversionError, Unvectorizable, user_location
from vectorize.registry import register
from vectorize.values import Value, invariant, stack


@register("If", "StatelessIf")
@ragged.register("If", "StatelessIf")
def _convert_if(op):
  graphs = graph_io.branch_graphs(op.op)
  _type_fake_lists(graphs)
  optionals.mark_stand_ins(graphs)
  pred = op.value(0)
  if not pred.stacked:
    known = tf.get_static_value(pred.tensor)
    if known is not None:
      return _known_branch(op, graphs[0 if _static_truth(known) else 1])
    truth = _truth(pred.tensor)
    return _invariant_choice(op, graphs, lambda fns: tf.cond(truth, fns[0], fns[1]))
  branch_index = tf.where(_truth_per_iteration(pred.tensor), 0, 1)
  return _stacked_choice(op, graphs, branch_index)


@register("Case", "StatelessCase")
@ragged.register("Case", "StatelessCase")
def _convert_case(op):
  graphs = graph_io.branch_graphs(op.op)
  _type_fake_lists(graphs)
  optionals.mark_stand_ins(graphs)
  index = op.value(0)
  if not index.stacked:
    known = tf.get_static_value(index.tensor)
    if known is not None:
      return _known_branch(op, graphs[known if 0 <= known < len(graphs) else -1])
    return _invariant_choice(op, graphs, lambda fns: tf.switch_case(index.tensor, fns))
  last = len(graphs) - 1
  i = index.tensor
  branch_index = tf.where((i < 0) | (i > last), last, i)   # out of range: the last branch
  return _stacked_choice(op, graphs, branch_index)


# A branch's stand-in for a value another branch computes: only its shape matters.
_STAND_INS = ("FakeParam", "OptionalNone")


@register("FakeParam")
def _convert_fake_param(op):
  """An untaken branch's stand-in value: zeros (an empty TensorList), never uninitialized
  memory."""
  if op.attr("dtype") != tf.variant:
    return invariant(tf.zeros(op.attr("shape"), op.attr("dtype")))
  dtype, shape = lists.element_spec(op.op.outputs[0])   # set by _type_fake_lists
  empty = list_ops.empty_tensor_list(shape, dtype, max_num_elements=0)
  handle_data_util.copy_handle_data(op.op.outputs[0], empty)
  return invariant(empty)


def _type_fake_lists(graphs):
  """Gives each variant FakeParam output of a branch the TensorList element type of the
  other branches' output at its position (cond_v2 leaves it untyped)."""
  for outputs in zip(*[g.outputs for g in graphs]):
    fakes = [t for t in map(graph_io.through_identities, outputs)
             if t.op.type == "FakeParam" and t.dtype == tf.variant]
    typed = [t for t in outputs if t.dtype == tf.variant and
             handle_data_util.get_resource_handle_data(t).is_set]
    if fakes and typed:
      for t in fakes:
        handle_data_util.copy_handle_data(typed[0], t)


def _known_branch(op, graph):
  """The branch a predicate or index known at trace time picks, converted in place: no
  conditional, so none for TF's gradient to rebuild (seed 100018: TF's Case gradient
  asserted on a Case emitted in a loop for `switch_case(tf.constant(1), ...)`)."""
  outputs, effects = walker.convert_graph(graph, _args(op), op.ctx)
  if not op.op.outputs:
    return tf.group(effects)
  return outputs


def _static_truth(value):
  """`_truth` of a predicate known at trace time."""
  return bool(value.size > 0) if value.ndim else bool(value)


def _truth(pred):
  """An If predicate as a scalar bool (numbers: non-zero; tensors of rank > 0: non-empty)."""
  if pred.shape.rank not in (0, None):
    return tf.size(pred) > 0
  return pred if pred.dtype == tf.bool else tf.not_equal(pred, tf.zeros([], pred.dtype))


def _truth_per_iteration(pred):
  if pred.shape.rank != 1:
    raise NotImplementedError("a stacked If predicate must be a scalar per iteration")
  return pred if pred.dtype == tf.bool else tf.not_equal(pred, tf.zeros([], pred.dtype))


def _args(op):
  return list(op.inputs[1:])


def _invariant_choice(op, graphs, choose):
  """One conditional (built by `choose(branch_fns)`) over the converted branches."""
  args, ctx = _args(op), op.ctx
  arg_flags = [walker.RAGGED if ragged.is_ragged(v) else v.stacked for v in args]
  flags = [any(f) for f in zip(*[walker.output_flags(g, arg_flags, ctx) for g in graphs])]

  capacities = (_list_capacities(op, graphs, arg_flags, flags)
                if ctx.target.static_shapes else {})

  def branch_fn(graph):
    def fn():
      outputs, _ = walker.convert_graph(graph, args, ctx)
      # A list kept as a UniformList in one branch may be a DenseList in another: dense.
      outs = [lists.as_dense(stack(v, ctx.n)) if flag else v.tensor
              for v, flag in zip(outputs, flags)]
      return [lists.pad_capacity(t, capacities[k]) if k in capacities else t
              for k, t in enumerate(outs)]
    return fn

  results = choose([branch_fn(g) for g in graphs])
  made = _as_list(results) if not isinstance(results, tf.Operation) else [results]
  if made:   # a branch adding a value to itself: lowered, Grappler empties the outputs
    graph_io.keep_unlowered_where_grappler_breaks(made[0])
  if not op.op.outputs:
    return results if isinstance(results, tf.Operation) else tf.group(results)
  return [Value(_dense_gradient(t) if flag else t, flag)
          for t, flag in zip(_as_list(results), flags)]


def _dense_gradient(t):
  """`t`, the output of a conditional, reshaped to its own shape inside a while loop, so
  that its gradient reaches the conditional dense.

  TF 2.21 fails (an AssertionError in cond_v2's `_resolve_grad_inputs`) on the gradient of
  a loop whose body gathers from a conditional's output of unknown shape: the gather's
  gradient is an IndexedSlices whose dense shape while_v2 moves into the forward body, out
  of the conditional gradient's reach. Plain TF code fails the same way; ours must not,
  since the loop's active set gathers every changing variable (fuzz seed 1220092). The
  reshape's gradient densifies the IndexedSlices in the loop's own gradient, where the
  shape is in reach; the reshape itself moves no data.
  """
  if (isinstance(t, tf.Tensor) and t.dtype != tf.variant and
      not t.shape.is_fully_defined() and _in_while_body(t.graph)):
    return tf.reshape(t, tf.shape(t))
  return t


def _in_while_body(graph):
  while graph is not None:
    if isinstance(graph, control_flow_v2_func_graphs.WhileBodyFuncGraph):
      return True
    graph = getattr(graph, "outer_graph", None)
  return False


def _list_capacities(op, graphs, arg_flags, flags):
  """{output position: the largest static capacity over branches} for stacked TensorList
  outputs (XLA needs both branches of a conditional to agree on shapes)."""
  per_branch = [walker.dry_run(g, arg_flags, op.ctx) for g in graphs]
  capacities = {}
  for k, flag in enumerate(flags):
    buffers = [outs[k].tensor.buffer for outs in per_branch
               if isinstance(outs[k].tensor, lists.DenseList)]
    sizes = [b.shape[1] for b in buffers]
    if flag and buffers and all(c is not None for c in sizes):
      capacities[k] = max(sizes)
  return capacities


def _as_list(outputs):
  """A conditional's outputs as a list (a single DenseList or tensor is one output)."""
  if isinstance(outputs, (list, tuple)) and not isinstance(outputs, lists.DenseList):
    return list(outputs)
  return [outputs]


def _stacked_choice(op, graphs, branch_index):
  """Each branch on the lanes its active set gives it (skipped where no iteration takes
  it), the outputs merged back per iteration. Every output is stacked; one whose first
  dimension differs between branches is ragged."""
  args, ctx = _args(op), op.ctx
  sized = _sizes_by_branch(op, graphs)
  parts = ctx.target.active_set.split(ctx, branch_index, len(graphs))
  outputs = _shape_stand_ins(graphs, [_run_part(op, graph, part, args)
                                      for graph, part in zip(graphs, parts)])
  outputs = optionals.flattened_where_shapes_differ(graphs, outputs)
  results = _constants_of_every_branch(op, graphs)
  same = [k for k in range(len(op.op.outputs)) if k not in sized and k not in results]
  for k in same:   # sizes the branch graphs left unknown may differ once converted
    _check_same_later_axes(op, k, [_per_iteration_shape(outs[k]) for outs in outputs])
  merged = ctx.target.active_set.merge(parts, [[outs[k] for k in same] for outs in outputs])
  results.update(zip(same, (Value(t, True) for t in merged)))
  for k in sized:
    results[k] = _merge_sizes(parts, [outs[k] for outs in outputs])
  return [results[k] for k in range(len(op.op.outputs))]


def _constants_of_every_branch(op, graphs):
  """{output position: invariant Value} for outputs that every branch computes as the same
  constant (an IndexedSlices gradient's dense shape), which need no merge and stay
  loop-invariant for the ops that read them."""
  found = {}
  for k, outs in enumerate(zip(*[g.outputs for g in graphs])):
    if outs[0].dtype not in (tf.int32, tf.int64):
      continue
    consts = [tf.get_static_value(t) for t in outs]
    if all(c is not None and c.shape == consts[0].shape and (c == consts[0]).all()
           for c in consts):
      found[k] = invariant(tf.constant(consts[0], outs[0].dtype))
  return found


def _sizes_by_branch(op, graphs):
  """The outputs whose first dimension the branches give statically different sizes
  (the gradient of a gather in one branch: an IndexedSlices of as many rows as indices;
  a dense gradient in the other), which are ragged values after the merge."""
  sized = []
  for k, outs in enumerate(zip(*[g.outputs for g in graphs])):
    shapes = [t.shape for t in outs]
    _check_same_later_axes(op, k, [t.shape for t in outs
                                   if graph_io.through_identities(t).op.type not in _STAND_INS])
    if any(s.rank in (None, 0) or not s[1:].is_fully_defined() for s in shapes):
      continue
    firsts = {s[0] for s in shapes}
    if len(firsts) > 1 and None not in firsts and len({tuple(s[1:]) for s in shapes}) == 1:
      if op.ctx.target.static_shapes:
        raise Unvectorizable(
            f"output {k} has {' or '.join(str(d) for d in sorted(firsts))} rows depending "
            "on the branch taken, and static shapes (XLA) cannot hold per-iteration sizes")
      sized.append(k)
  return sized


def _per_iteration_shape(stacked):
  """The static shape of one iteration's value in a branch's stacked output (unknown for
  a list or ragged value)."""
  if not isinstance(stacked, tf.Tensor) or stacked.shape.rank is None:
    return tf.TensorShape(None)
  return stacked.shape[1:]


def _check_same_later_axes(op, k, shapes):
  """Raises where the branches' output `k` has statically different sizes past its first
  axis (rot90 by a per-iteration number of turns: [h, w] or [w, h]), which the merge would
  meet as a DynamicStitch shape error."""
  known = [s for s in shapes if s.rank is not None]
  if len({s.rank for s in known}) > 1:
    differ = True
  else:
    differ = any(len({s[a] for s in known} - {None}) > 1
                 for a in range(1, known[0].rank if known else 0))
  if differ:
    raise ConversionError(
        f"Cannot vectorize the conditional {op.op.name!r}{user_location(op.op)}: "
        f"its output {k} has shape {' or '.join(str(s) for s in shapes)} depending on the "
        "branch taken, so iterations that take different branches give values of different "
        "shapes, which a conditional cannot merge (they would be ragged past their first "
        "axis). To fix: make every branch return the same shape (pad, crop or resize to a "
        "common one).")


def _merge_sizes(parts, outputs):
  """A ragged Value of each iteration's output from the branch it takes, where the
  branches' outputs (`[rows of part] + [size] + rest`) differ in size."""
  sizes = [tf.shape(o)[1] for o in outputs]
  lengths = tf.dynamic_stitch([p.rows for p in parts],
                              [tf.fill(tf.shape(p.rows), s) for p, s in zip(parts, sizes)])
  starts = tf.cumsum(lengths, exclusive=True)
  where = [tf.reshape(tf.gather(starts, p.rows)[:, None] + tf.range(s)[None], [-1])
           for p, s in zip(parts, sizes)]
  flat = [tf.reshape(o, tf.concat([[-1], tf.shape(o)[2:]], 0)) for o in outputs]
  return ragged.ragged(tf.dynamic_stitch(where, flat), lengths)


def _shape_stand_ins(graphs, outputs):
  """Each branch's FakeParam output as zeros shaped like another branch's real output.

  TF gives a stand-in unknown dims as 0 (`[0, 4]` for `[None, 4]`), which cannot be
  merged with the real values (seed 4044); the lanes taking the stand-in's branch never
  read it, so only its shape matters.
  """
  for k in range(len(outputs[0])):
    fake = [graph_io.through_identities(g.outputs[k]).op.type in _STAND_INS for g in graphs]
    real = [outs[k] for outs, f in zip(outputs, fake) if not f]
    if not any(fake) or not real or not isinstance(real[0], tf.Tensor):
      continue
    for outs, f in zip(outputs, fake):
      if f:
        outs[k] = tf.zeros(tf.concat([tf.shape(outs[k])[:1], tf.shape(real[0])[1:]], 0),
                           real[0].dtype)
  return outputs


def _run_part(op, graph, part, args):
  """The branch's stacked outputs on the lanes of `part` (zeros if no iteration takes it)."""
  part_args = active_set.gather_stacked(args, part.rows)

  def run():
    outputs, _ = walker.convert_graph(graph, part_args, part.ctx)
    return [stack(v, part.ctx.n) for v in outputs]

  if not _zeros_can_stand_for(op.op.outputs):
    return run()
  # The part's count, not a Size or Shape of its positions: with a static n, Grappler's
  # constant folding gave those wrong values (fuzz seeds 1003004, 3670270).
  return _as_list(_unlowered_cond(part.taken, run,
                                  lambda: _zeros(part.skipped_n, op.op.outputs)))


def _unlowered_cond(pred, true_fn, false_fn):
  """`tf.cond`, emitted as a two-branch Case that is never lowered to Switch / Merge, nor
  is its gradient.

  Lowered, TF's arithmetic optimizer rewrites an add chain with broadcasting in a branch
  (`x + x + b`, x of shape [None, 1], b of shape [1]) into an empty tensor of shape (0,):
  a silent wrong answer that plain TF code shows too (fuzz seeds 1000020, 1000268). The
  guard is ours, so its branches must survive; a functional branch is optimized as a
  function, where the rewrite is right. A Case, unlike an If, passes its lowering flag on
  to the conditional its gradient builds (seed 1000268 went wrong in gradients only).
  `true_fn` is branch 0: the gradient gives the forward Case branch 0's output shapes, and
  the zeros' static leading 0 would be wrong for the taken branch.

  The branch index is one Grappler cannot fold (a PlaceholderWithDefault, an identity
  where it runs): where n is static, the parts, and so both indices of a guard nested in a
  guard, are constants to it, and with a gradient taken (the forward Case then has its
  intermediates as outputs) its constant folding, function inlining, dependency and
  arithmetic passes together drop a variable update in the inner branch (fuzz seed
  3100399; plain TF's `indexed_case` of constant indices shows it too).
  """
  index = tf.raw_ops.PlaceholderWithDefault(input=tf.where(pred, 0, 1), shape=[])
  return cond_v2.indexed_case(index, [_marked_unlowered(true_fn), false_fn],
                              lower_using_switch_merge=False)


def _marked_unlowered(fn):
  """`fn`, marking the branch graph it builds in as unlowered (`in_unlowered_branch`)."""
  def marked():
    tf.compat.v1.get_default_graph()._vectorize_unlowered = True  # pylint: disable=protected-access
    return fn()
  return marked


def in_unlowered_branch():
  """Whether ops are being built inside a branch of `_unlowered_cond`: such a branch runs as
  a function, where on CPU TensorFlow's oneDNN rewrite does not reach (an Eigen kernel
  without grouped-convolution gradients runs instead)."""
  graph = tf.compat.v1.get_default_graph()
  while graph is not None:
    if getattr(graph, "_vectorize_unlowered", False):
      return True
    graph = getattr(graph, "outer_graph", None)
  return False


def _zeros_can_stand_for(outputs):
  """Whether zeros of a static shape can stand for `outputs` where a branch is skipped."""
  return bool(outputs) and all(t.shape.is_fully_defined() and t.dtype != tf.variant
                               for t in outputs)


def _zeros(n, like):
  """Zeros standing for an untaken branch's outputs: `[n] + shape` for each of `like`."""
  return [tf.zeros(tf.concat([[n], tf.constant(t.shape.as_list(), tf.int32)], 0), t.dtype)
          for t in like]
