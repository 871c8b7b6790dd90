"""The paper's variable-length LSTM: each example iterates to its own length in a
`tf.while_loop`; forward states and per-example gradients equal the per-example loop."""

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import models
from tests import testing

N, STEPS, INPUT, STATE = 5, 9, 6, 8
RNG = np.random.default_rng(7)
PARAMS = models.lstm_params(input_size=INPUT, state_size=STATE)
SEQUENCES = tf.constant(RNG.standard_normal([N, STEPS, INPUT]), tf.float32)
LENGTHS = tf.constant([1, 9, 4, 6, 2], tf.int32)
LABELS = tf.constant(RNG.integers(0, 10, [N]), tf.int32)


def _forward(i):
  return models.lstm_dynamic_final_state(PARAMS, tf.gather(SEQUENCES, i), tf.gather(LENGTHS, i))


def _gradient(i):
  def loss(params, sequence, length, label):
    logits = models.lstm_dynamic_logits(params, sequence, length)
    return models.softmax_loss(logits[None], label[None])
  return models.gradients(loss, PARAMS, tf.gather(SEQUENCES, i), tf.gather(LENGTHS, i),
                          tf.gather(LABELS, i))


@pytest.mark.parametrize("mode", ["function", "dynamic", "eager", "xla"])
def test_forward_equals_the_loop(mode):
  testing.assert_allclose(testing.run_pfor(_forward, N, mode=mode),
                          testing.sequential(_forward, N), tol=1e-5)


def test_forward_equals_hand_batched_masking():
  hand = models.lstm_masked_final_state(PARAMS, SEQUENCES, LENGTHS)
  np.testing.assert_allclose(testing.run_pfor(_forward, N), hand, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["function", "eager", "xla"])
def test_per_example_gradients_equal_the_loop(mode):
  actual = testing.run_pfor(_gradient, N, mode=mode)
  expected = testing.sequential(_gradient, N)
  for k in PARAMS:
    scale = max(np.max(np.abs(expected[k])), 1e-6)
    np.testing.assert_allclose(actual[k] / scale, expected[k] / scale, atol=1e-5, rtol=0)
