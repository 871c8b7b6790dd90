"""ReverseV2 runs on a view with runs of kept or reversed axes merged (converters/shapes.py):
the result equals the loop for every pattern of axes, ranks up to 5, unknown dims, n = 0."""

import numpy as np
import pytest
import tensorflow as tf

from tests import testing

_X = tf.constant(np.arange(4 * 2 * 3 * 4 * 2, dtype=np.float32).reshape([4, 2, 3, 4, 2]))


@pytest.mark.parametrize("axes", [[0], [2], [-2], [1, 2], [0, 3], [0, 2], [3, 1], [], [0, 1, 2, 3]])
@pytest.mark.parametrize("mode", ["function", "dynamic", "xla"])
@pytest.mark.parametrize("n", [3, 0])
def test_reverse_of_a_rank_four_image_equals_the_loop(axes, mode, n):
  body = lambda i: tf.reverse(_X[i], axes)
  testing.assert_allclose(testing.run_pfor(body, n, mode=mode), testing.sequential(body, n, testing.output_spec(body)))


def test_reverse_with_dims_known_only_at_run_time():
  @tf.function(input_signature=[tf.TensorSpec([None, None, None, 2], tf.float32)])
  def run(x):
    from vectorize import pfor  # pylint: disable=g-import-not-at-top
    return pfor(lambda i: tf.reverse(x[i], [1]), tf.shape(x)[0], fallback_to_while_loop=False)
  x = _X[:, 0]
  np.testing.assert_array_equal(run(x).numpy(), x.numpy()[:, :, ::-1])

