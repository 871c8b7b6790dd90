"""A DP-SGD step against a non-private step, on Keras models as users write them.

  python -m benchmarks.private_training --batch=128 --rounds=9 [--models=convnet,lstm]
  python -m benchmarks.private_training --batch=512 --memory   # peak memory per form

The models and forms are in `private_forms.py`. The private forms' clipped sums are checked
against each other at the first call. Medians of wall milliseconds per call over interleaved
rounds; ratios to non-private taken per round. `--memory` measures each form's peak resident
memory instead, each in its own process (`memory.py`), and its ratio to the non-private
step's.
"""

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import numpy as np
import tensorflow as tf

from benchmarks import memory
from benchmarks.private_forms import build, CHECKED, forms_of, TF_PFOR_CRASHES

flags.DEFINE_integer("rounds", 9, "timing rounds (each calls every form once)")
flags.DEFINE_list("models", ["convnet", "lstm", "transformer", "resnet"], "models to run")
flags.DEFINE_bool("xla", False, "compile every form with XLA")
flags.DEFINE_bool("memory", False, "measure each form's peak memory instead of its time")
FLAGS = flags.FLAGS


def run_model(name):
  forms = {k: tf.function(f, jit_compile=FLAGS.xla) for k, f in build(name, FLAGS.batch).items()}
  first, failed = {}, {}
  for form, fn in list(forms.items()):
    print(f"{name}: {form}: first call", flush=True)
    try:
      out = fn()
      first[form] = [o.numpy() for o in out]
    except Exception as e:  # pylint: disable=broad-except
      lines = [l.strip() for l in str(e).splitlines() if l.strip()] or [""]
      failed[form] = f"fails: {type(e).__name__}: {lines[-1][:120]}"
      del forms[form]
  reference = first.get("vectorize materialized")
  for form, sums in first.items():
    if form not in CHECKED or reference is None:
      continue
    scale = max(np.max(np.abs(r)) for r in reference)
    error = max(np.max(np.abs(s - r)) for s, r in zip(sums, reference)) / scale
    assert error < 1e-3, f"{name}: {form} differs from vectorize materialized by {error}"
  times = {form: [] for form in forms}
  for _ in range(FLAGS.rounds):
    for form, fn in forms.items():
      start = time.perf_counter()
      [o.numpy() for o in fn()]   # pylint: disable=expression-not-assigned
      times[form].append(time.perf_counter() - start)
  base = np.array(times["non-private"])
  rows = [f"| {name} | {form} | {np.median(t) * 1e3:.1f} | {np.median(np.array(t) / base):.2f} |"
          for form, t in times.items()]
  failed.update({"tf pfor materialized": TF_PFOR_CRASHES[name]} if name in TF_PFOR_CRASHES
                else {})
  rows += [f"| {name} | {form} | {why} | |" for form, why in failed.items()]
  return rows


def memory_rows(name):
  """One row per form: the peak of the tensors a steady step holds at once (weights and
  optimizer state included) and the first call's peak resident memory above the built model
  (tracing and conversion too); each with its ratio to the non-private step's."""
  peaks = {form: memory.measure(memory.PRIVATE + name, form, FLAGS.batch, FLAGS.xla)
           for form in forms_of(name)}
  base = peaks["non-private"]
  rows = []
  for form, r in peaks.items():
    if "error" in r:
      rows.append(f"| {name} | {form} | {r['error']} | | | |")
      continue
    cells = [f"{r[k]:.0f} MB | {r[k] / base[k]:.2f}" if "error" not in base else f"{r[k]:.0f}"
             for k in ("step_peak_mb", "peak_mb")]
    rows.append(f"| {name} | {form} | {' | '.join(cells)} |")
  return rows


def main(argv):
  del argv
  tf.get_logger().setLevel("ERROR")
  rows = []
  for name in FLAGS.models:
    rows += memory_rows(name) if FLAGS.memory else run_model(name)
  print(f"batch {FLAGS.batch}, {FLAGS.rounds} rounds, XLA {FLAGS.xla}, load "
        f"{os.getloadavg()[0]:.1f}\n")
  print("| model | form | step peak (tensors) | / non-private | first call peak (process) | / non-private |"
        "\n|---|---|---|---|---|---|" if FLAGS.memory else
        "| model | form | ms | / non-private |\n|---|---|---|---|")
  print("\n".join(rows))


if __name__ == "__main__":
  app.run(main)
