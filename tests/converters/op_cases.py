"""The table of per-op test cases: one `OpCase` per op type or variant.

Each family contributes a list (`cases_<family>.py`); `ALL_CASES` joins them. A case's
builder is written with public TF ops on per-iteration arguments; `test_op_cases.py` expands
it over stacking patterns, loop lengths, modes and dtypes and compares `pfor` with the
sequential reference, with fallback disabled unless the case allows it.
"""

import dataclasses
import itertools
from typing import Callable, Optional, Sequence

import numpy as np
import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class OpCase:
  """One op (or variant) to test.

  Attributes:
    name: the test id prefix, `OpType` or `OpType-variant`.
    build: builder(*args) -> tensor or nested tensors, on per-iteration arguments.
    shapes: per-iteration shape of each tensor argument.
    dtypes: dtype combinations to test; each entry is a dtype (for every argument) or a tuple
      with one dtype per argument.
    op_types: op types this case covers (default: the name before the first '-').
    tol: absolute and relative tolerance for floating outputs.
    allow_fallback: run with fallback allowed (the case documents a known fallback).
    patterns: stacking patterns to test (tuples of bools, one per argument); default every
      pattern except all-invariant.
    loop_lengths: static loop lengths to test.
    make: per-argument generators `make(rng, shape, dtype) -> np.ndarray` (None: default).
    xla: True, or the reason this case is skipped under XLA.
    compare: 'values' (default) or a function(actual, expected) for ops like random sampling.
    runtime_args: in the run-time-n and XLA tests, pass the arguments as function inputs
      (run-time values); False, with a comment saying why, where an argument must be a
      trace-time constant (e.g. an axis XLA needs at compile time).
  """
  name: str
  build: Callable
  shapes: Sequence
  dtypes: Sequence = (tf.float32,)
  op_types: Sequence = ()
  tol: float = 1e-5
  allow_fallback: bool = False
  patterns: Optional[Sequence] = None
  loop_lengths: Sequence = (1, 3, 0)
  make: Optional[Sequence] = None
  xla: object = True
  compare: object = "values"
  runtime_args: bool = True

  @property
  def covered_op_types(self):
    return tuple(self.op_types) or (self.name.split("-")[0],)

  def stacking_patterns(self):
    if self.patterns is not None:
      return [tuple(p) for p in self.patterns]
    k = len(self.shapes)
    return [p for p in itertools.product((True, False), repeat=k) if any(p)]

  def dtype_combinations(self):
    out = []
    for d in self.dtypes:
      out.append(tuple(d) if isinstance(d, (tuple, list)) else (d,) * len(self.shapes))
    return out


def positive(rng, shape, dtype):
  """Values in [0.5, 2): for log, sqrt, division, pow."""
  return rng.uniform(0.5, 2.0, shape).astype(tf.as_dtype(dtype).as_numpy_dtype)


def unit_interval(rng, shape, dtype):
  """Values in (-0.9, 0.9): for atanh, asin, acos."""
  return rng.uniform(-0.9, 0.9, shape).astype(tf.as_dtype(dtype).as_numpy_dtype)


def indices_below(limit):
  """Integer indices in [0, limit)."""
  def make(rng, shape, dtype):
    return rng.integers(0, limit, shape).astype(tf.as_dtype(dtype).as_numpy_dtype)
  return make


def nonzero_ints(rng, shape, dtype):
  """Integers in [1, 5]: for integer division and modulo."""
  return rng.integers(1, 6, shape).astype(tf.as_dtype(dtype).as_numpy_dtype)


FAMILIES = ("elementwise", "reductions", "shapes", "slicing", "linalg", "nn", "random",
            "state", "tensor_lists", "calls", "control_flow", "strings", "parsing", "image",
            "spectral", "arrays", "per_row", "ragged")


def _family_modules():
  """The `cases_<family>` modules; VECTORIZE_CASES=a,b limits them (for quick local runs)."""
  import importlib  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  wanted = os.environ.get("VECTORIZE_CASES")
  names = wanted.split(",") if wanted else FAMILIES
  return [importlib.import_module(f"tests.converters.cases_{name}") for name in names]


_MODULES = _family_modules()
ALL_CASES = [case for m in _MODULES for case in m.CASES]

# Registered op types deliberately without an OpCase: {op_type: reason}.
UNTESTED = {k: v for m in _MODULES for k, v in getattr(m, "UNTESTED", {}).items()}

# Op types that cases exercise but that are expected to fall back: {op_type: reason}.
EXPECTED_FALLBACK = {k: v for m in _MODULES
                     for k, v in getattr(m, "EXPECTED_FALLBACK", {}).items()}
