"""type_inference.infer: per-example dtypes and shapes from tracing assignments."""

import pytest
import tensorflow as tf

from tests.pc import programs
from tests.pc.passes import FLOAT, INT, run_until
from vectorize.errors import ConversionError
from vectorize.pc import ir


def test_fib_is_int_scalars_and_one_bool_condition():
  program = run_until(programs.fib, [INT], "types")
  assert set(program.types.values()) == {INT, ir.VarType(tf.bool, ())}
  assert program.types["fib._pc_t0"] == ir.VarType(tf.bool, ())
  assert program.returns == {"fib": (INT,)}


def test_vector_state_keeps_its_shape():
  program = run_until(programs.vector_walk, [ir.VarType(tf.float32, (3,)), INT], "types")
  assert program.types["vector_walk.w"] == ir.VarType(tf.float32, (3,))
  assert program.returns["vector_walk"] == (ir.VarType(tf.float32, (3,)),)


def test_tuples_out_of_a_recursion():
  program = run_until(programs.divmod_rec, [INT, INT], "types")
  assert program.returns["divmod_rec"] == (INT, INT)
  assert program.types["divmod_rec.q"] == INT


def _accumulate(x, n):
  acc = 0
  for k in range(n):
    acc = acc + x
  return acc


def test_an_int_literal_yields_to_the_float_it_meets():
  program = run_until(_accumulate, [FLOAT, INT], "types")
  assert program.types["_accumulate.acc"] == FLOAT


def _grows(x):
  y = tf.stack([x])
  y = tf.concat([y, y], 0)
  return y


def _mixed(x, n):
  if n > 0:
    y = x
  else:
    y = n
  return y


def _unbound(n):
  if n > 0:
    y = n
  return y


def test_a_variable_assigned_on_one_path_only_is_refused_by_liveness():
  with pytest.raises(ConversionError, match="test_type_inference.py:[0-9]+: .*`y` may be used "
                     "before it is assigned"):
    run_until(_unbound, [INT], "liveness")


def _no_base_case(n):
  return _no_base_case(n - 1)


@pytest.mark.parametrize("fn, types, words", [
    (_grows, [FLOAT], "`y` is float32[2] here but float32[1] elsewhere"),
    (_mixed, [FLOAT, INT], "`y` is int32[] here but float32[] elsewhere"),
    (_no_base_case, [INT], "never returns"),
])
def test_type_errors_name_the_variable_and_line(fn, types, words):
  with pytest.raises(ConversionError, match="test_type_inference.py:[0-9]+") as raised:
    run_until(fn, types, "types")
  assert words in str(raised.value)


INT64 = ir.VarType(tf.int64, ())


def test_a_range_counter_takes_the_dtype_of_an_int64_stop():
  """`for k in range(n)`: the counter starts from the literal 0 and meets n in `k < n`; it
  was refused ("Less ... int64 ... int32"), it counts in int64."""
  program = run_until(programs.hanoi_total, [INT64], "types")
  assert program.types["hanoi_total.k"] == INT64
  assert program.types["hanoi_total.total"] == INT64


def _splits(x, n):
  if n < 1:
    return 0
  return _splits(x, n - 1) + 1


def _two_int_dtypes(m, n):
  if n < 1:
    return 0
  return _two_int_dtypes(m, n - 1) + 1


def _float_literals(x):
  if x > 0:
    return 0.5
  return 1.5


@pytest.mark.parametrize("fn, types, want", [
    (programs.count_digits, [INT64], INT64),
    (programs.count_digits, [INT], INT),
    (_splits, [ir.VarType(tf.float64, ()), INT64], INT64),    # floats are another kind
    (_two_int_dtypes, [INT, INT64], INT),                       # two: the literal's own
    (_float_literals, [ir.VarType(tf.float64, ())], ir.VarType(tf.float64, ())),
])
def test_results_built_from_literals_take_their_parameters_dtype(fn, types, want):
  program = run_until(fn, types, "types")
  assert program.returns[fn.__name__] == (want,)


def _float_then_int(n):
  x = 0.5
  if n > 0:
    x = n
  return x


def _compares_int64_with_int32(n, m):
  for k in range(n):
    if k < m:
      return k
  return -1


def _range_of_two_dtypes(m, n):
  total = 0
  for k in range(m, n):
    total += 1
  return total


@pytest.mark.parametrize("fn, types, words", [
    (_float_then_int, [INT64], ["`x` is int64[] here but float32[] elsewhere",
                                "tf.cast(value, tf.float32)"]),
    (_compares_int64_with_int32, [INT64, INT], [
        "`if k < m:` failed", "`k` is int64[], `m` is int32[]", "tf.cast(m, tf.int64)"]),
    (_range_of_two_dtypes, [INT, INT64], [
        "`for k in range(m, n):` failed", "the `for` loop's counter is int32[]",
        "`n` is int64[]", "tf.cast(x, tf.int64)"]),
])
def test_dtype_clashes_name_the_line_the_values_and_the_cast(fn, types, words):
  """A float literal is never truncated to an int, and a clash of two dtypes the user gave
  names their line, their values' types and the cast that fixes it, never the frontend's
  own names (`_pc_t2 = _pc_i0 < n` was all the user saw)."""
  with pytest.raises(ConversionError, match="test_type_inference.py:[0-9]+") as raised:
    run_until(fn, types, "types")
  message = str(raised.value)
  for w in words:
    assert w in message
  assert "_pc_" not in message
