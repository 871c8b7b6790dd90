"""Per-call time of small converted graphs against TF's pfor's output of the same body, where
a call takes a millisecond or two and any fixed cost of ours (extra identities, function-call
layers, shape checks) would show.

  python -m benchmarks.small_calls --suite=linear,map_fn,keras_inference --batch=8 --noxla

Each workload's vectorize and TF pfor forms, built for `--batch`, are wrapped in `tf.function`
(with `jit_compile=True` under `--xla`, benchmarks.run's flag, which is on by default:
`--noxla` times the graphs without XLA), called once to trace and warm up, then timed in
interleaved rounds of `--calls` calls each (the order alternating); the table gives the
median per-call time and the median of the within-round ratios, with each graph's op count
(after tracing, before Grappler).
"""

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

flags.DEFINE_integer("calls", 50, "calls per form per round")
FLAGS = flags.FLAGS

_PFORS = (wl.VECTORIZE, wl.TF_PFOR)


def per_call(forms, rounds, calls):
  """{form: [seconds per call, one per round]}, forms interleaved."""
  times = {name: [] for name in forms}
  for k in range(rounds):
    for name in (list(forms) if k % 2 == 0 else list(forms)[::-1]):
      start = time.perf_counter()
      for _ in range(calls):
        timing.run(forms[name])
      times[name].append((time.perf_counter() - start) / calls)
  return {name: np.array(t) for name, t in times.items()}


def main(argv):
  del argv
  tf.get_logger().setLevel("ERROR")
  names = FLAGS.suite or ["linear", "map_fn", "keras_inference"]
  rows = []
  for workload in [w for w in workloads.ALL if w.name in names]:
    built = workload.build(FLAGS.batch, False)
    forms = {f: tf.function(built[f], jit_compile=FLAGS.xla) for f in _PFORS}
    ops = {f: timing.count_ops(forms[f]) for f in _PFORS}
    for f in _PFORS:
      timing.run(forms[f])
    t = per_call(forms, FLAGS.rounds or 15, FLAGS.calls)
    v, p = t[wl.VECTORIZE], t[wl.TF_PFOR]
    rows.append((workload.name, np.median(v), np.median(p), np.median(v / p),
                 ops[wl.VECTORIZE], ops[wl.TF_PFOR]))
    print(f"  {workload.name}: vectorize {np.median(v) * 1e3:.3f} ms, tf pfor "
          f"{np.median(p) * 1e3:.3f} ms, ratio {np.median(v / p):.2f}", flush=True)
  print(f"\nbatch {FLAGS.batch}{', XLA' if FLAGS.xla else ''}; load {os.getloadavg()[0]:.1f}\n"
        "| workload | vectorize ms/call | tf pfor ms/call | vectorize / tf pfor | ops v / t |\n"
        "|---|---|---|---|---|")
  for name, v, p, ratio, ov, op in rows:
    print(f"| {name} | {v * 1e3:.3f} | {p * 1e3:.3f} | {ratio:.2f} | {ov} / {op} |")


if __name__ == "__main__":
  app.run(main)
