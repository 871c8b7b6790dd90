"""A per-example recurrence over each example's own tokens, in interleaved rounds of one process.

  python -m benchmarks.ragged_recurrence --batch=128 --rounds=9

Each example holds a sequence padded to 100 steps and its own length (1..100); the body runs
`h = tanh(W h + U x_t)` (W, U in tf.Variables) over the valid steps and returns the final
state. Forms, each checked against hand-batched:
- "vectorize ragged": the body reads `x[i][:lengths[i]]`, a value of per-example size, and
  steps its `tf.while_loop` through it (`rows[t]`, until `tf.shape(rows)[0]`);
- "vectorize padded": the same body on the padded sequence, to the example's length;
- "tf pfor padded": TF's `tf.vectorized_map` of the padded body (its pfor has no ragged
  form);
- "map_fn ragged": `tf.map_fn` of the ragged body;
- "hand-batched": the batch stepped to the longest length, finished rows masked.
Medians of wall milliseconds per call; the ratios are taken in the same rounds.
"""

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import numpy as np
import tensorflow as tf

import vectorize

flags.DEFINE_integer("batch", 128, "examples per batch")
flags.DEFINE_integer("rounds", 9, "timing rounds (each calls every form once)")
flags.DEFINE_integer("width", 128, "input and state size")
flags.DEFINE_bool("xla", False, "also run the padded forms and hand-batched under XLA")
FLAGS = flags.FLAGS

MAX_LENGTH = 100


def build(batch, width):
  """{form: zero-argument function}."""
  rng = np.random.default_rng(0)
  x = tf.constant(rng.standard_normal([batch, MAX_LENGTH, width]), tf.float32)
  lengths = tf.constant(rng.integers(1, MAX_LENGTH + 1, batch), tf.int32)
  w = tf.Variable(rng.standard_normal([width, width]) / np.sqrt(width), dtype=tf.float32)
  u = tf.Variable(rng.standard_normal([width, width]) / np.sqrt(width), dtype=tf.float32)

  def run(rows, steps):
    def step(t, h):
      return t + 1, tf.tanh(tf.linalg.matvec(w, h) + tf.linalg.matvec(u, rows[t]))
    return tf.while_loop(lambda t, h: t < steps, step, (0, tf.zeros([width])))[1]

  def ragged_body(e):
    rows = e[0][:e[1]]
    return run(rows, tf.shape(rows)[0])

  def padded_body(e):
    return run(e[0], e[1])

  def hand():
    def step(t, h):
      new = tf.tanh(tf.matmul(h, w, transpose_b=True) + tf.matmul(x[:, t], u, transpose_b=True))
      return t + 1, tf.where((t < lengths)[:, None], new, h)
    return tf.while_loop(lambda t, h: t < tf.reduce_max(lengths), step,
                         (0, tf.zeros([batch, width])))[1]

  elems = (x, lengths)
  return {
      "hand-batched": hand,
      "vectorize ragged": lambda: vectorize.vectorized_map(ragged_body, elems,
                                                           fallback_to_while_loop=False),
      "vectorize padded": lambda: vectorize.vectorized_map(padded_body, elems,
                                                           fallback_to_while_loop=False),
      "tf pfor padded": lambda: tf.vectorized_map(padded_body, elems),
      "map_fn ragged": lambda: tf.map_fn(ragged_body, elems, fn_output_signature=tf.float32),
  }


def main(argv):
  del argv
  tf.get_logger().setLevel("ERROR")
  forms = {k: tf.function(f) for k, f in build(FLAGS.batch, FLAGS.width).items()}
  if FLAGS.xla:
    for k in ("hand-batched", "vectorize padded", "tf pfor padded"):
      forms[k + " (XLA)"] = tf.function(forms[k].python_function, jit_compile=True)
  expected = forms["hand-batched"]().numpy()
  failed = {}
  for name, fn in list(forms.items()):
    try:
      error = np.max(np.abs(fn().numpy() - expected))
    except Exception as e:  # pylint: disable=broad-except
      failed[name] = f"fails: {type(e).__name__}"
      del forms[name]
      continue
    assert error < 1e-4, f"{name} differs from hand-batched by {error}"
  times = {name: [] for name in forms}
  for _ in range(FLAGS.rounds):
    for name, fn in forms.items():
      start = time.perf_counter()
      fn().numpy()
      times[name].append(time.perf_counter() - start)
  hand = np.array(times["hand-batched"])
  print(f"batch {FLAGS.batch}, width {FLAGS.width}, lengths 1..{MAX_LENGTH}, {FLAGS.rounds} "
        f"rounds, load {os.getloadavg()[0]:.1f}\n\n| form | ms | / hand-batched |\n|---|---|---|")
  for name, t in times.items():
    t = np.array(t)
    print(f"| {name} | {np.median(t) * 1e3:.1f} | {np.median(t / hand):.2f} |")
  for name, why in failed.items():
    print(f"| {name} | {why} | |")


if __name__ == "__main__":
  app.run(main)
