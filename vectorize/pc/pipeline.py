"""The pass order, written once: Python function -> lowered, optimized IR.

frontend -> block merging -> type inference -> liveness -> allocation -> lowering ->
pop-push fusion -> block fusion.
"""

from vectorize.pc import (allocation, block_fusion, frontend, liveness, lowering, simplify,
                          stack_opt, type_inference)


def compile_program(fn, input_types):
  """The lowered program of `fn` for entry parameters of `input_types` (`ir.VarType`s)."""
  program = simplify.merge_blocks(frontend.build(fn))
  program = type_inference.infer(program, input_types)
  program = liveness.analyze(program)
  program = allocation.allocate(program)
  program = lowering.lower(program)
  program = stack_opt.fuse_pop_push(program)
  return block_fusion.fuse_blocks(program)
