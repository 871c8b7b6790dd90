"""block_fusion.fuse_blocks, the VM's dispatch order and its register layout."""

import numpy as np
import pytest
import tensorflow as tf

from tests.pc import programs
from tests.pc.passes import INT, instructions, run_until, snapshot
from vectorize.pc import block_fusion, interpreter, ir, vm
from vectorize.pc.frontend import SELECT
from vectorize.pc.registers import Layout


def running_max(n):
  best = 0
  k = 0
  while k < n:
    v = (k * 7) % 5
    if v > best:
      best = v          # a copy under a branch
    k += 1
  return best


def test_a_copy_under_a_branch_becomes_a_select():
  before = run_until(running_max, [INT], "stack_opt")
  after = run_until(running_max, [INT], "fusion")
  selects = [i for i in instructions(after, ir.Assign) if i.expr.startswith(SELECT)]
  assert [i.targets for i in selects] == [("running_max.best",)]
  conditions = lambda p: {b.cond for b in instructions(p, ir.Branch)}
  assert len(conditions(after)) == len(conditions(before)) - 1   # only the loop's test is left
  for n in [0, 1, 4, 9]:
    assert int(interpreter.run(after, tf.constant(n))[0]) == running_max(n)


def test_a_callee_entry_and_small_returns_join_the_blocks_that_go_there():
  before = run_until(programs.fib, [INT], "stack_opt")
  after = run_until(programs.fib, [INT], "fusion")
  assert any(isinstance(b.terminator, ir.Goto) for b in before.blocks())
  calls = [b for b in after.blocks() if any(isinstance(i, ir.PushReturn) for i in b.body)]
  assert calls and all(isinstance(b.terminator, ir.Branch) for b in calls)  # entry test inside
  assert all(b.calls == "fib" for b in calls)
  assert not any(isinstance(b.terminator, ir.Goto) for b in after.blocks())


@pytest.mark.parametrize("name", ["fib", "mc91", "early_return", "guarded_index", "twice",
                                  "collatz", "mutual"])
def test_fusion_keeps_what_the_program_computes(name):
  case = programs.BY_NAME[name]
  inputs = case.inputs(3, np.random.default_rng(1))
  types = [ir.VarType(tf.as_dtype(x.dtype), x.shape[1:]) for x in inputs]
  program = run_until(case.fn, types, "fusion")
  want = programs.reference(case.fn, inputs)
  for k in range(3):
    got = interpreter.run(program, *[tf.constant(x[k]) for x in inputs])
    for g, w in zip(got, want):
      np.testing.assert_allclose(g.numpy(), w[k], rtol=1e-6)


def test_fusion_never_mutates_its_input():
  program = run_until(programs.fib_sum, [INT], "stack_opt")
  was = snapshot(program)
  fused = block_fusion.fuse_blocks(program)
  assert snapshot(program) == was and snapshot(fused) != was


def test_dispatch_prefers_resumed_blocks_and_runs_returns_last():
  program = run_until(programs.fib, [INT], "fusion")
  order = vm.dispatch_order(program)
  resumed = {i.label for i in instructions(program, ir.PushReturn)}
  ranks = [0 if b.label in resumed else 2 if isinstance(b.terminator, ir.IndirectGoto) else 1
           for b in order]
  assert ranks == sorted(ranks) and ranks[0] == 0 and ranks[-1] == 2
  assert sorted(b.label for b in order) == sorted(b.label for b in program.blocks())


def test_register_slots_land_in_their_rows():
  layout = Layout({"a": INT, "b": INT, "c": ir.VarType(tf.float32, (2,))},
                  [["a"], ["b", "a"], ["c"]])
  assert layout.width == {"int32[]": 2, "float32[2]": 1}
  files = layout.initial({"a": tf.constant([1, 2])}, 2)
  assert files["int32[]"].shape == [3, 2]                     # a, b and the spare row
  rows = layout.rows_of(files)
  slots = layout.slots_of(1, {"a": tf.constant([5, 6]), "b": tf.constant([7, 8]),
                              "c": rows["c"]})
  written = layout.written(files, tf.constant(1), slots)
  np.testing.assert_array_equal(written["int32[]"][:2], [[5, 6], [7, 8]])
  slots = layout.slots_of(0, {"a": tf.constant([3, 4]), "c": rows["c"]})
  written = layout.written(written, tf.constant(0), slots)   # padding: the spare row only
  np.testing.assert_array_equal(written["int32[]"][:2], [[3, 4], [7, 8]])
