"""TF Privacy's DP Keras models with `vectorize.tf_privacy_layer_registry()`, end to end (run
by test_tf_privacy.py in its own process: TF Privacy needs tf_keras, `TF_USE_LEGACY_KERAS`).

TF Privacy is imported as the benchmarks do (`benchmarks/tf_privacy_import.py`: stand-ins
for the packages its `__init__` imports and these models do not use). Prints "<model> fast
ok" for each model whose step took the fast path and equals `clipped_gradient_sum`'s clipped
sum, divided by the batch size (SGD, learning rate 1, no noise).
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf
import tf_keras

import vectorize
from benchmarks import tf_privacy_import

dp_keras_model = tf_privacy_import.dp_keras_model()

L = tf_keras.layers
CLIP, BATCH = 0.5, 8


def _sequential(layers, shape):
  tf_keras.utils.set_random_seed(0)
  return dp_keras_model.DPSequential(
      l2_norm_clip=CLIP, noise_multiplier=0.0, layers=[L.InputLayer(shape)] + layers,
      layer_registry=vectorize.tf_privacy_layer_registry(), use_xla=False)


def _attention():
  tf_keras.utils.set_random_seed(0)
  inputs = tf_keras.Input((5,), dtype="int32")
  e = L.Embedding(11, 6)(inputs)
  h = L.LayerNormalization()(L.MultiHeadAttention(2, 3)(e, e) + e)
  outputs = L.Dense(3)(L.GlobalAveragePooling1D()(h))
  return dp_keras_model.DPModel(l2_norm_clip=CLIP, noise_multiplier=0.0, inputs=inputs,
                                outputs=outputs,
                                layer_registry=vectorize.tf_privacy_layer_registry(),
                                use_xla=True)


def main():
  rng = np.random.default_rng(0)
  models = {
      "conv": (_sequential([L.Conv2D(4, 3, activation="relu"), L.DepthwiseConv2D(2),
                            L.Flatten(), L.Dense(3)], (6, 6, 2)),
               rng.standard_normal((BATCH, 6, 6, 2)).astype("float32")),
      "lstm": (_sequential([L.LSTM(5), L.Dense(3)], (4, 3)),
               rng.standard_normal((BATCH, 4, 3)).astype("float32")),
      "conv1d_gru": (_sequential([L.Conv1D(4, 2), L.GRU(3, return_sequences=True),
                                  L.Flatten(), L.Dense(3)], (6, 3)),
                     rng.standard_normal((BATCH, 6, 3)).astype("float32")),
      "attention": (_attention(), rng.integers(0, 11, (BATCH, 5)).astype("int32")),
  }
  y = np.arange(BATCH) % 3
  for name, (model, x) in models.items():
    model.compile(optimizer=tf_keras.optimizers.SGD(1.0),
                  loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    def loss_fn(xi, yi, model=model):
      return tf.nn.sparse_softmax_cross_entropy_with_logits(yi, model(xi[None])[0])

    sums = vectorize.clipped_gradient_sum(loss_fn, model.trainable_variables, tf.constant(x),
                                          tf.constant(y), l2_norm_clip=CLIP)
    before = [w.numpy() for w in model.trainable_variables]
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
    error = max(np.max(np.abs((w.numpy() - b) + s.numpy() / BATCH))
                for w, b, s in zip(model.trainable_variables, before, sums))
    assert model._enable_fast_peg_computation, name  # pylint: disable=protected-access
    assert error < 1e-5, (name, error)
    print(name, "fast ok", flush=True)


if __name__ == "__main__":
  main()
