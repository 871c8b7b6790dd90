"""Every OpCase against the sequential reference, expanded over stacking patterns, loop
lengths (static, run-time, zero), dtypes and modes (tf.function, eager, XLA)."""

import numpy as np
import pytest
import tensorflow as tf

from tests import testing
from tests.converters.op_cases import ALL_CASES


def _instances():
  for case in ALL_CASES:
    dtype_combos = case.dtype_combinations()
    for pattern in case.stacking_patterns():
      pattern_id = ",".join("stacked" if s else "invariant" for s in pattern)
      for combo_index, dtypes in enumerate(dtype_combos):
        dtype_id = "-".join(sorted({d.name for d in dtypes}))
        for n in case.loop_lengths:
          yield pytest.param(case, pattern, dtypes, n, "function",
                             id=f"{case.name}-{pattern_id}-n{n}-{dtype_id}")
        if combo_index == 0:
          yield pytest.param(case, pattern, dtypes, 3, "dynamic",
                             id=f"{case.name}-{pattern_id}-dynamic_n-{dtype_id}")


def _xla_instances():
  for case in ALL_CASES:
    dtypes = case.dtype_combinations()[0]
    for pattern in case.stacking_patterns():
      pattern_id = ",".join("stacked" if s else "invariant" for s in pattern)
      marks = [] if case.xla is True else [pytest.mark.skip(reason=str(case.xla))]
      yield pytest.param(case, pattern, dtypes, 3, "xla", marks=marks,
                         id=f"{case.name}-{pattern_id}-n3-xla")


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


def check_case(case, pattern, dtypes, n, mode):
  args = _arguments(case, pattern, dtypes, max(n, 1) if mode != "function" else n)
  if n == 0 and mode == "function":
    reference_args = _arguments(case, pattern, dtypes, 1)
  else:
    reference_args = args

  def body_for(arguments):
    def body(i):
      return case.build(*[tf.gather(a, i) if s else a for a, s in zip(arguments, pattern)])
    return body

  expected = testing.sequential(body_for(reference_args) if n else None, n,
                                testing.example_spec(body_for(reference_args)))
  actual = testing.run_pfor(body_for(args), n, mode=mode, fallback=case.allow_fallback)
  if case.compare == "values":
    testing.assert_allclose(actual, expected, case.tol)
  else:
    case.compare(actual, expected)


@pytest.mark.parametrize("case,pattern,dtypes,n,mode", list(_instances()))
def test_op_case(case, pattern, dtypes, n, mode):
  check_case(case, pattern, dtypes, n, mode)


@pytest.mark.parametrize("case,pattern,dtypes,n,mode", list(_xla_instances()))
def test_op_case_xla(case, pattern, dtypes, n, mode):
  check_case(case, pattern, dtypes, n, mode)
