"""Greedy shrinking of a failing program to a small repro.

Candidates, largest cut first: keep one output; delete a statement together with every
statement that uses it; delete one statement and rewire its uses to the most recent visible
value of the same shape and dtype (else `tf.zeros`); the same inside nested blocks; a smaller
n. A candidate is kept when it still fails with the same kind (category and normalized
message) in the same mode; passes repeat until none is kept or the budget runs out.
"""

import copy
import time

from tests.fuzz import ir
from tests.fuzz.programs import TF_DTYPE


def _locations(stmts, prefix=()):
  """Paths to every statement: (index,) at top level, (i, block, j, ...) nested."""
  for k, s in enumerate(stmts):
    yield prefix + (k,)
    for b, block in enumerate(s.blocks):
      yield from _locations(block.stmts, prefix + (k, b))


def _container(program, path):
  stmts = program.stmts
  for k in range(0, len(path) - 1, 2):
    stmts = stmts[path[k]].blocks[path[k + 1]].stmts
  return stmts


def _visible(program, path):
  """Values defined before the statement at `path` and visible there, most recent last
  (block parameters are untyped and left out); invariant tensor inputs first."""
  out = [ir.Var(inp.name, inp.shape, inp.dtype) for inp in program.inputs
         if not inp.per_iteration and not inp.variable]
  stmts = program.stmts
  for depth in range(0, len(path), 2):
    k = path[depth]
    for s in stmts[:k]:
      out.extend(s.outs)
    if depth + 1 < len(path):
      stmts = stmts[k].blocks[path[depth + 1]].stmts
  return out


def _all_stmts(stmts):
  for s in stmts:
    yield s
    for b in s.blocks:
      yield from _all_stmts(b.stmts)


def _rewire(program, old, new):
  for s in _all_stmts(program.stmts):
    s.deps = [new if d == old else d for d in s.deps]
    for b in s.blocks:
      b.ret_deps = [new if d == old else d for d in b.ret_deps]
  program.outputs = [new if o == old else o for o in program.outputs]


def _uses(stmt):
  names = set(stmt.deps)
  for b in stmt.blocks:
    names.update(b.ret_deps)
    for s in _all_stmts(b.stmts):
      names.update(s.deps)
  return names


def delete_with_rewire(program, path):
  cand = copy.deepcopy(program)
  container = _container(cand, path)
  stmt = container.pop(path[-1])
  visible = _visible(program, path)
  for v in stmt.outs:
    fits = [u for u in visible if u.shape == v.shape and u.dtype == v.dtype]
    new = fits[-1].name if fits else f"tf.zeros({list(v.shape)}, {TF_DTYPE[v.dtype]})"
    _rewire(cand, v.name, new)
  return cand


def delete_with_dependents(program, path):
  """Deletes the statement and, transitively, every statement (at any depth) that uses one
  of its values; outputs among them are dropped. None if no output would remain."""
  cand = copy.deepcopy(program)
  stmt = _container(cand, path).pop(path[-1])
  dead = {v.name for v in stmt.outs}

  def prune(stmts):
    keep = []
    for s in stmts:
      if _uses(s) & dead:
        dead.update(v.name for v in s.outs)
        continue
      for b in s.blocks:
        b.stmts = prune(b.stmts)
        if set(b.ret_deps) & dead:
          return None
      keep.append(s)
    return keep

  stmts = prune(cand.stmts)
  if stmts is None:
    return None
  # A block that returned a deleted value made the enclosing statement dead: prune again.
  cand.stmts = stmts
  cand.outputs = [o for o in cand.outputs if o not in dead]
  return cand if cand.outputs else None


def candidates(program):
  if len(program.outputs) > 1:
    for o in program.outputs:
      cand = copy.deepcopy(program)
      cand.outputs = [o]
      yield cand
  paths = list(_locations(program.stmts))
  for path in reversed(paths):
    cand = delete_with_dependents(program, path)
    if cand is not None:
      yield cand
  for path in reversed(paths):
    yield delete_with_rewire(program, path)
  for n in range(1, program.n):
    cand = copy.deepcopy(program)
    cand.n = n
    yield cand


def size(program):
  return sum(1 for _ in _all_stmts(program.stmts)) + len(program.outputs) + program.n


def shrink(program, still_fails, budget_s=300.0, log=None):
  """The smallest program found for which `still_fails(program)` holds (greedy)."""
  deadline = time.time() + budget_s
  best = program
  tries = 0
  improved = True
  while improved and time.time() < deadline:
    improved = False
    for cand in candidates(best):
      if time.time() > deadline:
        break
      if size(cand) >= size(best):
        continue
      try:
        ir.render(cand)
      except (IndexError, KeyError):
        continue
      tries += 1
      if still_fails(cand):
        best = cand
        improved = True
        if log:
          log(f"  shrink: {size(best)} (try {tries})")
        break
  return best
