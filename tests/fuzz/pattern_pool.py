"""Generators of the patterns users reported silent wrong answers for, which the pool did not
draw before (seeds from programs.PATTERNS_FROM only, so older seeds keep their programs):

- state written in masked loops and conditionals: a `tf.Variable` made outside the body
  (an Input with `stateful=True`, read by the body only in g_state_recurrence) updated by `assign_add`,
  `assign_sub`, `scatter_add` / `scatter_sub` inside a `tf.while_loop` with a per-iteration
  trip count (with or without a TensorArray carried by the same loop, which makes it run
  masked), inside `tf.cond` branches with a per-iteration predicate, or in straight-line
  code; now and then an `assign` of a per-iteration value, which vectorize documents as
  refused with the fallback off (kind `state_assign`, see check.py);
- TensorArrays of per-iteration length: written for j < f(i) (dynamic_size=True, or size
  f(i)) and read back by stack / gather / concat / size / read;
- values of several dtypes (int64, bool, string) for outputs of mixed dtypes (programs.py
  returns several of them, as a tuple or a dict).

check.py compares every variable's value after pfor with its value after the loop.
"""

from tests.fuzz.ir import Block, Stmt, Var

FLOAT, INT, BOOL, INT64, STRING = "float32", "int32", "bool", "int64", "string"
STATE = "state"  # the dtype of an update statement's unused result: nothing picks it
TF = {FLOAT: "tf.float32", INT: "tf.int32"}


class PatternPool:
  """Mixed into programs.Generator."""

  # -- state ------------------------------------------------------------------------------

  def state_variable(self, shape, dtype):
    inp = self.new_input(shape, dtype, False, True)
    inp.stateful = True
    return inp

  def update_stmt(self, var, delta, masked_ok=True, j=None):
    """A statement updating `var` (an Input) by `delta` (a Var name of its shape)."""
    shape = var.shape
    r = self.rng.random()
    kw = ", read_value=False" if self.rng.random() < 0.4 else ""
    if r < 0.07:
      line, kind = f"{{o0}} = {var.name}.assign({{0}}{kw})", "state_assign"
    elif r < 0.45 or not shape or shape[0] == 0:
      op = "assign_add" if r < 0.35 or not shape or shape[0] == 0 else "assign_sub"
      line, kind = f"{{o0}} = {var.name}.{op}({{0}}{kw})", f"state_{op}"
    elif r < 0.7:
      line, kind = f"{{o0}} = {var.name}.assign_sub({{0}}{kw})", "state_assign_sub"
    else:
      op = "scatter_add" if r < 0.9 else "scatter_sub"
      idx = self.rng.choice(["i", "0", "i * 2 + 1"] + ([f"{j} + i", j] if j else []))
      line = (f"{{o0}} = {var.name}.{op}(tf.IndexedSlices({{0}}[:1], "
              f"[tf.math.floormod({idx}, {shape[0]})]))")
      kind = f"state_{op}"
    return Stmt([Var(self.fresh("u"), (), STATE)], [line], [delta], kind)

  def per_iteration_trips(self):
    """A trip count in [0, 3] that differs per iteration (mostly)."""
    r = self.rng.random()
    if r < 0.45:
      return "{0}", [self.load((), INT, low=0, high=4).name]
    if r < 0.65:
      return "tf.math.floormod(i, 3) + 1", []
    if r < 0.85:
      return "i", []
    return self.trip_count()

  def g_state_while(self):
    if self.depth >= 2:
      return None
    acc = self.pick(lambda v: v.dtype in (FLOAT, INT)) or self.any_float()
    var = self.state_variable(acc.shape, acc.dtype)
    trips, trip_deps = self.per_iteration_trips()
    jv = Var(self.fresh("j"), (), INT)
    cv = Var(self.fresh("c"), acc.shape, acc.dtype, acc.exact)
    stmts, local = self.block([jv, cv], self.rng.randint(0, 2))
    delta = self.result_of(stmts, [jv, cv] + local, cv)
    if self.rng.random() < 0.5:
      # An update that differs per trip too.
      name = self.fresh()
      cast = f"tf.cast({jv.name} + 1, {TF[acc.dtype]})"
      stmts.append(Stmt([Var(name, acc.shape, acc.dtype, False)],
                        ["{o0} = {0} * " + cast], [delta], "coerce"))
      delta = name
    stmts.append(self.update_stmt(var, delta, j=jv.name))
    if self.rng.random() < 0.3:
      stmts.append(self.update_stmt(var, cv.name, j=jv.name))
    ret = self.result_of(stmts, [jv, cv] + local, cv)
    names = [jv.name, cv.name]
    with_ta = self.rng.random() < 0.5
    dyn = with_ta and self.rng.random() < 0.5
    if with_ta:
      names.append("ta")
      body = Block(names, stmts, f"({jv.name} + 1, {{0}}, ta.write({jv.name}, {{1}}))",
                   [ret, ret if self.rng.random() < 0.5 else cv.name])
    else:
      body = Block(names, stmts, f"({jv.name} + 1, {{0}})", [ret])
    cond = Block(names, [], f"{jv.name} < {trips}", trip_deps)
    if dyn:
      # An eager TensorArray of dynamic size cannot stack zero elements.
      cond.ret = f"{jv.name} < tf.maximum({trips}, 1)"
    maxit = ", maximum_iterations=5" if self.rng.random() < 0.3 else ""
    lines = ["{B0}", "{B1}"]
    dt = TF[acc.dtype]
    es = list(acc.shape)
    if with_ta:
      ta = (f"tf.TensorArray({dt}, size=0, dynamic_size=True, element_shape={es})" if dyn
            else f"tf.TensorArray({dt}, 4, element_shape={es})")
      lines.append(f"_, {{o0}}, {{p}}_ta = tf.while_loop({{b0}}, {{b1}}, (0, {{0}}, {ta})"
                   f"{maxit})")
    else:
      lines.append(f"_, {{o0}} = tf.while_loop({{b0}}, {{b1}}, (0, {{0}}){maxit})")
    extra = []
    if with_ta and self.rng.random() < 0.5:
      # Read the TensorArray back (a per-iteration length where it grew dynamically).
      lines.append("{o1} = {p}_ta.stack()")
      extra = [((None if dyn else 4,) + acc.shape, acc.dtype, False)]
    kind = "state_while_ta" if with_ta else "state_while"
    return self.emit(lines, [acc.name], acc.shape, acc.dtype, kind, False, [cond, body], extra)

  def g_state_cond(self):
    if self.depth >= 2:
      return None
    target = self.pick(lambda v: v.dtype in (FLOAT, INT)) or self.any_float()
    var = self.state_variable(target.shape, target.dtype)
    if self.rng.random() < 0.7:
      pred, pdeps = self.rng.choice([("tf.equal(tf.math.floormod(i, 2), 0)", []),
                                     (f"i < {self.rng.randint(1, 3)}", []),
                                     ("{0} > 1", [self.load((), INT, 0, 4).name])])
    else:
      pred, pdeps = self.pred()
    blocks = []
    for b in range(2):
      stmts, local = self.block([], self.rng.randint(0, 2))
      ret = self.result_of(stmts, local, target)
      if self.rng.random() < (0.9 if b == 0 else 0.4):
        stmts.append(self.update_stmt(var, self.result_of(stmts, local, target)))
      blocks.append(Block([], stmts, "{0}", [ret]))
    lines = ["{B0}", "{B1}", f"{{o0}} = tf.cond({pred}, {{b0}}, {{b1}})"]
    return self.emit(lines, pdeps, target.shape, target.dtype, "state_cond", False, blocks)

  def g_state_straight(self):
    """An update in straight-line code (in a nested block: a branch or a loop body)."""
    a = self.pick(lambda v: v.dtype in (FLOAT, INT)) or self.any_float()
    var = self.state_variable(a.shape, a.dtype)
    stmt = self.update_stmt(var, a.name)
    self.stmts.append(stmt)
    return stmt.outs[0]

  # -- variables the body reads and writes: recurrences --------------------------------------

  def g_state_recurrence(self):
    """A variable the body reads as well as updates (seeds from programs.RECURRENCES_FROM):
    a running sum (`assign_add` / `assign_sub`), an affine update (`v * c + x`), a second
    variable assigned from the first (`w <- 2 v + x`), now and then updates that read each
    other (a swap) or a product (not affine), which vectorize refuses with the fallback off
    (kind `state_recurrence`: check.py then runs the fallback against the loop). Reads come
    before, between and after the updates; at depth > 0 (a branch, a loop body) the reads
    are refused too."""
    a = self.pick(lambda v: v.dtype in (FLOAT, INT)) or self.any_float()
    shape, dtype = a.shape, a.dtype
    v = self.state_variable(shape, dtype)
    r = self.rng.random()
    lines, deps, outs = [], [a.name], []

    def read(var, form=None):
      k = len(outs)
      outs.append(Var(self.fresh(), shape, dtype, dtype == INT))
      form = form or self.rng.choice(["{v}.read_value()", "tf.identity({v})",
                                      "{v} + tf.zeros_like({v})"])
      lines.append(f"{{o{k}}} = " + form.format(v=var.name))

    def maybe_read(var, p=0.6):
      if self.rng.random() < p:
        read(var)

    maybe_read(v)
    if r < 0.45 or (dtype == INT and r < 0.8):
      op = self.rng.choice(["assign_add", "assign_add", "assign_sub"])
      for _ in range(self.rng.choice([1, 1, 2])):
        lines.append(f"{v.name}.{op}({{0}})")
        maybe_read(v, 0.4)
    elif r < 0.7 and dtype == FLOAT:
      c = self.rng.choice(["0.5", "2.0", "-1.0", "0.9"])
      form = self.rng.choice([f"{v.name} * {c} + {{0}}", f"{c} * ({v.name} - {{0}})",
                              f"({v.name} + {{0}}) / 4.0"])
      lines.append(f"{v.name}.assign({form})")
    elif r < 0.9:
      w = self.state_variable(shape, dtype)
      scale = "2.0" if dtype == FLOAT else "2"
      pair = [f"{w.name}.assign({v.name} * {scale} + {{0}})", f"{v.name}.assign_add({{0}})"]
      if self.rng.random() < 0.5:
        pair.reverse()
      lines.extend(pair)
      read(w)
    elif r < 0.96:
      w = self.state_variable(shape, dtype)
      lines.extend([f"{{p}}_old = tf.identity({v.name})", f"{v.name}.assign({w.name})",
                    f"{w.name}.assign({{p}}_old + {{0}})"])
      read(w)
    else:
      lines.append(f"{v.name}.assign({v.name} * {v.name} + {{0}})")
    maybe_read(v, 1.0 if not outs else 0.5)
    stmt = Stmt(outs, lines, deps, "state_recurrence")
    self.stmts.append(stmt)
    self.scope.extend(outs)
    return outs[-1]

  # -- TensorArrays of per-iteration length --------------------------------------------------

  def g_ta_ragged(self):
    if self.depth >= 2:
      return None
    dtype = FLOAT if self.rng.random() < 0.8 else INT
    es = self.rand_shape(self.rng.choice([0, 1, 1, 2]))
    val = self.operand(es, dtype)
    dynamic = self.rng.random() < 0.5
    r = self.rng.random()
    if r < 0.4:
      f, deps = "{0} + 1", [self.load((), INT, low=0, high=4).name]
    elif r < 0.6:
      f, deps = "tf.math.floormod(i, 3) + 1", []
    elif r < 0.75:
      f, deps = "i + 1", []
    elif r < 0.9 and not dynamic:
      f, deps = "{0}", [self.load((), INT, low=0, high=4).name]  # may be 0
    else:
      f, deps = "tf.math.floormod(i * 3 + 1, 4) + 1", []
    at_least_one = f.endswith("+ 1")
    jv = Var(self.fresh("j"), (), INT)
    stmts, local = self.block([jv], self.rng.randint(0, 2))
    w = self.result_of(stmts, [jv] + local, val)
    if self.rng.random() < 0.6:
      name = self.fresh()
      stmts.append(Stmt([Var(name, es, dtype, False)],
                        [f"{{o0}} = {{0}} + tf.cast({jv.name} * 2 + 1, {TF[dtype]})"], [w],
                        "coerce"))
      w = name
    names = [jv.name, "ta"]
    body = Block(names, stmts, f"({jv.name} + 1, ta.write({jv.name}, {{0}}))", [w])
    cond = Block(names, [], f"{jv.name} < {f}", deps)
    es_kw = f", element_shape={list(es)}" if self.rng.random() < 0.85 or not at_least_one else ""
    # Read-many, as a traced TensorArray always is: eagerly a read clears its element and a
    # later gather of it gives zeros, which no graph (the loop's tf.function form) does.
    es_kw += ", clear_after_read=False"
    ta = (f"tf.TensorArray({TF[dtype]}, size=0, dynamic_size=True{es_kw})" if dynamic else
          f"tf.TensorArray({TF[dtype]}, size={f}{es_kw})")
    lines = ["{B0}", "{B1}", f"_, {{p}}_ta = tf.while_loop({{b0}}, {{b1}}, (0, {ta}))"]
    reads = [("{p}_ta.stack()", (None,) + es, dtype),
             ("{p}_ta.gather(tf.range({p}_ta.size() - 1, -1, -1))", (None,) + es, dtype),
             ("{p}_ta.gather(tf.range(0, {p}_ta.size(), 2))", (None,) + es, dtype),
             ("{p}_ta.size()", (), INT)]
    if es:
      reads.append(("{p}_ta.concat()", (None,) + es[1:], dtype))
    if at_least_one:
      reads += [("{p}_ta.read(0)", es, dtype), ("{p}_ta.read({p}_ta.size() - 1)", es, dtype),
                ("{p}_ta.gather([0])", (1,) + es, dtype)]
    chosen = self.rng.sample(reads, self.rng.randint(1, 2))
    outs = []
    for k, (form, shape, dt) in enumerate(chosen):
      lines.append(f"{{o{k}}} = " + form)
      outs.append((shape, dt, dt == INT and form.endswith("size()")))
    (shape, dt, exact), extra = outs[0], outs[1:]
    kind = "ta_ragged_dynamic" if dynamic else "ta_ragged_sized"
    return self.emit(lines, deps, shape, dt, kind, exact, [cond, body], extra)

  # -- values of several dtypes ----------------------------------------------------------

  def g_mixed(self):
    r = self.rng.random()
    if r < 0.25:
      a = self.any_int()
      return self.emit("tf.cast({0}, tf.int64) * 3 - 1", [a.name], a.shape, INT64, "int64")
    if r < 0.4:
      a = self.any_float()
      if self.rng.random() < 0.5:
        return self.emit("tf.size({0}, out_type=tf.int64)", [a.name], (), INT64, "int64")
      return self.emit("tf.shape({0}, out_type=tf.int64)", [a.name], (len(a.shape),), INT64,
                       "int64")
    if r < 0.5:
      a = self.any_float(min_rank=1, exact=True)
      if 0 in a.shape:
        return None
      return self.emit("tf.argmax({0}, axis=-1)", [a.name], a.shape[:-1], INT64, "int64")
    if r < 0.75:
      if self.rng.random() < 0.6:
        a = self.any_int()
        return self.emit("tf.strings.as_string({0})", [a.name], a.shape, STRING, "string")
      a = self.any_float(exact=True)
      return self.emit("tf.strings.as_string(tf.round({0} * 4.0), precision=1)", [a.name],
                       a.shape, STRING, "string")
    strings = [v for v in self.scope if v.dtype == STRING]
    if r < 0.88 and strings:
      s = self.pick_recent(strings)
      if self.rng.random() < 0.5:
        return self.emit('tf.strings.join([{0}, "_x"])', [s.name], s.shape, STRING, "string")
      return self.emit("tf.strings.length({0})", [s.name], s.shape, INT, "string_length")
    a = self.pick(lambda v: v.dtype in (FLOAT, INT) and v.exact) or self.any_int()
    zero = "0" if a.dtype == INT else "0.0"
    return self.emit(f"tf.math.logical_not({{0}} > {zero})", [a.name], a.shape, BOOL,
                     "bool_out")

  def mixed_outputs(self, outs):
    """Adds outputs of dtypes not returned yet (one of each dtype in scope)."""
    for _ in range(self.rng.randint(1, 3)):
      self.g_mixed()
    have = {v.dtype for v in self.scope if v.name in outs}
    for dtype in (FLOAT, INT, INT64, BOOL, STRING):
      cands = [v for v in self.scope if v.dtype == dtype and v.name not in outs]
      if cands and dtype not in have and self.rng.random() < 0.8:
        outs.append(self.pick_recent(cands).name)
        have.add(dtype)
    return outs
