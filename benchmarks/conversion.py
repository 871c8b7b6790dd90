"""Conversion cost, vectorize against TF's pfor, in interleaved rounds of one process.

  python -m benchmarks.conversion --suite=linear,map_fn --batch=128 --rounds=5

Conversion is what the suite's table reports: a form's first call (tracing, conversion, the
runtime's graph optimization and first run) minus a steady call. Hand-batched code pays the
same kind of first-call cost with nothing to convert (tracing the job, optimizing and
starting its graph), so it is printed beside, with each pfor's cost beyond it. vectorize's
own part (tracing the body and the walker) is timed inside the first call.

Each round builds every form anew, calls hand-batched and the loop first (as the suite does:
that warms autograph's cache of the user's code), then both pfors back to back, their order
alternating; ratios are taken within a round, then the median. Seconds are CPU seconds of
this process (all its threads), which a loaded machine disturbs less than wall time.
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


def measure(workload, batch, num_rounds, own):
  """{form or 'own': [CPU seconds per round]}: conversion costs of hand-batched and both
  pfors, and vectorize's own part of its conversion."""
  costs = {form: [] for form in (wl.HAND,) + _PFORS + ("own",)}
  for k in range(num_rounds):
    forms = workload.build(batch, False)
    costs[wl.HAND].append(first_call_cost(tf.function(forms[wl.HAND])))
    tf.function(forms[wl.LOOP])()
    for form in (_PFORS if k % 2 == 0 else _PFORS[::-1]):
      own.seconds.clear()
      fn = tf.function(forms[form])
      costs[form].append(first_call_cost(fn))
      if form == wl.VECTORIZE:
        costs["own"].append(sum(own.seconds.values()))
      if k == 0:
        print(f"    {form}: {timing.count_ops(fn)} ops", flush=True)
  return {form: np.array(c) for form, c in costs.items()}


def main(argv):
  del argv
  tf.get_logger().setLevel("ERROR")
  own = _OwnTime()
  runner._warm_up()   # pylint: disable=protected-access
  names = FLAGS.suite or [w.name for w in workloads.ALL]
  print(f"load {os.getloadavg()[0]:.1f}; CPU seconds, medians of rounds", flush=True)
  for workload in [w for w in workloads.ALL if w.name in names]:
    if wl.TF_PFOR in workload.crashes:
      continue
    print(f"  {workload.name} batch {FLAGS.batch}:", flush=True)
    try:
      c = measure(workload, FLAGS.batch, FLAGS.rounds or 5, own)
    except Exception as e:  # pylint: disable=broad-except
      print(f"    fails: {type(e).__name__}: {str(e)[:200]}", flush=True)
      continue
    v, t, h = c[wl.VECTORIZE], c[wl.TF_PFOR], c[wl.HAND]
    beyond = (v - h) / np.maximum(t - h, 1e-3)
    print(f"    vectorize {np.median(v):.3f} s (own {np.median(c['own']):.3f}), tf pfor "
          f"{np.median(t):.3f} s, hand-batched {np.median(h):.3f} s; vectorize / tf pfor "
          f"{np.median(v / t):.2f} (rounds {np.round(v / t, 2).tolist()}), beyond "
          f"hand-batched {np.median(beyond):.2f}; load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
  app.run(main)
