"""OpCases for nested tf.function calls (vectorize/control_flow/calls.py)."""

import tensorflow as tf

from tests.converters.op_cases import OpCase
from vectorize import op_types


@tf.function(autograph=False)
def _scaled_sum(x, y):
  return x * 2.0 + y


_counter = tf.Variable(0.0)


@tf.function(autograph=False)
def _reads_variable(x):
  return x + _counter.read_value()


@tf.function(autograph=False)
def _nested(x, y):
  return _scaled_sum(x, y) * _scaled_sum(y, x)


CASES = [
    OpCase("PartitionedCall", _scaled_sum, [[3], [3]], dtypes=[tf.float32, tf.float64]),
    OpCase("PartitionedCall-nested", _nested, [[2, 3], [3]], op_types=("PartitionedCall",)),
    OpCase("StatefulPartitionedCall", _reads_variable, [[3]]),
]

UNTESTED = {
    op_types.LEGACY_CALL: "not an op type but the converter key of an op calling a legacy "
                          "Defun by name (its type is the function's name): covered by the "
                          "dense-label CTC tests of tests/users/test_decoding_losses_users17.py",
}
