"""active_set: Partitioned and Masked split, merge, restrict and borrow as documented."""

import numpy as np
import tensorflow as tf

from vectorize.context import Context
from vectorize import active_set
from vectorize.active_set import Masked, Partitioned
from vectorize.target import Target
from vectorize.values import Value


def _ctx(strategy, n=4):
  target = Target(static_shapes=strategy is Masked,
                  active_set=strategy(indices_are_range=False))
  return Context(n=tf.constant(n), indices=tf.range(10, 10 + n), static_n=n, target=target)


def _run(fn):
  return tf.nest.map_structure(lambda t: t.numpy(), tf.function(fn, autograph=False)())


def test_borrowing_lanes_point_dead_lanes_at_the_first_live_one():
  out = _run(lambda: active_set.borrowing_lanes(tf.constant([False, True, False, True])))
  np.testing.assert_array_equal(out, [1, 1, 1, 3])


def test_borrowing_lanes_with_no_live_lane_point_at_the_last():
  out = _run(lambda: active_set.borrowing_lanes(tf.constant([False, False, False])))
  np.testing.assert_array_equal(out, [2, 2, 2])


def test_partitioned_split_gives_each_branch_its_positions_and_indices():

  def fn():
    ctx = _ctx(Partitioned)
    parts = ctx.target.active_set.split(ctx, tf.constant([1, 0, 1, 1]), 2)
    assert all(p.ctx.target.subset and p.ctx.static_n is None for p in parts)
    assert not parts[0].ctx.target.static_shapes
    return [(p.rows, p.ctx.indices, p.ctx.n, p.taken) for p in parts]

  (rows0, idx0, n0, taken0), (rows1, idx1, n1, taken1) = _run(fn)
  assert rows0.tolist() == [1] and idx0.tolist() == [11] and n0 == 1 and taken0
  assert rows1.tolist() == [0, 2, 3] and idx1.tolist() == [10, 12, 13] and n1 == 3


def test_partitioned_merge_stitches_in_iteration_order():

  def fn():
    ctx = _ctx(Partitioned)
    parts = ctx.target.active_set.split(ctx, tf.constant([1, 0, 1, 1]), 2)
    return ctx.target.active_set.merge(parts, [[tf.constant([5.0])], [tf.constant([1.0, 3.0, 4.0])]])

  np.testing.assert_array_equal(_run(fn)[0], [1, 5, 3, 4])


def test_masked_split_runs_every_lane_dead_ones_borrowing():

  def fn():
    ctx = _ctx(Masked)
    parts = ctx.target.active_set.split(ctx, tf.constant([1, 0, 1, 1]), 2)
    assert all(p.ctx.target.static_shapes and p.ctx.static_n == 4 for p in parts)
    return [(p.rows, p.ctx.indices, p.mask) for p in parts]

  (rows0, idx0, mask0), (rows1, _, _) = _run(fn)
  assert rows0.tolist() == [1, 1, 1, 1] and idx0.tolist() == [11, 11, 11, 11]
  assert mask0.tolist() == [False, True, False, False]
  assert rows1.tolist() == [0, 0, 2, 3]


def test_masked_merge_selects_each_lane_from_its_branch():

  def fn():
    ctx = _ctx(Masked)
    parts = ctx.target.active_set.split(ctx, tf.constant([1, 0, 1, 1]), 2)
    return ctx.target.active_set.merge(parts, [[tf.fill([4], 5.0)], [tf.range(4, dtype=tf.float32)]])

  np.testing.assert_array_equal(_run(fn)[0], [0, 5, 2, 3])


def test_partitioned_restrict_saves_finished_values_and_shrinks_the_live_set():

  def fn():
    ctx = _ctx(Partitioned)
    fixed = [False, True]
    values = [Value(tf.constant([0.0, 1.0, 2.0, 3.0]), True), Value(tf.ones([4, 2]), True)]
    state = ctx.target.active_set.start(ctx, values, fixed)
    state = ctx.target.active_set.restrict(state, tf.constant([True, False, True, False]), fixed)
    state = ctx.target.active_set.keep(state, [Value(state.values[0].tensor * 10, True),
                                        Value(tf.zeros([2, 2]), True)], fixed)
    finals = ctx.target.active_set.finals(state, values, fixed)
    return state.live, state.values[0].tensor, finals[0].tensor, finals[1].tensor

  live, running, final, passed_through = _run(fn)
  assert live.tolist() == [0, 2] and running.tolist() == [0, 20]
  assert final.tolist() == [0, 1, 2, 3]   # the accumulator: finished lanes 1 and 3 saved
  np.testing.assert_array_equal(passed_through, np.ones([4, 2]))


def test_masked_keep_leaves_dead_lanes_at_their_last_value():

  def fn():
    ctx = _ctx(Masked)
    values = [Value(tf.constant([0.0, 1.0, 2.0, 3.0]), True)]
    state = ctx.target.active_set.start(ctx, values, [False])
    state = ctx.target.active_set.restrict(state, tf.constant([True, False, True, False]), [False])
    state = ctx.target.active_set.keep(state, [Value(tf.fill([4], 9.0), True)], [False])
    return state.live, ctx.target.active_set.finals(state, values, [False])[0].tensor

  live, final = _run(fn)
  assert live.tolist() == [True, False, True, False] and final.tolist() == [9, 1, 9, 3]


def test_the_context_reads_its_flags_from_its_target():
  whole = Context(n=tf.constant(2), indices=tf.range(2),
                  target=Target(static_shapes=True, active_set=Masked(indices_are_range=True)))
  assert whole.target.static_shapes and whole.target.masked and not whole.target.subset
  assert whole.is_loop_index(Value(whole.indices, True))
  inner = whole.target.inside()
  assert inner.subset and inner.static_shapes and inner.masked
  assert not inner.active_set.indices_are_range and isinstance(inner.active_set, Masked)


def test_a_masked_target_keeps_the_active_sets_facts():
  live = tf.constant([True, False])
  target = Target(active_set=Partitioned(is_subset=True, live=live)).running_masked()
  assert isinstance(target.active_set, Masked) and target.subset
  assert target.active_set.live is live and not target.static_shapes
