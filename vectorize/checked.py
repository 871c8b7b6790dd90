"""The checked mode: every pfor also runs its body as the loop does, and raises where they differ.

`vectorize.checked()` (or the environment variable `VECTORIZE_CHECKED`) is the first thing to
try when a result looks wrong. Each conversion then also emits the body unchanged, once per
checked iteration, beside the vectorized graph, and compares every value of the body (each
top-level op's output, in topological order), not only the outputs: the error names the
first op whose vectorized value differs from the loop's, the iteration, how the op was
converted (its converter, loop-invariant copy or fallback) and the user's file:line.

What is compared, and how:
- A sample of iterations spread over `range(n)` (`checked(sample=k)`, 8 by default;
  `sample=None` for all). A body that writes variables is checked on every iteration, in
  order: the variables are read before the vectorized graph runs, read after it, put back,
  and the loop runs from the same state; the two final states must agree too, and the
  variables are left as the loop leaves them.
- Values that depend on a stateful random op (`tf.random.normal`, a `tf.random.Generator`)
  are not compared: the loop draws other numbers by design. Stateless random ops are.
- Floats within a tolerance of their dtype, scaled by the magnitude of the loop's value;
  NaN where the loop has NaN. Integers, booleans and strings exactly. Shapes exactly.
- Values whose size differs per iteration (ragged) are compared row by row; TensorLists
  (TensorArrays) through what the body reads from them.

Where it checks: eagerly and in `tf.function` (the check is part of the graph, an
assertion that fails at run time: `CheckError` eagerly, `tf.errors.InvalidArgumentError`
with the same message in a graph). Under XLA (`jit_compile=True`) nothing can raise inside
the compiled program, so the conversion XLA gets (static shapes) is checked when the
function is traced, outside XLA, on the values the body captures; a body that reads the
compiled function's own arguments cannot be run outside it and is not checked there (a
warning says so: check it without `jit_compile`, under `vectorize.static_shapes()`).
"""

import contextlib
import inspect

from absl import logging
import numpy as np
import tensorflow as tf
from tensorflow.python import pywrap_tfe

from vectorize import graph_io
from vectorize import op_types
from vectorize import options
from vectorize import ragged
from vectorize import registry
from vectorize import whole_body_loop
from vectorize.errors import CHECK_MARK, raising_check_errors, user_location
from vectorize.values import Value

# Relative tolerance per dtype; the absolute one is that times (1 + the largest |loop value|).
_TOLERANCE = {tf.float16: 2e-2, tf.bfloat16: 1e-1, tf.float32: 1e-3, tf.float64: 1e-7,
              tf.complex64: 1e-3, tf.complex128: 1e-7}
_NOT_COMPARED = (tf.resource, tf.variant)


@contextlib.contextmanager
def checked(sample=options.DEFAULT_SAMPLE):
  """Within this block, every pfor (and what is built on it) is checked against the loop.

  Args:
    sample: how many iterations to check, spread over the loop (None: every iteration).

  Example:
    >>> with vectorize.checked():
    ...   y = vectorize.pfor(body, 8)    # raises CheckError naming the op that differs
  """
  if sample is not None and (not isinstance(sample, int) or sample < 1):
    raise ValueError(f"checked(sample=...) takes a positive int or None, got {sample!r}.")
  with options.setting("checked", options.CHECK_ALL if sample is None else sample):
    yield


def wanted(body):
  """Whether this conversion is checked: the checked mode is on, and the body has no
  `pfor_config` reductions (their values need every iteration at once)."""
  if options.checked_sample() is None:
    return False
  if body.config is not None and body.config.has_reductions:
    logging.warning("%s: a body with pfor_config reductions is not checked.", CHECK_MARK)
    return False
  if options.tracing_a_body():
    logging.warning("%s: a pfor inside another pfor's body is not checked on its own (the "
                    "outer pfor's check compares the body around it).", CHECK_MARK)
    return False
  if _writes_tf1_arrays(body.graph):
    logging.warning("%s: a body that writes a TF1 TensorArray is not checked (the loop "
                    "run beside pfor would write its elements a second time).", CHECK_MARK)
    return False
  if _writes_unknown_resources(body.graph):
    logging.warning("%s: a body that changes a resource other than a tf.Variable it reads "
                    "(a raw handle, an iterator it pulls from, a queue) is not checked (the "
                    "loop run beside pfor would change it a second time).", CHECK_MARK)
    return False
  return True


def warn_not_checked_in_chunks():
  """`parallel_iterations` chunks are not checked (each chunk's conversion runs in a loop
  of its own): says so where the checked mode is on."""
  if options.checked_sample() is not None:
    logging.warning("%s: pfor with parallel_iterations (in chunks) is not checked; check it "
                    "without parallel_iterations.", CHECK_MARK)


def _writes_unknown_resources(graph):
  """Whether an op of the body, or of a function it calls, changes a resource held outside
  the body (a variable, a generator's state, an iterator, a queue) through a handle that is
  not one of the body's `tf.Variable`s (whose values the check can put back). A variable the
  body only writes without reading (`assign_add(..., read_value=False)`) is not among them:
  TF lists the variables a graph reads."""
  known = set()
  for external, internal in graph.captures:
    if any(external is v.handle for v in graph.variables):
      known.add(internal.ref())
  return _writes_outside(graph, known, set())




def _writes_outside(graph, known, seen):
  """Whether an op of `graph` (or of a function it calls) writes through a handle not in
  `known` (refs of `graph`'s tensors), following handles into called functions' inputs."""
  origin = graph_io.through_identities

  for op in graph.get_operations():
    if _changes_resource(op):
      handle = origin(op.inputs[0])
      if handle.op.type == "Placeholder" and handle.ref() not in known:
        return True
    for name in graph_io.function_names(op):
      fn = graph_io.find_function(graph, name)
      if fn is None:
        continue
      inputs = list(op.inputs)[1 if op.type in op_types.CONDITIONALS else 0:]
      known_inputs = frozenset(k for k, t in enumerate(inputs) if origin(t).ref() in known)
      if (name, known_inputs) in seen:
        continue
      seen.add((name, known_inputs))
      inner = {t.ref() for k, t in enumerate(fn.graph.inputs) if k in known_inputs}
      if _writes_outside(fn.graph, inner, seen):
        return True
  return False


# Stateful ops that only read the resource their first input holds.
_RESOURCE_READS = op_types.RESOURCE_READS | op_types.TENSOR_ARRAY_READS


def _changes_resource(op):
  """Whether `op` may change the resource its first input holds: a variable or generator
  write, or any other stateful op on a resource (an iterator's get_next, a queue's enqueue)
  that is not a known read. Function calls are followed instead (`_writes_outside`)."""
  if op_types.is_variable_write(op) or op.type in _RANDOM_STATE_WRITES:
    return True
  return (op._is_stateful and op.type not in _RESOURCE_READS and  # pylint: disable=protected-access
          bool(op.inputs) and op.inputs[0].dtype == tf.resource and
          not graph_io.function_names(op))


def _writes_tf1_arrays(graph):
  """Whether the body (or a function it calls) writes a TF1 TensorArray (a resource of its
  own, which the check's second run of the body cannot write again)."""
  return whole_body_loop.any_op(graph, lambda op: op.type in (
      "TensorArrayWriteV3", "TensorArrayScatterV3", "TensorArraySplitV3"))


# ----------------------------------------------------------------------------- the check

def convert_checked(body, ctx, vectorize_loop):
  """`body.convert(ctx)` with the check emitted around it, its outputs depending on the
  check. Under XLA, checks the static-shape conversion outside it, at trace time, converted
  by `vectorize_loop` (the engine's, which calls this)."""
  sample = options.checked_sample()
  if ctx.target.xla:
    _check_outside_xla(body, ctx, sample, vectorize_loop)
    return body.convert(ctx)
  graph, n = body.graph, ctx.n
  variables = list(graph.variables) if _changes_state(graph) else []
  before = [_snapshot(v) for v in variables]
  probes, drawn_into = _probes(graph)
  emitting = tf.compat.v1.get_default_graph()
  count = len(emitting.get_operations())
  with tf.control_dependencies(before):
    values, operations, probe_values = body.convert(ctx, probes)
  outputs = [_comparable(v) for v in probe_values]
  # Graphs with no automatic control dependencies (TF1): the reads after pfor wait for
  # every effect it emitted, not only for its outputs.
  # (Those inside a TF1 while loop's frame cannot be waited on from outside: its outputs.)
  effects = [o for o in emitting.get_operations()[count:] if o._is_stateful and  # pylint: disable=protected-access
             o._get_control_flow_context() is None]  # pylint: disable=protected-access
  ran = [v.tensor for v in values if isinstance(v, Value) and isinstance(v.tensor, tf.Tensor)]
  with tf.control_dependencies(effects + ran if variables else []):
    after = [_snapshot(v) for v in variables]
  with tf.control_dependencies(after):
    restored = [v.assign(b) for v, b in zip(variables, before)]
  iterations = _iterations(n, options.CHECK_ALL if variables else sample)
  with tf.control_dependencies(restored):
    failure = _first_difference(body, probes, outputs, iterations, _tolerances(probes))
  holds = tf.equal(failure[0], len(probes))
  descriptions = tf.constant([_describe(t, ctx) for t in probes] + [""])
  message = tf.strings.join([
      f"{CHECK_MARK}: pfor differs from the loop at iteration ",
      tf.strings.as_string(failure[1]), ": the first value of the body that differs is ",
      tf.gather(descriptions, failure[0]), ". vectorize.explain(body, n) shows how each op "
      "converts; report it with that op, or avoid it (fallback_to_while_loop runs it in a "
      "loop if its converter refuses)."])
  checks = [tf.debugging.Assert(holds, [message])]
  with tf.control_dependencies([failure[0]]):
    left = [_snapshot(v) for v in variables]
  random_states = _written_with_random_values(graph, variables, drawn_into)
  for v, a, b in zip(variables, after, left):
    if id(v) in random_states:
      continue
    checks.append(tf.debugging.Assert(
        _close(a, b),
        [f"{CHECK_MARK}: after pfor, variable {v.name!r} differs from what the loop leaves"]))
  with tf.control_dependencies(checks):
    values = [_after(v) for v in values]
  return values, operations


def _snapshot(variable):
  """The variable's value now, copied: a read may alias its buffer, and a kernel that
  updates it in place (TF's StatefulRandomBinomial advancing a generator's state) would
  change the value read before it."""
  return tf.raw_ops.Snapshot(input=variable.read_value())


def _iterations(n, sample):
  """The iterations checked: `range(n)`, or at most `sample` of them spread over it."""
  if sample == options.CHECK_ALL:
    return tf.range(n)
  stride = tf.maximum(1, (n + sample - 1) // sample)
  return tf.range(0, n, stride)


def _first_difference(body, probes, outputs, iterations, tolerances):
  """(index of the first probe whose value differs in some checked iteration, or
  len(probes); that iteration), from one sequential loop over `iterations`."""
  graph = body.graph
  captured = body.traced.captured_inputs()
  count = len(probes)
  comparison = _Comparison(outputs, probes, tolerances)

  def step(k, first, at):
    i = iterations[k]
    loop_values = _run_once(graph, i, captured, probes)
    differs = tf.concat([comparison.differences(i, loop_values), [False]], 0)
    here = tf.cast(tf.argmax(tf.cast(differs, tf.int32)), tf.int32)
    here = tf.where(tf.reduce_any(differs), here, count)
    earlier = here < first
    return k + 1, tf.where(earlier, here, first), tf.where(earlier, i, at)

  def loop():
    size = tf.shape(iterations)[0]
    return tf.while_loop(lambda k, *_: k < size, step,
                         (tf.constant(0), tf.constant(count), tf.constant(-1)),
                         parallel_iterations=1)[1:]

  # A function of its own, not inlined: Grappler rewrites the body's copies on their own,
  # and cannot merge them with the vectorized graph (its rewrite of a lowered cond's
  # `a + tf.reduce_sum(a)`, README Limitations, then reached pfor's own output).
  return tf.function(loop, autograph=False,
                     experimental_attributes={"_noinline": True})()


def _run_once(graph, i, captured, wanted):
  """The body's ops re-emitted unchanged for loop index `i`: the values of `wanted`."""
  env = {graph.inputs[0].ref(): i}
  env.update((t.ref(), c) for t, c in zip(graph.inputs[1:], captured))
  emitted = {}
  for op in graph_io.ops_in_order(wanted, list(getattr(graph, "control_outputs", []))):
    if op.type == "Placeholder":
      continue
    deps = [emitted[c] for c in op.control_inputs if c in emitted]
    with tf.control_dependencies(deps):
      new_op = graph_io.copy_op(op, [env[t.ref()] for t in op.inputs])
    if op.type in op_types.CONDITIONALS:   # kept functional: Grappler's rewrite of a lowered cond
      graph_io.keep_unlowered(new_op)   # changes its values (README)
    emitted[op] = new_op
    env.update((t.ref(), o) for t, o in zip(op.outputs, new_op.outputs))
  return [env[t.ref()] for t in wanted]


# ----------------------------------------------------------------------------- what is compared

def _probes(graph):
  """(the body's values compared, in topological order: each top-level op's outputs that
  the body uses (or returns), of a comparable dtype, not drawn from a random op; the
  handles of the variables written with random values, whose states are not compared)."""
  outputs = list(graph.outputs)
  order = graph_io.ops_in_order(outputs, list(getattr(graph, "control_outputs", [])))
  used = {t.ref() for op in order for t in op.inputs} | {t.ref() for t in outputs}
  random, drawn_into = _random_ops(graph, order)
  return [t for op in order if op.type not in ("Placeholder", "Const") and op not in random
          for t in op.outputs if t.ref() in used and t.dtype not in _NOT_COMPARED and
          not _for_a_gradient(t, outputs)], drawn_into


def _for_a_gradient(t, outputs):
  """An output of a conditional, or of a call (a function holding one: a gradient taken
  inside the body), that only other conditionals or calls read: under a tape, the
  intermediates a branch exports for its gradient, undefined for the iterations that take
  the other branch (the gradient's values are compared where they are used; a second-order
  gradient through a tf.cond reported garbage there: code-blind round 14)."""
  return (t.op.type in _EXPORTING and not any(t is o for o in outputs)
          and all(c.type in op_types.CALLS for c in t.consumers()))


# Ops whose outputs may be a branch's intermediates: conditionals and plain function calls.
_EXPORTING = (frozenset(op_types.CALLS) - op_types.CONTROL_FLOW) | op_types.CONDITIONALS


def _random_ops(graph, order):
  """(the ops of `order` whose values depend on a random op, the handles of the variables
  such values are written to). A value depends on one directly, through a function it
  calls, or through such a variable: the loop's later iterations read what was written."""
  drawn_into = set()
  while True:
    random = set()
    for op in order:
      if (_draws(op, graph) or
          any(t.op in random or t.ref() in drawn_into for t in op.inputs) or
          any(c in random for c in op.control_inputs)):
        random.add(op)
    written = {op.inputs[0].ref() for op in random
               if op_types.is_variable_write(op)}
    if written <= drawn_into:
      return random, drawn_into
    drawn_into |= written


# Ops that advance a `tf.random.Generator`'s state variable: the loop beside pfor draws again.
_RANDOM_STATE_WRITES = ("RngReadAndSkip", "RngSkip", "StatefulUniform", "StatefulUniformInt",
                        "StatefulUniformFullInt", "StatefulStandardNormal",
                        "StatefulStandardNormalV2", "StatefulTruncatedNormal",
                        "StatefulRandomBinomial")


def _changes_state(graph):
  """Whether the body writes a variable, a generator's state included: its variables are
  then read before pfor, put back for the loop, and left as the loop leaves them."""
  return whole_body_loop.writes_variables(graph) or whole_body_loop.any_op(
      graph, lambda op: op.type in _RANDOM_STATE_WRITES)


def _written_with_random_values(graph, variables, drawn_into):
  """The variables among `variables` whose handle in the body is in `drawn_into`."""
  handle_in_body = {id(external): internal for external, internal in graph.captures}
  return {id(v) for v in variables
          if id(v.handle) in handle_in_body and handle_in_body[id(v.handle)].ref() in drawn_into}


def _draws(op, graph):
  """Whether op is a stateful random op, or calls a function with one. Outside XLA for a
  conversion meant for it, stateless ones too: XLA's kernels draw other numbers than TF's,
  and either may run there."""
  outside_xla = options.outside_xla_check()

  def random(o):
    return (any(w in o.type for w in ("Random", "Rng", "Stateful", "Multinomial",
                                      "TruncatedNormal")) and
            (o._is_stateful or outside_xla))  # pylint: disable=protected-access

  if random(op):
    return True
  return any(whole_body_loop.any_op(fn.graph, random)
             for fn in (graph_io.find_function(graph, name)
                        for name in graph_io.function_names(op))
             if fn is not None)


def _comparable(value):
  """A converted Value as compared: its `RaggedRows` where ragged, the Value where a tensor,
  None for what is not compared (a TensorList)."""
  if ragged.is_ragged(value):
    return value.tensor
  return value if isinstance(value.tensor, tf.Tensor) else None


def _row(converted, i):
  """Iteration i's value of a converted output (None: not compared). A ragged value's is
  cut from the flat values and shaped by its sizes, which an iteration of no elements has
  too (a RaggedTensor's row of nothing has lost its later axes)."""
  if converted is None:
    return None
  if isinstance(converted, ragged.RaggedRows):
    start = converted.row_starts[i]
    flat = converted.values[start:start + converted.row_lengths[i]]
    if converted.dims is None:
      return flat
    return tf.reshape(flat, tf.concat([converted.dims[i], tf.shape(flat)[1:]], 0))
  return tf.gather(converted.tensor, i) if converted.stacked else converted.tensor


def _tolerances(probes):
  """Each probe's relative tolerance: the loosest of its dtype's and of every float value it
  is computed from. A float32 value computed from bfloat16 ones carries their rounding (XLA
  may round a bfloat16 matmul differently from the loop's kernel), so it is compared as
  bfloat16."""
  loosest = {}
  for op in graph_io.ops_in_order(probes):
    inherited = max([loosest.get(x.ref(), _TOLERANCE.get(x.dtype, 0.0)) for x in op.inputs],
                    default=0.0)
    for t in op.outputs:
      loosest[t.ref()] = max(inherited, _TOLERANCE.get(t.dtype, 0.0))
  return [loosest.get(t.ref()) or None for t in probes]


class _Comparison:
  """Whether each probe's vectorized value differs from the loop's at an iteration (a bool
  vector): dtype, shape and values, floats within their tolerance (as `_close`).

  Comparing each value on its own took thirty ops per value in the check's loop, which made
  the check cost more than the conversion. Here the values are flattened into one vector per
  dtype, compared at once and reduced per value. Values of a static shape (most) cost one
  reshape in the loop: their vectorized side is flattened and joined outside it, to one
  gathered row per dtype. Others (ragged, or a shape known only at run time) are cut to
  their common size and their shapes compared at run time."""

  def __init__(self, outputs, probes, tolerances):
    self.count = len(probes)
    self.constant = [False] * self.count   # values whose dtypes or static shapes differ
    self.relative = [max(t or 0.0, _TOLERANCE.get(p.dtype, 0.0))
                     for t, p in zip(tolerances, probes)]
    self.static = {}    # dtype -> [(k, static size, vectorized Value flattened)]
    self.dynamic = []   # [(k, converted)] compared at their run-time shapes
    self.alone = []     # [(k, converted)] of a rank that may differ: `_differs_alone`
    for k, (o, p) in enumerate(zip(outputs, probes)):
      if o is None:
        continue
      shape = _per_iteration_shape(o)
      if o.dtype != p.dtype:
        self.constant[k] = True
      elif shape is None or p.shape.rank is None or shape.rank != p.shape.rank:
        self.alone.append((k, o))
      elif shape.is_fully_defined() and p.shape.is_fully_defined():
        if shape != p.shape:
          self.constant[k] = True
        else:
          self.static.setdefault(o.dtype, []).append((k, shape.num_elements(), o))
      else:
        self.dynamic.append((k, o))
    self.rows = {dtype: self._flat_rows(values) for dtype, values in self.static.items()}

  @staticmethod
  def _flat_rows(values):
    """(the stacked values as one [n, size] tensor or None, the invariant ones as one
    vector or None): built outside the loop, so each step gathers one row per dtype."""
    stacked = [tf.reshape(o.tensor, [tf.shape(o.tensor)[0], size])
               for _, size, o in values if o.stacked]
    invariant = [tf.reshape(o.tensor, [size]) for _, size, o in values if not o.stacked]
    return (tf.concat(stacked, 1) if stacked else None,
            tf.concat(invariant, 0) if invariant else None)

  def differences(self, i, loop):
    bad = tf.constant(self.constant, tf.bool)
    pieces = {}   # dtype -> [(ids, vectorized, loop)]
    for dtype, values in self.static.items():
      stacked_rows, invariant_row = self.rows[dtype]
      order = ([v for v in values if v[2].stacked] + [v for v in values if not v[2].stacked])
      vectorized = [r for r in (None if stacked_rows is None else stacked_rows[i],
                                invariant_row) if r is not None]
      ids = np.repeat([k for k, _, _ in order], [size for _, size, _ in order])
      pieces.setdefault(dtype, []).append((
          tf.constant(ids, tf.int32), _joined(vectorized),
          _joined([_flat(loop[k]) for k, _, _ in order])))
    shape_checks = []
    for k, o in self.dynamic:
      a, b = _row(o, i), loop[k]
      shape_checks.append((k, tf.shape(a), tf.shape(b)))
      a, b = _flat(a), _flat(b)
      m = tf.minimum(tf.size(a), tf.size(b))
      pieces.setdefault(o.dtype, []).append((_filled_like(a[:m], k), a[:m], b[:m]))
    if shape_checks:
      ids = [k for k, sa, _ in shape_checks for _ in range(sa.shape[0])]
      unequal = tf.not_equal(tf.concat([sa for _, sa, _ in shape_checks], 0),
                             tf.concat([sb for _, _, sb in shape_checks], 0))
      bad = tf.logical_or(bad, self._any(unequal, tf.constant(ids, tf.int32)))
    for dtype, group in pieces.items():
      ids, a, b = (_joined([piece[j] for piece in group]) for j in range(3))
      bad = tf.logical_or(bad, self._differ(dtype, ids, a, b))
    if self.alone:
      flags = [tf.constant(False)] * self.count
      for k, o in self.alone:
        flags[k] = _differs_alone(_row(o, i), loop[k], self.relative[k])
      bad = tf.logical_or(bad, tf.stack(flags))
    return bad

  def _any(self, flags, ids):
    """[count] bools: whether any of `flags` whose id is k is true (False where none is)."""
    return tf.math.unsorted_segment_max(tf.cast(flags, tf.int32), ids, self.count) > 0

  def _differ(self, dtype, ids, a, b):
    """[count] bools: the values among the flat `a` and `b` (value k at `ids == k`) that
    differ; floats (and complex ones' parts) within their tolerance, scaled by (1 + the
    largest finite |loop value|) of each value."""
    if dtype.is_complex:
      ids = tf.concat([ids, ids], 0)
      a, b = (tf.concat([tf.math.real(x), tf.math.imag(x)], 0) for x in (a, b))
      dtype = a.dtype
    if dtype not in _TOLERANCE:
      return self._any(tf.not_equal(a, b), ids)
    a, b = tf.cast(a, tf.float64), tf.cast(b, tf.float64)
    magnitude = tf.where(tf.math.is_finite(b), tf.abs(b), tf.zeros_like(b))
    scale = 1.0 + tf.maximum(tf.math.unsorted_segment_max(magnitude, ids, self.count), 0.0)
    allowed = tf.gather(tf.constant(self.relative, tf.float64) * scale, ids)
    both_nan = tf.logical_and(tf.math.is_nan(a), tf.math.is_nan(b))
    ok = tf.logical_or(tf.logical_or(both_nan, tf.equal(a, b)), tf.abs(a - b) <= allowed)
    return self._any(tf.logical_not(ok), ids)


def _per_iteration_shape(converted):
  """The static shape of one iteration's value of a converted output (a ragged one's: its
  rank, with unknown dims)."""
  if isinstance(converted, ragged.RaggedRows):
    rank = converted.values.shape.rank
    if rank is not None and converted.dims is not None:
      rank = rank - 1 + converted.dims.shape[1] if converted.dims.shape.rank == 2 else None
    return tf.TensorShape(None if rank is None else [None] * rank)
  shape = converted.tensor.shape
  return shape[1:] if converted.stacked and shape.rank is not None else shape


def _flat(t):
  return t if t.shape.rank == 1 else tf.reshape(t, [-1])


def _joined(vectors):
  return vectors[0] if len(vectors) == 1 else tf.concat(vectors, 0)


def _filled_like(x, k):
  """An int32 vector of k, as long as the vector x, from elementwise ops only (an outer
  pfor vectorizes this check too, where x's size may differ per iteration: no Fill)."""
  zeros = tf.strings.length(x) * 0 if x.dtype == tf.string else tf.cast(
      tf.raw_ops.ZerosLike(x=x), tf.int32)
  return zeros + k


def _differs_alone(a, b, tolerance):
  """Whether one value differs, compared on its own (dtypes or ranks that may differ)."""
  if a.dtype != b.dtype or (b.shape.rank is not None and a.shape.rank is not None and
                            a.shape.rank != b.shape.rank):
    return tf.constant(True)
  same_shape = tf.reduce_all(tf.equal(tf.shape(a), tf.shape(b)))
  a, b = tf.reshape(a, [-1]), tf.reshape(b, [-1])
  m = tf.minimum(tf.size(a), tf.size(b))
  return tf.logical_not(tf.logical_and(same_shape, _close(a[:m], b[:m], tolerance)))


def _close(a, b, tolerance=None):
  if a.dtype not in _TOLERANCE:
    return tf.reduce_all(tf.equal(a, b))
  tolerance = max(tolerance or 0.0, _TOLERANCE[a.dtype])
  scale = 1.0 + tf.reduce_max(tf.concat([[0.0], tf.reshape(
      tf.where(tf.math.is_finite(tf.abs(b)), tf.cast(tf.abs(b), tf.float32), 0.0), [-1])],
      0))
  diff = tf.cast(tf.abs(a - b), tf.float32)
  both_nan = tf.logical_and(tf.math.is_nan(tf.abs(a)), tf.math.is_nan(tf.abs(b)))
  equal = tf.equal(a, b)    # infinities
  ok = tf.logical_or(tf.logical_or(both_nan, equal), diff <= tolerance * scale)
  return tf.reduce_all(ok)


def _describe(t, ctx):
  """How a body value is named in the error: op, output, converter, the user's line."""
  op = t.op
  kinds = {r.kind for r in ctx.report.records if r.op_name == op.name}
  if "fallback" in kinds:
    how = "run in the sequential fallback"
  elif kinds == {"invariant"} and not op._is_stateful:  # pylint: disable=protected-access
    how = "copied as loop-invariant"
  else:
    converter = registry.lookup(op.type)
    how = (f"converted by {converter.__module__}.{converter.__qualname__}" if converter
           else "converted (no dense converter: its ragged one)")
  return (f"output {t.value_index} of {op.type} op {op.name!r}"
          f"{user_location(op) or ' (no user line recorded)'}, {how}")


def _after(value):
  """`value` (a Value, or what a conversion returns) through an Identity, so that it runs
  after the check in graphs with no automatic control dependencies (TF1)."""
  if isinstance(value, Value) and isinstance(value.tensor, tf.Tensor):
    return Value(tf.identity(value.tensor), value.stacked)
  return value


# ----------------------------------------------------------------------------- under XLA

_warned_xla = set()


def _check_outside_xla(body, ctx, sample, vectorize_loop):
  """The static-shape conversion checked eagerly, outside the compiled function, where the
  body's captures and n are known there; else a warning (once per body)."""
  static_n = ctx.static_n
  runnable = static_n is not None and body.loop_fn is not None and all(
      hasattr(external, "numpy") for external, _ in body.graph.captures)
  if not runnable:
    name = getattr(body.loop_fn, "__name__", "the body")
    user_fn = inspect.unwrap(body.loop_fn)   # pfor's wrapper has one code for every body
    key = (name, getattr(user_fn, "__code__", None))   # two lambdas: two bodies
    if key not in _warned_xla:
      _warned_xla.add(key)
      logging.warning(
          "%s: under jit_compile=True nothing can raise inside the compiled program, and "
          "%s reads values of the compiled function itself (or n is known only there), so "
          "it is not checked here. Check it without jit_compile, under "
          "vectorize.static_shapes().", CHECK_MARK, name)
    return
  with tf.init_scope(), _tapes_recording(), options.setting("static_shapes", True), \
       options.setting("outside_xla", True), options.setting("checked", sample), \
       raising_check_errors():
    saved = [(v, tf.identity(v)) for v in body.graph.variables]   # for the compiled run
    tf.function(lambda: vectorize_loop(body.loop_fn, tf.constant(static_n), static_n,
                                       ctx.fallback_allowed, warn=False),
                autograph=False)()
    for v, value in saved:
      v.assign(value)


@contextlib.contextmanager
def _tapes_recording():
  """Tapes record again inside `tf.init_scope()`, which stops them: the body's own
  `tf.GradientTape` must record when it runs there (its gradient was None)."""
  stopped = pywrap_tfe.TFE_Py_TapeSetIsStopped()
  if stopped:
    pywrap_tfe.TFE_Py_TapeSetRestartOnThread()
  try:
    yield
  finally:
    if stopped:
      pywrap_tfe.TFE_Py_TapeSetStopOnThread()
