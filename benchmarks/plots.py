"""Throughput against batch size, one panel per workload, one line per form (the paper's
Figures 1-3). Needs matplotlib (`pip install -e '.[bench]'`)."""

import math

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

from benchmarks import measure
from benchmarks import workload as wl

_COLORS = {wl.HAND: "black", wl.VECTORIZE: "tab:red", wl.LOOP: "tab:blue",
           wl.TF_PFOR: "tab:green"}


def plot(results, path):
  """Writes the figure to `path` (PNG) and returns it."""
  entries = results["workloads"]
  cols = min(len(entries), 4)
  rows = math.ceil(len(entries) / cols)
  fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
  for ax, entry in zip(axes.flat, entries):
    batches = sorted(entry["batches"], key=int)
    for form in wl.FORMS:
      for label, style in ((form, "-"), (form + measure.XLA, "--")):
        points = [(int(b), int(b) / entry["batches"][b][label]["ms"] * 1e3) for b in batches
                  if entry["batches"][b].get(label, {}).get("ms")]
        if points:
          xs, ys = zip(*points)
          ax.plot(xs, ys, style, marker="o", markersize=3, color=_COLORS[form], label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(entry["name"], fontsize=10)
    ax.set_xlabel("output size" if entry["unit"] == "jacobian rows" else "batch size")
    ax.set_ylabel(f"{entry['unit']} / s")
    ax.grid(True, which="both", alpha=0.3)
  for ax in list(axes.flat)[len(entries):]:
    ax.axis("off")
  handles, labels = axes.flat[0].get_legend_handles_labels()
  fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=9)
  fig.suptitle(f"Throughput against batch size: {results['device']}", fontsize=11)
  fig.tight_layout(rect=(0, 0.1, 1, 0.97))
  fig.savefig(path, dpi=90)
  plt.close(fig)
  return path
