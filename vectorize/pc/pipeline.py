"""The pass order, written once: Python function -> lowered, optimized IR.

frontend -> block merging -> call merging -> type inference -> liveness -> allocation ->
lowering -> pop-push fusion -> block fusion.
"""

from vectorize.errors import ConversionError
from vectorize.pc import (allocation, block_fusion, call_merging, frontend, liveness, lowering,
                          simplify, stack_opt, type_inference)


def compile_program(fn, input_types):
  """The lowered program of `fn` for entry parameters of `input_types` (`ir.VarType`s)."""
  program = simplify.merge_blocks(frontend.build(fn))
  merged = simplify.merge_blocks(call_merging.merge_branch_calls(program))
  if merged == program:
    return _typed_and_lowered(program, input_types)
  try:
    return _typed_and_lowered(merged, input_types)
  except ConversionError:
    # A select of a variable one path leaves unassigned, or of two types: the program as
    # written (its own error, if it has one, names the user's line, not a select).
    return _typed_and_lowered(program, input_types)


def _typed_and_lowered(program, input_types):
  program = type_inference.infer(program, input_types)
  program = liveness.analyze(program)
  program = allocation.allocate(program)
  program = lowering.lower(program)
  program = stack_opt.fuse_pop_push(program)
  return block_fusion.fuse_blocks(program)
