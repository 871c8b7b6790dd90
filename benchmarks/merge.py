"""Merges the results of suite runs made side by side (each `benchmarks.run` process over
part of the workloads) into one table, JSON and plot, workloads in the suite's order.

  python -m benchmarks.merge --out=benchmarks/results --name=cpu-2core a.json b.json
"""

import json

from absl import app
from absl import flags

from benchmarks import report
from benchmarks import workloads

flags.DEFINE_string("out", "benchmarks/results", "directory for the merged files")
flags.DEFINE_string("name", None, "file name stem of the merged files")
FLAGS = flags.FLAGS


def merged(parts):
  """One results record from several; the first part's header, the commands joined."""
  order = {w.name: k for k, w in enumerate(workloads.ALL)}
  result = dict(parts[0])
  result["command"] = " and ".join(p["command"] for p in parts)
  result["rounds"] = min(p["rounds"] for p in parts)
  entries = [e for p in parts for e in p["workloads"]]
  result["workloads"] = sorted(entries, key=lambda e: order.get(e["name"], len(order)))
  return result


def main(argv):
  parts = []
  for path in argv[1:]:
    with open(path) as f:
      parts.append(json.load(f))
  if not parts:
    raise app.UsageError("name the JSON files to merge")
  print(report.write(merged(parts), FLAGS.out, FLAGS.name))


if __name__ == "__main__":
  flags.mark_flag_as_required("name")
  app.run(main)
