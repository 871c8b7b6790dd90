"""Calls and returns -> pushes, moves, gotos and indirect gotos.

Runs after allocation. A block is split after every call: the call's block pushes the
`stack` variables live after the call, moves the arguments into the callee's parameters,
pushes the continuation's label on the return stack and goes to the callee's entry; the
continuation pops those variables back and moves the results out of the *result slots*.
A return moves its values into the result slots (`ret.<position>.<type>`, shared by every
function returning that type there) and goes to the popped return address. A call in tail
position (its results returned at once, nothing saved) pushes nothing: the callee returns
straight to this function's caller, so tail recursion runs in constant stack. Afterwards the
program has no `Call` or `Return`, `results` names the entry's result slots, and every
block body reads: pops, straight-line code, pushes, at most one return-address push.
"""

from vectorize.pc import ir
from vectorize.pc.allocation import NONE, REGISTER, STACK
from vectorize.pc.liveness import live_after_call


def lower(program):
  """The lowered `program` (see the module docstring)."""
  types = dict(program.types)
  storage = dict(program.storage)
  slots = {}
  for f, results in program.returns.items():
    slots[f] = tuple(f"ret.{k}.{t}" for k, t in enumerate(results))
    for slot, t in zip(slots[f], results):
      types[slot], storage[slot] = t, REGISTER
  functions = tuple(_lower_function(program, f, slots, storage) for f in program.functions)
  return program._replace(functions=functions, types=types, storage=storage,
                          results=slots[program.main], lowered=True)


def _lower_function(program, f, slots, storage):
  blocks = []
  for block in f.blocks:
    calls = dict(live_after_call(program, block))
    label, body, resume = block.label, [], 0
    for index, instruction in enumerate(block.body):
      if not isinstance(instruction, ir.Call):
        body.append(instruction)
        continue
      saved = sorted(v for v in calls[index] if storage[v] == STACK)
      callee = program.function(instruction.callee)
      body += [ir.Push(v) for v in saved]
      body.append(_move(callee.params, instruction.args, storage))
      if _is_tail_call(block, index, saved, slots, f.name):
        blocks.append(ir.Block(label, _clean(body), ir.Goto(callee.entry), callee.name))
        label = None
        break
      resume += 1
      next_label = f"{block.label}.r{resume}"
      body.append(ir.PushReturn(next_label))
      blocks.append(ir.Block(label, _clean(body), ir.Goto(callee.entry), callee.name))
      label = next_label
      body = [ir.Pop(v) for v in reversed(saved)]
      body.append(_move(instruction.targets, slots[callee.name], storage))
    if label is None:
      continue
    term = block.terminator
    if isinstance(term, ir.Return):
      body.append(_move(slots[f.name], term.values, storage))
      term = ir.IndirectGoto()
    blocks.append(ir.Block(label, _clean(body), term))
  return f._replace(blocks=tuple(blocks))


def _is_tail_call(block, index, saved, slots, caller):
  call = block.body[index]
  term = block.terminator
  return (index == len(block.body) - 1 and not saved and isinstance(term, ir.Return)
          and tuple(term.values) == tuple(call.targets)
          and slots[call.callee] == slots[caller])


def _move(targets, sources, storage):
  pairs = [(t, s) for t, s in zip(targets, sources) if storage.get(t) != NONE]
  return ir.Move(tuple(t for t, _ in pairs), tuple(s for _, s in pairs))


def _clean(body):
  return tuple(i for i in body if not (isinstance(i, ir.Move) and not i.targets))
