"""Every OpCase against the sequential reference, expanded over stacking patterns, loop
lengths (static, run-time, zero), dtypes and modes (tf.function, eager, XLA).

Every stacking pattern runs with each dtype combination at n = 3, and with the first one under
XLA; the first combination also runs, for the patterns that stack one argument or all of
them, at the case's other loop lengths (1 and 0) and with n known only at run time.

Under XLA a case's patterns are compiled as one function: a compile's fixed cost was most of
an XLA test's time. A failure reruns the patterns one at a time to name the one that fails."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing
from tests.converters.op_cases import ALL_CASES


def _sizes_pattern(case, pattern):
  """Whether `pattern` runs the loop-size variants (n = 1 and 0, n known only at run time):
  it stacks one argument or all of them, or the case has no such pattern and it is the
  first. How a converter handles the loop's size (one or no iteration, a leading dimension
  unknown until run time) depends on each argument being stacked or not, which those
  patterns cover; a mixed pattern (stacked,stacked,invariant) combines them."""
  def stacks_one_or_all(p):
    return sum(p) == 1 or all(p)
  patterns = case.stacking_patterns()
  return stacks_one_or_all(pattern) or (
      pattern == patterns[0] and not any(map(stacks_one_or_all, patterns)))


def _loop_lengths(case, pattern, combo_index):
  """The case's loop lengths for its first dtype combination and a sizes pattern; n = 3
  alone for the others. A loop of one or of no iteration is a matter of shapes, which a
  converter handles alike for every dtype (as the run-time n, tested with the first
  combination only). Each dtype's kernels and each pattern run at n = 3."""
  if (combo_index == 0 and _sizes_pattern(case, pattern)) or 3 not in case.loop_lengths:
    return case.loop_lengths
  return (3,)


def _instances():
  for case in ALL_CASES:
    dtype_combos = case.dtype_combinations()
    for pattern in case.stacking_patterns():
      pattern_id = _pattern_id(pattern)
      for combo_index, dtypes in enumerate(dtype_combos):
        dtype_id = "-".join(sorted({d.name for d in dtypes}))
        for n in _loop_lengths(case, pattern, combo_index):
          yield pytest.param(case, pattern, dtypes, n, "function",
                             id=f"{case.name}-{pattern_id}-n{n}-{dtype_id}")
        if combo_index == 0 and _sizes_pattern(case, pattern):
          yield pytest.param(case, pattern, dtypes, 3, "dynamic",
                             id=f"{case.name}-{pattern_id}-dynamic_n-{dtype_id}")


def _xla_instances():
  for case in ALL_CASES:
    marks = [] if case.xla is True else [pytest.mark.skip(reason=str(case.xla))]
    yield pytest.param(case, marks=marks, id=f"{case.name}-n3-xla")


def _pattern_id(pattern):
  return ",".join("stacked" if s else "invariant" for s in pattern)


def _arguments(case, pattern, dtypes, n, seed=0):
  rng = np.random.default_rng(seed)
  args = []
  for k, (shape, dtype, is_stacked) in enumerate(zip(case.shapes, dtypes, pattern)):
    full_shape = ([n] if is_stacked else []) + list(shape)
    make = case.make[k] if case.make and case.make[k] else None
    value = make(rng, full_shape, dtype) if make else testing.random_array(rng, full_shape,
                                                                           dtype)
    args.append(tf.constant(value, dtype=dtype))
  return args


def _body_for(case, pattern, arguments):
  def body(i):
    return case.build(*[tf.gather(a, i) if s else a for a, s in zip(arguments, pattern)])
  return body


def _run(case, pattern, args, n, mode):
  """pfor of the case's body. In 'dynamic' mode the arguments are inputs of the compiled
  function (run-time values, not constants), n is fed at run time and the stacked
  arguments' leading dim is unknown."""
  fallback = case.allow_fallback
  if mode == "function" or not case.runtime_args:
    return testing.run_pfor(_body_for(case, pattern, args), n, mode=mode, fallback=fallback)
  specs = [tf.TensorSpec(([None] if s else []) + a.shape.as_list()[1 if s else 0:], a.dtype)
           for a, s in zip(args, pattern)]
  fn = tf.function(
      lambda m, *a: vectorize.pfor(_body_for(case, pattern, a), m,
                                   fallback_to_while_loop=fallback),
      input_signature=[tf.TensorSpec([], tf.int32)] + specs, autograph=False)
  return tf.nest.map_structure(np.asarray, fn(tf.constant(n), *args))


def check_case(case, pattern, dtypes, n, mode):
  reference_args = _arguments(case, pattern, dtypes, max(n, 1))
  args = reference_args if n else [a[:0] if s else a for a, s in zip(reference_args, pattern)]
  reference = _body_for(case, pattern, reference_args)
  # The output spec (iteration 0 run once more) only for n = 0, where it is all there is.
  expected = testing.sequential(reference, n) if n else testing.sequential(
      None, 0, testing.example_spec(reference))
  actual = _run(case, pattern, args, n, mode)
  if case.compare == "values":
    testing.assert_allclose(actual, expected, case.tol)
  else:
    case.compare(actual, expected)


@pytest.mark.parametrize("case,pattern,dtypes,n,mode", list(_instances()))
def test_op_case(case, pattern, dtypes, n, mode):
  check_case(case, pattern, dtypes, n, mode)


def check_patterns_xla(case, patterns):
  """The case's body for each stacking pattern, n = 3, in one XLA-compiled function."""
  dtypes = case.dtype_combinations()[0]
  arguments = [_arguments(case, pattern, dtypes, 3) for pattern in patterns]
  expected = [testing.sequential(_body_for(case, pattern, args), 3)
              for pattern, args in zip(patterns, arguments)]

  def vectorized(*flat_args):
    flat_args = iter(flat_args)
    outs = []
    for pattern, args in zip(patterns, arguments):
      if case.runtime_args:   # inputs of the compiled function, not constants
        args = [next(flat_args) for _ in args]
      outs.append(vectorize.pfor(_body_for(case, pattern, args), 3,
                                 fallback_to_while_loop=case.allow_fallback))
    return outs

  flat_args = [a for args in arguments for a in args] if case.runtime_args else []
  actual = tf.function(vectorized, jit_compile=True, autograph=False)(*flat_args)
  for pattern, got, want in zip(patterns, actual, expected):
    got = tf.nest.map_structure(np.asarray, got)
    try:
      if case.compare == "values":
        testing.assert_allclose(got, want, case.tol)
      else:
        case.compare(got, want)
    except AssertionError as e:
      e.add_note(f"stacking pattern {_pattern_id(pattern)}, under XLA")
      raise


@pytest.mark.parametrize("case", list(_xla_instances()))
def test_op_case_xla(case):
  patterns = case.stacking_patterns()
  try:
    check_patterns_xla(case, patterns)
  except Exception as e:   # pylint: disable=broad-except
    if len(patterns) == 1:
      raise
    for pattern in patterns:
      try:
        check_patterns_xla(case, [pattern])
      except Exception as alone:   # pylint: disable=broad-except
        alone.add_note(f"stacking pattern {_pattern_id(pattern)}, under XLA")
        raise alone from e
    raise
