"""Runs the program-counter passes up to a given one, for the pass tests."""

import tensorflow as tf

from vectorize.pc import (allocation, block_fusion, frontend, ir, liveness, lowering, stack_opt,
                          type_inference)

INT = ir.VarType(tf.int32, ())
FLOAT = ir.VarType(tf.float32, ())

_ORDER = ("frontend", "types", "liveness", "allocation", "lowering", "stack_opt", "fusion")
_PASSES = {"types": type_inference.infer, "liveness": liveness.analyze,
           "allocation": allocation.allocate, "lowering": lowering.lower,
           "stack_opt": stack_opt.fuse_pop_push, "fusion": block_fusion.fuse_blocks}


def run_until(fn, types, last):
  """The program of `fn` after the passes up to and including `last`."""
  program = frontend.build(fn)
  for name in _ORDER[1:_ORDER.index(last) + 1]:
    program = _PASSES[name](program, types) if name == "types" else _PASSES[name](program)
  return program


def before(fn, types, name):
  """The program just before pass `name`, and that pass."""
  previous = _ORDER[_ORDER.index(name) - 1]
  program = run_until(fn, types, previous)
  if name == "types":
    return program, lambda p: type_inference.infer(p, types)
  return program, _PASSES[name]


def snapshot(program):
  """Everything a pass could change, as plain comparable data."""
  return (str(program), program._replace(functions=()),
          tuple((f.name, f.params, f.blocks) for f in program.functions))


def instructions(program, kind):
  return [i for b in program.blocks() for i in b.body + (b.terminator,) if isinstance(i, kind)]
