"""benchmarks/kernel_profile.py and benchmarks/compare_forms.py: the kernels a profiled call
runs are found and summed, and a cell re-measured prints each form's times and ratios."""

import tensorflow as tf

from benchmarks import compare_forms
from benchmarks import kernel_profile


def test_kernel_events_name_the_ops_a_call_runs():
  x = tf.random.stateless_normal([64, 64], [1, 2])
  fn = tf.function(lambda: tf.nn.relu(tf.matmul(x, x)))
  fn()
  events = kernel_profile.kernel_events(fn, 2)
  types = {op_type for _, op_type, _ in events}
  assert any("MatMul" in t for t in types) and any("Relu" in t for t in types)
  assert all(us >= 0 for _, _, us in events)


def test_summary_sums_per_call_by_op_type_and_node():
  events = [("a", "MatMul", 3000.0), ("b", "Relu", 1000.0),     # call 1
            ("a", "MatMul", 1000.0), ("b", "Relu", 1000.0)]     # call 2
  lines = [line.split() for line in kernel_profile.summary(events, calls=2, top=5)]
  assert lines[0] == ["kernels", "3.0", "ms", "per", "call,", "2", "kernels"]
  assert ["2.00", "1", "MatMul"] in lines and ["1.00", "1", "Relu"] in lines
  assert ["2.00", "a:MatMul"] in lines


def test_compare_forms_prints_ratios_to_the_first_form(capsys):
  compare_forms.FLAGS(["compare_forms", "--cell_workload=linear", "--cell_batch=4",
                       "--compare_rounds=1", "--cell_forms=hand-batched,vectorize"])
  compare_forms.main([])
  out = capsys.readouterr().out
  assert "hand-batched" in out and "/ hand-batched: wall 1.000" in out
  assert "vectorize" in out and "load after" in out
