"""The user face: pfor and vectorized_map, and their argument checks.

The work happens in `engine.vectorize_loop` (trace the body once, convert it, tile invariant
outputs to `[n] + shape`). In eager mode the whole conversion is wrapped in a `tf.function`
kept in the eager cache (`cache.py`), so calling the same pfor again does not trace or
convert again.
"""

import functools
import numbers
from typing import NamedTuple

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import composite_tensor
from tensorflow.python.framework import type_spec
from tensorflow.python.util import nest

from vectorize import engine
from vectorize import program_cache
from vectorize import dims
from vectorize import trace
from vectorize.cache import eager_call, functions_traced, internal_function
from vectorize.options import static_shapes  # pylint: disable=unused-import  (re-exported)


def pfor(loop_fn, iters, fallback_to_while_loop=True, parallel_iterations=None, warn=True):
  """Runs `loop_fn(i)` for i in 0..iters-1 as one vectorized computation.

  Args:
    loop_fn: `loop_fn(i)` or `loop_fn(i, pfor_config)`, returning a nested structure of
      tensors, Python scalars, `tf.IndexedSlices` (returned dense), `tf.RaggedTensor`s
      (returned with one more ragged dimension), `tf.SparseTensor`s (returned with a
      leading loop axis), user composites (a `tf.experimental.BatchableExtensionType`,
      batched through its TypeSpec as TF's pfor does), Operations (run for their effect) and None (passed through).
      A function, callable object, `functools.partial` or `tf.function`.
    iters: the number of iterations: a non-negative Python int, `Dimension` or scalar
      integer tensor, below 2**31.
    fallback_to_while_loop: when an op cannot be vectorized, run it in a sequential loop
      instead of raising `ConversionError`.
    parallel_iterations: if set, the iterations run in chunks of this size, to bound memory.
    warn: log a warning for each op type that falls back to the sequential loop. On by
      default (TensorFlow's pfor defaults to False): a fallback is slow, and says so.

  Returns:
    loop_fn's output structure, each tensor with a new leading axis of size `iters` (a
    `tf.RaggedTensor` where its size differs per iteration, as `tf.ragged.stack` gives; a
    SparseTensor as `tf.sparse.concat` of the iterations' with a new first axis, its dense
    shape the largest over the iterations); None
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
    return pfor_in_graph(loop_fn, iters, fallback_to_while_loop, parallel_iterations, warn)
  static = isinstance(iters, int)
  key = (iters if static else "dynamic", fallback_to_while_loop, parallel_iterations, warn)
  args = () if static else (tf.cast(iters, tf.int32),)
  return eager_call("pfor", loop_fn, key, lambda: _program_function(
      loop_fn, static, iters, fallback_to_while_loop, parallel_iterations, warn), *args)


def vectorized_map(fn, elems, fallback_to_while_loop=True, warn=True):
  """`tf.map_fn(fn, elems)` semantics, vectorized: `fn` applies to each slice of `elems`.

  Args:
    fn: takes one element (elems' structure, the leading axis removed).
    elems: a nested structure of tensors whose leading dimensions are a common size n or 1
      (a leading dimension of 1 is broadcast to every iteration, as TensorFlow's does);
      `tf.RaggedTensor`s of ragged rank 1 too (fn sees each row as a tensor), and
      `tf.SparseTensor`s of rank 2 or more (fn sees each row as a SparseTensor), and user
      composites (a `tf.experimental.BatchableExtensionType`: fn sees one element).
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
    key = (fallback_to_while_loop, warn, _dense_specs(elems))
    return eager_call("vectorized_map", fn, key, lambda: _program_map_function(
        fn, elems, fallback_to_while_loop, warn) or internal_function(
            functools.partial(_eager_body, _vectorized_map_in_graph, fn,
                              fallback_to_while_loop=fallback_to_while_loop, warn=warn)),
        elems)
  return _vectorized_map_in_graph(fn, elems, fallback_to_while_loop, warn)


def last_report():
  """The conversion report of the most recent conversion (a `Report`), or None."""
  return engine.last_report()


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
    raise ValueError(f"parallel_iterations must be a positive integer or None, got "
                     f"{parallel_iterations}.")
  return int(parallel_iterations)


# ----------------------------------------------------------------------------- in graph

def _make_eager_function(loop_fn, static, iters, fallback, parallel_iterations, warn,
                         program=None):
  """The eager pfor's own `tf.function`; it converts `program`'s trace of `loop_fn` where
  there is one (a body outside the program cache, traced for its key already)."""
  def build(n):
    body = program_cache.bound_in_graph(program) if program is not None else None
    return _eager_body(pfor_in_graph, body.loop_fn if body else loop_fn, n, fallback,
                       parallel_iterations, warn, body=body)

  if static:
    return internal_function(lambda: build(iters))
  return internal_function(build, input_signature=[tf.TensorSpec([], tf.int32)])


def _program_function(loop_fn, static, iters, fallback, parallel_iterations, warn):
  """The eager pfor of `loop_fn`: through the program cache (a new closure of a program
  converted before reuses its conversion), or its own `tf.function`."""
  with functions_traced():
    program = program_cache.trace_program(loop_fn)

  def make(program):
    def convert(*args):
      *n, captured = args
      body = program.bound(captured)
      return _eager_body(pfor_in_graph, body.loop_fn, n[0] if n else iters, fallback,
                         parallel_iterations, warn, body=body)
    return internal_function(convert)

  signature = (iters if static else "dynamic", fallback, parallel_iterations, warn)
  return program_cache.converted(program, signature, make) or _make_eager_function(
      loop_fn, static, iters, fallback, parallel_iterations, warn, program)


def _program_map_function(fn, elems, fallback, warn):
  """The eager vectorized_map of `fn` through the program cache, or None where `fn` or
  `elems` (not all dense, of one leading size) are outside it."""
  specs = _dense_specs(elems)
  if specs is None:
    return None
  # The elements as tensors of their own, which `fn` cannot close over: each call's
  # elements take their places among the captured inputs.
  flat = [tf.identity(e) for e in tf.nest.flatten(elems)]
  n = dims.leading(flat[0])

  def loop_fn(i):   # fn as the trace's autograph context has it (see trace.py)
    mapped = trace.autograph_like_caller(fn)
    return mapped(tf.nest.pack_sequence_as(elems, [tf.gather(e, i) for e in flat]))

  loop_fn.__name__ = getattr(fn, "__name__", type(fn).__name__)
  with functions_traced():
    program = program_cache.trace_program(loop_fn, inputs=flat)

  def make(program):
    def convert(captured):
      body = program.bound(captured)
      return _eager_body(pfor_in_graph, body.loop_fn, n, fallback, None, warn,
                         is_a_size=True, body=body)
    return internal_function(convert)

  run = program_cache.converted(program, (specs, fallback, warn), make)
  if run is not None:
    slots = program.slots(flat)
    return lambda elems_now: run(replacing=[(slot, e) for slot, e in zip(
        slots, tf.nest.flatten(elems_now)) if slot is not None])
  if program is None:
    return None
  positions = program.positions_of(flat)

  def convert_own(elems_arg):   # outside the program cache: this trace, these elements
    given = {k: e for k, e in zip(positions, tf.nest.flatten(elems_arg)) if k is not None}
    body = program_cache.bound_in_graph(program, given)
    return _eager_body(pfor_in_graph, body.loop_fn, n, fallback, None, warn, is_a_size=True,
                       body=body)

  return internal_function(convert_own)


def _dense_specs(elems):
  """The specs of `elems` when all are dense tensors of one static leading size, else None
  (the structure is part of the key through `tf.nest`'s flattening order)."""
  flat = tf.nest.flatten(elems)
  if not flat or not all(isinstance(x, tf.Tensor) and x.shape.rank and
                         x.shape.is_fully_defined() for x in flat):
    return None
  if len({x.shape[0] for x in flat}) != 1:
    return None
  return (tuple(tf.TensorSpec(x.shape, x.dtype) for x in flat),
          str(tf.nest.map_structure(lambda _: 0, elems)))


def _eager_body(build, *args, **kwargs):
  """`build(*args)` traced for an eager call: the body gets autograph (TF's eager pfor
  traces it in a `tf.function`, which converts it), and Operations in the result become
  None, as a function cannot return them (they run as the function's effects)."""
  with trace.autograph_enabled():
    result = build(*args, **kwargs)
  return nest.map_structure(lambda x: None if isinstance(x, tf.Operation) else x, result)


def pfor_in_graph(loop_fn, iters, fallback, parallel_iterations, warn=True, is_a_size=False,
                  body=None):
  """pfor in a graph being built (vectorized_map and map_and_batch call it too). `is_a_size`:
  a run-time `iters` read from a tensor's shape (int32, never negative) needs no range check,
  whose Assert would gate everything downstream (a tf.data map function). `body`: loop_fn
  traced already (`program_cache`), its outputs dense."""
  static_n = iters if isinstance(iters, int) else None
  if static_n is not None:
    n = tf.constant(iters, tf.int32)
  else:
    n = tf.cast(iters, tf.int32) if is_a_size else _run_time_n(iters)
  specs = []
  result = engine.vectorize_loop(_outputs_as_parts(loop_fn, specs), n, static_n, fallback,
                                 parallel_iterations, warn, body)
  return _batched_composites(_stacked_sparse_outputs(result), specs, static_n)


# ----------------------------------------------------------------------------- sparse

def _sparse_row(x, i):
  """Row i of a SparseTensor in row-major order (or its only row), a SparseTensor: its
  entries are a run of x's, found by a count of the entries per row."""
  rows = tf.cast(x.dense_shape[0], tf.int32)
  i = tf.where(rows > 1, i, 0)
  counts = tf.math.bincount(tf.cast(x.indices[:, 0], tf.int32), minlength=rows, maxlength=rows)
  splits = tf.concat([[0], tf.cumsum(counts)], 0)
  entries = tf.range(splits[i], splits[i + 1])
  return tf.SparseTensor(tf.gather(x.indices[:, 1:], entries), tf.gather(x.values, entries),
                         x.dense_shape[1:])


class _SparseParts(NamedTuple):
  """A SparseTensor the body returns, as its three tensors (the engine stacks tensors):
  per iteration, indices `[nnz, r]`, values `[nnz]`, dense shape `[r]`."""
  indices: tf.Tensor
  values: tf.Tensor
  dense_shape: tf.Tensor


def _outputs_as_parts(loop_fn, specs):
  """loop_fn, converted by autograph as the caller has it, its SparseTensor outputs as
  `_SparseParts` and its user composites as `_CompositeParts` (their specs, in order, in
  `specs`, as of the last trace); itself not converted again, its signature loop_fn's."""
  fn = trace.autograph_like_caller(loop_fn)

  def as_parts(x):
    if isinstance(x, tf.SparseTensor):
      return _SparseParts(x.indices, x.values, x.dense_shape)
    if _is_user_composite(x):
      specs.append(x._type_spec)  # pylint: disable=protected-access
      return _composite_parts(x._type_spec._to_tensor_list(x), x)  # pylint: disable=protected-access
    return x

  @functools.wraps(loop_fn, updated=())
  def body(*args):
    del specs[:]
    return nest.map_structure(as_parts, fn(*args))

  return tf.autograph.experimental.do_not_convert(body)


def _stacked_sparse_outputs(result):
  """The `_SparseParts` in the stacked result as SparseTensors with a leading loop axis,
  equal to `tf.sparse.concat` of the iterations' values with a new first axis: each
  iteration's entries in order, the dense shape the largest over the iterations."""
  shallow = nest.get_traverse_shallow_structure(
      lambda x: not isinstance(x, _SparseParts), result)
  return nest.map_structure_up_to(
      shallow, lambda x: _stack_sparse(x) if isinstance(x, _SparseParts) else x, result)


def _stack_sparse(parts):
  shapes = tf.cast(parts.dense_shape, tf.int64)                         # [n, r]
  n = tf.shape(shapes, out_type=tf.int64)[0]
  indices = parts.indices
  if isinstance(indices, tf.RaggedTensor):                              # [n, (nnz), r]
    iteration, indices = indices.value_rowids(), indices.values
  else:                                                                 # [n, nnz, r]
    nnz = tf.shape(indices, out_type=tf.int64)[1]
    iteration = tf.repeat(tf.range(n), nnz)
    indices = tf.reshape(indices, [-1, tf.shape(indices)[2]])
  flat_values = parts.values
  flat_values = flat_values.values if isinstance(flat_values, tf.RaggedTensor) else \
      tf.reshape(flat_values, [-1])
  largest = tf.reduce_max(tf.concat([tf.zeros([1, tf.shape(shapes)[1]], tf.int64), shapes],
                                    0), 0)
  return tf.SparseTensor(tf.concat([iteration[:, None], tf.cast(indices, tf.int64)], 1),
                         flat_values, tf.concat([n[None], largest], 0))


# ----------------------------------------------------------------------------- composites

class _CompositeParts(NamedTuple):
  """A user composite (a BatchableExtensionType, a CompositeTensor with a BatchableTypeSpec)
  as the tensors its spec encodes it in; the engine stacks tensors, the spec rebuilds it."""
  tensors: tuple


def _is_user_composite(x):
  """A composite value of the user's that TF's pfor batches through its TypeSpec; tensors,
  variables and the composites vectorize handles itself are not (checked first: an
  IndexedSlices of scalar indices cannot build its TypeSpec)."""
  return (isinstance(x, composite_tensor.CompositeTensor) and
          not isinstance(x, (tf.RaggedTensor, tf.SparseTensor, tf.IndexedSlices, tf.Variable)) and
          isinstance(x._type_spec, type_spec.BatchableTypeSpec))  # pylint: disable=protected-access


def _composite_parts(tensors, value):
  if any(t.dtype == tf.variant for t in tensors):
    raise TypeError(f"{type(value).__name__} encodes itself as a variant tensor, which "
                    "vectorize cannot stack. To fix: return or pass its tensors (fields) "
                    "instead, or give its TypeSpec a _to_tensor_list of plain tensors.")
  return _CompositeParts(tuple(tensors))


def _batched_composites(result, specs, static_n):
  """The `_CompositeParts` in the stacked result rebuilt as batched composites: each spec
  batched by the loop size, as TF's pfor does."""
  return _rebuild_composites(result, specs, lambda spec: spec._batch(static_n))  # pylint: disable=protected-access


def _rebuild_composites(structure, specs, spec_for):
  shallow = nest.get_traverse_shallow_structure(
      lambda x: not isinstance(x, _CompositeParts), structure)
  order = iter(specs)
  return nest.map_structure_up_to(
      shallow, lambda x: spec_for(next(order))._from_compatible_tensor_list(list(x.tensors))  # pylint: disable=protected-access
      if isinstance(x, _CompositeParts) else x, structure)


def _composite_elems_as_parts(elems):
  """vectorized_map's user composite elems as `_CompositeParts` of their batched tensors,
  and the specs of one element each, to rebuild an iteration's element from its rows."""
  specs = []

  def as_parts(x):
    if not _is_user_composite(x):
      return x
    spec = x._type_spec  # pylint: disable=protected-access
    specs.append(spec._unbatch())  # pylint: disable=protected-access
    return _composite_parts(spec._to_batched_tensor_list(x), x)  # pylint: disable=protected-access

  return nest.map_structure(as_parts, elems), specs


def _vectorized_map_in_graph(fn, elems, fallback_to_while_loop=True, warn=True):
  elems, element_specs = _composite_elems_as_parts(elems)
  elems = tf.nest.map_structure(_as_tensor, elems)
  flat = tf.nest.flatten(elems)
  if not flat:
    raise ValueError("vectorized_map needs at least one tensor in elems.")
  if any(e.shape.rank == 0 for e in flat):
    raise ValueError("vectorized_map's elems must have a leading axis; got a scalar.")
  n, checks = _common_leading_dimension(flat)
  if checks:
    with tf.control_dependencies(checks):
      elems = tf.nest.map_structure(tf.identity, elems)

  fn = trace.autograph_like_caller(fn)

  def loop_fn(i):
    rows = tf.nest.map_structure(lambda e: _broadcasting_gather(e, i), elems)
    return fn(_rebuild_composites(rows, element_specs, lambda spec: spec))

  return pfor_in_graph(loop_fn, _check_iters(n), fallback_to_while_loop, None, warn,
                        is_a_size=True)


def _as_tensor(x):
  """A tensor, a `tf.RaggedTensor` of ragged rank 1 (each row one element of a size of
  its own), or a `tf.SparseTensor` of rank 2 or more (its entries in row-major order)."""
  if isinstance(x, tf.SparseTensor):
    if x.shape.rank is not None and x.shape.rank < 2:
      raise ValueError(f"vectorized_map takes SparseTensors of rank 2 or more in elems (each "
                       f"element one row, itself a SparseTensor); got rank {x.shape.rank}. "
                       "To fix: pass a dense tensor.")
    return tf.sparse.reorder(x)
  if isinstance(x, tf.RaggedTensor):
    if x.ragged_rank != 1:
      raise ValueError(f"vectorized_map takes RaggedTensors of ragged rank 1 in elems; got "
                       f"ragged rank {x.ragged_rank}. To fix: merge the inner ragged "
                       "dimensions (rt.merge_dims) or pass a dense tensor.")
    return x
  return tf.convert_to_tensor(x)


def _common_leading_dimension(flat):
  """n for elems whose leading dimensions are n or 1 (1 broadcasts, as in TF), and the
  run-time checks needed where a dimension is unknown while tracing."""
  leading = [dims.leading(e) for e in flat]
  known = {d for d in leading if d is not None and d != 1}   # 0 too: no iteration
  if len(known) > 1:
    raise ValueError(f"vectorized_map: the tensors of elems must have the same leading "
                     f"dimension, or 1 (broadcast); got {', '.join(str(d) for d in leading)}.")
  if None not in leading:
    return known.pop() if known else 1, []
  if len(flat) == 1:
    return _leading_size(flat[0]), []
  sizes = tf.stack([_leading_size(e) for e in flat])
  if known:
    n = known.pop()
  else:   # the size other than 1 (0 included), or 1 where all are
    other = tf.reduce_max(tf.where(tf.equal(sizes, 1), -1, sizes))
    n = tf.where(other < 0, 1, other)
  check = tf.raw_ops.Assert(
      condition=tf.reduce_all(tf.equal(sizes, n) | tf.equal(sizes, 1)),
      data=["vectorized_map: the tensors of elems must have the same leading dimension, or 1 "
            "(broadcast); got", sizes])
  return n, [check]


def _leading_size(x):
  if isinstance(x, tf.RaggedTensor):
    return x.nrows(out_type=tf.int32)
  if isinstance(x, tf.SparseTensor):
    return tf.cast(x.dense_shape[0], tf.int32)
  return tf.shape(x, out_type=tf.int32)[0]


def _broadcasting_gather(x, i):
  """Row i of `x`, or its only row if its leading dimension is 1 (broadcast). A ragged
  row is read as a gather over a range of per-iteration bounds, which converts to a
  ragged value."""
  if isinstance(x, tf.RaggedTensor):
    i = tf.where(x.nrows(out_type=tf.int32) > 1, i, 0)
    splits = x.row_splits
    return tf.gather(x.values, tf.range(splits[i], splits[i + 1]))
  if isinstance(x, tf.SparseTensor):
    return _sparse_row(x, i)
  if dims.leading(x) == 1:
    return x[0]
  if dims.leading(x) is None:
    i = tf.where(tf.shape(x, out_type=tf.int32)[0] > 1, i, 0)
  return tf.gather(x, i)
