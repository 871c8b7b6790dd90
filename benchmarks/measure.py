"""Measures one workload at one batch size: every form plain and under XLA, checked against
hand-batched, then timed in interleaved rounds."""

import gc
import time

import numpy as np
import tensorflow as tf

from benchmarks import timing
from benchmarks import workload as wl

XLA = " (XLA)"
# First calls run in this order: hand-batched warms the runtime for the rest, and the loop
# (which traces the per-example code too) warms autograph's cache of the user's functions
# for both pfor forms, so neither pays for transpiling it alone.
_FIRST_CALL_ORDER = (wl.HAND, wl.LOOP, wl.VECTORIZE, wl.TF_PFOR)


def functions(workload, batch, xla):
  """{label: tf.function} of every form, plain and (if `xla`) compiled, in first-call order."""
  plain = workload.build(batch, False)
  # Built anew: a form may hold state its calls change (a training step's weights).
  compiled = workload.build(batch, True) if xla else None
  fns = {}
  for form in _FIRST_CALL_ORDER:
    fns[form] = tf.function(plain[form])
  if xla:
    for form in _FIRST_CALL_ORDER:
      fns[form + XLA] = (tf.function(compiled[form]) if workload.compiles_inside else
                         tf.function(compiled[form], jit_compile=True))
  return fns


def _first_line(error):
  """The line of an error that says what went wrong (autograph puts the user's traceback
  first, and the underlying error last)."""
  lines = [l.strip() for l in str(error).splitlines() if l.strip()]
  if lines and lines[0] == "in user code:":
    lines = lines[-1:]
  return f"{type(error).__name__}: {lines[0][:160] if lines else ''}"


def measure(workload, batch, xla=True, num_rounds=5, tolerance=1e-3):
  """{label: record} for each form at this batch size.

  A record holds `status` ("ok", "fails" or "wrong"), and for working forms `ms` (median
  steady-state milliseconds per call), `first_s` (the first call: tracing, conversion,
  compilation and a run), `conversion_s` (first call minus a steady call), `ops` (in the
  traced graph, nested functions included), `error` (max relative error against
  hand-batched), `times` (seconds per round, for ratios within rounds) and `cpu_times` (the
  process's CPU seconds of the same calls).
  """
  fns = functions(workload, batch, xla)
  records, reference = {}, None
  for label, fn in fns.items():
    if label in workload.crashes:
      records[label] = {"status": "fails", "reason": workload.crashes[label]}
      continue
    gc.collect()   # a collection pause belongs to no form
    try:
      start = time.perf_counter()
      output = timing.run(fn)
      first = time.perf_counter() - start
      records[label] = {"status": "ok", "first_s": first, "second_s": timing.seconds(fn),
                        "ops": timing.count_ops(fn)}
    except Exception as e:  # pylint: disable=broad-except
      records[label] = {"status": "fails", "reason": _first_line(e)}
      if label == wl.HAND:
        raise RuntimeError(f"{workload.name}: the hand-batched form fails: {e}") from e
      continue
    if reference is None:
      reference = output      # hand-batched's: it runs first
    if label in workload.unchecked:   # timed, not compared: its error reads nan
      records[label].update(error=float("nan"), unchecked=workload.unchecked[label])
    else:
      _check(records[label], output, reference, tolerance)
    del output                # per-example gradients of a convnet: a GB per form
  working = {label: fns[label] for label, r in records.items() if r["status"] == "ok"}
  calls = {label: timing.calls_for(records[label]["second_s"]) for label in working}
  cpu = {}
  times = timing.rounds(working, num_rounds, calls, cpu)
  for label, t in times.items():
    r = records[label]
    r["times"] = t
    r["cpu_times"] = cpu[label]
    r["ms"] = 1e3 * float(np.median(t))
    r["conversion_s"] = r["first_s"] - r["ms"] / 1e3
  return records


def _check(record, output, reference, tolerance):
  try:
    error = timing.max_rel_error(output, reference)
  except ValueError as e:
    error = float("inf")
    record["reason"] = str(e)
  record["error"] = error
  if not error <= tolerance:
    record["status"] = "wrong"
    record.setdefault("reason", f"max relative error {error:.1e} > {tolerance:.0e}")


def ratio(records, label, baseline, key="times"):
  """Median within-round time ratio of two working forms, or None; key="cpu_times" for
  CPU time (absent from results written before it was recorded)."""
  a, b = records.get(label, {}), records.get(baseline, {})
  if key not in a or key not in b:
    return None
  return timing.median_ratio(a[key], b[key])
