"""explain(): counts per op type, fallback causes and reasons, nested conversions counted once."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from vectorize import engine
from vectorize import explanation as explain_module
from vectorize.explanation import explain

X = tf.constant(np.arange(24, dtype=np.float32).reshape(4, 6))
W = tf.constant(np.ones([6], np.float32))


def _kinds(explanation, op_type):
  return {k: v for k, v in explanation.counts[op_type].items() if v}


def test_explain_counts_vectorized_and_invariant_ops_of_a_small_body():
  def body(i):
    return tf.sin(tf.gather(X, i)) * tf.cos(W)   # Cos reads only W: invariant

  e = explain(body, 4)
  assert _kinds(e, "GatherV2") == {"vectorized": 1}
  assert _kinds(e, "Sin") == {"vectorized": 1}
  assert _kinds(e, "Cos") == {"invariant": 1}
  assert _kinds(e, "Mul") == {"vectorized": 1}
  assert e.num_fallbacks == 0 and e.error is None
  # Every op of the traced body once, except those making its inputs (index, captures).
  graph = engine.trace_loop_body(body).graph
  inputs = {t.ref() for t in graph.inputs}
  assert len(e.records) == sum(not any(t.ref() in inputs for t in op.outputs)
                               for op in graph.get_operations())
  assert e.num_vectorized + e.num_invariant == len(e.records)


def test_explain_names_op_type_and_cause_of_an_op_with_no_converter():
  calls = []

  def body(i):
    row = tf.numpy_function(lambda r: calls.append(1) or r, [X[i]], tf.float32)
    row.set_shape([6])
    return row * 2.0

  assert "PyFunc" not in vectorize.registered_op_types()
  e = explain(body, 4)
  assert not calls                                    # traced, never run
  assert _kinds(e, "PyFunc") == {"fallback": 1}
  (fallback,) = e.fallbacks
  assert (fallback.op_type, fallback.cause) == ("PyFunc", explain_module.NO_CONVERTER)
  assert "PyFunc (PyFunc) created at " in str(e) and ": no converter is registered" in str(e)


def test_explain_gives_the_reason_naming_the_input_when_a_converter_declines():
  def body(i):
    shape = tf.stack([-1, 3 + i * 0])   # a per-iteration shape argument (-1: the graph
                                        # does not know the output shape)
    return tf.reshape(X[i], shape)

  e = explain(body, 4)
  (fallback,) = e.fallbacks
  assert (fallback.op_type, fallback.cause) == ("Reshape", explain_module.DECLINED)
  assert "input 1" in fallback.reason
  assert "converter declined: input 1" in str(e)


def test_explain_with_fallback_off_reports_where_the_conversion_stopped():
  e = explain(lambda i: tf.reshape(X[i], tf.stack([-1, 3 + i * 0])), 4,
              fallback_to_while_loop=False)
  assert "Reshape" in e.error and e.num_fallbacks == 0
  assert "conversion stopped" in str(e)


def test_explain_counts_control_flow_ops_once_not_their_dry_runs():
  def body(i):
    row = X[i]
    picked = tf.cond(tf.shape(X)[0] > 2, lambda: tf.sin(row), lambda: tf.cos(row))
    return tf.while_loop(lambda k, s: k < i, lambda k, s: (k + 1, tf.sqrt(s + 1.0)),
                         (0, picked))[1]

  e = explain(body, 4)
  # The invariant cond and the stacked-condition loop both dry-run their bodies first.
  assert _kinds(e, "Sin") == {"vectorized": 1}
  assert _kinds(e, "Cos") == {"vectorized": 1}
  assert _kinds(e, "Sqrt") == {"vectorized": 1}
  assert e.num_fallbacks == 0


def test_explain_includes_ops_of_called_functions():
  inner = tf.function(lambda row: tf.exp(row) + 1.0)
  e = explain(lambda i: inner(X[i]), 4)
  assert _kinds(e, "Exp") == {"vectorized": 1}


def test_explain_table_lists_every_op_type():
  text = str(explain(lambda i: tf.sin(X[i]), 3))
  assert text.splitlines()[0].startswith("vectorize.explain:")
  for op_type in ("Sin", "StridedSlice"):
    assert any(line.split()[0] == op_type for line in text.splitlines()[2:])


def test_explain_reraises_errors_of_the_body_itself():
  with pytest.raises(TypeError, match="object"):
    explain(lambda i: object(), 3)



def test_explain_and_the_warning_name_the_users_line_of_a_fallback(caplog):
  """Issue 24, 4: as the fallback-off error does."""
  def body(i):
    return tf.ensure_shape(tf.numpy_function(np.sort, [X[i]], tf.float32), [6])
  line = body.__code__.co_firstlineno + 1
  e = explain(body, 4)
  [fallback] = e.fallbacks
  assert f"test_explain.py:{line}" in fallback.location
  assert f"test_explain.py:{line}" in str(e)
  with caplog.at_level("WARNING"):
    vectorize.pfor(lambda i: body(i) * 1.0, 4)
  assert any(f"test_explain.py:{line}" in r.getMessage() and "PyFunc" in r.getMessage()
             for r in caplog.records)
