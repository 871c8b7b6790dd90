"""Per-example gradients of whole models: `tape.gradient` inside the pfor body equals a
loop of per-example gradients, with fallback disabled (float32, relative error <= 1e-4)."""

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import models
from tests import testing

N = 4
RNG = np.random.default_rng(0)


def _check(loss_fn, params, inputs, labels, mode="function"):
  def body(i):
    return models.gradients(loss_fn, params, tf.gather(inputs, i), tf.gather(labels, i))

  actual = testing.run_pfor(body, N, mode=mode)
  expected = testing.sequential(body, N)
  for k in params:
    scale = max(np.max(np.abs(expected[k])), 1e-6)
    np.testing.assert_allclose(actual[k] / scale, expected[k] / scale, atol=1e-4, rtol=0)


def _mlp_loss(params, x, y):
  return models.softmax_loss(models.mlp_logits(params, x[None]), y[None])


def _convnet_loss(params, image, label):
  return models.softmax_loss(models.convnet_logits(params, image[None]), label[None])


def _lstm_loss(params, sequence, label):
  return models.softmax_loss(models.lstm_unrolled_logits(params, sequence[None]), label[None])


MLP = (_mlp_loss, models.mlp_params(), tf.constant(RNG.standard_normal([N, 16]), tf.float32))
CONVNET = (_convnet_loss, models.convnet_params(channels=(4, 8), hidden=32),
           tf.constant(RNG.standard_normal([N, 28, 28, 1]), tf.float32))
LSTM = (_lstm_loss, models.lstm_params(input_size=8, state_size=16),
        tf.constant(RNG.standard_normal([N, 10, 8]), tf.float32))
LABELS = tf.constant(RNG.integers(0, 10, [N]), tf.int32)


@pytest.mark.parametrize("mode", ["function", "xla"])
@pytest.mark.parametrize("model", [MLP, CONVNET, LSTM], ids=["mlp", "convnet", "lstm10"])
def test_per_example_gradients_equal_the_loop(model, mode):
  loss_fn, params, inputs = model
  _check(loss_fn, params, inputs, LABELS, mode)
