"""frontend.build: Python source -> basic blocks; what it refuses names the user's line."""

import types

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.pc import programs
from vectorize.errors import ConversionError
from vectorize.pc import frontend, ir
from tests.pc.passes import instructions


def test_fib_has_a_branch_two_calls_and_two_returns():
  program = frontend.build(programs.fib)
  assert [f.name for f in program.functions] == ["fib"]
  calls = instructions(program, ir.Call)
  assert [c.callee for c in calls] == ["fib", "fib"]
  assert len(instructions(program, ir.Return)) == 2
  assert len(instructions(program, ir.Branch)) == 1


def test_mutual_recursion_finds_both_functions_by_name():
  program = frontend.build(programs.is_even)
  assert [f.name for f in program.functions] == ["is_even", "is_odd"]


def test_a_plain_helper_stays_inside_the_expression():
  program = frontend.build(programs.power)
  assert [f.name for f in program.functions] == ["power"]
  assert any("square(" in a.expr for a in instructions(program, ir.Assign))


def test_nested_calls_evaluate_the_inner_call_first():
  calls = instructions(frontend.build(programs.mc91), ir.Call)
  assert calls[1].args == calls[0].targets


def test_return_of_a_call_takes_every_value_the_callee_returns():
  program = frontend.build(programs.digit_stats)
  calls = {c.callee: c for c in instructions(program, ir.Call)}
  assert len(calls["digits"].targets) == 2 and len(calls["digit_stats"].targets) == 2
  returns = instructions(program, ir.Return)
  assert {r.values for r in returns} >= {calls["digits"].targets}


def test_every_block_ends_in_a_terminator_and_every_label_exists():
  for case in programs.CASES:
    program = frontend.build(case.fn)
    labels = {b.label for b in program.blocks()}
    for block in program.blocks():
      term = block.terminator
      assert isinstance(term, (ir.Goto, ir.Branch, ir.Return)), (case.name, block)
      for target in (getattr(term, "label", None), getattr(term, "if_true", None),
                     getattr(term, "if_false", None)):
        assert target is None or target in labels


def test_the_program_prints_readably():
  text = str(frontend.build(programs.fib))
  assert "def fib(fib.n)" in text and "call fib(" in text and "return" in text


def _with_list(n):
  xs = [n]
  xs.append(n)
  return n


def _with_try(n):
  try:
    return n
  except ValueError:
    return n


def _for_over_list(n):
  for k in [1, 2]:
    n = n + k
  return n


def _falls_off(n):
  if n > 0:
    return n


def _call_in_and(n):
  if n > 0 and _call_in_and(n - 1) > 0:
    return n
  return n


@pytest.mark.parametrize("fn, words", [
    (_with_list, "expression statement"),
    (_with_try, "`Try` statements are not supported"),
    (_for_over_list, "only `for name in range(...)`"),
    (_falls_off, "can reach its end without `return`"),
    (_call_in_and, "inside `and` / `or`"),
])
def test_refusals_name_the_line_and_the_fix(fn, words):
  with pytest.raises(ConversionError) as raised:
    frontend.build(fn)
  message = str(raised.value)
  assert words in message
  assert "test_frontend.py:" in message
  line = int(message.split("test_frontend.py:")[1].split(":")[0])
  assert fn.__code__.co_firstlineno <= line <= fn.__code__.co_firstlineno + 5


def test_while_true_has_no_exit_of_its_own():
  program = frontend.build(programs.isqrt_ceil)
  assert not any(i.cond.endswith(("True", "1")) for i in instructions(program, ir.Branch))
  assert len(instructions(program, ir.Branch)) == 1          # only the `if` inside


def test_a_chained_comparison_evaluates_each_operand_once():
  (test,) = [a for a in instructions(frontend.build(programs.count_in_range), ir.Assign)
             if "DATA" in a.expr and "<" in a.expr]
  assert test.expr.count("DATA[j]") == 1 and "__autobatch_chain__" in test.expr


fib = programs.fib


def _later_operand_call(n):
  if 0 <= n < fib(n):
    return 1
  return 0


def _conditional_call(n):
  return fib(n) if n > 2 else n


def _first_operands_call(n):
  if fib(n) <= n < 10:
    return 1
  return 0


def test_calls_python_may_skip_are_refused():
  with pytest.raises(ConversionError, match=r"test_frontend.py:\d+: .*chained comparison"):
    frontend.build(_later_operand_call)
  with pytest.raises(ConversionError, match=r"test_frontend.py:\d+: .*conditional expression"):
    frontend.build(_conditional_call)
  program = frontend.build(_first_operands_call)
  calls = [i for b in program.function("_first_operands_call").blocks for i in b.body
           if isinstance(i, ir.Call)]
  assert [c.callee for c in calls] == ["fib"]


def _pick_pair(v, n):
  """A comprehension's variable (`i`) lives in the comprehension, not in the function."""
  if n == 0:
    return tf.stack([v[i] * 2.0 for i in (0, 2)])
  return _pick_pair(v * 0.5, n - 1)


def test_a_comprehension_variable_is_not_a_variable_of_the_function():
  program = frontend.build(_pick_pair)
  assigned = {t for a in instructions(program, ir.Assign) for t in a.targets}
  assert "_pick_pair.i" not in assigned and not any(
      "_pick_pair.i" in a.reads for a in instructions(program, ir.Assign))
  v = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
  n = tf.constant([0, 2])
  got = vectorize.autobatch(_pick_pair)(v, n)
  want = tf.stack([_pick_pair(v[k], n[k]) for k in range(2)])
  np.testing.assert_allclose(got.numpy(), want.numpy())


_LIBRARY = types.SimpleNamespace(fib=programs.fib)


def _fib_through_an_attribute(n):
  return _LIBRARY.fib(n) + 1


def test_a_recursive_function_called_through_an_attribute_is_named_in_the_error():
  with pytest.raises(ConversionError) as raised:
    vectorize.autobatch(_fib_through_an_attribute)(tf.constant([3, 5]))
  message = str(raised.value)
  assert "test_frontend.py" in message and "_LIBRARY.fib(n)" in message
  assert "called through an attribute" in message and "by its name" in message
  assert "dtype" not in message.split("(per example")[1]     # not the advice to cast
