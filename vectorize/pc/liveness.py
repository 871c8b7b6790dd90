"""Live variables at the start of every block, and after every call.

Runs before lowering, on each function alone (a call reads its arguments and defines its
targets; a return reads its values). Afterwards `program.live_in` maps each block label to the
variables live on entry; `live_after_call` gives the variables live just after a call, which
are those a recursive call must save. `live_out_lowered` answers the VM's question on the
lowered program: which registers a block must write back.
"""

from vectorize.errors import ConversionError
from vectorize.pc import ir
from vectorize.pc.ir import describe
from vectorize.pc.straight_line import defines, uses


def analyze(program):
  """`program` with `live_in` set (block label -> frozenset of variables)."""
  live_in = {}
  for f in program.functions:
    live_in.update(_function_live_in(f))
    unbound = sorted(live_in[f.entry] - set(f.params))
    if unbound:
      raise _unbound_error(f, unbound[0])
  return program._replace(live_in=live_in)


def _unbound_error(f, var):
  """A variable live at the entry may be read before any assignment (Python would raise)."""
  lines = [getattr(i, "line", f.line) for b in f.blocks for i in b.body + (b.terminator,)
           if var in set(uses(i)) | set(getattr(i, "args", ())) | set(_terminator_uses(i))]
  return ConversionError(f"{f.filename}:{min(lines, default=f.line)}: autobatch: "
                         f"{describe(var)} may be used before it is assigned. Assign it "
                         "on every path before this line.")


def live_after_call(program, block):
  """[(index of each `Call` in block.body, variables live just after it)]."""
  live = set(live_out(program, block)) | set(_terminator_uses(block.terminator))
  found = []
  for index in reversed(range(len(block.body))):
    instruction = block.body[index]
    if isinstance(instruction, ir.Call):
      found.append((index, frozenset(live - set(instruction.targets))))
    live = _step_back(instruction, live)
  return list(reversed(found))


def live_out(program, block):
  return frozenset().union(*[program.live_in[s] for s in successors(block.terminator)])


def predecessors(blocks, label):
  """The labels of `blocks` (label -> block) that go or return to `label`."""
  found = []
  for other in blocks.values():
    returns = [i.label for i in other.body if isinstance(i, ir.PushReturn)]
    if label in successors(other.terminator) or label in returns:
      found.append(other.label)
  return found


def successors(term):
  if isinstance(term, ir.Goto):
    return (term.label,)
  if isinstance(term, ir.Branch):
    return (term.if_true, term.if_false)
  return ()


def _function_live_in(f):
  return _solve(f.blocks, lambda block: (successors(block.terminator), ()))[0]


def _solve(blocks, exits):
  """(live in, live out) per block label, to the fixpoint; `exits(block)` gives the labels
  a block may go to and what is read where it leaves the blocks (a halt's results)."""
  live_in = {b.label: frozenset() for b in blocks}
  live_out = dict(live_in)
  changed = True
  while changed:
    changed = False
    for block in reversed(blocks):
      labels, read_outside = exits(block)
      live = set().union(*[live_in[s] for s in labels], read_outside)
      live_out[block.label] = frozenset(live)
      live |= set(_terminator_uses(block.terminator))
      for instruction in reversed(block.body):
        live = _step_back(instruction, live)
      if frozenset(live) != live_in[block.label]:
        live_in[block.label] = frozenset(live)
        changed = True
  return live_in, live_out


def _step_back(instruction, live):
  if isinstance(instruction, ir.Call):
    return (live - set(instruction.targets)) | set(instruction.args)
  return (live - set(defines(instruction))) | set(uses(instruction))


def _terminator_uses(term):
  if isinstance(term, ir.Branch):
    return (term.cond,)
  if isinstance(term, ir.Return):
    return term.values
  return ()


def live_out_lowered(program):
  """Block label -> the variables some path from the block's end reads before writing,
  on the lowered program, across functions (registers are shared by every frame: a frame's
  value that its callee overwrites was pushed before the call). A return may resume at any
  continuation (after a tail call it returns to its caller's caller) or halt, where the
  entry's result slots are read. The VM writes back only these (`vm._Machine.writes`): a
  block that ends in a return need not write its locals, only the result slots."""
  blocks = program.blocks()
  resumes = tuple(i.label for b in blocks for i in b.body if isinstance(i, ir.PushReturn))
  halt = frozenset(program.results or ())

  def exits(block):
    if isinstance(block.terminator, ir.IndirectGoto):
      return resumes, halt
    return successors(block.terminator), ()

  return _solve(blocks, exits)[1]
