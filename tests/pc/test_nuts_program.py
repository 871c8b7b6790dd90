"""The recursive NUTS of benchmarks/workloads/nuts.py, batched, equals its chains one by one."""

import numpy as np
import tensorflow as tf

import vectorize
from benchmarks.workloads import nuts


def test_batched_nuts_transition_equals_per_chain_transitions():
  nuts.TARGET[0] = "normal10"
  rng = np.random.default_rng(5)
  theta = tf.constant(rng.standard_normal([4, 10]), tf.float32)
  seeds = tf.constant(rng.integers(0, 2 ** 30, size=[4, 2]), tf.int32)
  eps = tf.fill([4], 0.3)
  got = vectorize.autobatch(nuts.nuts_step)(theta, seeds, eps)
  for k in range(4):
    np.testing.assert_allclose(got[k], nuts.nuts_step(theta[k], seeds[k], eps[k]),
                               rtol=1e-5, atol=1e-5)
  assert not np.allclose(got, theta)        # the chains moved


def test_chains_of_several_transitions_on_the_funnel_equal_the_chains_one_by_one():
  """`benchmarks/workloads/nuts_chains.py`'s per-chain loop of transitions: under XLA, the
  chains at different transitions share the VM's steps (the funnel's trees differ in
  depth), and each chain's trace is its own."""
  from benchmarks.workloads import nuts_chains   # pylint: disable=import-outside-toplevel
  theta, seeds, eps = nuts._inputs("funnel10", 3)  # pylint: disable=protected-access
  program = nuts_chains.chain_program(2)
  batched = vectorize.autobatch(program, max_stack_depth=nuts.MAX_DEPTH + 1)
  got = tf.function(batched, jit_compile=True)(theta, seeds, eps)
  assert got.shape == [3, 2, len(nuts_chains.TRACED)]
  for k in range(3):
    np.testing.assert_allclose(got[k], program(theta[k], seeds[k], eps[k]),
                               rtol=1e-4, atol=1e-4)
  assert len({float(x) for x in np.asarray(got)[:, :, 0].ravel()}) > 2   # chains moved
