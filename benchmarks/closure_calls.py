"""Eager calls whose body closes over each call's tensors, as TensorCircuit's `K.vmap` calls
`tf.vectorized_map`: every call is a new closure, so a cache keyed by the closure misses and
each call traces and converts again (unless the program-keyed cache recognises the program).

  python -m benchmarks.closure_calls --rounds=7 --calls=5

Per round, for each form in alternating order: `calls` eager calls, each over new tensors
of the same shapes in a new closure; the per-call time is the median of a round's calls
after its first; the table gives the median over rounds and the within-round ratio to TF's
pfor. Wall seconds (each call is traced, converted and run once, on the caller's thread).
"""

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import numpy as np
import tensorflow as tf

import vectorize
from benchmarks.workloads import circuit

flags.DEFINE_integer("rounds", 7, "interleaved rounds")
flags.DEFINE_integer("calls", 5, "eager calls per form per round (new closures)")
flags.DEFINE_integer("batch", 16, "examples per call")
FLAGS = flags.FLAGS

FORMS = {
    "vectorize": vectorize.vectorized_map,
    "tf pfor": tf.vectorized_map,
}


def one_call(vmap, seed):
  thetas, weights = circuit.inputs(FLAGS.batch, seed)
  start = time.perf_counter()
  vmap(lambda t: circuit.expectations(t, weights), thetas).numpy()
  return time.perf_counter() - start


def main(argv):
  del argv
  tf.get_logger().setLevel("ERROR")
  per_call = {name: [] for name in FORMS}
  seed = 0
  for k in range(FLAGS.rounds):
    for name in (list(FORMS) if k % 2 == 0 else list(FORMS)[::-1]):
      times = []
      for _ in range(FLAGS.calls):
        seed += 1
        times.append(one_call(FORMS[name], seed))
      per_call[name].append(np.median(times[1:]))
    print(f"round {k}: " + ", ".join(f"{n} {per_call[n][-1]:.3f} s" for n in FORMS),
          flush=True)
  v, t = (np.array(per_call[n]) for n in ("vectorize", "tf pfor"))
  print(f"\n| body | vectorize s/call | tf pfor s/call | vectorize / tf pfor |\n|---|---|---|---|\n"
        f"| circuit, batch {FLAGS.batch}, new closure per call | {np.median(v):.3f} | "
        f"{np.median(t):.3f} | {np.median(v / t):.2f} |")


if __name__ == "__main__":
  app.run(main)
