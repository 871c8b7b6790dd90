"""The benchmark suite: every workload's forms compute the same thing, and the runner's
checks, ratios and reports do what they say."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import measure
from benchmarks import memory
from benchmarks import report
from benchmarks import timing
from benchmarks import workload as wl
from benchmarks import workloads


_NOT_INSTALLED = "is not installed (pip install -e '.[bench]')"


def _run_form(form):
  """A form's result, or None when the form is a comparison with a package of the bench
  extra (TFP) and the test extra alone is installed."""
  try:
    return tf.function(form)()
  except Exception as e:  # pylint: disable=broad-except
    if _NOT_INSTALLED in str(e):
      return None
    raise


# (workload, form) pairs not run here: the same code as another workload's form on another
# input. The two NUTS workloads' loop form is TFP's recursive sampler built by the same
# `nuts.samplers` for another target density; tracing it takes about 20 s, and pc_nuts runs it.
_SAME_CODE_AS_ANOTHER_WORKLOAD = {("pc_nuts_correlated100", wl.LOOP)}


@pytest.mark.parametrize("workload", workloads.ALL, ids=lambda w: w.name)
def test_forms_agree_with_hand_batched(workload):
  forms = workload.build(2, False)
  assert set(forms) == set(wl.FORMS)
  expected = _run_form(forms[wl.HAND])
  if expected is None:
    pytest.skip("the hand-batched form needs the bench extra (tensorflow-probability)")
  for form in (wl.VECTORIZE, wl.LOOP, wl.TF_PFOR):
    if form in workload.crashes or (workload.name, form) in _SAME_CODE_AS_ANOTHER_WORKLOAD:
      continue
    actual = _run_form(forms[form])
    if actual is None and form != wl.VECTORIZE:
      continue
    assert timing.max_rel_error(actual, expected) < 1e-4, form


@pytest.mark.parametrize("workload", [w for w in workloads.ALL if w.name in
                                      ("varlen_lstm", "varlen_lstm_constants", "per_example_lstm",
                                       "keras_dp_sgd", "data_pipeline")],
                         ids=lambda w: w.name)
def test_vectorize_under_xla_agrees(workload):
  forms = workload.build(3, True)
  expected = tf.function(forms[wl.HAND])()
  jit = not workload.compiles_inside
  actual = tf.function(forms[wl.VECTORIZE], jit_compile=jit)()
  assert timing.max_rel_error(actual, expected) < 1e-4


def _toy_build(batch, jit_compile=False):
  del jit_compile
  x = tf.range(batch * 3, dtype=tf.float32)
  x = tf.reshape(x, [batch, 3])

  def broken():
    raise ValueError("no such op")

  return {wl.HAND: lambda: x * 2.0,
          wl.VECTORIZE: lambda: x + x,
          wl.LOOP: lambda: x * 2.0 + 1.0,       # wrong on purpose
          wl.TF_PFOR: broken}


_TOY = wl.Workload(name="toy", title="x times two", unit="rows", build=_toy_build,
                   forms={wl.LOOP: "off by one"})


def test_measure_flags_wrong_and_failing_forms():
  records = measure.measure(_TOY, 4, xla=True, num_rounds=2)
  assert records[wl.VECTORIZE]["status"] == "ok"
  assert records[wl.VECTORIZE + measure.XLA]["status"] == "ok"
  assert records[wl.LOOP]["status"] == "wrong"
  assert "relative error" in records[wl.LOOP]["reason"]
  assert records[wl.TF_PFOR]["status"] == "fails"
  assert "no such op" in records[wl.TF_PFOR]["reason"]
  assert len(records[wl.VECTORIZE]["times"]) == 2
  assert len(records[wl.VECTORIZE]["cpu_times"]) == 2
  assert records[wl.VECTORIZE]["ops"] > 0
  assert measure.ratio(records, wl.VECTORIZE, wl.HAND) > 0
  assert measure.ratio(records, wl.TF_PFOR, wl.HAND) is None


def test_rounds_alternate_the_order_of_forms():
  calls = []
  forms = {name: (lambda name=name: calls.append(name)) for name in "abc"}
  times = timing.rounds(forms, 3, {name: 1 for name in forms})
  assert calls == list("abc") + list("cba") + list("abc")
  assert [len(t) for t in times.values()] == [3, 3, 3]


def test_ratios_and_geomean():
  assert timing.median_ratio([2.0, 4.0, 30.0], [1.0, 1.0, 10.0]) == 3.0
  assert report.geomean([1.0, 4.0, None]) == pytest.approx(2.0)
  assert report.geomean([None]) is None
  with pytest.raises(ValueError, match="shape"):
    timing.max_rel_error(np.ones([2]), np.ones([3]))
  assert timing.max_rel_error([np.array([1.0, 2.1])], [np.array([1.0, 2.0])]) == (
      pytest.approx(0.05))
  # An output that is zero up to round-off is measured at the scale of the largest output.
  assert timing.max_rel_error([np.ones([2]), np.array([1e-9])],
                              [np.ones([2]), np.array([-1e-9])]) < 1e-5
  assert timing.max_rel_error([np.ones([2]), np.array([0.1])],
                              [np.ones([2]), np.array([0.0])]) == pytest.approx(100.0)


def _record(ms, status="ok", conversion=0.1, ops=10):
  return {"status": status, "ms": ms, "times": [ms / 1e3] * 3, "first_s": conversion + ms / 1e3,
          "conversion_s": conversion, "ops": ops, "error": 0.0}


def test_report_states_targets(tmp_path):
  records = {wl.HAND: dict(_record(10.0), peak_mb=1234.6),
             wl.VECTORIZE: dict(_record(11.0, conversion=0.1), memory_error="exit 1: boom"),
             wl.LOOP: _record(50.0), wl.TF_PFOR: _record(10.0, conversion=0.4),
             wl.HAND + measure.XLA: _record(10.0), wl.VECTORIZE + measure.XLA: _record(14.0),
             wl.TF_PFOR + measure.XLA: {"status": "fails", "reason": "unsupported op"},
             wl.LOOP + measure.XLA: _record(40.0)}
  results = {"device": "test CPU", "tensorflow": tf.__version__, "date": "today", "rounds": 3,
             "command": "test", "quick": True,
             "workloads": [{"name": "toy", "title": "toy", "unit": "rows", "forms": {},
                            "batches": {"128": records}}]}
  row = report.target_row(results["workloads"][0])
  assert row["hand"] == pytest.approx(1.1)
  assert row["hand_xla"] == pytest.approx(1.4)
  assert row["tf"] == pytest.approx(1.1)
  assert row["tf_xla"] is None
  assert row["conversion_ratio"] == pytest.approx(0.25)
  assert row["compiles"]
  text = report.markdown(results)
  assert ("| toy | 128 | 1.10 ✓ | 1.40 ✗ | 1.10 ✗ | - | 0.10 / 0.40 (0.25 ✓) | 10 / 10 | ✓ |"
          in text)
  assert "fails: unsupported op" in text
  assert "| 0.10 | 10 | 0.0e+00 | 1,235 |" in text
  assert "| exit 1: boom |" in text
  assert "| **geometric mean** | | 1.10 ✓ | 1.40 ✗ |" in text
  assert "in CPU time" not in text      # results without CPU times: no CPU table
  # CPU-time ratios, from the same calls, in a table of their own.
  cpu_records = {label: dict(r, cpu_times=[0.005] * 3) if "times" in r else r
                 for label, r in records.items()}
  cpu_records[wl.VECTORIZE + measure.XLA]["cpu_times"] = [0.006] * 3
  cpu_results = dict(results, workloads=[dict(results["workloads"][0],
                                              batches={"128": cpu_records})])
  assert report.target_row(cpu_results["workloads"][0])["hand_xla_cpu"] == pytest.approx(1.2)
  text = report.markdown(cpu_results)
  assert "| toy | 1.00 ✓ | 1.20 ✓ | 1.00 ✓ | - |" in text
  assert "| **geometric mean** | 1.00 ✓ | 1.20 ✗ | 1.00 | - |" in text
  # A program-counter workload is in the table but not in the means.
  pc_entry = dict(results["workloads"][0], name="pc_toy",
                  batches={"128": dict(records, **{wl.VECTORIZE: _record(1000.0)})})
  text = report.markdown(dict(results, workloads=results["workloads"] + [pc_entry]))
  assert "| pc_toy | 128 | 100.00 ✗ |" in text
  assert "| **geometric mean** | | 1.10 ✓ | 1.40 ✗ |" in text
  path = report.write(results, str(tmp_path), "test")
  assert os.path.exists(path)
  with open(os.path.join(tmp_path, "test.json")) as f:
    assert json.load(f)["workloads"][0]["name"] == "toy"


def test_memory_of_a_form_in_its_own_process():
  ballast = np.ones([600, 1024, 1024], np.uint8)   # the child's peak is its own, not ours
  result = memory.measure("linear", wl.VECTORIZE, 4)
  del ballast
  assert 0 < result["peak_mb"] < 500, result
  assert result["baseline_mb"] > 100    # TensorFlow is loaded before the baseline
  assert "error" in memory.measure("no_such_workload", wl.VECTORIZE, 4)


def test_profile_parts():
  from benchmarks import profile_conversion  # pylint: disable=g-import-not-at-top
  part = profile_conversion.part_of
  assert part("/work/main/vectorize/walker.py", "convert_graph") == "vectorize engine"
  assert part("/repo/converters/nn.py", "_conv") == "converters"
  assert part("~", "<built-in method tensorflow.python._pywrap_tfe.TFE_Py_Execute>") == (
      "TF runtime (execute, instantiate, optimize)")
  assert part("/venv/site-packages/tensorflow/python/framework/ops.py", "f") == (
      "TF op layer and tracing")
  assert part("/usr/lib/python3.11/ast.py", "visit") == "other (Python, numpy)"


def test_merge_orders_workloads_as_the_suite():
  from benchmarks import merge   # pylint: disable=g-import-not-at-top
  head = {"device": "test CPU", "tensorflow": "x", "date": "today", "quick": True,
          "grappler": True}
  first = dict(head, command="run a", rounds=5,
               workloads=[{"name": "map_fn"}, {"name": "linear"}])
  second = dict(head, command="run b", rounds=7, workloads=[{"name": "convnet"}])
  result = merge.merged([first, second])
  assert [e["name"] for e in result["workloads"]] == ["linear", "convnet", "map_fn"]
  assert result["rounds"] == 5 and result["command"] == "run a and run b"
