"""The program-counter IR: a program is functions of basic blocks over named variables.

Variables are qualified by their function (`fib.n`), so one flat storage map serves every
function; an `Assign`'s Python expression still uses the user's local names (`n - 1`), and
its `reads` say which qualified variables those names are. Every value class is immutable and
prints as one line, so `str(program)` is readable. The frontend emits `Assign`, `Call`,
`Goto`, `Branch`, `Return`; lowering replaces calls and returns by `Move`, `Push`, `Pop`,
`PushReturn`, `Goto` and `IndirectGoto`; stack optimization adds `Peek`.
"""

from typing import Any, Mapping, NamedTuple, Optional, Tuple


def local_name(var):
  """`fib.n` -> `n`: the identifier an expression uses for a qualified variable."""
  return var.partition(".")[2]


def owner(var):
  """`fib.n` -> `fib`: the function a qualified variable belongs to."""
  return var.partition(".")[0]


TEMPORARY_PREFIX = "_pc_t"    # the frontend's names for a subexpression's value
COUNTER_PREFIX = "_pc_i"      # ... and for a `for` loop's counter


def describe(var):
  """How an error names a variable: the user's own name, or what a frontend name holds
  (an error names the line, so the user can find the value)."""
  name = local_name(var)
  if name.startswith(COUNTER_PREFIX):
    return "the `for` loop's counter"
  if name.startswith(TEMPORARY_PREFIX):
    return "a value computed on this line"
  return f"`{name}`"


class Assign(NamedTuple):
  """`targets = expr`: straight-line per-example Python (no calls of program functions)."""
  targets: Tuple[str, ...]
  expr: str
  reads: Tuple[str, ...]
  line: int
  literal: bool = False   # expr is arithmetic on Python numbers and variables: while every
                          # variable it reads holds a Python number, so does it, and its
                          # dtype yields to the values it meets (type inference)

  def __str__(self):
    return f"{', '.join(self.targets)} = {self.expr}"


class Call(NamedTuple):
  """`targets = callee(args)`: a call of a program function (before lowering)."""
  targets: Tuple[str, ...]
  callee: str
  args: Tuple[str, ...]
  line: int

  def __str__(self):
    return f"{', '.join(self.targets)} = call {self.callee}({', '.join(self.args)})"


class Move(NamedTuple):
  """A parallel copy `targets <- sources` (argument passing, return values)."""
  targets: Tuple[str, ...]
  sources: Tuple[str, ...]

  def __str__(self):
    return f"{', '.join(self.targets)} <- {', '.join(self.sources)}"


class Push(NamedTuple):
  """Saves the variable's current value on its own stack."""
  var: str

  def __str__(self):
    return f"push {self.var}"


class Pop(NamedTuple):
  """Restores the variable from the top of its stack, removing that entry."""
  var: str

  def __str__(self):
    return f"pop {self.var}"


class Peek(NamedTuple):
  """Restores the variable from the top of its stack, leaving it there (a fused pop+push)."""
  var: str

  def __str__(self):
    return f"peek {self.var}"


class PushReturn(NamedTuple):
  """Pushes a return address (a block label) on the return stack."""
  label: str

  def __str__(self):
    return f"push return {self.label}"


class Goto(NamedTuple):
  label: str

  def __str__(self):
    return f"goto {self.label}"


class Branch(NamedTuple):
  """Goes to `if_true` or `if_false` by a per-example boolean scalar."""
  cond: str
  if_true: str
  if_false: str

  def __str__(self):
    return f"if {self.cond} goto {self.if_true} else {self.if_false}"


class Return(NamedTuple):
  """Returns the variables' values (before lowering)."""
  values: Tuple[str, ...]
  line: int

  def __str__(self):
    return f"return {', '.join(self.values)}"


class IndirectGoto(NamedTuple):
  """Pops a return address and goes there; with an empty return stack the member halts."""

  def __str__(self):
    return "goto popped return address"


class Block(NamedTuple):
  """Straight-line `body`, then `terminator`; `calls`: the function a call block (after
  lowering) goes to, named by a stack overflow there."""
  label: str
  body: Tuple[Any, ...]
  terminator: Any
  calls: Optional[str] = None

  def __str__(self):
    lines = [f"  {self.label}:"] + [f"    {i}" for i in self.body]
    return "\n".join(lines + [f"    {self.terminator}"])


class Function(NamedTuple):
  """One program function. `namespace` resolves the free names of its expressions."""
  name: str
  params: Tuple[str, ...]
  blocks: Tuple[Block, ...]
  namespace: Mapping[str, Any]
  filename: str
  line: int

  @property
  def entry(self):
    return self.blocks[0].label

  def __str__(self):
    head = f"def {self.name}({', '.join(self.params)}):  # {self.filename}:{self.line}"
    return "\n".join([head] + [str(b) for b in self.blocks])


class VarType(NamedTuple):
  """The per-example dtype and shape of a variable (no batch axis)."""
  dtype: Any
  shape: Tuple[int, ...]

  def __str__(self):
    return f"{self.dtype.name}{list(self.shape)}"


class Program(NamedTuple):
  """Functions, the entry function, and what the passes have learned so far."""
  functions: Tuple[Function, ...]
  main: str
  types: Optional[Mapping[str, VarType]] = None        # variable -> type
  returns: Optional[Mapping[str, Tuple[VarType, ...]]] = None   # function -> result types
  live_in: Optional[Mapping[str, frozenset]] = None    # block label -> live variables
  storage: Optional[Mapping[str, str]] = None          # variable -> storage kind
  results: Optional[Tuple[str, ...]] = None            # after lowering: main's result slots
  lowered: bool = False

  def function(self, name):
    for f in self.functions:
      if f.name == name:
        return f
    raise KeyError(name)

  def blocks(self):
    return tuple(b for f in self.functions for b in f.blocks)

  def function_of(self, label):
    return self.function(owner(label))

  def __str__(self):
    text = "\n".join(str(f) for f in self.functions)
    if self.storage is not None:
      kept = sorted((v, k) for v, k in self.storage.items() if k != "none")
      text += "\nstorage: " + ", ".join(f"{v}:{k}" for v, k in kept)
    return text
