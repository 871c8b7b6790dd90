"""A recursive No-U-Turn Sampler written for ONE chain, batched over chains by `autobatch`.

The textbook algorithm (Hoffman & Gelman 2014, Algorithm 3: slice variable, tree doubling by
a recursive `build_tree`), in plain Python on one chain's state, with random numbers hashed
from a per-chain seed (the same eagerly and under XLA). Targets: a 10-d standard normal and
a 100-d correlated Gaussian. Compared, one transition per call, against
`tfp.mcmc.NoUTurnSampler` (iterative, hand-unrolled: the limit) and TFP's auto-batched
recursive `tfp.experimental.mcmc.NoUTurnSampler`, plain and under XLA, and against the
per-chain eager loop (on a sample of chains, scaled).

Run: `python -m benchmarks.workloads.nuts [--chains 1,10,100,1000] [--rounds 3]`
(`--first-calls 3`: first calls under XLA instead, each in a fresh process, alternating;
`--transitions 20`: chains of 20 transitions per call, `nuts_chains.py`).
`NUTS` and `NUTS_CORRELATED` are the same transitions as workloads of the suite
(`benchmarks.run`, batch = chains).
"""

import argparse
import json
import time

import numpy as np
import tensorflow as tf

import vectorize
from benchmarks import timing
from benchmarks import workload
from benchmarks.workloads import recursion

MAX_DEPTH = 10
STEP_SIZE = {"normal10": 0.3, "correlated100": 0.05, "funnel10": 0.2}


def _correlated_precision(dim):
  rng = np.random.default_rng(7)
  q, _ = np.linalg.qr(rng.standard_normal([dim, dim]))
  scales = np.linspace(0.5, 2.0, dim)
  covariance = (q * scales ** 2) @ q.T
  return tf.constant(np.linalg.inv(covariance), tf.float32)


PRECISION = {"normal10": tf.eye(10), "correlated100": _correlated_precision(100)}
DIM = {"normal10": 10, "correlated100": 100, "funnel10": 10}
TARGET = ["normal10"]        # the target the per-chain functions below read; set per run


def log_prob(theta):
  """The target's log density (one chain's state; no Python `if`: autobatch would take a
  function with control flow for a program function, and the gradient tape around it)."""
  return batch_log_prob(TARGET[0])(theta[None])[0]


def _funnel_log_prob(v, x, axis):
  """Neal's funnel: v ~ N(0, 3^2), each x_i ~ N(0, exp(v)). Trees are deep in the neck
  (small v) and shallow in the mouth, so tree depths differ widely between transitions."""
  return (-v * v / 18.0 - 0.5 * tf.reduce_sum(x * x, axis) * tf.exp(-v)
          - 0.5 * tf.cast(tf.shape(x)[axis], tf.float32) * v)


def batch_log_prob(target):
  """The target's log density of a batch of states `[chains, dim]` (TFP's samplers)."""
  return _BATCH_LOG_PROB.get(target, lambda x: -0.5 * tf.reduce_sum(
      x * tf.linalg.matvec(PRECISION[target], x), -1))


_BATCH_LOG_PROB = {"funnel10": lambda x: _funnel_log_prob(x[:, 0], x[:, 1:], -1)}


def value_and_gradient(theta):
  with tf.GradientTape() as tape:
    tape.watch(theta)
    value = log_prob(theta)
  return value, tape.gradient(value, theta)


def leapfrog(theta, r, grad, eps):
  r = r + 0.5 * eps * grad
  theta = theta + eps * r
  logp, grad = value_and_gradient(theta)
  r = r + 0.5 * eps * grad
  return theta, r, grad, logp


def child_seed(seed, k):
  return tf.stack([seed[0] * 3 + k, seed[1] + 7919 * k + 1])


def _mix(x):
  """An integer hash (wrapping int32 arithmetic): TF's stateless random ops draw other
  numbers under XLA than eagerly, and the check compares the XLA form with eager chains."""
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16)) * 73244475
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16)) * 73244475
  return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))


def _uniforms(seed, counters):
  bits = _mix(_mix(seed[0] * 31 + counters) + seed[1])
  return (tf.cast(tf.bitwise.bitwise_and(bits, 8388607), tf.float32) + 0.5) / 8388608.0


def uniform(seed):
  return _uniforms(seed, 0)


def normal(seed, dim):
  """Box-Muller from hashed uniforms."""
  counters = tf.range(1, dim + 1)
  u1, u2 = _uniforms(seed, 2 * counters), _uniforms(seed, 2 * counters + 1)
  return tf.sqrt(-2.0 * tf.math.log(u1)) * tf.cos(6.283185307 * u2)


def no_uturn(theta_m, theta_p, r_m, r_p):
  span = theta_p - theta_m
  return tf.logical_and(tf.reduce_sum(span * r_m) >= 0.0, tf.reduce_sum(span * r_p) >= 0.0)


def build_tree(theta, r, grad, logu, v, j, eps, seed):
  """A subtree of 2**j leapfrog steps in direction v: its two ends, a sample, its count of
  points inside the slice, and whether it is still free of U-turns and divergences."""
  if j == 0:
    theta1, r1, grad1, logp1 = leapfrog(theta, r, grad, v * eps)
    joint = logp1 - 0.5 * tf.reduce_sum(r1 * r1)
    n1 = tf.cast(logu <= joint, tf.float32)
    s1 = logu < joint + 1000.0
    return theta1, r1, grad1, theta1, r1, grad1, theta1, n1, s1
  theta_m, r_m, grad_m, theta_p, r_p, grad_p, theta1, n1, s1 = build_tree(
      theta, r, grad, logu, v, j - 1, eps, child_seed(seed, 1))
  if s1:
    if v < 0.0:
      theta_m, r_m, grad_m, a, b, c, theta2, n2, s2 = build_tree(
          theta_m, r_m, grad_m, logu, v, j - 1, eps, child_seed(seed, 2))
    else:
      a, b, c, theta_p, r_p, grad_p, theta2, n2, s2 = build_tree(
          theta_p, r_p, grad_p, logu, v, j - 1, eps, child_seed(seed, 2))
    if uniform(child_seed(seed, 3)) * (n1 + n2) < n2:
      theta1 = theta2
    n1 = n1 + n2
    s1 = s2 and no_uturn(theta_m, theta_p, r_m, r_p)
  return theta_m, r_m, grad_m, theta_p, r_p, grad_p, theta1, n1, s1


def nuts_step(theta, seed, eps):
  """One NUTS transition of one chain from `theta` (a vector)."""
  r0 = normal(child_seed(seed, 1), tf.shape(theta)[0])
  logp0, grad0 = value_and_gradient(theta)
  logu = logp0 - 0.5 * tf.reduce_sum(r0 * r0) + tf.math.log(uniform(child_seed(seed, 2)))
  theta_m, r_m, grad_m = theta, r0, grad0
  theta_p, r_p, grad_p = theta, r0, grad0
  result = theta
  n = 1.0
  s = True
  j = 0
  while s and j < MAX_DEPTH:
    sub = child_seed(seed, 10 + j)
    if uniform(child_seed(sub, 0)) < 0.5:
      theta_m, r_m, grad_m, a, b, c, theta1, n1, s1 = build_tree(
          theta_m, r_m, grad_m, logu, -1.0, j, eps, sub)
    else:
      a, b, c, theta_p, r_p, grad_p, theta1, n1, s1 = build_tree(
          theta_p, r_p, grad_p, logu, 1.0, j, eps, sub)
    if s1 and uniform(child_seed(sub, 1)) * n < n1:
      result = theta1
    n = n + n1
    s = s1 and no_uturn(theta_m, theta_p, r_m, r_p)
    j += 1
  return result


def _inputs(target, chains):
  TARGET[0] = target
  rng = np.random.default_rng(0)
  theta = tf.constant(rng.standard_normal([chains, DIM[target]]), tf.float32)
  seeds = tf.constant(rng.integers(0, 2 ** 30, size=[chains, 2]), tf.int32)
  return theta, seeds, tf.fill([chains], STEP_SIZE[target])


def samplers(target, chains):
  """{form: zero-argument function} of one transition of `chains` chains, not compiled:
  "autobatch", and with TFP "tfp iterative" and "tfp recursive"."""
  theta, seeds, eps = _inputs(target, chains)
  batched = vectorize.autobatch(nuts_step, max_stack_depth=MAX_DEPTH + 1)
  result = {"autobatch": lambda: batched(theta, seeds, eps)}
  tfp = recursion.tfp_quietly()
  if tfp is not None:
    iterative = tfp.mcmc.NoUTurnSampler(batch_log_prob(target), STEP_SIZE[target],
                                        max_tree_depth=MAX_DEPTH)
    recursive = tfp.experimental.mcmc.NoUTurnSampler(batch_log_prob(target),
                                                     STEP_SIZE[target],
                                                     max_tree_depth=MAX_DEPTH, seed=1)
    result["tfp iterative"] = lambda: iterative.one_step(
        theta, iterative.bootstrap_results(theta), seed=(1, 2))[0]
    # Its seed is the constructor's; it stages its program in a graph of its own.
    result["tfp recursive"] = lambda: recursive.one_step(
        tf.identity(theta), recursive.bootstrap_results(tf.identity(theta)))[0]
  return result


def forms(target, chains):
  """{form: zero-argument callable} for one transition of `chains` chains, each form
  compiled plain and under XLA."""
  theta, seeds, eps = _inputs(target, chains)
  result = {}
  for form, f in samplers(target, chains).items():
    for xla in (False, True):
      result[form + (" XLA" if xla else "")] = tf.function(f, jit_compile=xla)
  return theta, seeds, eps, result


def build(target):
  """The suite's `build(chains, jit_compile)` on a target. Samplers with different random
  streams cannot agree on a transition, so every form returns the fraction of chains whose
  new state is finite (the runner's check); autobatch's transition is checked against
  per-chain transitions in tests/pc/test_nuts_program.py and by `python -m
  benchmarks.workloads.nuts`."""
  def forms_at(chains, jit_compile=False):
    del jit_compile
    fs = samplers(target, chains)
    theta, seeds, eps = _inputs(target, chains)
    finite = lambda f: lambda: tf.reduce_mean(tf.cast(tf.math.is_finite(f()), tf.float32))
    return {workload.HAND: finite(fs.get("tfp iterative", _no_tfp)),
            workload.VECTORIZE: finite(fs["autobatch"]),
            workload.LOOP: finite(fs.get("tfp recursive", _no_tfp)),
            workload.TF_PFOR: finite(lambda: tf.vectorized_map(
                lambda args: nuts_step(*args), (theta, seeds, eps)))}
  return forms_at


def _no_tfp():
  raise ImportError("tensorflow_probability is not installed (pip install -e '.[bench]')")


_FORMS = {workload.HAND: "tfp.mcmc.NoUTurnSampler (iterative, hand-unrolled)",
          workload.VECTORIZE: "autobatch of the recursive per-chain sampler",
          workload.LOOP: "TFP's auto-batched recursive tfp.experimental.mcmc.NoUTurnSampler "
                         "(tf.map_fn cannot trace recursion)",
          workload.TF_PFOR: "tf.vectorized_map of the per-chain sampler"}

# Not a crash: tf.vectorized_map fails at once to trace the recursive sampler (autograph:
# a tensor as a recursion bound); recorded as failing, not run.
_NOT_TRACEABLE = {label: "tf.vectorized_map cannot trace a recursive function" for label in
                  ("tf pfor", "tf pfor (XLA)")}

NUTS = workload.Workload(
    name="pc_nuts", title="one NUTS transition, 10-d standard normal, batch = chains "
                          "(program-counter mode)",
    unit="chains", build=build("normal10"), forms=_FORMS, crashes=_NOT_TRACEABLE,
    batch_sizes=(1, 10, 100, 1000),
    quick_batch_sizes=(100,))

NUTS_CORRELATED = workload.Workload(
    name="pc_nuts_correlated100", title="one NUTS transition, 100-d correlated Gaussian, "
                                        "batch = chains (program-counter mode)",
    unit="chains", build=build("correlated100"), forms=_FORMS, crashes=_NOT_TRACEABLE,
    batch_sizes=(1, 10, 100, 1000),
    quick_batch_sizes=(100,))


def eager_loop_seconds(theta, seeds, eps, sample):
  picked = np.linspace(0, theta.shape[0] - 1, min(sample, theta.shape[0])).astype(int)
  start = time.perf_counter()
  for k in picked:
    nuts_step(theta[k], seeds[k], eps[k]).numpy()
  return (time.perf_counter() - start) * theta.shape[0] / len(picked)


def check(theta, seeds, eps, result, count=3):
  """The batched transition equals the per-chain one on the first chains."""
  for k in range(min(count, theta.shape[0])):
    want = nuts_step(theta[k], seeds[k], eps[k]).numpy()
    np.testing.assert_allclose(result[k], want, rtol=1e-4, atol=1e-4)


def measure(target, chains, rounds, sample, only=None):
  """First-call and per-round seconds of each form (`only`: those forms, and the eager
  loop only if named there)."""
  theta, seeds, eps, fs = forms(target, chains)
  if only is not None:
    fs = {form: f for form, f in fs.items() if form in only}
  first = {}
  for form, f in list(fs.items()):
    try:
      first[form] = timing.seconds(f)
    except Exception as e:  # pylint: disable=broad-except  (a TFP form that fails is reported)
      print(f"{target} {chains} {form}: fails: {type(e).__name__}: {str(e)[:200]}")
      del fs[form]
      continue
    if form.startswith("autobatch"):
      check(theta, seeds, eps, f().numpy())
  times = {form: [] for form in fs}
  loop = only is None or "eager loop" in only
  for _ in range(rounds):
    for form, f in fs.items():
      times[form].append(timing.seconds(f))
    if loop:
      times.setdefault("eager loop", []).append(eager_loop_seconds(theta, seeds, eps, sample))
  return first, times


def report(target, chains, first, times):
  lines = [f"### NUTS transition, {target}, {chains} chains (medians of "
           f"{len(next(iter(times.values())))} interleaved rounds)", "",
           "| form | first call s | steady s | eager loop / form | form / tfp iterative XLA |",
           "| --- | --- | --- | --- | --- |"]
  for form in times:
    limit, loop = "", ""
    if "tfp iterative XLA" in times:
      limit = f"{timing.median_ratio(times[form], times['tfp iterative XLA']):.2f}x"
    if "eager loop" in times:
      loop = f"{timing.median_ratio(times['eager loop'], times[form]):.0f}x"
    lines.append(f"| {form} | {first.get(form, float('nan')):.2f} | "
                 f"{np.median(times[form]):.4f} | {loop} | {limit} |")
  return "\n".join(lines)


def ceiling_table(targets, chain_counts, transitions):
  """`nuts_chains.ceilings` of each target at its step size and at per-chain step sizes
  (log-uniform from a quarter to 4x it: chains whose trees differ widely in depth), over
  the first 10 transitions and all of them."""
  from benchmarks.workloads import nuts_chains  # pylint: disable=import-outside-toplevel
  rows = []
  for target in targets:
    for chains in chain_counts:
      spread = STEP_SIZE[target] * np.exp(np.random.default_rng(3).uniform(
          np.log(0.25), np.log(4.0), [chains, 1])).astype(np.float32)
      for label, step in ((target, None), (f"{target}, per-chain steps", spread)):
        counts = nuts_chains.leapfrog_counts(target, chains, transitions, step)
        for k in sorted({10, transitions}):
          rows.append((label, chains, k, nuts_chains.ceilings(counts[:k])))
        print(nuts_chains.ceiling_report(rows[-2:]), flush=True)
  return nuts_chains.ceiling_report(rows)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--targets", default="normal10")
  parser.add_argument("--chains", default="100")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--sample", type=int, default=3)
  parser.add_argument("--out", default=None)
  parser.add_argument("--first-calls", type=int, default=0,
                      help="instead: this many rounds of fresh-process first calls under XLA")
  parser.add_argument("--first-call-of", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--forms", default=None,
                      help="only these forms (comma-separated; 'eager loop' among them)")
  parser.add_argument("--ceiling", action="store_true",
                      help="instead: what running chains apart can win over lockstep, from "
                           "TFP's leapfrog counts over --transitions (also with per-chain "
                           "step sizes, log-uniform over 4x either side)")
  parser.add_argument("--transitions", type=int, default=0,
                      help="instead: chains of this many transitions per call "
                           "(benchmarks/workloads/nuts_chains.py)")
  args = parser.parse_args()
  if args.first_call_of:           # a child of --first-calls: one first call, as JSON
    recursion._warm_up()  # pylint: disable=protected-access
    f = forms(args.targets, int(args.chains))[3][args.first_call_of]
    print(json.dumps(recursion.first_call_in_this_process(f)))
    return
  if args.ceiling:
    print(ceiling_table(args.targets.split(","), [int(c) for c in args.chains.split(",")],
                        args.transitions or 200), flush=True)
    return
  sections = []
  for target in args.targets.split(",") if args.first_calls else []:
    for chains in [int(c) for c in args.chains.split(",")]:
      calls = recursion.fresh_first_calls(
          "benchmarks.workloads.nuts", ["autobatch XLA", "tfp recursive XLA",
                                        "tfp iterative XLA"], args.first_calls,
          ["--targets", target, "--chains", str(chains)])
      sections.append(recursion.first_call_report(
          f"NUTS transition, {target}, {chains} chains: first call under XLA in a fresh "
          f"process (medians of {args.first_calls} alternating rounds)", calls,
          "tfp recursive XLA"))
      print(sections[-1], flush=True)
  for target in args.targets.split(",") if not args.first_calls else []:
    for chains in [int(c) for c in args.chains.split(",")]:
      if args.transitions:
        from benchmarks.workloads import nuts_chains  # pylint: disable=import-outside-toplevel
        times, ess = nuts_chains.measure(target, chains, args.transitions, args.rounds)
        sections.append(nuts_chains.report(target, chains, args.transitions, times, ess))
      else:
        only = args.forms.split(",") if args.forms else None
        first, times = measure(target, chains, args.rounds, args.sample, only)
        sections.append(report(target, chains, first, times))
      print(sections[-1], flush=True)
  if args.out:
    with open(args.out, "w") as f:
      f.write("\n\n".join(sections) + "\n")


if __name__ == "__main__":
  main()
