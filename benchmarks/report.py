"""The suite's results as JSON, a markdown table with the targets, and plots."""

import json
import os

import numpy as np

from benchmarks import measure
from benchmarks import timing
from benchmarks import workload as wl

TARGET_BATCH = 128
# vectorize / hand-batched: geometric mean over workloads, and each workload; vectorize /
# TF's pfor on each workload; vectorize's conversion / TF's.
TARGETS = {"hand_geomean": 1.10, "hand_each": 1.25, "tf_each": 1.05, "conversion": 0.5}

V, H, T = wl.VECTORIZE, wl.HAND, wl.TF_PFOR
VX, HX, TX = (f + measure.XLA for f in (V, H, T))


def target_batch(entry):
  sizes = sorted(int(b) for b in entry["batches"])
  return TARGET_BATCH if TARGET_BATCH in sizes else sizes[-1]


def target_row(entry):
  """The target ratios of one workload at its target batch size."""
  records = entry["batches"][str(target_batch(entry))]
  conv = [records.get(f, {}).get("conversion_s") for f in (V, T)]
  return {
      "batch": target_batch(entry),
      "hand": measure.ratio(records, V, H),
      "hand_xla": measure.ratio(records, VX, HX),
      "tf": measure.ratio(records, V, T),
      "tf_xla": measure.ratio(records, VX, TX),
      **{key + "_cpu": measure.ratio(records, a, b, "cpu_times") for key, a, b in (
          ("hand", V, H), ("hand_xla", VX, HX), ("tf", V, T), ("tf_xla", VX, TX))},
      "conversion": conv,
      "conversion_ratio": conv[0] / conv[1] if None not in conv and conv[1] > 0 else None,
      "ops": [records.get(f, {}).get("ops") for f in (V, T)],
      "compiles": records.get(VX, {}).get("status") == "ok" if VX in records else None,
  }


def has_targets(entry):
  """Whether a workload counts toward the geometric means: not the program-counter ones."""
  return not entry["name"].startswith("pc_")


def geomean(values):
  values = [v for v in values if v is not None]
  return float(np.exp(np.mean(np.log(values)))) if values else None


def _fmt(value, digits=2, limit=None):
  if value is None:
    return "-"
  text = f"{value:.{digits}f}"
  if limit is not None:
    text += " ✓" if value <= limit else " ✗"
  return text


def _cell(record, baseline_times):
  if record is None:
    return "-"
  if record["status"] != "ok":
    return record["status"]
  text = f"{record['ms']:.1f}"
  if baseline_times is not None:
    text += f" ({timing.median_ratio(record['times'], baseline_times):.2f})"
  return text


def markdown(results):
  """The results as a markdown document: targets first, then one section per workload."""
  lines = [f"# Benchmarks on {results['device']}",
           "",
           f"TensorFlow {results['tensorflow']}, {results['date']}; "
           f"`{results['command']}`. Times are medians of {results['rounds']} interleaved "
           "rounds; ratios are taken within rounds, then their median.",
           "",
           f"## Targets (at batch {TARGET_BATCH}, or the largest batch run)",
           "",
           "| workload | batch | vectorize / hand | ... under XLA | vectorize / TF pfor | "
           "... under XLA | conversion s: vectorize / TF (ratio) | ops: vectorize / TF | "
           "compiles under XLA |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |"]
  rows = []
  for entry in results["workloads"]:
    row = target_row(entry)
    rows.append(row)
    conv = row["conversion"]
    ratio = _fmt(row["conversion_ratio"], 2, TARGETS["conversion"])
    conv_text = "-" if None in conv else f"{conv[0]:.2f} / {conv[1]:.2f} ({ratio})"
    ops = " / ".join("-" if o is None else str(o) for o in row["ops"])
    compiles = {True: "✓", False: "✗", None: "-"}[row["compiles"]]
    lines.append(
        f"| {entry['name']} | {row['batch']} | {_fmt(row['hand'], 2, TARGETS['hand_each'])} | "
        f"{_fmt(row['hand_xla'], 2, TARGETS['hand_each'])} | "
        f"{_fmt(row['tf'], 2, TARGETS['tf_each'])} | "
        f"{_fmt(row['tf_xla'], 2, TARGETS['tf_each'])} | {conv_text} | {ops} | {compiles} |")
  targeted = [r for r, entry in zip(rows, results["workloads"]) if has_targets(entry)]
  means = {key: geomean(r[key] for r in targeted)
           for key in ("hand", "hand_xla", "tf", "tf_xla")}
  lines.append(
      f"| **geometric mean** | | {_fmt(means['hand'], 2, TARGETS['hand_geomean'])} | "
      f"{_fmt(means['hand_xla'], 2, TARGETS['hand_geomean'])} | "
      f"{_fmt(means['tf'])} | {_fmt(means['tf_xla'])} | | | |")
  lines += ["",
            f"Targets: vectorize / hand-batched at most {TARGETS['hand_geomean']} as a "
            f"geometric mean and {TARGETS['hand_each']} on each workload, with and without "
            f"XLA; vectorize / TF's pfor at most {TARGETS['tf_each']} on each; conversion "
            f"(first call minus a steady call) at most {TARGETS['conversion']} of TF's; every "
            "workload compiles under XLA. \"-\" where a form fails (see below). A negative "
            "conversion means the first call ran faster than the median steady call (forms "
            "whose run time is dominated by allocating GB-sized outputs): not measurable. "
            "The program-counter workloads (`pc_*`) are left out of the means: their "
            "hand-batched form is another algorithm (iterative where autobatch recurses), and "
            "their targets are against TFP (`benchmarks/results/pc-*.md`)."]
  lines += _cpu_table(results["workloads"], rows)
  for entry in results["workloads"]:
    lines += [""] + _workload_section(entry)
  return "\n".join(lines) + "\n"


def _cpu_table(entries, rows):
  """The target ratios again in CPU time: on a loaded machine a call's wall time includes its
  waits for a core, which hit one form of a round and not the next."""
  keys = ("hand_cpu", "hand_xla_cpu", "tf_cpu", "tf_xla_cpu")
  if all(row[key] is None for row in rows for key in keys):
    return []   # results written before CPU time was recorded
  lines = ["", "The same ratios in CPU time (the process's, all threads, of the same calls):",
           "", "| workload | vectorize / hand | ... under XLA | vectorize / TF pfor | "
           "... under XLA |", "| --- | ---: | ---: | ---: | ---: |"]
  limits = (TARGETS["hand_each"], TARGETS["hand_each"], TARGETS["tf_each"], TARGETS["tf_each"])
  for entry, row in zip(entries, rows):
    cells = " | ".join(_fmt(row[key], 2, limit) for key, limit in zip(keys, limits))
    lines.append(f"| {entry['name']} | {cells} |")
  targeted = [r for r, entry in zip(rows, entries) if has_targets(entry)]
  means = [geomean(r[key] for r in targeted) for key in keys]
  lines.append(f"| **geometric mean** | {_fmt(means[0], 2, TARGETS['hand_geomean'])} | "
               f"{_fmt(means[1], 2, TARGETS['hand_geomean'])} | {_fmt(means[2])} | "
               f"{_fmt(means[3])} |")
  return lines


def _workload_section(entry):
  batches = sorted(entry["batches"], key=int)
  labels = list(entry["batches"][batches[0]])
  lines = [f"## {entry['name']}: {entry['title']}", ""]
  lines += [f"- {form}: {entry['forms'].get(form, form)}" for form in wl.FORMS]
  lines += ["", f"ms per call (ratio to hand-batched in the same rounds), by batch size:", "",
            "| form | " + " | ".join(batches) + " |",
            "| --- |" + " ---: |" * len(batches)]
  for label in labels:
    cells = []
    for b in batches:
      records = entry["batches"][b]
      hand = records.get(H, {}).get("times")
      cells.append(_cell(records.get(label), hand))
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
  b = str(target_batch(entry))
  lines += ["", f"At batch {b} (peak MB: resident memory the form's first two calls add, "
            "measured in a process of its own, where `--memory` ran):", "",
            f"| form | {entry['unit']}/s | first call s | conversion s | ops | max rel error | "
            "peak MB |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
  for label, r in entry["batches"][b].items():
    if r["status"] == "fails" or "ms" not in r:
      lines.append(f"| {label} | {r['status']}: {r.get('reason', '')} | | | | | |")
      continue
    lines.append(f"| {label} | {int(b) / r['ms'] * 1e3:,.0f} | {r['first_s']:.2f} | "
                 f"{r['conversion_s']:.2f} | {r['ops']} | {r['error']:.1e} | "
                 f"{_memory_cell(r)} |")
  return lines


def _memory_cell(record):
  if "peak_mb" in record:
    return f"{record['peak_mb']:,.0f}"
  return record.get("memory_error", "-")


def write(results, out_dir, tag):
  """Writes `<tag>.json`, `<tag>.md` and the plots; returns the markdown path."""
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, f"{tag}.json"), "w") as f:
    json.dump(results, f, indent=1)
  path = os.path.join(out_dir, f"{tag}.md")
  text = markdown(results)
  try:
    from benchmarks import plots  # pylint: disable=g-import-not-at-top
    png = plots.plot(results, os.path.join(out_dir, f"{tag}.png"))
    text += f"\n![throughput against batch size]({os.path.basename(png)})\n"
  except ImportError:
    print("matplotlib is not installed (pip install -e '.[bench]'): no plots.")
  with open(path, "w") as f:
    f.write(text)
  return path
