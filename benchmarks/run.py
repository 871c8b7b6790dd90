"""The benchmark suite: every workload in every form, checked, timed, tabled and plotted.

  python -m benchmarks.run --quick              # about 8 minutes on a quiet 2-core CPU
  python -m benchmarks.run                      # all batch sizes, more rounds
  python -m benchmarks.run --suite=linear,convnet --batch_sizes=32,128 --noxla
  python -m benchmarks.run --suite=varlen_lstm,varlen_lstm_constants --nograppler
  python -m benchmarks.run --quick --memory=per_example_convnet,keras_dp_sgd   # peak memory

Writes `<device>.md` (targets first), `<device>.json` and `<device>.png` to --out; a quick run
writes `<device>-quick.*`. Exits non-zero when a vectorize form fails or gives a wrong result.
"""

import datetime
import os
import platform
import sys
import time

# Forms that fail (TF's pfor under XLA) make TensorFlow log pages of C++ errors; the table
# records each failure's first line instead.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import tensorflow as tf

import vectorize
from benchmarks import measure
from benchmarks import memory
from benchmarks import report
from benchmarks import workload as wl
from benchmarks import workloads

flags.DEFINE_bool("quick", False,
                  "fewer batch sizes and rounds (about 8 minutes on 2 quiet cores)")
flags.DEFINE_list("suite", [], "workloads to run (default: all): " +
                  ",".join(w.name for w in workloads.ALL))
flags.DEFINE_list("batch_sizes", [], "batch sizes (output sizes for jacobians) to run, "
                  "overriding each workload's own")
flags.DEFINE_bool("xla", True, "also run every form under XLA (jit_compile=True)")
flags.DEFINE_string("out", os.path.join(os.path.dirname(__file__), "results"),
                    "directory for the table, JSON and plot")
flags.DEFINE_string("name", None, "file name stem of the results (default: the device's tag, "
                    "e.g. cpu-2core, with -quick for --quick runs)")
flags.DEFINE_integer("rounds", None, "timing rounds (default 3 with --quick, else 7)")
flags.DEFINE_list("memory", [], "workloads (or 'all') whose forms' peak memory is measured "
                  "at the target batch, each form in its own process (plain, not XLA)")
flags.DEFINE_bool("grappler", True, "run TensorFlow's graph optimizer (Grappler); "
                  "--nograppler times every form as emitted")
FLAGS = flags.FLAGS


def device():
  """(description, tag) of the machine the suite runs on."""
  gpus = tf.config.list_physical_devices("GPU")
  if gpus:
    name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
    return name, "gpu-" + name.lower().replace(" ", "-")
  cores = os.cpu_count()
  return f"CPU, {cores} cores ({platform.processor() or platform.machine()})", f"cpu-{cores}core"


def _selected():
  names = {w.name: w for w in workloads.ALL}
  unknown = [s for s in FLAGS.suite if s not in names]
  if unknown:
    raise app.UsageError(f"unknown workloads {unknown}; choose from {sorted(names)}")
  return [names[s] for s in FLAGS.suite] if FLAGS.suite else list(workloads.ALL)


def _warm_up():
  """Pays the runtime's and both pfors' one-time costs (imports, first kernels) up front."""
  x = tf.ones([2, 3])
  for fn in (lambda: tf.vectorized_map(tf.reduce_sum, x),
             lambda: vectorize.vectorized_map(tf.reduce_sum, x)):
    tf.function(fn)()


def _progress(workload, batch, records, seconds):
  parts = []
  for label in (wl.VECTORIZE, wl.VECTORIZE + measure.XLA):
    r = measure.ratio(records, label, wl.HAND if label == wl.VECTORIZE
                      else wl.HAND + measure.XLA)
    if label in records:
      parts.append(f"{label}/hand {r:.2f}" if r else f"{label} {records[label]['status']}")
  failing = [f"{l}: {r['status']}" for l, r in records.items() if r["status"] != "ok"]
  print(f"  {workload.name} batch {batch}: " + ", ".join(parts + failing) +
        f" ({seconds:.0f} s)", flush=True)


def _measure_memory(workload, entry):
  """Adds `peak_mb` (or `memory_error`) to the plain forms' records at the target batch."""
  batch = report.target_batch(entry)
  for label, record in entry["batches"][str(batch)].items():
    if label in wl.FORMS and record["status"] == "ok":
      result = memory.measure(workload.name, label, batch)
      if "peak_mb" in result:
        record["peak_mb"] = result["peak_mb"]
      else:
        record["memory_error"] = result["error"]
  print(f"  {workload.name} batch {batch} peak MB: " + ", ".join(
      f"{l} {r['peak_mb']:,.0f}" for l, r in entry["batches"][str(batch)].items()
      if "peak_mb" in r), flush=True)


def main(argv):
  del argv
  tf.get_logger().setLevel("ERROR")   # TF's pfor warns per fallback op
  description, tag = device()
  if not FLAGS.grappler:
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    tag += "-nograppler"
  rounds = FLAGS.rounds or (3 if FLAGS.quick else 7)
  selected = _selected()
  results = {"device": description, "tensorflow": tf.__version__,
             "date": datetime.date.today().isoformat(), "rounds": rounds,
             "command": "python -m benchmarks.run " + " ".join(sys.argv[1:]),
             "quick": FLAGS.quick, "grappler": FLAGS.grappler, "workloads": []}
  _warm_up()
  start = time.perf_counter()
  broken = []
  for k, workload in enumerate(selected):
    sizes = ([int(b) for b in FLAGS.batch_sizes] or
             (workload.quick_batch_sizes if FLAGS.quick else workload.batch_sizes))
    print(f"[{k + 1}/{len(selected)}] {workload.name}: {workload.title}", flush=True)
    entry = {"name": workload.name, "title": workload.title, "unit": workload.unit,
             "forms": workload.forms, "batches": {}}
    for batch in sizes:
      begin = time.perf_counter()
      records = measure.measure(workload, batch, FLAGS.xla, rounds)
      entry["batches"][str(batch)] = records
      _progress(workload, batch, records, time.perf_counter() - begin)
      broken += [f"{workload.name} batch {batch} {label}: {r.get('reason')}"
                 for label, r in records.items()
                 if label.startswith(wl.VECTORIZE) and r["status"] != "ok"]
    if workload.name in FLAGS.memory or "all" in FLAGS.memory:
      _measure_memory(workload, entry)
    results["workloads"].append(entry)
    # Written after each workload, so an interrupted run keeps what it measured.
    path = report.write(results, FLAGS.out,
                        FLAGS.name or tag + ("-quick" if FLAGS.quick else ""))
  print(f"Done in {time.perf_counter() - start:.0f} s; table: {path}")
  if broken:
    print("vectorize failed:\n  " + "\n  ".join(broken))
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
