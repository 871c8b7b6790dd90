"""A per-example Python function (and the functions it calls) -> basic-block IR.

Reads the source with `ast`. Program functions are the entry function and every function it
reaches by name (closure, then globals) that recurses, holds control flow, or reaches a
program function; other user functions stay inside expressions and are traced like TF ops.
`and`, `or` and `not` become elementwise logic on booleans (a traced tensor has no truth
value), and so do chained comparisons (`lo <= x < hi`, each operand evaluated once); a
conditional expression becomes a select of both sides; `while True:` has no exit of its own.
Calls of program functions are hoisted out of expressions into `Call` instructions (their
arguments first, left to right), `if` / `while` / `for ... in range(...)` become branches,
and every `return` ends its block. What the mode cannot take is a `ConversionError` naming
the user's file and line.
"""

import ast
import functools
import inspect
import itertools
import operator
import textwrap
import types

import tensorflow as tf

from vectorize.errors import ConversionError
from vectorize.pc import ir

_CONTROL = (ast.If, ast.While, ast.For, ast.Break, ast.Continue)
_LIBRARY_PREFIXES = ("tensorflow", "keras", "numpy", "vectorize", "converters", "builtins")


def build(fn):
  """The IR `Program` of `fn`: entry function first, then the functions it calls."""
  sources = _Discovery(fn)
  counts = _result_counts(sources)
  functions = tuple(_Translator(f, sources, counts).function()
                    for f in sources.program_functions)
  return ir.Program(functions=functions, main=sources.names[fn])


def error(where, line, problem, fix):
  return ConversionError(f"{where}:{line}: autobatch: {problem}. {fix}")


class _Source:
  """A function's parsed definition, its namespace and where it lives."""

  def __init__(self, fn):
    try:
      text = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
      raise ConversionError(f"autobatch: cannot read the source of {fn!r} ({e}); define "
                            "it with `def` in a file") from None
    tree = ast.parse(text)
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef):
      raise ConversionError(f"autobatch: {fn!r} is not defined by a `def` statement; "
                            "pass a plain Python function")
    self.fn = fn
    self.node = node
    self.offset = fn.__code__.co_firstlineno - 1
    self.filename = fn.__code__.co_filename
    self.namespace = dict(fn.__globals__)
    self.namespace.update(_LOGIC)
    if fn.__closure__:
      for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
        try:
          self.namespace[name] = cell.cell_contents
        except ValueError:
          pass
    self.callees = [self.namespace[c.func.id] for c in ast.walk(node)
                    if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                    and _is_user_function(self.namespace.get(c.func.id))]
    self.has_control = any(isinstance(n, _CONTROL) for n in ast.walk(node)) or sum(
        isinstance(n, ast.Return) for n in ast.walk(node)) > 1
    self.local_names = {a.arg for a in node.args.args} | _stored_names(node)

  def calls_program_function(self, node, program_functions):
    """The program function `node` calls by name (not a local of the same name), or None."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
      return None
    if node.func.id in self.local_names:
      return None
    callee = self.namespace.get(node.func.id)
    return callee if callee in program_functions else None

  def line(self, node):
    return self.offset + getattr(node, "lineno", 1)


def _stored_names(node):
  """The names `node`'s statements assign; not a comprehension's own variables
  (`[x[i] for i in ...]`: `i` lives in the comprehension's scope, not the function's)."""
  comprehended = {id(n) for c in ast.walk(node)
                  if isinstance(c, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp))
                  for g in c.generators for n in ast.walk(g.target)}
  return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and
          isinstance(n.ctx, ast.Store) and id(n) not in comprehended}


def _is_user_function(obj):
  if not isinstance(obj, types.FunctionType) or obj.__name__ == "<lambda>":
    return False
  module = getattr(obj, "__module__", "") or ""
  return not module.startswith(_LIBRARY_PREFIXES)


class _Discovery:
  """The user functions reachable from the entry, and which of them are program functions."""

  def __init__(self, entry):
    self.sources = {}
    todo = [entry]
    while todo:
      fn = todo.pop()
      if fn not in self.sources:
        self.sources[fn] = _Source(fn)
        todo.extend(self.sources[fn].callees)
    chosen = {entry} | {f for f, s in self.sources.items() if s.has_control}
    chosen |= {f for f in self.sources if f in self._reach(f)}       # recursive
    changed = True
    while changed:                                                    # reaches a chosen one
      grown = {f for f, s in self.sources.items() if set(s.callees) & chosen}
      changed = not grown <= chosen
      chosen |= grown
    self.program_functions = [entry] + [f for f in self.sources if f in chosen and f is not entry]
    self.names = {}
    for f in self.program_functions:
      name = f.__name__
      for k in itertools.count(2):
        if name not in self.names.values():
          break
        name = f"{f.__name__}_{k}"
      self.names[f] = name

  def _reach(self, fn):
    seen, todo = set(), list(self.sources[fn].callees)
    while todo:
      f = todo.pop()
      if f not in seen:
        seen.add(f)
        todo.extend(self.sources[f].callees)
    return seen


def _result_counts(discovery):
  """Program function -> how many values it returns, read from its `return` statements as
  Python would count them: a tuple's length, a returned program call's own count (`return
  helper(...)` forwards every value `helper` returns), anything else one. Counts spread
  through forwarding calls until nothing changes; a function whose returns all forward
  calls of unknown count (no base case) counts one. Returns that disagree are type
  inference's error, which names both."""
  counts = {}
  changed = True
  while changed:
    changed = False
    for fn in discovery.program_functions:
      if fn in counts:
        continue
      source = discovery.sources[fn]
      for node in ast.walk(source.node):
        count = _returned_count(node, source, discovery.names, counts)
        if count is not None:
          counts[fn] = count
          changed = True
          break
  return {fn: counts.get(fn, 1) for fn in discovery.program_functions}


def _returned_count(node, source, program_functions, counts):
  """How many values `return ...` at `node` gives (None: not a return, or not known yet)."""
  if not isinstance(node, ast.Return) or node.value is None:
    return None
  if isinstance(node.value, ast.Tuple):
    return len(node.value.elts)
  callee = source.calls_program_function(node.value, program_functions)
  if callee is not None:
    return counts.get(callee)
  return 1


class _Translator:
  """Statements of one program function -> blocks."""

  def __init__(self, fn, discovery, counts):
    self.source = discovery.sources[fn]
    self.names = discovery.names
    self.name = discovery.names[fn]
    self.counts = counts
    node = self.source.node
    args = node.args
    if (args.vararg or args.kwarg or args.kwonlyargs or args.defaults or args.posonlyargs):
      raise self.error(node, f"`{node.name}` takes *args, **kwargs, keyword-only or default "
                       "parameters", "Give it plain positional parameters")
    self.params = tuple(a.arg for a in args.args)
    self.locals = set(self.source.local_names)      # grows by the temporaries
    self.blocks = []          # [label, body list, terminator]
    self.counter = itertools.count()
    self.temps = itertools.count()
    self.loops = []           # (continue label, break label)
    self.current = self.new_block()

  def error(self, node, problem, fix):
    return error(self.source.filename, self.source.line(node), problem, fix)

  def var(self, name):
    return f"{self.name}.{name}"

  def function(self):
    node = self.source.node
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
      body = body[1:]                                       # docstring
    self.statements(body)
    if self.current is not None:
      self.terminate(("fall off", node))
    blocks = self.reachable()
    return ir.Function(self.name, tuple(self.var(p) for p in self.params), blocks,
                       self.source.namespace, self.source.filename, self.source.line(node))

  # --- blocks -----------------------------------------------------------------------------

  def new_block(self):
    block = [f"{self.name}.{next(self.counter)}", [], None]
    self.blocks.append(block)
    return block

  def emit(self, instruction):
    if self.current is None:              # code after return / break: unreachable
      self.current = self.new_block()
    self.current[1].append(instruction)

  def terminate(self, terminator):
    if self.current is None:
      self.current = self.new_block()
    self.current[2] = terminator
    self.current = None

  def start(self, block):
    if self.current is not None:
      self.terminate(ir.Goto(block[0]))
    self.current = block

  def reachable(self):
    by_label = {b[0]: b for b in self.blocks}
    seen, todo = [], [self.blocks[0][0]]
    while todo:
      label = todo.pop()
      if label in seen:
        continue
      seen.append(label)
      term = by_label[label][2]
      if isinstance(term, tuple) and term and term[0] == "fall off":
        raise self.error(term[1], f"`{self.source.node.name}` can reach its end without "
                         "`return`", "Return a value on every path")
      todo.extend(reversed([t for t in _successors(term)]))
    order = [b for b in self.blocks if b[0] in seen]
    return tuple(ir.Block(label, tuple(body), term) for label, body, term in order)

  # --- statements ---------------------------------------------------------------------------

  def statements(self, statements):
    for s in statements:
      self.statement(s)

  def statement(self, s):
    method = getattr(self, "_" + type(s).__name__, None)
    if method is None:
      raise self.error(s, f"`{type(s).__name__}` statements are not supported",
                       "Use assignments, if/elif/else, while, for over range(...) and return")
    method(s)

  def _Pass(self, s):
    pass

  def _Expr(self, s):
    if isinstance(s.value, ast.Constant):
      return
    raise self.error(s, "an expression statement's value is discarded (only assignments "
                     "and returns have an effect per example)", "Assign or return the value")

  def _Assign(self, s):
    if len(s.targets) != 1:
      raise self.error(s, "chained assignment `a = b = ...`", "Assign one target at a time")
    self.assign(s.targets[0], s.value, s)

  def _AnnAssign(self, s):
    if s.value is None:
      return
    self.assign(s.target, s.value, s)

  def _AugAssign(self, s):
    if not isinstance(s.target, ast.Name):
      raise self.error(s, "augmented assignment to a subscript or attribute",
                       "Per-example values are immutable: build a new value instead")
    value = ast.BinOp(left=ast.Name(s.target.id, ast.Load()), op=s.op, right=s.value)
    self.assign(s.target, ast.copy_location(value, s), s)

  def assign(self, target, value, s):
    names = self.target_names(target, s)
    if isinstance(target, ast.Name) or not _is_call_of(value, self.program_callee):
      self.compute(tuple(self.var(n) for n in names), value, s)
      return
    self.call(value, tuple(self.var(n) for n in names))

  def target_names(self, target, s):
    if isinstance(target, ast.Name):
      return (target.id,)
    if isinstance(target, (ast.Tuple, ast.List)) and all(
        isinstance(e, ast.Name) for e in target.elts):
      return tuple(e.id for e in target.elts)
    raise self.error(s, "assignment to a subscript, attribute or starred target",
                     "Assign to plain names (a, b = ...); per-example values are immutable")

  def _If(self, s):
    cond = self.value_var(s.test, s)
    then, after = self.new_block(), None
    otherwise = self.new_block() if s.orelse else None
    after = self.new_block()
    self.terminate(ir.Branch(cond, then[0], (otherwise or after)[0]))
    self.current = then
    self.statements(s.body)
    if self.current is not None:
      self.terminate(ir.Goto(after[0]))
    if otherwise is not None:
      self.current = otherwise
      self.statements(s.orelse)
      if self.current is not None:
        self.terminate(ir.Goto(after[0]))
    self.current = after

  def _While(self, s):
    if s.orelse:
      raise self.error(s, "`while ... else`", "Move the else part after the loop")
    header = self.new_block()
    self.start(header)
    body, after = self.new_block(), self.new_block()
    if _is_always_true(s.test):     # `while True:` is left only by break and return
      self.terminate(ir.Goto(body[0]))
    else:
      self.terminate(ir.Branch(self.value_var(s.test, s), body[0], after[0]))
    self.loop_body(body, header, after, s.body)
    self.current = after

  def _For(self, s):
    if s.orelse:
      raise self.error(s, "`for ... else`", "Move the else part after the loop")
    if not (isinstance(s.target, ast.Name) and _is_call_of(s.iter, lambda n: n == "range")
            and 1 <= len(s.iter.args) <= 3 and not s.iter.keywords):
      raise self.error(s, "only `for name in range(...)` loops are supported",
                       "Loop over range(...) and index the sequence, or use `while`")
    args = s.iter.args
    start = args[0] if len(args) > 1 else ast.Constant(0)
    stop = args[1] if len(args) > 1 else args[0]
    step = args[2] if len(args) > 2 else ast.Constant(1)
    counter = f"{ir.COUNTER_PREFIX}{next(self.temps)}"
    self.locals.add(counter)
    self.compute((self.var(counter),), start, s)
    stop_var = self.value_var(stop, s)
    step_var = self.value_var(step, s)
    header = self.new_block()
    self.start(header)
    test = _range_test(counter, ir.local_name(stop_var), ir.local_name(step_var), step)
    cond = self.value_var(ast.copy_location(test, s), s)
    body, latch, after = self.new_block(), self.new_block(), self.new_block()
    self.terminate(ir.Branch(cond, body[0], after[0]))
    self.current = body
    self.compute((self.var(s.target.id),), ast.Name(counter, ast.Load()), s)
    self.loop_body(None, latch, after, s.body)
    self.start(latch)
    increment = ast.BinOp(ast.Name(counter, ast.Load()), ast.Add(),
                          ast.Name(ir.local_name(step_var), ast.Load()))
    self.compute((self.var(counter),), increment, s)
    self.terminate(ir.Goto(header[0]))
    self.current = after

  def loop_body(self, body, continue_to, break_to, statements):
    if body is not None:
      self.current = body
    self.loops.append((continue_to[0], break_to[0]))
    self.statements(statements)
    self.loops.pop()
    if self.current is not None:
      self.terminate(ir.Goto(continue_to[0]))

  def _Break(self, s):
    self.terminate(ir.Goto(self.loops[-1][1]))

  def _Continue(self, s):
    self.terminate(ir.Goto(self.loops[-1][0]))

  def _Return(self, s):
    if s.value is None:
      raise self.error(s, "`return` without a value", "Return the per-example result")
    callee = self.source.calls_program_function(s.value, self.names)
    if callee is not None:          # `return helper(...)`: every value helper returns
      values = tuple(self.temp() for _ in range(self.counts[callee]))
      self.call(s.value, values)
    else:
      elements = s.value.elts if isinstance(s.value, ast.Tuple) else [s.value]
      values = tuple(self.value_var(e, s) for e in elements)
    self.terminate(ir.Return(values, self.source.line(s)))

  # --- expressions --------------------------------------------------------------------------

  def program_callee(self, name):
    if name in self.locals:
      return False
    return self.source.namespace.get(name) in self.names

  def value_var(self, expr, s):
    """A variable holding `expr`'s value: the local itself, or a new temporary."""
    if isinstance(expr, ast.Name) and expr.id in self.locals:
      return self.var(expr.id)
    temp = self.temp()
    if _is_call_of(expr, self.program_callee):
      self.call(expr, (temp,))
    else:
      self.compute((temp,), expr, s)
    return temp

  def temp(self):
    name = f"{ir.TEMPORARY_PREFIX}{next(self.temps)}"
    self.locals.add(name)
    return self.var(name)

  def call(self, node, targets):
    callee_fn = self.source.namespace[node.func.id]
    callee = self.names[callee_fn]
    params = list(inspect.signature(callee_fn).parameters)
    if any(isinstance(a, ast.Starred) for a in node.args) or any(
        k.arg is None for k in node.keywords):
      raise self.error(node, f"a call of `{node.func.id}` with *args or **kwargs",
                       "Pass each argument by position or name")
    given = list(node.args) + [None] * (len(params) - len(node.args))
    for k in node.keywords:
      if k.arg not in params or given[params.index(k.arg)] is not None:
        raise self.error(node, f"`{node.func.id}` gets an unknown or repeated argument "
                         f"`{k.arg}`", "Match the function's parameters")
      given[params.index(k.arg)] = k.value
    if len(given) != len(params) or any(g is None for g in given):
      raise self.error(node, f"`{node.func.id}` takes {len(params)} arguments",
                       "Pass every parameter (defaults are not supported)")
    args = tuple(self.value_var(a, node) for a in given)
    self.emit(ir.Call(targets, callee, args, self.source.line(node)))

  def compute(self, targets, expr, s):
    """Hoists program calls out of `expr`, then assigns the rest to `targets`."""
    expr = _Hoister(self, s).visit(_copy(expr))
    reads = tuple(sorted({self.var(n.id) for n in ast.walk(expr)
                          if isinstance(n, ast.Name) and n.id in self.locals}))
    literal = _is_python_arithmetic(expr, self.locals)
    self.emit(ir.Assign(targets, ast.unparse(expr), reads, self.source.line(s), literal))


_AND, _OR, _NOT = "__autobatch_and__", "__autobatch_or__", "__autobatch_not__"
_CHAIN, _IF_ELSE = "__autobatch_chain__", "__autobatch_if_else__"
SELECT = "__autobatch_select__"      # what block fusion turns a copy under a branch into


def select(target, cond, if_true, if_false, reads, line):
  """`target = select(cond, if_true, if_false)` (two expressions, reading `reads`): how the
  passes after the frontend (block fusion, call merging) write a choice between values."""
  return ir.Assign((target,), f"{SELECT}({ir.local_name(cond)}, {if_true}, {if_false})",
                   tuple(dict.fromkeys((cond,) + tuple(reads))), line)


def _boolean(x):
  return tf.cast(x, tf.bool)


def _all(*values):
  return functools.reduce(tf.logical_and, [_boolean(v) for v in values])


def _any(*values):
  return functools.reduce(tf.logical_or, [_boolean(v) for v in values])


def _none(value):
  return tf.logical_not(_boolean(value))


_COMPARISONS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
                ast.NotEq: "!="}
_COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
            "==": operator.eq, "!=": operator.ne}


def _chain(symbols, *operands):
  """`a < b <= c` as `(a < b) & (b <= c)`: each operand is evaluated once, as an argument,
  and every comparison is made (no short circuit, like `and` on tensors)."""
  return _all(*[_COMPARE[s](a, b) for s, a, b in zip(symbols, operands, operands[1:])])


def _if_else(cond, if_true, if_false):
  """`if_true if cond else if_false` as a select of two values already computed. A Python
  number on one side takes the tensor's dtype on the other (`x if c else 0`, float `x`)."""
  if not tf.is_tensor(if_true) and tf.is_tensor(if_false):
    if_true = tf.constant(if_true, if_false.dtype)
  if not tf.is_tensor(if_false) and tf.is_tensor(if_true):
    if_false = tf.constant(if_false, if_true.dtype)
  return tf.where(_boolean(cond), if_true, if_false)


_LOGIC = {_AND: _all, _OR: _any, _NOT: _none, _CHAIN: _chain, _IF_ELSE: _if_else,
          SELECT: tf.where}


class _Hoister(ast.NodeTransformer):
  """Replaces each program call in an expression by a temporary assigned just before."""

  def __init__(self, translator, statement):
    self.t = translator
    self.statement = statement

  def visit_Call(self, node):
    if not (isinstance(node.func, ast.Name) and self.t.program_callee(node.func.id)):
      return self.generic_visit(node)
    temp = self.t.temp()
    self.t.call(node, (temp,))
    return ast.copy_location(ast.Name(ir.local_name(temp), ast.Load()), node)

  def _refuse(self, node, what):
    if any(isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
           and self.t.program_callee(c.func.id) for c in ast.walk(node)):
      raise self.t.error(self.statement, f"a call of a program function inside {what} "
                         "(it would run whether or not that part is evaluated)",
                         "Use an if statement instead")
    return node

  def visit_BoolOp(self, node):
    """`a and b` / `a or b` on tensors: elementwise logic on booleans (no short circuit)."""
    self._refuse(node, "`and` / `or`")
    helper = _AND if isinstance(node.op, ast.And) else _OR
    values = [self.visit(v) for v in node.values]
    return ast.copy_location(ast.Call(ast.Name(helper, ast.Load()), values, []), node)

  def visit_UnaryOp(self, node):
    if not isinstance(node.op, ast.Not):
      return self.generic_visit(node)
    operand = self.visit(node.operand)
    return ast.copy_location(ast.Call(ast.Name(_NOT, ast.Load()), [operand], []), node)

  def visit_Compare(self, node):
    """`lo <= x < hi` (Python's `lo <= x and x < hi`, `x` evaluated once): elementwise `and`
    of the comparisons. Python skips the operands after a false comparison, so a call of a
    program function there is refused, as in `and`."""
    symbols = [_COMPARISONS.get(type(op)) for op in node.ops]
    if len(node.ops) == 1 or None in symbols:
      return self.generic_visit(node)
    for operand in node.comparators[1:]:
      self._refuse(operand, "a chained comparison's later operands")
    operands = [self.visit(x) for x in [node.left] + node.comparators]
    symbols = ast.Tuple([ast.Constant(s) for s in symbols], ast.Load())
    return ast.copy_location(ast.Call(ast.Name(_CHAIN, ast.Load()), [symbols] + operands, []),
                             node)

  def visit_IfExp(self, node):
    """`a if c else b`: a select of both sides, each computed for every member (like an
    `if` on a tensor between plain assignments); a call of a program function in it is
    refused (it would run whichever side is taken)."""
    self._refuse(node, "a conditional expression")
    parts = [self.visit(x) for x in (node.test, node.body, node.orelse)]
    return ast.copy_location(ast.Call(ast.Name(_IF_ELSE, ast.Load()), parts, []), node)

  def visit_Lambda(self, node):
    return self._refuse(node, "a lambda")

  def visit_ListComp(self, node):
    return self._refuse(node, "a comprehension")

  visit_GeneratorExp = visit_SetComp = visit_DictComp = visit_ListComp


_ARITHMETIC = (ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Load)


def _is_python_arithmetic(expr, local_names):
  """Whether `expr` is arithmetic on Python numbers and local variables only (`0`, `1 + n`,
  `count + 1`, `k`): a Python number when every variable it reads holds one, whose dtype
  then yields to the values it meets (type inference's *weak* types)."""
  for node in ast.walk(expr):
    if isinstance(node, ast.Constant):
      if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
        return False
    elif isinstance(node, ast.Name):
      if node.id not in local_names:
        return False
    elif not isinstance(node, _ARITHMETIC):
      return False
  return True


def _is_always_true(test):
  """Whether a loop test is a truthy literal (`while True:`, `while 1:`): the loop then
  has no exit of its own, so the code after it runs only where a `break` goes there (and
  the function cannot fall off its end through it)."""
  return isinstance(test, ast.Constant) and bool(test.value)


def _copy(node):
  return ast.parse(ast.unparse(node), mode="eval").body


def _is_call_of(node, accept):
  return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
          and bool(accept(node.func.id)))


def _range_test(counter, stop, step, step_node):
  """`counter < stop` (or `>` for a negative literal step; both checked for a tensor step)."""
  i, end, by = (ast.Name(x, ast.Load()) for x in (counter, stop, step))
  if isinstance(step_node, ast.Constant):
    op = ast.Lt() if step_node.value > 0 else ast.Gt()
    return ast.Compare(i, [op], [end])
  return ast.parse(f"(({step} > 0) & ({counter} < {stop})) | (({step} < 0) & ({counter} > "
                   f"{stop}))", mode="eval").body


def _successors(term):
  if isinstance(term, ir.Goto):
    return [term.label]
  if isinstance(term, ir.Branch):
    return [term.if_true, term.if_false]
  return []
