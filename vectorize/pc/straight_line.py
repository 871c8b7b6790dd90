"""A block's straight-line body as one per-example Python function.

The interpreter calls it on one member's values, the VM hands it to the pfor engine to run
for every member waiting at the block, and type inference traces its assignments one by one:
all three share how an `Assign`'s expression is evaluated (`evaluate`).
"""

import ast
import functools
import linecache

import tensorflow as tf

from vectorize.errors import ConversionError
from vectorize.pc import ir


@functools.lru_cache(maxsize=None)
def _code(expr, names):
  return compile(f"lambda {', '.join(names)}: ({expr})", "<autobatch>", "eval")


def evaluate(assign, namespace, values, types=None, where=""):
  """The values of `assign.targets` (tensors) given the values of `assign.reads`."""
  code = _code(assign.expr, tuple(ir.local_name(r) for r in assign.reads))
  fn = eval(code, namespace)  # pylint: disable=eval-used  (the user's own expression)
  try:
    result = fn(*values)
  except ConversionError:
    raise
  except Exception as e:  # the user's expression: name its line
    raise ConversionError(f"{where}:{assign.line}: autobatch: {_shown(assign, where)} failed "
                          f"for one example: {type(e).__name__}: {e}") from e
  results = (result,) if len(assign.targets) == 1 else _unpack(result, assign, where)
  out = []
  for target, value in zip(assign.targets, results):
    want = types.get(target) if types is not None else None
    if want is not None and not tf.is_tensor(value):
      value = tf.constant(value, want.dtype)
    value = tf.convert_to_tensor(value)
    if want is not None and value.dtype != want.dtype:   # a literal's type yielded
      value = tf.cast(value, want.dtype)
    out.append(value)
  return out


def _shown(assign, where):
  """The user's own line for an error about `assign`, or the assignment itself where the
  line cannot be read (the IR's form names frontend temporaries the user never wrote)."""
  text = linecache.getline(where, assign.line).strip()
  return f"`{text}`" if text else f"`{assign}`"


def _unpack(result, assign, where):
  if tf.is_tensor(result) and result.shape.rank:
    result = tf.unstack(result)
  if not isinstance(result, (tuple, list)) or len(result) != len(assign.targets):
    raise ConversionError(f"{where}:{assign.line}: autobatch: {_shown(assign, where)} does "
                          f"not give {len(assign.targets)} values")
  return tuple(result)


class StraightLine:
  """A block body (`Assign`, `Move`, `Push`, `Pop`, `Peek`) as `run(inputs) -> outputs`.

  inputs: the values of `reads` (variables read before the block defines them), then of
  `pops` (what each `Pop` / `Peek` restores). outputs: the values pushed, in order, then the
  values of `writes` at the end of the block, then the branch condition if `cond` is set.
  """

  def __init__(self, body, writes, cond, namespaces, types, where):
    self.body = body
    self.namespaces = namespaces   # function name -> namespace of its expressions
    self.types = types
    self.where = where
    defined, reads, pops, pushes = set(), [], [], []
    for instruction in body:
      used, made = _uses(instruction), _defines(instruction)
      reads.extend(v for v in used if v not in defined and v not in reads)
      if isinstance(instruction, (ir.Pop, ir.Peek)):
        pops.append(instruction.var)
      if isinstance(instruction, ir.Push):
        pushes.append(instruction.var)
      defined.update(made)
    wanted = list(writes) + ([cond] if cond else [])
    reads.extend(v for v in wanted if v not in defined and v not in reads)
    self.reads, self.pops, self.pushes = tuple(reads), tuple(pops), tuple(pushes)
    self.writes = tuple(writes)
    self.cond = cond

  def run(self, *inputs):
    env = dict(zip(self.reads, inputs[:len(self.reads)]))
    popped = iter(inputs[len(self.reads):])
    pushed = []
    for instruction in self.body:
      if isinstance(instruction, ir.Assign):
        namespace = self.namespaces[ir.owner(instruction.targets[0])]
        values = [env[r] for r in instruction.reads]
        env.update(zip(instruction.targets,
                       evaluate(instruction, namespace, values, self.types, self.where)))
      elif isinstance(instruction, ir.Move):
        env.update(self.moved(instruction, env))
      elif isinstance(instruction, (ir.Pop, ir.Peek)):
        env[instruction.var] = next(popped)
      elif isinstance(instruction, ir.Push):
        pushed.append(env[instruction.var])
      elif not isinstance(instruction, ir.PushReturn):
        raise TypeError(f"not a straight-line instruction: {instruction}")
    outputs = pushed + [env[w] for w in self.writes]
    return outputs + [env[self.cond]] if self.cond else outputs

  def moved(self, move, env):
    """A `Move`'s targets and values, every source read before any target is written: it
    is a parallel copy (the tail call `rotate(b, c, a)` moves `a, b, c <- b, c, a`, and
    `c` must take the old `a`, not the `b` just moved into `a`)."""
    values = [self.cast(t, env[s]) for t, s in zip(move.targets, move.sources)]
    return list(zip(move.targets, values))

  def cast(self, var, value):
    want = self.types.get(var) if self.types is not None else None
    if want is not None and value.dtype != want.dtype:    # a literal's type yielded
      return tf.cast(value, want.dtype)
    return value


def _uses(instruction):
  if isinstance(instruction, ir.Assign):
    return instruction.reads
  if isinstance(instruction, ir.Move):
    return instruction.sources
  if isinstance(instruction, ir.Push):
    return (instruction.var,)
  return ()


def _defines(instruction):
  if isinstance(instruction, (ir.Assign, ir.Move)):
    return instruction.targets
  if isinstance(instruction, (ir.Pop, ir.Peek)):
    return (instruction.var,)
  return ()


uses, defines = _uses, _defines


def assigned(body):
  """Variables a block body assigns, moves or restores, in first-assignment order."""
  written = []
  for instruction in body:
    for var in _defines(instruction):
      if var not in written:
        written.append(var)
  return written


def is_copy(assign):
  """`x = y`, `x = 1.0` or `x = -1.0`: an assignment that computes nothing."""
  expr = ast.parse(assign.expr, mode="eval").body
  if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.UAdd)):
    expr = expr.operand if isinstance(expr.operand, ast.Constant) else expr
  return isinstance(expr, (ast.Name, ast.Constant))
