"""`autobatch(fn)`: a per-example recursive Python function -> a function of a batch.

The user face of the program-counter mode: checks the inputs, compiles `fn` once per
per-example input signature (`pipeline.py`; a new batch size reuses it), runs the VM in a
`tf.function` of its own when called eagerly (or with `jit_compile=True` from a graph not
compiled by XLA) or in the caller's graph otherwise, and turns a member's stack overflow
into an error naming the function, the bound and how to raise it, checked outside whatever
XLA compiled. Inside a caller's XLA function nothing can raise (XLA compiles assertions to
nothing): the overflowed members' results are NaN / the dtype's minimum / False, a warning
says so when the call is traced, and `with_failures` hands the failure codes out of the
caller's function to `check` outside it.
"""

import inspect
import warnings

import tensorflow as tf

from vectorize import dims
from vectorize.errors import ConversionError
from vectorize.pc import engine_bridge, ir, pipeline, vm


def autobatch(fn, max_stack_depth=None, max_steps=None, jit_compile=False, schedule="lowest"):
  """Batches `fn`, written for ONE example, over a leading batch axis of its inputs.

  Args:
    fn: a plain Python function of per-example tensors (scalars, small tensors), with
      recursion, `if` / `while` / `for ... in range(...)` on tensors and several returns;
      the functions it calls by name are compiled with it.
    max_stack_depth: the deepest recursion any member may reach (stack entries per
      variable). None: stacks grow as needed (not under XLA, which needs a bound).
    max_steps: a bound on the VM's steps (blocks run for some members). A member still
      running after it is an error. Gradients under XLA need it (XLA differentiates only
      loops of bounded length).
    jit_compile: compile the eager call's graph with XLA (then `max_stack_depth` is needed).
    schedule: which block each step runs. "lowest": the first, in an order where members
      resume before they descend and return last, so members that start together move
      together (recursions such as fib, a tree search, one sampler transition). "fullest":
      the block where the most members wait, for members that drift apart (a sampler run
      for many transitions per call, each chain at its own transition): NUTS chains of 10
      transitions take about half the steps, a linear recursion about twice as many.

  Returns:
    `batched(*inputs)`: one tensor per parameter of `fn`, batch on axis 0; returns `fn`'s
    results (a tensor, or a tuple) batched the same way. `batched.program` is the compiled
    basic-block program as text. `batched.with_failures(*inputs)` returns `(results,
    failures)`, one failure code per member (0: none), and `batched.check(failures)` raises
    the error they stand for: inside your own `jit_compile=True` function, where nothing can
    raise, return the codes and check them outside it.

  Raises:
    InvalidArgumentError: a member's recursion went past `max_stack_depth`, or it was still
      running after `max_steps` (eagerly, in a graph not compiled by XLA, and after an
      eager `jit_compile=True` call). Inside a caller's XLA function the failed members'
      results are NaN (floats), the dtype's minimum (integers) or False instead, with a
      warning when the call is traced.

  Example:
    >>> def fib(n):
    ...   if n < 2:
    ...     return n
    ...   return fib(n - 1) + fib(n - 2)
    >>> vectorize.autobatch(fib)(tf.range(10))   # [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]
  """
  return Batched(fn, max_stack_depth, max_steps, jit_compile, schedule)


class Batched:
  """The callable `autobatch` returns; caches the compiled program per input signature."""

  def __init__(self, fn, max_stack_depth, max_steps, jit_compile, schedule="lowest"):
    if schedule not in vm.SCHEDULES:
      raise ValueError(f"autobatch: schedule must be one of {', '.join(vm.SCHEDULES)}, got "
                       f"{schedule!r}")
    self.schedule = schedule
    for name, value in (("max_stack_depth", max_stack_depth), ("max_steps", max_steps)):
      if value is not None and (not isinstance(value, int) or value < 1):
        raise ValueError(f"autobatch: {name} must be a positive int or None, got {value!r}")
    if jit_compile and max_stack_depth is None:
      raise ValueError(f"autobatch({fn.__name__}, jit_compile=True): XLA needs static "
                       "stacks; pass max_stack_depth (the deepest recursion a member reaches)")
    self.fn = fn
    self.max_stack_depth = max_stack_depth
    self.max_steps = max_steps
    self.jit_compile = jit_compile
    self._programs = {}
    self._eager = {}
    self._last = None
    self.conversions = 0          # programs compiled (one per per-example input signature)

  @property
  def program(self):
    """The most recently used compiled program, as text."""
    if self._last is None:
      return f"autobatch({self.fn.__name__}): not compiled yet (call it once)"
    return str(self._last)

  @tf.autograph.experimental.do_not_convert    # graph-building code, not the user's
  def __call__(self, *inputs):
    results, failures = self.with_failures(*inputs)
    if not engine_bridge.compiled_by_xla():
      results = self.check(failures, results)
    return results[0] if len(results) == 1 else tuple(results)

  @tf.autograph.experimental.do_not_convert
  def with_failures(self, *inputs):
    """`(results, failures)`: `fn`'s results as a tuple, whatever their count, and one
    failure code per member (int32, 0: none) for `check`, which raises what they stand
    for. Nothing is checked here: inside your own `jit_compile=True` function, where
    nothing can raise, return the codes from it and `check` them outside."""
    inputs = [tf.convert_to_tensor(x) for x in inputs]
    types = self._check(inputs)
    program = self._program(types)
    if tf.executing_eagerly() or (self.jit_compile and not engine_bridge.compiled_by_xla()):
      return self._compiled(program, types)(*inputs)   # checked outside what XLA compiled
    if engine_bridge.compiled_by_xla() and (self.max_stack_depth or self.max_steps):
      self._warn_unchecked()
    with dims.ints():   # the program is ours; the user's TF1 graph may index Dimensions
      return vm.run(program, inputs, self.max_stack_depth, self.max_steps, self.schedule)

  def check(self, failures, results=()):
    """Raises the error `failures` (from `with_failures`) stand for, naming the first
    failed member's function, the bound and how to raise it: at once when eager, as an
    assertion `results` wait for in a graph. Returns `results`. Under XLA, which compiles
    assertions to nothing, call it outside your compiled function."""
    program = self._last
    if tf.executing_eagerly():
      failed = tf.where(failures != 0)[:, 0].numpy().tolist()
      if failed:
        code = int(failures[failed[0]])
        raise tf.errors.InvalidArgumentError(
            None, None, self._failure(program, code) + f" (batch members {failed[:10]})")
      return results
    return self._checked(program, results, failures)

  def _compiled(self, program, types):
    """The VM for `types` in a `tf.function` of its own (XLA-compiled with `jit_compile`)."""
    graph_fn = self._eager.get(types)
    if graph_fn is None:
      signature = [tf.TensorSpec([None] + list(t.shape), t.dtype) for t in types]
      graph_fn = tf.function(lambda *xs: vm.run(program, xs, self.max_stack_depth,
                                                self.max_steps, self.schedule),
                             input_signature=signature, jit_compile=self.jit_compile,
                             autograph=False)
      self._eager[types] = graph_fn
    return graph_fn

  def _warn_unchecked(self):
    """Says, when a caller's XLA function traces the call, that failures cannot raise."""
    steps = "" if self.max_steps is None else (
        f" (or that is still running when the batch's loop reaches max_steps="
        f"{self.max_steps} steps)")
    warnings.warn(
        f"autobatch({self.fn.__name__}) inside a jit_compile=True function cannot raise: "
        "XLA compiles assertions to nothing. A member whose recursion exceeds "
        f"max_stack_depth={self.max_stack_depth}{steps} gives NaN (floats), the dtype's "
        "minimum (integers) or False. "
        "To raise instead, call batched.with_failures(...) inside, return its failure codes, "
        "and call batched.check(failures) outside the compiled function; or raise "
        "max_stack_depth", RuntimeWarning, stacklevel=3)

  def _failure(self, program, code):
    name = self.fn.__name__
    if code == vm.STEPS_EXHAUSTED:
      return (f"autobatch({name}): a member was still running after max_steps="
              f"{self.max_steps} steps; pass a larger max_steps to autobatch({name}, "
              "max_steps=...)")
    larger = 2 * (self.max_stack_depth or 1)    # (None: stacks grow and never overflow)
    return (f"autobatch({name}): the recursion of {program.functions[code - 1].name} "
            f"exceeded max_stack_depth={self.max_stack_depth}; pass a larger one, e.g. "
            f"autobatch({name}, max_stack_depth={larger})")

  def _checked(self, program, results, overflow):
    """`results` behind an assertion that no member failed, naming the first failure."""
    codes = [vm.STEPS_EXHAUSTED] + list(range(1, len(program.functions) + 1))
    messages = tf.constant([self._failure(program, c) for c in codes])
    padded = tf.concat([overflow, [0]], 0)            # batch 0, or no failure: code 0
    first = tf.gather(padded, tf.argmax(tf.cast(tf.not_equal(padded, 0), tf.int32)))
    message = tf.gather(messages, tf.maximum(first, 0))
    check = tf.debugging.Assert(tf.reduce_all(tf.equal(overflow, 0)), [message])
    with tf.control_dependencies([check]):
      return tuple(tf.identity(r) for r in results)

  def _check(self, inputs):
    name = self.fn.__name__
    self._check_arity(inputs)
    if not inputs:
      raise ConversionError(f"autobatch({name}): give at least one input (the batch axis "
                            "comes from the inputs)")
    sizes = set()
    for k, x in enumerate(inputs):
      if x.shape.rank is None or x.shape.rank == 0:
        raise ConversionError(f"autobatch({name}): input {k} has no batch axis (shape "
                              f"{x.shape}); give each input the batch on axis 0")
      if not x.shape[1:].is_fully_defined():
        raise ConversionError(f"autobatch({name}): input {k}'s per-example shape "
                              f"{x.shape[1:]} is not static")
      if dims.leading(x) is not None:
        sizes.add(dims.leading(x))
    if len(sizes) > 1:
      raise ConversionError(f"autobatch({name}): the inputs' batch sizes differ: "
                            f"{sorted(sizes)}")
    return tuple(ir.VarType(x.dtype, tuple(x.shape[1:].as_list())) for x in inputs)

  def _check_arity(self, inputs):
    """The count of inputs first: a wrong count is the mistake to name, before whatever
    else about the inputs follows from it (batch sizes that differ, an input with no batch
    axis). Parameters other than plain positional ones are the frontend's error."""
    try:
      params = inspect.signature(self.fn).parameters.values()
    except (TypeError, ValueError):     # not a Python function: the frontend says so
      return
    plain = all(p.kind == p.POSITIONAL_OR_KEYWORD and p.default is p.empty for p in params)
    if plain and len(params) != len(inputs):
      raise ConversionError(f"autobatch: `{self.fn.__name__}` takes {len(params)} inputs, "
                            f"got {len(inputs)}")

  def _program(self, types):
    if types not in self._programs:
      self._programs[types] = pipeline.compile_program(self.fn, types)
      self.conversions += 1
    self._last = self._programs[types]
    return self._last
