"""Jacobian of a VGG-like convnet's outputs w.r.t. its input image (48x48x3, 128 outputs).

Forms: `vectorize.jacobian` (one gradient per output element, vectorized), hand-batched (the
image repeated once per output, one batched forward and one backward pass with identity
cotangents), TensorFlow's `GradientTape.jacobian` with its own pfor, and with a while loop.

  python -m benchmarks.jacobian_vgg
"""

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

import vectorize
from benchmarks import models
from benchmarks import timing

flags.DEFINE_integer("outputs", 128, "output size (rows of the jacobian)")
flags.DEFINE_integer("rounds", 5, "timing rounds")
FLAGS = flags.FLAGS


def build_forms(params, image):
  outputs = params["dense"].shape[1]

  def vectorized():
    x = tf.identity(image)
    y = models.vgg_outputs(params, x[None])[0]
    return vectorize.jacobian(y, x)

  def hand():
    xs = tf.tile(image[None], [outputs, 1, 1, 1])
    with tf.GradientTape() as tape:
      tape.watch(xs)
      ys = models.vgg_outputs(params, xs)
    return tape.gradient(ys, xs, output_gradients=tf.eye(outputs))

  def tape_jacobian(use_pfor):
    def fn():
      with tf.GradientTape() as tape:
        tape.watch(image)
        y = models.vgg_outputs(params, image[None])[0]
      return tape.jacobian(y, image, experimental_use_pfor=use_pfor)
    return fn

  return {
      "hand-batched": tf.function(hand),
      "vectorize": tf.function(vectorized),
      "tf jacobian (pfor)": tf.function(tape_jacobian(True)),
      "tf jacobian (while)": tf.function(tape_jacobian(False)),
      "hand-batched (XLA)": tf.function(hand, jit_compile=True),
      "vectorize (XLA)": tf.function(vectorized, jit_compile=True),
  }


def main(argv):
  del argv
  params = models.vgg_params(outputs=FLAGS.outputs)
  image = tf.constant(np.random.default_rng(0).standard_normal([48, 48, 3]), tf.float32)
  forms = build_forms(params, image)
  timing.report_against(
      forms, f"Jacobian of a VGG-like convnet, 48x48x3 input, {FLAGS.outputs} outputs",
      "hand-batched", FLAGS.rounds)

if __name__ == "__main__":
  app.run(main)
