"""Generators of values whose size differs per iteration, and of what consumes them (drawn
for seeds from programs.NEWEST_FROM only).

A per-iteration size is a `None` in a Var's shape (`tf.range(x[i])` is `(None,)`); a
`tf.RaggedTensor` made in the body has dtype RAGGED. The generic generators never pick
either (`Generator.pick` keeps to fixed shapes): only these do, so a program either reduces
such a value to a fixed shape or returns it, and pfor's result is then compared with
`tf.ragged.stack` of the loop's (check.py).
"""

FLOAT, INT = "float32", "int32"
RAGGED = "ragged"


def fixed(v):
  """Whether a Var has the same static shape in every iteration (and is not ragged)."""
  return v.dtype != RAGGED and None not in v.shape


class RaggedPool:
  """Mixed into programs.Generator: `g_ragged` adds one producer or consumer."""

  def sized(self, dtype=None, rank=None):
    """A value of per-iteration size in scope (dtype, rank as asked), or None."""
    cands = [v for v in self.scope if not fixed(v) and v.dtype != RAGGED and
             (dtype is None or v.dtype == dtype) and (rank is None or len(v.shape) == rank)]
    return self.pick_recent(cands) if cands else None

  def small_int(self):
    """A per-iteration int scalar in [0, 5): a size that differs between iterations."""
    r = self.rng.random()
    if r < 0.5:
      return "{0}", [self.load((), INT, low=0, high=5).name]
    if r < 0.7:
      return "tf.math.floormod(i * 3 + 1, 5)", []
    return "i", []

  def g_ragged(self):
    """A producer (where none is in scope, or now and then), then a chain of consumers."""
    made = None
    if self.rng.random() < 0.4 or self.sized() is None:
      made = self.ragged_producer()
    for _ in range(self.rng.randint(0 if made else 1, 3)):
      if self.sized() is not None:
        made = self.ragged_consumer() or made
    return made

  # -- producers: a value whose size differs per iteration --------------------------------

  def ragged_producer(self):
    r = self.rng.random()
    if r < 0.2:
      lim, deps = self.small_int()
      if self.rng.random() < 0.5:
        return self.emit(f"tf.range({lim})", deps, (None,), INT, "ragged_range")
      start = self.rng.randint(-2, 2)
      return self.emit(f"tf.cast(tf.range({start}, {start} + {lim}), tf.float32) * 0.5", deps,
                       (None,), FLOAT, "ragged_range")
    if r < 0.4:
      a = self.pick(lambda v: v.dtype in (FLOAT, INT) and v.exact and 1 <= len(v.shape) <= 2,
                    lambda: self.operand(self.rand_shape(self.rng.randint(1, 2)), FLOAT,
                                         fresh=1.0))
      if not a.exact or not a.shape:
        return None
      zero = "0.0" if a.dtype == FLOAT else "0"
      mask = "{0} > " + zero if len(a.shape) == 1 else "{0}[:, 0] > " + zero
      return self.emit(f"tf.boolean_mask({{0}}, {mask})", [a.name], (None,) + a.shape[1:],
                       a.dtype, "boolean_mask", a.exact)
    if r < 0.55:
      ix = self.any_int(min_rank=1, max_rank=1)
      if self.rng.random() < 0.5:
        return self.emit("tf.unique(tf.math.floormod({0}, 3))[0]", [ix.name], (None,), INT,
                         "unique")
      lines = ["{p}_u = tf.unique_with_counts(tf.math.floormod({0}, 3))",
               "{o0} = {p}_u.count", "{o1} = {p}_u.idx", "{o2} = {p}_u.y"]
      return self.emit(lines, [ix.name], (None,), INT, "unique_with_counts",
                       extra_outs=[(ix.shape, INT, True), ((None,), INT, True)])
    if r < 0.7:
      ix = self.any_int(min_rank=1, max_rank=1)
      if self.rng.random() < 0.5:
        text = 'tf.strings.reduce_join(tf.where({0} > 0, "ab", " "), separator="")'
        split = "tf.strings.split({})"
      else:
        text = 'tf.strings.reduce_join(tf.strings.as_string({0}), separator=" ")'
        split = 'tf.strings.split({}, sep="1")'
      if self.rng.random() < 0.3:
        # Two strings: tf.strings.split gives a RaggedTensor, returned as it is.
        pair = f"tf.stack([{text}, {text.replace('{0}', '-{0}')}])"
        return self.emit(f"tf.strings.length({split.format(pair)})", [ix.name], (), RAGGED,
                         "string_split_ragged")
      return self.emit(f"tf.strings.length({split.format(text)})", [ix.name], (None,), INT,
                       "string_split")
    if r < 0.8:
      a = self.pick(lambda v: v.dtype in (FLOAT, INT) and v.exact and 1 <= len(v.shape) <= 2,
                    lambda: self.operand((self.rng.randint(2, 4),), INT, fresh=1.0))
      zero = "0.0" if a.dtype == FLOAT else "0"
      return self.emit(f"tf.cast(tf.where({{0}} > {zero}), tf.int32)", [a.name],
                       (None, len(a.shape)), INT, "where")
    if r < 0.88:
      # A prefix of a fixed-size value, its length drawn per iteration (x[i][:lengths[i]]).
      a = self.pick(lambda v: v.dtype in (FLOAT, INT) and 1 <= len(v.shape) <= 2,
                    lambda: self.operand(self.rand_shape(self.rng.randint(1, 2)), FLOAT))
      lim, deps = self.small_int()
      lim = lim.replace("{0}", "{1}")
      return self.emit(f"{{0}}[:{lim}]", [a.name] + deps, (None,) + a.shape[1:], a.dtype,
                       "ragged_prefix", a.exact)
    data = self.any_float(min_rank=1, max_rank=2)
    k = data.shape[0]
    ids = self.operand((k,), INT, fresh=0.6)
    op = self.rng.choice(["segment_sum", "segment_max", "segment_min", "segment_mean",
                          "segment_prod"])
    return self.emit(f"tf.math.{op}({{0}}, tf.sort(tf.math.floormod({{1}}, 3)))",
                     [data.name, ids.name], (None,) + data.shape[1:], FLOAT, "segment",
                     data.exact and op in ("segment_max", "segment_min"))

  # -- consumers ----------------------------------------------------------------------------

  def ragged_consumer(self):
    r = self.rng.random()
    if r < 0.08:
      return self.ragged_tensor_consumer()
    a = self.sized()
    rest = a.shape[1:]
    if r < 0.25:
      op = self.rng.choice(["reduce_sum", "reduce_max", "reduce_min"])
      return self.emit(f"tf.{op}({{0}}, 0)", [a.name], rest, a.dtype, "ragged_reduce",
                       a.exact and (op != "reduce_sum" or a.dtype == INT))
    if r < 0.35:
      form = self.rng.choice(["tf.size({0})", "tf.shape({0})[0]"])
      return self.emit(form, [a.name], (), INT, "ragged_size")
    if r < 0.5:
      if a.dtype == FLOAT:
        form = self.rng.choice(["tf.sin({0})", "{0} * 2.0 + 1.0", "tf.nn.relu({0})",
                                "tf.square({0}) - {1}"])
        s = self.operand((), FLOAT)
        return self.emit(form, [a.name, s.name], a.shape, FLOAT, "ragged_elementwise",
                         form.startswith("tf.nn") and a.exact)
      s = self.int_scalar()
      return self.emit("{0} * 2 + {1}", [a.name, s.name], a.shape, INT, "ragged_elementwise")
    if r < 0.58:
      op = "tf.cumsum" if self.rng.random() < 0.7 else "tf.math.cumprod"
      return self.emit(f"{op}({{0}}, axis=0)", [a.name], a.shape, a.dtype, "ragged_cumsum",
                       a.dtype == INT)
    if r < 0.68:
      other = self.sized(a.dtype, len(a.shape))
      if other is None or other.shape[1:] != rest or self.rng.random() < 0.3:
        other = self.operand((self.rng.randint(0, 3),) + rest, a.dtype)
      pair = [a.name, other.name] if self.rng.random() < 0.5 else [other.name, a.name]
      return self.emit("tf.concat([{0}, {1}], 0)", pair, (None,) + rest, a.dtype,
                       "ragged_concat", a.exact and other.exact)
    if r < 0.78:
      k = self.rng.randint(1, 3)
      zeros = "".join(", [0, 0]" for _ in rest)
      if self.rng.random() < 0.5:
        return self.emit(f"tf.pad({{0}}, [[1, 2]{zeros}])", [a.name], a.shape, a.dtype,
                         "ragged_pad", a.exact)
      # Pads (or cuts) every iteration's value to k rows: a fixed shape again.
      return self.emit(f"tf.ensure_shape(tf.pad({{0}}[:{k}], [[0, {k} - tf.shape({{0}}[:{k}])"
                       f"[0]]{zeros}]), {[k] + list(rest)})", [a.name], (k,) + rest, a.dtype,
                       "ragged_pad_to", a.exact)
    if r < 0.81:
      form = self.rng.choice(["{0}[1:]", "{0}[::-1]", "{0}[:2]", "tf.reverse({0}, [0])"])
      return self.emit(form, [a.name], a.shape, a.dtype, "ragged_slice", a.exact)
    if r < 0.84:
      # A later-axis stack (the ragged axis stays first), a reverse of every axis, or a
      # recurrence stepping through the rows (a while loop reading the value).
      form = self.rng.random()
      if form < 0.25 and a.dtype == FLOAT:
        return self.emit(
            "tf.while_loop(lambda t, h: t < tf.shape({0})[0], lambda t, h: (t + 1, "
            f"tf.tanh(h * 0.5 + {{0}}[t])), (0, tf.zeros({list(rest)})))[1]", [a.name],
            rest, FLOAT, "ragged_loop", False)
      if form < 0.6:
        return self.emit("tf.stack([{0}, {0} + {0}], axis=1)", [a.name],
                         (None, 2) + rest, a.dtype, "ragged_stack", a.exact)
      axes = list(range(len(a.shape)))
      return self.emit(f"tf.reverse({{0}}, {axes[::-1]})", [a.name], a.shape, a.dtype,
                       "ragged_reverse", a.exact)
    if r < 0.9 and a.dtype == INT and len(a.shape) == 1:
      return self.emit("tf.math.bincount(tf.math.floormod({0}, 4), minlength=4, "
                       "maxlength=4)", [a.name], (4,), INT, "ragged_bincount")
    if r < 0.92 and a.dtype == FLOAT:
      form = self.rng.choice(["tf.nn.softmax({0})", "tf.nn.log_softmax({0})",
                              "tf.sort({0}, axis=-1)", "tf.sort({0}, 0, 'DESCENDING')"])
      if form.endswith("'DESCENDING')") and len(a.shape) != 1:
        form = "tf.sort({0}, axis=-1)"
      return self.emit(form, [a.name], a.shape, FLOAT, "ragged_softmax_sort",
                       a.exact and "sort" in form)
    if r < 0.95 and a.dtype == FLOAT and len(a.shape) == 2:
      w = self.operand((a.shape[1], self.rng.randint(1, 3)), FLOAT)
      return self.emit("tf.matmul({0}, {1})", [a.name, w.name], (None, w.shape[1]), FLOAT,
                       "ragged_matmul", False)
    if len(a.shape) == 1 and a.dtype == INT:
      # A RaggedTensor of two rows made in the body, returned or consumed.
      return self.emit("tf.RaggedTensor.from_row_lengths({0}, [tf.size({0}) // 2, "
                       "tf.size({0}) - tf.size({0}) // 2])", [a.name], (), RAGGED,
                       "ragged_tensor")
    return self.emit("tf.reshape({0}, [-1])", [a.name], (None,), a.dtype, "ragged_reshape",
                     a.exact)

  def ragged_tensor_consumer(self):
    cands = [v for v in self.scope if v.dtype == RAGGED]
    if not cands:
      return None
    rt = self.pick_recent(cands)
    r = self.rng.random()
    if r < 0.4:
      return self.emit("tf.cast(tf.reduce_sum({0}, axis=1), tf.int32)", [rt.name], (2,), INT,
                       "ragged_tensor_reduce")
    if r < 0.7:
      return self.emit("tf.cast({0}.row_lengths(), tf.int32)", [rt.name], (2,), INT,
                       "ragged_tensor_lengths")
    return self.emit("tf.cast({0}.flat_values, tf.int32)", [rt.name], (None,), INT,
                     "ragged_tensor_values")
