"""Keras text models on one example's variable-length token sequence, as users write them:
split, look up, embed, Dense layers, normalize, attend or pool. Every op meets a value whose
size differs per iteration; with the fallback off, the vectorized model equals the loop
eagerly, in a tf.function with n known only at run time, for n = 0, and in its gradients."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import vectorize

TEXTS = tf.constant(["the cat sat", "a dog", "birds fly over the hill", "x", "dog " * 6])
VOCAB = ["the", "cat", "sat", "a", "dog", "birds", "fly", "over", "hill"]


def _model(pooling):
  keras.utils.set_random_seed(0)
  lookup = keras.layers.StringLookup(vocabulary=VOCAB)
  embed = keras.layers.Embedding(len(VOCAB) + 1, 8)
  hidden = keras.layers.Dense(16, activation="gelu")
  norm = keras.layers.LayerNormalization()
  score = keras.layers.Dense(1)
  head = keras.layers.Dense(3)

  def body(i):
    h = norm(hidden(embed(lookup(tf.strings.split(TEXTS[i])))))        # [length, 16]
    if pooling == "mean":
      pooled = tf.reduce_mean(h, 0, keepdims=True)
    else:                          # attention weights over the sequence's own length
      weights = tf.nn.softmax(tf.squeeze(score(h), 1))
      pooled = tf.reduce_sum(weights[:, None] * h, 0, keepdims=True)
    return tf.nn.softmax(head(pooled)[0]), tf.nn.log_softmax(head(h), axis=-1)

  body(tf.constant(0))   # builds the layers
  return body, hidden.kernel


def _loop(body, n):
  outs = [body(tf.constant(i)) for i in range(n)]
  return (tf.stack([o[0] for o in outs]) if n else tf.zeros([0, 3]),
          tf.ragged.stack([o[1] for o in outs]) if n else None)


@pytest.mark.parametrize("pooling", ["mean", "attention"])
@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("n", [5, 0])
def test_text_model_equals_loop(pooling, mode, n):
  body, _ = _model(pooling)
  run = lambda m: vectorize.pfor(body, m, fallback_to_while_loop=False)
  pooled, per_token = run(n) if mode == "eager" else tf.function(run)(tf.constant(n))
  expected_pooled, expected_tokens = _loop(body, n)
  np.testing.assert_allclose(pooled, expected_pooled, rtol=1e-5, atol=1e-6)
  assert isinstance(per_token, tf.RaggedTensor)
  if n:
    np.testing.assert_array_equal(per_token.row_lengths(), expected_tokens.row_lengths())
    np.testing.assert_allclose(tf.reshape(per_token.flat_values, [-1]),
                               tf.reshape(expected_tokens.flat_values, [-1]),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pooling", ["mean", "attention"])
def test_text_model_gradients_equal_loop(pooling):
  body, kernel = _model(pooling)

  def loss(outputs):
    pooled, per_token = outputs
    return tf.reduce_sum(pooled[:, 0]) + tf.reduce_sum(per_token.flat_values)

  with tf.GradientTape() as tape:
    actual = tape.gradient(loss(vectorize.pfor(body, 5, fallback_to_while_loop=False)),
                           kernel)
  with tf.GradientTape() as tape:
    expected = tape.gradient(loss(_loop(body, 5)), kernel)
  np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-6)
