"""liveness.analyze and allocation.allocate: what lives where, and what needs a stack."""

import tensorflow as tf

from tests.pc import programs
from tests.pc.passes import FLOAT, INT, run_until
from vectorize.pc import ir, liveness, straight_line, vm
from vectorize.pc.allocation import NONE, REGISTER, STACK, TEMPORARY
from vectorize.pc.liveness import live_after_call


def test_the_parameter_is_live_at_entry_and_nothing_else():
  program = run_until(programs.fib, [INT], "liveness")
  entry = program.function("fib").entry
  assert program.live_in[entry] == {"fib.n"}


def test_n_is_live_across_the_first_recursive_call_only():
  program = run_until(programs.fib, [INT], "liveness")
  recursive = [b for b in program.blocks() if any(isinstance(i, ir.Call) for i in b.body)][0]
  (first, after_first), (second, after_second) = live_after_call(program, recursive)
  assert "fib.n" in after_first
  assert "fib.n" not in after_second
  assert recursive.body[first].targets[0] in after_second   # the first result waits


def test_only_values_live_across_a_recursive_call_get_stacks():
  storage = run_until(programs.fib, [INT], "allocation").storage
  stacks = {v for v, k in storage.items() if k == STACK}
  assert "fib.n" in stacks and len(stacks) == 2      # n and the first call's result
  assert storage["fib._pc_t0"] == TEMPORARY          # the base-case test


def test_a_loop_around_a_call_of_another_function_needs_registers_not_stacks():
  storage = run_until(programs.fib_sum, [INT], "allocation").storage
  assert storage["fib_sum.acc"] == REGISTER
  assert all(k != STACK for v, k in storage.items() if v.startswith("fib_sum."))


def _unused(n, m):
  dead = n + 1  # noqa: F841  (never read: the point of the test)
  return n


def test_a_never_read_variable_has_no_storage():
  storage = run_until(_unused, [INT, INT], "allocation").storage
  assert storage["_unused.dead"] == NONE


def test_tail_recursion_needs_no_stack():
  storage = run_until(programs.gcd, [INT, INT], "allocation").storage
  assert STACK not in storage.values()


def _scale_sum(x, scale, n):
  if n == 0:
    return 0.0 * x
  return scale * x + _scale_sum(x, scale, n - 1) * 1.0


def test_a_parameter_passed_on_unchanged_needs_no_stack():
  storage = run_until(_scale_sum, [FLOAT, FLOAT, INT], "allocation").storage
  assert storage["_scale_sum.scale"] == REGISTER
  assert storage["_scale_sum.x"] == REGISTER
  assert storage["_scale_sum.n"] != STACK        # read before the call only
  fib_storage = run_until(programs.fib, [INT], "allocation").storage
  assert fib_storage["fib.n"] == STACK            # passed on changed (n - 1)



def test_a_value_no_later_block_reads_is_not_written_back():
  """`vector_walk` saves `w` across its call: the calling block pushes it and the resume
  pops it, and no block after either reads the register (each caller pops its own), so
  neither writes it back; the resume, which returns, writes only the result slot. Before,
  every value a block assigned was written back: on a NUTS subtree 15 slots a step where
  7 are read."""
  program = run_until(programs.vector_walk, [ir.VarType(tf.float32, (3,)), INT], "fusion")
  machine = vm._Machine(program, 8, None)  # pylint: disable=protected-access
  live_out = liveness.live_out_lowered(program)
  resume, = [b for b in program.blocks() if any(isinstance(i, ir.Pop) for i in b.body)]
  call, = [b for b in program.blocks() if any(isinstance(i, ir.Push) for i in b.body)]
  assert isinstance(resume.terminator, ir.IndirectGoto)
  assert "vector_walk.w" in straight_line.assigned(resume.body)
  assert "vector_walk.w" in straight_line.assigned(call.body)
  assert "vector_walk.w" not in live_out[resume.label] | live_out[call.label]
  assert machine.stored(resume) == list(program.results)
  assert set(machine.stored(call)) == {"vector_walk.v", "vector_walk.n"}
