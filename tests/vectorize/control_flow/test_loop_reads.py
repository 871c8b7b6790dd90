"""A while loop with a per-iteration trip count that reads a sequence it carries unchanged:
the sequence stays whole in the loop state and each step gathers only the rows it reads
(one gather_nd at (position, step)). Equal to the loop for single steps and windows."""

import numpy as np
import pytest
import tensorflow as tf

from tests import testing

N, STEPS, WIDTH = 4, 6, 3
RNG = np.random.default_rng(0)
SEQUENCES = tf.constant(RNG.standard_normal([N, STEPS + 2, WIDTH]), tf.float32)
LENGTHS = tf.constant([3, 0, 6, 1], tf.int32)


def _running_sum(read):
  def body(i):
    sequence, length = SEQUENCES[i], LENGTHS[i]
    _, total = tf.while_loop(lambda t, s: t < length,
                             lambda t, s: (t + 1, s + read(sequence, t)),
                             (0, tf.zeros([WIDTH])))
    return total
  return body


READS = {
    "row": lambda sequence, t: sequence[t],
    "window": lambda sequence, t: tf.reduce_sum(sequence[t:t + 2], axis=0),
    "row_and_offset": lambda sequence, t: sequence[t] * sequence[t + 1],
}


@pytest.mark.parametrize("mode", testing.MODES)
@pytest.mark.parametrize("read", sorted(READS))
def test_reads_of_a_carried_sequence(read, mode):
  body = _running_sum(READS[read])
  testing.assert_allclose(testing.run_pfor(body, N, mode), testing.sequential(body, N))
