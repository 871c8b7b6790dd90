"""Seeded random bodies, shape-correct by construction.

`generate(seed)` builds a `Program` (see ir.py) statement by statement: each generator picks
operands already in scope (or a new per-iteration load `x[i]` or a new loop-invariant capture)
whose static shapes fit, and records the result's shape. The pool covers what a user's body
does: elementwise ops broadcasting across ranks, reductions, matmul/einsum, shape and slicing
ops, gathers/scatters, conv/pool, softmax, sort/top-k, casts, random ops, conditionals with
per-iteration and invariant predicates, switch_case, while loops with per-iteration trip
counts, TensorArrays, GradientTapes, nested tf.functions and variable reads; newer seeds
also draw ops converted later (late_pool.py) and values whose size differs per iteration,
returned or consumed (ragged_pool.py), and pfors nested in the body. Values that go
through discontinuous ops (floor, comparisons, argmax, sort) are kept exact, so rounding
differences between the batched and the per-iteration computation cannot flip them.
"""

import random

import numpy as np

from tests.fuzz.ir import Block, Input, Program, Stmt, Var
from tests.fuzz.late_pool import LatePool
from tests.fuzz.pattern_pool import PatternPool
from tests.fuzz.ragged_pool import RAGGED, RaggedPool, fixed

FLOAT, INT, BOOL = "float32", "int32", "bool"
EXTENDED_FROM = 1_000_000   # seeds from here also draw the ops of `g_newer_ops`
NEWEST_FROM = 1_100_000     # seeds from here also draw ragged_pool.py and late_pool.py
NESTED_FROM = 1_200_000     # seeds from here also draw pfors nested in the body
PATTERNS_FROM = 3_000_000   # seeds from here also draw pattern_pool.py (state, ragged
                            # TensorArrays, mixed dtypes) and return tuples/dicts of dtypes
RECURRENCES_FROM = 3_600_000  # seeds from here also draw variables the body reads and
                              # writes (pattern_pool.g_state_recurrence)
PADDINGS_FROM = 4_200_000   # seeds from here also draw pads by per-iteration paddings
INDEX_VALUES_FROM = 4_700_000  # seeds from here also draw values of the index and constants
INDEX_SLICES_FROM = 4_900_000  # seeds from here also draw slices at the index (`x[i, 1:]`)
TF_DTYPE = {"float32": "tf.float32", "int32": "tf.int32", "bool": "tf.bool",
            "int64": "tf.int64", "float64": "tf.float64", "string": "tf.string",
            "state": "tf.int32", RAGGED: "tf.float32"}


def broadcast(s1, s2):
  """numpy's broadcast of two static shapes, or None."""
  r = max(len(s1), len(s2))
  a, b = (1,) * (r - len(s1)) + tuple(s1), (1,) * (r - len(s2)) + tuple(s2)
  out = []
  for x, y in zip(a, b):
    if x == y or y == 1:
      out.append(x)
    elif x == 1:
      out.append(y)
    else:
      return None
  return tuple(out)


def size(shape):
  return int(np.prod(shape, dtype=np.int64))


# Unary float ops: (template, exact, needs exact input).
UNARY_FLOAT = [
    ("tf.sin({0})", False, False), ("tf.cos({0})", False, False),
    ("tf.tanh({0})", False, False), ("tf.sigmoid({0})", False, False),
    ("tf.abs({0})", True, False), ("-{0}", True, False), ("tf.square({0})", True, False),
    ("tf.nn.relu({0})", True, False), ("tf.nn.relu6({0})", True, False),
    ("tf.nn.elu({0})", False, False), ("tf.nn.selu({0})", False, False),
    ("tf.nn.softplus({0})", False, False), ("tf.nn.silu({0})", False, False),
    ("tf.nn.gelu({0})", False, False), ("tf.math.erf({0})", False, False),
    ("tf.exp(tf.tanh({0}))", False, False), ("tf.math.log1p(tf.abs({0}))", False, False),
    ("tf.sqrt(tf.abs({0}) + 1.0)", False, False),
    ("tf.math.rsqrt(tf.square({0}) + 1.0)", False, False),
    ("tf.math.reciprocal(tf.abs({0}) + 1.0)", False, False),
    ("tf.floor({0})", True, True), ("tf.round({0})", True, True),
    ("tf.math.ceil({0})", True, True), ("tf.sign({0})", True, True),
    ("tf.math.atan({0})", False, False), ("tf.clip_by_value({0}, -0.5, 0.5)", True, False),
    ("tf.math.softsign({0})", False, False), ("tf.nn.leaky_relu({0}, 0.2)", False, False),
    ("tf.math.log_sigmoid({0})", False, False), ("tf.stop_gradient({0})", True, False),
    ("tf.identity({0})", True, False), ("tf.math.asinh({0})", False, False),
    ("tf.math.lgamma(tf.abs({0}) + 1.0)", False, False),
    ("tf.cast(tf.cast({0}, tf.float64) * 1.5, tf.float32)", True, False),
    ("tf.math.reduce_sum({0}, axis=[]) * 2.0", True, False),
]
UNARY_INT = ["-{0}", "tf.abs({0})", "tf.math.floormod({0}, 3)", "{0} // 2",
             "tf.bitwise.bitwise_and({0}, 5)", "tf.square({0})", "tf.maximum({0}, 0)",
             "tf.math.sign({0})", "tf.cast(tf.cast({0}, tf.int64) + 1, tf.int32)"]
# Binary ops: (template, exact).
BINARY_FLOAT = [
    ("{0} + {1}", True), ("{0} - {1}", True), ("{0} * {1}", True),
    ("tf.maximum({0}, {1})", True), ("tf.minimum({0}, {1})", True),
    ("{0} / (tf.abs({1}) + 1.0)", False), ("tf.math.squared_difference({0}, {1})", False),
    ("tf.math.atan2({0}, {1})", False), ("tf.math.divide_no_nan({0}, {1})", False),
    ("tf.pow(tf.abs({0}) + 1.0, tf.tanh({1}))", False), ("tf.math.add({0}, {1})", True),
]
BINARY_INT = ["{0} + {1}", "{0} - {1}", "{0} * {1}", "tf.maximum({0}, {1})",
              "tf.minimum({0}, {1})", "tf.math.floordiv({0}, tf.abs({1}) + 1)",
              "tf.math.floormod({0}, tf.abs({1}) + 1)", "tf.bitwise.bitwise_xor({0}, {1})"]


class Generator(RaggedPool, LatePool, PatternPool):
  """Builds one program; `scope` is the list of values visible at the current point."""

  def __init__(self, seed):
    self.seed = seed
    self.rng = random.Random(seed)
    self.inputs = []
    self.counter = 0
    self.scope = []
    self.stmts = []  # the statement list being filled (top level or a block)
    self.depth = 0

  # -- names, inputs, statements -------------------------------------------------------

  def fresh(self, prefix="a"):
    self.counter += 1
    return f"{prefix}{self.counter}"

  def new_input(self, shape, dtype, per_iteration, variable=False, low=None, high=None):
    prefix = ("v" if variable else "x" if per_iteration else "w")
    inp = Input(self.fresh(prefix), tuple(shape), dtype, self.rng.randrange(10**6),
                per_iteration, variable, low, high)
    self.inputs.append(inp)
    return inp

  def emit(self, lines, deps, shape, dtype, kind, exact=True, blocks=(), extra_outs=()):
    if isinstance(lines, str):
      lines = ["{o0} = " + lines]
    var = Var(self.fresh(), tuple(shape), dtype, exact)
    outs = [var] + [Var(self.fresh(), tuple(s), d, e) for s, d, e in extra_outs]
    self.stmts.append(Stmt(outs, list(lines), list(deps), kind, list(blocks)))
    self.scope.extend(outs)
    return var

  def rand_shape(self, rank=None):
    if rank is None:
      rank = self.rng.choice([0, 1, 1, 2, 2, 2, 3, 3])
    dims = [self.rng.choice([1, 2, 2, 3, 3, 4]) for _ in range(rank)]
    if rank and self.rng.random() < 0.02:
      dims[self.rng.randrange(rank)] = 0  # an empty per-iteration value now and then
    return tuple(dims)

  def load(self, shape, dtype, low=None, high=None):
    """A per-iteration value read from a captured [NMAX, ...] input (or variable) with i."""
    same = [x for x in self.inputs if x.per_iteration and x.shape == tuple(shape) and
            x.dtype == dtype and (x.low, x.high) == (low, high)]
    if same and self.rng.random() < 0.3:
      inp = self.rng.choice(same)  # the same data read again, maybe at another index
    else:
      inp = self.new_input(shape, dtype, True, self.rng.random() < 0.12, low, high)
    forms = ["{0}[i]", "tf.gather({0}, i)", "{0}[-1 - i]", "{0}[i, ...]",
             "tf.squeeze({0}[i:i + 1], 0)", "tf.gather({0}, tf.math.floormod(i * 3 + 1, 4))"]
    form = self.rng.choice(forms)
    return self.emit(form, [inp.name], shape, dtype, "load")

  def invariant(self, shape, dtype, low=None, high=None):
    """A loop-invariant captured tensor (or a read of a variable)."""
    if self.rng.random() < 0.12:
      same = [x for x in self.inputs if x.variable and not x.per_iteration and
              not x.stateful and x.shape == tuple(shape) and x.dtype == dtype]
      # A variable read in several places (branches, loops) as well as a new one.
      inp = (self.rng.choice(same) if same and self.rng.random() < 0.5 else
             self.new_input(shape, dtype, False, True, low, high))
      form = self.rng.choice(["{0}.read_value()", "tf.identity({0})",
                              "tf.convert_to_tensor({0})"])
      return self.emit(form, [inp.name], shape, dtype, "variable_read")
    inp = self.new_input(shape, dtype, False, False, low, high)
    return Var(inp.name, tuple(shape), dtype, True)

  def operand(self, shape, dtype, exact=False, fresh=0.35):
    """A value of this shape and dtype: one in scope, or a new load or capture."""
    shape = tuple(shape)
    cands = [v for v in self.scope
             if v.shape == shape and v.dtype == dtype and (v.exact or not exact)]
    if cands and self.rng.random() > fresh:
      return self.pick_recent(cands)
    if self.rng.random() < 0.55:
      return self.load(shape, dtype)
    return self.invariant(shape, dtype)

  def pick_recent(self, cands):
    """Biased to recent values, so programs grow deep chains, not only wide ones."""
    k = len(cands)
    idx = min(k - 1, int(k * (1 - self.rng.random() ** 2)))
    return cands[idx]

  def pick(self, pred, make=None):
    cands = [v for v in self.scope if fixed(v) and pred(v)]
    if cands and (make is None or self.rng.random() < 0.8):
      return self.pick_recent(cands)
    return make() if make else None

  def any_float(self, min_rank=0, max_rank=4, exact=False):
    return self.pick(
        lambda v: v.dtype == FLOAT and min_rank <= len(v.shape) <= max_rank and
        (v.exact or not exact),
        lambda: self.operand(self.rand_shape(self.rng.randint(min_rank, max(min_rank,
                                                                              min(max_rank, 3)))),
                             FLOAT, fresh=1.0))

  def any_int(self, min_rank=0, max_rank=3):
    return self.pick(lambda v: v.dtype == INT and min_rank <= len(v.shape) <= max_rank,
                     lambda: self.operand(self.rand_shape(self.rng.randint(
                         min_rank, max(min_rank, max_rank))), INT, fresh=1.0))

  def int_scalar(self):
    """A per-iteration or invariant int32 scalar."""
    r = self.rng.random()
    if r < 0.3:
      return Var("i", (), INT)
    v = self.pick(lambda v: v.dtype == INT and v.shape == ())
    if v is not None and r < 0.7:
      return v
    return self.operand((), INT, fresh=1.0)

  def partner(self, shape):
    """A shape that broadcasts against `shape`: same, a suffix with ones, a scalar, or one
    of higher rank."""
    r = self.rng.random()
    if r < 0.35:
      return tuple(shape)
    if r < 0.5:
      return ()
    k = self.rng.randint(0, len(shape))
    out = []
    for d in shape[len(shape) - k:]:
      if d == 1:
        out.append(self.rng.choice([1, 1, 2, 3]))
      else:
        out.append(self.rng.choice([d, d, 1]))
    if r > 0.85 and k == len(shape):
      out = [self.rng.choice([1, 2, 3])] + out
    return tuple(out)

  # -- generators: each emits one statement or returns None when it does not apply -------

  def g_unary(self):
    a = self.pick(lambda v: v.dtype in (FLOAT, INT)) or self.any_float()
    if a.dtype == INT:
      return self.emit(self.rng.choice(UNARY_INT), [a.name], a.shape, INT, "unary_int")
    ops = [o for o in UNARY_FLOAT if a.exact or not o[2]]
    tmpl, exact, _ = self.rng.choice(ops)
    return self.emit(tmpl, [a.name], a.shape, FLOAT, "unary", exact and a.exact)

  def g_binary(self):
    a = self.pick(lambda v: v.dtype in (FLOAT, INT)) or self.any_float()
    shape_b = self.partner(a.shape)
    b = self.operand(shape_b, a.dtype)
    out = broadcast(a.shape, b.shape)
    if self.rng.random() < 0.5:
      a, b = b, a
    if a.dtype == INT:
      return self.emit(self.rng.choice(BINARY_INT), [a.name, b.name], out, INT, "binary_int")
    tmpl, exact = self.rng.choice(BINARY_FLOAT)
    return self.emit(tmpl, [a.name, b.name], out, FLOAT, "binary",
                     exact and a.exact and b.exact)

  def g_add_n(self):
    a = self.any_float()
    b, c = self.operand(a.shape, FLOAT), self.operand(a.shape, FLOAT)
    return self.emit("tf.add_n([{0}, {1}, {2}])", [a.name, b.name, c.name], a.shape, FLOAT,
                     "add_n", False)

  def g_compare(self):
    a = self.pick(lambda v: v.dtype in (FLOAT, INT) and v.exact) or self.any_int()
    b = self.operand(self.partner(a.shape), a.dtype, exact=True)
    ops = ["{0} < {1}", "{0} >= {1}", "tf.math.greater({0}, {1})"]
    if a.dtype == INT:
      ops += ["tf.equal({0}, {1})", "tf.not_equal({0}, {1})"]
    return self.emit(self.rng.choice(ops), [a.name, b.name], broadcast(a.shape, b.shape),
                     BOOL, "compare")

  def g_logical(self):
    a = self.pick(lambda v: v.dtype == BOOL)
    if a is None:
      return None
    if self.rng.random() < 0.25:
      return self.emit("tf.logical_not({0})", [a.name], a.shape, BOOL, "logical")
    b = self.operand(self.partner(a.shape), BOOL)
    op = self.rng.choice(["tf.logical_and", "tf.logical_or", "tf.math.logical_xor"])
    return self.emit(op + "({0}, {1})", [a.name, b.name], broadcast(a.shape, b.shape), BOOL,
                     "logical")

  def g_where(self):
    c = self.pick(lambda v: v.dtype == BOOL)
    if c is None:
      return None
    a = self.operand(self.partner(c.shape), self.rng.choice([FLOAT, FLOAT, INT]))
    b = self.operand(self.partner(a.shape), a.dtype)
    out = broadcast(broadcast(c.shape, a.shape) or (), b.shape)
    if out is None or broadcast(c.shape, a.shape) is None or broadcast(c.shape, out) != out:
      return None
    return self.emit("tf.where({0}, {1}, {2})", [c.name, a.name, b.name], out, a.dtype,
                     "where", a.exact and b.exact)

  def g_cast(self):
    a = self.pick(lambda v: v.exact or v.dtype != FLOAT)
    if a is None:
      return None
    if a.dtype == FLOAT:
      to = self.rng.choice([INT, BOOL, "int64"])
    elif a.dtype == INT:
      to = self.rng.choice([FLOAT, BOOL, "int64", "float64"])
    else:
      to = self.rng.choice([FLOAT, INT])
    if to in ("int64", "float64"):  # round trip: the fuzzer's values stay in three dtypes
      back = FLOAT if a.dtype == FLOAT else INT
      return self.emit(f"tf.cast(tf.cast({{0}}, {TF_DTYPE[to]}), {TF_DTYPE[back]})",
                       [a.name], a.shape, back, "cast")
    return self.emit(f"tf.cast({{0}}, {TF_DTYPE[to]})", [a.name], a.shape, to, "cast")

  def axis_of(self, rank):
    ax = self.rng.randrange(rank)
    return ax - rank if self.rng.random() < 0.4 else ax

  def g_reduce(self):
    a = self.pick(lambda v: len(v.shape) >= 1)
    if a is None:
      return None
    rank = len(a.shape)
    keep = self.rng.random() < 0.3
    r = self.rng.random()
    if r < 0.2:
      axes = None
    elif r < 0.7:
      axes = [self.axis_of(rank)]
    else:
      axes = sorted(self.rng.sample(range(rank), self.rng.randint(1, rank)))
    if axes is None:
      out = (1,) * rank if keep else ()
      axis_src = "None"
    else:
      norm = {x % rank for x in axes}
      out = tuple(1 if k in norm else d for k, d in enumerate(a.shape)) if keep else tuple(
          d for k, d in enumerate(a.shape) if k not in norm)
      axis_src = str(axes[0]) if len(axes) == 1 and self.rng.random() < 0.5 else str(axes)
    if a.dtype == BOOL:
      op, exact = self.rng.choice(["tf.reduce_any", "tf.reduce_all"]), True
    elif a.dtype == INT:
      op, exact = self.rng.choice(["tf.reduce_sum", "tf.reduce_max", "tf.reduce_min",
                                   "tf.reduce_prod"]), True
    else:
      empty = size(a.shape) == 0
      ops = [("tf.reduce_sum", False), ("tf.reduce_mean", False), ("tf.reduce_max", True),
             ("tf.reduce_min", True), ("tf.reduce_prod", False),
             ("tf.reduce_logsumexp", False), ("tf.math.reduce_std", False),
             ("tf.math.reduce_euclidean_norm", False)]
      if empty:
        ops = ops[:2]
      op, exact = self.rng.choice(ops)
      exact = exact and a.exact
    return self.emit(f"{op}({{0}}, axis={axis_src}, keepdims={keep})", [a.name], out,
                     a.dtype, "reduce", exact)

  def g_cumulative(self):
    a = self.any_float(min_rank=1)
    ax = self.axis_of(len(a.shape))
    op = self.rng.choice(["tf.math.cumsum", "tf.math.cumprod", "tf.math.cumulative_logsumexp"])
    ex, rev = self.rng.random() < 0.3, self.rng.random() < 0.3
    return self.emit(f"{op}({{0}}, axis={ax}, exclusive={ex}, reverse={rev})", [a.name],
                     a.shape, FLOAT, "cumulative", False)

  def g_arg(self):
    a = self.pick(lambda v: v.dtype in (FLOAT, INT) and v.exact and len(v.shape) >= 1 and
                  0 not in v.shape)
    if a is None:
      return None
    ax = self.axis_of(len(a.shape))
    op = self.rng.choice(["tf.argmax", "tf.argmin"])
    out = tuple(d for k, d in enumerate(a.shape) if k != ax % len(a.shape))
    if self.rng.random() < 0.5:
      return self.emit(f"{op}({{0}}, axis={ax}, output_type=tf.int32)", [a.name], out, INT,
                       "argmax")
    return self.emit(f"tf.cast({op}({{0}}, axis={ax}), tf.int32)", [a.name], out, INT,
                     "argmax")

  def g_matmul(self):
    a = self.any_float(min_rank=2, max_rank=3)
    ta, tb = self.rng.random() < 0.25, self.rng.random() < 0.25
    batch, (r, k) = a.shape[:-2], a.shape[-2:]
    if ta:
      r, k = k, r
    m = self.rng.choice([1, 2, 3])
    draw = self.rng.random() if batch else 1.0   # b's batch: a's, all ones, or none
    bbatch = batch if draw < 0.6 else (1,) * len(batch) if draw < 0.75 else ()
    bshape = bbatch + ((m, k) if tb else (k, m))
    b = self.operand(bshape, FLOAT)
    out = batch + (r, m)
    if self.rng.random() < 0.5 and not ta and not tb:
      return self.emit("{0} @ {1}", [a.name, b.name], out, FLOAT, "matmul", False)
    return self.emit(f"tf.matmul({{0}}, {{1}}, transpose_a={ta}, transpose_b={tb})",
                     [a.name, b.name], out, FLOAT, "matmul", False)

  def g_einsum(self):
    a = self.any_float(min_rank=1, max_rank=3)
    letters = iter("abcdefgh")
    la = [next(letters) for _ in a.shape]
    sizes = dict(zip(la, a.shape))
    lb = [x for x in la if self.rng.random() < 0.6]
    for _ in range(self.rng.randint(0, 2)):
      x = next(letters)
      sizes[x] = self.rng.choice([1, 2, 3])
      lb.insert(self.rng.randint(0, len(lb)), x)
    if not lb:
      x = next(letters)
      sizes[x] = 2
      lb.append(x)
    self.rng.shuffle(lb)
    union = list(dict.fromkeys(la + lb))
    lo = [x for x in union if self.rng.random() < 0.6]
    self.rng.shuffle(lo)
    b = self.operand(tuple(sizes[x] for x in lb), FLOAT)
    eq = f"{''.join(la)},{''.join(lb)}->{''.join(lo)}"
    return self.emit(f'tf.einsum("{eq}", {{0}}, {{1}})', [a.name, b.name],
                     tuple(sizes[x] for x in lo), FLOAT, "einsum", False)

  def factor(self, n, rank):
    dims = [1] * rank
    x, p = n, 2
    while x > 1:
      while x % p == 0:
        dims[self.rng.randrange(rank)] *= p
        x //= p
      p += 1
    return dims

  def g_reshape(self):
    a = self.pick(lambda v: True) or self.any_float()
    n = size(a.shape)
    rank = self.rng.randint(0 if n == 1 else 1, 4)
    if n == 0:
      dims = list(a.shape) + [1]
      self.rng.shuffle(dims)
      new = tuple(dims)
    else:
      new = tuple(self.factor(n, rank)) if rank else ()
    src = list(new)
    if new and n and self.rng.random() < 0.4:
      src[self.rng.randrange(len(src))] = -1
    if self.rng.random() < 0.2 and n:
      return self.emit(f"tf.reshape({{0}}, tf.constant({src}, tf.int32))", [a.name], new,
                       a.dtype, "reshape", a.exact)
    return self.emit(f"tf.reshape({{0}}, {src})", [a.name], new, a.dtype, "reshape", a.exact)

  def g_transpose(self):
    a = self.pick(lambda v: len(v.shape) >= 2)
    if a is None:
      return None
    perm = list(range(len(a.shape)))
    self.rng.shuffle(perm)
    return self.emit(f"tf.transpose({{0}}, {perm})", [a.name],
                     tuple(a.shape[p] for p in perm), a.dtype, "transpose", a.exact)

  def g_expand_squeeze(self):
    a = self.pick(lambda v: len(v.shape) <= 3) or self.any_float()
    ones = [k for k, d in enumerate(a.shape) if d == 1]
    if ones and self.rng.random() < 0.5:
      k = self.rng.choice(ones)
      ax = k - len(a.shape) if self.rng.random() < 0.4 else k
      out = a.shape[:k] + a.shape[k + 1:]
      if self.rng.random() < 0.3:
        out = tuple(d for d in a.shape if d != 1)
        return self.emit("tf.squeeze({0})", [a.name], out, a.dtype, "squeeze", a.exact)
      return self.emit(f"tf.squeeze({{0}}, {ax})", [a.name], out, a.dtype, "squeeze", a.exact)
    r = len(a.shape)
    k = self.rng.randint(0, r)
    ax = k - r - 1 if self.rng.random() < 0.4 else k
    out = a.shape[:k] + (1,) + a.shape[k:]
    if self.rng.random() < 0.3:
      idx = ", ".join([":"] * k + ["tf.newaxis"])
      return self.emit(f"{{0}}[{idx}]", [a.name], out, a.dtype, "expand_dims", a.exact)
    return self.emit(f"tf.expand_dims({{0}}, {ax})", [a.name], out, a.dtype, "expand_dims",
                     a.exact)

  def g_concat(self):
    a = self.pick(lambda v: len(v.shape) >= 1) or self.any_float(min_rank=1)
    k = self.rng.randrange(len(a.shape))
    ax = k - len(a.shape) if self.rng.random() < 0.4 else k
    if self.rng.random() < 0.3:
      b = self.operand(a.shape, a.dtype)
      out = a.shape[:k] + (2,) + a.shape[k:]
      return self.emit(f"tf.stack([{{0}}, {{1}}], axis={k})", [a.name, b.name], out,
                       a.dtype, "stack", a.exact and b.exact)
    m = self.rng.choice([1, 2, a.shape[k]])
    bshape = a.shape[:k] + (m,) + a.shape[k + 1:]
    b = self.operand(bshape, a.dtype)
    out = a.shape[:k] + (a.shape[k] + m,) + a.shape[k + 1:]
    return self.emit(f"tf.concat([{{0}}, {{1}}], {ax})", [a.name, b.name], out, a.dtype,
                     "concat", a.exact and b.exact)

  def g_tile_pad(self):
    a = self.pick(lambda v: 1 <= len(v.shape) <= 3) or self.any_float(min_rank=1)
    r = self.rng.random()
    if r < 0.3:
      mult = [self.rng.choice([1, 1, 2]) for _ in a.shape]
      return self.emit(f"tf.tile({{0}}, {mult})", [a.name],
                       tuple(d * m for d, m in zip(a.shape, mult)), a.dtype, "tile", a.exact)
    if r < 0.45:
      axes = self.rng.sample(range(len(a.shape)), self.rng.randint(1, len(a.shape)))
      return self.emit(f"tf.reverse({{0}}, {axes})", [a.name], a.shape, a.dtype, "reverse",
                       a.exact)
    mode = self.rng.choice(["CONSTANT", "CONSTANT", "REFLECT", "SYMMETRIC"])
    if a.dtype == BOOL:
      mode = "CONSTANT"
    pads = []
    for d in a.shape:
      lim = {"CONSTANT": 2, "REFLECT": d - 1, "SYMMETRIC": d}[mode]
      lim = max(0, min(lim, 2))
      pads.append([self.rng.randint(0, lim), self.rng.randint(0, lim)])
    out = tuple(d + p + q for d, (p, q) in zip(a.shape, pads))
    extra = ""
    if mode == "CONSTANT" and a.dtype != BOOL and self.rng.random() < 0.5:
      extra = ", constant_values=2" if a.dtype == INT else ", constant_values=1.5"
    return self.emit(f'tf.pad({{0}}, {pads}, mode="{mode}"{extra})', [a.name], out, a.dtype,
                     "pad", a.exact)

  def g_index_value(self):
    """A per-iteration value of the index and constants only: at a static n = 0 Grappler
    folds it to an empty constant (a product of one that broadcast another empty value
    once killed the process in Grappler's ArithmeticOptimizer)."""
    shape = self.rand_shape()
    k = size(shape)
    form = self.rng.choice([
        f"tf.fill({list(shape)}, tf.cast(i, tf.float32) * 0.5)",
        f"tf.reshape(tf.cast(tf.math.floormod(tf.range({k}) + i, 3), tf.float32), "
        f"{list(shape)})",
        f"tf.reshape(tf.one_hot(tf.math.floormod(i, {k}), {k}), {list(shape)})",
        f"tf.reshape(tf.cast(tf.range({k}) < i, tf.float32), {list(shape)})"])
    return self.emit(form, [], shape, FLOAT, "index_value")

  def g_index_slice(self):
    """A slice at the index with constant bounds (`x[i, 1:]`, `x[i, :2]`): the body's graph
    leaves its size unknown (its bounds are not constants), so ops after it see no static
    shape: `!=` / `==` (incompatible_shape_error=False) and sequential ops once gave ragged
    outputs or refused."""
    rest = self.rand_shape(self.rng.choice([0, 0, 1]))
    d = self.rng.randint(2, 4)
    dtype = self.rng.choice([FLOAT, INT])
    inp = self.new_input((d,) + rest, dtype, True)
    lo, hi = sorted(self.rng.sample(range(d + 1), 2))
    form, k = self.rng.choice([(f"{{0}}[i, {lo}:{hi}]", hi - lo), (f"{{0}}[i, {lo}:]", d - lo),
                               (f"{{0}}[i, :{hi}]", hi)])
    v = self.emit(form, [inp.name], (k,) + rest, dtype, "load")
    if self.rng.random() < 0.5:
      other = self.rng.choice(["0", "{1}"])
      deps = [v.name] + ([self.operand(v.shape, dtype, exact=True).name] if other == "{1}"
                         else [])
      return self.emit(self.rng.choice(["{0} != %s", "{0} == %s"]) % other, deps, v.shape,
                       BOOL, "compare")
    return v

  def g_pad_per_iteration(self):
    """tf.pad by paddings that differ per iteration and add one total (session 22: a Pad
    whose totals the trace does not know took the largest iteration's silently)."""
    a = self.pick(lambda v: 1 <= len(v.shape) <= 3 and v.dtype != BOOL) or \
        self.any_float(min_rank=1)
    mode = self.rng.choice(["CONSTANT", "CONSTANT", "REFLECT", "SYMMETRIC"])
    rows, totals = [], []
    for d in a.shape:
      lim = max(0, min({"CONSTANT": 2, "REFLECT": d - 1, "SYMMETRIC": d}[mode], 2))
      total = self.rng.randint(0, lim)
      before = f"tf.math.floormod(i + {self.rng.randint(0, 3)}, {total + 1})"
      rows.append(f"tf.stack([{before}, {total} - {before}])")
      totals.append(total)
    out = tuple(d + t for d, t in zip(a.shape, totals))
    return self.emit(f'tf.pad({{0}}, tf.stack([{", ".join(rows)}]), mode="{mode}")', [a.name],
                     out, a.dtype, "pad_per_iteration", a.exact)

  def g_broadcast_to(self):
    a = self.pick(lambda v: len(v.shape) <= 3) or self.any_float()
    target = tuple(self.rng.choice([2, 3]) if d == 1 and self.rng.random() < 0.5 else d
                   for d in a.shape)
    if self.rng.random() < 0.5:
      target = (self.rng.choice([1, 2]),) + target
    return self.emit(f"tf.broadcast_to({{0}}, {list(target)})", [a.name], target, a.dtype,
                     "broadcast_to", a.exact)

  def g_shape_ops(self):
    a = self.pick(lambda v: True) or self.any_float()
    r = self.rng.random()
    if r < 0.2:
      return self.emit("tf.shape({0})", [a.name], (len(a.shape),), INT, "shape")
    if r < 0.35:
      return self.emit("tf.zeros_like({0})" if self.rng.random() < 0.5 else
                       "tf.ones_like({0})", [a.name], a.shape, a.dtype, "zeros_like")
    if r < 0.5:
      return self.emit("tf.fill(tf.shape({0}), 0.5)", [a.name], a.shape, FLOAT, "fill")
    if r < 0.6:
      return self.emit("tf.size({0})", [a.name], (), INT, "size")
    n = size(a.shape)
    cands = [v for v in self.scope if fixed(v) and size(v.shape) == n and
             v.shape != a.shape and v.dtype in (FLOAT, INT, BOOL)]
    if cands:
      b = self.rng.choice(cands)
      return self.emit("tf.reshape({0}, tf.shape({1}))", [a.name, b.name], b.shape, a.dtype,
                       "reshape_like", a.exact)
    b = self.operand(self.partner(a.shape), FLOAT)
    out = broadcast(a.shape, b.shape)
    return self.emit("tf.broadcast_to({0}, tf.shape({0} + tf.zeros_like({1}, {0}.dtype)))"
                     if a.dtype != BOOL else "tf.identity({0})", [a.name, b.name],
                     out if a.dtype != BOOL else a.shape, a.dtype, "broadcast_dynamic",
                     a.exact)

  def g_split(self):
    a = self.pick(lambda v: len(v.shape) >= 1 and max(v.shape) >= 2)
    if a is None:
      return None
    k = self.rng.choice([j for j, d in enumerate(a.shape) if d >= 2])
    ax = k - len(a.shape) if self.rng.random() < 0.4 else k
    d = a.shape[k]
    r = self.rng.random()
    if r < 0.35:
      j = self.rng.randrange(d)
      out = a.shape[:k] + a.shape[k + 1:]
      return self.emit(f"tf.unstack({{0}}, axis={ax})[{j}]", [a.name], out, a.dtype,
                       "unstack", a.exact)
    if r < 0.65 and d % 2 == 0:
      j = self.rng.randrange(2)
      out = a.shape[:k] + (d // 2,) + a.shape[k + 1:]
      return self.emit(f"tf.split({{0}}, 2, axis={ax})[{j}]", [a.name], out, a.dtype,
                       "split", a.exact)
    s1 = self.rng.randint(1, d - 1) if d > 2 else 1
    sizes = [s1, d - s1]
    j = self.rng.randrange(2)
    out = a.shape[:k] + (sizes[j],) + a.shape[k + 1:]
    return self.emit(f"tf.split({{0}}, {sizes}, axis={ax})[{j}]", [a.name], out, a.dtype,
                     "split", a.exact)

  def g_slice(self):
    a = self.pick(lambda v: len(v.shape) >= 1) or self.any_float(min_rank=1)
    r = self.rng.random()
    if r < 0.15 and all(d >= 2 for d in a.shape):
      # A per-iteration begin with a fixed size: a StridedSlice/Slice with stacked begin.
      j = self.int_scalar()
      d0 = a.shape[0]
      rest = ", ".join(["0"] * (len(a.shape) - 1))
      begin = f"tf.stack([tf.math.floormod({{1}}, {d0 - 1}){', ' + rest if rest else ''}])"
      sz = [2] + [-1] * (len(a.shape) - 1)
      return self.emit(f"tf.slice({{0}}, {begin}, {sz})", [a.name, j.name],
                       (2,) + a.shape[1:], a.dtype, "slice_dynamic", a.exact)
    if r < 0.25 and a.shape[0] >= 1:
      j = self.int_scalar()
      return self.emit(f"{{0}}[tf.math.floormod({{1}}, {a.shape[0]})]", [a.name, j.name],
                       a.shape[1:], a.dtype, "index_dynamic", a.exact)
    if r < 0.35:
      begin = [self.rng.randint(0, max(0, d - 1)) for d in a.shape]
      sz = [self.rng.choice([-1, d - b]) if d - b > 0 else 0 for d, b in zip(a.shape, begin)]
      out = tuple(d - b if s == -1 else s for d, b, s in zip(a.shape, begin, sz))
      return self.emit(f"tf.slice({{0}}, {begin}, {sz})", [a.name], out, a.dtype, "slice",
                       a.exact)
    # A Python slice: negative indices, steps, ellipsis, newaxis, shrink.
    parts = []
    k = 0
    rank = len(a.shape)
    used_ellipsis = False
    while k < rank:
      d = a.shape[k]
      c = self.rng.random()
      if c < 0.1 and not used_ellipsis and k < rank - 1:
        parts.append("...")
        used_ellipsis = True
        skip = self.rng.randint(1, rank - k - 1)
        k += skip
        continue
      if c < 0.2:
        parts.append("tf.newaxis")
        continue
      if c < 0.35 and d >= 1:
        j = self.rng.randrange(d)
        parts.append(str(j - d if self.rng.random() < 0.5 else j))
      elif c < 0.5:
        parts.append(":")
      else:
        start = self.rng.choice(["", str(self.rng.randint(-d, d))]) if d else ""
        stop = self.rng.choice(["", str(self.rng.randint(-d, d))]) if d else ""
        step = self.rng.choice(["", "", "2", "-1", "-2"])
        parts.append(f"{start}:{stop}" + (f":{step}" if step else ""))
      k += 1
    if len(parts) > 0 and parts.count("...") == 0 and self.rng.random() < 0.2:
      parts.append("...")
    idx = ", ".join(parts)
    probe = np.empty(a.shape)
    np_idx = eval(f"np.s_[{idx.replace('tf.newaxis', 'None')}]")  # pylint: disable=eval-used
    out = probe[np_idx].shape
    return self.emit(f"{{0}}[{idx}]", [a.name], out, a.dtype, "strided_slice", a.exact)

  def g_gather(self):
    a = self.pick(lambda v: len(v.shape) >= 1 and 0 not in v.shape) or self.any_float(
        min_rank=1)
    if 0 in a.shape:
      return None
    k = self.rng.randrange(len(a.shape))
    d = a.shape[k]
    r = self.rng.random()
    if r < 0.35:
      idx = [self.rng.randrange(d) for _ in range(self.rng.randint(1, 4))]
      out = a.shape[:k] + (len(idx),) + a.shape[k + 1:]
      return self.emit(f"tf.gather({{0}}, {idx}, axis={k})", [a.name], out, a.dtype,
                       "gather", a.exact)
    if r < 0.75:
      ix = self.any_int(max_rank=2)
      out = a.shape[:k] + ix.shape + a.shape[k + 1:]
      return self.emit(f"tf.gather({{0}}, tf.math.floormod({{1}}, {d}), axis={k})",
                       [a.name, ix.name], out, a.dtype, "gather", a.exact)
    m = self.rng.randint(1, len(a.shape))
    lead = self.rng.choice([(), (2,), (3,), (2, 2)])
    ix = self.operand(lead + (m,), INT)
    out = lead + a.shape[m:]
    return self.emit(f"tf.gather_nd({{0}}, tf.math.floormod({{1}}, {list(a.shape[:m])}))",
                     [a.name, ix.name], out, a.dtype, "gather_nd", a.exact)

  def g_scatter(self):
    a = self.pick(lambda v: v.dtype in (FLOAT, INT) and len(v.shape) >= 1 and
                  0 not in v.shape)
    if a is None:
      return None
    m = self.rng.randint(1, len(a.shape))
    r = self.rng.random()
    if r < 0.5:
      # Distinct constant indices: updates are order independent.
      allidx = list(np.ndindex(*a.shape[:m]))
      cnt = self.rng.randint(1, min(3, len(allidx)))
      idx = [list(map(int, t)) for t in self.rng.sample(allidx, cnt)]
      upd = self.operand((cnt,) + a.shape[m:], a.dtype)
      op = self.rng.choice(["tf.tensor_scatter_nd_update", "tf.tensor_scatter_nd_add",
                            "tf.tensor_scatter_nd_max"])
      return self.emit(f"{op}({{0}}, {idx}, {{1}})", [a.name, upd.name], a.shape, a.dtype,
                       "scatter", a.exact and upd.exact and "add" not in op)
    if r < 0.75:
      cnt = self.rng.randint(1, 3)
      ix = self.operand((cnt, m), INT)
      upd = self.operand((cnt,) + a.shape[m:], a.dtype)
      return self.emit(
          f"tf.tensor_scatter_nd_add({{0}}, tf.math.floormod({{1}}, {list(a.shape[:m])}), {{2}})",
          [a.name, ix.name, upd.name], a.shape, a.dtype, "scatter_dynamic", False)
    num = self.rng.randint(1, 4)
    seg = self.operand(a.shape[:1], INT)
    op = self.rng.choice(["tf.math.unsorted_segment_sum", "tf.math.unsorted_segment_max"])
    return self.emit(f"{op}({{0}}, tf.math.floormod({{1}}, {num}), {num})",
                     [a.name, seg.name], (num,) + a.shape[1:], a.dtype, "segment", False)

  def g_one_hot(self):
    ix = self.any_int(max_rank=2)
    d = self.rng.randint(1, 4)
    return self.emit(f"tf.one_hot(tf.math.floormod({{0}}, {d}), {d})", [ix.name],
                     ix.shape + (d,), FLOAT, "one_hot")

  def g_conv(self):
    spatial = self.rng.choice([1, 2, 2])
    a = self.pick(lambda v: v.dtype == FLOAT and len(v.shape) == spatial + 1 and
                  min(v.shape) >= 1)
    if a is None:
      a = self.operand(tuple(self.rng.choice([3, 4, 5]) for _ in range(spatial)) +
                       (self.rng.choice([1, 2, 3]),), FLOAT, fresh=1.0)
    c = a.shape[-1]
    pad = self.rng.choice(["VALID", "SAME"])
    sp = a.shape[:-1]
    kernel = tuple(self.rng.choice([1, 2, 3]) for _ in sp)
    if pad == "VALID" and any(k > d for k, d in zip(kernel, sp)):
      pad = "SAME"
    stride = self.rng.choice([1, 1, 2])

    def out_dims():
      if pad == "VALID":
        return tuple((d - k) // stride + 1 for d, k in zip(sp, kernel))
      return tuple(-(-d // stride) for d in sp)
    r = self.rng.random()
    if r < 0.5:
      o = self.rng.choice([1, 2, 3])
      groups = 2 if c % 2 == 0 and o == 2 else 1   # grouped (as Keras groups=2), no new draw
      f = self.operand(kernel + (c // groups, o), FLOAT, fresh=0.8)
      op = "tf.nn.conv1d" if spatial == 1 else "tf.nn.conv2d"
      return self.emit(f'{op}({{0}}[tf.newaxis], {{1}}, {stride}, "{pad}")[0]',
                       [a.name, f.name], out_dims() + (o,), FLOAT, "conv", False)
    if r < 0.65 and spatial == 2:
      f = self.operand(kernel + (c, 1), FLOAT, fresh=0.8)
      return self.emit(
          f'tf.nn.depthwise_conv2d({{0}}[tf.newaxis], {{1}}, [1, {stride}, {stride}, 1], '
          f'"{pad}")[0]', [a.name, f.name], out_dims() + (c,), FLOAT, "depthwise_conv", False)
    op = self.rng.choice(["tf.nn.max_pool", "tf.nn.avg_pool"])
    return self.emit(f'{op}({{0}}[tf.newaxis], {list(kernel)}, {stride}, "{pad}")[0]',
                     [a.name], out_dims() + (c,), FLOAT, "pool",
                     a.exact and "max" in op)

  def g_softmax(self):
    a = self.any_float(min_rank=1)
    ax = self.axis_of(len(a.shape))
    r = self.rng.random()
    if r < 0.4:
      op = self.rng.choice(["tf.nn.softmax", "tf.nn.log_softmax"])
      return self.emit(f"{op}({{0}}, axis={ax})", [a.name], a.shape, FLOAT, "softmax", False)
    if r < 0.55:
      return self.emit(f"tf.math.l2_normalize({{0}}, axis={ax})", [a.name], a.shape, FLOAT,
                       "l2_normalize", False)
    if r < 0.75 and a.shape[-1] >= 1:
      labels = self.operand(a.shape[:-1], INT)
      return self.emit(
          f"tf.nn.sparse_softmax_cross_entropy_with_logits("
          f"tf.math.floormod({{1}}, {a.shape[-1]}), {{0}})", [a.name, labels.name],
          a.shape[:-1], FLOAT, "xent", False)
    if r < 0.88:
      b = self.operand(a.shape, FLOAT)
      return self.emit("tf.nn.softmax_cross_entropy_with_logits(tf.nn.softmax({1}), {0})",
                       [a.name, b.name], a.shape[:-1], FLOAT, "xent", False)
    axes = sorted({ax % len(a.shape)})
    out = tuple(d for k, d in enumerate(a.shape) if k not in axes)
    return self.emit(f"tf.nn.moments({{0}}, {axes})[{self.rng.randint(0, 1)}]", [a.name],
                     out, FLOAT, "moments", False)

  def g_sort(self):
    a = self.pick(lambda v: v.dtype in (FLOAT, INT) and v.exact and len(v.shape) >= 1 and
                  v.shape[-1] >= 1)
    if a is None:
      return None
    r = self.rng.random()
    direction = self.rng.choice(["ASCENDING", "DESCENDING"])
    if r < 0.4:
      return self.emit(f'tf.sort({{0}}, direction="{direction}")', [a.name], a.shape,
                       a.dtype, "sort")
    if r < 0.6:
      return self.emit(f'tf.argsort({{0}}, direction="{direction}", stable=True)', [a.name],
                       a.shape, INT, "argsort")
    k = self.rng.randint(1, a.shape[-1])
    j = self.rng.randint(0, 1)
    return self.emit(f"tf.math.top_k({{0}}, {k})[{j}]", [a.name], a.shape[:-1] + (k,),
                     a.dtype if j == 0 else INT, "top_k")

  def g_linalg(self):
    a = self.pick(lambda v: v.dtype == FLOAT and len(v.shape) >= 2) or self.any_float(
        min_rank=2, max_rank=3)
    r = self.rng.random()
    if r < 0.3:
      lo, hi = self.rng.choice([-1, 0, 1]), self.rng.choice([-1, 0, 1])
      lo, hi = min(lo, a.shape[-2]), min(hi, a.shape[-1])  # at most the rows, the columns
      return self.emit(f"tf.linalg.band_part({{0}}, {lo}, {hi})", [a.name], a.shape, FLOAT,
                       "band_part", a.exact)
    if r < 0.55:
      m = min(a.shape[-2:])
      return self.emit("tf.linalg.diag_part({0})", [a.name], a.shape[:-2] + (m,), FLOAT,
                       "diag_part", a.exact)
    if r < 0.7:
      v = self.any_float(min_rank=1, max_rank=2)
      return self.emit("tf.linalg.diag({0})", [v.name], v.shape + v.shape[-1:], FLOAT,
                       "diag", v.exact)
    if r < 0.85 and a.shape[-1] == a.shape[-2]:
      return self.emit("tf.linalg.trace({0})", [a.name], a.shape[:-2], FLOAT, "trace", False)
    v = self.operand(a.shape[-1:], FLOAT)
    return self.emit("tf.linalg.matvec({0}, {1})", [a.name, v.name], a.shape[:-1], FLOAT,
                     "matvec", False)

  def g_misc(self):
    r = self.rng.random()
    if r < 0.25:
      a = self.any_float(min_rank=1)
      ax = self.axis_of(len(a.shape))
      shift = self.rng.randint(-2, 2)
      return self.emit(f"tf.roll({{0}}, {shift}, {ax})", [a.name], a.shape, FLOAT, "roll",
                       a.exact)
    if r < 0.45:
      a = self.any_float(min_rank=1)
      rep = self.rng.randint(1, 2)
      ax = self.rng.randrange(len(a.shape))
      out = tuple(d * rep if k == ax else d for k, d in enumerate(a.shape))
      return self.emit(f"tf.repeat({{0}}, {rep}, axis={ax})", [a.name], out, FLOAT,
                       "repeat", a.exact)
    if r < 0.6:
      ln = self.any_int(max_rank=1)
      m = self.rng.randint(1, 4)
      return self.emit(f"tf.sequence_mask(tf.math.floormod({{0}}, {m + 1}), {m})",
                       [ln.name], ln.shape + (m,), BOOL, "sequence_mask")
    if r < 0.75:
      a = self.any_float(min_rank=1)
      return self.emit("tf.clip_by_norm({0}, 1.0)", [a.name], a.shape, FLOAT, "clip_by_norm",
                       False)
    if r < 0.87:
      ix = self.any_int(min_rank=1, max_rank=1)
      return self.emit("tf.math.bincount(tf.math.floormod({0}, 3), minlength=3, maxlength=3)",
                       [ix.name], (3,), INT, "bincount")
    a = self.any_float(min_rank=1)
    b = self.operand(a.shape[-1:], FLOAT)
    return self.emit("tf.nn.bias_add({0}, {1})" if len(a.shape) >= 2 else "{0} + {1}",
                     [a.name, b.name], a.shape, FLOAT, "bias_add", a.exact and b.exact)

  def g_random(self):
    shape = self.rand_shape(self.rng.randint(0, 2))
    if self.rng.random() < 0.6:
      s = self.int_scalar()
      seed, deps = f"tf.stack([{{0}}, {self.rng.randint(0, 99)}])", [s.name]
    else:
      seed, deps = f"[{self.rng.randint(0, 99)}, {self.rng.randint(0, 99)}]", []
    r = self.rng.random()
    if r < 0.4:
      return self.emit(f"tf.random.stateless_normal({list(shape)}, seed={seed})", deps,
                       shape, FLOAT, "random")
    if r < 0.65:
      return self.emit(f"tf.random.stateless_uniform({list(shape)}, seed={seed})", deps,
                       shape, FLOAT, "random")
    if r < 0.8:
      return self.emit(f"tf.random.stateless_truncated_normal({list(shape)}, seed={seed})",
                       deps, shape, FLOAT, "random")
    return self.emit(f"tf.random.stateless_uniform({list(shape)}, seed={seed}, minval=0, "
                     "maxval=5, dtype=tf.int32)", deps, shape, INT, "random")

  # -- control flow ---------------------------------------------------------------------

  def block(self, params, n_stmts):
    """Generates a nested block: returns (stmts, locals). Params join the scope for it."""
    saved_stmts, saved_scope = self.stmts, list(self.scope)
    self.stmts = []
    self.scope = self.scope + params
    self.depth += 1
    for _ in range(n_stmts):
      self.statement()
    stmts, local = self.stmts, self.scope[len(saved_scope):]
    self.depth -= 1
    self.stmts, self.scope = saved_stmts, saved_scope
    return stmts, local

  def result_of(self, stmts, local, target):
    """A value of target's shape and dtype made in the block (appends a statement if no
    local value fits): what the branch or loop body returns."""
    fits = [v for v in local if v.shape == target.shape and v.dtype == target.dtype]
    if fits and self.rng.random() < 0.8:
      return fits[-1].name
    src = [v for v in local if v.dtype in (FLOAT, INT, BOOL)]
    v = self.rng.choice(src) if src else target
    name = self.fresh()
    t = target
    if t.dtype == BOOL:
      expr = "tf.math.logical_xor({0}, tf.reduce_any(tf.cast({1}, tf.bool)))"
    elif t.dtype == INT:
      expr = "{0} + tf.reduce_sum(tf.cast({1}, tf.int32))"
    else:
      expr = "tf.tanh({0}) + tf.reduce_mean(tf.cast({1}, tf.float32))"
    stmts.append(Stmt([Var(name, t.shape, t.dtype, False)], ["{o0} = " + expr],
                      [t.name, v.name], "coerce"))
    return name

  def pred(self):
    """A scalar bool: per-iteration (from i or exact data) or loop-invariant."""
    r = self.rng.random()
    if r < 0.25:
      return "tf.equal(tf.math.floormod(i, 2), 0)", []
    if r < 0.4:
      return f"i < {self.rng.randint(1, 3)}", []
    if r < 0.55:
      w = self.invariant((), BOOL)
      return "{0}", [w.name]
    if r < 0.65:
      w = self.invariant((3,), FLOAT)
      return "tf.reduce_sum({0}) > 0.0", [w.name]
    v = self.pick(lambda v: v.dtype in (FLOAT, INT) and v.exact and v.shape == ())
    if v is None:
      v = self.load((), FLOAT)
    return ("{0} > 0" if v.dtype == INT else "{0} > 0.0"), [v.name]

  def g_cond(self):
    if self.depth >= 2:
      return None
    target = self.pick(lambda v: v.dtype in (FLOAT, INT, BOOL)) or self.any_float()
    pred, pdeps = self.pred()
    blocks = []
    for _ in range(2):
      stmts, local = self.block([], self.rng.randint(0, 3))
      ret = self.result_of(stmts, local, target)
      blocks.append(Block([], stmts, "{0}", [ret]))
    deps = pdeps + []
    pred_src = pred
    lines = ["{B0}", "{B1}", f"{{o0}} = tf.cond({pred_src}, {{b0}}, {{b1}})"]
    return self.emit(lines, deps, target.shape, target.dtype, "cond", False, blocks)

  def g_guarded_cond(self):
    """A branch that is only safe where its predicate holds (log of a positive value):
    under XLA all lanes run it, and no NaN may leak into values or gradients."""
    v = self.pick(lambda v: v.dtype == FLOAT and v.exact and v.shape == ())
    if v is None:
      v = self.load((), FLOAT)
    t = self.any_float()
    lines = ["{o0} = tf.cond({0} > 0.0, lambda: tf.math.log({0}) * {1}, "
             "lambda: tf.sqrt(-{0}) + {1})"]
    return self.emit(lines, [v.name, t.name], t.shape, FLOAT, "guarded_cond", False)

  def g_switch(self):
    if self.depth >= 2:
      return None
    target = self.pick(lambda v: v.dtype in (FLOAT, INT)) or self.any_float()
    k = self.rng.randint(2, 3)
    r = self.rng.random()
    if r < 0.6:
      idx, deps = f"tf.math.floormod({{0}}, {k})", [self.int_scalar().name]
    else:
      idx, deps = f"tf.math.floormod(i, {k})", []
    blocks = []
    for _ in range(k):
      stmts, local = self.block([], self.rng.randint(0, 2))
      blocks.append(Block([], stmts, "{0}", [self.result_of(stmts, local, target)]))
    lines = [f"{{B{j}}}" for j in range(k)]
    fns = ", ".join(f"{{b{j}}}" for j in range(k))
    lines.append(f"{{o0}} = tf.switch_case({idx}, [{fns}])")
    return self.emit(lines, deps, target.shape, target.dtype, "switch_case", False, blocks)

  def trip_count(self):
    """A trip count template over deps: per-iteration (data, i) or loop-invariant."""
    r = self.rng.random()
    if r < 0.4:
      return "{0}", [self.load((), INT, low=0, high=4).name]
    if r < 0.6:
      return ("tf.math.floormod(i, 3) + 1" if self.rng.random() < 0.5 else "i"), []
    if r < 0.8:
      return str(self.rng.randint(0, 3)), []
    return "tf.math.floormod({0}, 4)", [self.int_scalar().name]

  def g_while(self):
    if self.depth >= 2:
      return None
    carried = [self.pick(lambda v: v.dtype in (FLOAT, INT)) or self.any_float()]
    if self.rng.random() < 0.4:
      carried.append(self.any_float())
    trips, trip_deps = self.trip_count()
    params = [Var(self.fresh("c"), v.shape, v.dtype, v.exact) for v in carried]
    jv = Var(self.fresh("j"), (), INT)
    stmts, local = self.block([jv] + params, self.rng.randint(1, 3))
    rets = [self.result_of(stmts, [jv] + params + local, p) for p in params]
    names = [jv.name] + [p.name for p in params]
    ta_vals = [v for v in params + local if v.dtype == FLOAT]
    with_ta = bool(ta_vals) and self.rng.random() < 0.35
    k = len(rets)
    dynamic = False
    body_ret = "(" + jv.name + " + 1, " + ", ".join("{%d}" % m for m in range(k))
    if with_ta:
      ta_val = self.pick_recent(ta_vals)
      names.append("ta")
      body = Block(names, stmts, body_ret + ", ta.write(" + jv.name + ", {%d}))" % k,
                   rets + [ta_val.name])
    else:
      body = Block(names, stmts, body_ret + ",)", rets)
    cond = Block(names, [], f"{jv.name} < {trips}", trip_deps)
    if with_ta and self.rng.random() < 0.3:
      # An eager TensorArray of dynamic size cannot stack or concat zero elements (TF
      # fails on the loop itself), so such a loop runs at least once.
      dynamic = True
      cond.ret = f"{jv.name} < tf.maximum({trips}, 1)"
    maxit = ", maximum_iterations=5" if self.rng.random() < 0.5 else ""
    init = ", ".join("{%d}" % m for m in range(len(carried)))
    outs = ", ".join("{o%d}" % m for m in range(len(carried)))
    lines = ["{B0}", "{B1}"]
    fixed = False
    if with_ta:
      es = list(ta_val.shape)
      fixed = trips.isdigit() and trips != "0" and not dynamic and self.rng.random() < 0.5
      if dynamic:
        ta_init = f"tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape={es})"
      else:
        ta_init = f"tf.TensorArray(tf.float32, {trips if fixed else 5}, element_shape={es})"
      lines.append(f"_, {outs}, {{p}}_ta = tf.while_loop({{b0}}, {{b1}}, "
                   f"(0, {init}, {ta_init}){maxit})")
    else:
      lines.append(f"_, {outs}{',' if len(carried) == 1 else ''} = tf.while_loop("
                   f"{{b0}}, {{b1}}, (0, {init}){maxit})")
    extra = [(v.shape, v.dtype, False) for v in carried[1:]]
    var = self.emit(lines, [v.name for v in carried], carried[0].shape, carried[0].dtype,
                    "while_ta" if with_ta else "while", False, [cond, body], extra)
    if with_ta:
      # Reads the loop's TensorArray `{0}_ta`: the dependency on the loop's first output
      # keeps the read after the loop when the shrinker rewires or deletes statements.
      es = ta_val.shape
      r = self.rng.random()
      if r < 0.4 and fixed:
        self.emit("{0}_ta.stack()", [var.name], (int(trips),) + es, FLOAT, "ta_stack", False)
      elif r < 0.6 and not fixed and not dynamic:
        self.emit("{0}_ta.stack()", [var.name], (5,) + es, FLOAT, "ta_stack", False)
      elif r < 0.8 and es:
        self.emit("tf.reduce_sum({0}_ta.concat(), 0)", [var.name], es[1:], FLOAT,
                  "ta_concat", False)
      else:
        self.emit("tf.reduce_sum({0}_ta.stack(), 0)", [var.name], es, FLOAT, "ta_stack",
                  False)
    return var

  def g_tensor_array(self):
    """A TensorArray in straight-line code: unstack / read / write / stack / gather."""
    a = self.any_float(min_rank=1)
    d = a.shape[0]
    if d == 0:
      return None
    r = self.rng.random()
    j = self.rng.randrange(d)
    if r < 0.4:
      return self.emit(f"tf.TensorArray(tf.float32, {d}).unstack({{0}}).read({j})",
                       [a.name], a.shape[1:], FLOAT, "ta_read", a.exact)
    if r < 0.7:
      b = self.operand(a.shape[1:], FLOAT)
      return self.emit(f"tf.TensorArray(tf.float32, {d}).unstack({{0}}).write({j}, {{1}})"
                       ".stack()", [a.name, b.name], a.shape, FLOAT, "ta_write", a.exact)
    idx = [self.rng.randrange(d) for _ in range(2)]
    return self.emit(f"tf.TensorArray(tf.float32, {d}).unstack({{0}}).gather({idx})",
                     [a.name], (2,) + a.shape[1:], FLOAT, "ta_gather", a.exact)

  def g_tape(self):
    """A GradientTape inside the body: the gradient of a scalar of the block w.r.t. a
    value of the body (second order in the gradient mode)."""
    if self.depth >= 2:
      return None
    a = self.any_float()
    stmts, local = self.block([a], self.rng.randint(1, 3))
    fl = [v for v in local if v.dtype == FLOAT]
    y = fl[-1].name if fl else a.name
    block = Block([], stmts, "{0}", [y], inline=True)
    lines = ["with tf.GradientTape() as {p}_tape:", "  {p}_tape.watch({0})", "  {B0}",
             "  {p}_y = tf.reduce_sum(tf.square({r0}))",
             "{o0} = {p}_tape.gradient({p}_y, {0}, "
             "unconnected_gradients=tf.UnconnectedGradients.ZERO)"]
    return self.emit(lines, [a.name], a.shape, FLOAT, "gradient_tape", False, [block])

  def g_function(self):
    """A nested tf.function called from the body, on body values passed as arguments."""
    if self.depth >= 2:
      return None
    args = [self.any_float()]
    if self.rng.random() < 0.5:
      args.append(self.pick(lambda v: v.dtype in (FLOAT, INT)) or self.any_float())
    params = [Var(self.fresh("q"), v.shape, v.dtype, v.exact) for v in args]
    saved = self.scope
    self.scope = []  # the function sees only its parameters (and captures)
    stmts, local = self.block(params, self.rng.randint(1, 3))
    self.scope = saved
    ret = self.result_of(stmts, local + params, params[0])
    block = Block([p.name for p in params], stmts, "{0}", [ret],
                  decorator="@tf.function(autograph=False)")
    call = ", ".join("{%d}" % k for k in range(len(args)))
    lines = ["{B0}", f"{{o0}} = {{b0}}({call})"]
    return self.emit(lines, [v.name for v in args], args[0].shape, FLOAT, "function", False,
                     [block])

  def g_newer_ops(self):
    """Ops whose converters came after the CI seeds were fixed (image, spectral, histogram):
    drawn only for seeds from EXTENDED_FROM, so the CI seeds keep their programs."""
    r = self.rng.random()
    if r < 0.2:
      a = self.any_float(min_rank=3, max_rank=3)
      return self.emit("tf.image.adjust_contrast({0}, 1.5)", [a.name], a.shape, FLOAT,
                       "adjust_contrast", False)
    if r < 0.35:
      h, w = self.rng.choice([1, 2, 3]), self.rng.choice([2, 3])
      a = self.operand((h, w, 3), FLOAT)
      op = self.rng.choice(["tf.image.adjust_saturation(tf.abs({0}), 0.5)",
                            "tf.image.adjust_hue(tf.abs({0}), 0.2)",
                            "tf.image.rgb_to_hsv(tf.abs({0}) + 0.1)"])
      return self.emit(op, [a.name], a.shape, FLOAT, "color", False)
    if r < 0.5:
      a = self.any_float(min_rank=3, max_rank=3)
      k = self.rng.randint(1, 3)
      out = (a.shape[1], a.shape[0], a.shape[2]) if k % 2 else a.shape
      return self.emit(f"tf.image.rot90({{0}}, {k})", [a.name], out, FLOAT, "rot90",
                       a.exact)
    if r < 0.65:
      a = self.any_float(min_rank=3, max_rank=3)
      size = [self.rng.randint(1, 4), self.rng.randint(1, 4)]
      method = self.rng.choice(["bilinear", "nearest", "bicubic", "area"])
      if 0 in a.shape:
        return None  # TF's resize kernels reject empty images (the loop itself fails)
      out = (size[0], size[1], a.shape[2])
      return self.emit(f"tf.image.resize({{0}}[tf.newaxis], {size}, method='{method}')[0]",
                       [a.name], out, FLOAT, "resize", False)
    if r < 0.8:
      a = self.any_float(min_rank=1, exact=True)
      return self.emit("tf.histogram_fixed_width({0}, [-1.0, 1.0], nbins=4)", [a.name], (4,),
                       INT, "histogram")
    a = self.any_float(min_rank=1, max_rank=3)
    out = a.shape[:-1] + (a.shape[-1] // 2 + 1,)
    return self.emit("tf.abs(tf.signal.rfft({0}))", [a.name], out, FLOAT, "rfft", False)

  def g_nested_pfor(self):
    """A pfor inside the body over the rows of a body value: the inner block sees its row,
    the inner index and the outer scope (invariant inside, per-iteration outside)."""
    if self.depth >= 1:
      return None
    a = self.pick(lambda v: v.dtype in (FLOAT, INT) and len(v.shape) >= 1 and v.shape[0])
    if a is None:
      return None
    row = Var(self.fresh("r"), a.shape[1:], a.dtype, a.exact)
    jv = Var(self.fresh("j"), (), INT)
    stmts, local = self.block([row, jv], self.rng.randint(1, 3))
    target = self.pick_recent([v for v in [row] + local if v.dtype in (FLOAT, INT)])
    ret = self.result_of(stmts, [row, jv] + local, target)
    block = Block([row.name, jv.name], stmts, "{0}", [ret])
    lines = ["{B0}", f"{{o0}} = vectorize.pfor(lambda {{p}}_j: {{b0}}(tf.gather({{0}}, "
             f"{{p}}_j), {{p}}_j), {a.shape[0]}, fallback_to_while_loop=False)"]
    return self.emit(lines, [a.name], (a.shape[0],) + target.shape, target.dtype,
                     "nested_pfor", False, [block])

  # -- the program ------------------------------------------------------------------------

  EXTENDED_WEIGHTS = [("g_newer_ops", 4)]
  NEWEST_WEIGHTS = [("g_ragged", 12), ("g_late_ops", 12)]
  NESTED_WEIGHTS = [("g_nested_pfor", 4)]
  PATTERN_WEIGHTS = [("g_state_while", 9), ("g_state_cond", 6), ("g_state_straight", 2),
                     ("g_ta_ragged", 9), ("g_mixed", 6)]
  RECURRENCE_WEIGHTS = [("g_state_recurrence", 10)]
  PADDINGS_WEIGHTS = [("g_pad_per_iteration", 3)]
  INDEX_VALUES_WEIGHTS = [("g_index_value", 6)]
  INDEX_SLICES_WEIGHTS = [("g_index_slice", 5)]
  WEIGHTS = [
      ("g_unary", 10), ("g_binary", 12), ("g_add_n", 1), ("g_compare", 3), ("g_logical", 2),
      ("g_where", 3), ("g_cast", 3), ("g_reduce", 6), ("g_cumulative", 2), ("g_arg", 2),
      ("g_matmul", 4), ("g_einsum", 3), ("g_reshape", 4), ("g_transpose", 3),
      ("g_expand_squeeze", 3), ("g_concat", 3), ("g_tile_pad", 3), ("g_broadcast_to", 1),
      ("g_shape_ops", 2), ("g_split", 2), ("g_slice", 6), ("g_gather", 4), ("g_scatter", 2),
      ("g_one_hot", 1), ("g_conv", 3), ("g_softmax", 3), ("g_sort", 2), ("g_linalg", 2),
      ("g_misc", 2), ("g_random", 2), ("g_cond", 5), ("g_guarded_cond", 1), ("g_switch", 3),
      ("g_while", 5), ("g_tensor_array", 2), ("g_tape", 3), ("g_function", 2),
  ]

  def statement(self):
    names, weights = zip(*(self.WEIGHTS +
                           (self.EXTENDED_WEIGHTS if self.seed >= EXTENDED_FROM else []) +
                           (self.NEWEST_WEIGHTS if self.seed >= NEWEST_FROM else []) +
                           (self.NESTED_WEIGHTS if self.seed >= NESTED_FROM else []) +
                           (self.PATTERN_WEIGHTS if self.seed >= PATTERNS_FROM else []) +
                           (self.RECURRENCE_WEIGHTS if self.seed >= RECURRENCES_FROM else []) +
                           (self.PADDINGS_WEIGHTS if self.seed >= PADDINGS_FROM else []) +
                           (self.INDEX_VALUES_WEIGHTS if self.seed >= INDEX_VALUES_FROM
                            else []) +
                           (self.INDEX_SLICES_WEIGHTS if self.seed >= INDEX_SLICES_FROM
                            else [])))
    for _ in range(20):
      g = self.rng.choices(names, weights)[0]
      if self.depth and g in ("g_function",):
        continue
      if getattr(self, g)() is not None:
        return

  def program(self):
    n = self.rng.choice([1, 2, 3, 3, 3, 4])
    for _ in range(self.rng.randint(1, 2)):
      self.load(self.rand_shape(), self.rng.choice([FLOAT, FLOAT, FLOAT, INT]))
    for _ in range(self.rng.randint(2, 10)):
      self.statement()
    top = [v for v in self.scope]
    outs = [top[-1].name]
    for _ in range(self.rng.randint(0, 2)):
      v = self.rng.choice(top)
      if v.name not in outs:
        outs.append(v.name)
    form = "tuple"
    if self.seed >= PATTERNS_FROM:
      if self.rng.random() < 0.5:
        outs = self.mixed_outputs(outs)
      form = "dict" if self.rng.random() < 0.35 else "tuple"
    return Program(self.seed, n, self.inputs, self.stmts, outs, out_form=form)


def generate(seed):
  """The program of a seed (deterministic)."""
  return Generator(seed).program()
