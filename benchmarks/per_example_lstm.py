"""Per-example gradients of an LSTM (input 128, state 256, 10 steps, dense 10).

Forms: vectorize's `per_example_gradients`, hand-batched (one batched backward pass to the
gates, then per-example outer products summed over time as one contraction), TensorFlow's
own `tf.vectorized_map`, and `tf.map_fn`. Prints time per call and the ratio to
hand-batched.

  python -m benchmarks.per_example_lstm --batch 128
"""

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

import vectorize
from benchmarks import models
from benchmarks import timing

flags.DEFINE_integer("batch", 128, "examples per batch")
flags.DEFINE_integer("steps", 10, "time steps")
flags.DEFINE_integer("rounds", 5, "timing rounds")
FLAGS = flags.FLAGS


def _loss(params, sequence, label):
  return models.softmax_loss(models.lstm_unrolled_logits(params, sequence[None]), label[None])


def hand_batched(params, sequences, labels):
  """Per-example gradients from one batched backward pass: d loss_b / d gates_t is row b of
  the batched gradient (examples are independent), so each weight's per-example gradient is
  a contraction over time of its inputs with those rows."""
  batch = tf.shape(sequences)[0]
  state_size = params["dense"].shape[0]
  with tf.GradientTape() as tape:
    c = h = tf.zeros([batch, state_size])
    cell_inputs, gates = [], []
    for t in range(sequences.shape[1]):
      z = tf.concat([sequences[:, t], h], axis=1)
      g = tf.matmul(z, params["kernel"]) + params["bias"]
      tape.watch(g)
      cell_inputs.append(z)
      gates.append(g)
      i, f, gg, o = tf.split(g, 4, axis=1)
      c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(gg)
      h = tf.sigmoid(o) * tf.tanh(c)
    logits = tf.matmul(h, params["dense"]) + params["dense_bias"]
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    total = tf.reduce_sum(losses)
  d_gates, d_logits = tape.gradient(total, [gates, logits])
  d_gates = tf.stack(d_gates)                                 # [t, b, 4s]
  return {
      "kernel": tf.einsum("tbi,tbj->bij", tf.stack(cell_inputs), d_gates),
      "bias": tf.reduce_sum(d_gates, axis=0),
      "dense": tf.einsum("bi,bj->bij", h, d_logits),
      "dense_bias": d_logits,
  }


def build_forms(params, sequences, labels):
  def elem(e):
    return models.gradients(_loss, params, e[0], e[1])

  variables = {k: tf.Variable(v) for k, v in params.items()}

  def loss_on_variables(sequence, label):
    return _loss(variables, sequence, label)

  return {
      "hand-batched": tf.function(lambda: hand_batched(params, sequences, labels)),
      "vectorize": tf.function(lambda: vectorize.per_example_gradients(
          loss_on_variables, variables, sequences, labels, fallback_to_while_loop=False)),
      "tf.vectorized_map": tf.function(lambda: tf.vectorized_map(elem, (sequences, labels))),
      "tf.map_fn": tf.function(lambda: tf.map_fn(
          elem, (sequences, labels), fn_output_signature={k: tf.float32 for k in params})),
  }


def main(argv):
  del argv
  rng = np.random.default_rng(0)
  params = models.lstm_params()
  sequences = tf.constant(rng.standard_normal([FLAGS.batch, FLAGS.steps, 128]), tf.float32)
  labels = tf.constant(rng.integers(0, 10, [FLAGS.batch]), tf.int32)
  forms = build_forms(params, sequences, labels)
  timing.report_against(
      forms, f"Per-example LSTM gradients, batch {FLAGS.batch}, {FLAGS.steps} steps",
      "hand-batched", FLAGS.rounds)

if __name__ == "__main__":
  app.run(main)
