"""The program representation: statements over named values, rendered as Python source.

A program is kept as data, not text, so the shrinker can delete a statement and rewire its
uses to another value of the same shape and dtype; `render` turns it into a standalone module
(inputs from seeded numpy data, then `make_body(*inputs)` returning `body(i)`), which is both
what the checker executes and the repro a failure prints.
"""

import dataclasses
import re
from typing import List, Optional, Tuple

NMAX = 4  # Leading size of per-iteration inputs: every n the fuzzer uses is <= NMAX.


@dataclasses.dataclass
class Var:
  """A value of the body: static shape and dtype, and whether it is exact (computed only
  by operations that round the same in any batch layout), which discontinuous ops need."""
  name: str
  shape: Tuple[int, ...]
  dtype: str
  exact: bool = True


@dataclasses.dataclass
class Input:
  """A captured input: a tensor argument of make_body, or a module-level tf.Variable.
  Per-iteration inputs carry a leading NMAX axis that the body indexes with i."""
  name: str
  shape: Tuple[int, ...]
  dtype: str
  seed: int
  per_iteration: bool
  variable: bool = False
  low: Optional[int] = None  # integer data range [low, high), for trip counts and indices
  high: Optional[int] = None
  stateful: bool = False  # a variable the body writes (assign_add...), and may read


@dataclasses.dataclass
class Block:
  """A nested body (a branch, a loop body, a tape's scope, a tf.function). `inline` blocks
  are emitted in place; others as `def {name}(params):` returning `ret` formatted with
  `ret_deps`."""
  params: List[str]
  stmts: List["Stmt"]
  ret: str
  ret_deps: List[str]
  inline: bool = False
  decorator: str = ""


@dataclasses.dataclass
class Stmt:
  """One statement defining `outs`. `lines` are format templates: {0}, {1}... are `deps`,
  {o0}, {o1}... the outs, {p} a unique prefix, {b0}... block function names, {r0}... the
  return expressions of inline blocks; a line `{B0}` expands to block 0's code."""
  outs: List[Var]
  lines: List[str]
  deps: List[str]
  kind: str
  blocks: List[Block] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Program:
  seed: int
  n: int
  inputs: List[Input]
  stmts: List[Stmt]
  outputs: List[str]
  grad_input: Optional[str] = None  # pinned by the shrinker; else chosen from the seed
  out_form: str = "tuple"  # "tuple": body returns (a, b,); "dict": {"o0": a, "o1": b}

  def kinds(self):
    """The statement kinds used, nested ones included (for statistics)."""
    out = []

    def walk(stmts):
      for s in stmts:
        out.append(s.kind)
        for b in s.blocks:
          walk(b.stmts)
    walk(self.stmts)
    return out


_DATA_HELPER = '''def data(shape, dtype, seed, low=None, high=None):
  """Seeded test data: normal floats, integers in [low, high) (default [-5, 10)), bools."""
  rng = np.random.default_rng(seed)
  if dtype == "bool":
    return rng.random(shape) < 0.5
  if dtype.startswith("int"):
    return rng.integers(-5 if low is None else low, 10 if high is None else high,
                        shape).astype(dtype)
  return rng.standard_normal(shape).astype(dtype)
'''


def _fmt(template, stmt, prefix, block_rets):
  kw = {f"o{k}": v.name for k, v in enumerate(stmt.outs)}
  kw.update({f"b{k}": f"{prefix}_b{k}" for k in range(len(stmt.blocks))})
  kw.update({f"r{k}": r for k, r in enumerate(block_rets)})
  kw["p"] = prefix
  return template.format(*stmt.deps, **kw)


def _block_ret(block):
  return block.ret.format(*block.ret_deps)


def render_stmts(stmts, indent):
  lines = []
  for s in stmts:
    prefix = s.outs[0].name if s.outs else "t"
    rets = [_block_ret(b) for b in s.blocks]
    for line in s.lines:
      m = re.fullmatch(r"(\s*)\{B(\d+)\}", line)
      if m:
        pad = indent + m.group(1)
        k = int(m.group(2))
        b = s.blocks[k]
        if b.inline:
          lines.extend(render_stmts(b.stmts, pad))
        else:
          if b.decorator:
            lines.append(pad + b.decorator)
          lines.append(f"{pad}def {prefix}_b{k}({', '.join(b.params)}):")
          body = render_stmts(b.stmts, pad + "  ")
          lines.extend(body)
          lines.append(f"{pad}  return {_block_ret(b)}")
      else:
        lines.append(indent + _fmt(line, s, prefix, rets))
  return lines


def used_inputs(program):
  """The inputs the rendered body refers to, in declaration order."""
  text = "\n".join(render_stmts(program.stmts, "")) + "\n" + ", ".join(program.outputs)
  return [inp for inp in program.inputs if re.search(rf"\b{inp.name}\b", text)]


def render(program):
  """The program as a standalone module defining N, the inputs, `make_body` and `ARGS`
  (the names of make_body's tensor arguments)."""
  inputs = used_inputs(program)
  out = ["import numpy as np", "import tensorflow as tf", "", "import vectorize", "", "",
         _DATA_HELPER, ""]
  out.append(f"N = {program.n}")
  for inp in inputs:
    shape = ([NMAX] if inp.per_iteration else []) + list(inp.shape)
    extra = "" if inp.low is None else f", low={inp.low}, high={inp.high}"
    value = f'data({shape}, "{inp.dtype}", {inp.seed}{extra})'
    ctor = "tf.Variable" if inp.variable else "tf.constant"
    out.append(f"{inp.name} = {ctor}({value})")
  args = [inp.name for inp in inputs if not inp.variable]
  out += ["", "", f"def make_body({', '.join(args)}):", "  def body(i):"]
  out += render_stmts(program.stmts, "    ")
  if program.out_form == "dict":
    outs = ", ".join(f'"o{k}": {o}' for k, o in enumerate(program.outputs))
    out.append(f"    return {{{outs}}}")
  else:
    outs = ", ".join(program.outputs)
    out.append(f"    return ({outs},)")
  out += ["  return body", "", "", f"ARGS = ({', '.join(args)}{',' if args else ''})", ""]
  return "\n".join(out)
