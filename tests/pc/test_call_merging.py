"""call_merging.merge_branch_calls: one call site for an `if` whose branches call alike."""

import numpy as np
import tensorflow as tf

from tests.pc import programs
from tests.pc.passes import FLOAT, INT
from vectorize.pc import call_merging, frontend, interpreter, ir, pipeline, simplify
from vectorize.pc.frontend import SELECT


def _calls(program, fn_name):
  return [i for b in program.function(fn_name).blocks for i in b.body if isinstance(i, ir.Call)]


def _merged(fn):
  before = simplify.merge_blocks(frontend.build(fn))
  return before, call_merging.merge_branch_calls(before)


def test_calls_in_both_branches_become_one_call_with_selected_arguments_and_results():
  before, after = _merged(programs.bisect_walk)
  assert len(_calls(before, "bisect_walk")) == 2 and len(_calls(after, "bisect_walk")) == 1
  call, = _calls(after, "bisect_walk")
  assert call.args[2:] == _calls(before, "bisect_walk")[0].args[2:]   # shared: depth, key
  selects = {i.targets[0]: i for b in after.function("bisect_walk").blocks for i in b.body
             if isinstance(i, ir.Assign) and i.expr.startswith(SELECT)}
  assert {"bisect_walk.lo", "bisect_walk.mid", "bisect_walk.hi"} <= set(selects)
  assert "bisect_walk.n" in call.targets          # the same target on both sides: no select


def test_the_nuts_tree_doubling_calls_once_per_level():
  from benchmarks.workloads import nuts       # pylint: disable=import-outside-toplevel
  before, after = _merged(nuts.nuts_step)
  assert [len(_calls(p, "build_tree")) for p in (before, after)] == [3, 2]
  assert [len(_calls(p, "nuts_step")) for p in (before, after)] == [2, 1]   # -1.0 and 1.0


def test_the_end_a_branch_leaves_alone_is_the_one_value_kept_across_the_call(monkeypatch):
  """Left, `build_tree` replaces the left end and the right end stays; right, the other
  way round: one select of the end left alone is saved across the call, not both ends."""
  from benchmarks.workloads import nuts       # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(nuts, "TARGET", ["normal10"])   # the benchmarks' tests set others
  program = pipeline.compile_program(nuts.nuts_step, (ir.VarType(tf.float32, (10,)),
                                                      ir.VarType(tf.int32, (2,)), FLOAT))
  pushed = [{i.var for i in b.body if isinstance(i, ir.Push)} for b in program.blocks()
            if b.calls == "build_tree" and b.label.startswith("build_tree.")]
  assert pushed and all(not {"build_tree.theta_m", "build_tree.theta_p"} & p for p in pushed)
  vectors = [v for p in pushed for v in p if program.types[v] == ir.VarType(tf.float32, (10,))]
  assert len(vectors) == 4          # the three ends kept and the proposal, not seven


def test_branches_computing_other_expressions_keep_their_own_calls():
  def scaled(x, n):
    if n == 0:
      return x
    if x > 0.0:
      y = scaled(x * 2.0, n - 1)
    else:
      y = scaled(x * 3.0, n - 1)        # x * 3.0 must not run for the other members
    return y

  before, after = _merged(scaled)
  assert len(_calls(after, "scaled")) == len(_calls(before, "scaled")) == 2


def test_a_result_one_branch_leaves_unassigned_compiles_the_program_as_written():
  program = pipeline.compile_program(programs.one_sided_results, (INT, INT))
  assert sum(isinstance(i, ir.PushReturn) for b in program.blocks() for i in b.body) == 2
  for n, k in [(0, 1), (3, 1), (3, -1), (4, 0)]:
    got = interpreter.run(program, tf.constant(n), tf.constant(k))[0]
    assert int(got) == int(programs.one_sided_results(tf.constant(n), tf.constant(k)))


def test_merged_programs_compute_what_python_does():
  for name in ["branch_calls", "branch_calls_other_expressions"]:
    case = programs.BY_NAME[name]
    inputs = case.inputs(6, np.random.default_rng(3))
    types = tuple(ir.VarType(tf.as_dtype(x.dtype), x.shape[1:]) for x in inputs)
    program = pipeline.compile_program(case.fn, types)
    want = programs.reference(case.fn, inputs)
    for k in range(6):
      got = interpreter.run(program, *[tf.constant(x[k]) for x in inputs])
      for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w[k], rtol=1e-6)
