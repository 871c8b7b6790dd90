"""Compiles, checks and times the HLO modules `benchmarks/hlo_export.py` wrote, with JAX's
XLA client and no TensorFlow.

Why this route exists: the GPU machines lent to this project have JAX (jaxlib with XLA and
its CUDA plugin) but no TensorFlow, and nothing can be installed there; a TensorFlow GPU
stack is far larger than what can be carried to them. So TensorFlow lowers each
`tf.function(jit_compile=True)` form to HLO on a CPU machine (hlo_export.py), and this
script, which imports only numpy and jax, compiles those modules with the XLA that JAX
ships, runs them on JAX's default device (the GPU there; the CPU here, to prove the
pipeline) and times them.

For each workload in the manifest (in its order, until --deadline), for the forms
hand-batched, vectorize and tf pfor:

  - compiles the module (HloModuleProto -> StableHLO with jaxlib's `hlo_to_stablehlo`, HLO
    copies dropped (see `Runner.rewrite`), then `Client.compile_and_load`; TensorFlow's own
    StableHLO export, where exported, is the fallback), all modules up front, before any
    is timed (one at a time by default: 8 threads crashed the process on the H200);
  - puts the captured inputs (the workload's arrays and variables' values) on the device;
  - checks the first call's outputs against TensorFlow's (XLA on the CPU) reference: at the
    kept elements (all of a small output, else 16,384 evenly spaced ones) the largest
    absolute error and that over the reference's largest magnitude, and over the whole
    output the relative difference of the L2 norms; non-finite values where the reference
    is finite fail the check. vectorize and tf pfor are also compared, whole, with
    hand-batched's output on the device (the suite's max relative error);
  - times it: 3 warm-up calls, then --rounds interleaved rounds (forms alternate order),
    each form called back to back for about --round_s seconds, every call timed alone with
    its outputs' `block_until_ready` (host clock); the median over all calls is the
    figure, and ratios are medians of per-round ratios, as in benchmarks/timing.py. Also a
    pipelined figure: --pipelined calls issued back to back, one wait at the end.

Writes --out (JSON, after every workload) and prints a table last.

  python3 benchmarks/hlo_run.py --dir=.gpu_hlo --out=$OUT/results.json
  python3 benchmarks/hlo_run.py --table=benchmarks/results/gpu-h200-hlo.json   # table only
"""

import argparse
import concurrent.futures
import gzip
import io
import json
import os
import re
import sys
import time

import numpy as np

FORMS = ("hand-batched", "vectorize", "tf pfor")
HOST_LIMIT = 1 << 24    # outputs up to this many elements are checked on the host


def sample_indices(size, full_limit, samples):
  """The flat indices of an output's kept elements: as hlo_export.sample_indices."""
  if size <= full_limit:
    return np.arange(size, dtype=np.int64)
  return np.linspace(0, size - 1, samples).astype(np.int64)


class Runner:

  def __init__(self, args):
    import jax  # pylint: disable=g-import-not-at-top
    jax.config.update("jax_enable_x64", True)   # int64 inputs (step counters) stay int64
    import jax.extend  # pylint: disable=g-import-not-at-top
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
    from jax._src.lib import xla_client  # pylint: disable=g-import-not-at-top
    self.jax, self.jnp, self.xc = jax, jnp, xla_client
    self.args = args
    self.backend = jax.extend.backend.get_backend()
    self.device = self.backend.local_devices()[0]
    if args.platform and self.device.platform != args.platform:
      raise SystemExit(f"JAX's default device is {self.device} ({self.device.platform}), "
                       f"not {args.platform}")
    self.devices = xla_client.DeviceList((self.device,))
    with open(os.path.join(args.dir, "manifest.json")) as f:
      self.manifest = json.load(f)
    self._blobs = {}
    self.aliases = {}
    # Jitted, so that XLA fuses them: eager jnp would write float64 copies of GB outputs.
    self._l2 = jax.jit(lambda x: jnp.sqrt(jnp.sum(jnp.square(x.astype(jnp.float64)))))
    self._max_diff = jax.jit(lambda a, b: (
        jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32))),
        jnp.max(jnp.abs(b.astype(jnp.float32)))))

  # ------------------------------------------------------------------ compiling

  def _read(self, name):
    with (gzip.open if name.endswith(".gz") else open)(os.path.join(self.args.dir, name),
                                                        "rb") as f:
      return f.read()

  def compile(self, record):
    """(executable, info): info holds the route taken, seconds, and any errors."""
    info, errors = {}, []
    routes = [("hlo", record["hlo"])]
    if record.get("stablehlo"):
      routes.append(("stablehlo", record["stablehlo"]))
    if self.args.route == "stablehlo":
      routes.reverse()
    for route, path in routes:
      start = time.perf_counter()
      try:
        blob = self._read(path)
        module = self.xc._xla.mlir.hlo_to_stablehlo(blob) if route == "hlo" else blob  # pylint: disable=protected-access
        module, rewrites = self.rewrite(module)
        info.update(rewrites)
        if self.args.portable_check:
          self.xc._xla.mlir.serialize_portable_artifact(module, "1.0.0")  # pylint: disable=protected-access
        exe = self.backend.compile_and_load(module, self.devices, self.xc.CompileOptions())
      except Exception as e:  # pylint: disable=broad-except
        errors.append(f"{route}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        continue
      info.update(route=route, compile_s=time.perf_counter() - start)
      header = exe.hlo_modules()[0].to_string().split("\n", 1)[0]
      alias = re.search(r"input_output_alias=\{(.*?)\}, entry_computation_layout", header)
      self.aliases[id(exe)] = [tuple(int(i) for i in pair) for pair in re.findall(
          r"\{(\d+)\}: \((\d+), \{\}", alias.group(1))] if alias else []
      info["aliased_inputs"] = len(self.aliases[id(exe)])
      try:
        stats = exe.get_compiled_memory_stats()
        info["temp_mb"] = stats.temp_size_in_bytes / 2**20
        info["output_mb"] = stats.output_size_in_bytes / 2**20
        info["argument_mb"] = stats.argument_size_in_bytes / 2**20
      except Exception:  # pylint: disable=broad-except
        pass
      try:
        cost = exe.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        info["gflop"] = float(cost.get("flops", float("nan"))) / 1e9
        info["gbytes_accessed"] = float(cost.get("bytes accessed", float("nan"))) / 1e9
      except Exception:  # pylint: disable=broad-except
        pass
      if errors:
        info["route_errors"] = errors
      return exe, info
    info["compile_errors"] = errors
    return None, info

  def rewrite(self, module):
    """(StableHLO bytecode, {rewrite: count}): the module as a PJRT plugin takes it.

    `hlo_to_stablehlo` keeps HLO's `copy` (TF copies each variable it returns) as
    `mhlo.copy`, which has no StableHLO form; JAX's CPU client compiles it, but a plugin
    client (CUDA) serializes the module to portable StableHLO first and fails ("CHLO =>
    [StableHLO+Shape] => StableHLO failed ... failed to legalize operation 'mhlo.copy'"):
    seen on the H200, 2026-11-28, for every module that returns a variable. A copy of a
    value is the value: its uses take its operand. With --precision=highest every dot and
    convolution is asked for full float32 (DEFAULT lets the GPU round operands to TF32)."""
    from jax._src.interpreters import mlir  # pylint: disable=g-import-not-at-top
    from jax._src.lib.mlir import ir  # pylint: disable=g-import-not-at-top
    counts = {"copies_dropped": 0}
    with mlir.make_ir_context():
      parsed = ir.Module.parse(module)
      copies, contractions = [], []

      def walk(op):
        for region in op.regions:
          for block in region.blocks:
            for inner in block.operations:
              walk(inner.operation)
              name = inner.operation.name
              if name == "mhlo.copy":
                copies.append(inner.operation)
              elif name in ("stablehlo.dot_general", "stablehlo.dot",
                            "stablehlo.convolution"):
                contractions.append(inner.operation)

      walk(parsed.operation)
      for op in copies:
        op.result.replace_all_uses_with(op.operands[0])
        op.erase()
      counts["copies_dropped"] = len(copies)
      if self.args.precision == "highest":
        highest = ir.Attribute.parse(
            "[#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]")
        for op in contractions:
          op.attributes["precision_config"] = highest
        counts["precision_highest"] = len(contractions)
      if not copies and self.args.precision != "highest":
        return module, counts
      out = io.BytesIO()
      parsed.operation.write_bytecode(out)
      return out.getvalue(), counts

  # ------------------------------------------------------------------ running

  def blob(self, digest):
    if digest not in self._blobs:
      path = os.path.join(self.args.dir, "blobs", digest + ".npy")
      if os.path.exists(path):
        self._blobs[digest] = np.load(path)
      else:
        with gzip.open(path + ".gz", "rb") as f:
          self._blobs[digest] = np.load(f)
    return self._blobs[digest]

  def execute(self, exe, inputs):
    """One call's outputs, not waited for. Inputs the module aliases with outputs (variables
    TF assigns: it updates them in place) are donated: their outputs replace them in
    `inputs`, as the variables' new values would be read by TF's next call."""
    outs = [o[0] for o in exe.execute_sharded(inputs).disassemble_into_single_device_arrays()]
    for out_index, param_index in self.aliases[id(exe)]:
      inputs[param_index] = outs[out_index]
    return outs

  def call(self, exe, inputs):
    outs = self.execute(exe, inputs)
    for o in outs:
      o.block_until_ready()
    return outs

  def check(self, record, outs):
    """Errors of a first call's outputs against TF's reference."""
    refs = record["outputs"] + record["updates"]
    if record.get("update_reference") == "unmatched":
      refs = record["outputs"]
    report = {"max_abs": 0.0, "max_rel": 0.0, "l2_rel": 0.0, "nonfinite": 0}
    scale_floor = 1e-3 * max([r["max_abs"] for r in refs] + [1e-12])
    # An output of round-off zeros (an attention key bias's gradient) is measured against
    # the largest output's scale, as benchmarks/timing.max_rel_error does.
    l2_floor = 1e-3 * max([r["l2"] for r in refs] + [1e-12])
    jnp = self.jnp
    for out, ref in zip(outs, refs):
      if list(out.shape) != ref["shape"]:
        raise ValueError(f"an output has shape {out.shape}, TF's {ref['shape']}")
      # Small outputs are checked on the host; large ones (GBs of per-example gradients)
      # on the device, where each new shape costs a small compile.
      on_host = out.size <= HOST_LIMIT
      flat = np.asarray(out).reshape(-1) if on_host else out.reshape(-1)
      idx = sample_indices(flat.size, self.manifest["full_limit"], self.manifest["samples"])
      got = np.asarray(flat[idx] if idx.size < flat.size else flat).astype(np.float64)
      want = self.blob(ref["kept"]).astype(np.float64)
      report["nonfinite"] += int((~np.isfinite(got) & np.isfinite(want)).sum())
      err = float(np.max(np.abs(got - want))) if got.size else 0.0
      report["max_abs"] = max(report["max_abs"], err)
      report["max_rel"] = max(report["max_rel"], err / max(ref["max_abs"], scale_floor))
      # The whole output: catches what the kept elements miss.
      if not flat.size:
        l2 = 0.0
      elif on_host:
        wide = flat.astype(np.float64)
        l2 = float(np.sqrt(np.dot(wide, wide)))
      else:
        l2 = float(self._l2(flat))
      l2_rel = abs(l2 - ref["l2"]) / max(ref["l2"], l2_floor)
      report["l2_rel"] = max(report["l2_rel"], l2_rel if np.isfinite(l2_rel) else float("inf"))
    if not np.isfinite(report["max_abs"]):
      report["max_rel"] = float("inf")
    report["ok"] = (report["nonfinite"] == 0 and report["max_rel"] <= self.args.tolerance and
                    report["l2_rel"] <= self.args.tolerance)
    return report

  def cross(self, outs, reference, count):
    """The suite's max relative error of the first `count` outputs against hand-batched's,
    whole (large ones on the device)."""
    pairs = []
    for a, b in zip(outs[:count], reference[:count]):
      if a.shape != b.shape:
        return float("inf")
      if not a.size:
        continue
      if a.size <= HOST_LIMIT:
        a32, b32 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        pairs.append((float(np.max(np.abs(a32 - b32))), float(np.max(np.abs(b32)))))
      else:
        error, scale = self._max_diff(a, b)
        pairs.append((float(error), float(scale)))
    if not pairs:
      return 0.0
    floor = max(1e-3 * max(s for _, s in pairs), 1e-12)
    return max(e / max(s, floor) for e, s in pairs)

  def time_forms(self, runs):
    """{form: [seconds per call]} and {form: [median seconds per round]}, interleaved."""
    args = self.args
    for form, (exe, inputs) in runs.items():
      for _ in range(args.warmup):
        self.call(exe, inputs)
    calls, per_call, per_round = {}, {f: [] for f in runs}, {f: [] for f in runs}
    for form, (exe, inputs) in runs.items():
      start = time.perf_counter()
      self.call(exe, inputs)
      calls[form] = int(max(1, min(args.max_calls, args.round_s // max(
          time.perf_counter() - start, 1e-6))))
    for k in range(args.rounds):
      order = list(runs) if k % 2 == 0 else list(runs)[::-1]
      for form in order:
        exe, inputs = runs[form]
        times = []
        for _ in range(calls[form]):
          start = time.perf_counter()
          self.call(exe, inputs)
          times.append(time.perf_counter() - start)
        per_call[form] += times
        per_round[form].append(float(np.median(times)))
    pipelined = {}
    for form, (exe, inputs) in runs.items():
      n = min(args.pipelined, calls[form] * 2)
      start = time.perf_counter()
      outs = None
      for _ in range(n):
        outs = self.execute(exe, inputs)
      for o in outs:
        o.block_until_ready()
      pipelined[form] = (time.perf_counter() - start) / n
    return per_call, per_round, pipelined, calls

  def run_workload(self, records):
    """Results of one workload's forms (records: the manifest's, in form order)."""
    result = {"workload": records[0]["workload"], "batch": records[0]["batch"], "forms": {}}
    runs, hand_outs = {}, None
    for record in records:
      form = record["form"]
      entry = result["forms"].setdefault(form, {})
      if record["status"] != "ok":
        entry.update(status=record["status"], stage=record.get("stage"),
                     reason=record.get("reason"))
        continue
      exe, info = self.compiled[(record["workload"], form)].result()
      entry.update(info)
      if exe is None:
        entry.update(status="fails", stage="XLA compile (JAX)",
                     reason="; ".join(info["compile_errors"]))
        continue
      try:
        inputs = [self.jax.device_put(self.blob(p["blob"]), self.device)
                  for p in record["params"]]
        start = time.perf_counter()
        outs = self.call(exe, inputs)
        entry["first_call_s"] = time.perf_counter() - start
        entry["check"] = self.check(record, outs)
      except Exception as e:  # pylint: disable=broad-except
        entry.update(status="fails", stage="run or check",
                     reason=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
        continue
      entry["tf_cpu_ms"] = 1e3 * record.get("tf_cpu_second_call_s", float("nan"))
      count = len(record["outputs"])
      if form == "hand-batched":
        hand_outs = outs
      elif hand_outs is not None:
        entry["vs_hand_rel"] = self.cross(outs, hand_outs, count)
      del outs
      entry["status"] = "ok" if entry["check"]["ok"] else "wrong"
      runs[form] = (exe, inputs)
    hand_outs = None
    if runs:
      per_call, per_round, pipelined, calls = self.time_forms(runs)
      for form in runs:
        entry = result["forms"][form]
        entry.update(ms=1e3 * float(np.median(per_call[form])),
                     ms_min=1e3 * float(np.min(per_call[form])),
                     ms_pipelined=1e3 * pipelined[form], calls=len(per_call[form]),
                     calls_per_round=calls[form],
                     round_ms=[1e3 * t for t in per_round[form]])
      for base in ("hand-batched", "tf pfor"):
        if "vectorize" in runs and base in runs:
          result["vectorize/" + base] = float(np.median(
              [v / b for v, b in zip(per_round["vectorize"], per_round[base])]))
    self._blobs.clear()
    try:
      stats = self.device.memory_stats() or {}
      result["device_peak_gb_so_far"] = stats.get("peak_bytes_in_use", float("nan")) / 2**30
    except Exception:  # pylint: disable=broad-except
      pass
    return result

  def main(self):
    args = self.args
    start = time.perf_counter()
    deadline = start + args.deadline
    results = {"device": f"{self.device.device_kind} ({self.device.platform})",
               "jax": self.jax.__version__, "tensorflow_lowered": self.manifest["tensorflow"],
               "date": time.strftime("%Y-%m-%d"), "settings": vars(args), "workloads": []}
    groups = {}
    for record in self.manifest["modules"]:
      if not args.only or record["workload"] in args.only.split(","):
        groups.setdefault(record["workload"], []).append(record)
    pool = concurrent.futures.ThreadPoolExecutor(args.compile_threads)
    self.compiled = {}
    for records in groups.values():
      for record in records:
        if record["status"] == "ok":
          self.compiled[(record["workload"], record["form"])] = pool.submit(self.compile, record)
    # All compiled before any is timed: XLA's GPU compiles autotune kernels on the device,
    # which would disturb the timings of a workload running beside them.
    concurrent.futures.wait(list(self.compiled.values()))
    results["compile_phase_s"] = time.perf_counter() - start
    print(f"compiled {len(self.compiled)} modules in {results['compile_phase_s']:.0f} s "
          f"on {args.compile_threads} threads", flush=True)
    for name, records in groups.items():
      if time.perf_counter() > deadline:
        results["workloads"].append({"workload": name, "batch": records[0]["batch"],
                                     "skipped": "deadline"})
        print(f"{name}: skipped (deadline)", flush=True)
        continue
      begin = time.perf_counter()
      try:
        result = self.run_workload(records)
      except Exception as e:  # pylint: disable=broad-except
        result = {"workload": name, "batch": records[0]["batch"],
                  "error": f"{type(e).__name__}: {str(e)[:500]}"}
      result["seconds"] = time.perf_counter() - begin
      results["workloads"].append(result)
      print(_line(result), flush=True)
      results["total_s"] = time.perf_counter() - start
      with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    pool.shutdown(wait=False, cancel_futures=True)
    print(table(results), flush=True)
    return 0


def _line(result):
  if "error" in result:
    return f"{result['workload']}: ERROR {result['error']}"
  parts = []
  for form, e in result["forms"].items():
    if "ms" in e:
      parts.append(f"{form} {e['ms']:.3f} ms ({e['status']}, err {e['check']['max_rel']:.1e}, "
                   f"compile {e.get('compile_s', 0):.1f} s)")
    else:
      parts.append(f"{form} {e.get('status')}: {str(e.get('reason'))[:100]}")
  return (f"{result['workload']} b{result['batch']} ({result['seconds']:.0f} s): " +
          "; ".join(parts))


def table(results):
  """A markdown table of the results."""
  lines = [f"Device: {results['device']}, JAX {results['jax']}; HLO lowered by TensorFlow "
           f"{results['tensorflow_lowered']} (XLA_CPU_JIT). ms per call: median of calls, each "
           "waited for.", "",
           "| workload | batch | hand-batched ms | vectorize ms | tf pfor ms | vec/hand | "
           "vec/tf pfor | max rel err vs TF CPU (hand / vec / pfor) | vec vs hand (device) |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
  for r in results["workloads"]:
    if "forms" not in r:
      lines.append(f"| {r['workload']} | {r['batch']} | " + (r.get("skipped") or r.get("error"))
                   + " | | | | | | |")
      continue
    cells, errs = [], []
    for form in FORMS:
      e = r["forms"].get(form, {})
      if "ms" in e:
        cells.append(f"{e['ms']:.3f}" + ("" if e["status"] == "ok" else " (wrong)"))
        errs.append(f"{e['check']['max_rel']:.1e}")
      else:
        cells.append(e.get("status", "-") if e else "-")
        errs.append("-")
    ratio = lambda k: f"{r[k]:.2f}" if k in r else "-"
    vh = r["forms"].get("vectorize", {}).get("vs_hand_rel")
    lines.append(f"| {r['workload']} | {r['batch']} | " + " | ".join(cells) +
                 f" | {ratio('vectorize/hand-batched')} | {ratio('vectorize/tf pfor')} | " +
                 " / ".join(errs) + f" | {'-' if vh is None else f'{vh:.1e}'} |")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--dir", default=".gpu_hlo")
  parser.add_argument("--out", default="hlo_results.json")
  parser.add_argument("--only", default="", help="workloads, comma-separated (default all)")
  parser.add_argument("--route", default="hlo", choices=("hlo", "stablehlo"))
  parser.add_argument("--compile_threads", type=int, default=1,
                      help="compile threads (8 crashed with a segmentation fault on the "
                           "H200, 2026-11-28; 2 ran on the CPU)")
  parser.add_argument("--deadline", type=float, default=300.0,
                      help="seconds after which no further workload starts")
  parser.add_argument("--warmup", type=int, default=3)
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--round_s", type=float, default=0.2)
  parser.add_argument("--max_calls", type=int, default=50)
  parser.add_argument("--pipelined", type=int, default=20)
  parser.add_argument("--tolerance", type=float, default=1e-2,
                      help="largest relative error accepted against TF's CPU output (the "
                           "GPU's float32 matrix products may use TF32: about 1e-3)")
  parser.add_argument("--precision", default="default", choices=("default", "highest"),
                      help="highest: full float32 dots and convolutions (no TF32 on GPUs)")
  parser.add_argument("--portable_check", action="store_true",
                      help="serialize each module to portable StableHLO first, as a PJRT "
                           "plugin (the CUDA one) does: a CPU run then fails where it would")
  parser.add_argument("--platform", default="",
                      help="refuse to run unless JAX's default device is this (e.g. gpu)")
  parser.add_argument("--table", default="",
                      help="only print the markdown table of an earlier results JSON")
  args = parser.parse_args(argv)
  if args.table:
    with open(args.table) as f:
      print(table(json.load(f)))
    return 0
  return Runner(args).main()


if __name__ == "__main__":
  sys.exit(main())
