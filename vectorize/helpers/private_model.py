"""DP-SGD for Keras 3 `model.fit`: a model wrapper whose train step clips and noises.

Keras customizes `fit` through a model's `train_step`, so the private step is a
`keras.Model` that wraps the user's model and overrides it: the clipped sum of per-example
gradients (`clipped_gradient_sum`, with the predictions and losses from the same pass),
Gaussian noise of standard deviation `l2_norm_clip * noise_multiplier` from a seeded
generator, divided by the batch size, applied by the compiled optimizer. Metrics see the
per-example predictions. The privacy budget is the caller's to account, with an established
accountant (`dp_accounting`), from `noise_multiplier`, the sampling rate and the steps.
"""

import keras
import tensorflow as tf

from vectorize.helpers import clipping


@keras.saving.register_keras_serializable(package="vectorize")
class PrivateModel(keras.Model):
  """`model`, trained by `fit` with DP-SGD: per-example clipping to `l2_norm_clip`, noise
  `noise_multiplier * l2_norm_clip`, averaged over the batch.

  Args:
    model: a built Keras model (its call takes a batch; each example is run as a batch of
      one, so a layer that mixes examples, batch normalization in training mode, sees one).
    l2_norm_clip: the bound C on each example's gradient norm (over all variables).
    noise_multiplier: sigma: the noise's standard deviation is sigma * C.
    seed: an int for reproducible noise, or None.

  Example:
    >>> private = vectorize.PrivateModel(model, l2_norm_clip=1.0, noise_multiplier=1.1,
    ...                                  seed=0)
    >>> private.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(
    ...     from_logits=True), metrics=["accuracy"])
    >>> private.fit(images, labels, batch_size=128, epochs=3)

  Limits: no `sample_weight` or `class_weight` (each example's weight would change its
  sensitivity); the loss is the compiled loss of one example plus the model's own losses
  (regularizers), each example's own. Under a mixed-precision policy the compiled
  `LossScaleOptimizer` scales the loss, the bound and the noise alike.
  """

  def __init__(self, model, l2_norm_clip, noise_multiplier, seed=None, **kwargs):
    super().__init__(**kwargs)
    if not l2_norm_clip > 0:
      raise ValueError(f"PrivateModel needs l2_norm_clip > 0, got {l2_norm_clip}.")
    if not noise_multiplier >= 0:
      raise ValueError(f"PrivateModel needs noise_multiplier >= 0, got {noise_multiplier}.")
    self.model = model
    self.l2_norm_clip = float(l2_norm_clip)
    self.noise_multiplier = float(noise_multiplier)
    self.seed = seed
    self.noise_seed = keras.random.SeedGenerator(seed)

  def call(self, inputs, training=None):
    return self.model(inputs, training=training)

  def train_step(self, data):
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    if sample_weight is not None:
      raise ValueError("PrivateModel.fit takes no sample_weight or class_weight: a weighted "
                       "example has another sensitivity than C. Drop them, or resample.")
    if not self.model.built:   # Keras builds a model on its first batch in fit; so does this
      self.model(x, training=False)   # (unused outputs: pruned from the traced step)
    variables = self.trainable_variables
    # A LossScaleOptimizer (compile gives one under a mixed_float16 policy) divides what it
    # applies by its scale: the loss, the clip bound and the noise are scaled alike, as
    # Keras' own train step scales the loss.
    scale = tf.cast(self.optimizer.scale_loss(tf.constant(1.0)), tf.float32)

    def loss_fn(x_i, y_i):
      x_1, y_1 = tf.nest.map_structure(lambda t: t[None], (x_i, y_i))
      y_pred = self(x_1, training=True)
      loss = self.compute_loss(x=x_1, y=y_1, y_pred=y_pred, training=True)
      return self.optimizer.scale_loss(loss), (loss, _first_rows_with_masks(y_pred))

    sums, (losses, (y_pred, masks)) = clipping.clipped_gradient_sum(
        loss_fn, variables, x, y, l2_norm_clip=self.l2_norm_clip * scale, has_aux=True)
    y_pred = tf.nest.map_structure(_with_mask, y_pred, masks)
    n = tf.shape(losses)[0]
    grads = [self._noised(s, scale) / tf.cast(n, s.dtype) if s is not None else None
             for s in sums]
    self.optimizer.apply_gradients([(g, v) for g, v in zip(grads, variables)
                                    if g is not None])
    tracker = getattr(self, "_loss_tracker", None)
    if tracker is not None:
      tracker.update_state(tf.reduce_mean(losses), sample_weight=n)
    return self.compute_metrics(x, y, y_pred, sample_weight=None)

  def _noised(self, total, scale):
    stddev = self.l2_norm_clip * self.noise_multiplier
    if stddev == 0:
      return total
    return total + keras.random.normal(total.shape, dtype=total.dtype,
                                       seed=self.noise_seed) * tf.cast(stddev * scale,
                                                                       total.dtype)

  def get_config(self):
    return {"model": keras.saving.serialize_keras_object(self.model),
            "l2_norm_clip": self.l2_norm_clip, "noise_multiplier": self.noise_multiplier,
            "seed": self.seed, **super().get_config()}

  @classmethod
  def from_config(cls, config, custom_objects=None):
    config = dict(config)
    model = keras.saving.deserialize_keras_object(config.pop("model"),
                                                  custom_objects=custom_objects)
    return cls(model, **config)


def _first_rows_with_masks(y_pred):
  """Row 0 of each prediction (the example's, from its batch of one) and of its Keras mask
  (None where it has none): metrics weigh by the mask, and a stacked tensor loses it."""
  rows = tf.nest.map_structure(lambda t: t[0], y_pred)
  masks = tf.nest.map_structure(
      lambda t: None if getattr(t, "_keras_mask", None) is None else t._keras_mask[0],  # pylint: disable=protected-access
      y_pred)
  return rows, masks


def _with_mask(y_pred, mask):
  if mask is not None:
    y_pred._keras_mask = mask  # pylint: disable=protected-access
  return y_pred
