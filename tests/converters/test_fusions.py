"""The sum-of-matmuls rewrite (converters/fusions.py) preserves results and fuses."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

RNG = np.random.default_rng(11)
A = tf.constant(RNG.standard_normal([4, 3, 2, 5]), tf.float32)   # [n, terms, rows, cols]
B = tf.constant(RNG.standard_normal([4, 3, 2, 5]), tf.float32)


def _sum_of_products(transpose_a, transpose_b):
  def body(i):
    a, b = tf.gather(A, i), tf.gather(B, i)
    terms = [tf.matmul(a[t], b[t], transpose_a=transpose_a, transpose_b=transpose_b)
             for t in range(3)] if transpose_a != transpose_b else [
                 tf.matmul(a[t], tf.transpose(b[t]), transpose_a=transpose_a,
                           transpose_b=transpose_b) for t in range(3)]
    return tf.math.add_n(terms)
  return body


@pytest.mark.parametrize("transpose_a,transpose_b",
                         [(True, False), (False, True), (False, False), (True, True)])
@pytest.mark.parametrize("mode", ["function", "dynamic", "xla"])
def test_sum_of_matmuls_equals_the_loop(transpose_a, transpose_b, mode):
  testing.check_against_loop(_sum_of_products(transpose_a, transpose_b), 4, mode=mode)


def test_sum_of_matmuls_is_one_batch_matmul():
  body = _sum_of_products(True, False)
  graph = tf.function(lambda: vectorize.pfor(body, 4, fallback_to_while_loop=False)
                      ).get_concrete_function().graph
  used = [op for op in testing.all_ops(graph) if op.type.startswith("BatchMatMul")
          and any(c.type != "NoOp" for t in op.outputs for c in t.consumers())]
  assert len(used) == 1


def test_weight_gradient_of_an_unrolled_rnn_equals_the_loop():
  w = tf.constant(RNG.standard_normal([5, 5]) * 0.3, tf.float32)
  xs = tf.constant(RNG.standard_normal([4, 6, 5]), tf.float32)

  def body(i):
    with tf.GradientTape() as tape:
      tape.watch(w)
      h = tf.zeros([1, 5])
      for t in range(6):
        h = tf.tanh(tf.matmul(h + tf.gather(xs, i)[t][None], w))
      loss = tf.reduce_sum(h * h)
    return tape.gradient(loss, w)

  testing.check_against_loop(body, 4)
