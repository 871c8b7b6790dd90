"""Call merging: `if c: x = f(a) else: y = f(b)` becomes one call, `f(select(c, a, b))`.

Runs on the frontend's IR, after block merging, before type inference. Every call site is
a block of its own after lowering (its pushes, its return address) and another where the
members resume, so a call in each branch of an `if` splits the members waiting there into
two groups that the VM runs in turn, one step each, at every call and every return: NUTS's
tree doubling calls `build_tree` on the left end or the right end, and that split was 40%
of its steps. When both branches only compute the same argument expressions and call the
same function, one call site takes the arguments by a select on the branch's condition,
and each result lands where its branch put it by another select. A variable one branch
passes and replaces by a result, paired with the one the other branch passes in its place
(NUTS's left end and right end), keeps across the call only the one its branch leaves
alone, `select(c, right's, left's)`: one value saved on the stack where two were.

A branch's own argument expression is never computed for members of the other branch (it
could fail for them): the branches must compute the same expressions, differing only in
the variables and constants they pass and the variables they assign. The selects read a
variable on both paths; where one is not assigned on some path, liveness then refuses the
program (`pipeline` compiles it again without this pass).
"""

from vectorize.pc import ir
from vectorize.pc.frontend import select
from vectorize.pc.liveness import predecessors
from vectorize.pc.straight_line import is_copy


def merge_branch_calls(program):
  """`program` with every `if` whose two branches call the same function one call site."""
  return program._replace(functions=tuple(_merged(f) for f in program.functions))


def _merged(f):
  blocks = {b.label: b for b in f.blocks}
  names = _Names(f)
  for label in [b.label for b in f.blocks]:
    if label not in blocks:
      continue
    block = blocks[label]
    term = block.terminator
    if not isinstance(term, ir.Branch) or term.if_true == term.if_false:
      continue
    left, right = blocks[term.if_true], blocks[term.if_false]
    if not _same_call(f, blocks, label, left, right, term.cond):
      continue
    blocks[label] = block._replace(body=block.body + _one_call(term.cond, left, right, names),
                                   terminator=left.terminator)
    del blocks[left.label], blocks[right.label]
  return f._replace(blocks=tuple(blocks[b.label] for b in f.blocks if b.label in blocks))


def _same_call(f, blocks, label, left, right, cond):
  """Whether `left` and `right` (the two sides of `label`'s branch on `cond`) compute the
  same expressions, then call the same function, and go to the same place."""
  split = [_split(side) for side in (left, right)]
  for side, parts in zip((left, right), split):
    if side.label == f.entry or predecessors(blocks, side.label) != [label]:
      return False
    if parts is None or cond in _assigned(side.body):
      return False
  (before_l, call_l), (before_r, call_r) = split
  if call_l.callee != call_r.callee or left.terminator != right.terminator:
    return False
  if isinstance(left.terminator, ir.Branch):
    return False
  if len(before_l) != len(before_r):
    return False
  for a, b in zip(before_l, before_r):
    if not all(_temporary(t) for t in a.targets + b.targets):
      return False
    if not (_same(a, b) or is_copy(a) and is_copy(b)):
      return False
  if any(len(set(c.targets)) != len(c.targets) for c in (call_l, call_r)):
    return False      # `a, a = f(...)`: which one lands is Python's order, kept as is
  return True


def _one_call(cond, left, right, names):
  """The merged branch's body: the left side's expressions, the arguments that differ
  selected, the call, and each differing result selected into its variable."""
  (before_l, call_l), (before_r, call_r) = _split(left), _split(right)
  body, renamed = [], {}
  for a, b in zip(before_l, before_r):
    body.append(a)
    if _same(a, b):
      renamed.update(zip(b.targets, a.targets))
    else:                  # two copies (a constant each, say): both computed, one passed
      body.append(b)
  right_args = [renamed.get(b, b) for b in call_r.args]
  args = []
  for a, b in zip(call_l.args, right_args):
    if a == b:
      args.append(a)
      continue
    args.append(names.fresh())
    body.append(_select(args[-1], cond, a, b, call_l.line))
  results, chosen = [], []
  for a, b in zip(call_l.targets, call_r.targets):
    if a == b:
      results.append(a)
      continue
    results.append(names.fresh())
    chosen.append((a, b, results[-1]))
  left_value = {a: r for a, _, r in chosen}
  right_value = {b: r for _, b, r in chosen}
  kept = {}
  for a, b in zip(call_l.args, right_args):
    if (a in left_value and a not in right_value and b in right_value and
        b not in left_value and a not in kept and b not in kept):
      kept[a] = kept[b] = names.fresh()
      body.append(_select(kept[a], cond, b, a, call_l.line))
  body.append(ir.Call(tuple(results), call_l.callee, tuple(args), call_l.line))
  for var in dict.fromkeys([a for a, _, _ in chosen] + [b for _, b, _ in chosen]):
    old = kept.get(var, var)
    body.append(_select(var, cond, left_value.get(var, old), right_value.get(var, old),
                        call_l.line))
  return tuple(body)


def _split(side):
  """(the assignments before its call, the call assigning what the side finally assigns:
  `t = f(x); y = t` as `y = f(x)`), or None if the side is not of that form."""
  calls = [k for k, i in enumerate(side.body) if isinstance(i, ir.Call)]
  if len(calls) != 1:
    return None
  before, call, after = side.body[:calls[0]], side.body[calls[0]], side.body[calls[0] + 1:]
  if not all(isinstance(i, ir.Assign) for i in before):
    return None
  final = dict(zip(call.targets, call.targets))
  for copy in after:
    if not (isinstance(copy, ir.Assign) and is_copy(copy) and len(copy.reads) == 1 and
            copy.reads[0] in final and _temporary(copy.reads[0]) and
            final[copy.reads[0]] == copy.reads[0]):
      return None
    final[copy.reads[0]] = copy.targets[0]
  return before, call._replace(targets=tuple(final[t] for t in call.targets))


def _same(a, b):
  return (a.expr, a.reads, len(a.targets)) == (b.expr, b.reads, len(b.targets))


def _select(target, cond, if_true, if_false, line):
  """`target = select(cond, if_true, if_false)` of three variables."""
  return select(target, cond, ir.local_name(if_true), ir.local_name(if_false),
                (if_true, if_false), line)


def _assigned(body):
  return {t for i in body for t in getattr(i, "targets", ())}


def _temporary(var):
  return ir.local_name(var).startswith(ir.TEMPORARY_PREFIX)


class _Names:
  """Fresh temporaries of function `f` (`_pc_tm0`, `_pc_tm1`, ...: the frontend's are
  `_pc_t<number>`)."""

  def __init__(self, f):
    self.prefix = f.name
    self.count = 0

  def fresh(self):
    self.count += 1
    return f"{self.prefix}.{ir.TEMPORARY_PREFIX}m{self.count - 1}"
