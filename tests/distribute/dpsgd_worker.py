"""One worker of the multi-worker DP-SGD test, or the single-process reference run.

  python dpsgd_worker.py OUT.npz FORM                  # one process, the whole global batch
  TF_CONFIG=... python dpsgd_worker.py OUT.npz FORM    # a MultiWorkerMirroredStrategy worker

Trains a small Keras model for a few DP-SGD steps: each example's gradient clipped to a
global norm and summed over the local batch, FORM "materialized" from
`vectorize.per_example_gradients`, "clipped" by `vectorize.clipped_gradient_sum`; then
summed over the global batch (across workers: an all-reduce), noised with a seeded draw every worker makes alike, divided
by the global batch and applied by plain SGD. Writes the initial and final weights to
OUT.npz.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf
import keras

import vectorize

GLOBAL_BATCH, FEATURES, CLASSES, STEPS = 8, 6, 3, 3
CLIP, NOISE, LEARNING_RATE = 0.5, 0.1, 0.3


def data(step):
  """The global batch of one step: the same in every process."""
  rng = np.random.default_rng(100 + step)
  x = rng.standard_normal([GLOBAL_BATCH, FEATURES]).astype(np.float32)
  y = rng.integers(0, CLASSES, [GLOBAL_BATCH]).astype(np.int32)
  return x, y


def make_model():
  model = keras.Sequential([keras.Input([FEATURES]), keras.layers.Dense(16, "tanh"),
                            keras.layers.Dense(CLASSES)])
  rng = np.random.default_rng(0)
  model.set_weights([rng.standard_normal(w.shape).astype(np.float32) * 0.5
                     for w in model.get_weights()])
  return model


FORM = ["materialized"]


def clipped_sum(model, x, y):
  """The sum over examples of each example's gradient, clipped to global norm CLIP."""
  def loss_fn(xi, yi):
    logits = model(xi[None])[0]
    return tf.nn.sparse_softmax_cross_entropy_with_logits(yi, logits)

  if FORM[0] == "clipped":
    return vectorize.clipped_gradient_sum(loss_fn, model.trainable_variables, x, y,
                                          l2_norm_clip=CLIP, fallback_to_while_loop=False)
  grads = vectorize.per_example_gradients(loss_fn, model.trainable_variables, x, y,
                                          fallback_to_while_loop=False)
  norms = tf.sqrt(tf.add_n([tf.reduce_sum(tf.reshape(g, [tf.shape(g)[0], -1]) ** 2, 1)
                            for g in grads]))
  scale = tf.minimum(1.0, CLIP / tf.maximum(norms, 1e-12))
  return [tf.tensordot(scale, g, axes=1) for g in grads]


def apply_noisy_mean(model, summed, step):
  """Adds the step's noise (the same draw everywhere), averages and takes an SGD step."""
  for k, (v, g) in enumerate(zip(model.trainable_variables, summed)):
    noise = tf.random.stateless_normal(g.shape, seed=[step, k]) * (NOISE * CLIP)
    v.assign_sub(LEARNING_RATE * (g + noise) / GLOBAL_BATCH)


def train_single():
  model = make_model()

  @tf.function
  def step_fn(x, y, step):
    apply_noisy_mean(model, clipped_sum(model, x, y), step)

  for step in range(STEPS):
    step_fn(*data(step), tf.constant(step))
  return model


def train_multi_worker():
  strategy = tf.distribute.MultiWorkerMirroredStrategy()
  task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
  workers = strategy.num_replicas_in_sync
  local = GLOBAL_BATCH // workers
  with strategy.scope():
    model = make_model()

  @tf.function
  def step_fn(x, y, step):
    per_replica = strategy.run(lambda x, y: clipped_sum(model, x, y), args=(x, y))
    summed = [strategy.reduce(tf.distribute.ReduceOp.SUM, g, axis=None) for g in per_replica]
    apply_noisy_mean(model, summed, step)

  for step in range(STEPS):
    x, y = data(step)
    shard = slice(task * local, (task + 1) * local)
    step_fn(x[shard], y[shard], tf.constant(step))
  return model


def main(out):
  model = train_multi_worker() if "TF_CONFIG" in os.environ else train_single()
  initial = make_model().get_weights()   # after: the strategy must come first
  final = [w.numpy() for w in model.trainable_variables]
  np.savez(out, **{f"final{k}": w for k, w in enumerate(final)},
           **{f"initial{k}": w for k, w in enumerate(initial)})


if __name__ == "__main__":
  FORM[0] = sys.argv[2] if len(sys.argv) > 2 else "materialized"
  main(sys.argv[1])
