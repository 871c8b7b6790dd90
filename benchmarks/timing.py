"""Timing that survives a shared, noisy machine: warm-up excluded, forms interleaved round
by round, medians of rounds, ratios taken within a round."""

import time

import numpy as np
import tensorflow as tf


def _run(fn):
  out = fn()
  for t in tf.nest.flatten(out):
    if hasattr(t, "numpy"):
      t.numpy()
  return out


def first_call_seconds(fn):
  """Seconds of the first call (tracing, conversion, compilation and one run)."""
  start = time.perf_counter()
  _run(fn)
  return time.perf_counter() - start


def warm_autograph(fn):
  """Traces `fn` once under autograph, so that the first form timed does not pay alone for
  transpiling the user's code (autograph caches it per function)."""
  tf.function(fn).get_concrete_function()


def compare(forms, rounds=7, calls_per_round=3, baseline=None):
  """Times each form; returns {name: {'ms': median, 'ratio': median ratio to baseline}}.

  Args:
    forms: {name: zero-argument callable}, each already warmed up.
    rounds: rounds; in each, every form runs `calls_per_round` times, forms interleaved.
    baseline: the name ratios are taken against (default: the first form).
  """
  baseline = baseline or next(iter(forms))
  per_round = {name: [] for name in forms}
  for _ in range(rounds):
    for name, fn in forms.items():
      samples = []
      for _ in range(calls_per_round):
        start = time.perf_counter()
        _run(fn)
        samples.append(time.perf_counter() - start)
      per_round[name].append(min(samples))
  results = {}
  for name, times in per_round.items():
    ratios = [t / b for t, b in zip(times, per_round[baseline])]
    results[name] = {"ms": 1e3 * float(np.median(times)), "ratio": float(np.median(ratios))}
  return results


def report_against(forms, title, baseline, rounds):
  """Checks every form's output against `baseline`'s, times them, prints a small table."""
  reference = forms[baseline]()
  for name, fn in forms.items():
    print(f"{name}: max rel error {max_rel_error(fn(), reference):.1e}")
  results = compare(forms, rounds=rounds, baseline=baseline)
  print(title)
  for name, r in results.items():
    print(f"{name:<24}{r['ms']:>9.1f} ms{r['ratio']:>8.2f}x {baseline}")
  return results


def max_abs_error(actual, expected):
  errors = [np.max(np.abs(np.asarray(a) - np.asarray(e))) if np.size(e) else 0.0
            for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected))]
  return float(max(errors))


def max_rel_error(actual, expected):
  errors = []
  for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
    a, e = np.asarray(a, np.float64), np.asarray(e, np.float64)
    if e.size:
      errors.append(np.max(np.abs(a - e)) / max(np.max(np.abs(e)), 1e-12))
  return float(max(errors)) if errors else 0.0


def count_ops(fn):
  """Ops in the graph of a `tf.function` (traced without arguments), nested functions
  included."""
  graph = fn.get_concrete_function().graph
  total, pending, seen = 0, [graph], set()
  while pending:
    g = pending.pop()
    total += len(g.get_operations())
    for name, f in getattr(g, "_functions", {}).items():
      if name not in seen and getattr(f, "graph", None) is not None:
        seen.add(name)
        pending.append(f.graph)
  return total
