"""The active set: which iterations are live inside a conditional or a loop, and how they run.

The words used across the engine:
- **lane**: one row of a stacked tensor, i.e. one iteration of the context's loop.
- **positions**: ids of rows (`[m]` int32) of the enclosing context's stacked tensors.
- **mask**: `[n]` bool, one entry per lane, true where the lane is live.
- **borrow**: a dead lane computes on the inputs of a live lane (the first one), so that
  the values it computes, discarded later, are valid ones: no NaN or Inf from inputs that
  path was never meant to see reaches a value or a gradient.

Two strategies, one interface:
- `Partitioned` (dynamic shapes): the live iterations are gathered to their positions, run
  at their own count, and their results stitched (conditionals) or scattered (loops) back.
- `Masked` (static shapes, as XLA needs): every lane runs, dead lanes borrow, and results
  are selected by the mask.

The program-counter VM (`vectorize/pc/vm.py`) runs the members waiting at one block with
the same two strategies: `members` gives them as it reads and writes them (gathered, or
every lane with borrowed inputs).

A conditional asks `split` for one `Part` per branch and `merge`s the branch outputs. A loop
keeps a `LoopState` (the live set, the loop variables, what the strategy carries beside
them): `lanes` says where the live iterations read, `read` gives the variables as they read
them, `keep` takes the body's new values, `restrict` drops the iterations whose condition
failed, `finals` gives the variables after the loop. `cond.py` and `while_loop.py` are each
one algorithm over this interface.

A Context's target (`target.py`) carries its active set: its class is the strategy of the
conditionals and loops converted in that context; it also says whether the context's
`indices` is exactly `range(n)`, whether only some iterations run there, and, where dead
lanes compute too, which lanes are live (`live`). That mask is the one truth a converter
with effects (a variable update, a print, an assertion) reads: a masked region can sit
inside a partitioned one (a loop carrying per-iteration TensorLists runs masked there),
and an effect of a dead lane is one the loop never has.
"""

import dataclasses
from typing import NamedTuple

import tensorflow as tf

from vectorize import indexing
from vectorize import lists
from vectorize import ragged
from vectorize.values import Value, gather_rows, select_lanes


class Part(NamedTuple):
  """The lanes one branch of a conditional runs on.

  Attributes:
    ctx: the branch's Context (its n, the indices of its iterations).
    rows: `[ctx.n]` positions: the rows of the enclosing stacked values the branch reads.
    taken: scalar bool, whether any iteration takes the branch (else it can be skipped).
    skipped_n: the loop length of the zeros standing for a skipped branch's outputs.
    mask: `[n]` bool, the lanes taking the branch (Masked only, else None).
  """
  ctx: object
  rows: tf.Tensor
  taken: tf.Tensor
  skipped_n: object
  mask: object = None


class LoopState(NamedTuple):
  """What a loop over the active set carries from step to step.

  Attributes:
    live: the live set: positions `[m]` (Partitioned) or a mask `[n]` (Masked).
    values: the loop variables as `Value`s (Partitioned: the stacked ones the body changes
      hold the live rows only, `[m] + shape`).
    carry: Partitioned: one accumulator `[n] + shape` per such variable, holding the values
      of the iterations that finished; Masked: nothing.
  """
  live: object
  values: list
  carry: list


def borrowing_lanes(mask, lanes=None, first=None):
  """`[n]` positions: each lane itself where `mask` holds, else the first lane where it
  holds (lane n - 1 when none does): the lane each lane reads its inputs from. `lanes`
  (`range(n)`) and `first` may be given where they are known already."""
  n = tf.size(mask, out_type=tf.int32)
  lanes = tf.range(n) if lanes is None else lanes
  if first is None:
    first = tf.reduce_min(tf.where(mask, lanes, n - 1))
  return tf.where(mask, lanes, first)


def at_rows(ctx, rows, static_n=None, live=None, n=None):
  """The Context of the iterations at `rows` (positions in `ctx`'s stacked tensors): a
  subset (Partitioned) or every lane with borrowed rows (Masked, `static_n` kept, `live`
  the `[n]` mask of the lanes whose results count, within those live in `ctx`).

  n is read with Shape, not Size: in a loop over a shrinking set, Grappler's constant
  folding gave a Size of the live positions its value at the loop's entry (a conditional
  in the loop then split n = 3 positions by 2 predicates; fuzz seeds 1000903, 1001433).
  `n` is given where it is counted otherwise: a DynamicPartition's outputs, whose Shape
  Grappler's constant folding gave another output's size (fuzz seeds 3670270, 1003004).
  """
  n = tf.shape(rows, out_type=tf.int32)[0] if n is None else n
  return dataclasses.replace(ctx, n=n,
                             indices=tf.gather(ctx.indices, rows), static_n=static_n,
                             target=ctx.target.inside(_live_at(ctx, rows, live)))


def _live_at(ctx, rows, live):
  """The live mask of the region at `rows` of `ctx`, within the lanes live in `ctx`.

  Masked (`live` given): the region's lane k is `ctx`'s lane k. Partitioned: it is lane
  `rows[k]`."""
  outer = ctx.live_lanes
  if live is not None:
    return live if outer is None else tf.logical_and(live, outer)
  return None if outer is None else tf.gather(outer, rows)


def gather_stacked(values, rows):
  """The stacked Values among `values` gathered to `rows` (ragged ones, their iterations');
  invariant ones unchanged."""
  return [ragged.take_iterations(v, rows) if ragged.is_ragged(v) else
          Value(gather_rows(v.tensor, rows), True) if v.stacked else v for v in values]


@dataclasses.dataclass(frozen=True)
class ActiveSet:
  """The part both strategies share.

  Attributes:
    indices_are_range: the Context's `indices` is exactly `range(n)` (the whole loop, not
      a chunk or a subset), so a gather at the loop index of a tensor with n rows is that
      tensor.
    is_subset: inside a conditional or loop that only some iterations run.
    live: `[n]` bool, the lanes whose results count where dead lanes run too (inside a
      masked conditional or loop), else None (every lane of the context is live).
  """
  indices_are_range: bool = False
  is_subset: bool = False
  live: object = dataclasses.field(default=None, compare=False)

  dead_lanes_compute = False   # whether iterations that are not live run too

  def inside(self, live=None):
    """The active set of a region that only some iterations run (`live`: see above)."""
    return dataclasses.replace(self, indices_are_range=False, is_subset=True, live=live)


@dataclasses.dataclass(frozen=True)
class Partitioned(ActiveSet):
  """Live iterations gathered to their positions and run at their own count."""

  def members(self, mask, lanes, first):
    """The lanes of `mask` as a pc VM step runs them (`GatheredMembers`)."""
    del lanes, first
    return GatheredMembers(mask)

  def split(self, ctx, branch_index, num_branches):
    positions = tf.dynamic_partition(tf.range(ctx.n), branch_index, num_branches)
    counts = tf.math.bincount(branch_index, minlength=num_branches, maxlength=num_branches)
    return [Part(at_rows(ctx, p, n=counts[k]), p, counts[k] > 0, 0)
            for k, p in enumerate(positions)]

  def merge(self, parts, outputs):
    """The branches' stacked outputs put back in iteration order."""
    positions = [p.rows for p in parts]
    return [_stitch(positions, list(per_output)) for per_output in zip(*outputs)]

  def start(self, ctx, values, fixed):
    """Every iteration live; each changing variable's accumulator starts as its value."""
    carry = [v.tensor for k, v in enumerate(values) if _changes(v, k, fixed)]
    return LoopState(tf.range(ctx.n), list(values), carry)

  def lanes(self, ctx, state):
    return at_rows(ctx, state.live), state.live

  def read(self, state, rows, fixed, reused=None):
    """Fixed variables gathered to the live rows (or `reused` from an earlier read of the
    same rows); the others already hold the live rows."""
    return [(reused[k] if reused else Value(tf.gather(v.tensor, rows), True)) if fixed[k]
            else v for k, v in enumerate(state.values)]

  def keep(self, state, new, fixed):
    values = [old if fixed[k] else v for k, (old, v) in enumerate(zip(state.values, new))]
    return state._replace(values=values)

  def restrict(self, state, running, fixed):
    """Finished iterations' changing variables go to the accumulators; they leave."""
    finished = tf.where(tf.logical_not(running))[:, 0]
    at = tf.gather(state.live, finished)[:, None]
    changing = [k for k, v in enumerate(state.values) if _changes(v, k, fixed)]
    carry = [indexing.tensor_scatter_nd_update(acc, at,
                                               tf.gather(state.values[k].tensor, finished))
             for acc, k in zip(state.carry, changing)]
    keep = tf.where(running)[:, 0]
    values = [Value(tf.gather(v.tensor, keep), True) if k in changing else v
              for k, v in enumerate(state.values)]
    return LoopState(tf.gather(state.live, keep), values, carry)

  def any_live(self, state):
    return tf.size(state.live) > 0

  def finals(self, state, initial, fixed):
    """Accumulated values; fixed variables as they entered; invariant ones as they are."""
    changing = [k for k, v in enumerate(state.values) if _changes(v, k, fixed)]
    saved = dict(zip(changing, state.carry))
    return [Value(saved[k], True) if k in saved else
            initial[k] if fixed[k] else v for k, v in enumerate(state.values)]

  def shape_invariants(self, ctx, state, full_shapes, fixed):
    """`full_shapes`: each variable's shape at all n iterations. Changing ones shrink."""
    del ctx
    changing = [k for k, v in enumerate(state.values) if _changes(v, k, fixed)]
    values = [tf.TensorShape([None]).concatenate(s[1:]) if k in changing else s
              for k, s in enumerate(full_shapes)]
    return LoopState(tf.TensorShape([None]), values, [full_shapes[k] for k in changing])


def _changes(value, k, fixed):
  """Whether loop variable k is stacked and changed by the body (it shrinks with the set)."""
  return value.stacked and not fixed[k]


@dataclasses.dataclass(frozen=True)
class Masked(ActiveSet):
  """Every lane runs; dead lanes borrow a live lane's inputs; results selected by mask.
  Chosen for XLA, and for other reasons where shapes may stay dynamic (a pfor inside a body
  being traced, a loop carrying lists: `Target.static_shapes` says which)."""

  dead_lanes_compute = True

  def members(self, mask, lanes, first):
    """The lanes of `mask` as a pc VM step runs them (`MaskedMembers`; `first`: the lowest
    lane in `mask`, whose inputs the others borrow)."""
    return MaskedMembers(mask, lanes, first)

  def split(self, ctx, branch_index, num_branches):
    parts = []
    for b in range(num_branches):
      mask = tf.equal(branch_index, b)
      sources = borrowing_lanes(mask)
      parts.append(Part(at_rows(ctx, sources, ctx.static_n, mask), sources,
                        tf.reduce_any(mask), ctx.n, mask))
    return parts

  def merge(self, parts, outputs):
    """Each lane's output from the branch it takes."""
    result = outputs[0]
    for part, outs in zip(parts[1:], outputs[1:]):
      result = [select_lanes(part.mask, o, r) for o, r in zip(outs, result)]
    return result

  def start(self, ctx, values, fixed):
    del fixed
    return LoopState(tf.fill(tf.reshape(ctx.n, [1]), True), list(values), [])

  def lanes(self, ctx, state):
    sources = borrowing_lanes(state.live)
    return at_rows(ctx, sources, ctx.static_n, state.live), sources

  def read(self, state, rows, fixed, reused=None):
    """Every stacked variable at the borrowed rows (fixed ones `reused` where given)."""
    return [reused[k] if reused and fixed[k] else
            Value(gather_rows(v.tensor, rows), True) if v.stacked else v
            for k, v in enumerate(state.values)]

  def keep(self, state, new, fixed):
    """New values on live lanes; dead lanes keep the values they finished with."""
    values = [old if fixed[k] else
              Value(select_lanes(state.live, v.tensor, old.tensor), True) if old.stacked
              else v for k, (old, v) in enumerate(zip(state.values, new))]
    return state._replace(values=values)

  def restrict(self, state, running, fixed):
    del fixed
    return state._replace(live=tf.logical_and(state.live, running))

  def any_live(self, state):
    return tf.reduce_any(state.live)

  def finals(self, state, initial, fixed):
    del initial, fixed
    return state.values

  def shape_invariants(self, ctx, state, full_shapes, fixed):
    del state, fixed
    return LoopState(tf.TensorShape([ctx.static_n]), list(full_shapes), [])


# ----------------------------------------------------------------------------- pc members

class GatheredMembers:
  """The members at a block (a pc VM step), gathered: a leading axis of their count."""

  def __init__(self, mask):
    self.mask = mask
    self.positions = tf.cast(tf.where(mask)[:, 0], tf.int32)
    self.lanes = self.positions        # where each computed row is written
    self.n = tf.size(self.positions)
    self.static_n = None

  def gather(self, x, axis=0):
    return tf.gather(x, self.positions, axis=axis)

  def update(self, x, new):
    """`x` with the members' rows replaced by `new` (one row per member)."""
    return tf.tensor_scatter_nd_update(x, self.positions[:, None], new)

  def selected(self, flags):
    """`flags` (one per computed row) as a mask over the whole batch."""
    return tf.scatter_nd(self.positions[:, None], flags, tf.shape(self.mask))


class MaskedMembers:
  """The members at a block (a pc VM step), every lane running; lanes not at the block
  borrow the first waiting lane's inputs."""

  def __init__(self, mask, lanes, first):
    """`first`: the lowest lane in `mask` (the lanes not in it borrow its inputs)."""
    self.mask = mask
    self.lanes = lanes
    batch = tf.shape(mask)[0]
    self.positions = borrowing_lanes(mask, lanes, first)
    self.first = first
    self.borrowing = True
    self.n = batch
    self.static_n = mask.shape[0]

  def unborrowed(self):
    """The same members, every lane on its own inputs: for a block under XLA that can
    neither fail nor make a gradient of other lanes' junk NaN (integers only), which then
    gathers nothing (a kernel less per block to compile)."""
    out = MaskedMembers.__new__(MaskedMembers)
    out.__dict__.update(self.__dict__, positions=self.lanes, borrowing=False)
    return out

  def gather(self, x, axis=0):
    """`x` on axis `axis` (the lanes) as the members read it: the lanes not waiting take
    the first waiting lane's row. A select, not a gather: XLA fuses it into what reads it
    (a gather of `[rows, batch, ...]` at positions is a transpose and a copy)."""
    if not self.borrowing:
      return x
    first = tf.gather(x, self.first[None], axis=axis)
    shape = [1] * x.shape.rank
    shape[axis] = -1
    return tf.where(tf.reshape(self.mask, shape), x, first)

  def sized_here(self):
    """The same members, their count read again from the mask's shape in the graph being
    built: a gradient that recomputes a block reads the mask the forward step kept, whose
    shape XLA knows, but the count as the forward step computed it would come back as a
    value, not a compile-time constant (XLA refuses it as a `range`'s size)."""
    out = MaskedMembers.__new__(MaskedMembers)
    out.__dict__.update(self.__dict__, n=tf.shape(self.mask)[0])
    return out

  def update(self, x, new):
    """`x` with the members' lanes replaced by `new`: selected in the block, on the
    registers it writes only (after the dispatch, a select of every slot any block might
    write cost a gather of their old rows and a pass over them: 40% of a NUTS step at
    1000 chains of 100 floats)."""
    return tf.where(tf.reshape(self.mask, [-1] + [1] * (new.shape.rank - 1)), new, x)

  def selected(self, flags):
    return flags & self.mask


def _stitch(positions, parts):
  """Stacked parts (tensors or DenseLists) put back in iteration order."""
  parts = [lists.as_dense(p) for p in parts]
  if not isinstance(parts[0], lists.DenseList):
    return tf.dynamic_stitch(positions, parts)
  parts = lists.common_capacity(parts)
  return lists.DenseList(tf.dynamic_stitch(positions, [p.buffer for p in parts]),
                         tf.dynamic_stitch(positions, [p.lengths for p in parts]))
