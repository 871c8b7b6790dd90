"""Conversion cost, vectorize against TF's pfor, in interleaved rounds of one process.

  python -m benchmarks.conversion --suite=linear,map_fn --batch=128 --rounds=5

Two measures, side by side:
- "first call": what the suite's table reports, a form's first call (tracing, conversion,
  the runtime's graph optimization and first run) minus a steady call; the ratio vectorize /
  TF pfor per round, then the median.
- "added": the same cost beyond hand-batched code's. Hand-batched code pays the same kind of
  first-call cost with nothing to convert (tracing the caller, optimizing and starting its
  graph), so (vectorize - hand) / (TF pfor - hand) is the cost each pfor adds; taken as the
  ratio of the medians over rounds of the per-round differences (a per-round ratio swings
  wildly where TF pfor's part is small).
- "floor": hand-batched / TF pfor, the first-call ratio a pfor whose conversion cost nothing
  would read: it still traces the caller and the body (as hand-batched code traces its
  batched body), and the runtime still optimizes and starts the graph. Where the floor is
  above a target for the first-call ratio, no conversion can meet that target.
vectorize's own part (tracing the body and the walker) is timed inside the first call.

Each round builds every form anew, calls hand-batched and the loop first (as the suite does:
that warms autograph's cache of the user's code), then both pfors back to back, their order
alternating. Warm-up rounds come first and are not counted: the runtime keeps some first-run
costs per process and kernel shape (oneDNN primitives of a convolution, say), which the
first form to run a shape pays for the others; after them, each form pays only its own.
Seconds are CPU seconds of this process (all its threads), which a loaded machine disturbs
less than wall time.
"""

import collections
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import numpy as np
import tensorflow as tf

from benchmarks import memory  # pylint: disable=unused-import  (defines --batch)
from benchmarks import run as runner   # defines --suite and --rounds
from benchmarks import timing
from benchmarks import workload as wl
from benchmarks import workloads
from vectorize import trace
from vectorize import walker

flags.DEFINE_integer("warmup_rounds", 1, "rounds run before the counted ones (0: none)")
FLAGS = flags.FLAGS

_PFORS = (wl.VECTORIZE, wl.TF_PFOR)


class _OwnTime:
  """CPU seconds spent in vectorize's tracing of the body and in its walker (outermost
  calls only), while installed."""

  def __init__(self):
    self.seconds = collections.Counter()
    self._depth = collections.Counter()
    for module, name in ((trace, "trace"), (walker, "convert_graph")):
      setattr(module, name, self._timed(getattr(module, name), name))

  def _timed(self, fn, label):
    def timed(*args, **kwargs):
      if self._depth[label]:
        return fn(*args, **kwargs)
      self._depth[label] += 1
      start = time.process_time()
      try:
        return fn(*args, **kwargs)
      finally:
        self.seconds[label] += time.process_time() - start
        self._depth[label] -= 1
    return timed


def first_call_cost(fn):
  """CPU seconds of the first call of `fn` beyond its cheapest of three steady calls."""
  start = time.process_time()
  timing.run(fn)
  first = time.process_time() - start
  steady = []
  for _ in range(3):
    start = time.process_time()
    timing.run(fn)
    steady.append(time.process_time() - start)
  return first - min(steady)


def measure(workload, batch, num_rounds, own, warmup_rounds=0):
  """{form or 'own': [CPU seconds per counted round]}: conversion costs of hand-batched and
  both pfors, and vectorize's own part of its conversion."""
  costs = {form: [] for form in (wl.HAND,) + _PFORS + ("own",)}
  for k in range(warmup_rounds + num_rounds):
    if k == warmup_rounds:
      costs = {form: [] for form in costs}
    forms = workload.build(batch, False)
    costs[wl.HAND].append(first_call_cost(tf.function(forms[wl.HAND])))
    tf.function(forms[wl.LOOP])()
    for form in (_PFORS if k % 2 == 0 else _PFORS[::-1]):
      own.seconds.clear()
      fn = tf.function(forms[form])
      costs[form].append(first_call_cost(fn))
      if form == wl.VECTORIZE:
        costs["own"].append(sum(own.seconds.values()))
      if k == warmup_rounds:
        print(f"    {form}: {timing.count_ops(fn)} ops", flush=True)
  return {form: np.array(c) for form, c in costs.items()}


def added_ratio(costs):
  """(vectorize - hand) / (TF pfor - hand): medians over rounds of the per-round differences;
  nan where TF pfor adds nothing measurable (under a millisecond)."""
  v, t = (np.median(costs[f] - costs[wl.HAND]) for f in (wl.VECTORIZE, wl.TF_PFOR))
  return v / t if t > 1e-3 else float("nan")


def main(argv):
  del argv
  tf.get_logger().setLevel("ERROR")
  own = _OwnTime()
  runner._warm_up()   # pylint: disable=protected-access
  names = FLAGS.suite or [w.name for w in workloads.ALL]
  print(f"load {os.getloadavg()[0]:.1f}; CPU seconds, medians of rounds", flush=True)
  summary = []
  for workload in [w for w in workloads.ALL if w.name in names]:
    if wl.TF_PFOR in workload.crashes:
      continue
    print(f"  {workload.name} batch {FLAGS.batch}:", flush=True)
    try:
      c = measure(workload, FLAGS.batch, FLAGS.rounds or 5, own, FLAGS.warmup_rounds)
    except Exception as e:  # pylint: disable=broad-except
      print(f"    fails: {type(e).__name__}: {str(e)[:200]}", flush=True)
      continue
    v, t, h = c[wl.VECTORIZE], c[wl.TF_PFOR], c[wl.HAND]
    row = (workload.name, np.median(h), np.median(v), np.median(t), np.median(c["own"]),
           np.median(v / t), np.median(v - h), np.median(t - h), added_ratio(c),
           np.median(h / t))
    summary.append(row)
    print(f"    first call: vectorize {row[2]:.3f} s (own {row[4]:.3f}), tf pfor {row[3]:.3f} s, "
          f"hand-batched {row[1]:.3f} s; vectorize / tf pfor {row[5]:.2f} (rounds "
          f"{np.round(v / t, 2).tolist()}); added beyond hand-batched: vectorize "
          f"{row[6]:.3f} s, tf pfor {row[7]:.3f} s, ratio {row[8]:.2f}; floor {row[9]:.2f}; load "
          f"{os.getloadavg()[0]:.1f}", flush=True)
  print("\n| workload | hand | vectorize | tf pfor | vectorize own | first call v/t | "
        "floor h/t | added v | added t | added v/t |\n|---|---|---|---|---|---|---|---|---|---|")
  for name, h, v, t, own_part, first_ratio, added_v, added_t, added, floor in summary:
    print(f"| {name} | {h:.3f} | {v:.3f} | {t:.3f} | {own_part:.3f} | {first_ratio:.2f} | "
          f"{floor:.2f} | {added_v:.3f} | {added_t:.3f} | {added:.2f} |", flush=True)


if __name__ == "__main__":
  app.run(main)
