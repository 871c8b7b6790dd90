"""The program-keyed cache: an eager call whose body is a new closure over new tensors (as
TensorCircuit's `vmap` makes one per call) reuses the conversion of the same program.

The eager cache (`cache.py`) keys a body by its code and what it closes over, tensors by
identity, so a new closure misses it. Here the loop body is traced (that much is needed to
know its program), and the traced graph is the key: its ops, attributes, input signatures
and output structure. Captured tensors are inputs of the program, not part of it: each call
passes its own. Where the program was converted before, the call runs that conversion;
otherwise this trace is converted, reading its captured tensors from the arguments of the
conversion's `tf.function`, and kept.

What the key holds exactly: every op and attribute of the traced body, the functions it calls
(by content, not by name), the shapes and dtypes of its captured tensors, and the values of
small integer, boolean and string tensors it captures other than the mapped elements
(TensorFlow captures tensors of up to 128 elements as constants, and an integer one may be a
shape or an axis the conversion reads). Captured float and complex tensors, and a map's
elements, are inputs whatever their size: they are traced as placeholders, so neither shape
inference nor a converter can read their values (a `tf.range` to a captured float limit has
a size known only at run time in the program).

Bodies outside it (they use the closure cache alone): ones that capture variables or other
resources, take a `pfor_config`, or return composites, Operations or ragged values. A
conversion that still captured a tensor of the first closure (found after its first call) is
not reused.
"""

import collections
import contextlib
import hashlib
import re
import threading

import tensorflow as tf
from tensorflow.python.framework import func_graph
from tensorflow.python.framework import ops as tf_ops
from tensorflow.python.ops import resource_variable_ops

from vectorize import engine
from vectorize import graph_io
from vectorize import options
from vectorize import trace

_SIZE = 64
_programs = collections.OrderedDict()   # program key -> _Checked function, or None
_VALUE_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.complex64, tf.complex128)


def trace_program(loop_fn, inputs=()):
  """`loop_fn(i)` traced as the engine traces a loop body, as a `_Program` (whose trace the
  caller converts whether or not the program is `reusable`); None where the body takes a
  `pfor_config` or tracing fails (the caller's own path then raises what it raises).
  `inputs`: captured tensors that are inputs whatever their size and dtype (the elements a
  map reads)."""
  if engine.wants_config(loop_fn):
    return None
  forced = {id(t) for t in inputs}
  try:
    with trace.autograph_enabled(), _captured_as_placeholders(forced):
      body = engine.trace_loop_body(loop_fn)
  except Exception:  # pylint: disable=broad-except
    return None
  return _Program(body, forced)


_tracing = threading.local()


@contextlib.contextmanager
def _captured_as_placeholders(forced):
  """While tracing a program: captured eager tensors of a float or complex dtype, and those
  of `forced`, become placeholders whatever their size (TensorFlow makes tensors of up to
  128 elements constants, whose values shape inference and converters would then read, and
  which could not differ between calls of the program)."""
  original = func_graph.FuncGraph.capture
  outer = getattr(_tracing, "forced", None)
  _tracing.forced = forced

  def capture(graph, tensor, name=None, shape=None):
    forced_here = getattr(_tracing, "forced", None)
    if forced_here is not None and isinstance(tensor, tf_ops.EagerTensor) and (
        tensor.dtype in _VALUE_DTYPES or id(tensor) in forced_here):
      helper = getattr(graph._function_captures, "_create_placeholder_helper", None)  # pylint: disable=protected-access
      if helper is not None:
        return helper(graph, tensor, name or str(tf_ops.uid()))
    return original(graph, tensor, name, shape)

  func_graph.FuncGraph.capture = capture
  try:
    yield
  finally:
    func_graph.FuncGraph.capture = original
    _tracing.forced = outer


def converted(program, call_signature, make_function):
  """`function(*call_args)` running the conversion of `program` on its own captured tensors,
  or None where `program` is None.

  Args:
    program: the traced body (`trace_program`), or None.
    call_signature: what else the conversion depends on (iteration count, input specs,
      flags), hashable.
    make_function: `make_function(program)`, the `tf.function` of `(*call_args, captured)`
      converting `program.bound(captured)` for this call signature.
  """
  if program is None or not program.reusable:
    return None
  key = (program.fingerprint(), call_signature, options.cache_key())
  if key in _programs:
    function = _programs[key]
    _programs.move_to_end(key)
    if function is None:
      return None
  else:
    function = _programs[key] = _Checked(make_function(program), key)
    if len(_programs) > _SIZE:
      _programs.popitem(last=False)
  return _Call(function, list(program.captured))


class _Call:
  """A program's conversion bound to one closure's captured tensors."""

  def __init__(self, function, captured):
    self.function = function
    self.captured = captured

  def __call__(self, *args, replacing=()):
    """The conversion on `args`, with `(slot, tensor)` pairs of `replacing` taking those
    slots of the captured tensors (a map's elements of this call)."""
    captured = list(self.captured)
    for slot, tensor in replacing:
      captured[slot] = tensor
    return self.function(*args, captured)


def bound_in_graph(program, given=None):
  """`program`'s body for a conversion in the current graph: graph input k reads
  `given[k]`, its other captured tensors captured here as usual, and the variables it reads
  watched here too (a tape then watches them on every call of the function being traced;
  the body's own trace watched them only on the call that traced it)."""
  for variable in program.body.graph.variables:
    resource_variable_ops.variable_accessed(variable)
  return engine.LoopBody(_BoundTraced(program, given or {}), None,
                         lambda i: program.replay(i, given or {}))


class _Program:
  """A traced loop body seen as a program: its captured tensors split into the program's
  inputs (passed on each call) and the constants that are part of it."""

  def __init__(self, body, forced_inputs):
    self.body = body
    graph = body.graph
    internal_to_outer = {internal.ref(): outer for outer, internal in graph.captures}
    self.outer = {k: internal_to_outer.get(t.ref()) for k, t in enumerate(graph.inputs)
                  if k > 0}
    self.captured = []          # the outer tensors passed as inputs, in graph.inputs' order
    self.positions = []         # their positions in graph.inputs
    self.reusable = all(kind in (trace.TENSOR, trace.NONE) for kind in body.traced.kinds)
    for k, outer in self.outer.items():
      t = graph.inputs[k]
      if (outer is None or outer.dtype in (tf.resource, tf.variant) or
          not hasattr(outer, "numpy")):
        self.reusable = False
      elif t.op.type != "Const":
        self.captured.append(outer)
        self.positions.append(k)
      elif t.dtype in _VALUE_DTYPES or id(outer) in forced_inputs:
        self.reusable = False    # not made a placeholder: its value is in the graph
      # else: a small integer, bool or string constant: part of the program

  def slots(self, tensors):
    """Each tensor's position among the captured inputs (None: not captured)."""
    ids = [id(t) for t in self.captured]
    return [ids.index(id(t)) if id(t) in ids else None for t in tensors]

  def positions_of(self, tensors):
    """Each tensor's position among the graph's inputs (None: not captured)."""
    where = {id(outer): k for k, outer in self.outer.items()}
    return [where.get(id(t)) for t in tensors]

  def fingerprint(self):
    return _fingerprint(self.body.traced)

  def bound(self, captured):
    """The body for a conversion in the current graph, its captured inputs `captured`."""
    return bound_in_graph(self, dict(zip(self.positions, captured)))

  def input_value(self, k, given):
    """Graph input k's value in the current graph: given, a program constant made again,
    or its outer tensor captured."""
    if k in given:
      return given[k]
    t = self.body.graph.inputs[k]
    if t.op.type == "Const" and k not in self.positions:
      return graph_io.copy_op(t.op, []).outputs[0]
    if self.outer[k] is None:
      raise ValueError(f"Input {t.name} of the traced function is neither an argument nor "
                       "a captured tensor.")
    return graph_io.capture(self.outer[k])

  def replay(self, i, given):
    """The traced body re-emitted in the current graph for loop index `i`, graph input k
    reading `given[k]` (the others as `input_value`): the loop function a whole-body
    sequential loop (or the checked mode under XLA) runs."""
    graph = self.body.graph
    env = {graph.inputs[0].ref(): i}
    env.update((graph.inputs[k].ref(), self.input_value(k, given)) for k in self.outer)
    emitted = {}
    markers = self.body.traced.markers
    controls = list(markers) + list(getattr(graph, "control_outputs", []))
    for op in graph_io.ops_in_order(graph.outputs, controls):
      if op.outputs and all(t.ref() in env for t in op.outputs):
        continue
      deps = [emitted[c] for c in op.control_inputs if c in emitted]
      with tf.control_dependencies(deps):
        new = graph_io.copy_op(op, [env[t.ref()] for t in op.inputs])
      emitted[op] = new
      env.update((t.ref(), o) for t, o in zip(op.outputs, new.outputs))
    return self.body.traced.pack([env[t.ref()] for t in graph.outputs],
                                 [emitted[m] for m in markers], stacked=False)


class _BoundTraced(trace.Traced):
  """A traced body whose captured inputs are `program.input_value`s in the current graph."""

  def __init__(self, program, given):
    traced = program.body.traced
    super().__init__(traced.graph, traced.structure, traced.kinds, traced.markers)
    self.ragged_ranks = traced.ragged_ranks
    self._program = program
    self._given = given

  def captured_inputs(self):
    return [self._program.input_value(k, self._given) for k in sorted(self._program.outer)]


class _Checked:
  """A program's function that, after its first call, makes sure its conversion captured
  nothing of the closure it was built from; if it did, the program is not reused."""

  def __init__(self, function, key):
    self.function = function
    self.key = key
    self.checked = False

  def __call__(self, *args):
    result = self.function(*args)
    if not self.checked:
      self.checked = True
      if self.function.get_concrete_function(*args).graph.captures:
        _programs[self.key] = None
    return result


# ----------------------------------------------------------------------------- the key

def _fingerprint(traced):
  """A digest of the traced program: its graph with its inputs renamed by position and the
  static shape of every output (shape inference reads values of captured tensors, even of
  placeholders: a reshape to a slice of a large captured int tensor has a static shape), and
  the functions it calls named by their order of first use."""
  graph = traced.graph
  graph_def = graph.as_graph_def(add_shapes=True)
  library = {f.signature.name: f for f in graph_def.library.function}
  del graph_def.library.function[:]
  renames = {t.op.name: f"__input_{k}" for k, t in enumerate(graph.inputs)}
  for node in graph_def.node:
    if node.name in renames:
      node.name = renames[node.name]
      node.attr.pop("_user_specified_name", None)   # a capture's unique id
    node.input[:] = [_renamed(i, renames) for i in node.input]
  structure = repr((traced.kinds, tf.nest.map_structure(lambda _: 0, traced.structure)))
  digest = hashlib.sha256(structure.encode())
  main = graph_def.SerializeToString(deterministic=True)
  if not library:
    digest.update(main)
    return digest.hexdigest()
  pattern = re.compile(b"|".join(re.escape(n.encode()) for n in sorted(library, key=len,
                                                                        reverse=True)))
  order = {}
  pending = [main]
  while pending:
    blob = pending.pop(0)
    for m in pattern.finditer(blob):
      if m.group(0) not in order:
        order[m.group(0)] = len(order)
        pending.append(library[m.group(0).decode()].SerializeToString(deterministic=True))
    digest.update(pattern.sub(lambda m: b"__function_%d" % order[m.group(0)], blob))
  return digest.hexdigest()


def _renamed(name, renames):
  control = name.startswith("^")
  base, _, port = name.lstrip("^").partition(":")
  base = renames.get(base, base)
  return ("^" if control else "") + base + (":" + port if port else "")
