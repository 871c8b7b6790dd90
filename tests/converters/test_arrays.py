"""Array ops that the OpCase table cannot reach: XlaEinsum has only an XLA kernel, so its
reference loop runs under XLA too; bin counts whose size differs per iteration fail with an
error that says so."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.compiler.tf2xla.ops import gen_xla_ops

import vectorize
from tests import testing


@pytest.mark.parametrize("pattern", [(True, True), (True, False), (False, True)],
                         ids=["stacked,stacked", "stacked,invariant", "invariant,stacked"])
def test_xla_einsum_equals_loop_under_xla(pattern):
  rng = np.random.default_rng(0)
  n = 3
  a = tf.constant(rng.standard_normal([n, 2, 4] if pattern[0] else [2, 4]), tf.float32)
  b = tf.constant(rng.standard_normal([n, 4, 5] if pattern[1] else [4, 5]), tf.float32)

  def body(i):
    x = tf.gather(a, i) if pattern[0] else a
    y = tf.gather(b, i) if pattern[1] else b
    return gen_xla_ops.xla_einsum(x, y, "ij,jk->ik")

  vectorized = tf.function(lambda: vectorize.pfor(body, n, fallback_to_while_loop=False),
                           jit_compile=True, autograph=False)()
  loop = tf.function(lambda: tf.stack([body(i) for i in range(n)]), jit_compile=True,
                     autograph=False)()
  np.testing.assert_allclose(vectorized, loop, rtol=1e-5, atol=1e-5)


def test_bincount_of_per_iteration_size_is_ragged():
  """Each iteration's max(values) + 1 bins: ragged, as the loop's tf.ragged.stack (code-blind
  round 15; refused at run time before). Under XLA, which has no ragged values, the clear
  refusal naming the fix."""
  values = tf.constant([[0, 1, 4], [2, 2, 3]])
  body = lambda i: tf.math.bincount(values[i])
  got = vectorize.pfor(body, 2, fallback_to_while_loop=False)
  assert got.to_list() == [[1, 1, 0, 0, 1], [0, 0, 2, 1]]
  dynamic = tf.function(lambda n: vectorize.pfor(body, n, fallback_to_while_loop=False))
  assert dynamic(tf.constant(0)).to_list() == []
  with pytest.raises(vectorize.ConversionError,
                     match=r"(?s)bincount.*test_arrays.py:\d+.*number of bins differs per "
                           r"iteration.*equal minlength and maxlength"):
    tf.function(lambda: vectorize.pfor(body, 2, fallback_to_while_loop=False),
                jit_compile=True)()


@pytest.mark.parametrize("bad", ["indices", "segment_ids"])
def test_sparse_segment_grad_id_out_of_range_fails_as_the_kernel_does(bad):
  """Iteration 0's id 5 is past its rows; moved into one folded output it would land in
  iteration 1's rows, a silent wrong answer."""
  ids = tf.constant([[0, 5], [1, 2]]) if bad == "indices" else tf.constant([[0, 1], [1, 2]])
  segments = tf.constant([[0, 3], [0, 1]]) if bad == "segment_ids" else tf.constant(
      [[0, 1], [0, 1]])
  grad = tf.ones([2, 3, 2])

  def body(i):
    return tf.raw_ops.SparseSegmentSumGrad(grad=grad[i], indices=ids[i],
                                           segment_ids=segments[i], output_dim0=5)

  with pytest.raises(tf.errors.InvalidArgumentError, match=f"{bad} out of range"):
    vectorize.pfor(body, 2, fallback_to_while_loop=False)


def test_diag_part_of_unpaired_dims_fails_as_the_kernel_does():
  """Per-iteration dims [2, 3, 3, 2] hold as many elements as a [6, 6] matrix; the op must
  still reject them (run-time shapes, so no trace-time check catches it)."""
  values = tf.ones([2, 2, 3, 3, 2])

  @tf.function(input_signature=[tf.TensorSpec([None] * 5, tf.float32)])
  def run(x):
    return vectorize.pfor(lambda i: tf.linalg.tensor_diag_part(x[i]), 2,
                          fallback_to_while_loop=False)

  with pytest.raises(tf.errors.InvalidArgumentError, match="first half of dims"):
    run(values)


def test_histogram_of_an_empty_range_fails_as_the_kernel_does():
  ranges = tf.constant([[0.0, 1.0], [1.0, 0.0]])
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"value_range\[0\] < value_range"):
    vectorize.pfor(lambda i: tf.histogram_fixed_width(tf.constant([0.1, 0.5]), ranges[i], 4),
                   2, fallback_to_while_loop=False)


def test_roll_along_a_missing_axis_fails_as_the_kernel_does():
  axes = tf.constant([1, 2])
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"axis out of range \[-2, 2\)"):
    vectorize.pfor(lambda i: tf.roll(tf.ones([2, 3]), 1, axes[i]), 2,
                   fallback_to_while_loop=False)


_WORD_COUNTS = tf.constant([[3, 1, 0], [2, 2, 2], [0, 0, 0], [1, 5, 4]])
_LENGTHS = tf.constant([2, 3, 0, 3])


@pytest.mark.parametrize("mode", ["function", "dynamic", "xla"])
def test_bincount_of_ragged_values_with_a_fixed_number_of_bins_is_dense(mode):
  """minlength = maxlength fixes the bins: the counts of per-iteration-length values are
  dense, as the loop stacks them, and a loop can carry them (fuzz seed 3101686: they came
  back ragged, and a TensorArray write of them failed)."""
  def body(i):
    counts = tf.math.bincount(_WORD_COUNTS[i, :_LENGTHS[i]], minlength=4, maxlength=4)
    def step(j, ta):
      return j + 1, ta.write(j, counts * (j + 1))
    _, ta = tf.while_loop(lambda j, ta: j < 2, step,
                          (0, tf.TensorArray(tf.int32, size=2, element_shape=[4])))
    return counts, ta.stack()

  if mode == "xla":
    with pytest.raises(vectorize.ConversionError, match="XLA"):
      testing.run_pfor(body, 4, mode=mode)
    return
  got = testing.run_pfor(body, 4, mode=mode)
  testing.assert_allclose(got, testing.sequential(body, 4))


X = tf.constant([[1, 2], [0, 0], [2, 2]])


def test_bincount_with_fixed_length_at_n0():
  """Fuzz seeds 1000267, 1000793."""
  def body(i):
    return tf.math.bincount(tf.math.floormod(X[i], 3), minlength=3, maxlength=3)
  expected = testing.sequential(None, 0, testing.example_spec(body))   # (0, 3)
  testing.assert_allclose(testing.run_pfor(body, 0), expected)


def test_bincount_with_fixed_length_at_n2():
  def body(i):
    return tf.math.bincount(tf.math.floormod(X[i], 3), minlength=3, maxlength=3)
  testing.check_against_loop(body, 2)
