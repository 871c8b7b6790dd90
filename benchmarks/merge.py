"""Merges the results of suite runs made side by side (each `benchmarks.run` process over
part of the workloads) into one table, JSON and plot, workloads in the suite's order.

  python -m benchmarks.merge --out=benchmarks/results --name=cpu-2core a.json b.json
"""

import argparse
import json

from benchmarks import report
from benchmarks import workloads


def merged(parts):
  """One results record from several; the first part's header, the commands joined."""
  order = {w.name: k for k, w in enumerate(workloads.ALL)}
  result = dict(parts[0])
  result["command"] = " and ".join(p["command"] for p in parts)
  result["rounds"] = min(p["rounds"] for p in parts)
  entries = [e for p in parts for e in p["workloads"]]
  result["workloads"] = sorted(entries, key=lambda e: order.get(e["name"], len(order)))
  return result


def main():
  # argparse, not absl flags: importing this module (the tests do, beside benchmarks.run)
  # must define no global flags.
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default="benchmarks/results", help="directory for the merged "
                      "files")
  parser.add_argument("--name", required=True, help="file name stem of the merged files")
  parser.add_argument("parts", nargs="+", help="the JSON files of the runs to merge")
  args = parser.parse_args()
  parts = []
  for path in args.parts:
    with open(path) as f:
      parts.append(json.load(f))
  print(report.write(merged(parts), args.out, args.name))


if __name__ == "__main__":
  main()
