"""PrivateModel: `fit` takes DP-SGD steps. Without noise, one step equals the update from
the clipped loop (a `tape.gradient` per example); the noise is seeded, of the stated scale;
metrics and the loss come from the same pass."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize

keras = tf.keras
B = 6


def _model(seed=1):
  keras.utils.set_random_seed(seed)
  return keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activation="tanh"),
                           keras.layers.Dense(3)])


def _data():
  rng = np.random.default_rng(0)
  return rng.standard_normal([B, 5]).astype(np.float32), rng.integers(0, 3, B)


LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _fit_one_step(model, noise_multiplier, seed=0, jit_compile=False, lr=0.5, clip=0.2):
  private = vectorize.PrivateModel(model, l2_norm_clip=clip, noise_multiplier=noise_multiplier,
                                   seed=seed)
  private.compile(optimizer=keras.optimizers.SGD(lr), loss=LOSS, metrics=["accuracy"],
                  jit_compile=jit_compile)
  x, y = _data()
  history = private.fit(x, y, batch_size=B, epochs=1, verbose=0, shuffle=False)
  return [v.numpy() for v in model.trainable_variables], history.history


def _clipped_loop_update(model, lr=0.5, clip=0.2):
  """Weights after one noiseless DP-SGD step, computed example by example."""
  x, y = _data()
  variables = model.trainable_variables
  total = [np.zeros(v.shape) for v in variables]
  losses = []
  for i in range(B):
    with tf.GradientTape() as tape:
      loss = LOSS(y[i:i + 1], model(x[i:i + 1]))
    grads = [g.numpy() for g in tape.gradient(loss, variables)]
    norm = np.sqrt(sum(np.sum(g ** 2) for g in grads))
    total = [t + g * min(1.0, clip / norm) for t, g in zip(total, grads)]
    losses.append(float(loss))
  return [v.numpy() - lr * t / B for v, t in zip(variables, total)], np.mean(losses)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_a_noiseless_step_is_the_clipped_loop_update(jit_compile):
  want, want_loss = _clipped_loop_update(_model())
  got, history = _fit_one_step(_model(), noise_multiplier=0.0, jit_compile=jit_compile)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(history["loss"][0], want_loss, rtol=1e-5)
  assert set(history) == {"loss", "accuracy"}


def test_noise_is_seeded_and_of_the_stated_scale():
  base, _ = _fit_one_step(_model(), noise_multiplier=0.0)
  first, _ = _fit_one_step(_model(), noise_multiplier=50.0, seed=7)
  again, _ = _fit_one_step(_model(), noise_multiplier=50.0, seed=7)
  other, _ = _fit_one_step(_model(), noise_multiplier=50.0, seed=8)
  for a, b in zip(first, again):
    np.testing.assert_array_equal(a, b)
  assert not np.allclose(first[0], other[0])
  # The update's noise: lr * C * sigma / B per coordinate.
  noise = np.concatenate([(a - b).ravel() for a, b in zip(first, base)])
  want = 0.5 * 0.2 * 50.0 / B
  assert 0.7 * want < np.std(noise) < 1.3 * want, (np.std(noise), want)


def test_sample_weights_and_bad_settings_are_refused():
  x, y = _data()
  private = vectorize.PrivateModel(_model(), l2_norm_clip=1.0, noise_multiplier=1.0)
  private.compile(optimizer="sgd", loss=LOSS)
  with pytest.raises(ValueError, match="sample_weight"):
    private.fit(x, y, sample_weight=np.ones(B), verbose=0)
  with pytest.raises(ValueError, match="l2_norm_clip > 0"):
    vectorize.PrivateModel(_model(), l2_norm_clip=0.0, noise_multiplier=1.0)
  with pytest.raises(ValueError, match="noise_multiplier >= 0"):
    vectorize.PrivateModel(_model(), l2_norm_clip=1.0, noise_multiplier=-1.0)
