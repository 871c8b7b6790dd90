"""The conversion entry: a traced loop body -> its vectorized outputs, whole or in chunks.

This is the one module that imports the converter families and the control-flow converters,
so importing it fills the registry. It builds the Context of a whole loop (`indices` is
`range(n)`) and of a chunk (`indices` is `range(start, start + size)`), runs the walker over
the body for it, and tiles invariant outputs to `[n] + shape`. Any mode that converts a
graph (pfor, the helpers, the program-counter mode) enters here.
"""

import inspect

import tensorflow as tf

import converters  # pylint: disable=unused-import  (fills the registry)
from vectorize.control_flow import calls  # pylint: disable=unused-import  (registers calls)
from vectorize.control_flow import cond  # pylint: disable=unused-import  (registers If, Case)
from vectorize.control_flow import while_loop  # pylint: disable=unused-import  (registers While)
from vectorize import checked
from vectorize import chunk_outputs
from vectorize import dims
from vectorize import graph_io
from vectorize import kinds
from vectorize import options
from vectorize import ragged
from vectorize import trace as trace_module
from vectorize import walker
from vectorize import whole_body_loop
from vectorize.config import PForConfig
from vectorize.context import Context, Report
from vectorize.errors import ConversionError
from vectorize.target import Target
from vectorize.values import invariant, stack, stacked

LOOP_INDEX = tf.TensorSpec([], tf.int32, name="loop_index")

_last_report = [None]


def last_report():
  """The conversion report of the most recent conversion (a `Report`), or None."""
  return _last_report[0]


class LoopBody:
  """A loop body traced once for the loop index, with its `pfor_config` if it takes one."""

  def __init__(self, traced, config, loop_fn=None):
    self.traced = traced
    self.config = config
    self.loop_fn = loop_fn    # the user's function, which the checked mode runs under XLA

  @property
  def graph(self):
    return self.traced.graph

  def convert(self, ctx, probes=None):
    """The body's tensor outputs as Values and its Operations' conversions, for `ctx`;
    with `probes` (body tensors the outputs depend on), also their Values."""
    inputs = [stacked(ctx.indices)] + [invariant(t) for t in self.traced.captured_inputs()]
    if self.config is not None:
      ctx.reductions = self.config.reductions
    control_outputs = self.traced.markers + list(getattr(self.graph, "control_outputs", []))
    count = len(self.graph.outputs)
    outputs, effects = walker.convert_graph(self.graph, inputs, ctx,
                                            list(self.graph.outputs) + list(probes or ()),
                                            control_outputs=control_outputs,
                                            ragged_outputs=True)
    operations = effects[:len(self.traced.markers)]   # one emitted NoOp per marker
    return (outputs[:count], operations) + ((outputs[count:],) if probes is not None else ())


def trace_loop_body(loop_fn):
  """`loop_fn(i)` (or `loop_fn(i, pfor_config)`) traced for a scalar int32 loop index."""
  config = PForConfig() if wants_config(loop_fn) else None
  name = f"loop_fn {getattr(loop_fn, '__name__', type(loop_fn).__name__)}"
  if config is None:
    _check_one_required_argument(loop_fn, name)
  extra = (config,) if config is not None else ()
  with options.masked_control_flow():      # for a pfor inside the body: see there
    return LoopBody(trace_module.trace(loop_fn, [LOOP_INDEX], extra, name), config,
                    loop_fn)


def whole_loop_context(n, static_n, fallback_allowed, report):
  """The Context of all n iterations: `indices` is `range(n)`."""
  indices = tf.range(n)
  if static_n == 0:   # see `_opaque_empty`
    indices = _opaque_empty(indices)
  return Context(n=n, indices=indices, static_n=static_n,
                 fallback_allowed=fallback_allowed, report=report,
                 target=Target.for_this_graph(indices_are_range=True))


def _opaque_empty(indices):
  """The empty index vector of a static n = 0, hidden from Grappler's constant folding
  (static shape kept). Values computed from it and from constants would fold to empty
  constants, and Grappler's ArithmeticOptimizer divides by zero (SIGFPE: the process dies)
  rewriting a Mul of such an empty constant that broadcasts another empty value (TF 2.21:
  `tf.function(lambda x: x * tf.zeros([0, 1, 3]))(tf.zeros([0, 2, 1]))`; dense
  `tf.nn.ctc_loss` in a body does it)."""
  return tf.raw_ops.PlaceholderWithDefault(input=indices, shape=[0])


def chunk_context(start, size, fallback_allowed, report):
  """The Context of the iterations `[start, start + size)`; `size` a Python int (static, as
  XLA needs: `start + range(size)` then has a constant length) or a run-time tensor."""
  static_size = size if isinstance(size, int) else None
  return Context(n=tf.constant(size) if static_size is not None else size,
                 indices=start + tf.range(size), static_n=static_size,
                 fallback_allowed=fallback_allowed, report=report,
                 target=Target.for_this_graph())


def vectorize_loop(loop_fn, n, static_n, fallback_allowed, chunk_size=None, warn=True,
                   body=None):
  """`loop_fn(i)` for i in `range(n)`, converted and stacked: the body's structure, each
  tensor with a leading axis of n.

  Args:
    loop_fn: the body (see `trace_loop_body`).
    n: scalar int32 tensor, already checked non-negative.
    static_n: n as a Python int when known while tracing, else None.
    fallback_allowed: whether unconvertible ops run in a sequential loop.
    chunk_size: if set, the iterations run in chunks of this size (bounds memory).
    warn: log the first fallback of each op type.
    body: the `LoopBody` of `loop_fn` traced already (the program cache's), or None.
  """
  body = body or trace_loop_body(loop_fn)
  report = Report(warn=warn)
  _last_report[0] = report
  chunked = chunk_size is not None and (static_n is None or static_n > chunk_size)
  if chunked and body.config is not None and body.config.has_reductions:
    raise ValueError("pfor_config reductions with `parallel_iterations` currently unsupported: "
                     "a reduction needs all iterations at once. To fix: drop "
                     "parallel_iterations.")
  with tf.name_scope("pfor"):
    with dims.ints():
      refusal = _unordered_state(body, fallback_allowed) or (
          fallback_allowed and body.config is None and
          whole_body_loop.writes_variables(body.graph) and
          whole_body_loop.refuses_state(lambda: body.convert(whole_loop_context(
              n, static_n, fallback_allowed, Report(warn=False)))))
    if refusal:   # runs loop_fn again: the user's code, with the user's kind of dims
      with dims.ints():
        flags = whole_body_loop.ragged_outputs(lambda: body.convert(whole_loop_context(
            n, static_n, True, Report(warn=False))))
      return whole_body_loop.run_sequentially(loop_fn, body.traced, n, static_n, refusal,
                                              Target.for_this_graph(), flags)
    with dims.ints():
      return _convert(body, n, static_n, chunked, chunk_size, fallback_allowed, report)


def _unordered_state(body, fallback_allowed):
  """The refusal of a body whose state's order is in no one graph (`whole_body_loop.
  unordered_state`): the whole body then runs as a loop, or, where it cannot (the fallback
  is off, or the body takes a pfor_config), a ConversionError."""
  if not whole_body_loop.writes_variables(body.graph):
    return None
  reason = whole_body_loop.unordered_state(body.graph)
  if reason is None:
    return None
  message = f"Cannot vectorize the loop body: a stateful op cannot be vectorized when {reason}."
  if not fallback_allowed or body.config is not None:
    raise ConversionError(
        f"{message} To fix: read and write the variable in the same function (outside the "
        "tf.cond or tf.function), update it outside the loop (return per-iteration values), "
        "or enable fallback_to_while_loop to run the body as a sequential loop.")
  return message


def _convert(body, n, static_n, chunked, chunk_size, fallback_allowed, report):
  """The body converted for all n iterations (in chunks if `chunked`), packed."""
  if not chunked:
    ctx = whole_loop_context(n, static_n, fallback_allowed, report)
    if checked.wanted(body):
      values, operations = checked.convert_checked(body, ctx, vectorize_loop)
    else:
      values, operations = body.convert(ctx)
    flat = [kinds.of(v).pack(v, n) for v in values]
    return body.traced.pack(flat, operations)
  checked.warn_not_checked_in_chunks()
  if static_n is None and options.compiled_by_xla():
    raise ConversionError(
        f"pfor with parallel_iterations={chunk_size} under XLA (jit_compile=True) needs n "
        "known when it traces: XLA compiles chunks of one static size, and this n is a "
        "run-time value (a batch of unknown size). To fix: give the batch a static size (an "
        "input_signature with it), drop parallel_iterations (all iterations at once), or "
        "call it without jit_compile.")
  if static_n is not None and options.compiled_by_xla():
    flat, operations = _convert_in_static_chunks(body, static_n, chunk_size,
                                                 fallback_allowed, report)
  else:
    flat, operations = _convert_in_chunks(body, n, static_n, chunk_size, fallback_allowed,
                                          report)
  return body.traced.pack(flat, operations)


def _convert_in_chunks(body, n, static_n, chunk_size, fallback_allowed, report):
  """Converts the body once and runs it over chunks of `chunk_size` iterations.

  Emits a while loop over chunks, one at a time (so one chunk's intermediates are alive at
  once); each step converts the body for the iterations `[start, min(start + chunk_size, n))`
  and writes each output's rows where `chunk_outputs` keeps them, the output held once. The
  body's Operations run in every step; the loop's result stands for them.
  """
  xla = options.compiled_by_xla()
  places = [chunk_outputs.for_output(t.dtype, t.shape, n, chunk_size, xla)
            for t in body.graph.outputs]

  def step(start, *stores):
    size = tf.minimum(chunk_size, n - start)
    values, operations = body.convert(chunk_context(start, size, fallback_allowed, report))
    for v in values:
      ragged.refuse_in_chunks(v)
    outs = [stack(v, size) for v in values]
    with tf.control_dependencies(operations):
      return (start + chunk_size,) + tuple(
          p.write(s, start, tf.identity(o)) for p, s, o in zip(places, stores, outs))

  results = tf.while_loop(lambda start, *_: start < n, step,
                          (tf.constant(0),) + tuple(p.initial() for p in places),
                          parallel_iterations=1)
  graph_io.keep_unlowered_where_grappler_breaks(results[0])
  flat = []
  for p, store, t in zip(places, results[1:], body.graph.outputs):
    out = p.result(store)
    out.set_shape(tf.TensorShape([static_n]).concatenate(t.shape))
    flat.append(out)
  done = tf.group(results[0])   # the final chunk start: after every step
  return flat, [done] * len(body.traced.markers)


def _convert_in_static_chunks(body, n, chunk_size, fallback_allowed, report):
  """Chunks of one static size each, as XLA needs: a while loop over the `n // chunk_size`
  full chunks, the rest (`n % chunk_size` iterations) converted once more after it. Every
  lane is a real iteration (no padding lane runs an iteration twice, side effects included).
  """
  full, rest = divmod(n, chunk_size)
  places = [chunk_outputs.FullChunks(t.dtype, t.shape, full, chunk_size)
            for t in body.graph.outputs]

  def convert(start, size):
    values, operations = body.convert(chunk_context(start, size, fallback_allowed, report))
    for v in values:
      ragged.refuse_in_chunks(v)
    return [stack(v, size) for v in values], operations

  def step(k, *stores):
    outs, operations = convert(k * chunk_size, chunk_size)
    with tf.control_dependencies(operations):
      return (k + 1,) + tuple(p.write(s, k, tf.identity(o))
                              for p, s, o in zip(places, stores, outs))

  results = tf.while_loop(lambda k, *_: k < full, step,
                          (tf.constant(0),) + tuple(p.initial() for p in places),
                          parallel_iterations=1, maximum_iterations=full)  # XLA's gradient
  graph_io.keep_unlowered_where_grappler_breaks(results[0])
  flat = [p.result(store) for p, store in zip(places, results[1:])]
  done = [results[0]]
  if rest:
    with tf.control_dependencies(done):   # after the full chunks, as iterations are ordered
      outs, operations = convert(tf.constant(full * chunk_size), rest)
    flat = [tf.concat([f, o], 0) for f, o in zip(flat, outs)]
    done += operations
  return flat, [tf.group(done)] * len(body.traced.markers)


def _check_one_required_argument(loop_fn, name):
  """A clear TypeError for a body that needs more than the loop index: pfor passes a
  PForConfig only to a parameter named `pfor_config` (as TensorFlow's pfor does)."""
  try:
    parameters = inspect.signature(getattr(loop_fn, "python_function", loop_fn)).parameters
  except (TypeError, ValueError):
    return
  required = [p.name for p in parameters.values() if p.default is p.empty and
              p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  if len(required) > 1:
    raise TypeError(
        f"{name} takes {len(required)} required arguments ({', '.join(required)}), and pfor "
        "calls it with the loop index alone: it passes a PForConfig only to a parameter named "
        f"pfor_config. To fix: rename {required[1]!r} to pfor_config, or give the other "
        "arguments defaults.")


def wants_config(loop_fn):
  target = getattr(loop_fn, "python_function", loop_fn)
  try:
    return "pfor_config" in inspect.signature(target).parameters
  except (TypeError, ValueError):
    return False
