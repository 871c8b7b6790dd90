"""Random recurrences: loops of a trip count every iteration shares (0 included), writing
and reading TensorArrays and accumulating matrix products, under a tape. Where lists are
UniformLists and sums of products are carried as factors, each must equal the loop."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize

N = 3


def _program(seed):
  """A per-example body drawn from `seed`: a recurrence over `trips` steps of an input
  sequence, with TensorArray writes, reads and an accumulated outer product, and the
  gradients of a loss of its results w.r.t. the weights and the sequence."""
  rng = np.random.default_rng(seed)
  trips = int(rng.integers(0, 5))
  width, features = int(rng.integers(1, 4)), int(rng.integers(1, 4))
  xs = tf.constant(rng.standard_normal([N, max(trips, 1), features]), tf.float32)
  w = tf.constant(rng.standard_normal([features, width]) * 0.5, tf.float32)
  u = tf.constant(rng.standard_normal([width, width]) * 0.5, tf.float32)
  dynamic = bool(rng.random() < 0.3)
  transpose = bool(rng.random() < 0.5)
  reads_back = bool(rng.random() < 0.3)
  gathered = [int(k) for k in rng.integers(0, max(trips, 1), 2)] if trips else None

  def body(i):
    seq = xs[i]
    with tf.GradientTape(persistent=True) as tape:
      wv, uv = tf.identity(w), tf.identity(u)
      tape.watch([wv, uv, seq])
      inputs = tf.TensorArray(tf.float32, size=max(trips, 1)).unstack(seq)
      outs = (tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[width],
                             clear_after_read=False) if dynamic else
              tf.TensorArray(tf.float32, size=trips, element_shape=[width],
                             clear_after_read=False))

      def step(t, h, acc, outs):
        x = inputs.read(t)[None]
        h_new = tf.tanh(tf.matmul(x, wv) + tf.matmul(h, uv))
        if reads_back:
          h_new += 0.1 * tf.cond(t > 0, lambda: outs.read(tf.maximum(t - 1, 0))[None],
                                 lambda: tf.zeros([1, width]))
        product = (tf.matmul(tf.transpose(x), h_new, transpose_a=False) if not transpose
                   else tf.matmul(x, h_new, transpose_a=True))
        return t + 1, h_new, acc + product, outs.write(t, h_new[0])

      _, h, acc, outs = tf.while_loop(
          lambda t, *_: t < trips, step,
          (0, tf.zeros([1, width]), tf.zeros([features, width]), outs))
      stacked = outs.stack() if trips else tf.zeros([0, width])
      loss = tf.reduce_sum(h ** 2) + tf.reduce_sum(acc * 0.5) + tf.reduce_sum(stacked)
    grads = tape.gradient(loss, [wv, uv, seq], unconnected_gradients="zero")
    results = [h, acc, stacked] + grads
    if gathered:
      results.append(outs.gather(gathered))
    return results

  # Under a tape, a dynamic-size array written in the loop, or one read in the loop that
  # writes it, keeps each step's list for the gradient: a list of lists, refused for now.
  body.lists_of_lists = dynamic or reads_back
  return body


def _looped(body, n):
  outs = [body(tf.constant(i)) for i in range(max(n, 1))]
  return tf.nest.map_structure(lambda *xs: tf.stack(xs)[:n], *outs)


@pytest.mark.parametrize("seed", range(8))
def test_random_recurrence_equals_the_loop(seed):
  body = _program(seed)
  if body.lists_of_lists:
    with pytest.raises(vectorize.ConversionError, match="TensorList"):
      vectorize.pfor(body, N, fallback_to_while_loop=False)
    return
  want = _looped(body, N)
  for mode in ("eager", "function"):
    run = lambda: vectorize.pfor(body, N, fallback_to_while_loop=False)  # pylint: disable=cell-var-from-loop
    got = run() if mode == "eager" else tf.function(run)()
    for k, (g, w) in enumerate(zip(got, want)):
      np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"{mode}, output {k}")
  empty = vectorize.pfor(body, 0, fallback_to_while_loop=False)
  for g, w in zip(empty, _looped(body, 0)):
    assert g.shape == w.shape, (g.shape, w.shape)
