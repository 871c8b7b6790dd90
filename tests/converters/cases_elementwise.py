"""OpCases for converters/elementwise.py."""

import tensorflow as tf

from tests.converters.op_cases import OpCase

CASES = [
    OpCase("Abs", tf.abs, [[2, 3]], dtypes=[tf.float32, tf.int32]),
    OpCase("AddV2", tf.add, [[2, 3], [3]], dtypes=[tf.float32, tf.int64]),
    OpCase("Mul", tf.multiply, [[2, 3], [2, 1]]),
    OpCase("Sub", tf.subtract, [[3], [2, 3]]),
]
