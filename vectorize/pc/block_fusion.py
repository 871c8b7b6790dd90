"""Block fusion: fewer blocks on every member's path, so fewer VM steps.

Runs last, on the lowered program. Every block a member visits is one VM step, and a step
costs about the same whatever the block does, so this pass trades a little code size for
steps, in two ways:

- *if-conversion*: `if c goto X else Y` where X only copies values (`x = y`, `x = 1.0`)
  and goes on to Y becomes one block with `x = select(c, y, x)`; a copy cannot fail, so
  doing it for every member is safe (an expression could fail for members whose branch
  guards it, and is never moved).
- *tail duplication*: a block that ends in `goto T` takes T's body and terminator when T
  is small (a callee's entry test, a return's moves) or has no other way in. T must not
  pop (the VM reads a block's pops before its code) and the two must not push on the same
  stack, nor push a return address and return.

Blocks no member can reach any more are dropped (the entry function's entry is kept).
Afterwards no block ends in a `goto` to a block it could take in.
"""

from vectorize.pc import ir
from vectorize.pc.allocation import REGISTER, STACK
from vectorize.pc.frontend import select
from vectorize.pc.liveness import predecessors, successors
from vectorize.pc.straight_line import is_copy

_SMALL = 2        # Assigns a block may hold and still be copied into each predecessor


def fuse_blocks(program):
  """The lowered `program` with copy-only branches if-converted and small blocks (or
  blocks with one way in) merged into the blocks that go to them."""
  entry = program.function(program.main).entry
  blocks = {b.label: b for b in program.blocks()}
  blocks = _reachable({k: _if_converted(b, blocks, program.storage) for k, b in blocks.items()},
                      entry)
  absorbed = {label: {label} for label in blocks}   # each block takes in each label once
  while True:
    merged = _merge_one(blocks, absorbed)
    if merged is None:
      break
    absorbed[merged.label].add(blocks[merged.label].terminator.label)
    blocks = _reachable(dict(blocks, **{merged.label: merged}), entry)
  functions = tuple(f._replace(blocks=tuple(blocks[b.label] for b in f.blocks
                                            if b.label in blocks))
                    for f in program.functions)
  return program._replace(functions=tuple(f for f in functions if f.blocks))


def _if_converted(block, blocks, storage):
  term = block.terminator
  if not isinstance(term, ir.Branch):
    return block
  for copies, join, taken in ((term.if_true, term.if_false, True),
                              (term.if_false, term.if_true, False)):
    side = blocks[copies]
    if (side.terminator != ir.Goto(join) or predecessors(blocks, copies) != [block.label]
        or not all(isinstance(i, ir.Assign) and is_copy(i) for i in side.body)
        or any(term.cond in i.targets or storage.get(i.targets[0]) not in (REGISTER, STACK)
               for i in side.body)):
      continue
    return block._replace(body=block.body + tuple(_select(term.cond, i, taken)
                                                  for i in side.body),
                          terminator=ir.Goto(join))
  return block


def _select(cond, copy, taken):
  """`x = select(cond, copy's value, x)` (arguments swapped when the copy is not `taken`)."""
  (target,) = copy.targets
  old = ir.local_name(target)
  new, keep = (copy.expr, old) if taken else (old, copy.expr)
  return select(target, cond, new, keep, copy.reads + (target,), copy.line)


def _merge_one(blocks, absorbed):
  """A block merged with the block its `goto` goes to, or None if none can be."""
  for block in blocks.values():
    if not isinstance(block.terminator, ir.Goto):
      continue
    target = blocks[block.terminator.label]
    if target.label not in absorbed[block.label] and _mergeable(block, target, blocks):
      return block._replace(body=block.body + target.body, terminator=target.terminator,
                            calls=block.calls or target.calls)
  return None


def _mergeable(block, target, blocks):
  small = sum(isinstance(i, ir.Assign) for i in target.body) <= _SMALL
  if not small and predecessors(blocks, target.label) != [block.label]:
    return False
  if any(isinstance(i, (ir.Pop, ir.Peek)) for i in target.body):
    return False
  pushes = [_pushed(block), _pushed(target)]
  if set(pushes[0]) & set(pushes[1]):
    return False
  returns = "return address" in pushes[0] and isinstance(target.terminator, ir.IndirectGoto)
  return not returns


def _pushed(block):
  return [i.var if isinstance(i, ir.Push) else "return address" for i in block.body
          if isinstance(i, (ir.Push, ir.PushReturn))]


def _reachable(blocks, entry):
  """The blocks a member can reach from `entry`."""
  seen, todo = set(), [entry]
  while todo:
    label = todo.pop()
    if label in seen:
      continue
    seen.add(label)
    block = blocks[label]
    todo.extend(successors(block.terminator))
    todo.extend(i.label for i in block.body if isinstance(i, ir.PushReturn))
  return {label: b for label, b in blocks.items() if label in seen}
