"""The fuzzer's command line: generate, check in a child process, shrink, summarize.

  python -m tests.fuzz --minutes 60                # run seeds from 0 for an hour
  python -m tests.fuzz --start 1000 --seeds 200    # seeds 1000..1199
  python -m tests.fuzz --seeds 50 --modes xla,grad --out /tmp/fuzz

Programs run in one child process (TensorFlow imported once), so a hang is caught by a
per-mode timeout and a process abort (a kernel's CHECK failure) by the child's death; the
child is replaced in both cases, and every few hundred programs to bound memory. The first
program of each failure kind is shrunk to a standalone repro. Results go to --out:
`results.jsonl` (one line per program), `summary.json` and `repro_<n>.py` per kind.
"""

import argparse
import collections
import glob
import json
import multiprocessing
import os
import sys
import time

from tests.fuzz import check, programs, shrink

RESTART_EVERY = 300
XLA_LOOP_PROBE = "xla loop probe"   # a request: run only the plain loop under XLA
STARTUP_S = 900   # a child's TensorFlow import, which a loaded machine can make slow


def _serve(conn):
  """The child: answers (program, modes) with one (mode, Outcome) message per mode."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  tf.get_logger().setLevel("ERROR")
  from tests.fuzz import check as _  # pylint: disable=import-outside-toplevel
  conn.send("ready")
  while True:
    request = conn.recv()
    if request is None:
      return
    program, modes = request
    if modes == XLA_LOOP_PROBE:
      check.xla_loop(program)
      conn.send("survived")
      continue
    for mode, outcome in check.iter_check(program, modes):
      conn.send((mode, outcome))


class Worker:
  """A child process that checks programs; replaced when it hangs, dies, or has run many."""

  def __init__(self, timeout_s):
    self.timeout_s = timeout_s
    self.ctx = multiprocessing.get_context("spawn")
    self.proc = None
    self.served = 0

  def _start(self):
    self.conn, child = self.ctx.Pipe()
    self.proc = self.ctx.Process(target=_serve, args=(child,), daemon=True)
    self.proc.start()
    self.served = 0
    # The per-mode timeout starts once the child has imported TensorFlow: at load 15, an
    # import took longer than a mode's timeout and a program passing in 3 s was a 'hang'.
    if not self.conn.poll(STARTUP_S) or self.conn.recv() != "ready":
      raise RuntimeError(f"the checking process did not start in {STARTUP_S} s")

  def stop(self):
    if self.proc is not None:
      self.proc.kill()
      self.proc.join()
      self.proc = None

  def check(self, program, modes):
    """A Result with every mode's Outcome; `hang` / `abort` for a mode the child did not
    answer in time or died in (the remaining modes run in a fresh child)."""
    start = time.time()
    outcomes = {}
    pending = list(modes)
    while pending:
      if self.proc is None or self.served >= RESTART_EVERY or not self.proc.is_alive():
        self.stop()
        self._start()
      self.served += 1
      self.conn.send((program, pending))
      while pending:
        mode = pending[0]
        try:
          ready = self.conn.poll(self.timeout_s)
          got_mode, outcome = self.conn.recv() if ready else (None, None)
        except (EOFError, OSError):
          got_mode, outcome = mode, check.Outcome("abort", "the process died (exit code "
                                                  f"{self.proc.exitcode})")
          self.stop()
        if got_mode is None:
          got_mode, outcome = mode, check.Outcome("hang", f"no answer in {self.timeout_s} s")
          self.stop()
        if got_mode == "xla" and outcome.category == "abort" and self.xla_loop_aborts(program):
          outcome = check.Outcome("xla_unsupported", "XLA aborts the process on the plain "
                                  "loop too")
        outcomes[got_mode] = outcome
        pending.remove(got_mode)
        if self.proc is None:
          break
    return check.Result(program.seed, outcomes, time.time() - start)

  def xla_loop_aborts(self, program):
    """Whether the plain loop alone under XLA kills a fresh child: XLA's own aborts (three
    rot90s compiled together, seed 4600485) are not ours."""
    self.stop()
    self._start()
    self.conn.send((program, XLA_LOOP_PROBE))
    try:
      survived = self.conn.poll(self.timeout_s) and self.conn.recv() == "survived"
    except (EOFError, OSError):
      survived = False
    self.stop()
    return not survived


def _outcome_failing(worker, mode, kind):
  def still_fails(program):
    return worker.check(program, [mode]).outcomes[mode].kind == kind
  return still_fails


def main(argv=None):
  parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--start", type=int, default=0, help="first seed")
  parser.add_argument("--seeds", type=int, default=None,
                      help="number of programs (default: until --minutes ends)")
  parser.add_argument("--minutes", type=float, default=None, help="stop after this long")
  parser.add_argument("--modes", default=",".join(check.MODES),
                      help=f"comma-separated subset of {','.join(check.MODES)}")
  parser.add_argument("--out", default="/tmp/vectorize_fuzz", help="results directory")
  parser.add_argument("--timeout", type=float, default=180, help="seconds per mode")
  parser.add_argument("--shrink_minutes", type=float, default=5,
                      help="time per failure kind to shrink (0: no shrinking)")
  parser.add_argument("--skip_shrunk_in", default="",
                      help="glob of earlier runs' summary.json: kinds shrunk there are not "
                      "shrunk again (a campaign run in chunks)")
  args = parser.parse_args(argv)
  modes = [m for m in args.modes.split(",") if m]
  bad = set(modes) - set(check.MODES)
  if bad:
    parser.error(f"unknown modes {sorted(bad)}")
  if args.seeds is None and args.minutes is None:
    args.seeds = 100
  os.makedirs(args.out, exist_ok=True)
  deadline = time.time() + 60 * args.minutes if args.minutes else float("inf")
  worker = Worker(args.timeout)
  log = open(os.path.join(args.out, "results.jsonl"), "a")
  stats = collections.Counter()
  kinds = collections.OrderedDict()  # kind -> {"count", "modes", "seeds", "message"}
  unsupported = collections.Counter()
  invalid = collections.Counter()
  shrunk = {}
  done_elsewhere = set()
  for path in glob.glob(args.skip_shrunk_in) if args.skip_shrunk_in else []:
    with open(path) as f:
      done_elsewhere.update(json.load(f).get("repros", {}))
  seed = args.start
  t0 = time.time()
  try:
    while (args.seeds is None or seed < args.start + args.seeds) and time.time() < deadline:
      program = programs.generate(seed)
      result = worker.check(program, modes)
      stats["programs"] += 1
      cats = {o.category for o in result.outcomes.values()}
      for mode, o in result.outcomes.items():
        if o.category == "unsupported":
          unsupported[o.message] += 1
        if o.category == "invalid":
          invalid[check.normalize(o.message)] += 1
      fails = result.failures()
      if fails:
        stats["failing programs"] += 1
      elif "unsupported" in cats:
        stats["unsupported programs"] += 1
      elif cats <= {"invalid"}:
        stats["invalid programs"] += 1
      else:
        stats["passing programs"] += 1
      for mode, o in fails.items():
        entry = kinds.setdefault(o.kind, {"count": 0, "modes": collections.Counter(),
                                          "seeds": [], "message": o.message})
        entry["count"] += 1
        entry["modes"][mode] += 1
        if len(entry["seeds"]) < 10 and seed not in entry["seeds"]:
          entry["seeds"].append(seed)
      log.write(json.dumps({"seed": seed, "seconds": round(result.seconds, 2),
                            "outcomes": {m: [o.category, o.message]
                                         for m, o in result.outcomes.items()}}) + "\n")
      log.flush()
      for mode, o in fails.items():
        if o.kind in shrunk or o.kind in done_elsewhere or args.shrink_minutes <= 0:
          continue
        print(f"seed {seed} [{mode}] {o.kind}: shrinking", flush=True)
        pinned = _pin_grad_input(program)
        small = shrink.shrink(pinned, _outcome_failing(worker, mode, o.kind),
                              60 * args.shrink_minutes)
        shrunk[o.kind] = (seed, mode, check.repro(small, mode))
        path = os.path.join(args.out, f"repro_{len(shrunk)}.py")
        with open(path, "w") as f:
          f.write(f"# fuzz seed {seed}, mode {mode}: {o.message}\n" + shrunk[o.kind][2])
        print(f"  repro: {path}", flush=True)
      seed += 1
      if stats["programs"] % 50 == 0:
        print(f"{stats['programs']} programs in {time.time() - t0:.0f} s: "
              f"{dict(stats)}", flush=True)
        _write_summary(args.out, stats, kinds, unsupported, invalid, shrunk, seed)
  finally:
    worker.stop()
    log.close()
  _write_summary(args.out, stats, kinds, unsupported, invalid, shrunk, seed)
  _print_summary(stats, kinds, unsupported, invalid, shrunk, time.time() - t0)
  return 1 if kinds else 0


def _pin_grad_input(program):
  """Pins the gradient mode's input by name, so deleting inputs does not move it."""
  loaded = check.Loaded(program)
  k = check.grad_target(program, loaded)
  if k is not None:
    names = [inp.name for inp in check.ir.used_inputs(program) if not inp.variable]
    program.grad_input = names[k]
  return program


def _write_summary(out, stats, kinds, unsupported, invalid, shrunk, next_seed):
  summary = {
      "next_seed": next_seed, "stats": dict(stats),
      "failures": {k: {"count": v["count"], "modes": dict(v["modes"]), "seeds": v["seeds"],
                       "message": v["message"]} for k, v in kinds.items()},
      "unsupported": dict(unsupported.most_common()),
      "invalid": dict(invalid.most_common()),
      "repros": {k: {"seed": s, "mode": m, "source": src} for k, (s, m, src) in shrunk.items()},
  }
  with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)


def _print_summary(stats, kinds, unsupported, invalid, shrunk, seconds):
  print(f"\n{stats['programs']} programs in {seconds:.0f} s: {dict(stats)}")
  print(f"\nfailures by kind ({len(kinds)}):")
  for kind, v in sorted(kinds.items(), key=lambda kv: -kv[1]["count"]):
    print(f"  {v['count']:5d}  {kind}\n         modes {dict(v['modes'])}, seeds {v['seeds']}")
  print("\nunsupported op types (no converter):")
  for op, c in unsupported.most_common():
    print(f"  {c:5d}  {op}")
  if invalid:
    print("\ninvalid programs (the loop itself fails: generator bugs):")
    for msg, c in invalid.most_common(10):
      print(f"  {c:5d}  {msg}")
  for kind, (seed, mode, src) in shrunk.items():
    print(f"\n# ---- {kind}\n# seed {seed}, mode {mode}\n{src}")


if __name__ == "__main__":
  sys.exit(main())
