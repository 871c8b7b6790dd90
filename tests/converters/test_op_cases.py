"""Every OpCase against the sequential reference, expanded over stacking patterns, loop
lengths (static, run-time, zero), dtypes and modes (tf.function, XLA).

Every stacking pattern runs with each dtype combination at n = 3, and with the first one under
XLA; the first combination also runs, for the patterns that stack one argument or all of
them, at the case's other loop lengths (1 and 0) and with n known only at run time.

A test runs every variant of a case's dtype combination in one tf.function (and under XLA
every pattern in one compiled function): a function's tracing, first run and compile were
most of a variant's time. A failure reruns the variants one at a time and names the first
that fails alone (its stacking pattern and loop length) in the error."""

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


def _variants(case, combo_index):
  """The (pattern, n, mode) runs of one dtype combination."""
  for pattern in case.stacking_patterns():
    for n in _loop_lengths(case, pattern, combo_index):
      yield pattern, n, "function"
    if combo_index == 0 and _sizes_pattern(case, pattern):
      yield pattern, 3, "dynamic"


def _describe(variant):
  pattern, n, mode = variant
  return f"stacking pattern {_pattern_id(pattern)}, " + {
      "dynamic": f"n = {n} known only at run time", "xla": f"n = {n} under XLA"}.get(
          mode, f"n = {n}")


def _instances():
  for case in ALL_CASES:
    for combo_index, dtypes in enumerate(case.dtype_combinations()):
      dtype_id = "-".join(sorted({d.name for d in dtypes}))
      yield pytest.param(case, combo_index, id=f"{case.name}-{dtype_id}")


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


def check_variants(case, dtypes, variants):
  """pfor of the case's body for each variant, all in one tf.function (XLA-compiled for
  'xla' variants), against the loop. A 'dynamic' variant's n is an input of the function,
  and so are its arguments (run-time values with an unknown leading dim, not constants)
  where the case allows; an 'xla' variant's arguments too, at their shapes."""
  runs = []
  for pattern, n, mode in variants:
    reference_args = _arguments(case, pattern, dtypes, max(n, 1))
    args = reference_args if n else [a[:0] if s else a
                                     for a, s in zip(reference_args, pattern)]
    reference = _body_for(case, pattern, reference_args)
    # The output spec (iteration 0 run once more) only for n = 0, where it is all there is.
    expected = testing.sequential(reference, n) if n else testing.sequential(
        None, 0, testing.example_spec(reference))
    fed = mode in ("dynamic", "xla") and case.runtime_args
    runs.append((pattern, n, mode, args, fed, expected))
  xla = any(mode == "xla" for _, _, mode, _, _, _ in runs)
  specs = [tf.TensorSpec([], tf.int32)] + [
      tf.TensorSpec(a.shape if xla else
                    ([None] if s else []) + a.shape.as_list()[1 if s else 0:], a.dtype)
      for pattern, _, _, args, fed, _ in runs if fed for a, s in zip(args, pattern)]

  def vectorized(m, *fed_args):
    fed_args = iter(fed_args)
    outs = []
    for pattern, n, mode, args, fed, _ in runs:
      if fed:
        args = [next(fed_args) for _ in args]
      outs.append(vectorize.pfor(_body_for(case, pattern, args),
                                 m if mode == "dynamic" else n,
                                 fallback_to_while_loop=case.allow_fallback))
    return outs

  fn = tf.function(vectorized, input_signature=specs, autograph=False, jit_compile=xla)
  actual = fn(tf.constant(3), *[a for _, _, _, args, fed, _ in runs if fed for a in args])
  for (pattern, n, mode, _, _, expected), got in zip(runs, actual):
    got = tf.nest.map_structure(np.asarray, got)
    if case.compare == "values":
      testing.assert_allclose(got, expected, case.tol)
    else:
      case.compare(got, expected)


@pytest.mark.parametrize("case,combo_index", list(_instances()))
def test_op_case(case, combo_index):
  """Every variant of a dtype combination in one function: a function's tracing and first
  run were a third of a variant's time. A failure reruns the variants one at a time to name
  the one that fails."""
  dtypes = case.dtype_combinations()[combo_index]
  _one_then_each(lambda vs: check_variants(case, dtypes, vs),
                 list(_variants(case, combo_index)), _describe)


def _one_then_each(check, variants, describe):
  """check(variants), and on failure check([v]) for each to raise the first that fails
  alone, named; the group's error if none does."""
  try:
    check(variants)
  except Exception as e:   # pylint: disable=broad-except
    if len(variants) == 1:
      e.add_note(describe(variants[0]))
      raise
    for variant in variants:
      try:
        check([variant])
      except Exception as alone:   # pylint: disable=broad-except
        alone.add_note(describe(variant))
        raise alone from e
    raise


@pytest.mark.parametrize("case", list(_xla_instances()))
def test_op_case_xla(case):
  _one_then_each(lambda vs: check_variants(case, case.dtype_combinations()[0], vs),
                 [(pattern, 3, "xla") for pattern in case.stacking_patterns()], _describe)
