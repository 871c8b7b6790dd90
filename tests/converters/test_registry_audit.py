"""Every registered op type has a test case, and every case tests what it claims."""

import os

import pytest
import tensorflow as tf

import vectorize
from tests.converters.op_cases import ALL_CASES, EXPECTED_FALLBACK, UNTESTED

_PARTIAL = bool(os.environ.get("VECTORIZE_CASES"))


@pytest.mark.skipif(_PARTIAL, reason="VECTORIZE_CASES limits the case table")
def test_every_registered_op_type_has_a_case():
  covered = {t for case in ALL_CASES for t in case.covered_op_types}
  missing = sorted(set(vectorize.registered_op_types()) - covered - set(UNTESTED))
  assert not missing, f"registered op types with no OpCase: {missing}"


def test_every_case_op_type_is_registered_or_expected_to_fall_back():
  registered = set(vectorize.registered_op_types())
  unknown = sorted({t for case in ALL_CASES for t in case.covered_op_types
                    if t not in registered and t not in EXPECTED_FALLBACK})
  assert not unknown, f"OpCases name op types with no converter: {unknown}"


def _traced_op_types(case):
  specs = [tf.TensorSpec(shape, dtype) for shape, dtype in
           zip(case.shapes, case.dtype_combinations()[0])]
  graph = tf.function(case.build, autograph=False).get_concrete_function(*specs).graph
  types = set()
  pending = [graph]
  while pending:
    g = pending.pop()
    for op in g.get_operations():
      types.add(op.type)
    for fn in getattr(g, "_functions", {}).values():
      if getattr(fn, "graph", None) is not None:
        pending.append(fn.graph)
  return types


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.name)
def test_case_builds_the_op_types_it_names(case):
  missing = set(case.covered_op_types) - _traced_op_types(case)
  assert not missing, f"{case.name} claims {sorted(missing)} but its graph has none of them"


def _listed_op_types():
  path = os.path.join(os.path.dirname(__file__), "registered_op_types.txt")
  with open(path) as f:
    return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def test_no_listed_op_type_lost_its_converter():
  lost = sorted(set(_listed_op_types()) - set(vectorize.registered_op_types()))
  assert not lost, f"op types that had a converter and lost it: {lost}"


def test_registered_op_count_is_at_least_the_listed_coverage():
  assert len(vectorize.registered_op_types()) >= len(_listed_op_types()) >= 490
