"""Runs one program in each mode and classifies what happened.

Each mode is compared with the sequential loop: eager, function, xla and
dynamic (run-time n) through `pfor_value`, closure (eagerly again, a new closure of the body
over its inputs permuted: the program cache's reuse), n0 (n = 0, expected shapes from running
iteration 0), and grad (the gradient of a fixed weighted sum of pfor's float outputs w.r.t.
a captured float input, inside a tf.function, against the same through the eager loop).
tf1 builds the module again in a tf.Graph and runs the loop and pfor (static n and n fed
through a placeholder) in a tf.compat.v1.Session; data compares
`vectorize.data.map_and_batch(body, b)` with `map(body).batch(b)` (element_spec, every batch,
drop_remainder both ways). Every run starts from the variables' initial values, and the
variables' values after it must be the loop's (not in tf1, where an update runs only where a
fetched value needs it). Fallback is off, so a silent fallback cannot pass; the one refusal
accepted is an order-dependent `assign` (a StatefulRefusal) in a program that draws one, and
only where the run with the fallback on then gives the loop's values and state (`fallback`). An output whose size differs per
iteration (or a RaggedTensor the body returns) is compared with `tf.ragged.stack` of the
loop's: row lengths exactly, values as dense ones.

An outcome is one of: ok; `unsupported` (an op type with no converter: the next issue's
work, not a failure); `invalid` (the loop itself fails: a generator bug, not vectorize's);
`xla_unsupported` (the loop does not compile under XLA either); or a failure: `crash`
(an exception), `refused` (a converter declined with the fallback off), `wrong_shape`,
`wrong_dtype`, `nan_mismatch`, `wrong_value`, and, from the runner's child process, `hang`
and `abort`.
"""

import copy
import dataclasses
import hashlib
import linecache
import random
import re
import time

import numpy as np
import tensorflow as tf

import vectorize
from tests import testing
from tests.fuzz import ir

MODES = ("eager", "closure", "function", "xla", "dynamic", "n0", "grad", "tf1", "data")
OK_CATEGORIES = ("ok", "unsupported", "invalid", "xla_unsupported", "skipped", "fallback")


@dataclasses.dataclass
class Outcome:
  category: str
  message: str = ""

  @property
  def failed(self):
    return self.category not in OK_CATEGORIES

  @property
  def kind(self):
    """What the shrinker preserves and the summary groups by: the category and the
    normalized message (no numbers, names or shapes)."""
    return f"{self.category}: {normalize(self.message)}" if self.message else self.category


def normalize(message):
  text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", message)
  text = re.sub(r"<fuzz seed [^>]*>", "<fuzz>", text)  # a program's name: one kind for all
  text = re.sub(r"'[^']*'", "'?'", text)
  text = re.sub(r"\d+", "#", text)
  text = re.sub(r"\([#, None]*\)", "(...)", text)  # shapes
  text = re.sub(r"\[[#, ]*\]", "[...]", text)
  text = re.sub(r"(\w)_#", r"\1", text)  # node names: Fill_3 is Fill
  return text[:110]


def headline(exc):
  """The informative line of an exception's message (TF's run-time errors start with
  'Graph execution error' and a traceback)."""
  lines = [l for l in str(exc).splitlines() if l.strip()]
  skip = ("Graph execution error", "Detected at node", "  ", "[[", "Stack trace",
          "\t", "File ", "Traceback")
  keep = [l for l in lines if not l.startswith(skip)]
  line = (keep or lines or [""])[0]
  line = re.sub(r"Cannot vectorize op '[^']*' of type (\w+)[^:]*:", r"Cannot vectorize \1:",
                line)
  return f"{type(exc).__name__}: {line.strip()}"


def classify_error(exc):
  text = str(exc)
  if "ConversionError" in [c.__name__ for c in type(exc).__mro__]:  # or a subclass
    m = re.search(r"no converter is registered for op type (\w+)", text)
    if m:
      return Outcome("unsupported", m.group(1))
    m = re.search(r"op type (\w+) has no converter for ragged inputs", text)
    if m:
      return Outcome("unsupported", f"{m.group(1)} (ragged)")
    if "per-iteration paddings with no iteration" in text:
      # Documented: at a static n = 0 nothing says how much such paddings add (seed 4200000).
      return Outcome("unsupported", "Pad by per-iteration paddings at n = 0")
    if "Fallback to a sequential loop is disabled" in text:
      return Outcome("refused", headline(exc))
    if "cannot run in a sequential loop" in text:
      # Documented: a TensorList (TensorArray) whose elements differ per iteration in size
      # has no vectorized form and no loop to fall back to (seeds 4600102, 4600395).
      return Outcome("refused", headline(exc))
    if "a stateful op cannot be vectorized" in text:
      # StatefulRefusal (map_and_batch wraps it): a stateful op whose per-iteration effects
      # depend on the iterations' order (an assign of a per-iteration value).
      return Outcome("refused", headline(exc))
  refusal = vectorize.whole_body_loop.StatefulRefusal
  if isinstance(exc, refusal) or isinstance(exc.__cause__, refusal):
    # A loop or read whose order against the body's updates a vectorized form cannot keep.
    return Outcome("refused", headline(exc))
  return Outcome("crash", headline(exc))


def compare(actual, expected, tol=2e-4):
  """None if equal (shapes, dtypes exactly; NaN positions; values within tol relative to
  the largest expected value), else a failing Outcome."""
  try:
    tf.nest.assert_same_structure(actual, expected)
  except (ValueError, TypeError) as e:
    return Outcome("wrong_shape", f"structure: {str(e).splitlines()[0]}")
  for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
    outcome = (_compare_ragged(a, e, tol) if _ragged(a) or _ragged(e) else
               _compare_arrays(np.asarray(a), np.asarray(e), tol))
    if outcome:
      return outcome
  return None


def _ragged(x):
  return isinstance(x, tf.RaggedTensor)


def _compare_ragged(a, e, tol):
  """pfor's RaggedTensor against the loop's (or its dense stack, where every iteration's
  size happened to be the same; or an empty stack at n = 0)."""
  if not _ragged(a):
    return Outcome("wrong_shape", "a dense value where the loop's sizes differ per iteration")
  if not _ragged(e):
    e = np.asarray(e)
    if e.shape[:1] == (0,):
      return None if a.nrows() == 0 and a.dtype == e.dtype else Outcome(
          "wrong_shape", f"{a.nrows()} rows, {a.dtype} at n = 0; expected none, {e.dtype}")
    if e.ndim <= a.ragged_rank:
      return Outcome("wrong_shape", f"ragged rank {a.ragged_rank} of a rank {e.ndim} value")
    e = tf.RaggedTensor.from_tensor(e, ragged_rank=a.ragged_rank)
  a, e = _fully_ragged(a), _fully_ragged(e)
  lengths_a, lengths_e = a.nested_row_lengths(), e.nested_row_lengths()
  if len(lengths_a) != len(lengths_e) or any(
      not np.array_equal(np.asarray(x, np.int64), np.asarray(y, np.int64))
      for x, y in zip(lengths_a, lengths_e)):
    return Outcome("wrong_shape", "ragged row lengths differ")
  return _compare_arrays(np.asarray(a.flat_values), np.asarray(e.flat_values), tol)


def _fully_ragged(rt):
  """`rt` with every axis past the first ragged: `tf.ragged.stack` makes dense values of
  different shapes fully ragged, pfor keeps the axes the traced graph knows uniform; the
  two are the same values."""
  while rt.flat_values.shape.rank > 1:
    rt = rt.with_flat_values(tf.RaggedTensor.from_tensor(rt.flat_values))
  return rt


def stack(values):
  """The loop's iterations stacked as pfor stacks them: `tf.ragged.stack` where the sizes
  differ (or the body returns RaggedTensors), else `tf.stack`."""
  shapes = {tuple(v.shape) for v in values}
  if any(_ragged(v) for v in values) or len(shapes) > 1 or None in next(iter(shapes)):
    return tf.ragged.stack(values)
  return tf.stack(values)


def _numpy(x):
  return x if _ragged(x) else np.asarray(x)


def _compare_arrays(a, e, tol):
  """The dense comparison of `compare` for one pair of numpy arrays."""
  if a.shape != e.shape:
    return Outcome("wrong_shape", f"shape {a.shape} != expected {e.shape}")
  if a.dtype != e.dtype:
    return Outcome("wrong_dtype", f"dtype {a.dtype} != expected {e.dtype}")
  if a.dtype.kind in "fc":
    if not np.array_equal(np.isnan(a), np.isnan(e)):
      return Outcome("nan_mismatch", "NaN where the loop has none, or the reverse")
    finite = np.isfinite(e)
    scale = max(1.0, float(np.max(np.abs(e[finite]), initial=0.0)))
    if not np.allclose(a, e, rtol=tol, atol=tol * scale, equal_nan=True):
      err = np.nanmax(np.abs(a - e)[finite]) if finite.any() else np.inf
      return Outcome("wrong_value", f"float values differ (max abs error {err:.3g})")
  elif not np.array_equal(a, e):
    return Outcome("wrong_value", f"{a.dtype} values differ")
  return None


class Loaded:
  """A program's module executed: `make_body`, the tensor inputs, a body."""

  def __init__(self, program):
    self.source = ir.render(program)
    self.ns = {}
    # Registered with linecache so tracebacks, op tracebacks and autograph see the source.
    digest = hashlib.sha1(self.source.encode()).hexdigest()[:8]
    filename = f"<fuzz seed {program.seed} {digest}>"
    linecache.cache[filename] = (len(self.source), None, self.source.splitlines(True),
                                 filename)
    exec(compile(self.source, filename, "exec"), self.ns)  # pylint: disable=exec-used
    self.make_body = self.ns["make_body"]
    self.args = list(self.ns["ARGS"])
    self.body = self.make_body(*self.args)
    # Every variable the body reads or writes; each run starts from the initial values,
    # and what a run leaves in them is compared with what the loop leaves.
    self.variables = [self.ns[inp.name] for inp in ir.used_inputs(program) if inp.variable]
    self.initial = [v.numpy() for v in self.variables]
    self.filename = filename
    self.stateful = any(inp.stateful for inp in ir.used_inputs(program))

  def reset(self):
    for v, x in zip(self.variables, self.initial):
      v.assign(x)

  def with_new_inputs(self, seed):
    """A copy whose body is a new closure over new input tensors of the same shapes and
    dtypes: each input's values permuted (so indices and trip counts stay in range)."""
    other = copy.copy(self)
    other.args = permuted(self.args, seed)
    other.body = self.make_body(*other.args)
    return other


  def state(self):
    return [v.numpy() for v in self.variables]


def permuted(tensors, seed):
  """Each tensor with its values in another order (the closure mode's new inputs)."""
  rng = np.random.default_rng(seed)
  out = []
  for t in tensors:
    flat = np.array(t).reshape(-1)   # a writable copy (an empty view is read-only)
    rng.shuffle(flat)
    out.append(tf.constant(flat.reshape(t.shape), t.dtype))
  return out


def _loss(outs):
  """A scalar of the float outputs with fixed, position-dependent weights."""
  total = tf.constant(0.0)
  for o in tf.nest.flatten(outs):
    o = o.flat_values if _ragged(o) else tf.convert_to_tensor(o)
    if o.dtype.is_floating:
      w = tf.cos(tf.cast(tf.reshape(tf.range(tf.size(o)), tf.shape(o)), o.dtype))
      total += tf.cast(tf.reduce_sum(o * w), tf.float32)
  return total


def grad_target(program, loaded):
  """The index in ARGS of the float input the gradient mode differentiates by: the
  program's pinned `grad_input`, else one chosen by the seed; None if there is none."""
  names = [inp.name for inp in ir.used_inputs(program) if not inp.variable]
  floats = [k for k, a in enumerate(loaded.args) if a.dtype == tf.float32]
  if program.grad_input in names and names.index(program.grad_input) in floats:
    return names.index(program.grad_input)
  if not floats:
    return None
  return random.Random(program.seed).choice(floats)


def reference_gradient(loaded, n, k, numpy=True, body_as_function=False):
  """The loop's gradient; `body_as_function`: each iteration a call of the body as one
  `tf.function`, as pfor traces it (whose gradient differentiates every output of the call,
  even one the loss does not use)."""
  loaded.reset()
  args = list(loaded.args)
  with tf.GradientTape() as tape:
    tape.watch(args[k])
    body = loaded.make_body(*args)
    if body_as_function:
      body = tf.function(body, autograph=False)
    outs = [body(tf.constant(i)) for i in range(n)]
    loss = _loss(tf.nest.map_structure(lambda *xs: stack(xs), *outs))
  grad = tf.convert_to_tensor(tape.gradient(loss, args[k], unconnected_gradients="zero"))
  return grad.numpy() if numpy else grad


def pfor_gradient(loaded, n, k, fallback=False):
  @tf.function(autograph=False)
  def grad(*args):
    with tf.GradientTape() as tape:
      tape.watch(args[k])
      out = vectorize.pfor(loaded.make_body(*args), n, fallback_to_while_loop=fallback)
      loss = _loss(out)
    return tf.convert_to_tensor(tape.gradient(loss, args[k], unconnected_gradients="zero"))
  loaded.reset()
  return tf.convert_to_tensor(grad(*loaded.args)).numpy()


def compare_run(got, want):
  """`compare` for (outputs, variable state) pairs: the state after pfor must be the
  state after the loop (both started from the initial values)."""
  outcome = compare(got[0], want[0])
  if outcome is None:
    outcome = compare(got[1], want[1])
    if outcome is not None:
      outcome = Outcome(outcome.category, f"variable state: {outcome.message}")
  return outcome


def _compiled_loop(loaded, n, jit_compile):
  """The loop unrolled in a tf.function, compiled by XLA or not: (outputs as numpy, state
  after), or None if it fails."""
  try:
    loaded.reset()
    rows = tf.function(lambda: [loaded.body(tf.constant(i)) for i in range(n)],
                       jit_compile=jit_compile, autograph=False)()
    return _stacked_rows(rows), loaded.state()
  except Exception:  # pylint: disable=broad-except
    return None


def _xla_loop(loaded, n):
  return _compiled_loop(loaded, n, jit_compile=True)


def xla_loop(program):
  """The plain loop of `program` under XLA, or None (the runner's probe for XLA's own
  process aborts)."""
  return _xla_loop(Loaded(program), program.n)


def _xla_loop_of_run_time_indices(loaded, n):
  """The loop under XLA with each index read from an argument, so that no op of the body
  is constant-folded by TF's own kernel before XLA sees it (a stateless parameterized
  truncated normal: XLA's kernel draws other values than TF's; seeds 1260034, 1270007)."""
  try:
    loaded.reset()
    rows = tf.function(lambda indices: [loaded.body(indices[i]) for i in range(n)],
                       jit_compile=True, autograph=False)(tf.range(n))
    return _stacked_rows(rows), loaded.state()
  except Exception:  # pylint: disable=broad-except
    return None


def _stacked_rows(rows):
  """The iterations' outputs, computed in a graph, stacked eagerly as the eager loop's are:
  by their run-time shapes (stacked in the graph, outputs of shapes unknown there came back
  ragged where every row had one size; seed 3410596)."""
  return tf.nest.map_structure(_numpy, tf.nest.map_structure(lambda *xs: stack(xs), *rows))


def _graph_gradient_fails(program, loaded, n):
  """Whether the loop's gradient fails in a graph too (eagerly, a loop that makes no trip
  returns its inputs themselves, so what a tape connects differs from a graph's), or with the
  body called as one function, as pfor traces it (a function's gradient differentiates all
  its outputs: an op with no gradient on a path the loss does not use raises LookupError
  there, seed 3400827's AdjustHue)."""
  for as_function in (False, True):
    try:
      tf.function(lambda: tf.convert_to_tensor(reference_gradient(
          loaded, n, grad_target(program, loaded), numpy=False,
          body_as_function=as_function)), autograph=False)()
    except Exception:  # pylint: disable=broad-except
      return True
  return False


def _xla_refusal(loaded, n, error, expected):
  """An `xla_unsupported` Outcome where XLA cannot run the loop either, else None.

  A value of per-iteration size (tf.range(x[i])) is a documented refusal under XLA. Else
  either the XLA-compiled loop fails too (a second-order slice gradient), or vectorize
  refused with a clear ConversionError and the XLA-compiled loop gives another answer than
  the eager loop: XLA silently drops the writes into a dynamic-size TensorArray that do not
  fit its compile-time size, which vectorize refuses to imitate.
  """
  if any(documented in str(error) for documented in (
      "XLA needs static shapes", "output's size depends on the data",
      "whose size differs per iteration has no static capacity under XLA",
      "XLA would pad it")):
    # Documented refusals: a value of per-iteration size has no static shape to pad to (a
    # TensorArray of size f(i) has no static capacity either, seed 3000012); and
    # XLA computes tf.unique wrongly by itself for some inputs (an empty result, walker.py).
    return Outcome("xla_unsupported", headline(error))
  kernel = re.search(r"No registered '(\w+)' OpKernel for XLA", str(error))
  if kernel and kernel.group(1) in _body_op_types(loaded):
    # An op of the body with no XLA kernel: the unrolled loop compiles only where Grappler
    # folds it away (a stateless Poisson sample of constant seeds; seed 1130079).
    return Outcome("xla_unsupported", headline(error))
  xla_want = _xla_loop(loaded, n)
  if xla_want is None:
    return Outcome("xla_unsupported", headline(error))
  if type(error).__name__ == "ConversionError" and compare_run(xla_want, expected) is not None:
    return Outcome("xla_unsupported",
                   f"{headline(error)}; the loop under XLA differs from the eager loop")
  return None


def loop_value(loaded, n):
  """The eager loop's outputs stacked (as numpy, or RaggedTensors), for n > 0, and the
  variables' values after it."""
  loaded.reset()
  outs = [loaded.body(tf.constant(i)) for i in range(n)]
  return tf.nest.map_structure(lambda *xs: _numpy(stack(xs)), *outs), loaded.state()


def _empty_stack(x):
  """The loop's value at n = 0 from iteration 0's (an output of per-iteration size may come
  back dense or ragged, with no rows either way)."""
  shape = x.flat_values.shape[1:] if _ragged(x) else x.shape
  return np.zeros([0] + shape.as_list(), x.dtype.as_numpy_dtype)


def _empty_where_unknown(want, got, loaded):
  """`want` (n = 0's outputs at iteration 0's shapes), taking `got`'s size for a dim that
  the traced body leaves unknown where `got` is empty: with no iteration there is no size to
  read (pfor's whole-body loop gives 0, a vectorized value its own size)."""
  spec = tf.nest.flatten(tf.function(loaded.body, autograph=False).get_concrete_function(
      tf.TensorSpec([], tf.int32)).structured_outputs)
  flat_want, flat_got = tf.nest.flatten(want), tf.nest.flatten(got)
  if len(spec) != len(flat_want) or len(flat_got) != len(flat_want):
    return want
  out = []
  for w, g, t in zip(flat_want, flat_got, spec):
    if (not _ragged(w) and not _ragged(g) and isinstance(t, tf.Tensor) and
        t.shape.rank is not None and np.ndim(g) == t.shape.rank + 1 and np.size(g) == 0 and
        all(a == b or d is None for a, b, d in zip(np.shape(w)[1:], np.shape(g)[1:],
                                                    t.shape.as_list()))):
      w = np.zeros(np.shape(g), w.dtype)
    out.append(w)
  return tf.nest.pack_sequence_as(want, out)


def pfor_value(loaded, n, mode, fallback=False):
  """pfor's outputs (numpy, or RaggedTensors) eagerly, in a tf.function, under XLA or with
  n known only at run time, and the variables' values after it."""
  pfor = lambda m: vectorize.pfor(loaded.body, m, fallback_to_while_loop=fallback)
  loaded.reset()
  if mode == "eager":
    out = pfor(n)
  elif mode == "dynamic":
    out = tf.function(pfor, input_signature=[tf.TensorSpec([], tf.int32)],
                      autograph=False)(tf.constant(n))
  else:
    out = tf.function(lambda: pfor(n), jit_compile=True if mode == "xla" else None,
                      autograph=False)()
  return tf.nest.map_structure(_numpy, out), loaded.state()


def _body_op_types(loaded):
  graph = tf.function(loaded.body, autograph=False).get_concrete_function(
      tf.TensorSpec([], tf.int32)).graph
  return set(testing.all_op_types(graph))


# -- TF1 mode: a tf.Graph and a Session, no tf.function -----------------------------------

def _session_value(x):
  """A value fetched by Session.run as check's comparable form (RaggedTensorValue:
  a RaggedTensor)."""
  if isinstance(x, tf.compat.v1.ragged.RaggedTensorValue):
    return tf.RaggedTensor.from_nested_row_splits(
        x.flat_values, [np.asarray(s) for s in x.nested_row_splits])
  return np.asarray(x)


def tf1_values(loaded, n, fallback=False):
  """The program built again in a fresh tf.Graph (its module executed there: constants and
  variables of the graph) and run in a tf.compat.v1.Session: the loop (each iteration's
  outputs fetched), pfor with a static n and pfor with n fed through a placeholder.
  Returns (loop, pfor_static, pfor_fed) or raises; the loop's failure raises _LoopFailed.
  Variable state is not compared here: in a TF1 graph an update runs only where a fetched
  value depends on it, in the loop as in pfor."""
  graph = tf.Graph()
  with graph.as_default():
    ns = {}
    exec(compile(loaded.source, loaded.filename, "exec"), ns)  # pylint: disable=exec-used
    body = ns["make_body"](*ns["ARGS"])
    variables = [v for v in ns.values() if isinstance(v, tf.Variable)]
    init = [v.initializer for v in variables]
    try:
      # A tape's gradient of a gather is an IndexedSlices in a graph; pfor's is dense.
      per_iteration = [tf.nest.map_structure(_dense, body(tf.constant(i))) for i in range(n)]
    except Exception as e:  # pylint: disable=broad-except
      raise _LoopFailed(e) from e
    n_fed = tf.compat.v1.placeholder(tf.int32, [])
    pfor_error = None
    try:
      static = vectorize.pfor(body, n, fallback_to_while_loop=fallback)
      fed = vectorize.pfor(body, n_fed, fallback_to_while_loop=fallback)
    except Exception as e:  # pylint: disable=broad-except
      pfor_error = e
    with tf.compat.v1.Session(graph=graph) as sess:
      try:
        sess.run(init)
        loop = [sess.run(o) for o in per_iteration]
      except Exception as e:  # pylint: disable=broad-except
        raise _LoopFailed(e) from e
      if pfor_error is not None:
        raise pfor_error
      sess.run(init)
      got_static = sess.run(static)
      sess.run(init)
      got_fed = sess.run(fed, {n_fed: n})
  # Out of the graph: RaggedTensors of the fetched values are eager ones.
  loop, got_static, got_fed = tf.nest.map_structure(_session_value,
                                                    (loop, got_static, got_fed))
  loop = tf.nest.map_structure(
      lambda *xs: _numpy(stack([x if _ragged(x) else tf.constant(x) for x in xs])), *loop)
  return loop, got_static, got_fed


def _dense(x):
  return tf.convert_to_tensor(x) if isinstance(x, tf.IndexedSlices) else x


class _LoopFailed(Exception):
  pass


# -- data mode: vectorize.data.map_and_batch against map().batch() ------------------------

def _dataset_run(loaded, n, batch, drop, ours, fallback=False):
  """(element_spec, [batches as numpy], state) of the dataset of indices 0..n-1 mapped by
  the body and batched, or (None, error, state)."""
  loaded.reset()
  ds = tf.data.Dataset.range(n).map(lambda k: tf.cast(k, tf.int32))
  try:
    if ours:
      ds = ds.apply(vectorize.data.map_and_batch(loaded.body, batch, drop_remainder=drop,
                                                 fallback_to_while_loop=fallback))
    else:
      ds = ds.map(loaded.body).batch(batch, drop_remainder=drop)
    batches = [tf.nest.map_structure(_numpy, b) for b in ds]
  except Exception as e:  # pylint: disable=broad-except
    return None, e, loaded.state()
  return ds.element_spec, batches, loaded.state()


def _spec_outcome(got, want):
  """None where two element_specs agree: structure, type (dense / ragged), dtype, rank and
  ragged rank exactly; static dims compatible."""
  try:
    tf.nest.assert_same_structure(got, want)
  except (ValueError, TypeError) as e:
    return Outcome("wrong_shape", f"element_spec structure: {str(e).splitlines()[0]}")
  for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
    if type(g) is not type(w):
      return Outcome("wrong_shape", f"element_spec {type(g).__name__} where map().batch() "
                     f"gives {type(w).__name__}")
    if g.dtype != w.dtype:
      return Outcome("wrong_dtype", f"element_spec dtype {g.dtype.name} != {w.dtype.name}")
    if g.shape.rank != w.shape.rank or not g.shape.is_compatible_with(w.shape):
      return Outcome("wrong_shape", f"element_spec shape {g.shape} != {w.shape}")
    if isinstance(g, tf.RaggedTensorSpec) and (
        g.ragged_rank != w.ragged_rank or g.row_splits_dtype != w.row_splits_dtype):
      return Outcome("wrong_shape", f"element_spec ragged rank {g.ragged_rank} "
                     f"({g.row_splits_dtype.name}) != {w.ragged_rank} "
                     f"({w.row_splits_dtype.name})")
  return None


def data_params(program):
  """The batch size of the data mode, from the seed."""
  return random.Random(program.seed * 7 + 1).choice([1, 2, 3])


def data_outcome(program, loaded, fallback=False, loop=None):
  """map_and_batch(body, b) against map(body).batch(b), drop_remainder both ways: element
  specs, every batch's values, the variables' values after. A batch that differs from
  map().batch()'s but equals the eager loop's rows (`loop`, its stacked value) is tf.data's
  function disagreeing with eager TensorFlow, not ours (seed 4300195: Grappler moves a relu
  past a max, and the max of an empty relu is 0 there, -inf eagerly)."""
  batch = data_params(program)
  for drop in (False, True):
    spec_w, want, state_w = _dataset_run(loaded, program.n, batch, drop, ours=False)
    spec_g, got, state_g = _dataset_run(loaded, program.n, batch, drop, ours=True,
                                        fallback=fallback)
    if spec_w is None:
      if spec_g is None:
        return Outcome("invalid", f"{headline(want)}; map().batch() fails too")
      return Outcome("wrong_shape", f"map_and_batch gives batches where map().batch() "
                     f"fails: {headline(want)}")
    if spec_g is None:
      return classify_error(got)
    outcome = _spec_outcome(spec_g, spec_w)
    if outcome is None and len(got) != len(want):
      outcome = Outcome("wrong_shape", f"{len(got)} batches, expected {len(want)}")
    for k, (g, w) in enumerate(zip(got, want)):
      if outcome is None and compare(g, w) is not None:
        rows = None if loop is None else tf.nest.map_structure(
            lambda e, k=k: e[k * batch:(k + 1) * batch], loop)
        outcome = compare(g, w) if rows is None else compare(g, rows) and compare(g, w)
    outcome = outcome or compare_run((None, state_g), (None, state_w))
    if outcome:
      return Outcome(outcome.category, f"drop_remainder={drop}: {outcome.message}")
  return None


# Statement kinds vectorize may refuse with the fallback off (pattern_pool.py): an assign of a
# per-iteration value; reads of a variable whose updates are no affine recurrence of it alone.
_ORDER_DEPENDENT = {"state_assign", "state_recurrence"}


def run_mode(program, loaded, mode, expected):
  """One mode's Outcome; `expected` is the loop's (value, state) (n > 0) computed once."""
  outcome = _run_mode(program, loaded, mode, expected)
  if outcome.category == "refused" and _ORDER_DEPENDENT & set(program.kinds()):
    # An `assign` of a per-iteration value is order-dependent: vectorize documents a refusal
    # with the fallback off. Accepted only if the fallback then gives the loop's answer
    # (values and variables); a wrong value with the fallback on is a failure.
    again = _run_mode(program, loaded, mode, expected, fallback=True)
    if again.category == "ok":
      return Outcome("fallback", outcome.message)
    if again.failed:
      return Outcome(again.category, f"with the fallback on: {again.message}")
    return again
  return outcome


def _traces_for_a_symbolic_index(loaded):
  try:
    tf.function(loaded.body, autograph=False).get_concrete_function(
        tf.TensorSpec([], tf.int32))
    return True
  except Exception:  # pylint: disable=broad-except
    return False


def _without_grappler(fn):
  """fn() with TF's graph optimizer off, or None if it fails."""
  options = tf.config.optimizer.get_experimental_options()
  tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
  try:
    return fn()
  except Exception:  # pylint: disable=broad-except
    return None
  finally:
    tf.config.optimizer.set_experimental_options(
        dict(options, disable_meta_optimizer=options.get("disable_meta_optimizer", False)))


def _reset_then(loaded, fn):
  loaded.reset()
  out = fn()
  loaded.reset()
  return out


def _run_mode(program, loaded, mode, expected, fallback=False):
  n = program.n
  try:
    if mode == "grad":
      k = grad_target(program, loaded)
      if k is None:
        return Outcome("skipped")
      try:
        want = reference_gradient(loaded, n, k), loaded.state()
      except Exception as e:  # pylint: disable=broad-except
        return Outcome("invalid", headline(e))
      got = pfor_gradient(loaded, n, k, fallback), loaded.state()
    elif mode == "n0":
      try:
        # Iteration 0 in a graph, as pfor traces it: eagerly, a TensorArray's gather of no
        # elements is float32 whatever its dtype (seed 3410596).
        # Grappler off: TF 2.21's rewrite of a cond's `a + tf.reduce_sum(a)` gave a traced
        # int32 scalar output as float32 [0] (seed 3600030; pfor's is the loop's).
        first = lambda: _reset_then(
            loaded, lambda: tf.function(loaded.body, autograph=False)(tf.constant(0)))
        traced = _without_grappler(first)
        want = (tf.nest.map_structure(_empty_stack, first() if traced is None else traced),
                loaded.initial)
      except Exception as e:  # pylint: disable=broad-except
        return Outcome("invalid", headline(e))
      got = pfor_value(loaded, 0, "function", fallback)
      want = (_empty_where_unknown(want[0], got[0], loaded), want[1])
    elif mode == "data":
      return data_outcome(program, loaded, fallback,
                          None if expected is None else expected[0]) or Outcome("ok")
    elif mode == "closure":
      # The body again as a new closure over new inputs, eagerly, after the eager mode's
      # call: the program cache runs the conversion kept for the program on these tensors.
      loaded = loaded.with_new_inputs(program.seed)   # the re-checks below take it too
      try:
        want = loop_value(loaded, n)
      except Exception as e:  # pylint: disable=broad-except
        return Outcome("invalid", f"{headline(e)}; the loop fails on the permuted inputs")
      got = pfor_value(loaded, n, "eager", fallback)
    elif mode == "tf1":
      if "state_recurrence" in program.kinds():
        return Outcome("invalid", "the body reads a variable it writes: a TF1 graph orders "
                       "those only by data, so the loop's reads have no one answer")
      try:
        loop, static, fed = tf1_values(loaded, n, fallback)
      except _LoopFailed as e:
        return Outcome("invalid", f"{headline(e.__cause__)}; the loop fails in a TF1 graph")
      outcome = compare(static, loop) or compare(fed, loop)
      return outcome or Outcome("ok")
    else:
      want = expected
      got = pfor_value(loaded, n, mode, fallback)
  except Exception as e:  # pylint: disable=broad-except
    outcome = classify_error(e)
    if outcome.category == "crash" and not _traces_for_a_symbolic_index(loaded):
      # The loop in a graph calls the body with Python ints; pfor (as TF's) traces it once
      # for a symbolic index, where a shape computed from it is unknown (seed 4400059:
      # tf.unstack of a pad by per-iteration paddings).
      if mode not in ("grad", "tf1") and _compiled_loop(loaded, n, jit_compile=False) is None:
        return Outcome("invalid", f"{headline(e)}; the loop fails in a graph too")
      return Outcome("invalid", f"{headline(e)}; the body cannot be traced for a symbolic "
                     "index")
    if mode == "xla" and outcome.category in ("crash", "refused"):
      return _xla_refusal(loaded, n, e, expected) or outcome
    if (mode == "grad" and outcome.category == "crash" and
        _graph_gradient_fails(program, loaded, n)):
      return Outcome("invalid", f"{headline(e)}; the loop's gradient fails in a graph too")
    if (mode not in ("grad", "tf1") and outcome.category == "crash" and
        _compiled_loop(loaded, n, jit_compile=False) is None):
      # pfor traces the body in a graph: a body that runs eagerly only is not vectorize's
      # failure (a tape's gradient is an IndexedSlices in a graph, a tensor eagerly).
      return Outcome("invalid", f"{headline(e)}; the loop fails in a graph too")
    return outcome
  outcome = compare_run(got, want)
  if outcome and mode == "grad" and outcome.category in ("wrong_value", "nan_mismatch"):
    # Graph-mode TensorArray gradients differ from eager ones (a gather with repeated
    # indices keeps one cotangent): pfor runs in a graph, so the graph loop decides.
    try:
      graph_want = tf.function(lambda: tf.convert_to_tensor(reference_gradient(
          loaded, n, grad_target(program, loaded), numpy=False)), autograph=False)()
      if compare_run(got, (graph_want.numpy(), loaded.state())) is None:
        outcome = None
    except Exception:  # pylint: disable=broad-except
      pass
  if (outcome and mode in ("eager", "closure", "function", "dynamic") and
      outcome.category in ("wrong_value", "nan_mismatch", "wrong_shape", "wrong_dtype")):
    # pfor runs in a graph: where the loop traced in a graph gives pfor's answer, the eager
    # loop differs by eager semantics (a loop that makes no trip returns its inputs
    # themselves, which a tape watching its output then connects), or by Grappler's own
    # bugs (TF 2.21: `tf.cond(c, lambda: a + tf.reduce_sum(a), lambda: a)` of a constant
    # scalar `a` and a captured constant `c` gives a float32 [] in any tf.function; seed
    # 1280060; `tf.argmax(tf.nn.relu(x))` becomes `tf.argmax(x)`, wrong where relu makes
    # ties: seed 3640223's closure mode).
    graph_want = _compiled_loop(loaded, n, jit_compile=False)
    if graph_want is not None and compare_run(got, graph_want) is None:
      outcome = None
  if outcome and mode in ("eager", "closure", "function", "dynamic", "grad") and (
      outcome.category in ("wrong_value", "nan_mismatch", "wrong_shape", "wrong_dtype")):
    # TF 2.21's Grappler drops a side effect of some tf.functions the body calls (an update
    # of a tf.cond whose output is unused, its value a sum of a cast: seed 3410663), where
    # pfor's graph keeps it: the loop run without Grappler decides.
    plain = _without_grappler(lambda: (
        reference_gradient(loaded, n, grad_target(program, loaded)), loaded.state())
                              if mode == "grad" else loop_value(loaded, n))
    if plain is not None and compare_run(got, plain) is None:
      outcome = None
  if outcome and mode == "xla" and outcome.category in ("wrong_value", "nan_mismatch",
                                                       "wrong_shape"):
    # XLA's kernels may differ from TF's (stateless truncated normal does), and so may its
    # shapes (a dynamic_size TensorArray of a loop with maximum_iterations stacks that many
    # rows; seed 3200110): compare with the loop under XLA before calling it a failure.
    xla_want = _xla_loop(loaded, n)
    if xla_want is None:
      # The loop does not compile (an op with no XLA kernel, pruned from pfor's graph as
      # dead code): no XLA reference to decide by.
      outcome = Outcome("xla_unsupported", f"{outcome.message}; the loop has no XLA form")
    elif compare_run(got, xla_want) is None:
      outcome = None
    elif outcome.category == "wrong_shape" and compare_run(xla_want, expected) is not None:
      # XLA runs the loop itself otherwise than eagerly (it drops the writes into a
      # dynamic_size TensorArray beyond its compile-time size, differently per iteration):
      # no XLA answer to hold pfor to.
      outcome = Outcome("xla_unsupported",
                        f"{outcome.message}; the loop under XLA differs from the eager loop")
    else:
      unfolded = _xla_loop_of_run_time_indices(loaded, n)
      if unfolded is not None and compare_run(got, unfolded) is None:
        outcome = None
  return outcome or Outcome("ok")


@dataclasses.dataclass
class Result:
  seed: int
  outcomes: dict
  seconds: float

  def failures(self):
    return {m: o for m, o in self.outcomes.items() if o.failed}

  def first_failure(self):
    fails = self.failures()
    return next(iter(fails.items())) if fails else None


def iter_check(program, modes=MODES):
  """Yields (mode, Outcome) for each mode as it finishes."""
  try:
    loaded = Loaded(program)
    expected = loop_value(loaded, program.n)
  except Exception as e:  # pylint: disable=broad-except
    for m in modes:
      yield m, Outcome("invalid", headline(e))
    return
  for mode in modes:
    yield mode, run_mode(program, loaded, mode, expected)


def check(program, modes=MODES):
  """Runs the program in `modes` in this process; a Result with one Outcome per mode."""
  start = time.time()
  outcomes = dict(iter_check(program, modes))
  return Result(program.seed, outcomes, time.time() - start)


def repro(program, mode):
  """Standalone Python source reproducing `mode` of the program against the loop."""
  src = ir.render(program)
  common = [
      "",
      "def stack(xs):",
      "  # tf.ragged.stack where the iterations' sizes differ, as pfor returns them",
      "  if isinstance(xs[0], tf.RaggedTensor) or len({tuple(x.shape) for x in xs}) > 1:",
      "    return tf.ragged.stack(xs)",
      "  return tf.stack(xs)",
      "",
      "",
      "body = make_body(*ARGS)",
      "expected = [body(tf.constant(i)) for i in range(N)]",
      "expected = tf.nest.map_structure(lambda *xs: stack(xs), *expected)",
  ]
  if mode == "grad":
    k = grad_target(program, Loaded(program))
    tail = [
        "",
        f"K = {k}  # differentiate by ARGS[K]",
        "",
        "",
        "def loss(outs):",
        "  total = tf.constant(0.0)",
        "  for o in tf.nest.flatten(outs):",
        "    o = o.flat_values if isinstance(o, tf.RaggedTensor) else o",
        "    if o.dtype.is_floating:",
        "      w = tf.cos(tf.cast(tf.reshape(tf.range(tf.size(o)), tf.shape(o)), o.dtype))",
        "      total += tf.cast(tf.reduce_sum(o * w), tf.float32)",
        "  return total",
        "",
        "",
        "args = list(ARGS)",
        "with tf.GradientTape() as tape:",
        "  tape.watch(args[K])",
        "  body = make_body(*args)",
        "  outs = tf.nest.map_structure(lambda *xs: stack(xs),",
        "                               *[body(tf.constant(i)) for i in range(N)])",
        "  expected = tf.convert_to_tensor(",
        "      tape.gradient(loss(outs), args[K], unconnected_gradients='zero'))",
        "",
        "",
        "@tf.function(autograph=False)",
        "def grad(*args):",
        "  with tf.GradientTape() as tape:",
        "    tape.watch(args[K])",
        "    l = loss(vectorize.pfor(make_body(*args), N, fallback_to_while_loop=False))",
        "  return tf.convert_to_tensor(",
        "      tape.gradient(l, args[K], unconnected_gradients='zero'))",
        "",
        "",
        "np.testing.assert_allclose(grad(*ARGS), expected, rtol=2e-4, atol=2e-4)",
    ]
    return src + "\n".join(common[:7] + tail) + "\n"
  compare_lines = [
      "def check(out, expected):",
      "  for o, e in zip(tf.nest.flatten(out), tf.nest.flatten(expected)):",
      "    if isinstance(o, tf.RaggedTensor) or isinstance(e, tf.RaggedTensor):",
      "      e = e if isinstance(e, tf.RaggedTensor) else tf.RaggedTensor.from_tensor(e)",
      "      np.testing.assert_array_equal(o.row_lengths(), e.row_lengths())",
      "      o, e = o.flat_values, e.flat_values",
      "    o, e = np.asarray(o), np.asarray(e)",
      "    assert o.shape == e.shape and o.dtype == e.dtype, (o.shape, e.shape, o.dtype)",
      "    if o.dtype.kind in 'fc':",
      "      np.testing.assert_allclose(o, e, rtol=2e-4, atol=2e-4)",
      "    else:",
      "      np.testing.assert_array_equal(o, e)",
      "",
      "",
  ]
  if mode == "tf1":
    tail = [
        "",
        f"SOURCE = {src!r}",
        "",
        "graph = tf.Graph()",
        "with graph.as_default():",
        "  ns = {}",
        "  exec(SOURCE, ns)  # the module again, its constants and variables in the graph",
        "  body = ns['make_body'](*ns['ARGS'])",
        "  loop = [body(tf.constant(i)) for i in range(N)]",
        "  out = vectorize.pfor(body, N, fallback_to_while_loop=False)",
        "  init = [v.initializer for v in ns.values() if isinstance(v, tf.Variable)]",
        "  with tf.compat.v1.Session() as sess:",
        "    sess.run(init)",
        "    loop = [sess.run(o) for o in loop]",
        "    sess.run(init)",
        "    out = sess.run(out)",
        "expected = tf.nest.map_structure(lambda *xs: stack([tf.constant(x) for x in xs]), *loop)",
        "check(out, expected)",
    ]
    return src + "\n".join(common[:7] + compare_lines + tail) + "\n"
  variables = [inp.name for inp in ir.used_inputs(program) if inp.variable]
  state = [
      f"VARS = [{', '.join(variables)}]",
      "INIT = [v.numpy() for v in VARS]",
      "",
      "",
      "def reset():",
      "  for v, x in zip(VARS, INIT):",
      "    v.assign(x)",
      "",
      "",
  ] if variables else []
  if mode == "data":
    tail = state + [
        f"B = {data_params(program)}",
        "body = make_body(*ARGS)",
        "for drop in (False, True):",
        "  ds = tf.data.Dataset.range(N).map(lambda k: tf.cast(k, tf.int32))",
        "  want = ds.map(body).batch(B, drop_remainder=drop)",
        "  got = ds.apply(vectorize.data.map_and_batch(body, B, drop_remainder=drop,",
        "                                              fallback_to_while_loop=False))",
        "  assert got.element_spec == want.element_spec, (got.element_spec, want.element_spec)",
    ] + (["  reset()"] if variables else []) + [
        "  want = list(want)",
    ] + (["  want_state = [v.numpy() for v in VARS]", "  reset()"] if variables else []) + [
        "  got = list(got)",
        "  assert len(got) == len(want)",
        "  for g, w in zip(got, want):",
        "    check(g, w)",
    ] + (["  check([v.numpy() for v in VARS], want_state)"] if variables else [])
    return src + "\n".join(common[:7] + compare_lines + tail) + "\n"
  call = "vectorize.pfor(body, N, fallback_to_while_loop=False)"
  if mode == "closure":
    # The first closure converts; a new one over permuted inputs runs that conversion.
    common = common[:9] + [
        f"out = {call}",
        "",
        "",
        "def permuted(tensors, seed):",
        "  rng = np.random.default_rng(seed)",
        "  out = []",
        "  for t in tensors:",
        "    flat = np.array(t).reshape(-1)",
        "    rng.shuffle(flat)",
        "    out.append(tf.constant(flat.reshape(t.shape), t.dtype))",
        "  return out",
        "",
        "",
        f"body = make_body(*permuted(ARGS, {program.seed}))",
    ] + common[9:]
    mode = "eager"
  run = {
      "eager": f"out = {call}",
      "function": f"out = tf.function(lambda: {call}, autograph=False)()",
      "xla": f"out = tf.function(lambda: {call}, jit_compile=True, autograph=False)()",
      "dynamic": ("out = tf.function(lambda m: vectorize.pfor(body, m, "
                  "fallback_to_while_loop=False),\n                  input_signature="
                  "[tf.TensorSpec([], tf.int32)], autograph=False)(tf.constant(N))"),
      "n0": ("out = tf.function(lambda: vectorize.pfor(body, 0, fallback_to_while_loop="
             "False), autograph=False)()\nexpected = tf.nest.map_structure("
             "lambda x: np.zeros((0,) + np.shape(x[0]), np.asarray(x).dtype), expected)"),
  }[mode]
  before = (["expected_state = INIT if N == 0 else [v.numpy() for v in VARS]", "reset()"]
            if variables else [])
  if variables and mode == "n0":
    before[0] = "expected_state = INIT"
  after = (["check([v.numpy() for v in VARS], expected_state)"] if variables else [])
  return src + "\n".join(common[:7] + compare_lines + state + common[8:] + before +
                         [run, "check(out, expected)"] + after) + "\n"
