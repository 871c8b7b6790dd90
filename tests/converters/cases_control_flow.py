"""OpCases for the control-flow converters (vectorize/control_flow/): conditionals and loops
whose inputs are stacked or invariant; tests/vectorize/control_flow/ has the structural
tests (partitioning, nesting, trip counts, gradients, junk lanes)."""

import tensorflow as tf

from tests.converters.op_cases import OpCase

_SCALE = tf.Variable(1.5)   # read inside a branch or loop: makes the op stateful (If, While)


def _cond(x, y):
  return tf.cond(tf.reduce_sum(x) > 0, lambda: x * y, lambda: x - y)


def _stateful_cond(x, y):
  return tf.cond(tf.reduce_sum(x) > 0, lambda: x * _SCALE, lambda: y - x)


def _switch(x, k):
  return tf.switch_case(k, [lambda: x * 2.0, lambda: tf.sin(x), lambda: -x])


def _stateful_switch(x, k):
  return tf.switch_case(k, [lambda: x * _SCALE, lambda: tf.sin(x), lambda: -x])


def _while(x, limit):
  return tf.while_loop(lambda t, y: t < limit, lambda t, y: (t + 1, y * 0.5 + 1.0), (0, x))


def _stateful_while(x, limit):
  return tf.while_loop(lambda t, y: t < limit, lambda t, y: (t + 1, y * _SCALE), (0, x))


def _small_ints(rng, shape, dtype):
  return rng.integers(0, 4, shape).astype(tf.as_dtype(dtype).as_numpy_dtype)


CASES = [
    OpCase("StatelessIf", _cond, [[3], [3]], dtypes=[tf.float32, tf.float64]),
    OpCase("If", _stateful_cond, [[3], [3]]),
    OpCase("StatelessCase", _switch, [[3], []], dtypes=[(tf.float32, tf.int32)],
           make=[None, _small_ints]),
    OpCase("Case", _stateful_switch, [[3], []], dtypes=[(tf.float32, tf.int32)],
           make=[None, _small_ints]),
    OpCase("StatelessWhile", _while, [[3], []], dtypes=[(tf.float32, tf.int32)],
           make=[None, _small_ints]),
    OpCase("While", _stateful_while, [[3], []], dtypes=[(tf.float32, tf.int32)],
           make=[None, _small_ints]),
]

UNTESTED = {
    "FakeParam": "only in gradients of conditionals (an untaken branch's intermediate); "
                 "covered by the gradient tests in tests/vectorize/control_flow/test_cond.py",
    **{t: "only in a conditional TensorFlow rewrote for its gradient (its intermediates as "
          "Optionals); covered by tests/vectorize/control_flow/test_optionals.py"
       for t in ("OptionalFromValue", "OptionalGetValue", "OptionalNone")},
    "OptionalHasValue": "refuses per iteration (an Optional's presence is not held); a "
                        "loop-invariant Optional is read as it is",
}
