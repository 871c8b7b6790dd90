"""autobatch: the VM against plain Python, eagerly, in tf.function and under XLA.

Also batch 0, one conversion for two batch sizes, stack overflow and step-limit errors
naming the function and bound, poisoned results under XLA, gradients in all three modes,
and the API's input checks.
"""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.pc import programs
from vectorize.errors import ConversionError
from vectorize.pc import vm

MODES = ["eager", "function", "xla"]


def _call(batched, mode, inputs):
  if mode == "eager":
    return batched(*inputs)
  return tf.function(lambda *xs: batched(*xs), jit_compile=(mode == "xla"))(*inputs)


def _tuple(x):
  return x if isinstance(x, tuple) else (x,)


# Programs run in all three modes; the others run eagerly and under XLA. The eager form
# already runs the VM in a tf.function of its own, traced for a batch known only at run time;
# the caller's tf.function traces the same `vm.run` for a static batch and checks failures with
# a graph assertion, which does not depend on the program: a few programs of each kind (tree,
# mutual and deep recursion, tuples, vector state, a loop around a call, a captured index, a
# while loop) cover it.
FUNCTION_MODE_PROGRAMS = {"fib", "mutual", "deep", "divmod", "vector", "fib_sum",
                          "guarded_index", "collatz"}
# The programs of the sized tests below (argument passing, forwarding, int64, while True,
# conditional expressions) run eagerly only here: those tests run each of them under XLA
# too (a batch known only at run time), one of each construct in every size and mode.
SIZED_PROGRAMS = {"simpson", "simpson_splits", "rotate", "forwarded_pair",
                  "forwarded_recursion", "hanoi_int64", "digits_int64", "while_true",
                  "while_true_break", "chained_comparison", "conditional_expression",
                  "float_conditional_expression"}


def _vm_modes(name):
  if name in SIZED_PROGRAMS:
    return ["eager"]
  return [m for m in MODES if m != "function" or name in FUNCTION_MODE_PROGRAMS]


def _vm_params():
  return [pytest.param(case, mode, id=f"{case.name}-{mode}") for case in programs.CASES
          for mode in _vm_modes(case.name)]


@pytest.mark.parametrize("case,mode", _vm_params())
def test_vm_equals_plain_python(case, mode):
  inputs = case.inputs(6, np.random.default_rng(2))
  batched = vectorize.autobatch(case.fn, max_stack_depth=case.depth if mode == "xla" else None)
  got = _tuple(_call(batched, mode, [tf.constant(x) for x in inputs]))
  want = programs.reference(case.fn, inputs)
  assert len(got) == len(want)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6)


# The "fullest" schedule on one program of each kind, eagerly and under XLA (where the
# next block comes from a count of the members at each block).
FULLEST_PROGRAMS = ["fib", "mutual", "deep", "vector", "guarded_index", "simpson",
                    "branch_calls", "drifting"]


@pytest.mark.parametrize("mode", ["eager", "xla"])
@pytest.mark.parametrize("name", FULLEST_PROGRAMS)
def test_the_fullest_schedule_computes_what_python_does(name, mode):
  case = programs.BY_NAME[name]
  inputs = case.inputs(7, np.random.default_rng(4))
  batched = vectorize.autobatch(case.fn, max_stack_depth=case.depth, schedule="fullest")
  got = _tuple(_call(batched, mode, [tf.constant(x) for x in inputs]))
  for g, w in zip(got, programs.reference(case.fn, inputs)):
    np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6)


def test_members_that_drift_apart_take_fewer_steps_with_the_fullest_schedule():
  """`drifting_walk`'s members each sit at their own pass of the loop: the lowest block
  first runs every block for the few members there (602 steps at batch 64), the fullest
  first lets them gather (371). Counted by `max_steps`: 480 steps leave members running
  under one schedule, not the other."""
  case = programs.BY_NAME["drifting"]
  inputs = [tf.constant(x) for x in case.inputs(64, np.random.default_rng(0))]
  failures = {schedule: vectorize.autobatch(case.fn, max_steps=480, schedule=schedule)
              .with_failures(*inputs)[1].numpy() for schedule in vm.SCHEDULES}
  assert (failures["lowest"] == vm.STEPS_EXHAUSTED).any()
  assert (failures["fullest"] == 0).all()


def test_an_unknown_schedule_is_refused():
  with pytest.raises(ValueError, match="schedule must be one of lowest, fullest"):
    vectorize.autobatch(programs.fib, schedule="most")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["fib", "divmod", "vector"])
def test_batch_zero_gives_empty_results(name, mode):
  case = programs.BY_NAME[name]
  one = case.inputs(1, np.random.default_rng(0))
  inputs = [x[:0] for x in one]
  batched = vectorize.autobatch(case.fn, max_stack_depth=case.depth)
  got = _tuple(_call(batched, mode, [tf.constant(x) for x in inputs]))
  want = _tuple(case.fn(*[tf.constant(x[0]) for x in one]))
  for g, w in zip(got, want):
    assert g.shape == [0] + tf.convert_to_tensor(w).shape


def test_one_conversion_and_one_trace_for_two_batch_sizes():
  batched = vectorize.autobatch(programs.fib)
  np.testing.assert_array_equal(batched(tf.range(5)), [0, 1, 1, 2, 3])
  np.testing.assert_array_equal(batched(tf.range(8)), [0, 1, 1, 2, 3, 5, 8, 13])
  assert batched.conversions == 1
  (graph_fn,) = batched._eager.values()  # pylint: disable=protected-access
  assert graph_fn.experimental_get_tracing_count() == 1
  assert "def fib(fib.n)" in batched.program and "push return" in batched.program


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_stack_overflow_names_the_function_and_the_bound(mode):
  batched = vectorize.autobatch(programs.is_even, max_stack_depth=3)
  batched(tf.constant([5, 40]))     # tail calls: no stack growth however deep
  batched = vectorize.autobatch(programs.deep_sum, max_stack_depth=10)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"the recursion of deep_sum exceeded max_stack_depth=10"):
    _call(batched, mode, [tf.constant([1.0, 2.0]), tf.constant([3, 12])])


def test_under_xla_overflowed_members_give_nan_and_the_others_are_right():
  batched = vectorize.autobatch(programs.deep_sum, max_stack_depth=10)
  with pytest.warns(RuntimeWarning, match="cannot raise"):
    got = _call(batched, "xla", [tf.constant([1.0, 2.0, 3.0]), tf.constant([3, 12, 10])])
  np.testing.assert_allclose(got[0::2], [3.0, 30.0])
  assert np.isnan(got[1])
  ints = vectorize.autobatch(programs.fib, max_stack_depth=4)
  with pytest.warns(RuntimeWarning, match="cannot raise"):
    got = _call(ints, "xla", [tf.constant([3, 9])])
  np.testing.assert_array_equal(got, [2, np.iinfo(np.int32).min])


def test_eager_xla_raises_outside_the_compiled_program():
  batched = vectorize.autobatch(programs.deep_sum, max_stack_depth=10, jit_compile=True)
  np.testing.assert_allclose(batched(tf.constant([1.0]), tf.constant([4])), [4.0])
  with pytest.raises(tf.errors.InvalidArgumentError, match="deep_sum exceeded max_stack_depth"):
    batched(tf.constant([1.0]), tf.constant([11]))


def _deep_inputs(batch):
  """deep_sum inputs whose second member recurses past a bound of 10 (batch 1: only it)."""
  x, n = tf.constant([1.0, 2.0, 3.0]), tf.constant([3, 12, 10])
  return [x[1:2], n[1:2]] if batch == 1 else [x, n]


@pytest.mark.parametrize("batch", [1, "run-time"])
def test_under_a_callers_xla_an_overflow_warns_and_its_codes_raise_outside(batch):
  """Inside the caller's own jit_compile=True function nothing can raise (XLA compiles
  assertions to nothing), so the call warns when traced, and `with_failures` hands the
  codes out for `check` to raise the bound's error outside (it returned NaN silently)."""
  batched = vectorize.autobatch(programs.deep_sum, max_stack_depth=10)
  inputs = _deep_inputs(batch)
  signature = [tf.TensorSpec([None], x.dtype) for x in inputs] if batch != 1 else None

  @tf.function(jit_compile=True, input_signature=signature)
  def inside(x, n):
    results, failures = batched.with_failures(x, n)
    return results[0], failures

  with pytest.warns(RuntimeWarning, match=r"cannot raise.*max_stack_depth=10.*check"):
    got, failures = inside(*inputs)
  assert np.isnan(got.numpy()[0 if batch == 1 else 1])
  with pytest.raises(tf.errors.InvalidArgumentError, match=(
      r"deep_sum exceeded max_stack_depth=10; pass a larger one, e.g. "
      r"autobatch\(deep_sum, max_stack_depth=20\)")):
    batched.check(failures)
  with pytest.warns(RuntimeWarning, match="cannot raise"):
    tf.function(lambda *xs: batched(*xs), jit_compile=True)(*inputs)


@pytest.mark.parametrize("batch", [1, "run-time"])
def test_a_compiled_autobatch_in_a_callers_graph_raises_outside_its_xla(batch):
  """`autobatch(..., jit_compile=True)` in a caller's graph that XLA does not compile runs
  its XLA function (it ran uncompiled) and checks the codes outside it."""
  batched = vectorize.autobatch(programs.deep_sum, max_stack_depth=10, jit_compile=True)
  inputs = _deep_inputs(batch)
  signature = [tf.TensorSpec([None], x.dtype) for x in inputs] if batch != 1 else None
  caller = tf.function(lambda x, n: batched(x, n), input_signature=signature)
  graph = caller.get_concrete_function(*inputs).graph
  compiled = [op for op in graph.get_operations() if "PartitionedCall" in op.type and
              op.node_def.attr["_XlaMustCompile"].b]
  assert compiled, "the VM runs in its own XLA function"
  with pytest.raises(tf.errors.InvalidArgumentError, match="max_stack_depth=10; pass a"):
    caller(*inputs)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_running_past_max_steps_is_an_error(mode):
  batched = vectorize.autobatch(programs.fib, max_steps=10)
  with pytest.raises(tf.errors.InvalidArgumentError, match="still running after max_steps=10"):
    _call(batched, mode, [tf.constant([1, 9])])


def test_stacks_grow_without_a_bound():
  batched = vectorize.autobatch(programs.deep_sum)
  np.testing.assert_allclose(batched(tf.constant([0.5, 1.0]), tf.constant([150, 3])),
                             [75.0, 3.0])


def _reference_gradient(fn, inputs, k):
  grads = []
  for i in range(inputs[0].shape[0]):
    args = [tf.constant(x[i]) for x in inputs]
    with tf.GradientTape() as tape:
      tape.watch(args[k])
      total = tf.reduce_sum(fn(*args))
    grad = tape.gradient(total, args[k])             # None: the result ignores it
    grads.append(np.zeros_like(args[k]) if grad is None else grad)
  return np.stack(grads)


# Every float program's gradient eagerly and under XLA; in a caller's tf.function (the same
# gradient of the same VM graph, for a static batch) for deep recursion and vector state.
# power's and vector's XLA gradients are test_gradients_with_a_batch_known_only_at_run_time's
# (batches of 1 and 4).
FUNCTION_MODE_GRADIENTS = {"deep", "vector"}
XLA_GRADIENTS_ELSEWHERE = {"power", "vector"}


def _gradient_modes(name):
  return [m for m in MODES if (m != "function" or name in FUNCTION_MODE_GRADIENTS) and
          (m != "xla" or name not in XLA_GRADIENTS_ELSEWHERE)]


@pytest.mark.parametrize("case,mode", [
    pytest.param(case, mode, id=f"{case.name}-{mode}") for case in programs.CASES if case.grad
    for mode in _gradient_modes(case.name)])
def test_gradients_equal_per_example_gradients(case, mode):
  inputs = case.inputs(5, np.random.default_rng(3))
  k = case.grad[0]
  batched = vectorize.autobatch(case.fn, max_stack_depth=case.depth, max_steps=2000)

  def gradient(*xs):
    xs = list(xs)
    with tf.GradientTape() as tape:
      tape.watch(xs[k])
      total = tf.reduce_sum(batched(*xs))
    return tape.gradient(total, xs[k])

  got = gradient(*[tf.constant(x) for x in inputs]) if mode == "eager" else tf.function(
      gradient, jit_compile=(mode == "xla"))(*[tf.constant(x) for x in inputs])
  assert np.all(np.isfinite(got.numpy()))
  np.testing.assert_allclose(got, _reference_gradient(case.fn, inputs, k), rtol=1e-4,
                             atol=1e-5)


@pytest.mark.parametrize("name,batch,mode", [
    # XLA, the failure this guards, for both programs and both sizes.
    ("power", 1, "xla"), ("power", "run-time", "xla"),
    ("vector", 1, "xla"), ("vector", "run-time", "xla"),
    # Without XLA, for one program: an eager call ignores the signature (its run-time form
    # is test_gradients_equal_per_example_gradients' eager one); the function form traces
    # for a batch of None whatever the size, so one size (4 members) runs it.
    ("vector", 1, "eager"), ("vector", "run-time", "function")])
def test_gradients_with_a_batch_known_only_at_run_time(name, batch, mode):
  """Under XLA with an input_signature of batch None, the gradient failed to compile:
  "Invalid TensorList shape: (f32[50,0], s32[]), expected: (f32[50,2], s32[])" (the
  dispatch's values kept for the gradient were [0]-long in the blocks that did not compute
  them)."""
  case = programs.BY_NAME[name]
  inputs = [tf.constant(x) for x in case.inputs(4, np.random.default_rng(7))]
  inputs = [x[:1] for x in inputs] if batch == 1 else inputs
  k = case.grad[0]
  batched = vectorize.autobatch(case.fn, max_stack_depth=case.depth, max_steps=200)

  def gradient(*xs):
    xs = list(xs)
    with tf.GradientTape() as tape:
      tape.watch(xs[k])
      total = tf.reduce_sum(batched(*xs))
    return tape.gradient(total, xs[k])

  if mode != "eager":
    signature = [tf.TensorSpec([None] + list(x.shape[1:]), x.dtype) for x in inputs]
    gradient = tf.function(gradient, input_signature=signature, jit_compile=(mode == "xla"))
  got = gradient(*inputs)
  np.testing.assert_allclose(got, _reference_gradient(case.fn, [x.numpy() for x in inputs], k),
                             rtol=1e-4, atol=1e-5)


def test_xla_without_a_stack_bound_asks_for_one():
  batched = vectorize.autobatch(programs.fib)
  with pytest.raises(ConversionError, match="pass max_stack_depth"):
    _call(batched, "xla", [tf.constant([3])])
  with pytest.raises(ValueError, match="pass max_stack_depth"):
    vectorize.autobatch(programs.fib, jit_compile=True)


def test_inputs_are_checked():
  batched = vectorize.autobatch(programs.gcd)
  with pytest.raises(ConversionError, match="batch sizes differ"):
    batched(tf.constant([1, 2]), tf.constant([1, 2, 3]))
  with pytest.raises(ConversionError, match="no batch axis"):
    batched(tf.constant(1), tf.constant([1]))
  with pytest.raises(ValueError, match="max_stack_depth must be a positive int"):
    vectorize.autobatch(programs.gcd, max_stack_depth=0)


def test_stack_buffers_stay_out_of_the_block_dispatch():
  """A push is O(batch): the [stacks, depth + 2, batch] buffers never pass through the switch_case
  (XLA copies what passes through a conditional: every step would cost O(depth x batch))."""
  batched = vectorize.autobatch(programs.fib, max_stack_depth=37)
  graph_fn = tf.function(batched, jit_compile=True)
  graph = graph_fn.get_concrete_function(tf.TensorSpec([5], tf.int32)).graph.as_graph_def()
  cases = [n for f in graph.library.function for n in f.node_def
           if n.op in ("Case", "StatelessCase")]
  assert cases
  for case in cases:
    for shape in case.attr["output_shapes"].list.shape:
      assert all(d.size != 39 for d in shape.dim), case.name   # depth + 2 rows
  np.testing.assert_array_equal(graph_fn(tf.constant([1, 2, 3, 4, 10])), [1, 1, 2, 3, 55])


# The sizes and modes `_check_sized` runs a program in. With a batch known only at run time
# the eager and function modes are one test (`_call_sized` builds the same tf.function for
# both), so it runs once. Each test runs one program of its construct in all of them, and its
# other programs (which test_vm_equals_plain_python runs eagerly and under XLA for a static
# batch) with a batch of one eagerly and a batch known only at run time under XLA.
SIZED_ALL = [(1, "eager"), (1, "function"), (1, "xla"), ("run-time", "function"),
             ("run-time", "xla")]
SIZED_FEW = [(1, "eager"), ("run-time", "xla")]


def _sized(full, *others):
  """(name, batch, mode) parameters: every size and mode for `full`, a few for `others`."""
  assert SIZED_PROGRAMS.issuperset((full,) + others)
  return ([(full, batch, mode) for batch, mode in SIZED_ALL] +
          [(name, batch, mode) for name in others for batch, mode in SIZED_FEW])


def _call_sized(batched, mode, inputs, batch):
  """`_call` on the first `batch` members, or on all of them with the batch size known only
  at run time (`batch="run-time"`: a tf.function traced for `[None, ...]` inputs)."""
  if batch != "run-time":
    return _call(batched, mode, [x[:batch] for x in inputs])
  signature = [tf.TensorSpec([None] + list(x.shape[1:]), x.dtype) for x in inputs]
  fn = tf.function(lambda *xs: batched(*xs), input_signature=signature,
                   jit_compile=(mode == "xla"))
  return fn(*inputs)


@pytest.mark.parametrize("name,batch,mode", _sized("rotate", "simpson", "simpson_splits"))
def test_adaptive_quadrature_splits_as_often_as_one_example_does(name, batch, mode):
  """The recursive call passes `f_m` on in the `f_b` slot while `f_lm` takes `f_m`'s:
  argument passing copied one parameter at a time, gave `f_b` the new `f_m` and made the
  tolerance test fail to the depth bound (3,937 splits where one example splits 29)."""
  _check_sized(name, batch, mode)


@pytest.mark.parametrize("name,batch,mode", _sized("forwarded_recursion", "forwarded_pair"))
def test_return_of_a_call_forwards_every_value(name, batch, mode):
  """`return helper(...)` where `helper` returns a pair returns the pair (it was refused:
  "returns 2 values, 1 expected here"), from the entry and inside a recursion."""
  _check_sized(name, batch, mode)


@pytest.mark.parametrize("name,batch,mode", _sized("hanoi_int64", "digits_int64"))
def test_int64_inputs_give_int64_results(name, batch, mode):
  """`for k in range(n)` over an int64 `n` was refused; results built from literals only
  (`return 1 + count_digits(n // 10)`) were int32, wrapping past 2**31 (Hanoi's moves)."""
  (got,) = _check_sized(name, batch, mode)
  assert got.dtype == tf.int64


@pytest.mark.parametrize("name,batch,mode", _sized("while_true", "while_true_break"))
def test_while_true_is_left_only_by_return_or_break(name, batch, mode):
  """`while True:` left only by `return` was refused ("can reach its end without
  `return`"): the loop's false edge, which a literal test never takes, fell off the end."""
  _check_sized(name, batch, mode)


@pytest.mark.parametrize("batch,mode", SIZED_ALL)
def test_chained_comparison_is_an_elementwise_and(batch, mode):
  """`lo <= DATA[j] < hi` asked a traced tensor for its truth value (Python's `and` between
  the two comparisons): OperatorNotAllowedInGraphError."""
  _check_sized("chained_comparison", batch, mode)


@pytest.mark.parametrize("name,batch,mode",
                         _sized("conditional_expression", "float_conditional_expression"))
def test_conditional_expression_is_a_select(name, batch, mode):
  """`a if a >= 0 else -a` asked a traced tensor for its truth value
  (OperatorNotAllowedInGraphError); it is now a select of both sides."""
  _check_sized(name, batch, mode)


def test_the_count_of_inputs_is_checked_before_their_batch_sizes():
  batched = vectorize.autobatch(programs.fib)
  with pytest.raises(ConversionError, match=r"`fib` takes 1 inputs, got 2"):
    batched(tf.constant([1, 2]), tf.constant([1, 2, 3]))
  with pytest.raises(ConversionError, match=r"`fib` takes 1 inputs, got 0"):
    batched()


def _check_sized(name, batch, mode):
  case = programs.BY_NAME[name]
  inputs = [tf.constant(x) for x in case.inputs(7, np.random.default_rng(5))]
  batched = vectorize.autobatch(case.fn, max_stack_depth=case.depth)
  got = _tuple(_call_sized(batched, mode, inputs, batch))
  size = 1 if batch == 1 else 7
  want = programs.reference(case.fn, [x.numpy()[:size] for x in inputs])
  for g, w in zip(got, want):
    np.testing.assert_allclose(g.numpy(), w, rtol=1e-9)
  return got
