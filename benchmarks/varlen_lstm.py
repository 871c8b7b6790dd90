"""The paper's variable-length LSTM: each example runs its own number of steps.

Forms: vectorize (pfor over a per-example `tf.while_loop` to the example's length),
hand-batched (the batch run to the longest length with masking), `tf.map_fn`, and
TensorFlow's own `tf.vectorized_map`; each also under XLA where it compiles. Prints time per
call (median of interleaved rounds), the ratio to hand-batched, conversion cost and op counts.

  python -m benchmarks.varlen_lstm --batch 128
"""

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

import vectorize
from benchmarks import models
from benchmarks import timing

flags.DEFINE_integer("batch", 128, "examples per batch")
flags.DEFINE_integer("max_length", 100, "lengths are drawn from 1..max_length")
flags.DEFINE_integer("rounds", 5, "timing rounds")
FLAGS = flags.FLAGS


def build_forms(params, sequences, lengths):
  """{name: tf.function} computing the final states [batch, state]."""
  n = int(sequences.shape[0])

  def example(i):
    return models.lstm_dynamic_final_state(params, tf.gather(sequences, i),
                                           tf.gather(lengths, i))

  def elem(e):
    return models.lstm_dynamic_final_state(params, e[0], e[1])

  def vectorized():
    return vectorize.pfor(example, n, fallback_to_while_loop=False)

  def hand():
    return models.lstm_masked_final_state(params, sequences, lengths)

  def tf_pfor():
    return tf.vectorized_map(elem, (sequences, lengths))

  return {
      "hand-batched": tf.function(hand),
      "vectorize": tf.function(vectorized),
      "tf.vectorized_map": tf.function(tf_pfor),
      "tf.map_fn": tf.function(lambda: tf.map_fn(elem, (sequences, lengths),
                                                 fn_output_signature=tf.float32)),
      "hand-batched (XLA)": tf.function(hand, jit_compile=True),
      "vectorize (XLA)": tf.function(vectorized, jit_compile=True),
      "tf.vectorized_map (XLA)": tf.function(tf_pfor, jit_compile=True),
  }


def main(argv):
  del argv
  rng = np.random.default_rng(0)
  params = models.lstm_params()
  sequences = tf.constant(rng.standard_normal([FLAGS.batch, FLAGS.max_length, 128]),
                          tf.float32)
  lengths = tf.constant(rng.integers(1, FLAGS.max_length + 1, [FLAGS.batch]), tf.int32)
  forms = build_forms(params, sequences, lengths)
  reference = forms["hand-batched"]()
  first, errors, ops, working = {}, {}, {}, {}
  for name, fn in forms.items():
    try:
      first[name] = timing.first_call_seconds(fn)
      errors[name] = timing.max_abs_error(fn(), reference)
      ops[name] = timing.count_ops(fn)
      working[name] = fn
    except Exception as e:  # pylint: disable=broad-except
      print(f"{name}: fails ({type(e).__name__}: {str(e).splitlines()[0][:100]})")
  results = timing.compare(working, rounds=FLAGS.rounds, baseline="hand-batched")
  xla_hand = results.get("hand-batched (XLA)", {}).get("ms")
  print(f"Variable-length LSTM (input 128, state 256), batch {FLAGS.batch}, lengths "
        f"1..{FLAGS.max_length}")
  print(f"{'form':<26}{'ms/call':>9}{'vs hand':>9}{'vs hand XLA':>13}{'convert+1st (s)':>17}"
        f"{'ops':>7}{'max err':>10}")
  for name, r in results.items():
    vs_xla = f"{r['ms'] / xla_hand:.2f}" if xla_hand else "-"
    print(f"{name:<26}{r['ms']:>9.1f}{r['ratio']:>9.2f}{vs_xla:>13}"
          f"{first[name] - r['ms'] / 1e3:>17.2f}{ops[name]:>7}{errors[name]:>10.1e}")


if __name__ == "__main__":
  app.run(main)
