"""registry: one converter per (op type, kind), duplicates refused, families, lookup, the
sorted listings, and the audit of every kind against registered_kinds.txt."""

import os

import pytest

import vectorize
from vectorize import registry


@pytest.fixture
def scratch_types():
  made = []
  yield made
  for op_type in made:
    registry._CONVERTERS.pop(op_type, None)  # pylint: disable=protected-access


def test_register_then_lookup_returns_the_converter(scratch_types):
  scratch_types.append("TestOnlyRegistered")
  convert = registry.register("TestOnlyRegistered")(lambda op: None)
  assert registry.lookup("TestOnlyRegistered") is convert
  assert "TestOnlyRegistered" in registry.registered_op_types()


def test_registering_a_type_twice_raises(scratch_types):
  scratch_types.append("TestOnlyTwice")
  registry.register("TestOnlyTwice")(lambda op: None)
  with pytest.raises(ValueError, match="TestOnlyTwice.*already registered"):
    registry.register("TestOnlyTwice")(lambda op: None)


def test_lookup_of_an_unknown_type_is_none():
  assert registry.lookup("NoSuchOpType") is None


def test_registered_op_types_are_sorted_and_public():
  types = vectorize.registered_op_types()
  assert types == sorted(types)
  assert {"MatMul", "If", "While", "PartitionedCall", "ReluGrad", "MaxPoolGrad"} <= set(types)


def _listed_kinds():
  path = os.path.join(os.path.dirname(__file__), "registered_kinds.txt")
  with open(path) as f:
    lines = [line.strip() for line in f if line.strip() and not line.startswith("#")]
  return {tuple(line.split(": ", 1)) for line in lines}


def test_every_kind_is_audited_and_none_lost_a_converter():
  listed = _listed_kinds()
  assert {kind for kind, _ in listed} == set(registry.KINDS)
  now = {(kind, t) for kind, types in registry.registered().items() for t in types}
  lost = sorted(listed - now)
  assert not lost, f"(kind, op type) pairs that had a converter and lost it: {lost}"


def test_the_public_listing_is_the_tensor_kinds_and_every_kind_is_listed():
  assert vectorize.registered_op_types() == registry.registered_op_types(registry.TENSOR)
  kinds = registry.registered()
  assert set(kinds) == set(registry.KINDS)
  assert {"Add", "Mul", "Sum", "ConcatV2"} <= set(kinds[registry.RAGGED])
  assert {"Add", "ResizeBilinear"} <= set(kinds[registry.MULTI_AXIS])
  assert "DecodeJpeg" in kinds[registry.MULTI_AXIS_PRODUCER]


def test_a_familys_converter_serves_its_op_types_and_an_own_one_comes_first(scratch_types):
  fam = registry.family("test-only family")
  fam.add("TestOnlyFamilyA", "TestOnlyFamilyB")
  shared = fam.converts(registry.RAGGED)(lambda op: "family")
  own = registry.register("TestOnlyFamilyB", kind=registry.RAGGED)(lambda op: "own")
  try:
    assert registry.lookup("TestOnlyFamilyA", registry.RAGGED) is shared
    assert registry.lookup("TestOnlyFamilyB", registry.RAGGED) is own
    assert registry.lookup("TestOnlyFamilyA", registry.MULTI_AXIS) is None
    assert {"TestOnlyFamilyA", "TestOnlyFamilyB"} <= set(
        registry.registered_op_types(registry.RAGGED))
    with pytest.raises(ValueError, match="already registered"):
      fam.converts(registry.RAGGED)(lambda op: None)
  finally:
    registry._FAMILIES.remove(fam)  # pylint: disable=protected-access
    registry._TABLES[registry.RAGGED].pop("TestOnlyFamilyB")  # pylint: disable=protected-access


def test_a_multi_axis_converter_says_which_ops_it_accepts(scratch_types):
  convert = registry.register("TestOnlyAccepting", kind=registry.MULTI_AXIS,
                              accepts=lambda op: op.name == "yes")(lambda op: None)
  try:
    assert registry.lookup("TestOnlyAccepting", registry.MULTI_AXIS) is convert
    yes = type("Op", (), {"type": "TestOnlyAccepting", "name": "yes"})()
    no = type("Op", (), {"type": "TestOnlyAccepting", "name": "no"})()
    assert registry.accepts(yes, registry.MULTI_AXIS)
    assert not registry.accepts(no, registry.MULTI_AXIS)
  finally:
    registry._TABLES[registry.MULTI_AXIS].pop("TestOnlyAccepting")  # pylint: disable=protected-access
    registry._ACCEPTS.pop((registry.MULTI_AXIS, "TestOnlyAccepting"))  # pylint: disable=protected-access


def test_an_unknown_kind_is_a_clear_error():
  with pytest.raises(ValueError, match="'raged' is no value kind; the kinds are tensor, ragged"):
    vectorize.registered_op_types("raged")
  assert vectorize.registered_op_types("ragged") == registry.registered_op_types(registry.RAGGED)
