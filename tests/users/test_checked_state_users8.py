"""Bodies that WRITE STATE, each against the plain Python loop, mostly in the checked mode.

Written from the README alone (its "When a result looks wrong: the checked mode" section and
the `checked` row of the API table). Every program resets its variables, runs the loop over
i = 0..n-1 calling the same body eagerly, stacks its outputs (`tf.ragged.stack` where sizes
differ) and keeps the variables' final values; then resets them again, runs `pfor` in a mode
and asserts both the outputs and every variable's final value equal the loop's. The conftest
turns the checked mode on in each program's first mode (where the variables end with the
loop's state, as the README says); tests marked `unchecked` see pfor's own state.
"""

import logging

import keras
import numpy as np
import pytest
import tensorflow as tf

import vectorize

_TOL = {
    np.dtype("float32"): dict(rtol=2e-5, atol=2e-5),
    np.dtype("float64"): dict(rtol=1e-11, atol=1e-11),
}


# ---------------------------------------------------------------------------------------
# Helpers


def _reset(state):
  for var, init in state:
    var.assign(init)


def _finals(state):
  return [np.array(var.numpy()) for var, _ in state]


def _stack(outs):
  """tf.stack of the loop's outputs, tf.ragged.stack where a shape differs per i."""
  def one(*xs):
    if xs[0] is None:
      return None
    shapes = {tuple(x.shape) for x in xs}
    return tf.stack(xs) if len(shapes) == 1 else tf.ragged.stack(list(xs))
  return tf.nest.map_structure(one, *outs)


def loop_ref(body, n, state, empty=None):
  """The reference: the plain loop, from the initial state. `empty`: the outputs of n=0."""
  _reset(state)
  outs = []
  for i in range(n):
    # Snapshot each output now: eagerly, `v.assign(...)` returns the variable itself, which
    # a later read would see at its final value.
    outs.append(tf.nest.map_structure(
        lambda t: None if t is None else tf.identity(tf.convert_to_tensor(t)),
        body(tf.constant(i, tf.int32))))
  stacked = _stack(outs) if n else empty
  return stacked, _finals(state)


def run_pfor(body, n, mode, state, **kwargs):
  """pfor in a mode, from the same initial state."""
  _reset(state)
  if mode == "eager":
    out = vectorize.pfor(body, n, **kwargs)
  elif mode == "function":
    out = tf.function(lambda: vectorize.pfor(body, n, **kwargs))()
  elif mode == "xla":
    out = tf.function(lambda: vectorize.pfor(body, n, **kwargs), jit_compile=True)()
  elif mode == "runtime_n":
    f = tf.function(lambda k: vectorize.pfor(body, k, **kwargs),
                    input_signature=[tf.TensorSpec([], tf.int32)])
    out = f(tf.constant(n, tf.int32))
  else:
    raise ValueError(mode)
  return out, _finals(state)


def assert_same(got, want):
  """Outputs (nested), dtypes and shapes equal; floats within their dtype's tolerance."""
  tf.nest.assert_same_structure(got, want, expand_composites=False)
  for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
    if w is None:
      assert g is None
      continue
    if isinstance(w, tf.RaggedTensor):
      assert isinstance(g, tf.RaggedTensor), type(g)
      assert g.dtype == w.dtype
      gl, wl = g.to_list(), w.to_list()
      assert len(gl) == len(wl)
      for a, b in zip(gl, wl):
        np.testing.assert_allclose(np.array(a, dtype=float), np.array(b, dtype=float),
                                   rtol=1e-5, atol=1e-6)
      continue
    g, w = np.asarray(g), np.asarray(w)
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    assert g.shape == w.shape, (g.shape, w.shape)
    if w.dtype in _TOL:
      np.testing.assert_allclose(g, w, **_TOL[w.dtype])
    else:
      np.testing.assert_array_equal(g, w)


def check(body, n, mode, state, empty=None, **kwargs):
  """pfor == the loop, outputs and final state. Returns the loop's outputs and state."""
  want, want_state = loop_ref(body, n, state, empty)
  got, got_state = run_pfor(body, n, mode, state, **kwargs)
  assert_same(got, want)
  for g, w in zip(got_state, want_state):
    assert_same(g, w)
  return want, want_state


def warning_text(caplog, recwarn=None):
  text = "\n".join(r.getMessage() for r in caplog.records)
  if recwarn is not None:
    text += "\n".join(str(w.message) for w in recwarn.list)
  return text


TWO = ["eager", "function"]
EAGER_XLA = ["eager", "xla"]

X5 = tf.constant([0.5, -1.0, 2.0, 3.0, 0.25], tf.float32)


# ---------------------------------------------------------------------------------------
# Plain variable writes


@pytest.mark.parametrize("mode", TWO)
def test_assign_add_running_sum_f32(mode):
  v = tf.Variable(1.5)
  state = [(v, 1.5)]

  def body(i):
    v.assign_add(X5[i])
    return v.read_value()

  want, _ = check(body, 5, mode, state)
  np.testing.assert_allclose(want, 1.5 + np.cumsum(X5.numpy()), rtol=1e-6)


@pytest.mark.parametrize("mode", EAGER_XLA)
def test_int32_vector_assign_add_read_before_and_after(mode):
  v = tf.Variable([1, 2, 3], dtype=tf.int32)
  state = [(v, [1, 2, 3])]

  def body(i):
    before = tf.identity(v.read_value())
    v.assign_add(tf.stack([i, 2 * i, 1]))
    after = v.read_value()
    return before, after

  (before, after), (final,) = check(body, 4, mode, state)
  np.testing.assert_array_equal(final, [1 + 6, 2 + 12, 3 + 4])
  np.testing.assert_array_equal(before[1:], after[:-1])


@pytest.mark.parametrize("mode", TWO)
def test_int64_assign_sub_counter(mode):
  c = tf.Variable(100, dtype=tf.int64)
  state = [(c, 100)]

  def body(i):
    out = c.assign_sub(tf.cast(i, tf.int64) * 3)
    return out * 2

  want, (final,) = check(body, 5, mode, state)
  assert final == 100 - 3 * 10
  np.testing.assert_array_equal(want, 2 * (100 - 3 * np.cumsum(np.arange(5))))


@pytest.mark.parametrize("mode", TWO)
def test_float64_assign_last_writer_wins(mode):
  xs = tf.constant(np.arange(12).reshape(6, 2) * 0.1 + 0.3, tf.float64)
  v = tf.Variable([7.0, -7.0], dtype=tf.float64)
  state = [(v, [7.0, -7.0])]

  def body(i):
    old = tf.identity(v.read_value())
    v.assign(xs[i])
    return old + v.read_value()

  want, (final,) = check(body, 6, mode, state)
  np.testing.assert_allclose(final, xs.numpy()[-1])
  np.testing.assert_allclose(want[1], xs.numpy()[0] + xs.numpy()[1])


@pytest.mark.parametrize("mode", EAGER_XLA)
def test_scatter_nd_add_per_example_index(mode):
  v = tf.Variable(tf.zeros([3]))
  state = [(v, tf.zeros([3]))]

  def body(i):
    v.scatter_nd_add([[i % 3]], [X5[i]])
    return v.read_value()

  want, (final,) = check(body, 5, mode, state)
  np.testing.assert_allclose(final, [0.5 + 3.0, -1.0 + 0.25, 2.0], rtol=1e-6)


@pytest.mark.parametrize("mode", TWO)
def test_scatter_update_rows_collide(mode):
  rows = tf.reshape(tf.range(12, dtype=tf.float32), [6, 2])
  table = tf.Variable(tf.fill([4, 2], -1.0))
  state = [(table, tf.fill([4, 2], -1.0))]

  def body(i):
    table.scatter_update(tf.IndexedSlices(rows[i][None], tf.reshape(i % 4, [1])))
    return tf.reduce_sum(table.read_value(), axis=0)

  _, (final,) = check(body, 6, mode, state)
  np.testing.assert_allclose(final, [[8, 9], [10, 11], [4, 5], [6, 7]])


@pytest.mark.parametrize("mode", TWO)
def test_row_slice_assign_then_full_read(mode):
  table = tf.Variable(tf.zeros([4, 3]))
  xs = tf.reshape(tf.range(12, dtype=tf.float32) + 1.0, [4, 3])
  state = [(table, tf.zeros([4, 3]))]

  def body(i):
    table[i].assign(xs[i])
    return tf.reduce_sum(table.read_value())

  want, _ = check(body, 4, mode, state)
  np.testing.assert_allclose(want, np.cumsum(xs.numpy().sum(1)))


@pytest.mark.unchecked
@pytest.mark.parametrize("mode", TWO)
def test_read_value_false_write_only_unread_unchecked(mode):
  """A variable only written (read_value=False), never read: pfor's own state."""
  w = tf.Variable(0.0)
  state = [(w, 0.0)]

  def body(i):
    w.assign_add(X5[i] * 2.0, read_value=False)
    return X5[i] + 1.0

  _, (final,) = check(body, 5, mode, state)
  np.testing.assert_allclose(final, 2 * X5.numpy().sum(), rtol=1e-6)


@pytest.mark.parametrize("mode", TWO)
def test_read_value_false_but_read_elsewhere(mode):
  v = tf.Variable(2.0, dtype=tf.float64)
  xs = tf.cast(X5, tf.float64)
  state = [(v, 2.0)]

  def body(i):
    v.assign_sub(xs[i], read_value=False)
    return v.read_value() * xs[i]

  check(body, 5, mode, state)


@pytest.mark.parametrize("mode", TWO)
def test_two_variables_swap(mode):
  a = tf.Variable(1.0)
  b = tf.Variable(10.0)
  state = [(a, 1.0), (b, 10.0)]

  def body(i):
    old_a = tf.identity(a.read_value())
    a.assign(b.read_value())
    b.assign(old_a + X5[i])
    return a.read_value(), b.read_value()

  check(body, 5, mode, state)


@pytest.mark.parametrize("mode", EAGER_XLA)
def test_max_tracking_nonlinear(mode):
  m = tf.Variable(-100.0)
  state = [(m, -100.0)]

  def body(i):
    m.assign(tf.maximum(m, X5[i]))
    return m.read_value()

  want, (final,) = check(body, 5, mode, state)
  np.testing.assert_allclose(want, np.maximum.accumulate(X5.numpy()))
  assert final == 3.0


@pytest.mark.parametrize("mode", TWO)
def test_affine_recurrence_per_iteration_coefficients(mode):
  c = tf.constant([0.5, 2.0, -1.0, 0.25, 3.0])
  v = tf.Variable(1.0)
  state = [(v, 1.0)]

  def body(i):
    v.assign(v * c[i] + X5[i])
    return v.read_value()

  want, _ = check(body, 5, mode, state)
  acc, ref = 1.0, []
  for k in range(5):
    acc = acc * c.numpy()[k] + X5.numpy()[k]
    ref.append(acc)
  np.testing.assert_allclose(want, ref, rtol=1e-6)


# ---------------------------------------------------------------------------------------
# Control flow


@pytest.mark.parametrize("mode", TWO)
def test_while_per_example_trips_assign_add(mode):
  v = tf.Variable(0.0)
  state = [(v, 0.0)]

  def body(i):
    def step(k, acc):
      v.assign_add(X5[i])
      return k + 1, acc + v.read_value()
    return tf.while_loop(lambda k, acc: k < i % 3, step, (0, 0.0))

  (ks, _), (final,) = check(body, 5, mode, state)
  np.testing.assert_array_equal(ks, [0, 1, 2, 0, 1])
  np.testing.assert_allclose(final, -1.0 + 2 * 2.0 + 0.25, rtol=1e-6)


@pytest.mark.parametrize("mode", TWO)
def test_while_condition_reads_state(mode):
  lim = tf.constant([2.0, 1.0, 5.5, 3.0, 7.0])
  v = tf.Variable(0.0)
  state = [(v, 0.0)]

  def body(i):
    def step(k):
      with tf.control_dependencies([v.assign_add(1.0)]):
        return [k + 1]
    trips = tf.while_loop(lambda k: v.read_value() < lim[i], step, [0])[0]
    return trips, v.read_value()

  (trips, _), (final,) = check(body, 5, mode, state)
  np.testing.assert_array_equal(trips, [2, 0, 4, 0, 1])
  assert final == 7.0


@pytest.mark.parametrize("mode", TWO)
def test_while_nonlinear_recurrence_float64(mode):
  xs = tf.constant([0.1, 0.2, -0.3, 0.4], tf.float64)
  v = tf.Variable(0.5, dtype=tf.float64)
  state = [(v, 0.5)]

  def body(i):
    def step(k):
      v.assign(tf.sin(v) + xs[i])
      return [k + 1]
    tf.while_loop(lambda k: k < i % 3 + 1, step, [0])
    return v.read_value()

  check(body, 4, mode, state)


@pytest.mark.parametrize("mode", EAGER_XLA)
def test_cond_per_example_writes_two_dtypes(mode):
  a = tf.Variable(0.0)
  b = tf.Variable(0, dtype=tf.int32)
  state = [(a, 0.0), (b, 0)]

  def body(i):
    r = tf.cond(X5[i] > 0.4,
                lambda: a.assign_add(X5[i]),
                lambda: tf.cast(b.assign_add(i + 1), tf.float32))
    return r, a.read_value(), b.read_value()

  _, (fa, fb) = check(body, 5, mode, state)
  np.testing.assert_allclose(fa, 0.5 + 2.0 + 3.0)
  assert fb == 2 + 5


@pytest.mark.parametrize("mode", TWO)
def test_cond_reads_in_one_branch_writes_in_other(mode):
  v = tf.Variable(4.0)
  state = [(v, 4.0)]

  def body(i):
    return tf.cond(i % 2 == 0,
                   lambda: v.read_value() * 2.0,
                   lambda: v.assign(X5[i]))

  want, (final,) = check(body, 5, mode, state)
  np.testing.assert_allclose(want, [8.0, -1.0, -2.0, 3.0, 6.0])
  assert final == 3.0


@pytest.mark.parametrize("mode", TWO)
def test_cond_reads_variable_only_in_branch_written_outside(mode):
  v = tf.Variable(1.0)
  state = [(v, 1.0)]

  def body(i):
    y = tf.cond(X5[i] > 0, lambda: v.read_value() + X5[i], lambda: -X5[i])
    v.assign_add(1.0)
    return y

  want, _ = check(body, 5, mode, state)
  np.testing.assert_allclose(want, [1.5, 1.0, 5.0, 7.0, 5.25])


@pytest.mark.parametrize("mode", TWO)
def test_cond_writes_only_in_branch_never_read(mode):
  """w is only written, inside a branch, and never read (read_value=False)."""
  w = tf.Variable(0.0)
  state = [(w, 0.0)]

  def body(i):
    def yes():
      w.assign_add(X5[i], read_value=False)
      return X5[i] * 2.0
    return tf.cond(X5[i] > 0, yes, lambda: X5[i])

  _, (final,) = check(body, 5, mode, state)
  np.testing.assert_allclose(final, 0.5 + 2.0 + 3.0 + 0.25)


@pytest.mark.parametrize("mode", TWO)
def test_switch_case_writes_different_variables(mode):
  a = tf.Variable(0.0)
  b = tf.Variable(0, dtype=tf.int64)
  c = tf.Variable([0.0, 0.0], dtype=tf.float64)
  state = [(a, 0.0), (b, 0), (c, [0.0, 0.0])]

  def body(i):
    def f0():
      a.assign_add(X5[i % 5])
      return tf.constant(0)
    def f1():
      b.assign_add(tf.cast(i, tf.int64) * 10)
      return tf.constant(1)
    def f2():
      c.assign(c * 2.0 + tf.cast(tf.stack([X5[i % 5], 1.0]), tf.float64))
      return tf.constant(2)
    k = tf.switch_case(i % 3, [f0, f1, f2])
    return k, a.read_value() + tf.cast(b.read_value(), tf.float32)

  _, (fa, fb, fc) = check(body, 7, mode, state)
  assert fb == 10 * (1 + 4)


# ---------------------------------------------------------------------------------------
# Nested functions and autograph


@pytest.mark.parametrize("mode", TWO)
def test_nested_tf_function_writes(mode):
  v = tf.Variable(0.5)
  state = [(v, 0.5)]

  @tf.function
  def inner(d):
    return v.assign_add(d)

  def body(i):
    a = tf.identity(v.read_value())
    b = inner(X5[i])
    c = v.read_value()
    return a, b, c

  (a, b, c), _ = check(body, 5, mode, state)
  np.testing.assert_allclose(b, c)
  np.testing.assert_allclose(a[1:], c[:-1])


@pytest.mark.parametrize("mode", TWO)
def test_two_level_nested_functions_read_and_write(mode):
  v = tf.Variable(1.0)
  w = tf.Variable(0, dtype=tf.int32)
  state = [(v, 1.0), (w, 0)]

  @tf.function
  def innermost(x):
    w.assign_add(1)
    return v.assign(v * 0.5 + x)

  @tf.function
  def middle(x):
    y = innermost(x)
    return y + tf.cast(w.read_value(), tf.float32)

  def body(i):
    return middle(X5[i])

  _, (fv, fw) = check(body, 5, mode, state)
  assert fw == 5


@pytest.mark.parametrize("mode", TWO)
def test_autograph_for_on_tensor_in_function_body(mode):
  v = tf.Variable(0.0)
  state = [(v, 0.0)]

  @tf.function
  def body(i):
    for k in tf.range(i % 3 + 1):
      v.assign_add(tf.cast(k, tf.float32) + X5[i])
    return v.read_value()

  check(body, 5, mode, state)


@pytest.mark.parametrize("mode", TWO)
def test_autograph_if_on_tensor_in_function_body(mode):
  a = tf.Variable(0.0)
  b = tf.Variable(0.0)
  state = [(a, 0.0), (b, 0.0)]

  @tf.function
  def body(i):
    if X5[i] > 0.4:
      a.assign_add(X5[i])
    else:
      b.assign_sub(1.0)
    return a + b

  want, (fa, fb) = check(body, 5, mode, state)
  np.testing.assert_allclose([fa, fb], [5.5, -2.0])


@pytest.mark.parametrize("mode", TWO)
def test_python_if_on_tensor_in_plain_body(mode):
  """README: in eager mode the body is autograph-converted, so a Python `if` works."""
  v = tf.Variable(0.0)
  state = [(v, 0.0)]

  def body(i):
    if X5[i] > 1.0:
      v.assign_add(X5[i])
    return v.read_value()

  check(body, 5, mode, state)


@pytest.mark.parametrize("mode", TWO)
def test_nested_function_with_cond_write_known_failure_documented(mode):
  """README: 'A tf.cond inside a tf.function that such a sequential body calls is made before
  pfor sees it, stays lowered, and can lose a variable update (a known failure, tested).'
  Here the update is per-iteration (assign_add); checks what pfor gives."""
  v = tf.Variable(0.0)
  state = [(v, 0.0)]

  @tf.function
  def inner(x):
    return tf.cond(x > 0.4, lambda: v.assign(v * v + x), lambda: v.read_value())

  def body(i):
    return inner(X5[i])

  check(body, 5, mode, state)


# ---------------------------------------------------------------------------------------
# TensorArrays beside variables


@pytest.mark.parametrize("mode", TWO)
def test_tensorarray_fixed_trips_with_variable(mode):
  v = tf.Variable(0.0)
  state = [(v, 0.0)]

  def body(i):
    ta = tf.TensorArray(tf.float32, size=3, clear_after_read=False)
    def step(k, ta):
      v.assign_add(X5[i] * tf.cast(k, tf.float32))
      return k + 1, ta.write(k, v.read_value())
    _, ta = tf.while_loop(lambda k, ta: k < 3, step, (0, ta))
    return ta.stack()

  want, (final,) = check(body, 5, mode, state)
  np.testing.assert_allclose(final, 3 * X5.numpy().sum(), rtol=1e-5)


@pytest.mark.parametrize("mode", TWO)
def test_tensorarray_per_example_trips_ragged_with_variable(mode):
  v = tf.Variable(1.0)
  state = [(v, 1.0)]

  def body(i):
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, clear_after_read=False,
                        element_shape=[])
    def step(k, ta):
      v.assign(v * 0.5 + X5[i])
      return k + 1, ta.write(k, v.read_value())
    _, ta = tf.while_loop(lambda k, ta: k < i % 3 + 1, step, (0, ta))
    return ta.stack()

  want, _ = check(body, 5, mode, state)
  assert isinstance(want, tf.RaggedTensor)


@pytest.mark.parametrize("mode", TWO)
def test_tensorarray_fixed_size_per_example_trips_padded(mode):
  """A fixed-size array (README: dense) written in a loop of per-iteration trips."""
  c = tf.Variable(0, dtype=tf.int32)
  state = [(c, 0)]

  def body(i):
    ta = tf.TensorArray(tf.int32, size=3, clear_after_read=False, element_shape=[])
    def step(k, ta):
      c.assign_add(k + i)
      return k + 1, ta.write(k, c.read_value())
    _, ta = tf.while_loop(lambda k, ta: k < i % 3 + 1, step, (0, ta))
    return ta.stack()

  want, (final,) = check(body, 5, mode, state)
  assert want.shape == (5, 3)


# ---------------------------------------------------------------------------------------
# Tapes and training steps


@pytest.mark.parametrize("mode", TWO)
def test_hand_written_sgd_step_per_example(mode):
  xs = tf.constant(np.linspace(-1, 1, 15).reshape(5, 3), tf.float32)
  ys = tf.constant([1.0, -1.0, 0.5, 2.0, 0.0])
  w = tf.Variable([0.1, -0.2, 0.3])
  state = [(w, [0.1, -0.2, 0.3])]

  def body(i):
    with tf.GradientTape() as tape:
      loss = (tf.reduce_sum(w * xs[i]) - ys[i]) ** 2
    g = tape.gradient(loss, w)
    w.assign_sub(0.1 * g)
    return loss

  check(body, 5, mode, state)


@pytest.mark.parametrize("mode", TWO)
def test_gradient_accumulator_from_read_only_weights(mode):
  xs = tf.constant(np.linspace(-1, 1, 15).reshape(5, 3), tf.float32)
  w = tf.Variable([0.1, -0.2, 0.3])
  gsum = tf.Variable(tf.zeros([3]))
  count = tf.Variable(0, dtype=tf.int64)
  state = [(w, [0.1, -0.2, 0.3]), (gsum, tf.zeros([3])), (count, 0)]

  def body(i):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(w * xs[i]) ** 2
    g = tape.gradient(loss, w)
    gsum.assign_add(g)
    count.assign_add(1)
    return g

  want, (_, fg, fc) = check(body, 5, mode, state)
  np.testing.assert_allclose(fg, np.sum(want, 0), rtol=1e-5, atol=1e-6)
  assert fc == 5


@pytest.mark.parametrize("mode", TWO)
def test_keras_sgd_optimizer_apply_per_example(mode):
  xs = tf.constant(np.linspace(-1, 1, 12).reshape(4, 3), tf.float32)
  w = tf.Variable([0.5, 0.5, 0.5])
  opt = keras.optimizers.SGD(learning_rate=0.1)
  opt.build([w])
  state = [(w, [0.5, 0.5, 0.5]), (opt.iterations, 0)]

  def body(i):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(w * xs[i]) ** 2
    g = tape.gradient(loss, w)
    opt.apply_gradients([(g, w)])
    return loss

  _, (fw, fit) = check(body, 4, mode, state)
  assert fit == 4


# ---------------------------------------------------------------------------------------
# Keras layers with state


@pytest.mark.parametrize("mode", TWO)
def test_keras_batchnorm_training_moving_stats(mode):
  xs = tf.reshape(tf.cos(tf.range(60, dtype=tf.float32)), [5, 4, 3])
  bn = keras.layers.BatchNormalization(momentum=0.5)
  bn.build((None, 3))
  state = [(bn.moving_mean, tf.zeros([3])), (bn.moving_variance, tf.ones([3]))]

  def body(i):
    return bn(xs[i], training=True)

  _, (mm, mv) = check(body, 5, mode, state)
  assert not np.allclose(mm, 0.0)


@pytest.mark.parametrize("mode", TWO)
def test_keras_metric_update_state(mode):
  m = keras.metrics.Mean()
  state = [(m.total, 0.0), (m.count, 0.0)]

  def body(i):
    m.update_state(X5[: i + 1])
    return m.result()

  _, (total, count) = check(body, 5, mode, state)
  assert count == 15.0


@pytest.mark.parametrize("mode", EAGER_XLA)
def test_keras_dense_outside_with_counter(mode):
  xs = tf.reshape(tf.range(15, dtype=tf.float32) / 10.0, [5, 3])
  dense = keras.layers.Dense(2, kernel_initializer="glorot_uniform")
  dense.build((None, 3))
  counter = tf.Variable(0.0)
  state = [(counter, 0.0)]

  def body(i):
    counter.assign_add(1.0)
    return dense(xs[i][None])[0] * counter

  check(body, 5, mode, state)


@pytest.mark.parametrize("mode", TWO)
def test_weightless_keras_layer_built_inside_body(mode):
  xs = tf.constant(np.linspace(-2, 2, 15).reshape(5, 3), tf.float32)
  total = tf.Variable(tf.zeros([3]))
  state = [(total, tf.zeros([3]))]

  def body(i):
    layer = keras.layers.ReLU(max_value=1.0)
    y = layer(xs[i])
    total.assign_add(y)
    return y, total.read_value()

  check(body, 5, mode, state)


def test_variable_created_inside_body_raises_like_tf():
  """Creating a variable in the body: TF's own tf.vectorized_map raises ValueError too."""
  xs = tf.ones([2, 3])

  def body(i):
    v = tf.Variable(tf.ones([3]))
    return tf.reduce_sum(v * xs[i])

  with pytest.raises(ValueError):
    vectorize.pfor(body, 2)


# ---------------------------------------------------------------------------------------
# n = 0, n = 1, run-time n, repeated calls


@pytest.mark.parametrize("mode", TWO)
def test_n_zero_leaves_state(mode):
  v = tf.Variable([3.0, 4.0])
  c = tf.Variable(7, dtype=tf.int32)
  state = [(v, [3.0, 4.0]), (c, 7)]

  def body(i):
    v.assign(v * 2.0)
    c.assign_add(i)
    return v.read_value(), c.read_value()

  empty = (tf.zeros([0, 2]), tf.zeros([0], tf.int32))
  _, (fv, fc) = check(body, 0, mode, state, empty=empty)
  np.testing.assert_array_equal(fv, [3.0, 4.0])
  assert fc == 7


@pytest.mark.parametrize("mode", EAGER_XLA)
def test_n_one_nonlinear_state(mode):
  v = tf.Variable(0.3, dtype=tf.float64)
  state = [(v, 0.3)]

  def body(i):
    v.assign(tf.exp(v) + tf.cast(i, tf.float64))
    return v.read_value()

  check(body, 1, mode, state)


@pytest.mark.parametrize("mode", ["runtime_n", "eager"])
@pytest.mark.parametrize("n", [0, 1, 4])
def test_runtime_n_stateful(mode, n):
  v = tf.Variable(1.0)
  c = tf.Variable(0, dtype=tf.int64)
  state = [(v, 1.0), (c, 0)]

  def body(i):
    v.assign(v * 1.5 - X5[i])
    c.assign_add(tf.cast(i, tf.int64) + 1)
    return v.read_value(), c.read_value()

  empty = (tf.zeros([0]), tf.zeros([0], tf.int64))
  check(body, n, mode, state, empty=empty)


@pytest.mark.unchecked
def test_runtime_n_function_called_twice_accumulates():
  v = tf.Variable(0.0)

  def body(i):
    v.assign_add(X5[i])
    return v.read_value()

  f = tf.function(lambda k: vectorize.pfor(body, k),
                  input_signature=[tf.TensorSpec([], tf.int32)])
  a = f(tf.constant(3))
  b = f(tf.constant(5))
  x = X5.numpy()
  np.testing.assert_allclose(a, np.cumsum(x[:3]), rtol=1e-6)
  np.testing.assert_allclose(b, x[:3].sum() + np.cumsum(x), rtol=1e-6)
  np.testing.assert_allclose(v.numpy(), x[:3].sum() + x.sum(), rtol=1e-6)


def test_eager_pfor_twice_continues_state_and_sees_caller_writes():
  v = tf.Variable(0.0)
  scale = tf.Variable(1.0)

  def body(i):
    v.assign_add(X5[i] * scale)
    return v.read_value()

  with vectorize.checked(sample=None):
    a = vectorize.pfor(body, 5)
  scale.assign(10.0)            # the caller writes a variable the body only reads
  with vectorize.checked(sample=None):
    b = vectorize.pfor(body, 5)  # cached conversion, must read the new value
  x = X5.numpy()
  np.testing.assert_allclose(a, np.cumsum(x), rtol=1e-6)
  np.testing.assert_allclose(b, x.sum() + 10 * np.cumsum(x), rtol=1e-5)
  np.testing.assert_allclose(v.numpy(), 11 * x.sum(), rtol=1e-5)


# ---------------------------------------------------------------------------------------
# TF1 graph mode


def test_tf1_graph_session_variables():
  xs = np.array([0.5, -1.0, 2.0, 3.0, 0.25], np.float32)
  # The reference, eagerly.
  rv = tf.Variable(2.0)
  rc = tf.Variable(0, dtype=tf.int64)
  rx = tf.constant(xs)

  def ref_body(i):
    rv.assign(rv * 0.5 + rx[i])
    rc.assign_add(tf.cast(i, tf.int64))
    return rv.read_value(), rc.read_value()

  want, (want_v, want_c) = loop_ref(ref_body, 5, [(rv, 2.0), (rc, 0)])

  with tf.Graph().as_default():
    v = tf.compat.v1.get_variable("v", initializer=2.0, use_resource=True)
    c = tf.compat.v1.get_variable("c", initializer=tf.constant(0, tf.int64),
                                  use_resource=True)
    x = tf.constant(xs)

    def body(i):
      new = v.assign(v * 0.5 + x[i])
      with tf.control_dependencies([new]):
        cc = c.assign_add(tf.cast(i, tf.int64))
      with tf.control_dependencies([cc]):
        return v.read_value(), c.read_value()

    out = vectorize.pfor(body, 5)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      got = sess.run(out)
      got_v, got_c = sess.run([v, c])
      again = sess.run(out)          # a second run continues from the state the first left
      again_v, again_c = sess.run([v, c])
  assert_same(tuple(got), tuple(w.numpy() for w in want))
  assert_same(got_v, want_v)
  assert_same(got_c, want_c)
  # the reference for the second run: the loop again, from the first run's final state
  want2, (want2_v, want2_c) = loop_ref(ref_body, 5, [(rv, want_v), (rc, want_c)])
  assert_same(tuple(again), tuple(w.numpy() for w in want2))
  assert_same(again_v, want2_v)
  assert_same(again_c, want2_c)


# ---------------------------------------------------------------------------------------
# The checked mode, explicitly


def test_checked_explicit_correct_stateful_program_raises_nothing_eager_and_function():
  v = tf.Variable(0.0)
  c = tf.Variable(0, dtype=tf.int32)
  state = [(v, 0.0), (c, 0)]

  def body(i):
    def step(k):
      v.assign(tf.tanh(v) + X5[i])
      return [k + 1]
    tf.while_loop(lambda k: k < i % 3, step, [0])
    c.assign_add(i)
    return v.read_value(), c.read_value()

  want, want_state = loop_ref(body, 5, state)
  for sample in (None, 2, 8):
    _reset(state)
    with vectorize.checked(sample=sample):
      got = vectorize.pfor(body, 5)
    assert_same(got, want)
    for g, w in zip(_finals(state), want_state):
      assert_same(g, w)
    _reset(state)
    with vectorize.checked(sample=sample):
      got = tf.function(lambda: vectorize.pfor(body, 5))()
    assert_same(got, want)
    for g, w in zip(_finals(state), want_state):
      assert_same(g, w)


def test_checked_env_all(monkeypatch):
  monkeypatch.setenv("VECTORIZE_CHECKED", "all")
  v = tf.Variable(tf.zeros([2], tf.float64))
  state = [(v, tf.zeros([2], tf.float64))]

  def body(i):
    v.scatter_nd_add([[i % 2]], [tf.cast(i, tf.float64) ** 2])
    return tf.reduce_prod(v + 1.0)

  check(body, 6, "eager", state)


def test_checked_xla_state_ok():
  v = tf.Variable(0.0)
  state = [(v, 0.0)]

  def body(i):
    v.assign(tf.maximum(v * 0.9, X5[i]))
    return v.read_value()

  want, want_state = loop_ref(body, 5, state)
  _reset(state)
  with vectorize.checked(sample=None):
    got = tf.function(lambda: vectorize.pfor(body, 5), jit_compile=True)()
  assert_same(got, want)
  assert_same(_finals(state)[0], want_state[0])


def test_checked_warns_write_only_variable(caplog):
  w = tf.Variable(0.0)
  state = [(w, 0.0)]

  def body(i):
    w.assign_add(X5[i], read_value=False)
    return X5[i] * 3.0

  want, want_state = loop_ref(body, 5, state)
  _reset(state)
  with caplog.at_level(logging.WARNING):
    with vectorize.checked(sample=None):
      got = vectorize.pfor(body, 5)
  assert "not checked" in warning_text(caplog)
  assert_same(got, want)
  assert_same(_finals(state)[0], want_state[0])


def test_checked_warns_raw_handle_write(caplog):
  v = tf.Variable(0.0)
  state = [(v, 0.0)]

  def body(i):
    tf.raw_ops.AssignAddVariableOp(resource=v.handle, value=X5[i])
    return X5[i] + 1.0

  want, want_state = loop_ref(body, 5, state)
  _reset(state)
  with caplog.at_level(logging.WARNING):
    with vectorize.checked(sample=None):
      got = vectorize.pfor(body, 5)
  text = warning_text(caplog)
  assert "not checked" in text and "raw handle" in text
  assert_same(got, want)
  assert_same(_finals(state)[0], want_state[0])


def test_checked_warns_pfor_config_reduction_with_state(caplog):
  v = tf.Variable(0.0)
  state = [(v, 0.0)]

  def body(i, pfor_config):
    m = pfor_config.reduce_mean(X5[i])
    v.assign_add(X5[i] - m)
    return X5[i] - m

  _reset(state)
  with caplog.at_level(logging.WARNING):
    with vectorize.checked(sample=None):
      got = vectorize.pfor(body, 5)
  assert "not checked" in warning_text(caplog)
  x = X5.numpy()
  np.testing.assert_allclose(got, x - x.mean(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(v.numpy(), 0.0, atol=1e-5)


def test_checked_warns_tf1_tensorarray(caplog):
  xs = tf.reshape(tf.range(12, dtype=tf.float32), [4, 3])

  def body(i):
    h, f = tf.raw_ops.TensorArrayV3(size=2, dtype=tf.float32, element_shape=[3])
    f = tf.raw_ops.TensorArrayWriteV3(handle=h, index=0, value=xs[i] * 2.0, flow_in=f)
    f = tf.raw_ops.TensorArrayWriteV3(handle=h, index=1, value=xs[i] + 1.0, flow_in=f)
    return tf.raw_ops.TensorArrayGatherV3(handle=h, indices=[1, 0], flow_in=f,
                                          dtype=tf.float32, element_shape=[3])

  want, _ = loop_ref(body, 4, [])
  with caplog.at_level(logging.WARNING):
    with vectorize.checked(sample=None):
      got = vectorize.pfor(body, 4)
  assert "TensorArray" in warning_text(caplog)
  assert_same(got, want)


def test_checked_parallel_iterations_with_state_answers():
  v = tf.Variable(0.0)
  state = [(v, 0.0)]

  def body(i):
    v.assign_add(X5[i])
    return X5[i] * 2.0, v.read_value()

  want, want_state = loop_ref(body, 5, state)
  _reset(state)
  with vectorize.checked(sample=None):
    got = vectorize.pfor(body, 5, parallel_iterations=2)
  assert_same(got, want)
  assert_same(_finals(state)[0], want_state[0])


def test_checked_warns_parallel_iterations(caplog, recwarn):
  def body(i):
    return X5[i] * 2.0

  with caplog.at_level(logging.WARNING):
    with vectorize.checked(sample=None):
      got = vectorize.pfor(body, 5, parallel_iterations=2)
  np.testing.assert_allclose(got, 2 * X5.numpy())
  assert "not checked" in warning_text(caplog, recwarn)


def test_checked_xla_body_reading_function_argument_warns(caplog):
  v = tf.Variable(0.0)
  state = [(v, 0.0)]

  def make_body(x):
    def body(i):
      v.assign_add(x[i])
      return x[i] * v.read_value()
    return body

  want, want_state = loop_ref(make_body(X5), 5, state)
  _reset(state)
  f = tf.function(lambda x: vectorize.pfor(make_body(x), 5), jit_compile=True)
  with caplog.at_level(logging.WARNING):
    with vectorize.checked(sample=None):
      got = f(X5)
  text = warning_text(caplog)
  assert "not checked" in text and "jit_compile" in text, text
  assert_same(got, want)
  assert_same(_finals(state)[0], want_state[0])


def test_checked_random_values_written_to_variable_not_compared():
  r = tf.Variable(0.0)
  d = tf.Variable(0.0)
  state = [(r, 0.0), (d, 0.0)]

  def body(i):
    r.assign(tf.random.normal([]))
    d.assign_add(X5[i])
    return d.read_value(), r.read_value()

  (want_d, _), (_, want_final_d) = loop_ref(body, 5, state)
  _reset(state)
  with vectorize.checked(sample=None):
    got_d, got_r = vectorize.pfor(body, 5)
  assert_same(got_d, want_d)
  assert got_r.shape == (5,)
  assert_same(d.numpy(), want_final_d)


# ---------------------------------------------------------------------------------------
# More state: scatters, resizes, Operations, seeds, optimizers, state around the call


@pytest.mark.parametrize("mode", TWO)
def test_scatter_add_sub_max_mixed(mode):
  v = tf.Variable(tf.zeros([4]))
  m = tf.Variable(tf.fill([3], -5.0))
  state = [(v, tf.zeros([4])), (m, tf.fill([3], -5.0))]

  def body(i):
    v.scatter_add(tf.IndexedSlices(X5[i][None], tf.reshape(i % 4, [1])))
    v.scatter_sub(tf.IndexedSlices(tf.constant([0.5]), tf.reshape((i + 1) % 4, [1])))
    m.scatter_max(tf.IndexedSlices(X5[i][None] * 2.0, tf.reshape(i % 3, [1])))
    return v.read_value(), tf.reduce_sum(m.read_value())

  _, (fv, fm) = check(body, 5, mode, state)
  np.testing.assert_allclose(fm, [6.0, 0.5, 4.0])


@pytest.mark.parametrize("mode", TWO)
def test_scatter_nd_update_int64_per_example_index(mode):
  v = tf.Variable(tf.zeros([3, 2], tf.int64))
  state = [(v, tf.zeros([3, 2], tf.int64))]

  def body(i):
    row = tf.cast(tf.stack([i, i * i]), tf.int64)
    v.scatter_nd_update([[i % 3]], row[None])
    return tf.reduce_sum(v.read_value(), axis=0)

  _, (final,) = check(body, 5, mode, state)
  np.testing.assert_array_equal(final, [[3, 9], [4, 16], [2, 4]])


@pytest.mark.parametrize("mode", TWO)
def test_variable_of_unknown_shape_resized_per_iteration(mode):
  v = tf.Variable(tf.zeros([0]), shape=tf.TensorShape([None]))
  state = [(v, tf.zeros([0]))]

  def body(i):
    before = tf.reduce_sum(v.read_value())
    v.assign(tf.range(tf.cast(i + 1, tf.float32)))
    return before, tf.size(v.read_value())

  (before, sizes), (final,) = check(body, 4, mode, state)
  np.testing.assert_array_equal(final, [0.0, 1.0, 2.0, 3.0])
  np.testing.assert_allclose(before, [0.0, 0.0, 1.0, 3.0])


@pytest.mark.parametrize("mode", TWO)
def test_body_returns_the_variable_itself(mode):
  v = tf.Variable([1.0, 2.0])
  state = [(v, [1.0, 2.0])]

  def body(i):
    v.assign_add(tf.stack([X5[i], -X5[i]]))
    return v

  want, _ = check(body, 5, mode, state)
  np.testing.assert_allclose(want[:, 0], 1.0 + np.cumsum(X5.numpy()), rtol=1e-6)


def test_body_returning_write_operation_eager():
  """README: an Operation output has run in eager mode, and None is returned."""
  w = tf.Variable(0.0)
  c = tf.Variable(1, dtype=tf.int64)

  def body(i):
    op = w.assign_add(X5[i], read_value=False)
    c.assign(c * 2)
    return op, X5[i]

  with vectorize.checked(sample=None):
    op, xs = vectorize.pfor(body, 5)
  assert op is None
  np.testing.assert_allclose(xs, X5.numpy())
  np.testing.assert_allclose(w.numpy(), X5.numpy().sum(), rtol=1e-6)
  assert c.numpy() == 32


@pytest.mark.parametrize("mode", TWO)
def test_state_written_before_and_read_after_pfor_in_same_function(mode):
  """The function writes v before pfor and reads it after: pfor sees the write, the read
  sees pfor's (the loop's) final state."""
  v = tf.Variable(0.0)

  def body(i):
    v.assign(v * 0.5 + X5[i])
    return v.read_value()

  def program():
    v.assign(4.0)
    out = vectorize.pfor(body, 5)
    return out, v.read_value() + 1.0

  # the reference, eagerly
  v.assign(4.0)
  ref = [body(tf.constant(i)).numpy() for i in range(5)]
  ref_after = v.numpy() + 1.0
  v.assign(-9.0)
  got, after = program() if mode == "eager" else tf.function(program)()
  np.testing.assert_allclose(got, ref, rtol=1e-6)
  np.testing.assert_allclose(after, ref_after, rtol=1e-6)
  np.testing.assert_allclose(v.numpy(), ref_after - 1.0, rtol=1e-6)


@pytest.mark.parametrize("mode", TWO)
def test_keras_dropout_seed_generator_state(mode):
  """Keras 3 Dropout draws stateless numbers from a SeedGenerator whose state variable each
  call advances: deterministic, so pfor must give the loop's masks exactly."""
  layer = keras.layers.Dropout(0.5, seed=3)
  xs = tf.ones([5, 8])
  seed_var = layer.seed_generator.state
  init = seed_var.numpy()
  state = [(seed_var, init)]

  def body(i):
    return layer(xs[i], training=True)

  want, (final,) = check(body, 5, mode, state)
  assert not np.array_equal(want[0], want[1])
  np.testing.assert_array_equal(final, init + np.array([0, 5], init.dtype))


@pytest.mark.parametrize("mode", TWO)
def test_keras_adam_optimizer_per_example(mode):
  xs = tf.constant(np.linspace(-1, 1, 12).reshape(4, 3), tf.float32)
  w = tf.Variable([0.5, -0.5, 0.25])
  opt = keras.optimizers.Adam(learning_rate=0.05)
  opt.build([w])
  slots = [(var, var.numpy()) for var in opt.variables]
  state = [(w, [0.5, -0.5, 0.25])] + slots

  def body(i):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum((w * xs[i] - 0.1) ** 2)
    g = tape.gradient(loss, w)
    opt.apply_gradients([(g, w)])
    return loss

  check(body, 4, mode, state)


@pytest.mark.parametrize("mode", TWO)
def test_keras_batchnorm_inside_model_with_counter_metric(mode):
  xs = tf.reshape(tf.sin(tf.range(40, dtype=tf.float32)), [5, 4, 2])
  model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3, use_bias=False),
                            keras.layers.BatchNormalization(momentum=0.8)])
  metric = keras.metrics.Sum()
  bn = model.layers[-1]
  state = [(bn.moving_mean, tf.zeros([3])), (bn.moving_variance, tf.ones([3])),
           (metric.variables[0], 0.0)]

  def body(i):
    y = model(xs[i], training=True)
    metric.update_state(tf.reduce_sum(y * y))
    return y, metric.result()

  check(body, 5, mode, state)


@pytest.mark.parametrize("mode", EAGER_XLA)
def test_xla_while_per_example_trips_sequential_state(mode):
  v = tf.Variable(1.0)
  c = tf.Variable(0, dtype=tf.int32)
  state = [(v, 1.0), (c, 0)]

  def body(i):
    def step(k):
      v.assign(tf.cos(v) * X5[i] + 1.0)
      c.assign_add(1)
      return [k + 1]
    tf.while_loop(lambda k: k < i % 3 + 1, step, [0], maximum_iterations=3)
    return v.read_value(), c.read_value()

  _, (fv, fc) = check(body, 5, mode, state)
  assert fc == 1 + 2 + 3 + 1 + 2


@pytest.mark.parametrize("mode", EAGER_XLA)
def test_keras_batchnorm_training_xla(mode):
  xs = tf.reshape(tf.cos(tf.range(24, dtype=tf.float32) * 0.7), [4, 3, 2])
  bn = keras.layers.BatchNormalization(momentum=0.9, center=False)
  bn.build((None, 2))
  state = [(bn.moving_mean, tf.zeros([2])), (bn.moving_variance, tf.ones([2]))]

  def body(i):
    return bn(xs[i], training=True)

  check(body, 4, mode, state)


@pytest.mark.parametrize("mode", TWO)
def test_map_fn_with_state_matches_loop(mode):
  """vectorize.map_fn (a drop-in for tf.map_fn) over a body writing a variable."""
  v = tf.Variable(0.0)
  xs = tf.reshape(tf.range(10, dtype=tf.float32), [5, 2])

  def fn(x):
    v.assign(v * 0.5 + tf.reduce_sum(x))
    return v.read_value() * x

  v.assign(0.0)
  want = tf.stack([tf.identity(fn(xs[k])) for k in range(5)])
  want_v = v.numpy()
  v.assign(0.0)
  run = lambda: vectorize.map_fn(fn, xs)
  got = run() if mode == "eager" else tf.function(run)()
  assert_same(got, want)
  assert_same(v.numpy(), want_v)


@pytest.mark.parametrize("mode", TWO)
def test_three_variable_rotation_with_accumulate(mode):
  """a, b, c = b, c, a + x: a read of each before its write, nonlinear in none."""
  a = tf.Variable(1.0)
  b = tf.Variable(2.0)
  c = tf.Variable(3.0)
  state = [(a, 1.0), (b, 2.0), (c, 3.0)]

  def body(i):
    na, nb, nc = b.read_value() + 0.0, c.read_value() + 0.0, a.read_value() + X5[i]
    a.assign(na)
    b.assign(nb)
    c.assign(nc)
    return a.read_value() * b.read_value() - c.read_value()

  check(body, 5, mode, state)


@pytest.mark.parametrize("mode", TWO)
def test_checked_generator_draws_with_deterministic_state(mode):
  """Draws from a tf.random.Generator are not compared (README); the deterministic
  variable beside them must still equal the loop's, and no CheckError is raised."""
  g = tf.random.Generator.from_seed(7)
  d = tf.Variable(0.0)

  def body(i):
    noise = g.normal([2])
    d.assign(d * 0.5 + X5[i])
    return d.read_value(), noise

  d.assign(0.0)
  want = [body(tf.constant(k))[0].numpy() for k in range(5)]
  want_d = d.numpy()
  d.assign(0.0)
  run = lambda: vectorize.pfor(body, 5)
  with vectorize.checked(sample=None):
    got_d, noise = run() if mode == "eager" else tf.function(run)()
  np.testing.assert_allclose(got_d, want, rtol=1e-6)
  np.testing.assert_allclose(d.numpy(), want_d, rtol=1e-6)
  assert noise.shape == (5, 2)


def test_checked_runtime_n_in_function_with_state():
  v = tf.Variable(tf.zeros([2], tf.float64))
  state = [(v, tf.zeros([2], tf.float64))]

  def body(i):
    v.assign(tf.sqrt(v + 1.0) + tf.cast(i, tf.float64))
    return v.read_value()

  want, want_state = loop_ref(body, 6, state)
  _reset(state)
  f = tf.function(lambda k: vectorize.pfor(body, k),
                  input_signature=[tf.TensorSpec([], tf.int32)])
  with vectorize.checked(sample=3):
    got = f(tf.constant(6))
  assert_same(got, want)
  assert_same(v.numpy(), want_state[0])


# ---------------------------------------------------------------------------------------
# Round 3: orders across functions, bigger n, metrics, other entry points


_CANCEL = tf.constant(np.tile(np.array([1e8, 1.0, -1e8, 1.0], np.float32), 10))


@pytest.mark.unchecked
@pytest.mark.parametrize("mode", TWO)
def test_assign_add_final_state_matches_last_output_under_cancellation(mode):
  v = tf.Variable(0.0)
  state = [(v, 0.0)]

  def body(i):
    v.assign_add(_CANCEL[i])
    return v.read_value()

  want, (final,) = loop_ref(body, 40, state)
  assert final == want[-1] == 1.0
  got, (got_final,) = run_pfor(body, 40, mode, state)
  assert_same(got, want)
  assert got_final == got[-1], (got_final, got[-1])


def test_checked_mode_agrees_on_assign_sub_final_state_under_cancellation():
  """The same program, subtracting, under the checked mode: pfor's final state is added in
  the loop's order (it was a reduce_sum, 20.0 against the loop's 1.0, and the check said the
  two differ), so the check passes and the state is the loop's."""
  v = tf.Variable(0.0)

  def body(i):
    v.assign_sub(_CANCEL[i])
    return v.read_value()

  with vectorize.checked(sample=None):
    got = vectorize.pfor(body, 40)
  assert v.numpy() == got[-1] == -1.0


@pytest.mark.parametrize("mode", TWO)
def test_nested_function_reads_after_outer_write(mode):
  """README: reads and writes of one variable are ordered within one function only; here the
  write is in the body and the read in a tf.function it calls, with no data dependency."""
  v = tf.Variable(0.0)
  state = [(v, 0.0)]

  @tf.function
  def inner_read():
    return v.read_value() * 2.0

  @tf.function
  def inner_write(d):
    v.assign_add(d, read_value=False)

  def body(i):
    v.assign_add(X5[i])
    a = inner_read()
    inner_write(X5[i] * 10.0)
    return a, v.read_value()

  (a, b), (final,) = check(body, 5, mode, state)
  np.testing.assert_allclose(final, 11 * X5.numpy().sum(), rtol=1e-5)


def test_xla_nonlinear_state_n_beyond_unroll_limit():
  """README: under XLA a sequential body is unrolled for a static n up to 64; n = 70 here."""
  xs = tf.constant(np.cos(np.arange(70)).astype(np.float32))
  v = tf.Variable(0.0)
  state = [(v, 0.0)]

  def body(i):
    v.assign(tf.tanh(v) + xs[i])
    return v.read_value()

  check(body, 70, "xla", state)


@pytest.mark.parametrize("mode", TWO)
def test_keras_auc_metric_update_state(mode):
  auc = keras.metrics.AUC(num_thresholds=5)
  yt = tf.constant([0.0, 1.0, 1.0, 0.0, 1.0, 0.0])
  yp = tf.constant([0.1, 0.8, 0.4, 0.6, 0.9, 0.2])
  state = [(w, np.zeros_like(w.numpy())) for w in auc.variables]

  def body(i):
    auc.update_state(yt[i:i + 1], yp[i:i + 1])
    return auc.result()

  check(body, 6, mode, state)


@pytest.mark.parametrize("mode", TWO)
def test_vectorized_map_with_state(mode):
  v = tf.Variable(0.0)
  xs = tf.constant(np.cos(np.arange(6)).astype(np.float32))

  def fn(e):
    v.assign(v * 0.5 + e)
    return v.read_value() + e

  v.assign(0.0)
  want = np.array([fn(xs[k]).numpy() for k in range(6)])
  want_v = v.numpy()
  v.assign(0.0)
  run = lambda: vectorize.vectorized_map(fn, xs)
  got = run() if mode == "eager" else tf.function(run)()
  assert_same(np.asarray(got), want)
  assert_same(v.numpy(), want_v)


def test_pfor_inside_pfor_body_writes_state():
  v = tf.Variable(0.0)
  state = [(v, 0.0)]

  def outer(j):
    def inner(k):
      v.assign_add(X5[k] * tf.cast(j + 1, tf.float32))
      return v.read_value()
    return vectorize.pfor(inner, 3)

  def loop_outer(j):
    rows = []
    for k in range(3):
      v.assign_add(X5[k] * tf.cast(j + 1, tf.float32))
      rows.append(v.read_value())
    return tf.stack(rows)

  want, want_state = loop_ref(loop_outer, 3, state)
  got, got_state = run_pfor(outer, 3, "eager", state)
  assert_same(got, want)
  assert_same(got_state[0], want_state[0])


def test_checked_trace_only_has_no_side_effects():
  """Tracing (no call) a function whose pfor writes state, in the checked mode: the check of an
  XLA conversion happens at trace time (README), and must leave the variables alone."""
  v = tf.Variable(3.0)

  def body(i):
    v.assign(tf.tanh(v) + X5[i])
    return v.read_value()

  with vectorize.checked(sample=None):
    tf.function(lambda: vectorize.pfor(body, 4), jit_compile=True).get_concrete_function()
    tf.function(lambda: vectorize.pfor(body, 4)).get_concrete_function()
  assert v.numpy() == 3.0


def test_two_pfors_and_a_loop_of_pfors_in_one_function_checked():
  v = tf.Variable(0.0)
  state = [(v, 0.0)]

  def body(i):
    v.assign(tf.sin(v) + X5[i])
    return v.read_value()

  @tf.function
  def program():
    a = vectorize.pfor(body, 5)
    b = vectorize.pfor(body, 5)
    def step(k, acc):
      return k + 1, acc + vectorize.pfor(body, 5)
    c = tf.while_loop(lambda k, acc: k < 2, step, (0, tf.zeros([5])))[1]
    return a, b, c

  _reset(state)
  rows = []
  for _ in range(4):
    rows.append(np.array([body(tf.constant(i)).numpy() for i in range(5)]))
  want_v = v.numpy()
  _reset(state)
  with vectorize.checked(sample=None):
    a, b, c = program()
  assert_same(np.asarray(a), rows[0])
  assert_same(np.asarray(b), rows[1])
  np.testing.assert_allclose(c, rows[2] + rows[3], rtol=1e-5, atol=1e-6)
  assert_same(v.numpy(), want_v)


def test_data_map_and_batch_with_stateful_fn():
  c = tf.Variable(0.0)
  xs = tf.constant(np.cos(np.arange(6)).astype(np.float32))

  def fn(e):
    c.assign(c * 0.5 + e)
    return c.read_value() + e

  ds = tf.data.Dataset.from_tensor_slices(xs)
  c.assign(0.0)
  want = np.concatenate([b.numpy() for b in ds.map(fn).batch(4)])
  want_c = c.numpy()
  c.assign(0.0)
  got = np.concatenate([b.numpy() for b in ds.apply(vectorize.data.map_and_batch(fn, 4))])
  assert_same(got, want)
  assert_same(c.numpy(), want_c)


def test_per_example_gradients_with_batchnorm_training_state():
  xs = tf.reshape(tf.sin(tf.range(48, dtype=tf.float32)), [4, 6, 2])
  ys = tf.reshape(tf.cos(tf.range(24, dtype=tf.float32)), [4, 6, 1])
  keras.utils.set_random_seed(1)
  model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3),
                            keras.layers.BatchNormalization(momentum=0.5),
                            keras.layers.Dense(1)])
  bn = model.layers[1]

  def loss_fn(xe, ye):
    return tf.reduce_mean((model(xe, training=True) - ye) ** 2)

  init = [w.numpy() for w in model.variables]
  ref = []
  for k in range(4):
    with tf.GradientTape() as tape:
      loss = loss_fn(xs[k], ys[k])
    ref.append(tape.gradient(loss, model.trainable_variables))
  want_mm, want_mv = bn.moving_mean.numpy(), bn.moving_variance.numpy()
  for w, w0 in zip(model.variables, init):
    w.assign(w0)
  grads = vectorize.per_example_gradients(loss_fn, model.trainable_variables, xs, ys)
  for j, g in enumerate(grads):
    np.testing.assert_allclose(g, np.stack([r[j] for r in ref]), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(bn.moving_mean.numpy(), want_mm, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(bn.moving_variance.numpy(), want_mv, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", EAGER_XLA)
def test_cond_on_state_predicate(mode):
  u = tf.Variable(0.0)
  state = [(u, 0.0)]

  def body(i):
    return tf.cond(u > 1.0, lambda: u.assign(u - 2.0), lambda: u.assign_add(X5[i] + 1.0))

  want, _ = check(body, 5, mode, state)
  np.testing.assert_allclose(want, [1.5, -0.5, 2.5, 0.5, 1.75])


@pytest.mark.parametrize("mode", TWO)
def test_gather_and_sparse_read_after_scatter(mode):
  t = tf.Variable(tf.zeros([3]))
  state = [(t, tf.zeros([3]))]

  def body(i):
    t.scatter_nd_add([[i % 3]], [X5[i]])
    return tf.gather(t, (i + 1) % 3), t.sparse_read(i % 3)

  check(body, 5, mode, state)


# ---------------------------------------------------------------------------------------
# Resources other than variables: iterators, queues, hash tables


@pytest.mark.unchecked
def test_iterator_get_next_per_iteration_unchecked():
  it = iter(tf.data.Dataset.range(100))

  def body(i):
    return it.get_next() * 10 + tf.cast(i, tf.int64)

  got = vectorize.pfor(body, 4)
  np.testing.assert_array_equal(got, [0, 11, 22, 33])
  assert next(it).numpy() == 4


def test_checked_iterator_get_next_per_iteration(caplog):
  """The check's loop would pull the iterator again: not checked, with a warning (it was a
  false CheckError at IteratorGetNext, and the iterator moved on by 2n)."""
  it = iter(tf.data.Dataset.range(100))

  def body(i):
    return it.get_next() * 10 + tf.cast(i, tf.int64)

  with caplog.at_level(logging.WARNING):
    with vectorize.checked(sample=None):
      got = vectorize.pfor(body, 4)
  np.testing.assert_array_equal(got, [0, 11, 22, 33])
  assert next(it).numpy() == 4
  assert "not checked" in warning_text(caplog)


@pytest.mark.unchecked
def test_queue_enqueue_per_iteration_unchecked():
  q = tf.queue.FIFOQueue(100, tf.float32, shapes=[[]])

  def body(i):
    q.enqueue(X5[i] * 2.0)
    return X5[i]

  got = vectorize.pfor(body, 5)
  np.testing.assert_allclose(got, X5.numpy())
  np.testing.assert_allclose(q.dequeue_many(q.size()), 2 * X5.numpy())


def test_checked_queue_enqueue_per_iteration(caplog):
  q = tf.queue.FIFOQueue(100, tf.float32, shapes=[[]])

  def body(i):
    q.enqueue(X5[i] * 2.0)
    return X5[i]

  with caplog.at_level(logging.WARNING):
    with vectorize.checked(sample=None):
      got = vectorize.pfor(body, 5)
  np.testing.assert_allclose(got, X5.numpy())
  assert q.size().numpy() == 5
  assert "not checked" in warning_text(caplog)


@pytest.mark.parametrize("mode", TWO)
def test_hash_table_read_modify_write_counter(mode):
  keys = tf.constant([1, 2, 1, 3, 1], tf.int64)
  holder = {}

  def body(i):
    t = holder["t"]
    old = t.lookup(keys[i])
    t.insert(keys[i], old + X5[i])
    return old

  def fresh():
    holder["t"] = tf.lookup.experimental.MutableHashTable(tf.int64, tf.float32, 0.0)
    return holder["t"]

  t = fresh()
  want = np.array([body(tf.constant(i)).numpy() for i in range(5)])
  wk, wv = t.export()
  t = fresh()
  run = lambda: vectorize.pfor(body, 5)
  got = run() if mode == "eager" else tf.function(run)()
  gk, gv = t.export()
  assert_same(np.asarray(got), want)
  assert sorted(zip(gk.numpy(), gv.numpy())) == sorted(zip(wk.numpy(), wv.numpy()))


@pytest.mark.parametrize("mode", EAGER_XLA)
def test_parallel_iterations_chunks_nonlinear_state(mode):
  v = tf.Variable(0.5)
  state = [(v, 0.5)]

  def body(i):
    v.assign(tf.cos(v) * 0.9 + X5[i])
    return v.read_value(), X5[i] * v.read_value()

  check(body, 5, mode, state, parallel_iterations=2)


@pytest.mark.parametrize("mode", ["xla", "function"])
def test_n_zero_stateful_compiled(mode):
  v = tf.Variable(2.0)
  c = tf.Variable(5, dtype=tf.int64)
  state = [(v, 2.0), (c, 5)]

  def body(i):
    v.assign(tf.sin(v) + X5[i])
    c.assign_add(1)
    return v.read_value(), c.read_value()

  empty = (tf.zeros([0]), tf.zeros([0], tf.int64))
  check(body, 0, mode, state, empty=empty)
