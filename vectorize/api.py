"""The user API: pfor and vectorized_map, their argument checks, and the eager cache.

`pfor` traces the body once into a FuncGraph whose input is the loop index, converts it with
the walker, and tiles invariant outputs to `[n] + shape`. In eager mode the whole conversion
is wrapped in a `tf.function` that is cached per body, so calling the same pfor again does
not trace or convert again.
"""

import collections
import contextlib
import functools
import inspect
import numbers
import types

from absl import logging
import numpy as np
import tensorflow as tf
from tensorflow.python.autograph.core import ag_ctx
from tensorflow.python.autograph.core import config as ag_config
from tensorflow.python.autograph.core import converter as ag_converter
from tensorflow.python.autograph.impl import api as autograph
from tensorflow.python.eager import context
from tensorflow.python.framework import func_graph as func_graph_module
from tensorflow.python.ops import control_flow_util
from tensorflow.python.util import nest

import converters  # pylint: disable=unused-import  (fills the registry)
from vectorize import control_flow  # pylint: disable=unused-import  (registers calls)
from vectorize import walker
from vectorize.config import PForConfig
from vectorize.context import Context, Report
from vectorize.values import stack, stacked, invariant

def _exclude_from_autograph():
  """Our graph-building code is plain Python: autograph must not rewrite it. Without this, a
  pfor called inside a user's `tf.function` gets the whole library re-transpiled at every
  trace (seconds). The loop body itself is still converted, explicitly, in `TracedBody`."""
  ours = tuple(ag_config.DoNotConvert(m) for m in ("vectorize", "converters"))
  ag_config.CONVERSION_RULES = ours + tuple(ag_config.CONVERSION_RULES)


_exclude_from_autograph()

_EAGER_CACHE_SIZE = 64
_eager_cache = collections.OrderedDict()
_last_report = [None]


def pfor(loop_fn, iters, fallback_to_while_loop=True, parallel_iterations=None, warn=True):
  """Runs `loop_fn(i)` for i in 0..iters-1 as one vectorized computation.

  Args:
    loop_fn: `loop_fn(i)` or `loop_fn(i, pfor_config)`, returning a nested structure of
      tensors, Python scalars, `tf.IndexedSlices` (returned dense), Operations (run for
      their effect) and None (passed through). A function, callable object,
      `functools.partial` or `tf.function`.
    iters: the number of iterations: a non-negative Python int, `Dimension` or scalar
      integer tensor, below 2**31.
    fallback_to_while_loop: when an op cannot be vectorized, run it in a sequential loop
      instead of raising `ConversionError`.
    parallel_iterations: if set, the iterations run in chunks of this size, to bound memory.
    warn: log a warning for each op type that falls back to the sequential loop. On by
      default (TensorFlow's pfor defaults to False): a fallback is slow, and says so.

  Returns:
    loop_fn's output structure, each tensor with a new leading axis of size `iters`; None
    where loop_fn returned None; where it returned an Operation, an Operation running the
    vectorized one in graph mode, None in eager mode (it has run).

  Raises:
    ValueError / TypeError: bad `iters`, `parallel_iterations` or loop_fn outputs.
    ConversionError (a ValueError): an op cannot be vectorized and the fallback is off.

  Example:
    >>> x = tf.random.normal([8, 3])
    >>> vectorize.pfor(lambda i: tf.reduce_sum(x[i] ** 2), 8)   # shape [8]

  Limits: the body is traced once; Python values it reads are read at trace time, and in
  eager mode the conversion is cached per body (tensors it captures are keyed by identity).
  """
  iters = _check_iters(iters)
  parallel_iterations = _check_parallel_iterations(parallel_iterations)
  if not tf.executing_eagerly():
    return _pfor_in_graph(loop_fn, iters, fallback_to_while_loop, parallel_iterations, warn)
  static = isinstance(iters, int)
  key = (_callable_key(loop_fn), iters if static else "dynamic", fallback_to_while_loop,
         parallel_iterations, warn, _options.static_shapes)
  fn = _cached(key, lambda: _make_eager_function(loop_fn, static, iters, fallback_to_while_loop,
                                                 parallel_iterations, warn))
  with functions_traced():
    return fn() if static else fn(tf.cast(iters, tf.int32))


def vectorized_map(fn, elems, fallback_to_while_loop=True, warn=True):
  """`tf.map_fn(fn, elems)` semantics, vectorized: `fn` applies to each slice of `elems`.

  Args:
    fn: takes one element (elems' structure, the leading axis removed).
    elems: a nested structure of tensors whose leading dimensions are a common size n or 1
      (a leading dimension of 1 is broadcast to every iteration, as TensorFlow's does).
    fallback_to_while_loop: as in `pfor`.
    warn: as in `pfor` (on by default).

  Returns:
    fn's output structure, stacked along a new leading axis.

  Raises:
    ValueError: no tensor in `elems`, a scalar in it, or leading dimensions that are
      neither n nor 1 (at trace time where known, else at run time).

  Example:
    >>> vectorize.vectorized_map(lambda row: tf.reduce_max(row), tf.ones([4, 5]))  # [4]
  """
  if tf.executing_eagerly():
    key = ("vectorized_map", _callable_key(fn), fallback_to_while_loop, warn,
           _options.static_shapes)
    graph_fn = _cached(key, lambda: tf.function(
        functools.partial(_eager_body, _vectorized_map_in_graph, fn,
                          fallback_to_while_loop=fallback_to_while_loop, warn=warn),
        autograph=False))
    with functions_traced():
      return graph_fn(elems)
  return _vectorized_map_in_graph(fn, elems, fallback_to_while_loop, warn)


def last_report():
  """The conversion report of the most recent conversion (a `Report`), or None."""
  return _last_report[0]


# ----------------------------------------------------------------------------- checks

_MAX_ITERS = 2**31 - 1   # the loop index and n are int32 tensors


def _check_iters(iters):
  """`iters` as a Python int when known at trace time, else as a scalar integer tensor."""
  if isinstance(iters, (bool, np.bool_)):
    raise TypeError(f"iters must be an integer, got the bool {iters!r}.")
  if isinstance(iters, tf.compat.v1.Dimension):   # TF1 code passes x.shape[0]
    if iters.value is None:
      raise ValueError("iters is a Dimension of unknown size; pass tf.shape(x)[0] instead.")
    iters = iters.value
  if isinstance(iters, numbers.Integral):
    if iters < 0:
      raise ValueError(f"iters must be non-negative, got {iters}.")
    if iters > _MAX_ITERS:
      raise ValueError(f"iters must be at most 2**31 - 1 (vectorize's loop index is int32), "
                       f"got {iters}.")
    return int(iters)
  if isinstance(iters, (tf.Tensor, tf.Variable, np.ndarray)):
    t = tf.convert_to_tensor(iters)
    if not t.dtype.is_integer:
      raise TypeError(f"iters must be an integer tensor, got dtype {t.dtype.name}.")
    if t.shape.rank not in (None, 0):
      raise ValueError(f"iters must be a scalar, got shape {t.shape}.")
    value = tf.get_static_value(t)
    if value is not None:
      return _check_iters(int(value))
    return t
  raise TypeError(f"iters must be a non-negative int or a scalar integer tensor, got "
                  f"{type(iters).__name__} {iters!r}.")


def _run_time_n(iters):
  """A run-time `iters` as the int32 n, checked at run time to be in [0, 2**31 - 1] (one
  Assert op, unguarded: no conditional in the emitted graph)."""
  in_range = iters >= 0
  if iters.dtype.max > _MAX_ITERS:
    in_range = tf.logical_and(in_range, iters <= tf.constant(_MAX_ITERS, iters.dtype))
  check = tf.raw_ops.Assert(condition=in_range, data=[
      "vectorize.pfor: iters must be in [0, 2**31 - 1] (the loop index is int32); iters =",
      iters])
  with tf.control_dependencies([check]):
    return tf.identity(tf.cast(iters, tf.int32))


def _check_parallel_iterations(parallel_iterations):
  if parallel_iterations is None:
    return None
  if isinstance(parallel_iterations, bool) or not isinstance(parallel_iterations,
                                                             numbers.Integral):
    raise TypeError(f"parallel_iterations must be a positive int or None, got "
                    f"{parallel_iterations!r}.")
  if parallel_iterations < 1:
    raise ValueError(f"parallel_iterations must be at least 1, got {parallel_iterations}.")
  return int(parallel_iterations)


# ----------------------------------------------------------------------------- eager cache

def _cached(key, make):
  fn = _eager_cache.get(key)
  if fn is None:
    fn = _eager_cache[key] = make()
    if len(_eager_cache) > _EAGER_CACHE_SIZE:
      _eager_cache.popitem(last=False)
  else:
    _eager_cache.move_to_end(key)
  return fn


class _Identity:
  """Keys an object by identity while holding it alive (so its id cannot be reused)."""
  __slots__ = ("obj",)

  def __init__(self, obj):
    self.obj = obj

  def __hash__(self):
    return id(self.obj)

  def __eq__(self, other):
    return isinstance(other, _Identity) and other.obj is self.obj


def _value_key(value, seen):
  if isinstance(value, (types.ModuleType, type)) or value is None:
    return value
  if isinstance(value, (numbers.Number, str, bytes, tf.DType)):
    return (type(value), value)
  if callable(value) and hasattr(value, "__code__") and not _is_library_function(value):
    return _callable_key(value, seen)
  return _Identity(value)


_LIBRARY_PREFIXES = ("tensorflow", "keras", "tf_keras", "numpy", "vectorize", "converters")


def _callable_key(fn, seen=frozenset()):
  """A key that changes when the body's code or anything it closes over changes.

  Recurses into the user's functions only: a library function it closes over
  (`tf.math.reduce_sum`, whose wrappers close over each other) is keyed by identity, and so
  is a function met again through its own closure (recursion), which would never end.
  """
  if isinstance(fn, functools.partial):
    return ("partial", _callable_key(fn.func, seen),
            tuple(_value_key(a, seen) for a in fn.args),
            tuple(sorted((k, _value_key(v, seen)) for k, v in fn.keywords.items())))
  python_function = getattr(fn, "python_function", None)   # a tf.function
  if python_function is not None:
    return ("tf.function", _Identity(fn), _callable_key(python_function, seen))
  if isinstance(fn, types.MethodType):
    return ("method", _Identity(fn.__self__), _callable_key(fn.__func__, seen))
  code = getattr(fn, "__code__", None)
  if code is None or id(fn) in seen:
    return ("object", _Identity(fn))
  seen = seen | {id(fn)}
  closure = tuple(_value_key(_cell_contents(c), seen) for c in fn.__closure__ or ())
  defaults = tuple(_value_key(d, seen) for d in fn.__defaults__ or ())
  globals_ = tuple((name, _value_key(fn.__globals__[name], seen)) for name in code.co_names
                   if name in fn.__globals__ and not callable(fn.__globals__[name]))
  return ("function", code, closure, defaults, globals_)


def _is_library_function(fn):
  module = getattr(fn, "__module__", None) or ""
  return module.split(".")[0] in _LIBRARY_PREFIXES


def _cell_contents(cell):
  try:
    return cell.cell_contents
  except ValueError:   # a cell not yet filled (a name the function defines later)
    return None


def _make_eager_function(loop_fn, static, iters, fallback, parallel_iterations, warn):
  if static:
    return tf.function(functools.partial(_eager_body, _pfor_in_graph, loop_fn, iters,
                                         fallback, parallel_iterations, warn),
                       autograph=False)
  return tf.function(
      lambda n: _eager_body(_pfor_in_graph, loop_fn, n, fallback, parallel_iterations, warn),
      input_signature=[tf.TensorSpec([], tf.int32)], autograph=False)


def _eager_body(build, *args, **kwargs):
  """`build(*args)` traced for an eager call: the body gets autograph (TF's eager pfor
  traces it in a `tf.function`, which converts it), and Operations in the result become
  None, as a function cannot return them (they run as the function's effects)."""
  with ag_ctx.ControlStatusCtx(status=ag_ctx.Status.ENABLED):
    result = build(*args, **kwargs)
  return nest.map_structure(lambda x: None if isinstance(x, tf.Operation) else x, result)


@contextlib.contextmanager
def functions_traced():
  """Turns `tf.config.run_functions_eagerly(True)` off for the block, as TF's pfor does:
  the walker needs the body as a graph, and runs our `tf.function`s to get it."""
  if not tf.config.functions_run_eagerly():
    yield
    return
  logging.warning("vectorize: tf.config.run_functions_eagerly(True) is set; vectorizing "
                  "needs tf.function, so it is turned off for this call.")
  tf.config.run_functions_eagerly(False)
  try:
    yield
  finally:
    tf.config.run_functions_eagerly(True)


# ----------------------------------------------------------------------------- conversion

def _wants_config(loop_fn):
  target = getattr(loop_fn, "python_function", loop_fn)
  try:
    return "pfor_config" in inspect.signature(target).parameters
  except (TypeError, ValueError):
    return False


_TENSOR, _NONE, _OPERATION = "tensor", "none", "operation"


def _flat_outputs(structure, where):
  """loop_fn's output leaves as (kind, tensor or Operation or None), with a clear error for
  anything else. None and Operations pass through, as in TF's pfor."""
  leaves = []
  for path, leaf in nest.flatten_with_joined_string_paths(structure):
    path = path or "<top level>"
    if leaf is None:
      leaves.append((_NONE, None))
      continue
    if isinstance(leaf, tf.Operation):
      leaves.append((_OPERATION, leaf))
      continue
    if isinstance(leaf, tf.IndexedSlices):
      leaf = tf.convert_to_tensor(leaf)
    elif isinstance(leaf, (tf.SparseTensor, tf.RaggedTensor)):
      raise TypeError(f"{where} returned a {type(leaf).__name__} at {path}; vectorize "
                      "supports dense tensors only. Convert it to a dense tensor first.")
    elif not isinstance(leaf, (tf.Tensor, tf.Variable, numbers.Number, np.ndarray, np.generic)):
      raise TypeError(f"{where} returned an object of type {type(leaf).__name__} at {path}; "
                      "it must return tensors, Python numbers, numpy values, Operations or "
                      "None (nested in tuples, lists, dicts or namedtuples).")
    leaves.append((_TENSOR, tf.convert_to_tensor(leaf)))
  return leaves


def autograph_like_caller(fn):
  """`fn` converted by autograph if the caller's context has it on (as TF's pfor and map_fn
  do): inside a `tf.function`, Python control flow on tensors in `fn` works.

  Autograph caches transpiled code per conversion options, and `tf.function` converts with
  other options than `tf_convert` (which TF's map_fn and pfor use). A body that a
  `tf.function` already traced is converted with its options, so it is not transpiled again
  (that costs about as much as tracing the body itself).
  """
  ctx = ag_ctx.control_status_ctx()
  return autograph.tf_convert(fn, ctx, user_requested=(
      ctx.status == ag_ctx.Status.ENABLED and _transpiled_by_tf_function(fn)))


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


class TracedBody:
  """The loop body traced once: its FuncGraph, output structure and pfor_config.

  The graph's outputs are the body's tensor outputs. An Operation the body returns is
  tracked by a NoOp that depends on it (a marker): the walker keeps control edges, so the
  marker's conversion depends on the Operation's.
  """

  def __init__(self, loop_fn):
    self.config = PForConfig() if _wants_config(loop_fn) else None
    self.structure = None
    self.kinds = []
    self.markers = []
    loop_fn = autograph_like_caller(loop_fn)
    where = f"loop_fn {getattr(loop_fn, '__name__', type(loop_fn).__name__)}"

    def body(i):
      out = loop_fn(i, self.config) if self.config is not None else loop_fn(i)
      self.structure = out
      leaves = _flat_outputs(out, where)
      self.kinds = [kind for kind, _ in leaves]
      self.markers = [_marker(leaf) for kind, leaf in leaves if kind == _OPERATION]
      return [leaf for kind, leaf in leaves if kind == _TENSOR]

    # Gradients of conditionals taken inside the body pass intermediates as plain tensors
    # (FakeParam where a branch lacks one), not as Optionals, which have no vectorized form.
    created = []
    with context.temporarily_disable_optionals_in_gradients(), \
        tf.variable_creator_scope(functools.partial(_record_variable, created)):
      self.graph = tf.function(body, autograph=False).get_concrete_function(
          tf.TensorSpec([], tf.int32, name="loop_index")).graph
    _collect_variables(created)

  def convert(self, ctx):
    """The body's tensor outputs as Values and its Operations' conversions, for `ctx`."""
    captured = {internal.ref(): external for external, internal in self.graph.captures}
    inputs = [stacked(ctx.indices)]
    for t in self.graph.inputs[1:]:
      external = captured.get(t.ref())
      if external is None:
        raise ValueError(f"Input {t.name} of the traced body is neither the loop index nor "
                         "a captured tensor.")
      inputs.append(invariant(_capture(external)))
    if self.config is not None:
      ctx.reductions = self.config.reductions
    control_outputs = self.markers + list(getattr(self.graph, "control_outputs", []))
    outputs, effects = walker.convert_graph(self.graph, inputs, ctx,
                                            control_outputs=control_outputs)
    return outputs, effects[:len(self.markers)]   # one emitted NoOp per marker

  def pack(self, tensors, operations):
    """The body's structure with its tensors and Operations replaced, None kept."""
    tensors, operations = iter(tensors), iter(operations)
    flat = [next(tensors) if kind == _TENSOR else next(operations) if kind == _OPERATION
            else None for kind in self.kinds]
    return tf.nest.pack_sequence_as(self.structure, flat)


def _record_variable(created, next_creator, **kwargs):
  variable = next_creator(**kwargs)
  created.append(variable)
  return variable


def _collect_variables(created):
  """Variables the body created (a layer built lazily) join the caller's TF1 collections,
  as if the body had run in the caller's graph, as TF's pfor runs it: the tf.function we
  trace in lifts them out, but lists them as global variables only, not trainable ones."""
  graph = tf.compat.v1.get_default_graph()
  if not created or isinstance(graph, func_graph_module.FuncGraph):
    return
  for variable in created:
    keys = [tf.compat.v1.GraphKeys.GLOBAL_VARIABLES]
    if getattr(variable, "trainable", False):
      keys.append(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
    for key in keys:
      if not any(v is variable for v in graph.get_collection(key)):
        graph.add_to_collection(key, variable)


def _marker(operation):
  with tf.control_dependencies([operation]):
    return tf.no_op(name="pfor_output_operation")


def _capture(external):
  graph = tf.compat.v1.get_default_graph()
  if hasattr(graph, "capture") and (hasattr(external, "numpy") or external.graph is not graph):
    return graph.capture(external)
  return external


def _static_shapes_wanted():
  """Static-shape control flow under XLA, or when the caller asks (`static_shapes()`)."""
  return _options.static_shapes or control_flow_util.GraphOrParentsInXlaContext(
      tf.compat.v1.get_default_graph())


class _Options:
  static_shapes = False


_options = _Options()


@contextlib.contextmanager
def static_shapes(enabled=True):
  """Within this block, pfor converts control flow with static shapes (masks, no gathers).

  XLA contexts (`tf.function(jit_compile=True)`) get this automatically; use it to build a
  graph for XLA compiled elsewhere, or to compare both modes.
  """
  previous = _options.static_shapes
  _options.static_shapes = enabled
  try:
    yield
  finally:
    _options.static_shapes = previous


def _pfor_in_graph(loop_fn, iters, fallback, parallel_iterations, warn=True):
  body = TracedBody(loop_fn)
  static_n = iters if isinstance(iters, int) else None
  n = tf.constant(iters, tf.int32) if static_n is not None else _run_time_n(iters)
  report = Report(warn=warn)
  _last_report[0] = report
  chunked = parallel_iterations is not None and (static_n is None or
                                                 static_n > parallel_iterations)
  if chunked and body.config is not None and body.config.has_reductions:
    raise ValueError("pfor_config reductions cannot be combined with parallel_iterations: "
                     "a reduction needs all iterations at once.")
  with tf.name_scope("pfor"):
    if not chunked:
      ctx = Context(n=n, indices=tf.range(n), static_n=static_n,
                    fallback_allowed=fallback, report=report,
                    static_shapes=_static_shapes_wanted(), indices_are_range=True)
      values, operations = body.convert(ctx)
      flat = [stack(v, n) for v in values]
    else:
      flat, operations = _convert_in_chunks(body, n, static_n, parallel_iterations, fallback,
                                            report)
  return body.pack(flat, operations)


def _convert_in_chunks(body, n, static_n, chunk_size, fallback, report):
  """Converts the body once and runs it over chunks of `chunk_size` iterations.

  Emits a while loop over chunks; each step converts the body for the iterations
  `[start, min(start + chunk_size, n))` and writes each output's chunk into a TensorArray,
  concatenated at the end into `[n] + shape`. The body's Operations run in every step; the
  loop's result stands for them.
  """
  dtypes = [t.dtype for t in body.graph.outputs]
  shapes = [t.shape for t in body.graph.outputs]

  def step(start, *arrays):
    size = tf.minimum(chunk_size, n - start)
    ctx = Context(n=size, indices=tf.range(start, start + size), static_n=None,
                  fallback_allowed=fallback, report=report,
                  static_shapes=_static_shapes_wanted())
    values, operations = body.convert(ctx)
    outs = [stack(v, size) for v in values]
    with tf.control_dependencies(operations):
      return (start + chunk_size,) + tuple(
          a.write(start // chunk_size, tf.identity(o)) for a, o in zip(arrays, outs))

  num_chunks = (n + chunk_size - 1) // chunk_size
  arrays = tuple(tf.TensorArray(d, size=num_chunks, infer_shape=False) for d in dtypes)
  results = tf.while_loop(lambda start, *_: start < n, step, (tf.constant(0),) + arrays)
  flat = []
  for a, shape in zip(results[1:], shapes):
    t = a.concat()
    t.set_shape(tf.TensorShape([static_n]).concatenate(shape))
    flat.append(t)
  done = tf.group(results[0])   # the final chunk start: after every step
  return flat, [done] * len(body.markers)


def _vectorized_map_in_graph(fn, elems, fallback_to_while_loop=True, warn=True):
  elems = tf.nest.map_structure(tf.convert_to_tensor, elems)
  flat = tf.nest.flatten(elems)
  if not flat:
    raise ValueError("vectorized_map needs at least one tensor in elems.")
  if any(e.shape.rank == 0 for e in flat):
    raise ValueError("vectorized_map's elems must have a leading axis; got a scalar.")
  n, checks = _common_leading_dimension(flat)
  if checks:
    with tf.control_dependencies(checks):
      elems = tf.nest.map_structure(tf.identity, elems)

  fn = autograph_like_caller(fn)

  def loop_fn(i):
    return fn(tf.nest.map_structure(lambda e: _broadcasting_gather(e, i), elems))

  return _pfor_in_graph(loop_fn, _check_iters(n), fallback_to_while_loop, None, warn)


def _common_leading_dimension(flat):
  """n for elems whose leading dimensions are n or 1 (1 broadcasts, as in TF), and the
  run-time checks needed where a dimension is unknown while tracing."""
  dims = [e.shape[0] if e.shape.rank is not None else None for e in flat]
  known = sorted({d for d in dims if d is not None})
  if len(known) > 2 or (len(known) == 2 and known[0] != 1):
    raise ValueError(f"vectorized_map: the tensors of elems must have the same leading "
                     f"dimension, or 1 (broadcast); got {', '.join(str(d) for d in dims)}.")
  if None not in dims:
    return known[-1], []
  sizes = tf.stack([tf.shape(e, out_type=tf.int32)[0] for e in flat])
  n = known[-1] if known and known[-1] > 1 else tf.reduce_max(sizes)
  check = tf.raw_ops.Assert(
      condition=tf.reduce_all(tf.equal(sizes, n) | tf.equal(sizes, 1)),
      data=["vectorized_map: the tensors of elems must have the same leading dimension, or 1 "
            "(broadcast); got", sizes])
  return n, [check]


def _broadcasting_gather(x, i):
  """Row i of `x`, or its only row if its leading dimension is 1 (broadcast)."""
  if x.shape.rank is not None and x.shape[0] == 1:
    return x[0]
  if x.shape.rank is None or x.shape[0] is None:
    i = tf.where(tf.shape(x, out_type=tf.int32)[0] > 1, i, 0)
  return tf.gather(x, i)
