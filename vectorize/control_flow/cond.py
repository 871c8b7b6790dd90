"""If / StatelessIf / Case / StatelessCase: conditionals inside the loop body.

Loop-invariant predicate (or branch index): one conditional over the converted branches.
Which outputs are stacked is decided first (`walker.output_flags`, OR-ed over branches); a
branch whose output is invariant where another's is stacked tiles it, so that all branches
agree.

Stacked predicate, dynamic shapes: the active iterations are partitioned by branch
(`tf.dynamic_partition` of positions `0..n-1`); each branch is converted for its subset (its
stacked inputs gathered, the loop index becoming those iterations' indices, n the subset's
size) inside a `tf.cond` that skips it when no iteration takes it; `tf.dynamic_stitch`
puts the outputs back in iteration order. Every output is stacked.

Stacked predicate, static shapes (XLA): every branch that some iteration takes runs on all
n lanes; lanes that do not take it compute on the inputs of the first iteration that does
(valid inputs for that branch, so no NaN or Inf is produced, in values or gradients), and
each output is selected per lane by the branch mask.
"""

import tensorflow as tf

from vectorize import graph_io
from vectorize import walker
from vectorize.registry import register
from vectorize.values import Value, invariant, select_lanes, stack, stacked


@register("If", "StatelessIf")
def _convert_if(op):
  graphs = [graph_io.function_graph(op.op, "then_branch"),
            graph_io.function_graph(op.op, "else_branch")]
  pred = op.value(0)
  if not pred.stacked:
    truth = _truth(pred.tensor)
    return _invariant_choice(op, graphs, lambda fns: tf.cond(truth, fns[0], fns[1]))
  branch_index = tf.where(_truth_per_iteration(pred.tensor), 0, 1)
  return _stacked_choice(op, graphs, branch_index)


@register("Case", "StatelessCase")
def _convert_case(op):
  graphs = [graph_io.find_function(op.op.graph, f.name).graph for f in op.attr("branches")]
  index = op.value(0)
  if not index.stacked:
    return _invariant_choice(op, graphs, lambda fns: tf.switch_case(index.tensor, fns))
  last = len(graphs) - 1
  i = index.tensor
  branch_index = tf.where((i < 0) | (i > last), last, i)   # out of range: the last branch
  return _stacked_choice(op, graphs, branch_index)


@register("FakeParam")
def _convert_fake_param(op):
  """An untaken branch's stand-in value: zeros, never uninitialized memory."""
  return invariant(tf.zeros(op.attr("shape"), op.attr("dtype")))


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
  arg_flags = [v.stacked for v in args]
  flags = [any(f) for f in zip(*[walker.output_flags(g, arg_flags, ctx) for g in graphs])]

  def branch_fn(graph):
    def fn():
      outputs, _ = walker.convert_graph(graph, args, ctx)
      return [stack(v, ctx.n) if flag else v.tensor for v, flag in zip(outputs, flags)]
    return fn

  results = choose([branch_fn(g) for g in graphs])
  if not op.op.outputs:
    return results if isinstance(results, tf.Operation) else tf.group(results)
  return [Value(t, flag) for t, flag in zip(tf.nest.flatten(results), flags)]


def _stacked_choice(op, graphs, branch_index):
  if op.ctx.static_shapes:
    return _masked_choice(op, graphs, branch_index)
  return _partitioned_choice(op, graphs, branch_index)


def _partitioned_choice(op, graphs, branch_index):
  """Each branch on the subset of iterations that take it, stitched back in order."""
  args, ctx = _args(op), op.ctx
  positions = tf.dynamic_partition(tf.range(ctx.n), branch_index, len(graphs))
  per_branch = []
  for graph, pos in zip(graphs, positions):
    per_branch.append(_run_if_taken(op, graph, pos, args, ctx))
  outputs = []
  for k in range(len(op.op.outputs)):
    outputs.append(stacked(tf.dynamic_stitch(positions, [outs[k] for outs in per_branch])))
  return outputs


def _run_if_taken(op, graph, positions, args, ctx):
  """The branch's stacked outputs for the iterations at `positions` (skipped if none)."""
  sub_ctx = ctx.subset(positions)
  sub_args = [Value(tf.gather(v.tensor, positions), True) if v.stacked else v for v in args]

  def run():
    outputs, _ = walker.convert_graph(graph, sub_args, sub_ctx)
    return [stack(v, sub_ctx.n) for v in outputs]

  shapes = [t.shape for t in op.op.outputs]
  if not op.op.outputs or not all(s.is_fully_defined() for s in shapes):
    return run()

  return tf.cond(tf.size(positions) > 0, run, lambda: _zeros(0, op.op.outputs))


def _zeros(n, like):
  """Zeros standing for an untaken branch's outputs: `[n] + shape` for each of `like`."""
  return [tf.zeros(tf.concat([[n], tf.constant(t.shape.as_list(), tf.int32)], 0), t.dtype)
          for t in like]


def _masked_choice(op, graphs, branch_index):
  """Every taken branch on all lanes (inactive lanes borrow a taker's inputs), selected."""
  args, ctx = _args(op), op.ctx
  lanes = tf.range(ctx.n)
  result = None
  for b, graph in enumerate(graphs):
    mask = tf.equal(branch_index, b)
    first_taker = tf.reduce_min(tf.where(mask, lanes, ctx.n - 1))

    def run(graph=graph, mask=mask, first_taker=first_taker):
      source = tf.where(mask, lanes, first_taker)
      lane_ctx = ctx.subset(source, static_n=ctx.static_n)
      lane_args = [Value(tf.gather(v.tensor, source), True) if v.stacked else v for v in args]
      outputs, _ = walker.convert_graph(graph, lane_args, lane_ctx)
      return [stack(v, ctx.n) for v in outputs]

    shapes = [t.shape for t in op.op.outputs]
    if op.op.outputs and all(s.is_fully_defined() for s in shapes):
      outs = tf.cond(tf.reduce_any(mask), run, lambda: _zeros(ctx.n, op.op.outputs))
    else:
      outs = run()
    outs = tf.nest.flatten(outs)
    if result is None:
      result = outs
    else:
      result = [select_lanes(mask, o, r) for o, r in zip(outs, result)]
  return [stacked(t) for t in result]

