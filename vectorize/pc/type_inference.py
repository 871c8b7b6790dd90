"""The per-example dtype and shape of every variable and every function's results.

Runs before lowering. Starting from the entry's parameter types, each assignment is traced
for one example (placeholders of its inputs' types in a scratch graph) and each call passes
its argument types to the callee's parameters and takes back the callee's result types, until
nothing changes. Otherwise a variable keeps one dtype and one static shape, or it is an error
naming the line and the fix.

Python numbers get *weak* types, as Python ints and floats have no dtype until they meet a
tensor: a literal, and arithmetic on Python numbers and weak variables (`0`, `count + 1`,
`1 + f(n // 10)` when `f` returns weak values), is weak. A weak value yields to the dtype it
meets: where an expression mixing it with other values fails to trace, its weak variables
take the other values' dtype (an int may become any integer or float dtype, a float any
float dtype), so `for k in range(n)` with an int64 `n` counts in int64 and `acc = 0` then
`acc = acc + x` with a float `x` makes `acc` float. Two weak dtypes join to the wider. A
function whose results stay weak (built from literals only: `return 1`, `return 1 + f(n //
10)`) gives them the dtype of its parameters of the same kind (integer, float) if those
have exactly one, as a per-example loop's Python ints would take its int64 inputs' dtype;
otherwise the literal's own (int32, float32). Afterwards `program.types` maps every variable
and `program.returns` every function.
"""

import tensorflow as tf
from tensorflow.python.framework import func_graph  # pylint: disable=g-direct-tensorflow-import

from vectorize.errors import ConversionError
from vectorize.pc import ir
from vectorize.pc.straight_line import evaluate

_MAX_ROUNDS = 100


class _Typed:
  """A type with its weakness (from a Python number), during inference."""

  def __init__(self, dtype, shape, weak):
    self.type = ir.VarType(dtype, tuple(shape))
    self.weak = weak

  def __eq__(self, other):
    return isinstance(other, _Typed) and (self.type, self.weak) == (other.type, other.weak)


def infer(program, input_types):
  """`program` with `types` and `returns` set; `input_types` are the entry's `VarType`s."""
  return _Inference(program, input_types).run()


class _Inference:

  def __init__(self, program, input_types):
    self.program = program
    main = program.function(program.main)
    if len(input_types) != len(main.params):
      raise ConversionError(f"autobatch: `{main.name}` takes {len(main.params)} inputs, "
                            f"got {len(input_types)}")
    self.types = {p: _Typed(t.dtype, t.shape, False) for p, t in zip(main.params, input_types)}
    self.returns = {}
    self.traces = {}
    self.changed = False

  def run(self):
    self.settle()
    while self.resolve_weak_results():
      self.settle()
    self.check_complete()
    return self.program._replace(
        types={v: t.type for v, t in self.types.items()},
        returns={f: tuple(t.type for t in r) for f, r in self.returns.items()})

  def settle(self):
    """Runs every block's typing until no type changes."""
    for _ in range(_MAX_ROUNDS):
      self.changed = False
      for f in self.program.functions:
        for block in f.blocks:
          self.block(f, block)
      if not self.changed:
        return
    raise ConversionError("autobatch: type inference did not settle; please report this")

  def resolve_weak_results(self):
    """Gives weak results the dtype of their function's parameters of the same kind, where
    those have exactly one dtype. Returns whether a result changed.

    Strong parameters first: a weak one may still take another dtype once the results it
    comes from are resolved (`pow10(ndigits(x))`, both built from literals, int64 `x`), so
    weak parameters decide only where no function changes by strong ones."""
    for strong_only in (True, False):
      changed = False
      for f in self.program.functions:
        results = self.returns.get(f.name)
        if results is None:
          continue
        params = [self.types[p] for p in f.params
                  if p in self.types and not (strong_only and self.types[p].weak)]
        resolved = tuple(_resolved(r, params) for r in results)
        if resolved != results:
          self.returns[f.name] = resolved
          changed = True
      if changed:
        return True
    return False

  def block(self, f, block):
    for instruction in block.body:
      if isinstance(instruction, ir.Assign):
        self.assign(f, instruction)
      elif isinstance(instruction, ir.Call):
        self.call(f, instruction)
    term = block.terminator
    if isinstance(term, ir.Return) and all(v in self.types for v in term.values):
      self.join_results(f, [self.types[v] for v in term.values], term.line)

  def assign(self, f, assign):
    if not all(r in self.types for r in assign.reads):
      return
    for target, typed in zip(assign.targets, self.trace(f, assign)):
      self.join(f, target, typed, assign.line)

  def call(self, f, call):
    callee = self.program.function(call.callee)
    if all(a in self.types for a in call.args):
      for param, arg in zip(callee.params, call.args):
        self.join(f, param, self.types[arg], call.line)
    results = self.returns.get(call.callee)
    if results is None:
      return
    if len(results) != len(call.targets):
      raise _error(f, call.line, f"`{call.callee}` returns {len(results)} values, "
                   f"{len(call.targets)} expected here", "Unpack as many names as it returns")
    for target, typed in zip(call.targets, results):
      self.join(f, target, typed, call.line)

  def join_results(self, f, typed, line):
    old = self.returns.get(f.name)
    if old is not None and len(old) != len(typed):
      raise _error(f, line, f"`{f.name}` returns {len(typed)} values here and {len(old)} "
                   "elsewhere", "Return the same number of values on every path")
    new = tuple(typed) if old is None else tuple(
        _join(o, t, f"a result of {f.name}", f, line) for o, t in zip(old, typed))
    if new != old:
      self.returns[f.name] = new
      self.changed = True

  def join(self, f, var, typed, line):
    old = self.types.get(var)
    new = typed if old is None else _join(old, typed, ir.describe(var), f, line)
    if new != old:
      self.types[var] = new
      self.changed = True

  def trace(self, f, assign):
    """The targets' types, tracing the expression once per distinct input types."""
    inputs = [self.types[r] for r in assign.reads]
    try:
      return self.trace_with(f, assign, inputs)
    except ConversionError as failure:
      outputs = self.trace_yielding(f, assign, inputs)
      if outputs is None:
        raise _mismatch(assign, inputs, failure) from None
      return outputs

  def trace_yielding(self, f, assign, inputs):
    """The targets' types once the weak inputs take a dtype of the values they meet (the
    other inputs' first, then the widest weak one's, then float32 for a float literal in
    the expression), and those inputs' variables that dtype; None if no dtype traces, or
    a variable cannot take it (it took a wider one elsewhere)."""
    for dtype in _candidates(inputs):
      promoted = [_Typed(dtype, t.type.shape, True) if t.weak and _can_yield(
          t.type.dtype, dtype) else t for t in inputs]
      if promoted == inputs:
        continue
      try:
        outputs = self.trace_with(f, assign, promoted)
      except ConversionError:
        continue
      for read, old, new in zip(assign.reads, inputs, promoted):
        if new is not old:
          self.join(f, read, new, assign.line)
      if all(self.types[r] == t for r, t in zip(assign.reads, promoted)):
        return outputs
    return None

  def trace_with(self, f, assign, inputs):
    key = (assign, f.name, tuple((t.type, t.weak) for t in inputs))
    if key not in self.traces:
      with func_graph.FuncGraph("autobatch_types").as_default():   # captures eager tensors
        placeholders = [tf.compat.v1.placeholder(t.type.dtype, t.type.shape) for t in inputs]
        outputs = evaluate(assign, f.namespace, placeholders, where=f.filename)
      typed = []
      for target, out in zip(assign.targets, outputs):
        if not out.shape.is_fully_defined():
          raise _error(f, assign.line, f"{ir.describe(target)} has a per-example shape "
                       f"known only at run time ({out.shape})", "Keep every per-example "
                       "value at a static shape (pad to a maximum size)")
        # Weak where every value it reads is (its dtype follows theirs until they settle:
        # `tf.maximum(a, a)` of a weak `a`); a literal with nothing read is weak too.
        weak = all(t.weak for t in inputs) and (assign.literal or bool(inputs))
        typed.append(_Typed(out.dtype, out.shape.as_list(), weak))
      self.traces[key] = typed
    return self.traces[key]

  def check_complete(self):
    for f in self.program.functions:
      if f.name not in self.returns:
        raise _error(f, f.line, f"`{f.name}` never returns a value on any path that "
                     "terminates", "Give its recursion a base case")
      for block in f.blocks:
        for instruction in block.body + (block.terminator,):
          used = getattr(instruction, "reads", None) or getattr(instruction, "args", None) or (
              getattr(instruction, "values", None) or ())
          if isinstance(instruction, ir.Branch):
            used = (instruction.cond,)
          for v in used:
            if v not in self.types:
              line = getattr(instruction, "line", f.line)
              raise _error(f, line, f"{ir.describe(v)} may be used before it is "
                           "assigned", "Assign it on every path before this line")
        term = block.terminator
        if isinstance(term, ir.Branch):
          t = self.types[term.cond].type
          if t.dtype != tf.bool or t.shape:
            raise _error(f, f.line, f"a condition in `{f.name}` is {t}, not a boolean "
                         "scalar", "Compare to get one boolean per example (reduce a "
                         "vector with tf.reduce_any / tf.reduce_all)")


def _join(old, new, what, f, line):
  """The type of a variable (or result) given `old` elsewhere and `new` here."""
  if old.type.shape != new.type.shape:
    raise _error(f, line, f"{what} is {new.type} here but {old.type} elsewhere", "Keep each "
                 "variable at one shape (use another name, or pad)")
  if old.type.dtype == new.type.dtype:
    return old if old.weak <= new.weak else new
  if old.weak and new.weak:
    return new if _wider(new.type.dtype, old.type.dtype) else old
  weak, strong = (old, new) if old.weak else (new, old)
  if weak.weak and _can_yield(weak.type.dtype, strong.type.dtype):
    return strong
  raise _error(f, line, f"{what} is {new.type} here but {old.type} elsewhere", "Give it one "
               f"dtype: cast where it is assigned (tf.cast(value, tf.{old.type.dtype.name})), "
               "or write a float literal as 0.0 and an integer one as 0")


def _can_yield(weak, dtype):
  """Whether a Python number of `weak`'s kind can take `dtype` (an int any integer or float
  dtype, a float any float dtype: never truncated to an integer)."""
  if dtype.is_floating or dtype.is_complex:
    return weak.is_integer or weak.is_floating or weak.is_complex and dtype.is_complex
  return dtype.is_integer and weak.is_integer


def _wider(a, b):
  """Whether dtype `a` holds more than `b`: floats more than integers, then more bits."""
  return (a.is_floating, a.size) > (b.is_floating, b.size)


def _candidates(inputs):
  """The dtypes weak inputs may take to trace an expression, in the order they are tried."""
  strong = [t.type.dtype for t in inputs if not t.weak]
  weak = sorted({t.type.dtype for t in inputs if t.weak},
                key=lambda d: (d.is_floating, d.size), reverse=True)
  return list(dict.fromkeys(strong + weak + [tf.float32]))


def _resolved(result, params):
  """A weak `result` as the strong dtype of the `params` (their types) of its kind, when
  they have exactly one; otherwise unchanged. A weak parameter counts: one that took int64
  from a loop counter over an int64 range passes its dtype on as a strong one does."""
  if not result.weak:
    return result
  kind = _kind(result.type.dtype)
  dtypes = {p.type.dtype for p in params if _kind(p.type.dtype) == kind}
  if len(dtypes) != 1:
    return result
  return _Typed(dtypes.pop(), result.type.shape, False)


def _kind(dtype):
  return "integer" if dtype.is_integer else "float" if dtype.is_floating else dtype.name


def _mismatch(assign, inputs, failure):
  """`failure` (a trace of `assign` that no weak dtype fixed) with the values' types and,
  when they differ in dtype, the fix: a cast of a narrower one to the widest."""
  message = str(failure).rstrip(".")
  if assign.reads:
    named = [f"{ir.describe(r)} is {t.type}" for r, t in zip(assign.reads, inputs)]
    message += f" (per example, {', '.join(named)})"
  if isinstance(failure.__cause__, tf.errors.OperatorNotAllowedInGraphError):
    return ConversionError(
        message + ". A function this line calls branches in Python on a tensor, so it "
        "must be compiled by autobatch, which takes the functions called by their name "
        "(`f(x)`); one called through an attribute (`module.f(x)`) or a variable runs "
        "as TensorFlow code. Call it by its name (`from module import f`), or branch with "
        "tf.where.")
  dtypes = {t.type.dtype for t in inputs}
  if len(dtypes) > 1:
    widest = max(dtypes, key=lambda d: (d.is_floating, d.size))
    narrower = [r for r, t in zip(assign.reads, inputs) if t.type.dtype != widest]
    name = ir.local_name(narrower[0]) if ir.describe(narrower[0]).startswith("`") else "x"
    message += (f". Give the values one dtype: cast where one is assigned, e.g. "
                f"tf.cast({name}, tf.{widest.name})")
  return ConversionError(message + ".")


def _error(f, line, problem, fix):
  return ConversionError(f"{f.filename}:{line}: autobatch: {problem}. {fix}.")
