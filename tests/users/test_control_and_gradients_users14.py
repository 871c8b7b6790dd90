"""Round 14: per-example bodies with control flow, state and gradients, as researchers write
them, each checked against the plain per-example loop (written from the README alone)."""
import numpy as np
import pytest
import tensorflow as tf

import vectorize

MODES = ["eager", "runtime_n"]


def run_pfor(body, n, mode="eager"):
  if mode == "eager":
    return vectorize.pfor(body, n)
  if mode == "function":
    return tf.function(lambda: vectorize.pfor(body, n))()
  if mode == "xla":
    return tf.function(lambda: vectorize.pfor(body, n), jit_compile=True)()
  if mode == "runtime_n":
    return tf.function(lambda m: vectorize.pfor(body, m))(tf.constant(n))
  raise ValueError(mode)


def _stack(xs):
  xs = list(xs)
  if any(isinstance(x, tf.RaggedTensor) for x in xs):
    return tf.ragged.stack(xs)
  shapes = {tuple(x.shape.as_list()) for x in xs}
  return tf.stack(xs) if len(shapes) == 1 else tf.ragged.stack(xs)


def loop(body, n):
  outs = [body(tf.constant(i)) for i in range(n)]
  return tf.nest.map_structure(lambda *xs: _stack(xs), *outs)


def _np(t):
  if isinstance(t, tf.RaggedTensor):
    return t.to_list()
  return np.asarray(t)


def check(actual, expected, rtol=1e-5, atol=1e-6):
  tf.nest.assert_same_structure(expected, actual)
  for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
    if e is None:
      assert a is None
      continue
    assert a.dtype == e.dtype, (a.dtype, e.dtype)
    if isinstance(e, tf.RaggedTensor) or isinstance(a, tf.RaggedTensor):
      assert isinstance(a, tf.RaggedTensor), f"expected ragged, got {a!r}"
      al, el = a.to_list(), e.to_list()
      assert len(al) == len(el)
      for ra, re in zip(al, el):
        ra, re = np.asarray(ra), np.asarray(re)
        assert ra.shape == re.shape, (ra.shape, re.shape)
        if re.dtype.kind == "f":
          np.testing.assert_allclose(ra, re, rtol=rtol, atol=atol)
        else:
          np.testing.assert_array_equal(ra, re)
      continue
    a, e = np.asarray(a), np.asarray(e)
    assert a.shape == e.shape, (a.shape, e.shape)
    if e.dtype.kind in "fc":
      np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)
    else:
      np.testing.assert_array_equal(a, e)


RNG = np.random.RandomState(14)
X = tf.constant(RNG.randn(5, 4).astype(np.float32))
LENS = tf.constant([3, 0, 4, 1, 2])
SEQ = tf.constant(RNG.randn(5, 6).astype(np.float32))
INTS = tf.constant([[3, 1, 3, 2], [5, 5, 5, 5], [0, 9, 0, 7], [4, 2, 8, 6], [1, 1, 2, 2]])


# ---------------------------------------------------------------- 1. conditionals

def _cond_tuple_dict(i):
  xi = X[i]
  return tf.cond(
      tf.reduce_sum(xi) > 0,
      lambda: (xi * 2.0, {"k": tf.argmax(xi, output_type=tf.int32), "ok": tf.constant(True)}),
      lambda: (-xi, {"k": tf.argmin(xi, output_type=tf.int32), "ok": tf.constant(False)}))


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_cond_tuple_and_dict_outputs_mixed_branches(n):
  check(run_pfor(_cond_tuple_dict, n), loop(_cond_tuple_dict, n))


@pytest.mark.parametrize("mode", MODES)
def test_python_if_branches_of_different_static_shapes(mode):
  def body(i):
    xi = X[i]
    if tf.reduce_max(xi) > 0.5:          # autograph: a tf.cond
      y = xi * 3.0
    else:
      y = tf.concat([xi[:2], tf.zeros([2])], 0)   # [2] + [2]: static [4] too, other path
    return y

  check(run_pfor(body, 5, mode), loop(body, 5))


def test_python_if_static_shapes_unknown_in_branch_agree_at_run_time():
  def body(i):
    xi = X[i]
    if xi[0] > 0:
      y = tf.reshape(xi, [-1])
    else:
      y = tf.boolean_mask(xi, tf.ones([4], tf.bool))   # static shape [None], 4 at run time
    return tf.reduce_sum(y * tf.range(4, dtype=tf.float32)) + tf.cast(tf.size(y), tf.float32)

  check(run_pfor(body, 5), loop(body, 5))


@pytest.mark.parametrize("n", [1, 2, 5])
def test_switch_case_some_branch_taken_by_none(n):
  # index i - 1: iteration 0 has -1, which runs the last branch (the default)
  def body(i):
    xi = X[i]
    return tf.switch_case(i - 1, [lambda: xi + 1.0, lambda: xi * xi, lambda: tf.reverse(xi, [0]),
                                  lambda: tf.fill([4], tf.reduce_sum(xi))])

  check(run_pfor(body, n), loop(body, n))


def test_switch_case_out_of_range_index_goes_to_default():
  idx = tf.constant([7, 0, -3, 1, 2])

  def body(i):
    return tf.switch_case(idx[i], {0: lambda: tf.constant(10), 1: lambda: tf.constant(11)},
                          default=lambda: tf.constant(99))

  check(run_pfor(body, 5), loop(body, 5))


@pytest.mark.parametrize("n", [5])
def test_nested_conds_with_inner_on_index_parity(n):
  def body(i):
    xi = X[i]

    def pos():
      return tf.cond(i % 2 == 0, lambda: tf.reduce_sum(xi), lambda: tf.reduce_prod(xi))

    def neg():
      return tf.cond(xi[0] > xi[1], lambda: xi[0] - xi[1],
                     lambda: tf.cond(xi[2] > 0, lambda: xi[2], lambda: tf.constant(-1.0)))

    return tf.cond(tf.reduce_mean(xi) > 0, pos, neg)

  check(run_pfor(body, n), loop(body, n))


def test_cond_all_examples_same_branch_untaken_branch_would_assert():
  pos = tf.abs(X) + 0.1

  def body(i):
    xi = pos[i]

    def bad():
      with tf.control_dependencies([tf.debugging.assert_negative(xi, message="untaken")]):
        return tf.identity(xi)

    return tf.cond(tf.reduce_min(xi) > 0, lambda: tf.math.log(xi), bad)

  check(run_pfor(body, 5), loop(body, 5))


def test_cond_mixed_dtypes_outputs():
  def body(i):
    xi = X[i]
    return tf.cond(xi[3] > 0,
                   lambda: (tf.cast(i, tf.int64) * 2, xi[:2], tf.constant(b"pos")),
                   lambda: (tf.constant(-1, tf.int64), xi[2:], tf.constant(b"neg")))

  check(run_pfor(body, 5), loop(body, 5))


def test_cond_predicate_from_variable_and_branch_reads_variable():
  v = tf.Variable([0.5, -1.0, 2.0, 0.0])

  def body(i):
    s = tf.reduce_sum(X[i] * v)
    return tf.cond(s > 0, lambda: s * v, lambda: X[i] - v)

  check(run_pfor(body, 5), loop(body, 5))


# ---------------------------------------------------------------- 2. while loops

@pytest.mark.parametrize("mode", MODES)
def test_collatz_with_cond_inside_while_several_dtypes(mode):
  starts = tf.constant([6, 1, 7, 27, 2])

  def body(i):
    def cond(v, steps, total, odd_seen):
      return v != 1

    def step(v, steps, total, odd_seen):
      odd = v % 2 == 1
      v = tf.cond(odd, lambda: 3 * v + 1, lambda: v // 2)
      return v, steps + 1, total + tf.cast(v, tf.float64), tf.logical_or(odd_seen, odd)

    return tf.while_loop(cond, step, (starts[i], tf.constant(0, tf.int64),
                                      tf.constant(0.0, tf.float64), tf.constant(False)))

  check(run_pfor(body, 5, mode), loop(body, 5))


def test_while_early_exit_flag_and_captured_sequence():
  thresh = tf.constant([0.5, -10.0, 1.0, 0.0, 100.0])

  def body(i):
    def cond(t, acc, done):
      return tf.logical_and(t < 6, tf.logical_not(done))

    def step(t, acc, done):
      acc = acc + SEQ[i, t]
      return t + 1, acc, acc > thresh[i]

    return tf.while_loop(cond, step, (0, 0.0, False))

  check(run_pfor(body, 5), loop(body, 5))


def test_autograph_for_with_break_per_example():
  def body(i):
    acc = tf.constant(0.0)
    count = tf.constant(0)
    for t in tf.range(LENS[i] + 1):
      if SEQ[i, t] < -0.5:
        break
      acc += SEQ[i, t] * tf.cast(t + 1, tf.float32)
      count += 1
    return acc, count

  check(run_pfor(body, 5), loop(tf.function(body), 5))


def test_tensorarray_fixed_size_per_example_trips():
  def body(i):
    ta = tf.TensorArray(tf.float32, size=6, element_shape=[2], clear_after_read=False)

    def step(t, ta):
      return t + 1, ta.write(t, tf.stack([SEQ[i, t], tf.cast(t, tf.float32)]))

    _, ta = tf.while_loop(lambda t, ta: t < LENS[i] + 1, step, (0, ta))
    return ta.stack()

  check(run_pfor(body, 5), loop(tf.function(body), 5))


def test_tensorarray_dynamic_size_per_example_trips_is_ragged():
  def body(i):
    ta = tf.TensorArray(tf.int32, size=0, dynamic_size=True)

    def step(t, ta):
      return t + 1, ta.write(t, t * t + i)

    _, ta = tf.while_loop(lambda t, ta: t < LENS[i], step, (0, ta))
    return ta.stack()

  check(run_pfor(body, 5), loop(tf.function(body), 5))


def test_nested_while_inner_trips_depend_on_outer_and_example():
  def body(i):
    def outer(a, acc):
      def inner(b, s):
        return b + 1, s + tf.cast(a * b, tf.float32) * X[i, b % 4]
      _, s = tf.while_loop(lambda b, s: b < a + LENS[i], inner, (0, 0.0))
      return a + 1, acc + s
    return tf.while_loop(lambda a, acc: a < LENS[i], outer, (0, 0.0))[1]

  check(run_pfor(body, 5), loop(body, 5))


def test_while_runtime_n_zero():
  def body(i):
    return tf.while_loop(lambda t, s: t < LENS[i], lambda t, s: (t + 1, s * 2), (0, 1))[1]

  out = run_pfor(body, 0, "runtime_n")
  assert out.shape == (0,) and out.dtype == tf.int32
  out = run_pfor(body, 0, "eager")
  assert out.shape == (0,) and out.dtype == tf.int32


# ---------------------------------------------------------------- 3. gradients

def _tiny_model():
  tf.keras.utils.set_random_seed(3)
  model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3, activation="tanh"),
                               tf.keras.layers.Dense(2)])
  return model


def test_keras_per_example_gradient_in_body_with_label_dependent_branch():
  model = _tiny_model()
  labels = tf.constant([0, 1, 1, 0, 1])

  def body(i):
    with tf.GradientTape() as tape:
      logits = model(X[i][None])[0]
      loss = tf.cond(labels[i] > 0, lambda: tf.reduce_sum(tf.square(logits - 1.0)),
                     lambda: tf.reduce_logsumexp(logits) - logits[0])
    return tape.gradient(loss, model.trainable_variables)

  check(run_pfor(body, 5), loop(body, 5), rtol=1e-5, atol=1e-6)


def test_raw_variable_gradient_through_cond_unused_branch_variable_is_zero():
  w1 = tf.Variable(tf.constant([[1.0, -1.0], [0.5, 0.2], [0.3, 0.3], [-0.2, 0.1]]))
  w2 = tf.Variable(tf.constant([0.1, 0.2, 0.3, 0.4]))

  def body(i):
    with tf.GradientTape() as tape:
      y = tf.cond(X[i, 0] > 0, lambda: tf.reduce_sum(tf.tanh(tf.linalg.matvec(w1, X[i], transpose_a=True))),
                  lambda: tf.reduce_sum(X[i] * w2) ** 2)
    return tape.gradient(y, [w1, w2], unconnected_gradients=tf.UnconnectedGradients.ZERO)

  check(run_pfor(body, 5), loop(tf.function(body), 5))


def test_sqrt_under_cond_gradient_has_no_nan():
  def body(i):
    x = X[i, 0]
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = tf.cond(x > 0, lambda: tf.sqrt(x), lambda: tf.constant(0.0))
    return tape.gradient(y, x, unconnected_gradients=tf.UnconnectedGradients.ZERO)

  got = run_pfor(body, 5)
  assert np.all(np.isfinite(got.numpy()))
  check(got, loop(tf.function(body), 5))


def test_gradient_through_while_per_example_power():
  powers = tf.constant([0, 1, 2, 3, 5])
  base = tf.constant([1.5, -0.5, 2.0, 0.7, -1.1])

  def body(i):
    x = base[i]
    with tf.GradientTape() as tape:
      tape.watch(x)
      _, y = tf.while_loop(lambda k, y: k < powers[i], lambda k, y: (k + 1, y * x), (0, 1.0))
    return y, tape.gradient(y, x, unconnected_gradients=tf.UnconnectedGradients.ZERO)

  got = run_pfor(body, 5)
  p = powers.numpy().astype(np.float32)
  b = base.numpy()
  np.testing.assert_allclose(got[0].numpy(), b ** p, rtol=1e-5)
  np.testing.assert_allclose(got[1].numpy(), np.where(p > 0, p * b ** (p - 1), 0), rtol=1e-5)
  check(got, loop(tf.function(body), 5))


@pytest.mark.unchecked
def test_rnn_cell_gradient_over_per_example_length_with_tensorarray():
  w = tf.Variable([[0.5, -0.3], [0.2, 0.8]])
  u = tf.Variable([0.3, -0.1])

  def body(i):
    with tf.GradientTape() as tape:
      ta = tf.TensorArray(tf.float32, size=6, element_shape=[2])

      def step(t, h, ta):
        h = tf.tanh(tf.linalg.matvec(w, h) + u * SEQ[i, t])
        return t + 1, h, ta.write(t, h)

      _, h, ta = tf.while_loop(lambda t, h, ta: t < LENS[i] + 1, step,
                               (0, tf.zeros([2]), ta), maximum_iterations=6)
      loss = tf.reduce_sum(ta.stack() ** 2) + tf.reduce_sum(h)
    return tape.gradient(loss, [w, u])

  check(run_pfor(body, 5), loop(tf.function(body), 5))


def test_jacobian_and_batch_jacobian_inside_body():
  w = tf.constant(RNG.randn(4, 3).astype(np.float32))

  def body(i):
    x = X[i]
    xs = tf.stack([x, x * 2.0])        # a little batch per example
    with tf.GradientTape(persistent=True) as tape:
      tape.watch(x)
      tape.watch(xs)
      y = tf.tanh(tf.linalg.matvec(w, x, transpose_a=True))
      ys = tf.sin(xs @ w)
    return tape.jacobian(y, x), tape.batch_jacobian(ys, xs)

  check(run_pfor(body, 5), loop(tf.function(body), 5))


def _hvp_body(i):
  v = tf.constant([1.0, 0.0, -1.0, 2.0])
  x = X[i]
  with tf.GradientTape() as outer:
    outer.watch(x)
    with tf.GradientTape() as inner:
      inner.watch(x)
      y = tf.cond(x[0] > 0, lambda: tf.reduce_sum(x ** 3), lambda: tf.reduce_sum(tf.sin(x)))
    g = inner.gradient(y, x)
    gv = tf.reduce_sum(g * v)
  return outer.gradient(gv, x)


def test_hessian_vector_product_inside_body_through_cond():
  got = run_pfor(_hvp_body, 5)
  x, v = X.numpy(), np.array([1.0, 0.0, -1.0, 2.0], np.float32)
  np.testing.assert_allclose(got.numpy(), np.where(x[:, :1] > 0, 6 * x * v, -np.sin(x) * v),
                             rtol=1e-5, atol=1e-6)
  check(got, loop(tf.function(_hvp_body), 5))


def _second_order_body(x_all):
  def body(i):
    x = x_all[i]
    with tf.GradientTape() as outer:
      outer.watch(x)
      with tf.GradientTape() as inner:
        inner.watch(x)
        y = tf.cond(x > 0, lambda: x ** 3, lambda: tf.sin(x))
      g = inner.gradient(y, x)
    return outer.gradient(g, x)
  return body


@pytest.mark.unchecked
# Was a spurious CheckError (round 14, intermittent): the check compared a call's exported
# intermediates of the untaken branch (checked._for_a_gradient).
def test_checked_mode_accepts_second_order_gradient_through_cond():
  for k in range(6):                 # a new captured tensor each time: converted anew
    x_all = tf.constant([1.5, -2.0, 0.5]) + 0.01 * k
    with vectorize.checked(sample=None):
      got = vectorize.pfor(_second_order_body(x_all), 3)
    x = x_all.numpy()
    np.testing.assert_allclose(got.numpy(), np.where(x > 0, 6 * x, -np.sin(x)), rtol=1e-5)


def test_outer_gradient_of_loss_from_pfor_output_through_cond_and_while():
  w = tf.Variable([0.3, -0.7, 1.1, 0.2])
  scale = tf.Variable(0.9)

  def body(i):
    s = tf.reduce_sum(X[i] * w)
    s = tf.cond(s > 0, lambda: s * scale, lambda: tf.square(s))
    return tf.while_loop(lambda t, a: t < LENS[i], lambda t, a: (t + 1, a * scale + SEQ[i, t]),
                         (0, s))[1]

  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(vectorize.pfor(body, 5) ** 2)
  got = tape.gradient(loss, [w, scale])
  with tf.GradientTape() as tape:
    loss_ref = tf.reduce_sum(tf.stack([body(tf.constant(i)) for i in range(5)]) ** 2)
  want = tape.gradient(loss_ref, [w, scale])
  np.testing.assert_allclose(loss.numpy(), loss_ref.numpy(), rtol=1e-5)
  check(got, want)


def test_per_example_gradients_helper_with_conditional_loss():
  model = _tiny_model()
  labels = tf.constant([0, 1, 1, 0, 1])

  def loss_fn(x, y):
    logits = model(x[None])[0]
    return tf.cond(y > 0, lambda: tf.nn.softplus(-logits[1]), lambda: tf.square(logits[0]))

  got = vectorize.per_example_gradients(loss_fn, model, X, labels)

  def one(i):
    with tf.GradientTape() as tape:
      loss = loss_fn(X[i], labels[i])
    return tape.gradient(loss, model.trainable_variables)

  check(got, loop(one, 5))


def test_xla_per_example_gradient_through_loop_with_maximum_iterations():
  w = tf.Variable([0.4, -0.2, 0.9, 0.1])

  def body(i):
    with tf.GradientTape() as tape:
      def step(t, a):
        return t + 1, tf.where(a > 0, a * 0.5 + w[t % 4], a - w[t % 4] ** 2)
      a = tf.while_loop(lambda t, a: t < LENS[i], step, (0, X[i, 0]), maximum_iterations=4)[1]
    return tape.gradient(a, w, unconnected_gradients=tf.UnconnectedGradients.ZERO)

  check(run_pfor(body, 5, "xla"), loop(tf.function(body), 5))


def test_xla_gradient_through_loop_without_maximum_iterations_is_refused():
  w = tf.Variable(0.5)

  def body(i):
    with tf.GradientTape() as tape:
      a = tf.while_loop(lambda t, a: t < LENS[i], lambda t, a: (t + 1, a * w), (0, 1.0))[1]
    return tape.gradient(a, w)

  with pytest.raises(ValueError, match="maximum_iterations"):
    run_pfor(body, 5, "xla")


# ---------------------------------------------------------------- 4. shapes

def test_slice_per_example_bounds_is_ragged():
  def body(i):
    return X[i][:LENS[i]]

  check(run_pfor(body, 5), loop(body, 5))


@pytest.mark.parametrize("mode", MODES)
def test_shape_reads_of_per_example_slices_are_dense(mode):
  def body(i):
    s = SEQ[i][LENS[i] // 2:LENS[i] + 1]
    return tf.shape(s), tf.size(s), tf.reduce_sum(s)

  check(run_pfor(body, 5, mode), loop(body, 5))


def test_reshape_per_example_length_keeps_later_axis_uniform():
  lens2 = tf.constant([4, 0, 6, 2, 2])

  def body(i):
    return tf.reshape(SEQ[i][:lens2[i]], [-1, 2])

  got = run_pfor(body, 5)
  assert isinstance(got, tf.RaggedTensor)
  assert got.shape.as_list()[-1] == 2      # README: the later axis stays uniform
  got_rows = got.to_list()
  assert len(got_rows) == 5
  for i in range(5):
    want = tf.reshape(SEQ[i][:lens2[i]], [-1, 2]).numpy()
    np.testing.assert_allclose(np.asarray(got_rows[i], np.float32).reshape(-1, 2), want)


def test_sort_argsort_topk_of_per_example_lengths():
  lens = tf.constant([3, 1, 6, 2, 4])

  def body(i):
    v = SEQ[i][:lens[i]]
    k = tf.minimum(2, tf.size(v))
    top = tf.math.top_k(v, k=1)
    return (tf.sort(v, direction="DESCENDING"), tf.argsort(v), top.values, top.indices,
            tf.reduce_sum(tf.math.top_k(v, k).values))

  check(run_pfor(body, 5), loop(body, 5))


def test_unique_and_boolean_mask_per_example():
  def body(i):
    row = INTS[i]
    u, idx = tf.unique(row)
    kept = tf.boolean_mask(row, row > 2)
    return u, idx, kept, tf.size(u), tf.reduce_sum(kept)

  check(run_pfor(body, 5), loop(body, 5))


def test_boolean_mask_then_cond_on_count():
  def body(i):
    pos = tf.boolean_mask(X[i], X[i] > 0)
    return tf.cond(tf.size(pos) > 1, lambda: tf.reduce_mean(pos), lambda: tf.constant(0.0))

  check(run_pfor(body, 5), loop(body, 5))


def test_cond_on_shape_of_per_example_slice_and_switch_case_dicts():
  def body(i):
    s = SEQ[i][:LENS[i]]
    d = tf.cond(tf.shape(s)[0] > 1, lambda: tf.reduce_sum(s[1:] - s[:-1]), lambda: tf.constant(0.0))
    e = tf.switch_case(LENS[i] % 3, [lambda: {"a": X[i][:2], "b": i},
                                     lambda: {"a": X[i][2:], "b": -i},
                                     lambda: {"a": tf.stack([X[i, 0], X[i, 3]]), "b": i * i}])
    return d, e, tf.argmax(SEQ[i][:LENS[i] + 1])

  check(run_pfor(body, 5), loop(body, 5))


def test_unique_under_xla_is_refused():
  def body(i):
    return tf.size(tf.unique(INTS[i])[0])

  with pytest.raises(ValueError, match=r"(?i)unique|xla"):
    run_pfor(body, 5, "xla")


def test_per_example_slice_under_xla_is_refused():
  def body(i):
    return tf.reduce_sum(X[i][:LENS[i]])

  with pytest.raises(ValueError, match=r"(?i)xla|static|size"):
    run_pfor(body, 5, "xla")


# ---------------------------------------------------------------- 5. modes

def test_xla_cond_switch_case_and_dead_lane_gradient():
  z = tf.constant([0.0, 2.0, 0.0, -1.0, 0.5])

  def body(i):
    xi = X[i]
    a = tf.cond(xi[1] > 0, lambda: (xi * 2.0, i + 1), lambda: (xi - 1.0, i * 10))
    b = tf.switch_case(i % 3, [lambda: tf.reduce_sum(xi), lambda: tf.reduce_max(xi),
                               lambda: tf.constant(7.0)])
    x = z[i]
    with tf.GradientTape() as tape:
      tape.watch(x)    # 1/x only where x != 0: a dead lane must not leak inf/nan
      y = tf.cond(tf.not_equal(x, 0.0), lambda: 1.0 / x + tf.math.log(tf.abs(x)),
                  lambda: tf.constant(0.0))
    return a, b, y, tape.gradient(y, x, unconnected_gradients=tf.UnconnectedGradients.ZERO)

  got = run_pfor(body, 5, "xla")
  assert np.all(np.isfinite(got[3].numpy()))
  check(got, loop(tf.function(body), 5))


def test_xla_while_per_example_trips_with_fixed_tensorarray():
  def body(i):
    ta = tf.TensorArray(tf.float32, size=6, element_shape=[])

    def step(t, acc, ta):
      acc = acc + SEQ[i, t]
      return t + 1, acc, ta.write(t, acc)

    t, acc, ta = tf.while_loop(lambda t, acc, ta: t < LENS[i] + 1, step, (0, 0.0, ta),
                               maximum_iterations=6)
    return t, acc, ta.stack()

  check(run_pfor(body, 5, "xla"), loop(tf.function(body), 5))


def test_xla_ragged_output_is_refused():
  def body(i):
    return tf.range(LENS[i])

  with pytest.raises(ValueError):
    run_pfor(body, 5, "xla")


@pytest.mark.parametrize("n", [0, 3])
def test_vectorized_map_and_map_fn_with_cond_rows(n):
  elems = (X[:n], LENS[:n])

  def fn(e):
    x, k = e
    return tf.cond(k > 1, lambda: tf.reduce_sum(x[:2]) * tf.cast(k, tf.float32),
                   lambda: tf.reduce_min(x))

  want = tf.stack([fn((X[i], LENS[i])) for i in range(n)]) if n else tf.zeros([0])
  check(vectorize.vectorized_map(fn, elems), want)
  check(vectorize.map_fn(fn, elems, fn_output_signature=tf.float32), want)


def test_runtime_n_with_cond_and_ragged_output():
  def body(i):
    return tf.cond(i % 2 == 0, lambda: tf.range(LENS[i]), lambda: tf.range(LENS[i]) * -1)

  got = run_pfor(body, 5, "function")
  check(got, loop(body, 5))
