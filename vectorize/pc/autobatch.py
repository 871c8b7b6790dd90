"""`autobatch(fn)`: a per-example recursive Python function -> a function of a batch.

The user face of the program-counter mode: checks the inputs, compiles `fn` once per
per-example input signature (`pipeline.py`; a new batch size reuses it), runs the VM in a
`tf.function` of its own when called eagerly or in the caller's graph otherwise, and turns
a member's stack overflow into an error naming the function and the bound (under XLA, where
the caller compiled the whole graph, the overflowed members' results are NaN / the dtype's
minimum / False instead, since a compiled program cannot raise).
"""

import tensorflow as tf

from vectorize import dims
from vectorize.errors import ConversionError
from vectorize.pc import engine_bridge, ir, pipeline, vm


def autobatch(fn, max_stack_depth=None, max_steps=None, jit_compile=False):
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

  Returns:
    `batched(*inputs)`: one tensor per parameter of `fn`, batch on axis 0; returns `fn`'s
    results (a tensor, or a tuple) batched the same way. `batched.program` is the compiled
    basic-block program as text.

  Example:
    >>> def fib(n):
    ...   if n < 2:
    ...     return n
    ...   return fib(n - 1) + fib(n - 2)
    >>> vectorize.autobatch(fib)(tf.range(10))   # [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]
  """
  return Batched(fn, max_stack_depth, max_steps, jit_compile)


class Batched:
  """The callable `autobatch` returns; caches the compiled program per input signature."""

  def __init__(self, fn, max_stack_depth, max_steps, jit_compile):
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
    inputs = [tf.convert_to_tensor(x) for x in inputs]
    types = self._check(inputs)
    program = self._program(types)
    if tf.executing_eagerly():
      graph_fn = self._eager.get(types)
      if graph_fn is None:
        signature = [tf.TensorSpec([None] + list(t.shape), t.dtype) for t in types]
        graph_fn = tf.function(lambda *xs: vm.run(program, xs, self.max_stack_depth,
                                                          self.max_steps),
                               input_signature=signature, jit_compile=self.jit_compile,
                               autograph=False)
        self._eager[types] = graph_fn
      results, overflow = graph_fn(*inputs)
      failed = tf.where(overflow != 0)[:, 0].numpy().tolist()
      if failed:
        code = int(overflow[failed[0]])
        raise tf.errors.InvalidArgumentError(
            None, None, self._failure(program, code) + f" (batch members {failed[:10]})")
    else:
      with dims.ints():   # the program is ours; the user's TF1 graph may index Dimensions
        results, overflow = vm.run(program, inputs, self.max_stack_depth, self.max_steps)
      if not engine_bridge.static_shapes_wanted():
        results = self._checked(program, results, overflow)
    return results[0] if len(results) == 1 else tuple(results)

  def _failure(self, program, code):
    if code == vm.STEPS_EXHAUSTED:
      return (f"autobatch({self.fn.__name__}): a member was still running after "
              f"max_steps={self.max_steps} steps; pass a larger max_steps")
    return (f"autobatch({self.fn.__name__}): the recursion of "
            f"{program.functions[code - 1].name} exceeded max_stack_depth="
            f"{self.max_stack_depth}; pass a larger max_stack_depth")

  def _checked(self, program, results, overflow):
    """`results` behind an assertion that no member failed, naming the first failure."""
    codes = [vm.STEPS_EXHAUSTED] + list(range(1, len(program.functions) + 1))
    messages = tf.constant([self._failure(program, c) for c in codes])
    padded = tf.concat([overflow, [0]], 0)            # batch 0, or no failure: code 0
    first = tf.gather(padded, tf.argmax(tf.cast(padded != 0, tf.int32)))
    message = tf.gather(messages, tf.maximum(first, 0))
    check = tf.debugging.Assert(tf.reduce_all(overflow == 0), [message])
    with tf.control_dependencies([check]):
      return tuple(tf.identity(r) for r in results)

  def _check(self, inputs):
    name = self.fn.__name__
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

  def _program(self, types):
    if types not in self._programs:
      self._programs[types] = pipeline.compile_program(self.fn, types)
      self.conversions += 1
    self._last = self._programs[types]
    return self._last
