"""The VM: runs a lowered program for a whole batch in one `tf.while_loop`.

State: one program counter per member (a block index; `halt` past the last block), one
overflow code per member, one register per register or stack variable and one pointer per
stack, all kept in register files by type (`registers.py`), and the stacks, in one buffer
per type (`storage.Stacks`), the return-address stack among them. Each step picks the
smallest program counter among running members (with `schedule="fullest"`, the block the
most members wait at), dispatches with `tf.switch_case` to that
block, runs the block's straight-line code vectorized by the pfor engine for the members
waiting there (held as the core active set's `Partitioned` holds them, or `Masked` with
static shapes under XLA: `active_set.py`), and advances only their counters. The dispatch
returns only what the block writes (its registers' slots, and under XLA the values it
pushes), so no step copies the whole state. Members at different
recursion depths wait at the same block and run together. A block that only copies values
(argument and result moves, pushes and pops) skips the engine.
"""

import contextlib

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import ops  # pylint: disable=g-direct-tensorflow-import

from vectorize import graph_io
from vectorize.active_set import Masked, Partitioned
from vectorize.errors import ConversionError
from vectorize.pc import engine_bridge, ir, liveness
from vectorize.pc.allocation import REGISTER, STACK
from vectorize.pc.registers import Layout
from vectorize.pc.storage import Stacks
from vectorize.pc.straight_line import StraightLine, assigned, is_copy

_INITIAL_DEPTH = 8
_RETURN = "return address"
_INT = ir.VarType(tf.int32, ())


STEPS_EXHAUSTED = -1


SCHEDULES = ("lowest", "fullest")


def run(program, inputs, max_stack_depth=None, max_steps=None, schedule="lowest"):
  """The entry's results for every member, and each member's failure code (0: none).

  inputs: one tensor per entry parameter, the batch on axis 0. Code k > 0 means a call of
  `program.functions[k - 1]` found that member's stack full (the member halts at once);
  `STEPS_EXHAUSTED` means the loop stopped after `max_steps` steps with the member still
  running. A failed member's results are NaN (floats), the dtype's minimum (integers) or
  False. `max_steps` bounds the loop (XLA needs it to differentiate the loop).
  """
  return _Machine(program, max_stack_depth, max_steps, schedule).run(inputs)


class _Machine:

  def __init__(self, program, max_stack_depth, max_steps, schedule="lowest"):
    self.program = program
    self.schedule = schedule
    self.max_steps = max_steps
    self.masked = engine_bridge.static_shapes_wanted()
    self.strategy = Masked() if self.masked else Partitioned()
    if self.masked and max_stack_depth is None:
      raise ConversionError("autobatch: under XLA (jit_compile=True) stacks cannot grow; "
                            f"pass max_stack_depth to autobatch({program.main}) (the deepest "
                            "recursion any member reaches)")
    self.grow = max_stack_depth is None
    self.depth = _INITIAL_DEPTH if self.grow else max_stack_depth
    self.live_out = liveness.live_out_lowered(program)
    self.blocks = dispatch_order(program)
    self.index = {b.label: k for k, b in enumerate(self.blocks)}
    self.halt = len(self.blocks)
    self.namespaces = {f.name: f.namespace for f in program.functions}
    self.codes = {f.name: k + 1 for k, f in enumerate(program.functions)}
    stacked = sorted(v for v, k in program.storage.items() if k == STACK) + [_RETURN]
    self.types = dict(program.types, **{_RETURN: _INT})
    types = {v: self.types[v] for v, k in program.storage.items() if k in (REGISTER, STACK)}
    types.update({"pc": _INT, "overflow": _INT}, **{_pointer(v): _INT for v in stacked})
    self.registers = Layout(types, [self.writes(b) for b in self.blocks])
    self.stacks = Layout({v: self.types[v] for v in stacked},
                         [self.pushes(b) for b in self.blocks], padding=0)
    # Under XLA each push's row is read after the dispatch from its pointer register (the
    # block leaves it one past the row), so blocks return no rows, and no "no write" fills.
    self.push_pointers = {}
    for key, width in self.stacks.width.items():
      rows = [[self.registers.rows[_pointer(v)][1] for v in s[key]] +
              [0] * (width - len(s[key])) for s in self.stacks.slots]
      valid = [[k < len(s[key]) for k in range(width)] for s in self.stacks.slots]
      self.push_pointers[key] = (np.array(rows, np.int32).reshape(len(self.blocks), -1),
                                 np.array(valid, bool).reshape(len(self.blocks), -1))

  def stored(self, block):
    """The variables `block` assigns that some later block may read: the values it writes
    back to registers (a block writes nothing a path from its end overwrites unread)."""
    return [v for v in assigned(block.body) if self.program.storage.get(v) in (
        REGISTER, STACK) and v in self.live_out[block.label]]

  def writes(self, block):
    """The registers `block` may write."""
    out = ["pc"] + self.stored(block)
    stacks = [i.var for i in block.body if isinstance(i, (ir.Pop, ir.Push))]
    if any(isinstance(i, ir.PushReturn) for i in block.body) or isinstance(
        block.terminator, ir.IndirectGoto):
      stacks.append(_RETURN)
    if self.pushes(block) and not self.grow:
      out.append("overflow")
    return out + [_pointer(v) for v in dict.fromkeys(stacks)]

  def pushes(self, block):
    """The stacks `block` pushes on, in push order."""
    return [i.var for i in block.body if isinstance(i, ir.Push)] + (
        [_RETURN] if any(isinstance(i, ir.PushReturn) for i in block.body) else [])

  def run(self, inputs):
    main = self.program.function(self.program.main)
    batch = tf.shape(inputs[0])[0]
    self.lanes = tf.range(batch)
    values = {"pc": self.index[main.entry], _pointer(_RETURN): 1}
    values.update((p, x) for p, x in zip(main.params, inputs) if p in self.registers)
    files = self.registers.initial(values, batch)
    stacks = {}
    for key, names in self.stacks.names.items():   # a row more: the return stack's `halt`
      t = self.stacks.types[key]
      stacks[key] = Stacks.empty(len(names), self.depth + 1, batch, t.dtype, t.shape).buffer
    if _RETURN in self.stacks:   # its bottom entry is `halt`: the entry's return halts
      key, row = self.stacks.rows[_RETURN]
      stacks[key] = tf.tensor_scatter_nd_update(
          stacks[key], tf.stack([tf.fill([batch], row), tf.zeros([batch], tf.int32),
                                 self.lanes], 1), tf.fill([batch], self.halt))
    state = {"files": files, "stacks": stacks,
             "next": (tf.where(batch > 0, self.index[main.entry], self.halt), tf.constant(0))}
    shapes = tf.nest.map_structure(lambda v: v.shape, state)
    if self.grow:
      shapes["stacks"] = {k: tf.TensorShape([s[0], None] + s[2:].as_list())
                          for k, s in shapes["stacks"].items()}
    final = files
    if inputs[0].shape[0] != 0:     # batch 0: nothing runs (a scatter into it would not build)
      final = graph_io.while_loop(
          lambda s: s["next"][0] < self.halt,
          self.step, [state], shape_invariants=[shapes],
          maximum_iterations=self.max_steps)[0]["files"]
    pc, overflow = (self.registers.read(final, k) for k in ("pc", "overflow"))
    overflow = tf.where((pc < self.halt) & tf.equal(overflow, 0), STEPS_EXHAUSTED, overflow)
    failed = tf.not_equal(overflow, 0)
    results = tuple(_poison(self.registers.read(final, r), failed)
                    for r in self.program.results)
    return results, overflow

  def step(self, state):
    """Runs the block `next_block` picks for the members waiting there.

    Under XLA the stack buffers stay out of the dispatch: a block returns the values it
    pushes, one per lane, written after it to the rows its pointers give, so no step
    copies a `[depth, batch, ...]` buffer (measured: behind a `tf.cond` that skips the
    write for blocks that push nothing, or a dispatch in two levels, XLA copies the
    buffers and the files, 2-10x slower). Without XLA, TF's own Case passes tensors
    through without copies, and pushes land at once.
    """
    files, stacks = state["files"], state["stacks"]
    k, first = state["next"]
    pc = self.registers.read(files, "pc")
    members = self.strategy.members(tf.equal(pc, k), self.lanes, first)
    if self.masked:      # its own gradient: see `_switch_recomputed_in_gradient`
      branches = [lambda files, stacks, block=block: self.block(
          block, files, stacks, members.sized_here()) for block in self.blocks]
      slots, stacked = _switch_recomputed_in_gradient(k, branches, (files, stacks),
                                                      self.eager_values_as_constants)
    else:
      slots, stacked = tf.switch_case(k, [
          lambda block=block: self.block(block, files, stacks, members)
          for block in self.blocks])
    xla = self.masked and engine_bridge.compiled_by_xla()
    files = self.registers.written(files, k, slots, xla)
    if self.masked:
      pushed, stacked = stacked, dict(stacks)
      for key, values in pushed.items():
        pointers, valid = (tf.gather(tf.constant(t), k) for t in self.push_pointers[key])
        pointer_key = self.registers.rows[_pointer(self.stacks.names[key][0])][0]
        rows = tf.gather(files[pointer_key], pointers) - 1
        rows = tf.where(valid[:, None] & members.mask[None, :], rows, -1)
        indices = tf.gather(tf.constant(self.stacks.targets[key]), k)
        stacked[key] = Stacks(stacks[key]).written(indices, rows, values, self.lanes, xla).buffer
    return [{"files": files, "stacks": stacked,
             "next": self.next_block(self.registers.read(files, "pc"))}]

  @contextlib.contextmanager
  def eager_values_as_constants(self):
    """The program's expressions read the eager tensors of their namespaces as constants
    of the graph being built, not as captures: a gradient that recomputes a block inside
    the loop's gradient cannot capture an eager tensor (TF's while_v2 loses such a capture:
    "... is in list of internal_captures but not in internal_capture_to_output")."""
    saved = self.namespaces
    self.namespaces = {name: {k: tf.constant(v) if isinstance(v, ops.EagerTensor) else v
                              for k, v in namespace.items()}
                       for name, namespace in saved.items()}
    try:
      yield
    finally:
      self.namespaces = saved

  def next_block(self, pc):
    """The block to run next (the lowest program counter, or with the "fullest" schedule
    the one most members wait at) and the first lane waiting there; "lowest" from one
    reduction (of pc * batch + lane), not one per step for each."""
    if self.schedule == "fullest":
      counts = tf.reduce_sum(tf.one_hot(pc, self.halt + 1, dtype=tf.int32), 0)
      k = tf.cast(tf.argmax(counts[:self.halt]), tf.int32)
      k = tf.where(counts[self.halt] < tf.size(pc), k, self.halt)
      return k, tf.reduce_min(tf.where(tf.equal(pc, k), self.lanes, tf.size(pc) - 1))
    batch = tf.cast(tf.size(pc), tf.int64)
    key = tf.reduce_min(tf.cast(pc, tf.int64) * batch + tf.cast(self.lanes, tf.int64))
    return tf.cast(key // batch, tf.int32), tf.cast(key % batch, tf.int32)

  def block(self, block, files, stacks, members):
    """Runs `block` for `members` (those waiting at it, found once per step, outside the
    dispatch): (its register slots, and the stack buffers with its pushes, or under XLA
    the values it pushes)."""
    regs = _View(self.registers, files)
    self.stack_buffers = dict(stacks)
    pending = {}
    term = block.terminator
    cond = term.cond if isinstance(term, ir.Branch) else None
    code = StraightLine(block.body, self.stored(block), cond, self.namespaces,
                        self.program.types, self.program.function_of(block.label).filename)
    if self.masked and self.integral(block, code) and engine_bridge.compiled_by_xla():
      members = members.unborrowed()
      inputs = [regs[r] for r in code.reads]
    else:
      read = self.registers.gathered(files, code.reads, members)
      inputs = [read[r] for r in code.reads]
    for instruction in block.body:
      if isinstance(instruction, (ir.Pop, ir.Peek)):
        inputs.append(self.top(regs, instruction.var, members))
        if isinstance(instruction, ir.Pop):
          pointer = _pointer(instruction.var)
          regs[pointer] = regs[pointer] - tf.cast(members.mask, tf.int32)
    outputs = []
    if code.pushes or code.writes or cond:
      outputs = self.run_code(block, code, inputs, members)
    full = []
    for var, value in zip(code.pushes, outputs):
      full.append(self.push(regs, var, members, value, pending))
    for var, value in zip(code.writes, outputs[len(code.pushes):]):
      regs[var] = members.update(regs[var], value)
    for instruction in block.body:
      if isinstance(instruction, ir.PushReturn):
        address = tf.fill([members.n], self.index[instruction.label])
        full.append(self.push(regs, _RETURN, members, address, pending))
    regs["pc"] = members.update(regs["pc"], self.next_pc(term, members, regs, outputs))
    if full and not self.grow:      # a full stack halts the member, with its callee's code
      overflow = tf.reduce_any(tf.stack(full), 0) if len(full) > 1 else full[0]
      regs["pc"] = tf.where(overflow, self.halt, regs["pc"])
      regs["overflow"] = tf.where(overflow, self.codes[block.calls], regs["overflow"])
    assert set(regs.written) <= set(self.writes(block)), (block.label, regs.written)
    slots = self.registers.slots_of(self.index[block.label], regs)
    if not self.masked:
      return slots, self.stack_buffers
    return self.staged(block, slots, pending, members)

  def integral(self, block, code):
    """Whether every value `block` reads, pops, pushes or writes is an integer or bool."""
    names = set(code.reads) | set(assigned(block.body)) | {
        i.var for i in block.body if isinstance(i, (ir.Pop, ir.Peek, ir.Push))}
    return all(v in self.types and (self.types[v].dtype.is_integer or
                                    self.types[v].dtype == tf.bool) for v in names)

  def staged(self, block, slots, pending, members):
    """The block's register slots, and per stack type the values it pushes (`[width,
    batch, ...]`, padded by repeating a value: `step` writes padding to no row). No rows:
    `step` reads them from the pointers, so a block that pushes nothing needs no "no
    write" rows (under XLA each output is a kernel per block). Not one tensor with the
    slots: XLA on CPU fuses no concatenate of more than 8 parts (fib has 7 + 2)."""
    values = {}
    for key, names in self.stacks.slots[self.index[block.label]].items():
      width = self.stacks.width[key]
      if width and names:
        rows = [pending[v] for v in names]
        values[key] = tf.stack(rows + [rows[0]] * (width - len(rows)))
      elif width:            # (zeros: a slot's rows would be computed twice)
        t = self.stacks.types[key]
        values[key] = tf.zeros(tf.stack([width, members.n] + list(t.shape)),
                               t.dtype)
    return slots, values

  def run_code(self, block, code, inputs, members):
    """The block's outputs for its members: by the pfor engine, or directly when the block
    only moves values (copies and constants act on every member's row alike)."""
    if not all(is_copy(i) for i in block.body if isinstance(i, ir.Assign)):
      return engine_bridge.run_for_members(code.run, inputs, members.n, members.static_n)
    outputs = code.run(*inputs)
    names = list(code.pushes) + list(code.writes)
    shapes = [self.program.types[v].shape for v in names] + ([()] if code.cond else [])
    return [x if x.shape.rank == len(shape) + 1 else tf.broadcast_to(
        x, tf.concat([[members.n], tf.constant(shape, tf.int32)], 0))
            for x, shape in zip(outputs, shapes)]

  def next_pc(self, term, members, regs, outputs):
    if isinstance(term, ir.Goto):
      return tf.fill([members.n], self.index[term.label])
    if isinstance(term, ir.Branch):
      return tf.where(outputs[-1], self.index[term.if_true], self.index[term.if_false])
    address = self.top(regs, _RETURN, members)
    regs[_pointer(_RETURN)] = regs[_pointer(_RETURN)] - tf.cast(members.mask, tf.int32)
    return address

  def top(self, regs, var, members):
    key, index = self.stacks.rows[var]
    return Stacks(self.stack_buffers[key]).top(index, regs[_pointer(var)], members)

  def push(self, regs, var, members, values, pending):
    """Pushes at once (gathered members), or stages the write in `pending` (masked lanes);
    returns who overflowed."""
    key, index = self.stacks.rows[var]
    stacks, pointer = Stacks(self.stack_buffers[key]), _pointer(var)
    if self.masked:
      assert var not in pending, var        # `step` finds one row per stack and block
      regs[pointer], overflow = stacks.staged_push(regs[pointer], members)
      pending[var] = values
      return overflow
    stacks, regs[pointer], overflow = stacks.push(index, regs[pointer], members, values,
                                                  self.grow)
    self.stack_buffers[key] = stacks.buffer
    return overflow


class _View:
  """The registers as one block sees them: read from the files, written aside."""

  def __init__(self, registers, files):
    self.rows = registers.rows_of(files)
    self.written = {}

  def __getitem__(self, var):
    if var in self.written:
      return self.written[var]
    return self.rows[var]

  def __setitem__(self, var, value):
    self.written[var] = value


def _switch_recomputed_in_gradient(index, branches, state, recomputing):
  """`tf.switch_case(index, [lambda: b(*state) for b in branches])` whose gradient is a
  switch of the branches' own gradients, each computing its branch again from `state`.

  For the dispatch under XLA (where its blocks select their members' lanes themselves,
  and where the batch may be unknown when traced). Differentiated directly, a
  `tf.switch_case` hands the values its gradient needs out as extra outputs, and TF gives
  the branches that do not compute one a stand-in of its static shape with each unknown
  size 0 (cond_v2's FakeParams): the loop's gradient keeps those outputs in per-step lists,
  and XLA refuses lists whose rows are [0] in one branch and [batch] in another ("Invalid
  TensorList shape"); a switch recomputed and differentiated as a whole meets the same
  stand-ins in XLA's dynamic padder. Here the loop keeps only the switch's inputs, plain
  tensors, and each branch is differentiated inside the gradient's own switch, which
  nothing differentiates. Gradients reach the float tensors of `state` and the variables
  the branches read; the tensors they read from elsewhere (the block index, the members)
  are integers. `recomputing()` is the context the branches are computed again in.
  """
  structure = []

  def unflat(flat):
    return tf.nest.pack_sequence_as(state, list(flat))

  @tf.custom_gradient
  def forward(*flat):
    results = tf.switch_case(index, [lambda b=b: b(*unflat(flat)) for b in branches])
    structure.append(results)

    def gradient(*dys, variables=None):
      sources = [x for x in flat if x.dtype.is_floating] + list(variables or [])

      def branch_gradient(branch):
        with tf.GradientTape(watch_accessed_variables=False) as tape, recomputing():
          tape.watch(sources)
          ys = tf.nest.flatten(branch(*unflat(flat)))
        pairs = [(y, dy) for y, dy in zip(ys, dys) if y.dtype.is_floating and dy is not None]
        grads = tape.gradient([y for y, _ in pairs], sources,
                              output_gradients=[dy for _, dy in pairs],
                              unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return [tf.convert_to_tensor(g) for g in grads]    # (a gather's are sparse)

      grads = iter(tf.switch_case(index, [lambda b=b: branch_gradient(b) for b in branches]))
      flat_grads = [next(grads) if x.dtype.is_floating else None for x in flat]
      return flat_grads if variables is None else (flat_grads, list(grads))
    return tf.nest.flatten(results), gradient

  outputs = forward(*tf.nest.flatten(state))
  return tf.nest.pack_sequence_as(structure[0], outputs)


def dispatch_order(program):
  """The blocks in the order the VM prefers them (it runs the lowest that has members):
  blocks where members resume after a call first, blocks that return last, the others in
  between, each group in program order. Frames resume and go deeper first, and a return
  waits until the members that will soon return there have arrived: on the benchmark's
  NUTS (100 chains) a transition takes 128 steps, against 374 in program order (fib and
  fib in a loop: the same steps either way)."""
  blocks = program.blocks()
  resumed = {i.label for b in blocks for i in b.body if isinstance(i, ir.PushReturn)}
  return tuple(sorted(blocks, key=lambda b: 0 if b.label in resumed else (
      2 if isinstance(b.terminator, ir.IndirectGoto) else 1)))


def _pointer(var):
  return f"pointer {var}"


def _poison(value, failed):
  """Results of overflowed members: NaN, the dtype's minimum, or False."""
  if value.dtype.is_floating or value.dtype.is_complex:
    bad = tf.constant(float("nan"), value.dtype)
  elif value.dtype.is_integer:
    bad = tf.constant(value.dtype.min, value.dtype)
  elif value.dtype == tf.bool:
    bad = tf.constant(False)
  else:
    return value
  mask = tf.reshape(failed, [-1] + [1] * (value.shape.rank - 1))
  return tf.where(mask, bad, value)
