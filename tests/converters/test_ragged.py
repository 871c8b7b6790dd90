"""Ragged producers and consumers against the loop, with the fallback off.

Each body makes or consumes values whose size differs per iteration. A ragged output must
equal `tf.ragged.stack` of the loop; a dense one `tf.stack`. Every body runs eagerly and
with n known only at run time (a few in a caller's tf.function too), with n = 5 and n = 0.
"""

import numpy as np
import pytest
import tensorflow as tf

import vectorize

N = 5
LIMS = tf.constant([3, 0, 5, 2, 1])
STARTS = tf.constant([1, -2, 0, 4, 2])
FOURS = tf.constant([4, 4, 4, 4, 4])
X = tf.constant([[1., -2., 3., 0.5], [-1., -1., -1., -1.], [4., 5., -6., 2.],
                 [0., 2., 1., -3.], [7., -7., 0., 0.]])
M = tf.reshape(tf.range(60, dtype=tf.float32) % 7 - 3., [N, 4, 3])
XI = tf.constant([[1, 2, 1, 3], [4, 4, 4, 4], [1, 2, 3, 4], [0, 0, 1, 0], [5, 1, 5, 1]])
TABLE = tf.constant([10., 20., 30., 40., 50., 60.])
W = tf.constant(0.5)
STRINGS = tf.constant(["a bc d", "", "ef", "g h i j", "kbk b"])
W32 = tf.constant([[0.5, -1.], [2., 0.25], [-0.75, 1.5]])
EMBEDDINGS = tf.Variable(tf.reshape(tf.range(15, dtype=tf.float32) * 0.1 - 0.7, [5, 3]))


def _positive(i):
  return tf.boolean_mask(X[i], X[i] > 0)


def _rows(i):
  return tf.boolean_mask(M[i], M[i][:, 0] > -1)


_TABLE = tf.lookup.StaticHashTable(
    tf.lookup.KeyValueTensorInitializer(["a", "bc", "g", "kbk"], [1, 2, 3, 4]), -1)


def _loop_over_rows(rows):
  """A recurrence over each example's own rows (a ragged sequence the loop only reads)."""
  def step(t, h):
    return t + 1, tf.tanh(tf.linalg.matvec(W33, h) + rows[t])
  return tf.while_loop(lambda t, h: t < tf.shape(rows)[0], step, (0, tf.zeros([3])))[1]


def _loop_reading_rows_in_other_ways(rows):
  """Each step reads the sequence as a view (`rows[t]`, `rows[t:t + 2]`) and whole (a sum, a
  gather), which needs its rows gathered."""
  def step(t, h):
    window = tf.reduce_mean(rows[t:t + 2], 0)
    return t + 1, tf.tanh(h * 0.5 + rows[t] + window + tf.gather(rows, t) +
                          tf.reduce_sum(rows, 0) * 0.1)
  return tf.while_loop(lambda t, h: t < tf.shape(rows)[0], step, (0, tf.zeros([3])))[1]


def _cond_reading(values, predicate):
  """A conditional whose branches read a ragged value made before it."""
  return tf.cond(predicate, lambda: tf.reduce_sum(values),
                 lambda: tf.reduce_max(tf.concat([values, [-1.]], 0)))


def _switch_case_reading(values, index):
  return tf.switch_case(index, [
      lambda: tf.reduce_sum(values), lambda: tf.reduce_mean(tf.concat([values, [2.]], 0)),
      lambda: tf.cast(tf.size(values), tf.float32)])


W33 = tf.constant([[0.5, -0.2, 0.1], [0.3, 0.4, -0.6], [-0.1, 0.2, 0.7]])


def _partition_and_stitch(data, partitions):
  """The conditional pattern of a vectorized tf.cond: split by branch, run, merge back."""
  positions = tf.dynamic_partition(tf.range(tf.size(partitions)), partitions, 2)
  parts = tf.dynamic_partition(data, partitions, 2)
  return tf.dynamic_stitch(positions, [parts[0] * 2, parts[1] - 1])


BODIES = {
    "range": lambda i: tf.range(LIMS[i]),
    "range_sum": lambda i: tf.reduce_sum(tf.range(LIMS[i])),
    # tf.fill / zeros / ones of a per-iteration length (session 22: refused before).
    "zeros_of_length": lambda i: tf.zeros([LIMS[i]]),
    "fill_rows_of_value": lambda i: tf.fill(tf.stack([LIMS[i], 2]), X[i, 0]),
    "ones_like_ragged_sum": lambda i: tf.reduce_sum(tf.ones_like(_rows(i)) * W, 0),
    "range_start_limit_delta": lambda i: tf.range(STARTS[i], STARTS[i] + LIMS[i] * 2, 3),
    "range_negative_delta": lambda i: tf.range(LIMS[i], -1, -2),
    "range_float": lambda i: tf.range(0., tf.cast(LIMS[i], tf.float32), 0.75),
    "range_int64": lambda i: tf.range(tf.cast(LIMS[i], tf.int64)),
    "boolean_mask": _positive,
    "boolean_mask_sum": lambda i: tf.reduce_sum(_positive(i)),
    "boolean_mask_rows": _rows,
    "mean_over_rows": lambda i: tf.reduce_mean(_rows(i), axis=0),
    "sum_keepdims": lambda i: tf.reduce_sum(_rows(i), axis=[0, 1], keepdims=True),
    "sum_later_axis": lambda i: tf.reduce_sum(_rows(i), axis=1),
    "max": lambda i: tf.reduce_max(tf.range(LIMS[i])),
    "min": lambda i: tf.reduce_min(_positive(i)),
    "prod": lambda i: tf.reduce_prod(tf.range(1, LIMS[i] + 1)),
    "any": lambda i: tf.reduce_any(tf.range(LIMS[i]) > 2),
    "all": lambda i: tf.reduce_all(tf.range(LIMS[i]) < 3),
    "mean_int": lambda i: tf.reduce_mean(tf.range(LIMS[i] + 1)),
    "elementwise_per_iteration": lambda i: _positive(i) * X[i, 0] + W,
    "elementwise_ragged_ragged": lambda i: tf.cast(tf.range(LIMS[i]) ** 2, tf.float32) -
                                           tf.cast(tf.range(LIMS[i]), tf.float32),
    "elementwise_rows_broadcast": lambda i: _rows(i) * tf.constant([1., 2., 3.]) + X[i, :1],
    "unique": lambda i: tf.unique(XI[i]),
    "unique_with_counts": lambda i: tf.unique_with_counts(XI[i]),
    "unique_of_ragged": lambda i: tf.unique(tf.boolean_mask(XI[i], XI[i] > 0)),
    "unique_sum": lambda i: tf.reduce_sum(tf.unique(XI[i]).y),
    "where": lambda i: tf.where(M[i] > 0),
    "where_of_ragged": lambda i: tf.where(tf.range(LIMS[i]) % 2 == 0),
    "shape": lambda i: tf.shape(_rows(i)),
    "size": lambda i: tf.size(_rows(i)),
    "gather_from_ragged": lambda i: tf.gather(tf.range(LIMS[i] + 1) * 10, LIMS[i] // 2),
    "gather_ragged_indices": lambda i: tf.gather(TABLE, tf.range(LIMS[i])),
    "gather_ragged_indices_stacked_params": lambda i: tf.gather(
        X[i], tf.range(tf.minimum(LIMS[i], 4))),
    "gather_ragged_at_ragged": lambda i: tf.gather(tf.range(LIMS[i]) * 3,
                                                   tf.range(LIMS[i])[::-1][::-1]),
    "ensure_shape_densifies": lambda i: tf.ensure_shape(tf.range(FOURS[i]) * 2, [4]),
    "reshape_densifies": lambda i: tf.reshape(tf.range(FOURS[i]), [2, 2]),
    "reshape_flattens": lambda i: tf.reshape(_rows(i), [-1]),
    "slice_reversed": lambda i: tf.range(LIMS[i])[::-1],
    "slice_head": lambda i: tf.range(LIMS[i])[:2],
    "slice_tail_step": lambda i: tf.range(LIMS[i] * 2)[-5::2],
    "slice_index": lambda i: tf.range(LIMS[i] + 1)[-1],
    "slice_rows_column": lambda i: _rows(i)[1:, 2],
    "slice_last_coordinates": lambda i: tf.where(X[i] > 0)[-1:],
    "pad_fixed_length": lambda i: tf.pad(tf.range(LIMS[i]), [[0, 6 - LIMS[i]]]),
    "pad_invariant": lambda i: tf.pad(_rows(i), [[1, 2], [0, 1]], constant_values=-4.),
    "pad_ensure_shape": lambda i: tf.ensure_shape(
        tf.pad(_positive(i), [[0, 4 - tf.size(_positive(i))]]), [4]),
    "concat_first_axis": lambda i: tf.concat(
        [tf.range(LIMS[i]), XI[i, :2], [7], tf.range(STARTS[i] % 3)], 0),
    "concat_later_axis": lambda i: tf.concat([_rows(i), _rows(i) * 2.], 1),
    "unsorted_segment_sum": lambda i: tf.math.unsorted_segment_sum(
        _rows(i), tf.range(tf.shape(_rows(i))[0]) % 3 - 1, 2),
    "unsorted_segment_max": lambda i: tf.math.unsorted_segment_max(
        _positive(i), tf.range(tf.size(_positive(i))) // 2, 3),
    "segment_sum": lambda i: tf.math.segment_sum(_rows(i), tf.range(tf.shape(_rows(i))[0]) // 2),
    "segment_mean": lambda i: tf.math.segment_mean(_positive(i),
                                                   tf.range(tf.size(_positive(i))) * 2),
    "dynamic_stitch_of_partitions": lambda i: _partition_and_stitch(
        X[i], tf.cast(X[i] > 0, tf.int32)),
    "dynamic_stitch_of_ragged_partitions": lambda i: _partition_and_stitch(
        tf.range(LIMS[i]) * 3, tf.range(LIMS[i]) % 2),
    "dynamic_stitch_ragged_and_stacked": lambda i: tf.dynamic_stitch(
        [tf.range(LIMS[i]) + 4, tf.range(4)], [tf.range(LIMS[i]) * 10, XI[i]]),
    "dynamic_stitch_ragged_and_invariant": lambda i: tf.dynamic_stitch(
        [tf.range(3), tf.boolean_mask(XI[i] - 1, XI[i] < 4) % 3],
        [TABLE[:3], tf.boolean_mask(tf.cast(XI[i], tf.float32), XI[i] < 4)]),
    "lookup_table": lambda i: _TABLE.lookup(tf.strings.split(STRINGS[i])),
    "select_v2": lambda i: tf.where(_positive(i) > 2.0, _positive(i), -1.0),
    "unpack_later_axis": lambda i: tf.unstack(tf.where(XI[i] > 1), axis=1)[0],
    "slice_with_ellipsis_spanning_no_axis": lambda i: tf.range(LIMS[i])[..., 1:4],
    "dynamic_partition": lambda i: tf.dynamic_partition(
        _rows(i), tf.range(tf.shape(_rows(i))[0]) % 2, 2),
    "slice_per_iteration_bounds": lambda i: tf.range(LIMS[i] + 3)[STARTS[i] % 3:LIMS[i]],
    "cumsum": lambda i: tf.cumsum(tf.range(LIMS[i]) * 2 + 1),
    "cumsum_reverse_exclusive": lambda i: tf.cumsum(tf.range(LIMS[i]), exclusive=True,
                                                    reverse=True),
    "bincount": lambda i: tf.math.bincount(tf.range(LIMS[i]) % 3, minlength=4, maxlength=4),
    "bincount_fixed_size": lambda i: tf.raw_ops.DenseBincount(
        input=tf.range(LIMS[i]) % 3, size=4, weights=tf.zeros([0], tf.int32)),
    "bincount_own_size": lambda i: tf.math.bincount(tf.range(LIMS[i]) % 3),
    "string_split": lambda i: tf.strings.split(STRINGS[i]),
    "string_split_sep": lambda i: tf.strings.split(STRINGS[i], sep="b"),
    "string_split_count": lambda i: tf.size(tf.strings.split(STRINGS[i])),
    "tile_per_iteration": lambda i: tf.tile(X[i, :2], [LIMS[i]]),
    "tile_ragged": lambda i: tf.tile(tf.range(LIMS[i]), [2]),
    "squeeze": lambda i: tf.squeeze(tf.where(X[i] > 0), 1),
    "expand_dims": lambda i: tf.expand_dims(tf.range(LIMS[i]), -1),
    "cumsum_float": lambda i: tf.cumsum(_positive(i) * 0.1 + 1e-3),
    "cumprod": lambda i: tf.math.cumprod(_positive(i) - 0.5),
    "cumprod_ints_reverse_exclusive": lambda i: tf.math.cumprod(
        tf.range(LIMS[i]) % 3 + 1, exclusive=True, reverse=True),
    "cumprod_later_axis": lambda i: tf.math.cumprod(_rows(i), axis=1),
    "slice_run_time_invariant_end": lambda i: _rows(i)[:tf.reduce_min(FOURS) - 2],
    "loop_over_rows": lambda i: _loop_over_rows(_rows(i)),
    "loop_reading_rows_in_other_ways": lambda i: _loop_reading_rows_in_other_ways(_rows(i)),
    "cond_per_iteration_reading_ragged": lambda i: _cond_reading(_positive(i), LIMS[i] > 1),
    "cond_invariant_reading_ragged": lambda i: _cond_reading(_positive(i), W > 0),
    "switch_case_reading_ragged": lambda i: _switch_case_reading(_positive(i), LIMS[i] % 3),
    "loop_over_tokens_fixed_trips": lambda i: tf.while_loop(
        lambda t, acc: t < 3, lambda t, acc: (t + 1, acc + tf.reduce_sum(_positive(i)) * 2.),
        (0, 0.))[1],
    "reverse_ragged_axis": lambda i: tf.reverse(_rows(i), [0]),
    "reverse_both_axes": lambda i: tf.reverse(_rows(i), [-1, 0]),
    "reverse_later_axis": lambda i: tf.reverse(_rows(i), [1]),
    "stack_later_axis": lambda i: tf.stack([_positive(i), _positive(i) * 2.], axis=1),
    "stack_rows_last_axis": lambda i: tf.stack([_rows(i), -_rows(i)], axis=-1),
    "cumsum_float_reverse_exclusive": lambda i: tf.cumsum(_rows(i) * 0.3, exclusive=True,
                                                          reverse=True),
    # Rows of no values (fuzz seed 3100472: ScatterNd refused an empty block).
    "cumsum_float_rows_of_no_values": lambda i: tf.cumsum(
        tf.gather(tf.zeros([6, 0]), tf.range(LIMS[i])), axis=0),
    "cumprod_rows_of_no_values_reverse": lambda i: tf.math.cumprod(
        tf.gather(tf.ones([6, 2, 0]), tf.range(LIMS[i])), axis=0, reverse=True),
    "ragged_range_values": lambda i: tf.ragged.range(XI[i, :3], XI[i, 1:] + 2).flat_values,
    "ragged_range_scalar_bounds": lambda i: tf.ragged.range(LIMS[i]).flat_values * 2,
    "gather_nd_stacked_params": lambda i: tf.gather_nd(M[i], tf.where(M[i] > 0)),
    "gather_nd_invariant_params": lambda i: tf.gather_nd(M[0], tf.where(M[i] > 0)),
    "gather_nd_ragged_params": lambda i: tf.gather_nd(
        tf.range(LIMS[i]) * 2, tf.where(tf.range(LIMS[i]) % 2 == 0)),
    "matmul_rows": lambda i: tf.matmul(_rows(i), W32),
    "matmul_rows_transposed_weights": lambda i: tf.matmul(_rows(i), tf.transpose(W32),
                                                          transpose_b=True),
    "matmul_rows_per_iteration_weights": lambda i: tf.matmul(_rows(i), M[i], transpose_b=True),
    "batch_matmul_rows": lambda i: tf.raw_ops.BatchMatMulV2(x=_rows(i), y=W32),
    "bias_add": lambda i: tf.nn.bias_add(_rows(i), tf.constant([1., -2., 0.5])),
    "softmax_later_axis": lambda i: tf.nn.softmax(_rows(i)),
    "softmax_ragged_axis": lambda i: tf.nn.softmax(_positive(i)),
    "log_softmax_ragged_axis": lambda i: tf.nn.log_softmax(_positive(i) * 3.),
    "embedding_lookup": lambda i: tf.gather(EMBEDDINGS, XI[i][XI[i] < LIMS[i]]),
    "sort_ragged_axis": lambda i: tf.sort(_positive(i) - X[i, 0]),
    "sort_ints_descending": lambda i: tf.sort(tf.boolean_mask(XI[i], XI[i] > 1),
                                              direction="DESCENDING"),
    "argsort_ragged_axis_ties": lambda i: tf.argsort(tf.range(LIMS[i]) % 2),
    "top_k_ragged_axis": lambda i: tf.math.top_k(tf.range(LIMS[i] + 2) * (LIMS[i] % 2 - 1), 2),
    "top_k_per_iteration_k": lambda i: tf.math.top_k(_positive(i), tf.size(_positive(i)) // 2),
    "top_k_later_axis": lambda i: tf.math.top_k(_rows(i), 2),
    "prefix_of_padded_row": lambda i: X[i][:LIMS[i]],
    "prefix_of_padded_rows_sum": lambda i: tf.reduce_sum(M[i][:LIMS[i]], 0),
    "suffix_of_row_column": lambda i: M[i, STARTS[i]:, 1],
    "prefix_of_invariant": lambda i: TABLE[:LIMS[i], None],
    "reversed_prefix": lambda i: X[i][LIMS[i]::-1],
    "slice_op_per_iteration_size": lambda i: tf.slice(M[i], [1, 0], [LIMS[i] // 2, 2]),
    "einsum_rows": lambda i: tf.einsum("ld,dk->lk", _rows(i), W32),
    "einsum_rows_heads": lambda i: tf.einsum("ld,dhk->lhk", _rows(i), tf.reshape(M[:2], [3, 2, 4])),
    "einsum_one_operand": lambda i: tf.einsum("ld->l", _rows(i)),
    "argmax_ragged_axis": lambda i: tf.argmax(tf.concat([_positive(i) % 2., [-1.]], 0)),
    "argmin_ragged_axis_rows": lambda i: tf.argmin(tf.concat([_rows(i), M[i, :1]], 0), 0),
    "argmax_later_axis": lambda i: tf.argmax(_rows(i), -1, output_type=tf.int32),
    "one_hot": lambda i: tf.one_hot(tf.range(LIMS[i]) % 3, 4, on_value=2., off_value=-1.),
    "sparse_from_ragged": lambda i: tf.sparse.to_dense(
        tf.sparse.from_dense(tf.range(FOURS[i]) % 2), default_value=-1),
}


# Bodies whose size TensorFlow leaves unknown though the graph fixes it (bincount with
# minlength = maxlength): dense, as the loop stacks them (issue 24's provably equal sizes).
FIXED_SIZE_BODIES = {BODIES["bincount"]: [4]}


def _reference(body, n):
  """Per output: the stacked numpy value, or the list of the iterations' values where the
  traced body leaves the size unknown (the loop's tf.ragged.stack)."""
  outs = [tf.nest.flatten(body(tf.constant(i))) for i in range(n)]
  traced = tf.nest.flatten(tf.function(body).get_concrete_function(
      tf.TensorSpec([], tf.int32)).structured_outputs)
  if body in FIXED_SIZE_BODIES:
    traced = [tf.TensorSpec(FIXED_SIZE_BODIES[body], traced[0].dtype)]
  expected = []
  for k, spec in enumerate(traced):
    items = [o[k].numpy() for o in outs]
    if not spec.shape.is_fully_defined():
      expected.append(items)
    elif n:
      expected.append(np.stack(items))
    else:
      expected.append(np.zeros([0] + spec.shape.as_list(), spec.dtype.as_numpy_dtype))
  return expected


def _run(body, n, mode):
  pfor = lambda m: vectorize.pfor(body, m, fallback_to_while_loop=False)
  if mode == "eager":
    return pfor(n)
  if mode == "function":
    return tf.function(lambda: pfor(n))()
  return tf.function(pfor, input_signature=[tf.TensorSpec([], tf.int32)])(tf.constant(n))


def _assert_same(a, e):
  a = np.asarray(a)
  assert a.shape == e.shape and a.dtype == e.dtype, (a.shape, e.shape, a.dtype, e.dtype)
  if a.dtype.kind in "fc":
    np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-6)
  else:
    np.testing.assert_array_equal(a, e)


def assert_equal_to_loop(actual, expected):
  """Dense outputs equal the stacked loop; ragged ones (as tf.ragged.stack gives: ragged
  rank 1, int64 splits) equal each iteration's value."""
  actual = tf.nest.flatten(actual)
  assert len(actual) == len(expected)
  for a, e in zip(actual, expected):
    if isinstance(e, list):
      assert isinstance(a, tf.RaggedTensor), f"a dense result where the loop is ragged: {a}"
      assert a.ragged_rank == 1 and a.row_splits.dtype == tf.int64
      assert int(a.nrows()) == len(e)
      for j, item in enumerate(e):
        _assert_same(a[j], item)
    else:
      assert not isinstance(a, tf.RaggedTensor), "a ragged result where the loop is dense"
      _assert_same(a, e)


# Bodies also run inside the caller's tf.function. An eager pfor of a static n traces the
# same `pfor_in_graph` in a tf.function of its own, the body under autograph as in the
# caller's, and returns its ragged outputs out of it alike; the caller's function is run for
# a few bodies of each kind of output (ragged, dense, several, strings, a loop's).
FUNCTION_MODE_BODIES = {"range", "boolean_mask_rows", "where", "unique_with_counts",
                        "dynamic_partition", "string_split", "loop_over_rows"}


def _body_params():
  """Eager and function modes at n = N and 0; the run-time n at both through one trace."""
  return [pytest.param(name, n, mode, id=f"{name}-{n}-{mode}") for name in sorted(BODIES)
          for n in (N, 0) for mode in ("eager", "function", "dynamic")
          if (mode != "function" or name in FUNCTION_MODE_BODIES)
          and (mode != "dynamic" or n == N)]


@pytest.mark.parametrize("name,n,mode", _body_params())
def test_ragged_body_equals_loop(name, n, mode):
  body = BODIES[name]
  if mode != "dynamic":
    assert_equal_to_loop(_run(body, n, mode), _reference(body, n))
    return
  traced = tf.function(lambda m: vectorize.pfor(body, m, fallback_to_while_loop=False),
                       input_signature=[tf.TensorSpec([], tf.int32)])
  for m in (N, 0):
    assert_equal_to_loop(traced(tf.constant(m)), _reference(body, m))


@pytest.mark.parametrize("name", ["range_sum", "boolean_mask_sum", "unique_sum",
                                  "zeros_of_length"])
def test_ragged_under_xla_is_a_clear_error(name):
  fn = tf.function(lambda: vectorize.pfor(BODIES[name], N, fallback_to_while_loop=False),
                   jit_compile=True)
  with pytest.raises(vectorize.ConversionError, match="XLA needs static shapes"):
    fn()


def test_gather_out_of_row_is_an_error():
  body = lambda i: tf.gather(tf.range(LIMS[i] + 1), 2)   # iteration 1 has one element
  with pytest.raises(tf.errors.InvalidArgumentError, match="out of range"):
    vectorize.pfor(body, N, fallback_to_while_loop=False)


def test_range_with_wrong_direction_is_an_error():
  body = lambda i: tf.range(LIMS[i], 0, 1)
  with pytest.raises(tf.errors.InvalidArgumentError, match="start <= limit"):
    vectorize.pfor(body, N, fallback_to_while_loop=False)


def test_boolean_mask_has_no_loop_left():
  fn = tf.function(lambda: vectorize.pfor(BODIES["boolean_mask_sum"], N,
                                          fallback_to_while_loop=False))
  graph = fn.get_concrete_function().graph
  assert "While" not in {op.type for op in graph.get_operations()}


def _masked_loss(x, i):
  return (tf.reduce_sum(tf.boolean_mask(x, x > 0) ** 2) +
          tf.reduce_max(tf.gather(x, tf.range(LIMS[i] % 4 + 1))) +
          tf.reduce_mean(tf.gather(x, tf.where(x < 1)[:, 0])))


def _check_gradient_inside_the_body(loss_fn, mode):
  """pfor of each example's gradient of `loss_fn(X[i], i)` equals the loop's."""
  def body(i):
    xi = X[i]
    with tf.GradientTape() as tape:
      tape.watch(xi)
      loss = loss_fn(xi, i)
    return tf.convert_to_tensor(tape.gradient(loss, xi))

  expected = np.stack([body(tf.constant(i)).numpy() for i in range(N)])
  np.testing.assert_allclose(_run(body, N, mode), expected, rtol=1e-6)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_gradient_through_ragged_values_inside_the_body(mode):
  _check_gradient_inside_the_body(_masked_loss, mode)


def _sequence_loss(x):
  """Reverse, running product and stack of each example's positive entries (a ragged axis)."""
  kept = tf.boolean_mask(x, x > 0)
  pairs = tf.stack([tf.reverse(kept, [0]), tf.math.cumprod(kept * 0.5 + 0.5)], axis=1)
  weights = tf.cast(tf.range(tf.size(kept))[:, None] + 1, tf.float32) * tf.constant([1., -2.])
  return tf.reduce_sum(pairs * weights)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_gradient_through_reverse_cumprod_and_stack_inside_the_body(mode):
  _check_gradient_inside_the_body(lambda x, i: _sequence_loss(x), mode)


def test_gradient_of_pfor_through_reverse_cumprod_and_stack():
  with tf.GradientTape() as tape:
    tape.watch(X)
    vectorized = vectorize.pfor(lambda i: _sequence_loss(X[i]), N, fallback_to_while_loop=False)
  with tf.GradientTape() as tape2:
    tape2.watch(X)
    loop = tf.stack([_sequence_loss(X[i]) for i in range(N)])
  np.testing.assert_allclose(vectorized, loop, rtol=1e-6)
  np.testing.assert_allclose(tf.convert_to_tensor(tape.gradient(vectorized, X)),
                             tf.convert_to_tensor(tape2.gradient(loop, X)), rtol=1e-6)


def _rnn_loss(x, i):
  return tf.reduce_sum(tf.square(_loop_over_rows(x[:LIMS[i] % 4])))


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_gradient_of_a_loop_over_a_ragged_sequence_inside_the_body(mode):
  """The loop's gradient carries the sequence's gradient, a ragged variable it changes
  (each step adds the gradient of `rows[t]`, a StridedSliceGrad into a per-iteration
  shape)."""
  def body(i):
    xi = M[i]
    with tf.GradientTape() as tape:
      tape.watch([xi, W33])
      loss = _rnn_loss(xi, i)
    return [tf.convert_to_tensor(g) for g in tape.gradient(
        loss, [xi, W33], unconnected_gradients=tf.UnconnectedGradients.ZERO)]

  expected = [np.stack(g) for g in zip(*[[t.numpy() for t in body(tf.constant(i))]
                                         for i in range(N)])]
  for got, want in zip(_run(body, N, mode), expected):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_gradient_of_pfor_through_a_loop_over_a_ragged_sequence():
  def gradient(fn):
    with tf.GradientTape() as tape:
      tape.watch([M, W33])
      y = tf.reduce_sum(fn())
    return [tf.convert_to_tensor(g) for g in tape.gradient(y, [M, W33])]

  vectorized = gradient(lambda: vectorize.pfor(lambda i: _rnn_loss(M[i], i), N,
                                               fallback_to_while_loop=False))
  loop = gradient(lambda: tf.stack([_rnn_loss(M[i], i) for i in range(N)]))
  for a, b in zip(vectorized, loop):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_loop_over_a_ragged_sequence_under_xla_is_a_clear_error():
  with pytest.raises(vectorize.ConversionError, match="XLA"):
    tf.function(lambda: vectorize.pfor(lambda i: _loop_over_rows(_rows(i)), N,
                                       fallback_to_while_loop=False), jit_compile=True)()


def test_gradient_of_pfor_through_ragged_values():
  def gradient(fn):
    with tf.GradientTape() as tape:
      tape.watch(X)
      y = fn()
    return tf.convert_to_tensor(tape.gradient(y, X))

  vectorized = gradient(lambda: vectorize.pfor(lambda i: _masked_loss(X[i], i), N,
                                               fallback_to_while_loop=False))
  loop = gradient(lambda: tf.stack([_masked_loss(X[i], i) for i in range(N)]))
  np.testing.assert_allclose(vectorized, loop, rtol=1e-6)


def test_dynamic_partition_of_stacked_data_gives_ragged_outputs():
  body = lambda i: tf.dynamic_partition(X[i], tf.cast(X[i] > 0, tf.int32), 2)
  assert_equal_to_loop(vectorize.pfor(body, N, fallback_to_while_loop=False),
                       _reference(body, N))


def test_dynamic_partition_with_stacked_partitions_under_xla_checks_equal_counts():
  """Under XLA the outputs must be stacked: equal counts per iteration convert, others are a
  run-time error (XLA drops the Assert that names the op; the split of the outputs fails)."""
  balanced = tf.constant([[0, 1, 1, 0], [1, 0, 0, 1], [1, 1, 0, 0]])
  data = tf.reshape(tf.range(12.0), [3, 4])
  run = tf.function(lambda p: vectorize.pfor(
      lambda i: tf.dynamic_partition(data[i], p[i], 2), 3, fallback_to_while_loop=False),
                    jit_compile=True)
  expected = [tf.stack([tf.dynamic_partition(data[i], balanced[i], 2)[k] for i in range(3)])
              for k in range(2)]
  for actual, want in zip(run(balanced), expected):
    np.testing.assert_array_equal(actual.numpy(), want.numpy())
  with pytest.raises(tf.errors.InvalidArgumentError):
    run(tf.constant([[0, 1, 1, 0], [1, 1, 0, 1], [1, 1, 0, 0]]))


def test_dynamic_partition_of_unequal_constant_counts_under_xla_is_refused():
  """Session 22: with partitions XLA folds (captured constants), the dropped run-time check
  let iteration 0's counts stand for every iteration: the sums of the parts came out wrong
  ([202, 209, 216] for the loop's [202, 315, 110]). Now a ConversionError naming the op."""
  data = tf.reshape(tf.range(12.0), [3, 4])
  partitions = tf.constant([[0, 1, 0, 1], [0, 0, 0, 1], [1, 1, 0, 1]])
  body = lambda i: tf.reduce_sum(tf.dynamic_partition(data[i], partitions[i], 2)[0])
  with pytest.raises(vectorize.ConversionError, match="different numbers of elements"):
    tf.function(lambda: vectorize.pfor(body, 3, fallback_to_while_loop=False),
                jit_compile=True)()


def test_matmul_over_the_ragged_axis_is_refused_and_falls_back():
  body = lambda i: tf.matmul(_rows(i), _rows(i), transpose_a=True)
  with pytest.raises(vectorize.ConversionError, match="sums over the axis of per-iteration"):
    vectorize.pfor(body, N, fallback_to_while_loop=False)
  assert_equal_to_loop(vectorize.pfor(body, N, warn=False), _reference(body, N))


def test_top_k_beyond_an_iterations_size_is_an_error():
  body = lambda i: tf.math.top_k(tf.range(LIMS[i]), 2).values
  with pytest.raises(tf.errors.InvalidArgumentError, match="k larger than the vector"):
    vectorize.pfor(body, N, fallback_to_while_loop=False)


def _prefix_gradients(i):
  x = M[i]
  with tf.GradientTape() as tape:
    tape.watch(x)
    loss = (tf.reduce_sum(x[:LIMS[i]] ** 2) +
            tf.reduce_sum(tf.slice(x, [1, 0], [LIMS[i] // 2, 3]) * 3.))
  return tape.gradient(loss, x)


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])
@pytest.mark.parametrize("n", [N, 0])
def test_gradient_of_a_prefix_of_per_iteration_length_inside_the_body(n, mode):
  assert_equal_to_loop(_run(_prefix_gradients, n, mode), _reference(_prefix_gradients, n))


def test_gradient_of_pfor_through_a_prefix_of_per_iteration_length():
  def loss(fn):
    with tf.GradientTape() as tape:
      tape.watch(M)
      y = tf.reduce_sum(fn(lambda i: tf.reduce_sum(M[i][:LIMS[i]] ** 2)))
    return tf.convert_to_tensor(tape.gradient(y, M))
  actual = loss(lambda body: vectorize.pfor(body, N, fallback_to_while_loop=False))
  expected = loss(lambda body: tf.stack([body(tf.constant(i)) for i in range(N)]))
  np.testing.assert_allclose(actual, expected, rtol=1e-6)


def test_prefix_of_per_iteration_length_under_xla_is_a_clear_error():
  fn = tf.function(lambda: vectorize.pfor(BODIES["prefix_of_padded_rows_sum"], N,
                                          fallback_to_while_loop=False), jit_compile=True)
  with pytest.raises(vectorize.ConversionError, match="XLA needs static shapes"):
    fn()


def test_argmax_over_an_empty_axis_is_an_error():
  with pytest.raises(tf.errors.InvalidArgumentError, match="ArgMax over an empty axis"):
    vectorize.pfor(lambda i: tf.argmax(_positive(i)), N, fallback_to_while_loop=False)


def test_broadcast_in_some_iterations_only_is_an_error_in_the_gradient():
  """The gradient's BroadcastGradientArgs runs once for all iterations: an operand of
  per-iteration length that is 1 (broadcast) in one iteration only is an error (the forward
  product's check catches it first), not a sum over the wrong axes."""
  def body(i):
    a = tf.cast(tf.range(LIMS[i]), tf.float32)
    b = tf.cast(tf.range(tf.where(LIMS[i] == 2, 1, LIMS[i])), tf.float32) + 1.
    with tf.GradientTape() as tape:
      tape.watch(b)
      y = tf.reduce_sum(a * b)
    return tape.gradient(y, b)

  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="different sizes in the same iteration|some iterations only"):
    vectorize.pfor(body, N, fallback_to_while_loop=False)


def test_broadcast_gradient_of_equal_per_iteration_lengths():
  def body(i):
    a = tf.cast(tf.range(LIMS[i]), tf.float32)[:, None]
    b = tf.cast(tf.range(LIMS[i]), tf.float32)[:, None] * tf.constant([[1., 2.]])
    with tf.GradientTape() as tape:
      tape.watch([a, b])
      y = tf.reduce_sum(a * b * a)
    return tape.gradient(y, [a, b])
  for n in (N, 0):
    assert_equal_to_loop(_run(body, n, "function"), _reference(body, n))


_PAIRS = tf.constant([[2., 1.], [4., 3.], [0., 9.], [5., -1.]])


def _sorted_rows(i):
  """Each row of a value of per-iteration length sorted along its static axis: tf.sort reads
  k = tf.shape(x)[-1], a size the traced graph knows (fuzz seed 3900068: it was read per
  iteration and refused as a per-iteration k)."""
  x = _PAIRS[:i + 1]
  return tf.sort(x, axis=-1), tf.argsort(-x, axis=-1), tf.shape(x)[-1] * 3


@pytest.mark.parametrize("n,mode", [(4, "eager"), (0, "dynamic"), (1, "function")])
def test_a_static_size_read_from_a_ragged_value_is_a_constant(n, mode):
  assert_equal_to_loop(_run(_sorted_rows, n, mode), _reference(_sorted_rows, n))


def test_fill_of_per_iteration_sizes_past_the_first_axis_is_refused():
  with pytest.raises(vectorize.ConversionError, match="past the first axis"):
    vectorize.pfor(lambda i: tf.zeros(tf.stack([2, LIMS[i]])), N, fallback_to_while_loop=False)


def test_operands_ragged_in_different_axes_fall_back():
  """Code-blind round 15: `tf.signal.frame` with a per-iteration frame_step crashed while
  converting ('Dimensions must be equal, but are 2 and 4', comparing one operand's sizes
  in two axes with another's in one): now refused for that op, which falls back."""
  x = tf.reshape(tf.range(24, dtype=tf.float32), [4, 6])

  def body(i):
    return tf.signal.frame(x[i], frame_length=2, frame_step=i + 1)

  got = vectorize.pfor(body, 4, warn=False)
  assert got.to_list() == tf.ragged.stack([body(tf.constant(i)) for i in range(4)]).to_list()
