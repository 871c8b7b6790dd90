"""Where a form's run time goes, kernel by kernel: which ops one workload's forms run and how
long each takes, to compare vectorize's op list with hand-batched's and TF pfor's.

  python -m benchmarks.kernel_profile --cell_workload jacobian_vgg --cell_batch 128
  python -m benchmarks.kernel_profile --cell_workload keras_dp_sgd \
      --cell_forms vectorize,"tf pfor" --cell_xla

Each form is warmed up, then called `--profiled_calls` times under TensorFlow's profiler; the
kernel events of the trace (named `node:OpType`) are summed per op type and per node, per call.
A kernel's time is its own thread's span, so work it hands to other threads and waits for is
counted, and a kernel that runs beside another is counted in full: a kernel total above the
call's wall time means ops ran side by side. XLA forms show as one cluster kernel.
"""

import collections
import glob
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import tensorflow as tf

from benchmarks import cell_flags
from benchmarks import timing

flags.DEFINE_integer("profiled_calls", 3, "profiled calls per form")
flags.DEFINE_integer("top_kernels", 25, "op types and nodes listed per form")
FLAGS = flags.FLAGS


def kernel_events(fn, calls):
  """[(node, op type, microseconds)] of the kernels `calls` calls of `fn` run."""
  logdir = tempfile.mkdtemp(prefix="kernel_profile_")
  try:
    tf.profiler.experimental.start(logdir)
    for _ in range(calls):
      timing.run(fn)
    tf.profiler.experimental.stop()
    return _read_events(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))
  finally:
    shutil.rmtree(logdir, ignore_errors=True)


def _read_events(paths):
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top
  events = []
  for path in paths:
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
      space.ParseFromString(f.read())
    for plane in space.planes:
      for line in plane.lines:
        if line.name == "python":
          continue
        for e in line.events:
          name = plane.event_metadata[e.metadata_id].name
          node, sep, op_type = name.rpartition(":")
          if sep and node and "::" not in name and " " not in name:
            events.append((node, op_type, e.duration_ps / 1e6))
  return events


def summary(events, calls, top):
  """Lines: total kernel ms per call, then the heaviest op types and nodes."""
  by_type, by_node, count = (collections.Counter(), collections.Counter(),
                             collections.Counter())
  for node, op_type, us in events:
    by_type[op_type] += us / calls
    by_node[f"{node}:{op_type}"] += us / calls
    count[op_type] += 1
  total = sum(by_type.values())
  lines = [f"  kernels {total / 1e3:.1f} ms per call, {len(events) // max(calls, 1)} kernels"]
  lines.append("  by op type (ms per call, kernels per call):")
  for op_type, us in by_type.most_common(top):
    lines.append(f"    {us / 1e3:9.2f}  {count[op_type] // calls:5d}  {op_type}")
  lines.append("  by node (ms per call):")
  for node, us in by_node.most_common(top):
    lines.append(f"    {us / 1e3:9.2f}  {node}")
  return lines


def main(argv):
  del argv
  for label, fn in cell_flags.selected_functions().items():
    for _ in range(2):
      timing.run(fn)
    wall, cpu = min(timing.wall_and_cpu_seconds(fn) for _ in range(3))
    print(f"{label}: {wall * 1e3:.1f} ms wall, {cpu * 1e3:.1f} ms CPU (best of 3)")
    print("\n".join(summary(kernel_events(fn, FLAGS.profiled_calls), FLAGS.profiled_calls,
                               FLAGS.top_kernels)))


if __name__ == "__main__":
  app.run(main)
