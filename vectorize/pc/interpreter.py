"""The reference interpreter: runs a program for ONE example, eagerly, in plain Python.

It is the oracle the VM is tested against. Before lowering, a `Call` is a Python call
(the host's recursion); after lowering, calls are pushes, a return stack and indirect gotos
on per-variable Python lists, exactly as the VM does them for a whole batch.
"""

import tensorflow as tf

from vectorize.pc import ir
from vectorize.pc.straight_line import StraightLine, assigned, evaluate


def run(program, *inputs, max_steps=10**6):
  """The entry function's results (a tuple of tensors) for one example's inputs."""
  inputs = [tf.convert_to_tensor(x) for x in inputs]
  if program.lowered:
    return _run_lowered(program, inputs, max_steps)
  return _call(program, program.function(program.main), inputs, [max_steps])


def _call(program, f, args, budget):
  env = {p: _as(program.types[p], x) for p, x in zip(f.params, args)}
  blocks = {b.label: b for b in f.blocks}
  block = f.blocks[0]
  while True:
    budget[0] -= 1
    if budget[0] < 0:
      raise RuntimeError("interpreter: step budget exhausted")
    for instruction in block.body:
      if isinstance(instruction, ir.Assign):
        values = evaluate(instruction, f.namespace, [env[r] for r in instruction.reads],
                          program.types, f.filename)
        env.update(zip(instruction.targets, values))
      else:   # ir.Call
        callee = program.function(instruction.callee)
        results = _call(program, callee, [env[a] for a in instruction.args], budget)
        env.update(zip(instruction.targets, results))
    term = block.terminator
    if isinstance(term, ir.Return):
      return tuple(_as(t, env[v]) for t, v in zip(program.returns[f.name], term.values))
    if isinstance(term, ir.Branch):
      block = blocks[term.if_true if bool(env[term.cond]) else term.if_false]
    else:
      block = blocks[term.label]


def _as(var_type, value):
  """`value` at the dtype inference gave the parameter or result it is passed to (a Python
  number's dtype yields: `return 0` in a function returning int64), as lowering's moves
  do."""
  return tf.cast(value, var_type.dtype) if value.dtype != var_type.dtype else value


def _run_lowered(program, inputs, max_steps):
  main = program.function(program.main)
  registers = dict(zip(main.params, inputs))
  stacks = {}
  returns = []
  blocks = {b.label: b for b in program.blocks()}
  namespaces = {f.name: f.namespace for f in program.functions}
  label = main.entry
  for _ in range(max_steps):
    block = blocks[label]
    code = StraightLine(block.body, assigned(block.body), _cond(block), namespaces, program.types,
                        program.function_of(label).filename)
    popped = []
    for instruction in block.body:
      if isinstance(instruction, ir.Pop):
        popped.append(stacks[instruction.var].pop())
      elif isinstance(instruction, ir.Peek):
        popped.append(stacks[instruction.var][-1])
    outputs = code.run(*[registers[r] for r in code.reads], *popped)
    for var, value in zip(code.pushes, outputs):
      stacks.setdefault(var, []).append(value)
    registers.update(zip(code.writes, outputs[len(code.pushes):]))
    returns.extend(i.label for i in block.body if isinstance(i, ir.PushReturn))
    term = block.terminator
    if isinstance(term, ir.Goto):
      label = term.label
    elif isinstance(term, ir.Branch):
      label = term.if_true if bool(outputs[-1]) else term.if_false
    elif returns:
      label = returns.pop()
    else:
      return tuple(registers[r] for r in program.results)
  raise RuntimeError("interpreter: step budget exhausted")


def _cond(block):
  return block.terminator.cond if isinstance(block.terminator, ir.Branch) else None
