"""Timing that survives a shared, noisy machine: warm-up excluded, forms interleaved round
by round, medians of rounds, ratios taken within a round."""

import time

import numpy as np
import tensorflow as tf


def run(fn):
  """Calls `fn` and waits for its results."""
  out = fn()
  for t in tf.nest.flatten(out):
    if hasattr(t, "numpy"):
      t.numpy()
  return out


def seconds(fn):
  """Seconds of one call of `fn`, results fetched."""
  return wall_and_cpu_seconds(fn)[0]


def wall_and_cpu_seconds(fn):
  """(wall, CPU) seconds of one call of `fn`, results fetched. CPU time is the process's, all
  threads: on a loaded machine it counts our own work and not the waits for a core, so its
  ratios are steadier than wall time's."""
  start, start_cpu = time.perf_counter(), time.process_time()
  run(fn)
  return time.perf_counter() - start, time.process_time() - start_cpu


def rounds(forms, num_rounds, calls, cpu=None):
  """Per-round times of each form: {name: [seconds per round]}.

  In each round every form runs `calls[name]` times back to back (the best of them counts),
  forms interleaved, so a slow spell of the machine hits all forms of a round alike. Every
  other round runs the forms in reverse order: a form that always ran after a given one
  (whose data it finds in cache, or whose threads it waits out) was 5% off on the linear
  workload against the same ops in alternating order. A dict passed as `cpu` gets the CPU
  seconds of each round's fastest call.
  """
  times = {name: [] for name in forms}
  for k in range(num_rounds):
    order = list(forms) if k % 2 == 0 else list(forms)[::-1]
    for name in order:
      wall, cpu_seconds = min(wall_and_cpu_seconds(forms[name]) for _ in range(calls[name]))
      times[name].append(wall)
      if cpu is not None:
        cpu.setdefault(name, []).append(cpu_seconds)
  return times


def calls_for(seconds_per_call, budget=0.1, most=20):
  """Calls per round so that quick forms are timed over about `budget` seconds."""
  return int(max(1, min(most, budget // max(seconds_per_call, 1e-6))))


def median_ratio(times, other):
  """Median over rounds of times[k] / other[k]."""
  return float(np.median([t / o for t, o in zip(times, other)]))


def max_rel_error(actual, expected, floor=1e-3):
  """Largest |actual - expected| over the largest |expected|, per output, worst output.

  An output whose expected values are all near zero (the gradient of an attention key's bias
  is zero up to round-off: softmax ignores a shift) is measured against `floor` times the
  largest expected value of any output instead, so round-off is not an error there."""
  actual, expected = tf.nest.flatten(actual), tf.nest.flatten(expected)
  if len(actual) != len(expected):
    raise ValueError(f"{len(actual)} outputs where {len(expected)} were expected")
  pairs = []
  for a, e in zip(actual, expected):
    a, e = _floats(a), _floats(e)   # float32 stays float32: outputs can be GBs
    if a.shape != e.shape:
      raise ValueError(f"an output has shape {a.shape} where {e.shape} was expected")
    if e.size:
      pairs.append((np.max(np.abs(a - e)), np.max(np.abs(e))))
  if not pairs:
    return 0.0
  smallest_scale = max(floor * max(scale for _, scale in pairs), 1e-12)
  return float(max(error / max(scale, smallest_scale) for error, scale in pairs))


def _floats(t):
  t = np.asarray(t)
  return t if np.issubdtype(t.dtype, np.floating) else t.astype(np.float64)


def count_ops(fn):
  """Ops in the graph of a `tf.function` (already traced without arguments), nested functions
  (conditional branches, loop bodies, calls) included."""
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
