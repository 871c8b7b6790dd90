"""The whole body as a sequential loop, for bodies whose state cannot be vectorized.

A variable the body reads and updates by anything but an affine recurrence (e.g. `v <- v*v +
x_i`) gives each iteration the state the previous one left: no vectorized form exists, and
running only the refusing op in a loop would not help, since the other stateful ops around
it would already be emitted, and would run. So with the fallback on the engine decides first:
`refuses_state` converts the body in a scratch graph that is never run; when a stateful op
refuses there, the caller emits `run_sequentially` instead, one iteration after another.
"""

from absl import logging
import tensorflow as tf
from tensorflow.python.framework import func_graph

from vectorize import graph_io
from vectorize import iteration_outputs
from vectorize import kinds
from vectorize import op_types
from vectorize import ragged
from vectorize import trace as trace_module
from vectorize.errors import ConversionError, Unvectorizable, user_location

def resource_users(resource):
  """The ops that take the handle `resource` (or an Identity of it) in its graph, and in the
  functions of the calls, conditionals and loops that take it, at any depth. `resource` may
  be an Identity of the handle: its users start from the handle."""
  resource = graph_io.through_identities(resource)
  users, frontier, seen = [], [resource], {resource.ref()}
  while frontier:
    for o in frontier.pop().consumers():
      if o.graph is not resource.graph:
        continue
      if o.type == "Identity":
        if o.outputs[0].ref() not in seen:
          seen.add(o.outputs[0].ref())
          frontier.append(o.outputs[0])
        continue
      users.append(o)
      if o.type in op_types.CALLS:
        attrs, offset = op_types.CALLS[o.type]
        positions = [j - offset for j, t in enumerate(o.inputs) if t.ref() in seen]
        for graph in graph_io.called_graphs(o, attrs):
          for j in positions:
            if 0 <= j < len(graph.inputs):
              users.extend(resource_users(graph.inputs[j]))
  return users


def reads_and_writes(users):
  """Whether `users` (of one resource) both read it and change it."""
  changes = [o for o in users
             if o.type not in op_types.RESOURCE_READS and o.type not in op_types.CALLS]
  return any(o.type in op_types.RESOURCE_READS for o in users) and bool(changes)


# Ops that read a resource's value (not its shape or whether it is initialized).
_VALUE_READS = op_types.RESOURCE_READS - {"VariableShape", "VarIsInitializedOp"}


def unordered_state(graph):
  """Why the body's state has no vectorized form that its converters could see, or None:
  it reads a variable (or table) in one function of the body (a branch, a loop's body, a
  called `tf.function`) and writes it in another. A sequential loop orders such a read after
  the earlier iterations' writes, and that order is in no one graph, where the converters
  order a variable's accesses."""
  handles = [t for t in graph.inputs if t.dtype == tf.resource]
  handles += [o.outputs[0] for o in graph.get_operations() if o.type == "VarHandleOp"]
  for handle in handles:
    users = resource_users(handle)
    writes = [o for o in users if op_types.is_variable_write(o)]
    for read in (o for o in users if o.type in _VALUE_READS):
      write = next((w for w in writes if w.graph is not read.graph), None)
      if write is not None:
        return (f"the body reads a variable ({read.type} {read.name!r}{user_location(read)}) "
                f"in one function and writes it in another ({write.type} {write.name!r}"
                f"{user_location(write)}: a branch, a loop's body or a called tf.function), "
                "so each iteration of a sequential loop reads what the earlier ones wrote")
  return None


# Under XLA with a static n up to this, the whole body runs unrolled (`_unrolled`).
UNROLLED_UNDER_XLA = 64
_SHAPE_DIFFERS = (
    "the body runs as a sequential loop of the whole body (the warning above says why), "
    "and an output differs in shape per iteration, which that loop cannot return (only "
    "RaggedTensors the body builds). To fix: give the output one shape in every iteration "
    "(pad it and return its length beside it), or update the variable outside the body "
    "(return per-iteration values), so that the body vectorizes and returns it ragged.")


class StatefulRefusal(ConversionError):
  """A stateful op that has no vectorized form here: the whole body must run as a loop."""


_probing = [False]


def probing():
  """Whether a conversion only probes which outputs are ragged (see `ragged_outputs`):
  stateful ops that would refuse fall back instead."""
  return _probing[0]


def refuse_state(message):
  """Raises StatefulRefusal: the whole body must run as a loop. While probing which outputs
  are ragged, Unvectorizable instead: the op falls back there, and the probe goes on."""
  if probing():
    raise Unvectorizable(message)
  raise StatefulRefusal(message)


def ragged_outputs(convert):
  """Per body output, whether the converted body holds it ragged (its size differs per
  iteration), from `convert()` in a scratch graph (never run) where stateful ops that
  refuse fall back instead; None where that conversion fails. TensorFlow's static shapes
  cannot tell: they leave `x[i, :2]` as unknown as `x[i, :k[i]]`."""
  scratch = func_graph.FuncGraph("pfor_probe_conversion")
  _probing[0] = True
  try:
    with scratch.as_default():
      values, _ = convert()
    return [ragged.is_ragged(v) for v in values]
  except Exception:  # pylint: disable=broad-except   (the sequential loop still runs)
    return None
  finally:
    _probing[0] = False


def any_op(graph, holds, seen=None, ops=None):
  """Whether `holds(op)` for an op of `graph` (or of `ops`, ops of it) or of a function it
  calls, at any depth."""
  seen = set() if seen is None else seen
  for op in graph.get_operations() if ops is None else ops:
    if holds(op):
      return True
    for name in graph_io.function_names(op):
      fn = graph_io.find_function(graph, name)
      if name not in seen and fn is not None:
        seen.add(name)
        if any_op(fn.graph, holds, seen):
          return True
  return False


def writes_variables(graph, ops=None):
  """Whether the body graph (or `ops` of it), or a function it calls, writes a resource
  variable."""
  return any_op(graph, op_types.is_variable_write, ops=ops)


def refuses_state(convert):
  """The StatefulRefusal that `convert()` raises in a scratch graph (never run), or None."""
  scratch = func_graph.FuncGraph("pfor_trial_conversion")
  with scratch.as_default():
    try:
      convert()
    except StatefulRefusal as refusal:
      return refusal
  return None


def run_sequentially(loop_fn, traced, n, static_n, refusal, target, ragged_flags=None):
  """`loop_fn(i)` for i in range(n), one iteration after another, stacked; `traced` (the
  body traced once) gives the output structure, `target` where it runs (`target.py`),
  `ragged_flags` (`ragged_outputs`) which outputs differ in size per iteration. Logs why."""
  if trace_module.OPERATION in traced.kinds:
    raise ConversionError(f"{refusal} (The body returns an Operation, which a sequential "
                          "loop of the whole body does not return.)")
  logging.warning("vectorize: the whole body runs as a sequential loop, which is slow: "
                  "%s", refusal)
  fn = trace_module.autograph_like_caller(loop_fn)
  if (target.xla and static_n is not None and static_n <= UNROLLED_UNDER_XLA
      and trace_module.RAGGED not in traced.kinds):
    return traced.pack(_unrolled(fn, traced, static_n), [])
  # Ragged where the converted body would be (a RaggedTensor the body returns too); a dense
  # output is checked to have one shape.
  if target.static_shapes:
    varying = [0] * len(traced.graph.outputs)
  elif ragged_flags is not None:
    varying = [int(f and ragged.first_dim_varies(t.shape))
               for f, t in zip(ragged_flags, traced.graph.outputs)]
  else:
    varying = _varying_axes(traced)
  outputs = iteration_outputs.IterationOutputs(traced.graph.outputs, varying, _SHAPE_DIFFERS)

  def step(i, *arrays):
    with graph_io.user_control_flow_unlowered():
      leaves = tf.nest.flatten(fn(i), expand_composites=False)
    tensors = [tf.convert_to_tensor(part) for leaf, kind in zip(leaves, traced.kinds)
               for part in _parts(leaf, kind)]
    return (i + 1,) + outputs.write(arrays, i, tensors)

  results = tf.while_loop(lambda i, *_: i < n, step, (tf.constant(0),) + outputs.arrays(n),
                          parallel_iterations=1)
  graph_io.keep_unlowered(results[0])
  flat = []
  for value, t in zip(outputs.values(results[1:], n, static_n), traced.graph.outputs):
    out = kinds.of(value).pack(value, n)
    if isinstance(out, tf.Tensor):
      out.set_shape(tf.TensorShape([static_n]).concatenate(t.shape))
    flat.append(out)
  return traced.pack(flat, [])


def _unrolled(fn, traced, n):
  """The n iterations one after another as straight-line code, for XLA: each iteration's
  index is a constant there, so the shapes a body derives from it (`x[i:i + 1]`,
  `tf.range(i)`, a TensorArray of size i) are static, as XLA needs; in a while loop they are
  not, and XLA refuses them. The iterations' effects keep their order (the function's
  automatic control dependencies order its stateful ops as made)."""
  rows = []
  for i in range(n):
    leaves = tf.nest.flatten(fn(tf.constant(i)), expand_composites=False)
    rows.append([tf.convert_to_tensor(part) for leaf, kind in zip(leaves, traced.kinds)
                 for part in _parts(leaf, kind)])
  if not n:
    return [tf.zeros([0] + [d or 0 for d in t.shape.as_list()], t.dtype)
            for t in traced.graph.outputs]
  for parts in zip(*rows) if n > 1 else ():   # (one iteration: nothing to differ from)
    _refuse_unknown_shapes(traced, [p.shape for p in parts])
  try:
    return [tf.stack(parts) for parts in zip(*rows)]
  except ValueError as e:
    raise ConversionError(f"vectorize: {_SHAPE_DIFFERS} ({e})") from None


def _refuse_unknown_shapes(traced, shapes):
  """Under XLA, unrolled: refuses an output whose shape is unknown even with the iteration's
  index a constant (a `tf.where`'s count): XLA stacks such values padded to a bound, and no
  check can run there, so iterations of different sizes would come back as zero-padded rows
  (fuzz seed 3600387). (In the while loop past UNROLLED_UNDER_XLA iterations the trace's
  shapes do not know the index: `x[i:i + 1]` is unknown there and XLA sizes it.)"""
  for shape in shapes:
    if not shape.is_fully_defined():
      names = ", ".join(t.name for t in traced.graph.outputs
                        if not t.shape.is_fully_defined()) or "an output"
      raise ConversionError(
          f"vectorize: {_SHAPE_DIFFERS} Under XLA (jit_compile=True) an output of shape "
          f"{shape} ({names}) cannot be checked to have one shape in every iteration: XLA "
          "would pad it. Give it a static shape, or run without jit_compile.")


def _parts(leaf, kind):
  """The tensors the trace keeps for one output leaf (a RaggedTensor's components)."""
  if kind == trace_module.TENSOR:
    return [leaf]
  if kind == trace_module.RAGGED:
    return [leaf.flat_values] + list(leaf.nested_row_splits)
  return []


def _varying_axes(traced):
  """Per traced output tensor: 1 for a component of a RaggedTensor the body returns whose
  first axis the trace leaves unknown (it differs per iteration), else 0 (stacked)."""
  tensors = iter(traced.graph.outputs)
  ranks = iter(traced.ragged_ranks)
  varying = []
  for kind in traced.kinds:
    if kind == trace_module.TENSOR:
      next(tensors)
      varying.append(0)
    elif kind == trace_module.RAGGED:
      varying.extend(int(ragged.first_dim_varies(next(tensors).shape))
                     for _ in range(1 + next(ranks)))
  return varying
