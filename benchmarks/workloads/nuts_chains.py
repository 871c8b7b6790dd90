"""NUTS chains run for many transitions: where a program counter per chain should win.

`benchmarks.workloads.nuts` times ONE transition per call, where every form waits for the
chain with the deepest tree. Here each chain runs `--transitions` transitions in one call:
`tfp.mcmc.NoUTurnSampler` under `tfp.mcmc.sample_chain` runs them in lockstep (each
transition waits for the deepest tree of that transition), and `autobatch` of a per-chain
loop of the recursive `nuts.nuts_step` lets each chain start its next transition as soon as
its own tree is done (members at different transitions run the same blocks together), so
the call waits for the chain with the most leapfrog steps summed over its transitions.
Where tree depths differ widely between transitions (Neal's funnel: deep trees in the
neck, shallow ones in the mouth), that sum of maxima and that maximum of sums differ most.

Both of autobatch's schedules are timed ("lowest", the default, and "fullest", which runs
the block the most chains wait at). Reported, medians of interleaved rounds under XLA:
seconds per call, microseconds per transition (per chain and transition), and effective
samples per second of the first and last coordinates (`tfp.mcmc.effective_sample_size`,
summed over chains).

Run: `python -m benchmarks.workloads.nuts --transitions 20 [--targets funnel10,normal10]
[--chains 100] [--rounds 5]`.
"""

import time

import numpy as np
import tensorflow as tf

import vectorize
from benchmarks import timing
from benchmarks.workloads import nuts, recursion
from benchmarks.workloads.nuts import child_seed, nuts_step   # called by name: autobatch
                                                              # compiles calls by name

TRACED = (0, -1)        # the coordinates whose effective sample size is reported


def chain_program(transitions):
  """A per-chain sampler: `transitions` NUTS transitions from `theta`, the traced
  coordinates of each state as a `[transitions, 2]` tensor, and the leapfrog count."""

  def nuts_chain(theta, seed, eps):
    trace = tf.zeros([transitions, len(TRACED)])
    k = 0
    while k < transitions:
      theta = nuts_step(theta, child_seed(seed, 1000 + k), eps)
      trace = tf.tensor_scatter_nd_update(
          trace, [[k]], [tf.stack([theta[i] for i in TRACED])])
      k += 1
    return trace

  return nuts_chain


def forms(target, chains, transitions):
  """{form: function of no arguments, compiled under XLA} returning `[transitions, chains,
  len(TRACED)]` traced coordinates."""
  theta, seeds, eps = nuts._inputs(target, chains)  # pylint: disable=protected-access
  result = {}
  for schedule in ("lowest", "fullest"):
    batched = vectorize.autobatch(chain_program(transitions),
                                  max_stack_depth=nuts.MAX_DEPTH + 1, schedule=schedule)
    result[f"autobatch {schedule}"] = tf.function(
        lambda batched=batched: tf.transpose(batched(theta, seeds, eps), [1, 0, 2]),
        jit_compile=True)
  tfp = recursion.tfp_quietly()
  if tfp is not None:
    kernel = tfp.mcmc.NoUTurnSampler(nuts.batch_log_prob(target), nuts.STEP_SIZE[target],
                                     max_tree_depth=nuts.MAX_DEPTH)

    def lockstep():
      states = tfp.mcmc.sample_chain(transitions, theta, kernel=kernel, trace_fn=None,
                                     seed=(1, 2))
      return tf.stack([states[..., i] for i in TRACED], -1)
    result["tfp iterative"] = tf.function(lockstep, jit_compile=True)
  return result


def effective_samples(trace):
  tfp = recursion.tfp_quietly()
  return float(tf.reduce_sum(tfp.mcmc.effective_sample_size(trace)))


def measure(target, chains, transitions, rounds):
  fs = forms(target, chains, transitions)
  traces = {}
  for form, f in fs.items():
    start = time.perf_counter()
    traces[form] = f().numpy()
    print(f"{target} {chains} chains x {transitions}: {form} first call "
          f"{time.perf_counter() - start:.1f} s", flush=True)
  times = {form: [] for form in fs}
  for _ in range(rounds):
    for form, f in fs.items():
      times[form].append(timing.seconds(f))
  ess = {form: effective_samples(trace) for form, trace in traces.items()}
  return times, ess


def report(target, chains, transitions, times, ess):
  lines = [f"### {target}, {chains} chains x {transitions} transitions per call "
           f"(medians of {len(next(iter(times.values())))} interleaved rounds, XLA)", "",
           "| form | s per call | us per transition | ESS / s | form / tfp iterative |",
           "| --- | ---: | ---: | ---: | ---: |"]
  for form, ts in times.items():
    call = float(np.median(ts))
    ratio = (f"{timing.median_ratio(ts, times['tfp iterative']):.2f}x"
             if "tfp iterative" in times else "")
    lines.append(f"| {form} | {call:.3f} | {call / chains / transitions * 1e6:.1f} | "
                 f"{ess[form] / call:.0f} | {ratio} |")
  return "\n".join(lines)


def leapfrog_counts(target, chains, transitions, step_size=None):
  """`[transitions, chains]` leapfrog steps each chain's tree took, from
  `tfp.mcmc.NoUTurnSampler` (the same algorithm and step size as `nuts.nuts_step`;
  `step_size`: a per-chain `[chains, 1]` one instead)."""
  tfp = recursion.tfp_quietly()
  theta, _, _ = nuts._inputs(target, chains)  # pylint: disable=protected-access
  kernel = tfp.mcmc.NoUTurnSampler(
      nuts.batch_log_prob(target),
      nuts.STEP_SIZE[target] if step_size is None else step_size,
      max_tree_depth=nuts.MAX_DEPTH)
  run = tf.function(lambda: tfp.mcmc.sample_chain(
      transitions, theta, kernel=kernel, seed=(1, 2),
      trace_fn=lambda _, results: results.leapfrogs_taken)[1], jit_compile=True)
  return run().numpy().astype(np.float64)


def ceilings(counts):
  """What running chains apart can win over lockstep, from `[transitions, chains]` leapfrog
  counts: `apart`, for a machine whose step costs one lockstep iteration whatever its
  members (lockstep's sum over transitions of the deepest tree, over the largest sum of one
  chain's trees: the call waits for that chain); `work`, for one whose step costs in
  proportion to its members (lockstep's chain-iterations over the leapfrogs the chains
  need)."""
  lockstep = counts.max(1).sum()
  return {"mean": counts.mean(), "lockstep": lockstep, "slowest": counts.sum(0).max(),
          "apart": lockstep / counts.sum(0).max(),
          "work": lockstep * counts.shape[1] / counts.sum()}


def ceiling_report(rows):
  """rows: (target, chains, transitions, ceilings(...))."""
  lines = ["| target | chains | transitions | leapfrogs per transition (mean) | lockstep "
           "iterations | slowest chain's leapfrogs | ceiling, steps of lockstep cost | "
           "ceiling, steps costing their members |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
  for target, chains, transitions, c in rows:
    lines.append(f"| {target} | {chains} | {transitions} | {c['mean']:.1f} | "
                 f"{c['lockstep']:.0f} | {c['slowest']:.0f} | {c['apart']:.2f}x | "
                 f"{c['work']:.2f}x |")
  return "\n".join(lines)
