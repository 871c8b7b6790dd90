"""OpCases for converters/ragged_producers.py: ops whose output size differs per iteration.

The generated tests compare stacked outputs, so each builder reduces the ragged value to a
fixed size (the reductions over the ragged axis are under test too); ragged outputs
themselves are compared with `tf.ragged.stack` in test_ragged.py. XLA is skipped: these
sizes are not static (test_ragged.py checks the error).
"""

import numpy as np
import tensorflow as tf

from tests.converters.cases_arrays import small_ints
from tests.converters.op_cases import OpCase, indices_below

_NO_XLA = "per-iteration sizes: a ConversionError under XLA (tested in test_ragged.py)"
_I32, _I64, _F32 = tf.int32, tf.int64, tf.float32


def _range_sum(limit):
  return tf.reduce_sum(tf.range(limit))


def _range_three(start, size, delta):
  return tf.reduce_sum(tf.range(start, start + size * delta, delta))


def _where_sum(x):
  return tf.reduce_sum(tf.where(x > 0), axis=0)


def _ragged_range(starts, sizes):
  rt = tf.ragged.range(starts, starts + sizes)
  return tf.reduce_sum(rt.flat_values), rt.row_splits


def _unique(x):
  y, idx = tf.unique(x)
  return tf.reduce_sum(y), tf.reduce_max(y), idx


def _unique_with_counts(x):
  y, idx, count = tf.unique_with_counts(x)
  return tf.reduce_sum(y * tf.cast(count, y.dtype)), tf.reduce_max(count), idx


def _split_count(strings):
  tokens = tf.strings.split(strings)
  return tf.size(tokens), tf.reduce_sum(tf.strings.length(tokens))


def _sentences(rng, shape, dtype):
  del dtype
  words = np.array(["a", "bc", "def", ""], dtype=object)
  return np.array([" ".join(rng.choice(words, rng.integers(0, 5)))
                   for _ in range(int(np.prod(shape)))], dtype=object).reshape(shape)


CASES = [
    OpCase("Range", _range_sum, [()], [_I32, _I64], make=[indices_below(7)], xla=_NO_XLA),
    OpCase("Range-start_size_delta", _range_three, [(), (), ()], [_I32],
           make=[small_ints, indices_below(5), lambda rng, s, d: rng.choice(
               [-2, 1, 3], s).astype(d.as_numpy_dtype)], xla=_NO_XLA),
    OpCase("RaggedRange", _ragged_range, [(3,), (3,)], [_I32, _I64],
           make=[small_ints, indices_below(5)], xla=_NO_XLA),
    OpCase("Where", _where_sum, [(3, 4)], [_F32, _I32], xla=_NO_XLA),
    OpCase("Unique", _unique, [(6,)], [_I32, _F32], make=[small_ints], xla=_NO_XLA),
    OpCase("UniqueWithCounts", _unique_with_counts, [(6,)], [_I32, _I64],
           make=[small_ints], xla=_NO_XLA),
    OpCase("StringSplitV2", _split_count, [()], [tf.string], make=[_sentences],
           xla="strings have no XLA kernels"),
]
