"""Demo: per-example gradients of the paper's MNIST convnet, four ways.

vectorize's pfor with `tape.gradient` inside the body, a Python loop of per-example
gradients, `tf.map_fn`, and TensorFlow's own `tf.vectorized_map` (the comparison). Prints
steady-state time per call (median of interleaved rounds), the ratio to vectorize, the
conversion cost (first call minus a steady call) and the max error against the loop.

  python -m benchmarks.per_example_convnet --batch 32
"""

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

import vectorize
from benchmarks import models
from benchmarks import timing

flags.DEFINE_integer("batch", 32, "examples per batch")
flags.DEFINE_integer("rounds", 5, "timing rounds")
flags.DEFINE_bool("xla", False, "also time vectorize under jit_compile=True")
FLAGS = flags.FLAGS


def _loss(params, image, label):
  return models.softmax_loss(models.convnet_logits(params, image[None]), label[None])


def build_forms(params, images, labels, xla=False):
  """{name: zero-argument callable} computing the per-example gradients."""
  n = int(images.shape[0])

  def example_gradient(i):
    return models.gradients(_loss, params, tf.gather(images, i), tf.gather(labels, i))

  def elem_gradient(elem):
    return models.gradients(_loss, params, elem[0], elem[1])

  per_example = tf.function(example_gradient)
  forms = {
      "vectorize": tf.function(lambda: vectorize.pfor(example_gradient, n,
                                                      fallback_to_while_loop=False)),
      "tf.vectorized_map": tf.function(lambda: tf.vectorized_map(elem_gradient,
                                                                 (images, labels))),
      "tf.map_fn": tf.function(lambda: tf.map_fn(
          elem_gradient, (images, labels), fn_output_signature={k: tf.float32 for k in params})),
      "python loop": lambda: tf.nest.map_structure(
          lambda *xs: tf.stack(xs), *[per_example(tf.constant(i)) for i in range(n)]),
  }
  if xla:
    forms["vectorize (XLA)"] = tf.function(
        lambda: vectorize.pfor(example_gradient, n, fallback_to_while_loop=False),
        jit_compile=True)
  return forms


def main(argv):
  del argv
  rng = np.random.default_rng(0)
  params = models.convnet_params()
  images = tf.constant(rng.standard_normal([FLAGS.batch, 28, 28, 1]).astype(np.float32))
  labels = tf.constant(rng.integers(0, 10, [FLAGS.batch]).astype(np.int32))
  forms = build_forms(params, images, labels, FLAGS.xla)
  timing.warm_autograph(lambda: models.gradients(_loss, params, images[0], labels[0]))
  forms["python loop"]()   # the runtime's own first-use costs, paid before any form is timed
  first = {name: timing.first_call_seconds(fn) for name, fn in forms.items()}
  reference = forms["python loop"]()
  errors = {name: timing.max_rel_error([fn()[k] for k in sorted(params)],
                                       [reference[k] for k in sorted(params)])
            for name, fn in forms.items()}
  results = timing.compare(forms, rounds=FLAGS.rounds)
  print(f"Per-example gradients of the MNIST convnet, batch {FLAGS.batch}, "
        f"{sum(int(np.prod(p.shape)) for p in params.values())} parameters")
  print(f"{'form':<20}{'ms/call':>10}{'vs vectorize':>14}{'convert+1st (s)':>17}"
        f"{'max rel err':>13}")
  for name, r in results.items():
    print(f"{name:<20}{r['ms']:>10.1f}{r['ratio']:>14.2f}"
          f"{first[name] - r['ms'] / 1e3:>17.2f}{errors[name]:>13.1e}")


if __name__ == "__main__":
  app.run(main)
