"""Tracing: a Python function -> one FuncGraph, for every mode that converts graphs.

`trace(fn, input_specs)` calls `fn` once on placeholders, with autograph as the caller has
it (a Python `if` on a tensor works where the caller's code would convert it), and records
the output structure, so that converted tensors can be packed back into it. Operations the
function returns are kept as markers the walker converts like any op; None passes through.
"""

import functools
import inspect
import numbers
import threading

import numpy as np
import tensorflow as tf
from tensorflow.python.autograph.core import ag_ctx
from tensorflow.python.autograph.core import config as ag_config
from tensorflow.python.autograph.core import converter as ag_converter
from tensorflow.python.autograph.impl import api as autograph
from tensorflow.python.eager import context
from tensorflow.python.framework import func_graph as func_graph_module
from tensorflow.python.util import nest

from vectorize import graph_io
from vectorize import ragged


def _exclude_from_autograph():
  """Our graph-building code is plain Python: autograph must not rewrite it. Without this, a
  pfor called inside a user's `tf.function` gets the whole library re-transpiled at every
  trace (seconds). The traced function itself is still converted, explicitly, in `trace`."""
  ours = tuple(ag_config.DoNotConvert(m) for m in ("vectorize", "converters"))
  ag_config.CONVERSION_RULES = ours + tuple(ag_config.CONVERSION_RULES)


_exclude_from_autograph()

TENSOR, NONE, OPERATION, RAGGED = "tensor", "none", "operation", "ragged"


class Traced:
  """A function traced once: its FuncGraph, output structure and the kind of each leaf.

  Attributes:
    graph: the FuncGraph; its outputs are the function's tensor outputs, its inputs the
      traced arguments followed by the captured tensors.
    structure: the function's output, as returned (for packing).
    kinds: TENSOR, NONE, OPERATION or RAGGED (a `tf.RaggedTensor`, whose flat values and
      row splits are graph outputs) per flattened output leaf.
    markers: one NoOp per returned Operation, depending on it (the walker keeps control
      edges, so the marker's conversion depends on the Operation's).
  """

  def __init__(self, graph, structure, kinds, markers):
    self.graph = graph
    self.structure = structure
    self.kinds = kinds
    self.markers = markers
    self.ragged_ranks = ()   # per RAGGED leaf, its ragged rank

  def captured_inputs(self):
    """The outer tensors the graph captures, one per graph input past the traced arguments,
    captured into the current graph (where a conversion emits)."""
    captured = {internal.ref(): external for external, internal in self.graph.captures}
    num_args = len(self.graph.inputs) - len(captured)
    outer = []
    for t in self.graph.inputs[num_args:]:
      external = captured.get(t.ref())
      if external is None:
        raise ValueError(f"Input {t.name} of the traced function is neither an argument nor "
                         "a captured tensor.")
      outer.append(graph_io.capture(external))
    return outer

  def pack(self, tensors, operations, stacked=True):
    """The function's structure with its tensors and Operations replaced, None kept; a
    RaggedTensor leaf gets one more ragged dimension from its stacked components (or, with
    `stacked=False`, is one call's RaggedTensor again, from its own components)."""
    tensors, operations = iter(tensors), iter(operations)
    ragged_ranks = iter(self.ragged_ranks)

    def leaf(kind):
      if kind == RAGGED:
        parts = [next(tensors) for _ in range(1 + next(ragged_ranks))]
        if not stacked:
          return tf.RaggedTensor.from_nested_row_splits(parts[0], parts[1:], validate=False)
        return ragged.stack_ragged_outputs(parts[0], parts[1:])
      return next(tensors) if kind == TENSOR else next(operations) if kind == OPERATION \
          else None

    flat = [leaf(kind) for kind in self.kinds]
    return tf.nest.pack_sequence_as(self.structure, flat)


def trace(fn, input_specs, extra_args=(), name=None):
  """Traces `fn(*args, *extra_args)` once, args being placeholders of `input_specs`.

  Args:
    fn: a Python callable (function, callable object, `functools.partial`, `tf.function`)
      returning a nested structure of tensors, Python numbers, numpy values,
      `tf.IndexedSlices` (made dense), Operations and None.
    input_specs: one `tf.TensorSpec` per traced argument.
    extra_args: Python values passed after the traced arguments (pfor's `pfor_config`).
    name: how error messages name `fn` (default: its `__name__`).

  Returns:
    A `Traced`.

  Raises:
    TypeError: `fn` returned a sparse tensor, or an object that is not a tensor.

  Example:
    >>> traced = trace(lambda i: tf.sin(tf.cast(i, tf.float32)), [tf.TensorSpec([], tf.int32)])
    >>> traced.graph.outputs    # [<tf.Tensor 'Sin:0' ...>]

  Limits: Python values `fn` reads are read once, here. Variables `fn` creates are lifted
  out of the graph (and join the caller's TF1 collections).
  """
  where = name or f"function {getattr(fn, '__name__', type(fn).__name__)}"
  fn = autograph_like_caller(fn)
  result = {}

  def body(*args):
    _tracing.depth = getattr(_tracing, "depth", 0) + 1
    try:
      out = fn(*args, *extra_args)
    except TypeError as e:
      if "_ref" not in str(e):
        raise
      raise TypeError(
          f"{where} updates a TF1 reference variable (tf.compat.v1.Variable under "
          "disable_v2_behavior), which a traced body cannot write. To fix: create it with "
          "use_resource=True (tf.compat.v1.get_variable(..., use_resource=True)), or call "
          f"tf.compat.v1.enable_resource_variables() first. ({e})") from None
    finally:
      _tracing.depth -= 1
    leaves = _flat_outputs(out, where)
    result["structure"] = out
    result["kinds"] = [kind for kind, _ in leaves]
    result["markers"] = [_marker(leaf) for kind, leaf in leaves if kind == OPERATION]
    result["ragged_ranks"] = [leaf.ragged_rank for kind, leaf in leaves if kind == RAGGED]
    return [t for kind, leaf in leaves if kind in (TENSOR, RAGGED)
            for t in ([leaf.flat_values] + list(leaf.nested_row_splits)
                      if kind == RAGGED else [leaf])]

  # Gradients of conditionals taken inside the body pass intermediates as plain tensors
  # (FakeParam where a branch lacks one), not as Optionals, which have no vectorized form.
  caller = tf.compat.v1.get_default_graph()

  def traced_graph():
    with tf.variable_creator_scope(functools.partial(_join_collections, caller)):
      try:
        with context.temporarily_disable_optionals_in_gradients():
          return tf.function(body, autograph=False).get_concrete_function(*input_specs).graph
      except ValueError:
        # With Optionals off, TensorFlow can give a branch's FakeParam a shape its gradient
        # then clashes with ("Shapes (0, 3, 2) and (1, 3, 2) are not compatible", a slice
        # in the untaken branch; fuzz seed 3670505). Traced as TensorFlow would, the body
        # converts where no Optional is needed, and is refused clearly where one is.
        return tf.function(body, autograph=False).get_concrete_function(*input_specs).graph

  try:
    graph = _plain_first(traced_graph)
  except (ValueError, TypeError) as e:
    raise _with_tracing_hint(e, where) from e.__cause__
  traced = Traced(graph, result["structure"], result["kinds"], result["markers"])
  traced.ragged_ranks = result["ragged_ranks"]
  return traced


_TRACING_HINT = (
    "\n\nvectorize traced {where} once, its loop index (or its elements' values) symbolic, "
    "as a tf.function does: a shape computed from such a value is unknown while tracing, so "
    "an op that needs it (tf.unstack, a Python int of `x.shape[k]`, a Python "
    "`range(tensor)`) fails there, though a loop calling the body with Python ints runs. "
    "To fix: keep such shapes static (a fixed-size slice or pad, tf.ensure_shape), or use "
    "ops that take run-time sizes (tf.gather, tf.shape, tf.range).")


def _with_tracing_hint(error, where):
  """`error` (a ValueError or TypeError from tracing the body), its message followed by why
  tracing differs from calling the body with Python ints; once, where pfors nest."""
  hint = _TRACING_HINT.format(where=where)
  if type(error) not in (ValueError, TypeError) or hint[-80:] in str(error):
    return error
  return type(error)(str(error) + hint)


def autograph_like_caller(fn):
  """`fn` converted by autograph if the caller's context has it on (as TF's map_fn does):
  inside a `tf.function`, Python control flow on tensors in `fn` works.

  Converted only where it needs to be: `trace` first runs `fn` as plain Python (as TF's
  pfor and vectorized_map do) and traces it again converted only if that fails (a Python
  `if` on a tensor). Autograph runs a library the body calls (a quantum circuit simulator,
  say) converted too, which took 3-6x the time of tracing it plainly.

  Autograph caches transpiled code per conversion options, and `tf.function` converts with
  other options than `tf_convert`. A function that a `tf.function` already traced is
  converted with its options, so it is not transpiled again (that costs about as much as
  tracing the function itself).
  """
  if getattr(fn, "_vectorize_plain_first", False):
    return fn
  ctx = ag_ctx.control_status_ctx()
  converted = autograph.tf_convert(fn, ctx, user_requested=(
      ctx.status == ag_ctx.Status.ENABLED and _transpiled_by_tf_function(fn)))
  if ctx.status != ag_ctx.Status.ENABLED:
    return converted

  def plain_or_converted(*args, **kwargs):
    return (fn if getattr(_attempt, "plain", False) else converted)(*args, **kwargs)

  plain_or_converted._vectorize_plain_first = True   # pylint: disable=protected-access
  plain_or_converted.__name__ = getattr(fn, "__name__", type(fn).__name__)
  return plain_or_converted


_attempt = threading.local()
_tracing = threading.local()


def inside_a_traced_body():
  """Whether the caller builds ops inside a body being traced for vectorization: a pfor in
  a pfor's body, whose output graph the outer one converts again."""
  return getattr(_tracing, "depth", 0) > 0


def _plain_first(trace_once):
  """`trace_once()` with the functions `autograph_like_caller` wrapped run as plain Python;
  if that raises, again with them converted (whose error, if any, is the one raised)."""
  outer = getattr(_attempt, "plain", False)
  _attempt.plain = True
  try:
    return trace_once()
  except Exception:  # pylint: disable=broad-except
    _attempt.plain = False
    return trace_once()
  finally:
    _attempt.plain = outer


def autograph_enabled():
  """A context in which `trace` converts the function with autograph: an eager call traces
  the body in a `tf.function` of ours, where the user's eager code would have run as Python."""
  return ag_ctx.ControlStatusCtx(status=ag_ctx.Status.ENABLED)


_TF_FUNCTION_OPTIONS = ag_converter.ConversionOptions(recursive=True, user_requested=True,
                                                      optional_features=None)


def _transpiled_by_tf_function(fn):
  if not (inspect.isfunction(fn) or inspect.ismethod(fn)):
    return False
  try:
    cache = autograph._TRANSPILER._cache  # pylint: disable=protected-access
    return cache.has(fn, _TF_FUNCTION_OPTIONS)
  except AttributeError:   # another TF version's internals: just convert as tf_convert does
    return False


def _flat_outputs(structure, where):
  """The output leaves as (kind, tensor or Operation or None), with a clear error for
  anything else."""
  leaves = []
  for path, leaf in nest.flatten_with_joined_string_paths(structure):
    path = path or "<top level>"
    if leaf is None:
      leaves.append((NONE, None))
      continue
    if isinstance(leaf, tf.Operation):
      leaves.append((OPERATION, leaf))
      continue
    if isinstance(leaf, tf.IndexedSlices):
      leaf = tf.convert_to_tensor(leaf)
    elif isinstance(leaf, tf.RaggedTensor):
      leaves.append((RAGGED, leaf))
      continue
    elif isinstance(leaf, tf.SparseTensor):
      raise TypeError(f"{where} returned a {type(leaf).__name__} at {path}; vectorize "
                      "supports dense and ragged tensors only. Convert it to a dense tensor "
                      "first.")
    elif not isinstance(leaf, (tf.Tensor, tf.Variable, numbers.Number, np.ndarray, np.generic)):
      raise TypeError(f"{where} returned an object of type {type(leaf).__name__} at {path}; "
                      "it must return tensors, Python numbers, numpy values, Operations or "
                      "None (nested in tuples, lists, dicts or namedtuples).")
    leaves.append((TENSOR, tf.convert_to_tensor(leaf)))
  return leaves


def _join_collections(caller, next_creator, **kwargs):
  """A variable the function creates (a layer built lazily) joins the caller's TF1
  collections as it is created, as if the function ran in the caller's graph: the
  tf.function we trace in lifts it out but lists it as a global variable only, so a body
  reading `tf.compat.v1.trainable_variables()` right after building a layer (to take
  `tf.gradients` over them) would otherwise get an empty list, and return no gradients."""
  variable = next_creator(**kwargs)
  if isinstance(caller, func_graph_module.FuncGraph):
    return variable
  keys = [tf.compat.v1.GraphKeys.GLOBAL_VARIABLES]
  if getattr(variable, "trainable", False):
    keys.append(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
  for key in keys:
    if not any(v is variable for v in caller.get_collection(key)):
      caller.add_to_collection(key, variable)
  return variable


def _marker(operation):
  with tf.control_dependencies([operation]):
    return tf.no_op(name="pfor_output_operation")


