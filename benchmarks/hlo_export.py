"""Exports the suite's XLA-compiled forms as HLO modules, with their inputs and TF's outputs,
so that a machine with XLA but no TensorFlow can compile, check and time them.

Why this route exists: the GPU machines lent to this project have JAX (jaxlib, XLA, CUDA)
but no TensorFlow, nothing can be installed there, and a TensorFlow GPU stack is far larger
than what can be carried to them. TensorFlow lowers a `tf.function(jit_compile=True)` to HLO
itself (`experimental_get_compiler_ir`), without running it, so the graphs vectorize emits
(and the hand-batched and `tf.vectorized_map` forms they are compared with) can be lowered
here, on a CPU machine with TensorFlow, and compiled there by JAX's XLA client:
`benchmarks/hlo_run.py` does that, with no TensorFlow import.

For each workload (benchmarks/workloads) at one batch size, and each of the forms
hand-batched, vectorize and tf pfor, this script:

  1. builds the form as the suite does (`workload.build(batch, False)`), wraps it in
     `tf.function(jit_compile=True)`, reads the values of every captured input (the
     workload's constant inputs and its variables, Keras layers' included) and calls it
     once on the CPU: the output (and the variables' values after the call, for forms that
     update them, e.g. the DP-SGD step) is the reference the other machine checks against;
  2. lowers it with `experimental_get_compiler_ir()(stage="hlo_serialized")` (an
     HloModuleProto: it keeps large constants, which the text form elides); with
     --stablehlo it also keeps `stage="stablehlo_serialized"`, a second route. Captured
     inputs become the entry computation's parameters, in capture order (a resource
     variable becomes a parameter of its value's type); variables the function assigns
     come back as extra outputs after its own, aliased with their parameters (TF updates
     them in place; the runner feeds them to the next call). The parameter list is read
     off the HLO's entry layout and matched with the captured inputs; a mismatch is
     recorded, not guessed around;
  3. writes `modules/<workload>__<form>.hlo.pb.gz` (gzip: the protos repeat TF's source
     metadata; with --stablehlo also `.stablehlo.mlirbc`), each distinct
     input array once (`blobs/<hash>.npy.gz`; forms and workloads share weights), the
     reference output (whole when small, else 16,384 evenly spaced elements plus its
     norm, sum and largest magnitude) and `manifest.json` tying them together. A form that
     does not lower (an op XLA has no kernel for) is recorded with its error.

TensorFlow lowers on its CPU device (XLA_CPU_JIT): it refuses `platform_name="GPU"` for
functions holding resource variables when no GPU is present. TF's op-to-HLO kernels are
shared by its CPU and GPU devices for the ops these workloads use, as far as known (not
checked against a TF GPU lowering); XLA's own passes, which do differ by device, run on the
other machine.

  python -m benchmarks.hlo_export --out=.gpu_hlo                  # the default set
  python -m benchmarks.hlo_export --out=/tmp/x --only=linear:64   # one workload, batch 64
"""

import argparse
import gc
import gzip
import hashlib
import json
import os
import re
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf

from benchmarks import measure
from benchmarks import workload as wl
from benchmarks import workloads

# Workloads and batch sizes exported by default, in the order the GPU runner runs them
# (most important first: the runner stops at its deadline). Batch = output rows for the
# jacobians, chains for NUTS. per_example_convnet's output is 13 MB per example.
DEFAULT = (
    ("per_example_convnet", 256), ("per_example_lstm", 256), ("keras_dp_sgd", 256),
    ("keras_transformer", 256), ("convnet", 1024), ("keras_inference", 1024),
    ("linear", 1024), ("map_fn", 256), ("jacobian_vgg", 256), ("jacobian_lstm", 256),
    ("batch_jacobian_lstm", 256), ("varlen_lstm", 128), ("varlen_lstm_constants", 128),
    ("keras_augmentation", 128), ("pc_fib", 1000), ("pc_fib_loop", 1000), ("pc_nuts", 1000),
)
# map_fn, varlen_lstm and keras_augmentation run at smaller batches than the others: their
# inputs (random arrays the lent machine cannot regenerate) are 4-16 MB per 256 examples,
# and everything carried to it must fit in 64 MiB with the repository.
# Not exported: data_pipeline and tfdata_records compile inside tf.data (per-batch map
# functions), not a function of the whole job; pc_nuts_correlated100 repeats pc_nuts.
FORMS = (wl.HAND, wl.VECTORIZE, wl.TF_PFOR)
FULL_LIMIT = 65536      # outputs up to this many elements are kept whole
SAMPLES = 16384         # else this many evenly spaced elements

_HLO_TYPES = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16",
              "s8": "int8", "s16": "int16", "s32": "int32", "s64": "int64", "u8": "uint8",
              "u16": "uint16", "u32": "uint32", "u64": "uint64", "pred": "bool"}


def sample_indices(size):
  """The flat indices of an output's kept elements (hlo_run.py computes the same)."""
  if size <= FULL_LIMIT:
    return np.arange(size, dtype=np.int64)
  return np.linspace(0, size - 1, SAMPLES).astype(np.int64)


def _shapes(text):
  """[(dtype, shape)] of an HLO layout list like `f32[8,3]{1,0}, s64[]` (tuples flattened)."""
  return [(_HLO_TYPES[t], [int(d) for d in dims.split(",") if d])
          for t, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", text)]


def entry_layout(hlo_text):
  """(parameters, outputs), each [(dtype, shape)], of an HLO module's entry computation."""
  match = re.search(r"entry_computation_layout=\{\((.*?)\)->(.*?)\}\n", hlo_text)
  if not match:
    raise ValueError("no entry_computation_layout in the HLO text")
  return _shapes(match.group(1)), _shapes(match.group(2))


def aliased_outputs(hlo_text):
  """[(output index, parameter index)] of an HLO module's input_output_alias (TF aliases
  each variable it assigns with its parameter: it updates variables in place)."""
  header = hlo_text.split("\n", 1)[0]
  match = re.search(r"input_output_alias=\{(.*?)\}, entry_computation_layout", header)
  return [(int(o), int(p)) for o, p in re.findall(r"\{(\d+)\}: \((\d+), \{\}",
                                                  match.group(1))] if match else []


class Store:
  """Arrays written once each under `blobs/` (gzipped .npy), named by a hash of their bytes."""

  def __init__(self, root):
    self.root = root
    os.makedirs(os.path.join(root, "blobs"), exist_ok=True)

  def put(self, array):
    array = np.ascontiguousarray(array)
    digest = hashlib.sha1(str((array.dtype.str, array.shape)).encode() +
                          array.tobytes()).hexdigest()[:20]
    path = os.path.join(self.root, "blobs", digest + ".npy.gz")
    if not os.path.exists(path):
      with gzip.open(path, "wb", compresslevel=1) as f:   # ~10%: activations' zeros
        np.save(f, array)
    return digest


def _captured_values(concrete):
  """[(kind, value before the call, variable or None)] of a concrete function's captures."""
  variables = list(concrete.graph.variables)
  values = []
  for t in concrete.captured_inputs:
    if t.dtype == tf.resource:
      owners = [v for v in variables if v.handle is t]
      if not owners:
        raise ValueError("a captured resource is no variable this function uses")
      values.append(("variable", owners[0].numpy(), owners[0]))
    else:
      values.append(("tensor", t.numpy(), None))
  return values


def _reference(array, store):
  """What the runner checks an output against: the whole array, or samples and summaries
  (norm, sum and largest magnitude, summed in float64 a slice at a time: a per-example
  gradient output is GBs)."""
  array = np.asarray(array)
  flat = array.reshape(-1)
  kept = flat[sample_indices(flat.size)]
  l2 = total = largest = 0.0
  for begin in range(0, flat.size, 1 << 24):
    part = flat[begin:begin + (1 << 24)].astype(np.float64)
    l2 += float(np.dot(part, part))
    total += float(np.sum(part))
    largest = max(largest, float(np.max(np.abs(part))))
  return {"dtype": array.dtype.name, "shape": list(array.shape), "whole": flat.size == kept.size,
          "kept": store.put(kept), "l2": float(np.sqrt(l2)), "sum": total, "max_abs": largest}


def export_form(workload, batch, form, fn, out, store, stablehlo=False):
  """One form's record for the manifest (written files: its modules and arrays)."""
  record = {"workload": workload.name, "batch": batch, "form": form}
  xla_label = form + measure.XLA
  if xla_label in workload.crashes or workload.crashes.get(form, "").startswith("wrong"):
    record.update(status="skipped", reason=workload.crashes.get(xla_label) or
                  workload.crashes[form])
    return record
  # A closure of no arguments: a form with a default argument (keras_augmentation's fresh
  # layers) would make that argument an input of the function to lower.
  compiled = tf.function(lambda: fn(), jit_compile=True)  # pylint: disable=unnecessary-lambda
  try:
    concrete = compiled.get_concrete_function()
    captured = _captured_values(concrete)
    assigned = [c for c in captured if c[0] == "variable"]
    start = time.perf_counter()
    flat = tf.nest.flatten(compiled())
    record["tf_cpu_first_call_s"] = time.perf_counter() - start
    shapes = [tuple(t.shape) for t in flat]
    references = [_reference(t.numpy(), store) for t in flat]
    del flat
    after_first = [v.numpy() for _, _, v in assigned]
    start = time.perf_counter()
    tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, compiled())
    record["tf_cpu_second_call_s"] = time.perf_counter() - start
    for _, before, v in assigned:    # as they were: this process's later forms share none,
      v.assign(before)               # but a rerun of this one would start here
  except Exception as e:  # pylint: disable=broad-except
    record.update(status="fails", stage="TF (CPU) compile or run",
                  reason=measure._first_line(e))  # pylint: disable=protected-access
    return record
  try:
    ir = compiled.experimental_get_compiler_ir()
    start = time.perf_counter()
    hlo = ir(stage="hlo_serialized")
    record["lower_s"] = time.perf_counter() - start
    text = ir(stage="hlo")
    shlo = None
    if stablehlo:
      try:
        shlo = ir(stage="stablehlo_serialized")
      except Exception as e:  # pylint: disable=broad-except
        record["stablehlo_error"] = measure._first_line(e)  # pylint: disable=protected-access
  except Exception as e:  # pylint: disable=broad-except
    record.update(status="fails", stage="lowering to HLO",
                  reason=measure._first_line(e))  # pylint: disable=protected-access
    return record
  params, results = entry_layout(text)
  # Match the parameters with the captured inputs, in order.
  if len(params) != len(captured) or any(
      (dt, shape) != (str(value.dtype), list(value.shape))
      for (dt, shape), (_, value, _) in zip(params, captured)):
    record.update(status="fails", stage="matching parameters",
                  reason=f"HLO parameters {params} are not the captured inputs "
                         f"{[(str(v.dtype), list(v.shape)) for _, v, _ in captured]}")
    return record
  extra = len(results) - len(shapes)
  updates = []
  if extra:
    if not assigned:
      record.update(status="fails", stage="matching outputs",
                    reason=f"{extra} more HLO outputs than the function's, no variable changed")
      return record
    # Which variable each extra output is: the module aliases it with that parameter.
    aliases = dict(aliased_outputs(text))
    variable_params = [k for k, c in enumerate(captured) if c[0] == "variable"]
    value_after = dict(zip(variable_params, after_first))
    if all(len(shapes) + k in aliases and aliases[len(shapes) + k] in value_after
           for k in range(extra)):
      updates = [value_after[aliases[len(shapes) + k]] for k in range(extra)]
    else:
      updates = []
      record["update_reference"] = "unmatched"   # checked on the function's outputs only
  if [tuple(r[1]) for r in results[:len(shapes)]] != shapes:
    record.update(status="fails", stage="matching outputs",
                  reason=f"HLO outputs {results} are not the function's {shapes}")
    return record
  stem = f"{workload.name}__{form.replace(' ', '_').replace('-', '_')}"
  os.makedirs(os.path.join(out, "modules"), exist_ok=True)
  with gzip.open(os.path.join(out, "modules", stem + ".hlo.pb.gz"), "wb") as f:
    f.write(hlo)
  if shlo is not None:
    with open(os.path.join(out, "modules", stem + ".stablehlo.mlirbc"), "wb") as f:
      f.write(shlo)
  record.update(
      status="ok", hlo="modules/" + stem + ".hlo.pb.gz",
      stablehlo=("modules/" + stem + ".stablehlo.mlirbc") if shlo is not None else None,
      params=[{"blob": store.put(value), "dtype": str(value.dtype), "shape": list(value.shape),
               "kind": kind, "name": v.name if v is not None else None}
              for kind, value, v in captured],
      outputs=references,
      updates=[_reference(a, store) for a in updates],
      hlo_outputs=len(results), hlo_bytes=len(hlo))
  return record


def export(selection, out, stablehlo=False):
  store = Store(out)
  manifest_path = os.path.join(out, "manifest.json")
  manifest = {"tensorflow": tf.__version__, "lowered_on": "XLA_CPU_JIT", "full_limit": FULL_LIMIT,
              "samples": SAMPLES, "modules": []}
  by_name = {w.name: w for w in workloads.ALL}
  for name, batch in selection:
    workload = by_name[name]
    print(f"{name} batch {batch}", flush=True)
    forms = workload.build(batch, False)
    for form in FORMS:
      start = time.perf_counter()
      record = export_form(workload, batch, form, forms[form], out, store, stablehlo)
      record["export_s"] = time.perf_counter() - start
      manifest["modules"].append(record)
      print(f"  {form}: {record['status']} ({record['export_s']:.1f} s)"
            + (f" {record.get('stage')}: {record['reason']}" if record["status"] != "ok" else ""),
            flush=True)
      gc.collect()
    del forms
    gc.collect()
    with open(manifest_path, "w") as f:     # after each workload: a partial export is usable
      json.dump(manifest, f, indent=1)
  return manifest


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out", default=".gpu_hlo")
  parser.add_argument("--only", default="", help="name:batch,... (default: the DEFAULT set)")
  parser.add_argument("--stablehlo", action="store_true",
                      help="also write TF's own StableHLO export of each module")
  args = parser.parse_args(argv)
  tf.get_logger().setLevel("ERROR")
  selection = ([(s.split(":")[0], int(s.split(":")[1])) for s in args.only.split(",")]
               if args.only else DEFAULT)
  export(selection, args.out, args.stablehlo)
  return 0


if __name__ == "__main__":
  sys.exit(main())
