"""Recursive per-example programs batched by the program-counter mode (`autobatch`).

Programs (each written once for ONE example, plain Python):
  fib        double recursion, inputs uniform in 5..15 (the issue's anchor)
  fib_loop   a recursion inside a loop: sum of fib(k) for k < n, n in 5..12

Forms, all checked against the per-example loop before they are timed:
  eager loop      the plain function called per example, eagerly (timed on a sample of
                  examples and scaled to the batch: at batch 1000 it runs for minutes)
  autobatch       `vectorize.autobatch(fn)` in `tf.function`
  autobatch XLA   the same in `tf.function(jit_compile=True)`
  tfp / tfp XLA   TFP's `auto_batching` (when `tensorflow_probability` imports), written as
                  it requires: decorated, typed by hand, batch-aware, loops as tail recursion

Run: `python -m benchmarks.workloads.recursion [--batch 1000] [--rounds 5] [--sample 40]`.
Prints first-call and median steady-state seconds and the ratios, and writes them as
markdown to `--out` if given. `--first-calls 3` instead times first calls under XLA, each in
a fresh process (after TF's own warm-up), autobatch and TFP alternating.

`FIB` and `FIB_LOOP` are the same programs as workloads of the suite (`benchmarks.run`):
hand-batched is the iterative batched program (O(n) steps, the speed limit), the loop's
place holds TFP's auto_batching (what users of recursion write otherwise: `tf.map_fn` cannot
trace a recursive function), and TF's pfor (`tf.vectorized_map`) fails to trace it.
"""

import argparse
import json
import logging
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf

import vectorize
from benchmarks import timing
from benchmarks import workload


def fib(n):
  if n < 2:
    return n
  return fib(n - 1) + fib(n - 2)


def fib_loop(n):
  total = 0
  k = n * 0            # a tensor counter: the eager loop calls fib on tensors, not Python ints
  while k < n:
    total += fib(k)
    k += 1
  return total


PROGRAMS = {"fib": (fib, 5, 16, 16), "fib_loop": (fib_loop, 5, 13, 16)}  # fn, low, high, depth


def _iterated(n, step):
  """Runs `step(k, a, b, acc) -> acc` for k < max(n) over the batch, (a, b) = (fib(k),
  fib(k + 1)); returns acc (starting at zeros)."""
  def body(k, a, b, acc):
    return k + 1, b, a + b, step(k, a, b, acc)
  zeros = tf.zeros_like(n)
  return tf.while_loop(lambda k, *_: k < tf.reduce_max(n), body,
                       [tf.constant(0), zeros, zeros + 1, zeros])[3]


def fib_hand(n):
  """fib of every n at once, iteratively."""
  return _iterated(n, lambda k, a, b, acc: tf.where(k == n - 1, b, acc))


def fib_loop_hand(n):
  """sum of fib(k) for k < n, for every n at once, iteratively."""
  return _iterated(n, lambda k, a, b, acc: acc + tf.where(k < n, a, 0))


HAND = {"fib": fib_hand, "fib_loop": fib_loop_hand}


class _NotTfpAllocationNotes(logging.Filter):
  """Drops auto_batching's note on its own register allocation ("Found variables with NULL
  allocation"), which it logs as a warning for every program it compiles: noise in a run
  of the suite, which is not about TFP's allocator."""

  def filter(self, record):
    return "auto_batching" not in record.pathname.replace("\\", "/")


def tfp_quietly():
  """tensorflow_probability, or None where it does not import; its auto_batching's
  allocation notes are not logged."""
  try:
    import tensorflow_probability as tfp  # pylint: disable=import-outside-toplevel
  except ImportError:
    return None
  absl_logger = logging.getLogger("absl")
  if not any(isinstance(f, _NotTfpAllocationNotes) for f in absl_logger.filters):
    absl_logger.addFilter(_NotTfpAllocationNotes())
  return tfp


def _tfp_forms(name, depth):
  """TFP auto_batching's version of the program (None if TFP does not import)."""
  tfp = tfp_quietly()
  if tfp is None:
    return None
  ab = tfp.experimental.auto_batching
  ctx = ab.Context()     # one per program: TFP types every function of a context

  @ctx.batch(type_inference=lambda types: types[0])
  def tfp_fib(n):
    if n > 1:
      left = tfp_fib(n - 1)
      right = tfp_fib(n - 2)
      return left + right
    else:
      return n

  if name == "fib":
    main = tfp_fib
  else:
    @ctx.batch(type_inference=lambda types: types[2])
    def tfp_fib_loop(k, n, total):           # TFP has no loops: tail recursion instead
      if k < n:
        f = tfp_fib(k)
        return tfp_fib_loop(k + 1, n, total + f)
      else:
        return total
    main = tfp_fib_loop
  backend = ab.TensorFlowBackend(safety_checks=False)

  def run(x):
    args = (x,) if name == "fib" else (tf.zeros_like(x), x, tf.zeros_like(x))
    return main(*args, max_stack_depth=depth, backend=backend)
  return run


def forms(name, batch):
  fn, low, high, depth = PROGRAMS[name]
  x = tf.constant(np.random.default_rng(0).integers(low, high, size=[batch]), tf.int32)
  batched = vectorize.autobatch(fn, max_stack_depth=depth)
  compiled = {"autobatch": tf.function(batched),
              "autobatch XLA": tf.function(batched, jit_compile=True)}
  tfp_run = _tfp_forms(name, depth)
  if tfp_run is not None:
    compiled["tfp"] = tf.function(tfp_run)
    compiled["tfp XLA"] = tf.function(tfp_run, jit_compile=True)
  return fn, x, {form: (lambda f=f: f(x)) for form, f in compiled.items()}


def build(name):
  """The suite's `build(batch, jit_compile)` of a program (see the module docstring)."""
  def forms_at(batch, jit_compile=False):
    del jit_compile
    fn, low, high, depth = PROGRAMS[name]
    x = tf.constant(np.random.default_rng(0).integers(low, high, size=[batch]), tf.int32)
    batched = vectorize.autobatch(fn, max_stack_depth=depth)
    tfp_run = _tfp_forms(name, depth)
    return {workload.HAND: lambda: HAND[name](x),
            workload.VECTORIZE: lambda: batched(x),
            # TFP stages the program in a graph of its own: give it a graph tensor.
            workload.LOOP: (lambda: tfp_run(tf.identity(x))) if tfp_run else _no_tfp,
            workload.TF_PFOR: lambda: tf.vectorized_map(fn, x)}
  return forms_at


def _no_tfp():
  raise ImportError("tensorflow_probability is not installed (pip install -e '.[bench]')")


_FORMS = {workload.HAND: "the iterative batched program", workload.VECTORIZE: "autobatch",
          workload.LOOP: "TFP auto_batching (tf.map_fn cannot trace recursion)",
          workload.TF_PFOR: "tf.vectorized_map"}

# Not a crash: tf.vectorized_map fails at once to trace a recursive function (autograph:
# a tensor used as a Python bool); recorded as failing, not run.
_NOT_TRACEABLE = {label: "tf.vectorized_map cannot trace a recursive function" for label in
                  ("tf pfor", "tf pfor (XLA)")}

FIB = workload.Workload(
    name="pc_fib", title="recursive fib(n), n uniform in 5..15 (program-counter mode)",
    unit="examples", build=build("fib"), forms=_FORMS, crashes=_NOT_TRACEABLE,
    batch_sizes=(1, 10, 100, 1000),
    quick_batch_sizes=(1000,))

FIB_LOOP = workload.Workload(
    name="pc_fib_loop",
    title="a recursion inside a loop: sum of fib(k) for k < n, n uniform in 5..12 "
          "(program-counter mode)",
    unit="examples", build=build("fib_loop"), forms=_FORMS, crashes=_NOT_TRACEABLE,
    batch_sizes=(1, 10, 100, 1000),
    quick_batch_sizes=(1000,))


def eager_loop_seconds(fn, x, sample):
  """Seconds of the per-example eager loop over the batch, from a sample of examples."""
  values = x.numpy()
  picked = values[np.linspace(0, len(values) - 1, sample).astype(int)]
  start = time.perf_counter()
  for v in picked:
    np.asarray(fn(tf.constant(v)))
  return (time.perf_counter() - start) * len(values) / sample


def _warm_up():
  """Pays TF's one-time costs (first tf.function, first XLA compile) before any form."""
  tf.function(lambda v: v * 2, jit_compile=True)(tf.ones([2]))
  tf.function(lambda v: tf.while_loop(lambda k: k < 3, lambda k: k + 1, [v]))(tf.constant(0))
  vectorize.pfor(lambda i: tf.cast(i, tf.float32) * 2.0, 4)


def measure(name, batch, rounds, sample):
  _warm_up()
  fn, x, fs = forms(name, batch)
  expected = np.array([int(fn(tf.constant(v))) for v in x.numpy()[:50]])
  first = {}
  for form, f in fs.items():
    first[form] = timing.seconds(f)
    got = f().numpy()[:50]
    if not np.array_equal(got, expected):
      raise AssertionError(f"{name}/{form}: wrong result {got[:8]} vs {expected[:8]}")
  times = {form: [] for form in fs}
  times["eager loop"] = []
  for _ in range(rounds):
    for form, f in fs.items():
      times[form].append(timing.seconds(f))
    times["eager loop"].append(eager_loop_seconds(fn, x, sample))
  return first, {k: float(np.median(v)) for k, v in times.items()}, times


def first_call_in_this_process(f):
  """Wall and CPU seconds (all threads: XLA compiles on its own) of `f`'s first call."""
  cpu, wall = time.process_time(), time.perf_counter()
  timing.run(f)
  return {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}


def fresh_first_calls(module, forms, rounds, args):
  """First calls, each in a fresh process (`python -m module --first-call-of FORM args`),
  forms alternating round by round: {form: [{"wall": s, "cpu": s}, ...]}."""
  out = {form: [] for form in forms}
  for _ in range(rounds):
    for form in forms:
      run = subprocess.run([sys.executable, "-m", module, "--first-call-of", form] + args,
                           capture_output=True, text=True, check=True)
      out[form].append(json.loads(run.stdout.strip().splitlines()[-1]))
  return out


def first_call_report(title, calls, baseline):
  """A table of fresh-process first calls, with each form's median ratio to `baseline`
  (ratios within rounds)."""
  lines = [f"### {title}", "", "| form | wall s (median) | CPU s (median) | "
           f"wall / {baseline} | CPU / {baseline} |", "| --- | ---: | ---: | ---: | ---: |"]
  for form, runs in calls.items():
    wall, cpu = ([r[k] for r in runs] for k in ("wall", "cpu"))
    base_wall, base_cpu = ([r[k] for r in calls[baseline]] for k in ("wall", "cpu"))
    lines.append(f"| {form} | {np.median(wall):.2f} | {np.median(cpu):.2f} | "
                 f"{timing.median_ratio(wall, base_wall):.2f}x | "
                 f"{timing.median_ratio(cpu, base_cpu):.2f}x |")
  return "\n".join(lines)


def report(name, batch, first, median, times):
  lines = [f"### {name}, batch {batch} (medians of {len(times['eager loop'])} interleaved "
           "rounds; eager loop scaled from a sample)", "",
           "| form | first call s | steady s | eager loop / form | form / tfp same mode |",
           "| --- | --- | --- | --- | --- |"]
  for form in [f for f in times if f != "eager loop"] + ["eager loop"]:
    speedup = timing.median_ratio(times["eager loop"], times[form])
    versus = ""
    twin = "tfp XLA" if form.endswith("XLA") else "tfp"
    if form.startswith("autobatch") and twin in times:
      versus = f"{timing.median_ratio(times[form], times[twin]):.2f}x"
    lines.append(f"| {form} | {first.get(form, float('nan')):.2f} | {median[form]:.3f} | "
                 f"{speedup:.0f}x | {versus} |")
  return "\n".join(lines)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--batch", type=int, default=1000)
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--sample", type=int, default=40)
  parser.add_argument("--programs", default="fib,fib_loop")
  parser.add_argument("--out", default=None)
  parser.add_argument("--first-calls", type=int, default=0,
                      help="instead: this many rounds of fresh-process first calls under XLA")
  parser.add_argument("--first-call-of", default=None, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.first_call_of:           # a child of --first-calls: one first call, as JSON
    _warm_up()
    print(json.dumps(first_call_in_this_process(
        forms(args.programs, args.batch)[2][args.first_call_of])))
    return
  sections = []
  if args.first_calls:
    for name in args.programs.split(","):
      calls = fresh_first_calls("benchmarks.workloads.recursion", ["autobatch XLA", "tfp XLA"],
                                args.first_calls, ["--programs", name, "--batch",
                                                   str(args.batch)])
      sections.append(first_call_report(
          f"{name}, batch {args.batch}: first call under XLA in a fresh process (medians "
          f"of {args.first_calls} alternating rounds)", calls, "tfp XLA"))
      print(sections[-1], flush=True)
  for name in args.programs.split(",") if not args.first_calls else []:
    first, median, times = measure(name, args.batch, args.rounds, args.sample)
    sections.append(report(name, args.batch, first, median, times))
    print(sections[-1], flush=True)
  if args.out:
    with open(args.out, "w") as f:
      f.write("\n\n".join(sections) + "\n")


if __name__ == "__main__":
  main()
