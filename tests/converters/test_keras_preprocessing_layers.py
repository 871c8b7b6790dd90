"""Keras preprocessing layers (text, lookup, encoding, image) as per-example bodies.

What users put in a `vectorized_map` every day: each layer applied to one example must
equal the loop of the same layer over the examples, with the fallback off. Random layers are
built twice with one seed (a fresh layer per form), so the loop and the vectorized call
draw alike; test_keras_stateful_layers.py covers the random layers' state in depth.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import vectorize

_L = keras.layers
_RNG = np.random.default_rng(0)
_IMAGES = tf.constant(_RNG.uniform(0, 1, [4, 12, 10, 3]), tf.float32)
_TEXTS = tf.constant(["the cat sat", "a dog", "the the dog ran far away", "cat"])
_WORDS = tf.constant([["the", "cat"], ["dog", "x"], ["ran", "the"], ["", "cat"]])
_INTS = tf.constant(_RNG.integers(0, 10, [4, 5]))
_FEATURES = tf.constant(_RNG.standard_normal([4, 6]), tf.float32)
_VOCABULARY = ["the", "cat", "dog", "sat", "ran"]
_UNIT = {"value_range": (0, 1)}

# name: (make the layer, examples, called with training=True)
LAYERS = {
    "TextVectorization": (lambda: _L.TextVectorization(
        output_sequence_length=4, vocabulary=_VOCABULARY), _TEXTS, False),
    "TextVectorization-multi_hot": (lambda: _L.TextVectorization(
        output_mode="multi_hot", vocabulary=_VOCABULARY), _TEXTS, False),
    "TextVectorization-count": (lambda: _L.TextVectorization(
        output_mode="count", vocabulary=_VOCABULARY), _TEXTS, False),
    "StringLookup": (lambda: _L.StringLookup(vocabulary=_VOCABULARY), _WORDS, False),
    "IntegerLookup": (lambda: _L.IntegerLookup(vocabulary=[1, 2, 3, 4]), _INTS, False),
    "Hashing": (lambda: _L.Hashing(num_bins=7), _INTS, False),
    "CategoryEncoding": (lambda: _L.CategoryEncoding(num_tokens=10, output_mode="multi_hot"),
                         _INTS, False),
    "Discretization": (lambda: _L.Discretization(bin_boundaries=[-1.0, 0.0, 1.0]), _FEATURES,
                       False),
    "Normalization": (lambda: _L.Normalization(mean=0.5, variance=0.25), _FEATURES, False),
    "Rescaling": (lambda: _L.Rescaling(1 / 255.0), _IMAGES, False),
    "CenterCrop": (lambda: _L.CenterCrop(6, 6), _IMAGES, False),
    "Resizing": (lambda: _L.Resizing(6, 8), _IMAGES, False),
    "AutoContrast": (lambda: _L.AutoContrast(**_UNIT), _IMAGES, False),
    "Equalization": (lambda: _L.Equalization(**_UNIT), _IMAGES, False),
    "RandomCrop": (lambda: _L.RandomCrop(6, 6, seed=1), _IMAGES, True),
    "RandomShear": (lambda: _L.RandomShear(0.2, seed=1), _IMAGES, True),
    "RandomPerspective": (lambda: _L.RandomPerspective(seed=1), _IMAGES, True),
    "RandomHue": (lambda: _L.RandomHue(0.2, seed=1, **_UNIT), _IMAGES, True),
    "RandomSaturation": (lambda: _L.RandomSaturation(0.2, seed=1, **_UNIT), _IMAGES, True),
    "RandomColorJitter": (lambda: _L.RandomColorJitter(
        brightness_factor=0.2, contrast_factor=0.2, seed=1, **_UNIT), _IMAGES, True),
    "RandomGrayscale": (lambda: _L.RandomGrayscale(0.5, seed=1), _IMAGES, True),
    "RandomSharpness": (lambda: _L.RandomSharpness(0.2, seed=1, **_UNIT), _IMAGES, True),
    "RandomPosterization": (lambda: _L.RandomPosterization(4, seed=1, **_UNIT), _IMAGES, True),
    "RandomInvert": (lambda: _L.RandomInvert(0.5, seed=1, **_UNIT), _IMAGES, True),
    "Solarization": (lambda: _L.Solarization(addition_factor=0.1, seed=1, **_UNIT), _IMAGES,
                     True),
    "RandomErasing": (lambda: _L.RandomErasing(seed=1, **_UNIT), _IMAGES, True),
    "RandomGaussianBlur": (lambda: _L.RandomGaussianBlur(seed=1, **_UNIT), _IMAGES, True),
}


def _apply(layer, training):
  return (lambda x: layer(x, training=True)) if training else layer


def _loop(name):
  make, examples, training = LAYERS[name]
  layer = _apply(make(), training)
  return np.stack([np.asarray(layer(examples[k])) for k in range(examples.shape[0])])


# Every layer eagerly; a few in a caller's tf.function too. An eager vectorized_map traces the
# same graph in a tf.function of its own (the layer is called in a graph either way), so the
# caller's function adds nothing that depends on the layer.
FUNCTION_MODE_LAYERS = {"TextVectorization", "StringLookup", "Normalization", "Resizing",
                        "RandomCrop"}


@pytest.mark.parametrize("name,mode", [
    pytest.param(name, mode, id=f"{name}-{mode}") for name in sorted(LAYERS)
    for mode in ("eager", "function") if mode == "eager" or name in FUNCTION_MODE_LAYERS])
def test_layer_on_one_example_equals_the_loop(name, mode):
  make, examples, training = LAYERS[name]
  layer = _apply(make(), training)
  run = lambda: vectorize.vectorized_map(layer, examples, fallback_to_while_loop=False)
  actual = np.asarray(run() if mode == "eager" else tf.function(run)())
  expected = _loop(name)
  assert actual.shape == expected.shape and actual.dtype == expected.dtype
  if expected.dtype.kind == "f":
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)
  else:
    np.testing.assert_array_equal(actual, expected)


def test_text_vectorization_with_no_examples():
  layer = _L.TextVectorization(output_sequence_length=4, vocabulary=_VOCABULARY)
  run = tf.function(lambda t: vectorize.vectorized_map(layer, t, fallback_to_while_loop=False),
                    input_signature=[tf.TensorSpec([None], tf.string)])
  assert run(_TEXTS[:0]).shape == (0, 4)
