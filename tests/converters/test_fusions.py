"""The rewrites of converters/fusions.py (sums of matmuls, sums of slice gradients) preserve
results and fuse."""

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


@pytest.mark.unchecked   # counts the ops pfor emits (or the prints): the check adds its own
def test_sum_of_matmuls_is_one_batch_matmul():
  body = _sum_of_products(True, False)
  graph = tf.function(lambda: vectorize.pfor(body, 4, fallback_to_while_loop=False)
                      ).get_concrete_function().graph
  used = [op for op in testing.all_ops(graph) if op.type.startswith("BatchMatMul")
          and any(c.type != "NoOp" for t in op.outputs for c in t.consumers())]
  assert len(used) == 1


def _sum_of_outer_products(i):
  """A per-example weight gradient's shape: each term contracts one row."""
  a, b = tf.gather(A, i)[:, :1], tf.gather(B, i)[:, :1]            # [terms, 1, 5]
  return tf.math.add_n([tf.matmul(a[t], b[t], transpose_a=True) for t in range(3)])


@pytest.mark.parametrize("mode", ["function", "dynamic", "xla"])
def test_sum_of_outer_products_equals_the_loop(mode):
  testing.check_against_loop(_sum_of_outer_products, 4, mode=mode)


@pytest.mark.unchecked   # counts the ops pfor emits (or the prints): the check adds its own
@pytest.mark.parametrize("jit_compile,products", [(False, 1), (True, 3)])
def test_sum_of_outer_products_is_one_batch_matmul_unless_compiled(jit_compile, products):
  """Under XLA the products stay apart: XLA fuses their sum into one elementwise pass."""
  graph = tf.function(lambda: vectorize.pfor(_sum_of_outer_products, 4,
                                             fallback_to_while_loop=False),
                      jit_compile=jit_compile).get_concrete_function().graph
  used = [op for op in testing.all_ops(graph) if op.type.startswith("BatchMatMul")
          and any(c.type != "NoOp" for t in op.outputs for c in t.consumers())]
  assert len(used) == products


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


X = tf.constant(RNG.standard_normal([4, 3, 5, 2]), tf.float32)   # [n, a, steps, b]


def _slice_gradient_body(take, steps, weights_stacked):
  """The gradient w.r.t. x of a sum over `steps` of `take(x, t)` weighted per step."""
  def body(i):
    x = tf.gather(X, i)
    scale = tf.cast(i + 1, tf.float32) if weights_stacked else 1.0
    with tf.GradientTape() as tape:
      tape.watch(x)
      loss = sum(tf.reduce_sum(tf.sin(take(x, t)) * (t + 1.0) * scale) for t in steps)
    return tape.gradient(loss, x)
  return body


@pytest.mark.parametrize("take,size", [(lambda x, t: x[:, t], 5), (lambda x, t: x[t], 3),
                                       (lambda x, t: x[:, :, t], 2)],
                         ids=["middle-axis", "first-axis", "last-axis"])
@pytest.mark.parametrize("weights_stacked", [True, False])
@pytest.mark.parametrize("mode", ["function", "dynamic", "xla"])
def test_sum_of_slice_gradients_equals_the_loop(take, size, weights_stacked, mode):
  body = _slice_gradient_body(take, range(size), weights_stacked)
  for n in (4, 0):
    testing.check_against_loop(body, n, mode=mode)


@pytest.mark.parametrize("steps", [[0, 2, 4], [0, 1, 2, 3, 4, 4], [4, -2, 2, 1, 0]],
                         ids=["gaps", "repeated", "negative-and-shuffled"])
def test_sum_of_slice_gradients_of_other_index_sets_equals_the_loop(steps):
  testing.check_against_loop(_slice_gradient_body(lambda x, t: x[:, t], steps, True), 4)


def _ops_of(body, n):
  graph = tf.function(lambda: vectorize.pfor(body, n, fallback_to_while_loop=False)
                      ).get_concrete_function().graph
  return [op.type for op in testing.all_ops(graph)
          if any(c.type != "NoOp" for t in op.outputs for c in t.consumers())
          or op.type == "Pack"]


@pytest.mark.unchecked   # counts the ops pfor emits (or the prints): the check adds its own
def test_sum_of_slice_gradients_is_one_stack():
  every_step = _ops_of(_slice_gradient_body(lambda x, t: x[:, t], range(5), True), 4)
  assert "StridedSliceGrad" not in every_step
  some_steps = _ops_of(_slice_gradient_body(lambda x, t: x[:, t], [0, 2, 4], True), 4)
  assert "StridedSliceGrad" in some_steps


C = tf.constant(RNG.standard_normal([4, 2, 3]), tf.float32)       # [n, rows, cols]
F1 = tf.constant(RNG.standard_normal([3]), tf.float32)
F2 = tf.constant(RNG.standard_normal([2, 1]), tf.float32)
F3 = tf.constant(RNG.standard_normal([]), tf.float32)


def _product_chain(shared):
  def body(i):
    x = tf.gather(C, i) * F1
    y = x * F2
    out = F3 * y                                   # x * F1 * F2 * F3, invariant on either side
    return (out, x + 1.0) if shared else out       # x used twice: not folded away
  return body


@pytest.mark.parametrize("shared", [False, True], ids=["chain", "shared-link"])
@pytest.mark.parametrize("mode", ["function", "dynamic", "xla"])
def test_product_chain_equals_the_loop(shared, mode):
  for n in (4, 0):
    testing.check_against_loop(_product_chain(shared), n, mode=mode)


def test_product_chain_of_integers_equals_the_loop():
  k = tf.constant([[1, 2, 3], [4, 5, 6], [7, 8, 9], [1, 0, 2]], tf.int32)
  testing.check_against_loop(lambda i: tf.gather(k, i) * 3 * tf.constant([2, 1, 5]), 4)


def _live_ops(body, n):
  """The ops the vectorized graph's outputs depend on (rewritten-away ones are dead)."""
  graph = tf.function(lambda: vectorize.pfor(body, n, fallback_to_while_loop=False)
                      ).get_concrete_function().graph
  live, pending = set(), [t.op for t in graph.outputs]
  while pending:
    op = pending.pop()
    if op not in live:
      live.add(op)
      pending += [t.op for t in op.inputs]
  return live


def _live_types(body, n):
  return [op.type for op in _live_ops(body, n)]


def _live_calls(body, n=4):
  """The names of the functions that the live ops call."""
  return [op.get_attr("f").name for op in _live_ops(body, n)
          if op.type in ("PartitionedCall", "StatefulPartitionedCall")]


def test_product_chain_scales_the_stacked_value_once():
  stacked_muls = [t for t in _live_types(_product_chain(False), 4) if t == "Mul"]
  assert len(stacked_muls) == 3                    # F1 * F2, then * F3, then x * that


W = tf.constant(RNG.standard_normal([5, 7]), tf.float32)
R = tf.constant(RNG.standard_normal([4, 2, 5]), tf.float32)       # [n, rows, inner]


def _column_slices(transpose_b, rows):
  def body(i):
    w = tf.transpose(W) if transpose_b else W
    p = tf.matmul(tf.gather(R, i), w, transpose_b=transpose_b)        # [2, 7]
    return tf.slice(p, [0, 0], [rows, 3]), tf.slice(p, [0, 3], [-1, -1])
  return body


@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("rows", [2, 1], ids=["whole-rows", "some-rows"])
@pytest.mark.parametrize("mode", ["function", "dynamic", "xla"])
def test_columns_of_product_equal_the_loop(transpose_b, rows, mode):
  for n in (4, 0):
    testing.check_against_loop(_column_slices(transpose_b, rows), n, mode=mode)


def test_columns_of_product_are_two_products():
  types = _live_types(_column_slices(True, 2), 4)
  assert types.count("MatMul") + types.count("BatchMatMulV2") == 2
  assert "Slice" in types                          # of the invariant weight, not the product


def _concat_gradient(i):
  """d/d[x, h] of a cell's `concat([x, h]) @ w`: the gradient slices one product by the
  ConcatOffsets of x and h (static, so the weight's columns are sliced by constants)."""
  x, h = tf.gather(R, i)[:1, :2], tf.gather(R, i)[1:, 2:]
  with tf.GradientTape() as tape:
    tape.watch([x, h])
    y = tf.tanh(tf.matmul(tf.concat([x, h], axis=1), W))
  return tape.gradient(y, [x, h])


@pytest.mark.parametrize("mode", ["function", "dynamic", "xla"])
def test_columns_of_a_concat_gradient_equal_the_loop(mode):
  for n in (4, 0):
    testing.check_against_loop(_concat_gradient, n, mode=mode)
  # The forward product, and the backward one as two: the columns of x and of h.
  live = _live_ops(_concat_gradient, 4)
  assert [op.type for op in live].count("MatMul") == 3
  slices = [op for op in live if op.type == "Slice"]   # of the weight: at constant offsets
  assert len(slices) == 2 and all(op.inputs[1].op.type == "Const" for op in slices)


def test_columns_at_run_time_offsets_equal_the_loop():
  first = tf.Variable(2)

  def body(i):
    p = tf.matmul(tf.gather(R, i), W)
    return tf.slice(p, tf.stack([0, first.read_value()]), [-1, 3])

  testing.check_against_loop(body, 4)


IMAGES = tf.constant(RNG.uniform(0, 1, [4, 2, 6, 5, 3]), tf.float32)   # [n, b, h, w, c]
FLIPS = tf.constant([[True, False], [False, False], [True, True], [False, True]])
ANGLES = tf.constant(RNG.uniform(-0.8, 0.8, [4]), tf.float32)


SHIFTS = tf.constant([[2.0, -1.0], [-7.0, 9.0], [0.5, 0.25], [30.0, -3.5]])


def _flipped_then_rotated(flip, blocked=False, fill_mode="REFLECT", interpolation="BILINEAR"):
  """Per iteration: the images flipped by `flip(images, i)`, then rotated and shifted (some
  far outside) by the projective transform (as Keras RandomFlip then RandomRotation);
  `blocked`: with an op between that no rewrite sees through, so the flips run as they are
  written."""
  def body(i):
    images = flip(tf.gather(IMAGES, i), i)
    if blocked:
      images = images + 0.0
    c, s = tf.cos(tf.gather(ANGLES, i)), tf.sin(tf.gather(ANGLES, i))
    shift = tf.gather(SHIFTS, i)
    transform = tf.stack([c, -s, shift[0], s, c, shift[1], 0.0, 0.0])[None]
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=images, transforms=tf.tile(transform, [2, 1]), output_shape=[6, 5],
        fill_value=0.5, interpolation=interpolation, fill_mode=fill_mode)
  return body


def _where_flip(x, axis, flag, reversed_first=True):
  flag = tf.reshape(flag, [1, 1, 1, 1])
  return (tf.where(flag, tf.reverse(x, [axis]), x) if reversed_first else
          tf.where(flag, x, tf.reverse(x, [axis])))


FLIP_BODIES = {
    "rows-then-columns": lambda x, i: _where_flip(
        _where_flip(x, 1, FLIPS[i, 0]), 2, FLIPS[i, 1]),
    "columns-of-a-squeezed-image": lambda x, i: tf.expand_dims(tf.squeeze(_where_flip(
        tf.expand_dims(x[0], 0), -2, FLIPS[i, 0]), 0), 0) * tf.ones([2, 1, 1, 1]),
    "reverse-when-false": lambda x, i: _where_flip(x, 2, FLIPS[i, 1], reversed_first=False),
    "same-axis-twice": lambda x, i: _where_flip(_where_flip(x, -2, FLIPS[i, 0]), 2,
                                                FLIPS[i, 1]),
    "invariant-flag": lambda x, i: _where_flip(x, 1, tf.constant(True)),
}


@pytest.mark.parametrize("name", sorted(FLIP_BODIES))
@pytest.mark.parametrize("mode", ["function", "dynamic", "eager"])
def test_flips_read_by_the_transform_equal_the_loop_and_the_flips_written_out(name, mode):
  """The transform reads the unflipped images at mirrored pixels: the same values as
  flipping first (bit for bit), and the kernel's loop within float rounding."""
  body = _flipped_then_rotated(FLIP_BODIES[name])
  for n in (4, 0):
    folded = testing.run_pfor(body, n, mode=mode)
    np.testing.assert_array_equal(
        folded, testing.run_pfor(_flipped_then_rotated(FLIP_BODIES[name], True), n, mode))
    testing.assert_allclose(folded, testing.sequential(body, n, testing.output_spec(body)),
                            1e-6)


@pytest.mark.parametrize("fill_mode", ["REFLECT", "NEAREST", "CONSTANT"])
@pytest.mark.parametrize("interpolation", ["BILINEAR", "NEAREST"])
def test_flips_read_by_the_transform_in_every_mode_equal_the_flips_written_out(
    fill_mode, interpolation):
  flip = FLIP_BODIES["rows-then-columns"]
  body = _flipped_then_rotated(flip, False, fill_mode, interpolation)
  folded = testing.run_pfor(body, 4)
  np.testing.assert_array_equal(
      folded, testing.run_pfor(_flipped_then_rotated(flip, True, fill_mode, interpolation), 4))
  testing.assert_allclose(folded, testing.sequential(body, 4), 1e-6)


def test_flips_read_by_the_transform_run_no_reverse():
  flip = FLIP_BODIES["rows-then-columns"]
  assert not [f for f in _live_calls(_flipped_then_rotated(flip)) if "flip" in f]
  written_out = _live_calls(_flipped_then_rotated(flip, blocked=True))
  assert len([f for f in written_out if "__flip_" in f]) == 2


def _image_gradients(body):
  """The gradients for IMAGES of a weighted sum of pfor(body, 4) and of the loop's."""
  weights = tf.constant(RNG.standard_normal([4, 2, 6, 5, 3]), tf.float32)
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(IMAGES)
    actual = tf.reduce_sum(weights * vectorize.pfor(body, 4, fallback_to_while_loop=False))
    expected = tf.reduce_sum(weights * tf.stack([body(i) for i in range(4)]))
  return [tf.convert_to_tensor(tape.gradient(y, IMAGES)) for y in (actual, expected)]


def test_gradient_through_flips_read_by_the_transform_equals_the_loop():
  np.testing.assert_allclose(
      *_image_gradients(_flipped_then_rotated(FLIP_BODIES["rows-then-columns"])), rtol=1e-5,
      atol=1e-5)


FACTORS = tf.constant(RNG.uniform(0.5, 1.5, [4]), tf.float32)


def _normalized(op, factor_first=False, invariant_factor=False):
  """(x - per-image channel mean) * factor, as Keras RandomContrast computes it."""
  def body(i):
    x = tf.gather(IMAGES, i)
    mean = tf.reduce_mean(x, [1, 2], keepdims=True)                       # [b, 1, 1, c]
    factor = tf.constant(0.7) if invariant_factor else tf.gather(FACTORS, i)
    centred = op(x, mean)
    return factor * centred if factor_first else centred * factor
  return body


NORMALIZED = {"sub": _normalized(tf.subtract), "add": _normalized(tf.add),
              "factor-first": _normalized(tf.subtract, factor_first=True),
              "invariant-factor": _normalized(tf.subtract, invariant_factor=True),
              "mean-first": _normalized(lambda x, m: m - x)}


@pytest.mark.parametrize("name", sorted(NORMALIZED))
@pytest.mark.parametrize("mode", ["function", "dynamic", "eager", "xla"])
def test_scaled_difference_with_statistics_equals_the_loop_bit_for_bit(name, mode):
  body = NORMALIZED[name]
  for n in (4, 0):
    expected = testing.sequential(body, n, testing.output_spec(body))
    actual = testing.run_pfor(body, n, mode=mode)
    if mode == "xla":
      testing.assert_allclose(actual, expected, 1e-6)
    else:
      np.testing.assert_array_equal(actual, expected)


def test_scaled_difference_with_statistics_is_one_compiled_call():
  assert "Sub" not in _live_types(NORMALIZED["sub"], 4)
  assert "AddV2" not in _live_types(NORMALIZED["add"], 4)
  # a stacked value against an invariant one of the same per-iteration shape: not rewritten
  same_shape = lambda i: (tf.gather(IMAGES, i) - IMAGES[0]) * tf.gather(FACTORS, i)
  assert "Sub" in _live_types(same_shape, 4)


def test_gradient_through_a_scaled_difference_equals_the_loop():
  body = NORMALIZED["sub"]
  with tf.GradientTape(persistent=True) as tape:
    tape.watch([IMAGES, FACTORS])
    actual = tf.reduce_sum(tf.sin(vectorize.pfor(body, 4, fallback_to_while_loop=False)))
    expected = tf.reduce_sum(tf.sin(tf.stack([body(i) for i in range(4)])))
  for source in (IMAGES, FACTORS):
    np.testing.assert_allclose(*[tf.convert_to_tensor(tape.gradient(y, source))
                                 for y in (actual, expected)], rtol=1e-5, atol=1e-6)


def _flipped(axis, reversed_first=True, invariant_flag=False, stacked_image=True):
  """Per iteration: an image or its reverse along `axis`, as Keras RandomFlip picks."""
  def body(i):
    x = tf.gather(IMAGES, i) if stacked_image else IMAGES[0]
    flag = tf.constant(True) if invariant_flag else FLIPS[i, 0]
    return _where_flip(x, axis, flag, reversed_first)
  return body


FLIPPED = {"columns": _flipped(2), "rows": _flipped(-3), "channels": _flipped(3),
           "images": _flipped(0), "reverse-when-false": _flipped(2, reversed_first=False),
           "invariant-flag": _flipped(2, invariant_flag=True),
           "invariant-image": _flipped(1, stacked_image=False)}


@pytest.mark.parametrize("name", sorted(FLIPPED))
@pytest.mark.parametrize("mode", ["function", "dynamic", "eager", "xla"])
def test_conditional_flip_equals_the_loop(name, mode):
  body = FLIPPED[name]
  for n in (4, 0):
    np.testing.assert_array_equal(testing.run_pfor(body, n, mode=mode),
                                  testing.sequential(body, n, testing.output_spec(body)))


def test_conditional_flip_is_one_compiled_pass():
  assert "ReverseV2" not in _live_types(FLIPPED["columns"], 4)
  assert len([f for f in _live_calls(FLIPPED["columns"]) if "__flip_" in f]) == 1
  two_flags = lambda i: tf.where(FLIPS[i][:, None, None, None], tf.reverse(IMAGES[i], [2]),
                                 IMAGES[i])                         # one flag per image
  assert "ReverseV2" in _live_types(two_flags, 4)


def test_gradient_through_a_conditional_flip_equals_the_loop():
  np.testing.assert_array_equal(*_image_gradients(FLIPPED["columns"]))
