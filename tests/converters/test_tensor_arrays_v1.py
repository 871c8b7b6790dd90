"""TF1 TensorArrays made outside the body (as tf.compat.v1 graph code makes them) and read
or written per iteration inside it, with the fallback off: one gather or scatter."""

import numpy as np
import tensorflow as tf

import vectorize
from tests import testing

_RAW = tf.raw_ops
X = tf.constant(np.arange(8, dtype=np.float32).reshape(4, 2))


def _array():
  h, flow = _RAW.TensorArrayV3(size=4, dtype=tf.float32, element_shape=[2],
                               clear_after_read=False)
  return h, _RAW.TensorArrayScatterV3(handle=h, indices=tf.range(4), value=X, flow_in=flow)


def _reads(h, flow):
  def body(i):
    j = 3 - i
    return (_RAW.TensorArrayReadV3(handle=h, index=j, flow_in=flow, dtype=tf.float32),
            _RAW.TensorArrayGatherV3(handle=h, indices=tf.stack([i, j]), flow_in=flow,
                                     dtype=tf.float32, element_shape=[2]),
            _RAW.TensorArraySizeV3(handle=h, flow_in=flow))
  return body


def test_reads_of_an_array_made_outside():
  """The array is made in the caller's graph (an eager TF1 handle cannot be captured)."""
  for n in (4, 0):
    looped = tf.function(lambda: [tf.stack(t) for t in zip(
        *[_reads(*_array())(tf.constant(i)) for i in range(4)])])()
    actual = tf.function(lambda: vectorize.pfor(_reads(*_array()), n,
                                                fallback_to_while_loop=False))()
    expected = tf.nest.map_structure(lambda t: np.asarray(t)[:n], tuple(looped))
    testing.assert_allclose(tf.nest.map_structure(np.asarray, actual), expected)


def test_per_iteration_writes_to_an_array_made_outside():
  """Each iteration writes its own element: one scatter, then read back after the loop."""
  def run(write):
    h, flow = _RAW.TensorArrayV3(size=3, dtype=tf.float32, element_shape=[2])
    flows = write(h, flow)
    with tf.control_dependencies(tf.nest.flatten(flows)):
      return _RAW.TensorArrayGatherV3(handle=h, indices=[0, 1, 2], flow_in=flow,
                                      dtype=tf.float32, element_shape=[2])

  def body_for(h, flow):
    return lambda i: _RAW.TensorArrayWriteV3(handle=h, index=i, value=X[i] * 2.,
                                             flow_in=flow)

  looped = tf.function(lambda: run(lambda h, flow: [body_for(h, flow)(tf.constant(i))
                                                    for i in range(3)]))()
  vectorized = tf.function(lambda: run(lambda h, flow: vectorize.pfor(
      body_for(h, flow), 3, fallback_to_while_loop=False)))()
  np.testing.assert_allclose(vectorized, looped)


def test_tf1_session_graph():
  """tf.compat.v1 graph code: an array unstacked outside the body, read per iteration."""
  with tf.Graph().as_default():
    x = tf.compat.v1.placeholder(tf.float32, [4, 2])
    h, flow = _RAW.TensorArrayV3(size=4, dtype=tf.float32, element_shape=[2],
                                 clear_after_read=False)
    flow = _RAW.TensorArrayScatterV3(handle=h, indices=tf.range(4), value=x, flow_in=flow)
    out = vectorize.pfor(lambda i: _RAW.TensorArrayReadV3(
        handle=h, index=3 - i, flow_in=flow, dtype=tf.float32) * 2., 4,
                         fallback_to_while_loop=False)
    with tf.compat.v1.Session() as session:
      np.testing.assert_allclose(session.run(out, {x: X.numpy()}), X.numpy()[::-1] * 2.)
