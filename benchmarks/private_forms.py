"""The DP-SGD benchmark's models and forms, as users write them (no flags: the timing run,
`private_training.py`, and the memory run, `memory.py`, both build from here).

Each step computes the gradient, adds noise where private, and applies it with
`keras.optimizers.SGD`. Forms (each its own copy of the model, same initial weights):
- "non-private": one batched forward and backward pass (`tape.gradient` of the mean loss);
- "vectorize clipped": `vectorize.clipped_gradient_sum` (factored weight gradients where the
  graph allows), noised, averaged;
- "vectorize materialized": `vectorize.per_example_gradients`, clipped, summed, noised;
- "tf pfor materialized": TF's `tf.vectorized_map` of `tape.gradient` per example, clipped,
  summed, noised (how TF Privacy's Keras DP models vectorize their per-example gradients);
- "tf privacy DPModel": TF Privacy's own DP Keras model (`DPSequential` / `DPModel`, tf_keras,
  the same weights) with its default layer registry: its fast clipping where every layer is
  registered, else `tf.vectorized_map` of per-example gradients;
- "tf privacy + vectorize registry": the same model given `vectorize.tf_privacy_layer_registry()`.
The TF Privacy forms run where TF Privacy is installed (`pip install --no-deps
tensorflow-privacy==0.9.0`: its pins exclude numpy 2; `tf_privacy_import.py`).
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")   # tf.keras is tf_keras, for TF Privacy

import keras
import numpy as np
import tensorflow as tf

import vectorize
from benchmarks import keras_models
from benchmarks import tf_privacy_import

CLIP, NOISE, LEARNING_RATE = 1.0, 1.1, 0.05


def lstm_classifier(vocabulary=10_000, width=64, seed=0, keras_api=keras):
  """A text classifier: Embedding, LSTM, Dense."""
  keras_api.utils.set_random_seed(seed)
  return keras_api.Sequential([keras_api.Input([64], dtype="int32"),
                           keras_api.layers.Embedding(vocabulary, width),
                           keras_api.layers.LSTM(width), keras_api.layers.Dense(2)])


def small_resnet(seed=0, keras_api=keras):
  """A ResNet for 32x32 images: three stages of residual blocks (16, 32, 64 channels), with
  GroupNormalization (batch normalization would mix the examples DP-SGD keeps apart)."""
  keras_api.utils.set_random_seed(seed)

  def block(x, channels, stride):
    shortcut = x
    x = keras_api.layers.Conv2D(channels, 3, stride, padding="same")(x)
    x = keras_api.layers.Activation("relu")(keras_api.layers.GroupNormalization(4)(x))
    x = keras_api.layers.Conv2D(channels, 3, padding="same")(x)
    x = keras_api.layers.GroupNormalization(4)(x)
    if stride != 1 or shortcut.shape[-1] != channels:
      shortcut = keras_api.layers.Conv2D(channels, 1, stride)(shortcut)
    return keras_api.layers.Activation("relu")(x + shortcut)

  inputs = keras_api.Input([32, 32, 3])
  x = keras_api.layers.Conv2D(16, 3, padding="same", activation="relu")(inputs)
  for channels, stride in ((16, 1), (32, 2), (64, 2)):
    x = block(x, channels, stride)
  logits = keras_api.layers.Dense(10)(keras_api.layers.GlobalAveragePooling2D()(x))
  return keras_api.Model(inputs, logits)


MODELS = {
    "convnet": (lambda **kw: keras_models.convnet(hidden=128, **kw), [28, 28, 1], 10),
    "lstm": (lstm_classifier, [64], 2),
    "transformer": (keras_models.transformer, [32, 64], 10),
    "resnet": (small_resnet, [32, 32, 3], 10),
}


def _inputs(name, batch):
  rng = np.random.default_rng(0)
  _, shape, classes = MODELS[name]
  if name == "lstm":
    x = tf.constant(rng.integers(0, 10_000, [batch] + shape), tf.int32)
  else:
    x = tf.constant(rng.standard_normal([batch] + shape), tf.float32)
  return x, tf.constant(rng.integers(0, classes, [batch]), tf.int32)


def _example_loss(model):
  def loss_fn(x, y):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(y, model(x[None])[0])
  return loss_fn


def _clip_and_sum(per_example):
  norms = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(tf.reshape(g, [tf.shape(g)[0], -1])), 1)
                            for g in per_example]))
  weights = CLIP / tf.maximum(norms, CLIP)
  return [tf.tensordot(weights, g, 1) for g in per_example]


def _tf_pfor_per_example(model, x, y):
  def example(e):
    with tf.GradientTape() as tape:
      loss = _example_loss(model)(*e)
    return tape.gradient(loss, model.trainable_variables)
  return tf.vectorized_map(example, (x, y))


def _private_step(model, optimizer, sums, batch):
  noised = [(s + tf.random.stateless_normal(s.shape, seed=[0, k]) * (NOISE * CLIP)) / batch
            for k, s in enumerate(sums)]
  optimizer.apply_gradients(zip(noised, model.trainable_variables))
  return sums


def build(name, batch, only=None):
  """{form: zero-argument function returning what the check compares}, for every form or
  `only` the one named (each form builds its own model)."""
  x, y = _inputs(name, batch)

  def fresh():
    model = MODELS[name][0]()
    optimizer = keras.optimizers.SGD(LEARNING_RATE)
    optimizer.build(model.trainable_variables)
    return model, optimizer

  def non_private():
    model, optimizer = fresh()

    def step():
      with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, model(x)))
      grads = tape.gradient(loss, model.trainable_variables)
      optimizer.apply_gradients(zip(grads, model.trainable_variables))
      return [loss]
    return step

  def private(sums_of):
    model, optimizer = fresh()
    return lambda: _private_step(model, optimizer, sums_of(model), batch)

  def tf_privacy(registry):
    dp_keras_model = tf_privacy_import.dp_keras_model()
    import tf_keras  # pylint: disable=g-import-not-at-top
    reference = MODELS[name][0]()
    model = MODELS[name][0](keras_api=tf_keras)
    model.set_weights(reference.get_weights())
    np.testing.assert_allclose(model(x[:4]), reference(x[:4]), rtol=1e-4, atol=1e-4)
    dp_class = (dp_keras_model.DPSequential if isinstance(model, tf_keras.Sequential) else
                dp_keras_model.DPModel)
    kwargs = dict(l2_norm_clip=CLIP, noise_multiplier=NOISE, use_xla=False,
                  layer_registry=registry)
    if dp_class is dp_keras_model.DPSequential:
      private = dp_class(layers=model.layers, **kwargs)
    else:
      private = dp_class(inputs=model.inputs, outputs=model.outputs, **kwargs)
    private.compile(optimizer=tf_keras.optimizers.SGD(LEARNING_RATE),
                    loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return lambda: list(private.train_step((x, y)).values())

  makers = {
      "non-private": non_private,
      "vectorize clipped": lambda: private(lambda m: vectorize.clipped_gradient_sum(
          _example_loss(m), m.trainable_variables, x, y, l2_norm_clip=CLIP,
          fallback_to_while_loop=False)),
      "vectorize materialized": lambda: private(lambda m: _clip_and_sum(
          vectorize.per_example_gradients(_example_loss(m), m.trainable_variables, x, y,
                                          fallback_to_while_loop=False))),
      "tf pfor materialized": lambda: private(
          lambda m: _clip_and_sum(_tf_pfor_per_example(m, x, y))),
      "tf privacy DPModel": lambda: tf_privacy(
          tf_privacy_import.layer_registry().make_default_layer_registry()),
      "tf privacy + vectorize registry": lambda: tf_privacy(
          vectorize.tf_privacy_layer_registry()),
  }
  return {form: makers[form]() for form in forms_of(name) if only in (None, form)}


FORMS = ("non-private", "vectorize clipped", "vectorize materialized", "tf pfor materialized",
         "tf privacy DPModel", "tf privacy + vectorize registry")
CHECKED = FORMS[1:4]   # the forms whose clipped sums are compared (TF Privacy's add noise)


def forms_of(name):
  """The forms run for model `name`."""
  return [f for f in FORMS
          if not (f == "tf pfor materialized" and name in TF_PFOR_CRASHES) and
          (not f.startswith("tf privacy") or tf_privacy_import.available())]


# A segmentation fault cannot be caught: these forms are not run (see keras_layers.py).
TF_PFOR_CRASHES = {"transformer": "crashes: TF's pfor output segfaults at run time (TF 2.21)"}
