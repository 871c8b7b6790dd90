"""User programs: new closures on every call, autograph bodies, tf.function / XLA.

Every test compares vectorize's result with the body run per example in a Python loop and
stacked (tf.stack, or tf.ragged.stack for ragged results).
"""

import numpy as np
import pytest
import tensorflow as tf

import vectorize


# ----------------------------------------------------------------------------- helpers

def _rng(seed):
  return np.random.RandomState(seed)


def loop_map(fn, elems):
  """The reference: fn on each slice of elems, stacked."""
  flat = tf.nest.flatten(elems)
  n = int(flat[0].shape[0])
  outs = [fn(tf.nest.map_structure(lambda e: e[i], elems)) for i in range(n)]
  if n == 0:
    raise ValueError("loop_map needs n > 0")
  return tf.nest.map_structure(lambda *xs: tf.stack(xs), *outs)


def loop_pfor(fn, n):
  outs = [fn(tf.constant(i)) for i in range(n)]
  return tf.nest.map_structure(lambda *xs: tf.stack(xs), *outs)


def assert_same(got, want):
  tf.nest.assert_same_structure(got, want)
  for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
    if isinstance(w, tf.RaggedTensor):
      assert isinstance(g, tf.RaggedTensor), type(g)
      assert g.to_list() == w.to_list()
      continue
    g = tf.convert_to_tensor(g)
    w = tf.convert_to_tensor(w)
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    assert g.shape.as_list() == w.shape.as_list(), (g.shape, w.shape)
    gn, wn = g.numpy(), w.numpy()
    if w.dtype in (tf.float32, tf.complex64):
      np.testing.assert_allclose(gn, wn, rtol=1e-5, atol=1e-5)
    elif w.dtype in (tf.float64, tf.complex128):
      np.testing.assert_allclose(gn, wn, rtol=1e-10, atol=1e-10)
    else:
      np.testing.assert_array_equal(gn, wn)


# TensorCircuit's style: a new closure on every call, over new tensors.
def tc_vmap(f):
  return lambda xs, w: vectorize.vectorized_map(lambda x: f(x, w), xs, warn=False)


# ------------------------------------------------------- 1. new closures, eager calls

def test_new_closure_small_float32_capture_each_call():
  f = lambda x, w: tf.tanh(x * w[0] + w[1]) - w[2] * x ** 2
  vf = tc_vmap(f)
  for k in range(4):
    r = _rng(k)
    xs = tf.constant(r.randn(6, 5).astype("float32"))
    w = tf.constant(r.randn(3).astype("float32"))
    assert_same(vf(xs, w), loop_map(lambda x: f(x, w), xs))


def test_new_closure_large_float32_matrix_capture():
  def f(x, w):
    h = tf.linalg.matvec(w, x)
    return tf.nn.relu(h) + tf.reduce_sum(w, axis=0)[:64] * 1e-3
  vf = tc_vmap(f)
  for k in range(3):
    r = _rng(10 + k)
    xs = tf.constant(r.randn(5, 96).astype("float32"))
    w = tf.constant(r.randn(64, 96).astype("float32"))   # 6144 elements
    assert_same(vf(xs, w), loop_map(lambda x: f(x, w), xs))


def test_new_closure_float64_capture():
  f = lambda x, w: tf.reduce_logsumexp(x[:, None] * w[None, :], axis=1)
  vf = tc_vmap(f)
  for k in range(4):
    r = _rng(20 + k)
    xs = tf.constant(r.randn(4, 7))
    w = tf.constant(r.randn(9))
    out = vf(xs, w)
    assert out.dtype == tf.float64
    assert_same(out, loop_map(lambda x: f(x, w), xs))


def test_new_closure_complex64_capture():
  def f(x, w):
    return tf.reduce_sum(x * tf.math.conj(w)) + tf.exp(1j * tf.cast(tf.math.real(x[0]), tf.complex64))
  vf = tc_vmap(f)
  for k in range(4):
    r = _rng(30 + k)
    xs = tf.constant((r.randn(5, 8) + 1j * r.randn(5, 8)).astype("complex64"))
    w = tf.constant((r.randn(8) + 1j * r.randn(8)).astype("complex64"))
    assert_same(vf(xs, w), loop_map(lambda x: f(x, w), xs))


def test_new_closure_int32_small_capture_values_change():
  f = lambda x, w: x * w[0] + w[1] - tf.reduce_max(x) // w[2]
  vf = tc_vmap(f)
  for k, w in enumerate([[1, 2, 3], [4, -5, 2], [7, 0, 1], [-3, 3, 5]]):
    xs = tf.constant(_rng(40 + k).randint(-20, 20, size=(6, 4)).astype("int32"))
    w = tf.constant(w, tf.int32)
    assert_same(vf(xs, w), loop_map(lambda x: f(x, w), xs))


def test_new_closure_int64_large_capture():
  f = lambda x, w: tf.reduce_sum(tf.math.floormod(w, x + 7))
  vf = tc_vmap(f)
  for k in range(3):
    r = _rng(50 + k)
    xs = tf.constant(r.randint(1, 50, size=(5,)).astype("int64"))
    w = tf.constant(r.randint(0, 10**6, size=(3000,)).astype("int64"))
    assert_same(vf(xs, w), loop_map(lambda x: f(x, w), xs))


def test_new_closure_bool_mask_capture():
  f = lambda x, m: tf.where(m, x, -x) + tf.cast(tf.reduce_any(m & (x > 0)), tf.float32)
  vf = tc_vmap(f)
  masks = [[True, False, True, False], [False, False, False, False],
           [True, True, True, True], [False, True, True, False]]
  for k, m in enumerate(masks):
    xs = tf.constant(_rng(60 + k).randn(5, 4).astype("float32"))
    m = tf.constant(m)
    assert_same(vf(xs, m), loop_map(lambda x: f(x, m), xs))


def test_new_closure_captured_shape_tensor_changes_value():
  f = lambda x, shape: tf.reduce_sum(tf.reshape(x, shape), axis=-1)
  vf = tc_vmap(f)
  for k, shape in enumerate([[2, 6], [3, 4], [4, 3], [12, 1], [2, 6]]):
    xs = tf.constant(_rng(80 + k).randn(3, 12).astype("float32"))
    shape_t = tf.constant(shape, tf.int32)
    assert_same(vf(xs, shape_t), loop_map(lambda x: f(x, shape_t), xs))


def test_new_closure_captured_gather_indices_change():
  f = lambda x, idx: tf.gather(x, idx) * 2.0
  vf = tc_vmap(f)
  for k, idx in enumerate([[0, 1, 2], [2, 2, 0], [4, 3, 1], [1, 0, 4]]):
    xs = tf.constant(_rng(90 + k).randn(5, 5).astype("float32"))
    idx = tf.constant(idx, tf.int32)
    assert_same(vf(xs, idx), loop_map(lambda x: f(x, idx), xs))


def test_new_closure_captured_large_gather_indices():
  f = lambda x, idx: tf.reduce_sum(tf.gather(x, idx)) + tf.gather(x, idx[:3])
  vf = tc_vmap(f)
  for k in range(3):
    r = _rng(100 + k)
    xs = tf.constant(r.randn(4, 50).astype("float32"))
    idx = tf.constant(r.randint(0, 50, size=(4000,)).astype("int64"))
    assert_same(vf(xs, idx), loop_map(lambda x: f(x, idx), xs))


def test_new_closure_large_int_table_slice_used_as_shape():
  # A table of layer sizes (and other ints) captured as one tensor; the body reads its
  # first two entries as the reshape target.
  f = lambda x, table: tf.reduce_sum(tf.reshape(x, table[:2]), axis=-1)
  vf = tc_vmap(f)
  for k, shape in enumerate([[2, 6], [3, 4], [6, 2]]):
    xs = tf.constant(_rng(115 + k).randn(3, 12).astype("float32"))
    table = tf.constant(shape + list(range(300)), tf.int32)
    assert_same(vf(xs, table), loop_map(lambda x: f(x, table), xs))


def test_new_closure_captured_axis_tensor_changes():
  f = lambda x, axis: tf.reduce_max(x, axis=axis)
  vf = tc_vmap(f)
  for k, axis in enumerate([0, 1, 0, -1]):
    xs = tf.constant(_rng(110 + k).randn(4, 3, 3).astype("float32"))
    axis_t = tf.constant(axis)
    assert_same(vf(xs, axis_t), loop_map(lambda x: f(x, axis_t), xs))


def test_new_closure_captured_roll_shift_and_tile_multiples():
  # (shift and multiples are separate tensors: tf.tile(..., p[1:]) of a captured p with a
  # negative p[0] fails in TensorFlow's own graph tracing, vectorize aside.)
  def f(x, p):
    shift, multiples = p
    return tf.tile(tf.roll(x, shift=shift, axis=0), multiples)
  vf = tc_vmap(f)
  for k, (s, m) in enumerate([(1, [2]), (3, [1]), (-2, [3]), (0, [2])]):
    xs = tf.constant(_rng(120 + k).randn(4, 5).astype("float32"))
    p = (tf.constant(s, tf.int32), tf.constant(m, tf.int32))
    assert_same(vf(xs, p), loop_map(lambda x: f(x, p), xs))


def test_new_closure_captured_one_hot_depth_and_range_limit():
  def f(x, depth):
    return tf.one_hot(x, depth) + tf.cast(tf.range(depth), tf.float32)[None, :] * 0.5
  vf = tc_vmap(f)
  for k, depth in enumerate([3, 5, 4, 5]):
    xs = tf.constant(_rng(130 + k).randint(0, depth, size=(6, 2)).astype("int32"))
    d = tf.constant(depth)
    assert_same(vf(xs, d), loop_map(lambda x: f(x, d), xs))


def test_new_closure_captured_python_numbers_change():
  vmap = lambda f: lambda xs: vectorize.vectorized_map(f, xs, warn=False)
  for k, (scale, power) in enumerate([(0.5, 2), (2.0, 3), (-1.5, 2), (0.25, 1)]):
    xs = tf.constant(_rng(140 + k).randn(5, 3).astype("float32"))
    f = lambda x: scale * x ** power + float(k)
    assert_same(vmap(f)(xs), loop_map(f, xs))


def test_new_closure_captures_the_mapped_tensor_too():
  def run(xs):
    f = lambda x: (x - tf.reduce_mean(xs, axis=0)) / (tf.math.reduce_std(xs, axis=0) + 1e-3)
    return vectorize.vectorized_map(f, xs, warn=False), loop_map(f, xs)
  for k in range(4):
    xs = tf.constant(_rng(170 + k).randn(6, 3).astype("float32") * (k + 1))
    got, want = run(xs)
    assert_same(got, want)


def test_new_closure_same_tensor_captured_twice_then_two_tensors():
  f = lambda x, a, b: x * a - b
  for k in range(4):
    r = _rng(180 + k)
    xs = tf.constant(r.randn(5, 3).astype("float32"))
    a = tf.constant(r.randn(3).astype("float32"))
    b = a if k % 2 == 0 else tf.constant(r.randn(3).astype("float32"))
    got = vectorize.vectorized_map(lambda x: f(x, a, b), xs, warn=False)
    assert_same(got, loop_map(lambda x: f(x, a, b), xs))


def test_new_closure_tuple_elems():
  f = lambda xy, w: (xy[0] @ w, tf.reduce_sum(xy[1] * xy[0][0, :2]))
  vf = tc_vmap(f)
  for k in range(3):
    r = _rng(200 + k)
    xs = (tf.constant(r.randn(4, 2, 3).astype("float32")),
          tf.constant(r.randn(4, 2).astype("float32")))
    w = tf.constant(r.randn(3, 5).astype("float32"))
    assert_same(vf(xs, w), loop_map(lambda xy: f(xy, w), xs))


def test_new_closure_dict_elems_and_dict_output():
  def f(d, w):
    return {"score": tf.reduce_sum(d["feat"] * w) + tf.cast(d["id"], tf.float32),
            "id2": d["id"] * 2, "flag": d["id"] > 2}
  vf = tc_vmap(f)
  for k in range(3):
    r = _rng(210 + k)
    d = {"feat": tf.constant(r.randn(5, 4).astype("float32")),
         "id": tf.constant(r.randint(0, 5, size=(5,)).astype("int64"))}
    w = tf.constant(r.randn(4).astype("float32"))
    assert_same(vf(d, w), loop_map(lambda e: f(e, w), d))


def test_new_closure_pfor_over_new_tensors():
  for k in range(4):
    r = _rng(220 + k)
    xs = tf.constant(r.randn(6, 3).astype("float32"))
    w = tf.constant(r.randn(3, 3).astype("float32"))
    body = lambda i: tf.linalg.matvec(w, tf.gather(xs, i)) + tf.cast(i, tf.float32)
    assert_same(vectorize.pfor(body, 6, warn=False), loop_pfor(body, 6))


def test_new_closure_pfor_n_zero_then_nonzero():
  for k, n in enumerate([0, 3, 0, 4]):
    r = _rng(230 + k)
    xs = tf.constant(r.randn(max(n, 1), 2).astype("float32"))
    w = tf.constant(r.randn(2).astype("float32"))
    body = lambda i: (xs[i] * w, tf.reduce_sum(xs[i]) > 0)
    got = vectorize.pfor(body, n, warn=False)
    if n == 0:
      assert got[0].shape.as_list() == [0, 2] and got[0].dtype == tf.float32
      assert got[1].shape.as_list() == [0] and got[1].dtype == tf.bool
    else:
      assert_same(got, loop_pfor(body, n))


def test_new_closure_gradient_wrt_captured_tensor():
  f = lambda x, w: tf.reduce_sum(tf.sin(x * w[:3]) * w[3:])
  for k in range(4):
    r = _rng(250 + k)
    xs = tf.constant(r.randn(5, 3).astype("float32"))
    w = tf.constant(r.randn(6).astype("float32"))
    with tf.GradientTape() as tape:
      tape.watch(w)
      out = vectorize.vectorized_map(lambda x: f(x, w), xs, warn=False)
      loss = tf.reduce_sum(out ** 2)
    g = tape.gradient(loss, w)
    with tf.GradientTape() as tape:
      tape.watch(w)
      ref = loop_map(lambda x: f(x, w), xs)
      ref_loss = tf.reduce_sum(ref ** 2)
    assert_same(out, ref)
    assert_same(g, tape.gradient(ref_loss, w))


def test_new_closure_gradient_wrt_captured_and_mapped():
  for k in range(3):
    r = _rng(260 + k)
    xs = tf.constant(r.randn(4, 5).astype("float64"))
    w = tf.constant(r.randn(5, 2).astype("float64"))
    f = lambda x: tf.nn.softplus(tf.linalg.matvec(w, x, transpose_a=True))
    with tf.GradientTape(persistent=True) as tape:
      tape.watch([xs, w])
      loss = tf.reduce_sum(vectorize.vectorized_map(f, xs, warn=False))
      ref = tf.reduce_sum(loop_map(f, xs))
    assert_same(loss, ref)
    assert_same(tape.gradient(loss, [xs, w]), tape.gradient(ref, [xs, w]))


def test_captured_variable_assigned_between_calls():
  v = tf.Variable(tf.zeros([4]))
  f = lambda x: tf.reduce_sum(x * v) + v[0]
  xs = tf.constant(_rng(270).randn(5, 4).astype("float32"))
  for k in range(4):
    v.assign(_rng(271 + k).randn(4).astype("float32"))
    assert_same(vectorize.vectorized_map(f, xs, warn=False), loop_map(f, xs))


def test_new_closure_new_variable_each_call():
  for k in range(3):
    r = _rng(280 + k)
    v = tf.Variable(r.randn(3, 2).astype("float32"))
    xs = tf.constant(r.randn(4, 3).astype("float32"))
    f = lambda x: tf.linalg.matvec(v, x, transpose_a=True)
    assert_same(vectorize.vectorized_map(f, xs, warn=False), loop_map(f, xs))
    v.assign_add(tf.ones_like(v))
    assert_same(vectorize.vectorized_map(f, xs, warn=False), loop_map(f, xs))


def test_gradient_wrt_captured_variable_across_calls():
  v = tf.Variable(tf.ones([3]))
  for k in range(3):
    v.assign(_rng(290 + k).randn(3).astype("float32"))
    xs = tf.constant(_rng(295 + k).randn(4, 3).astype("float32"))
    f = lambda x: tf.reduce_sum(tf.exp(x * v))
    with tf.GradientTape() as tape:
      got = tf.reduce_sum(vectorize.vectorized_map(f, xs, warn=False))
    g = tape.gradient(got, v)
    with tf.GradientTape() as tape:
      want = tf.reduce_sum(loop_map(f, xs))
    assert_same(got, want)
    assert_same(g, tape.gradient(want, v))


def test_gradient_wrt_variable_explicitly_watched_across_calls():
  v = tf.Variable([1.0, 2.0, 3.0])
  for k in range(3):
    v.assign(_rng(297 + k).randn(3).astype("float32"))
    xs = tf.constant(_rng(298 + k).randn(4, 3).astype("float32"))
    f = lambda x: tf.reduce_sum(tf.sin(x * v))
    with tf.GradientTape(watch_accessed_variables=False) as tape:
      tape.watch(v)
      got = tf.reduce_sum(vectorize.vectorized_map(f, xs, warn=False))
    g = tape.gradient(got, v)
    with tf.GradientTape() as tape:
      want = tf.reduce_sum(loop_map(f, xs))
    assert_same(got, want)
    assert_same(g, tape.gradient(want, v))


def test_keras_custom_training_loop_gradients_every_step():
  import keras
  keras.utils.set_random_seed(299)
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                            keras.layers.Dense(1)])
  xs = tf.constant(_rng(299).randn(6, 3).astype("float32"))
  ys = tf.constant(_rng(300).randn(6, 1).astype("float32"))
  per_example = lambda xy: tf.reduce_sum((model(xy[0][None])[0] - xy[1]) ** 2)
  for step in range(3):
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(vectorize.vectorized_map(per_example, (xs, ys), warn=False))
    grads = tape.gradient(loss, model.trainable_variables)
    with tf.GradientTape() as tape:
      ref = tf.reduce_mean(loop_map(per_example, (xs, ys)))
    ref_grads = tape.gradient(ref, model.trainable_variables)
    assert_same(loss, ref)
    assert all(g is not None for g in grads), f"step {step}: None gradients"
    assert_same(grads, ref_grads)
    for var, g in zip(model.trainable_variables, ref_grads):
      var.assign_sub(0.1 * g)


def test_keras_dense_layer_in_body_weights_changed():
  import keras
  layer = keras.layers.Dense(4, activation="tanh")
  layer.build((3,))
  f = lambda x: layer(x[None, :])[0]
  for k in range(3):
    r = _rng(300 + k)
    layer.set_weights([r.randn(3, 4).astype("float32"), r.randn(4).astype("float32")])
    xs = tf.constant(r.randn(5, 3).astype("float32"))
    assert_same(vectorize.vectorized_map(f, xs, warn=False), loop_map(f, xs))


def test_keras_new_layer_each_call_in_new_closure():
  import keras
  for k in range(3):
    keras.utils.set_random_seed(310 + k)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.LayerNormalization(), keras.layers.Dense(2)])
    xs = tf.constant(_rng(310 + k).randn(4, 6).astype("float32"))
    f = lambda x: model(x[None])[0]
    assert_same(vectorize.vectorized_map(f, xs, warn=False), loop_map(f, xs))


def test_new_closure_captured_large_numpy_array_changes():
  # numpy arrays (not tensors) captured: they become constants of the traced program.
  for k in range(3):
    table = _rng(600 + k).randn(5000).astype("float32")
    xs = tf.constant(_rng(605 + k).randint(0, 5000, size=(4, 3)).astype("int32"))
    f = lambda x: tf.gather(table, x) + table[:3]
    assert_same(vectorize.vectorized_map(f, xs, warn=False), loop_map(f, xs))


def test_new_closure_stateless_random_seed_changes():
  for k in range(4):
    seed = tf.constant([k, 7 * k + 1], tf.int32)
    xs = tf.constant(_rng(620 + k).randn(5, 3).astype("float32"))
    f = lambda x: x + tf.random.stateless_normal([3], seed=seed)
    assert_same(vectorize.vectorized_map(f, xs, warn=False), loop_map(f, xs))


def test_new_closure_mapped_shape_changes_between_calls():
  vf = tc_vmap(lambda x, w: tf.reduce_sum(x * w, axis=-1))
  for k, n in enumerate([5, 7, 1, 2, 5]):
    r = _rng(630 + k)
    xs = tf.constant(r.randn(n, 2, 3).astype("float32"))
    w = tf.constant(r.randn(3).astype("float32"))
    assert_same(vf(xs, w), loop_map(lambda x: tf.reduce_sum(x * w, axis=-1), xs))


def test_new_closure_captured_shape_changes_between_calls():
  vf = tc_vmap(lambda x, w: tf.linalg.matvec(w, x))
  for k, m in enumerate([2, 5, 3, 2]):
    r = _rng(640 + k)
    xs = tf.constant(r.randn(4, 3).astype("float32"))
    w = tf.constant(r.randn(m, 3).astype("float32"))
    assert_same(vf(xs, w), loop_map(lambda x: tf.linalg.matvec(w, x), xs))


def test_same_pfor_body_tensor_iters_change():
  xs = tf.constant(_rng(670).randn(6, 2).astype("float32"))
  body = lambda i: xs[i] * tf.cast(i + 1, tf.float32)
  for n in [6, 2, 0, 4]:
    got = vectorize.pfor(body, tf.constant(n), warn=False)
    if n == 0:
      assert got.shape.as_list()[0] == 0
    else:
      assert_same(got, loop_pfor(body, n))


def test_new_closure_pfor_config_reduce_mean():
  for k in range(3):
    xs = tf.constant(_rng(680 + k).randn(5, 3).astype("float32"))
    w = tf.constant(_rng(685 + k).randn(3).astype("float32"))
    def body(i, pfor_config):
      x = xs[i] * w
      return x - pfor_config.reduce_mean(x)
    got = vectorize.pfor(body, 5, warn=False)
    want = xs * w - tf.reduce_mean(xs * w, axis=0)
    assert_same(got, want)


def test_new_closure_string_capture():
  for k, sep in enumerate(["-", "::", "-", "+"]):
    xs = tf.constant([["a", "b"], ["cc", "d"], ["e", "fff"]])
    sep_t = tf.constant(sep)
    f = lambda x: tf.strings.join([x[0], sep_t, x[1]])
    assert_same(vectorize.vectorized_map(f, xs, warn=False), loop_map(f, xs))


def test_new_closure_map_fn_with_signature():
  for k in range(3):
    r = _rng(320 + k)
    xs = tf.constant(r.randn(5, 4).astype("float32"))
    thr = tf.constant(float(r.randn()))
    f = lambda x: (tf.reduce_sum(tf.cast(x > thr, tf.int32)), tf.reduce_max(x) - thr)
    got = vectorize.map_fn(f, xs, fn_output_signature=(tf.int32, tf.float32))
    assert_same(got, loop_map(f, xs))


def test_new_closure_ragged_output_from_captured_threshold():
  for k in range(3):
    r = _rng(330 + k)
    xs = tf.constant(r.randn(5, 6).astype("float32"))
    thr = tf.constant(float(k) * 0.4 - 0.4)
    f = lambda x: tf.boolean_mask(x, x > thr)
    got = vectorize.vectorized_map(f, xs, warn=False)
    want = tf.ragged.stack([f(xs[i]) for i in range(5)])
    assert_same(got, want)


def test_jacobian_fn_new_closure_each_call():
  for k in range(3):
    r = _rng(340 + k)
    w = tf.constant(r.randn(3, 3).astype("float32"))
    x = tf.constant(r.randn(3).astype("float32"))
    f = lambda x: tf.tanh(tf.linalg.matvec(w, x))
    got = vectorize.jacobian_fn(f)(x)
    with tf.GradientTape(persistent=True) as tape:
      tape.watch(x)
      y = f(x)
    assert_same(got, tape.jacobian(y, x, experimental_use_pfor=False))


def test_per_example_gradients_new_closure_new_variables():
  for k in range(3):
    r = _rng(360 + k)
    w = tf.Variable(r.randn(3, 2).astype("float32"))
    b = tf.Variable(r.randn(2).astype("float32"))
    xs = tf.constant(r.randn(4, 3).astype("float32"))
    ys = tf.constant(r.randn(4, 2).astype("float32"))
    scale = float(k + 1)
    def loss(x, y):
      return scale * tf.reduce_sum((tf.linalg.matvec(w, x, transpose_a=True) + b - y) ** 2)
    got = vectorize.per_example_gradients(loss, [w, b], xs, ys)
    refs = []
    for i in range(4):
      with tf.GradientTape() as tape:
        l = loss(xs[i], ys[i])
      refs.append(tape.gradient(l, [w, b]))
    want = [tf.stack([g[j] for g in refs]) for j in range(2)]
    assert_same(list(got), want)


# ------------------------------------------------ 2. autograph control flow and state

def test_python_while_on_tensor_collatz():
  def steps(n):
    count = tf.constant(0)
    while n != 1:
      if n % 2 == 0:
        n = n // 2
      else:
        n = 3 * n + 1
      count += 1
    return count
  ns = tf.constant([1, 2, 3, 6, 7, 27, 9], tf.int32)
  assert_same(vectorize.vectorized_map(steps, ns, warn=False), loop_map(steps, ns))
  assert vectorize.vectorized_map(steps, ns, warn=False).numpy()[5] == 111


def test_python_for_over_tf_range_per_example_length():
  def f(e):
    x, n = e
    acc = tf.zeros([])
    for i in tf.range(n):
      acc += x[i] * tf.cast(i + 1, tf.float32)
    return acc
  xs = tf.constant(_rng(410).randn(6, 5).astype("float32"))
  ns = tf.constant([0, 5, 2, 3, 1, 4])
  assert_same(vectorize.vectorized_map(f, (xs, ns), warn=False), loop_map(f, (xs, ns)))


# (A Python `assert` on a tensor is not converted by autograph in TF 2.21 by default, in a
# plain tf.function either, so this body uses a tf.debugging assert, as users then do.)
def test_debugging_assert_in_body_fails_like_loop():
  def f(x):
    tf.debugging.assert_non_negative(x, message="negative input")
    return tf.sqrt(x)
  xs = tf.constant([[1.0, 2.0], [3.0, -1.0]])
  with pytest.raises(tf.errors.InvalidArgumentError):
    loop_map(f, xs)
  with pytest.raises(tf.errors.InvalidArgumentError, match="negative input"):
    vectorize.vectorized_map(f, xs, warn=False)
  # and it still gives the right answer on valid input afterwards
  ok = tf.abs(xs)
  assert_same(vectorize.vectorized_map(f, ok, warn=False), loop_map(f, ok))


def test_python_side_effect_list_append_does_not_change_values():
  traces = []
  def f(x):
    traces.append(1)
    if x[0] > x[1]:
      return x[0] - x[1]
    return x[1] * 2.0
  xs = tf.constant(_rng(430).randn(7, 2).astype("float32"))
  got = vectorize.vectorized_map(f, xs, warn=False)
  assert traces, "the body was never traced"
  assert_same(got, loop_map(f, xs))


def test_variable_assign_add_then_python_if_on_input():
  v = tf.Variable(0.0)
  def f(x):
    v.assign_add(x)
    if x > 0.0:
      return x * 3.0
    return x - 1.0
  xs = tf.constant([0.5, -1.0, 2.0, -0.25, 1.5])
  got = vectorize.vectorized_map(f, xs, warn=False)
  got_v = v.numpy()
  v.assign(0.0)
  want = loop_map(f, xs)
  assert_same(got, want)
  np.testing.assert_allclose(got_v, v.numpy(), rtol=1e-6)


def test_variable_assign_add_then_python_if_on_variable():
  v = tf.Variable(0.0)
  def f(x):
    v.assign_add(x)
    if v > 1.0:
      return x * 3.0
    return x - 1.0
  xs = tf.constant([0.5, -1.0, 2.0, -0.25, 1.5])
  v.assign(0.0)
  want = loop_map(f, xs)
  want_v = v.numpy()
  v.assign(0.0)
  try:
    got = vectorize.vectorized_map(f, xs, warn=False)
  except vectorize.ConversionError:
    # A refusal (no loop order allows it) is an acceptable answer; a wrong one is not.
    return
  assert_same(got, want)
  np.testing.assert_allclose(v.numpy(), want_v, rtol=1e-6)


# A small "library": a few-qubit state-vector simulator with complex64 einsums.
def _lib_rx(theta):
  c = tf.cast(tf.cos(theta / 2), tf.complex64)
  s = tf.cast(tf.sin(theta / 2), tf.complex64)
  return tf.reshape(tf.stack([c, -1j * s, -1j * s, c]), [2, 2])


def _lib_rz(theta):
  e = tf.exp(tf.complex(tf.zeros_like(theta), -theta / 2))
  return tf.reshape(tf.stack([e, tf.zeros_like(e), tf.zeros_like(e), tf.math.conj(e)]), [2, 2])


_CNOT = tf.constant(np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]],
                             dtype=np.complex64).reshape(2, 2, 2, 2))


def _lib_apply1(state, gate, q):
  letters = "abc"
  out = letters[:q] + "z" + letters[q + 1:]
  return tf.einsum(f"z{letters[q]},{letters}->{out}", gate, state)


def _lib_apply_cnot(state, c, t):
  letters = "abc"
  out = list(letters)
  out[c], out[t] = "y", "z"
  return tf.einsum(f"yz{letters[c]}{letters[t]},{letters}->{''.join(out)}", _CNOT, state)


def _lib_layer(state, params):
  for q in range(3):
    state = _lib_apply1(state, _lib_rx(params[q]), q)
    state = _lib_apply1(state, _lib_rz(params[3 + q]), q)
  state = _lib_apply_cnot(state, 0, 1)
  return _lib_apply_cnot(state, 1, 2)


def _lib_zexp(state, q):
  probs = tf.math.real(state * tf.math.conj(state))
  z = tf.constant([1.0, -1.0])
  shape = [1, 1, 1]
  shape[q] = 2
  return tf.reduce_sum(probs * tf.reshape(z, shape))


def _lib_circuit(params, depth=3):
  state = tf.reshape(tf.one_hot(0, 8, dtype=tf.complex64), [2, 2, 2])
  for d in range(depth):
    state = _lib_layer(state, params[d])
  return tf.stack([_lib_zexp(state, q) for q in range(3)])


def test_library_circuit_new_closure_calls_with_captured_weights():
  vf = tc_vmap(lambda x, w: _lib_circuit(x * w))
  for k in range(3):
    r = _rng(450 + k)
    xs = tf.constant(r.randn(4, 3, 6).astype("float32"))
    w = tf.constant(r.randn(3, 6).astype("float32"))
    assert_same(vf(xs, w), loop_map(lambda x: _lib_circuit(x * w), xs))


def test_library_circuit_gradient_of_captured_weights():
  xs = tf.constant(_rng(460).randn(3, 2, 6).astype("float32"))
  for k in range(2):
    w = tf.constant(_rng(461 + k).randn(2, 6).astype("float32"))
    f = lambda x: tf.reduce_sum(_lib_circuit(x * w, depth=2))
    with tf.GradientTape() as tape:
      tape.watch(w)
      got = tf.reduce_sum(vectorize.vectorized_map(f, xs, warn=False))
    g = tape.gradient(got, w)
    with tf.GradientTape() as tape:
      tape.watch(w)
      want = tf.reduce_sum(loop_map(f, xs))
    assert_same(got, want)
    assert_same(g, tape.gradient(want, w))


def _deep(x, depth):
  if depth == 0:
    return x
  y = _deep(x, depth - 1)
  if depth % 3 == 0:
    return tf.sin(y) + 0.1 * x
  if depth % 3 == 1:
    return y * 0.9 + tf.reduce_mean(y)
  return tf.nn.elu(y) - tf.reduce_min(y) * 0.01


def test_deep_helper_call_chain_many_small_ops():
  xs = tf.constant(_rng(470).randn(4, 5).astype("float32"))
  f = lambda x: _deep(x, 40)
  assert_same(vectorize.vectorized_map(f, xs, warn=False), loop_map(f, xs))


# --------------------------------------------------- 3. tf.function and jit_compile=True

def test_tc_vmap_inside_tf_function_new_w_each_call():
  f = lambda x, w: tf.reduce_sum(tf.cos(x * w)) + w[0]
  vf = tf.function(tc_vmap(f))
  for k in range(3):
    r = _rng(500 + k)
    xs = tf.constant(r.randn(5, 4).astype("float32"))
    w = tf.constant(r.randn(4).astype("float32"))
    assert_same(vf(xs, w), loop_map(lambda x: f(x, w), xs))


def test_tc_vmap_jit_compile_new_w_each_call():
  f = lambda x, w: tf.nn.sigmoid(tf.linalg.matvec(w, x))
  vf = tf.function(tc_vmap(f), jit_compile=True)
  for k in range(3):
    r = _rng(510 + k)
    xs = tf.constant(r.randn(6, 4).astype("float32"))
    w = tf.constant(r.randn(3, 4).astype("float32"))
    assert_same(vf(xs, w), loop_map(lambda x: f(x, w), xs))


def test_tf_function_capturing_outer_eager_tensor_changed_by_rebinding():
  # A new tf.function and a new closure per call, each capturing a new eager tensor.
  for k in range(3):
    w = tf.constant(_rng(520 + k).randn(3).astype("float32"))
    xs = tf.constant(_rng(525 + k).randn(4, 3).astype("float32"))
    g = tf.function(lambda xs: vectorize.vectorized_map(lambda x: x * w + 1.0, xs, warn=False))
    assert_same(g(xs), loop_map(lambda x: x * w + 1.0, xs))


def test_python_if_inside_tf_function_and_jit():
  def f(x):
    if x[0] > 0:
      out = tf.reduce_sum(x)
    else:
      out = tf.reduce_prod(x)
    return out
  xs = tf.constant(_rng(530).randn(6, 3).astype("float32"))
  want = loop_map(f, xs)
  assert_same(tf.function(lambda xs: vectorize.vectorized_map(f, xs, warn=False))(xs), want)
  assert_same(tf.function(lambda xs: vectorize.vectorized_map(f, xs, warn=False),
                          jit_compile=True)(xs), want)


def test_while_data_dependent_trip_count_under_jit():
  def f(x):
    n = tf.constant(0)
    s = x
    while s > 1.0:
      s = s / 2.0
      n += 1
    return n, s
  xs = tf.constant([0.5, 3.0, 17.0, 1.5, 1000.0])
  want = loop_map(f, xs)
  got = tf.function(lambda xs: vectorize.vectorized_map(f, xs, warn=False),
                    jit_compile=True)(xs)
  assert_same(got, want)


def test_library_circuit_inside_jit():
  params = tf.constant(_rng(550).randn(4, 2, 6).astype("float32"))
  f = lambda p: _lib_circuit(p, depth=2)
  want = loop_map(f, params)
  got = tf.function(lambda p: vectorize.vectorized_map(f, p, warn=False),
                    jit_compile=True)(params)
  assert_same(got, want)


def test_pfor_new_closures_inside_tf_function_each_trace():
  @tf.function
  def run(xs, w):
    return vectorize.pfor(lambda i: tf.reduce_sum(xs[i] * w), tf.shape(xs)[0], warn=False)
  for k, n in enumerate([3, 5, 0, 2]):
    r = _rng(560 + k)
    xs = tf.constant(r.randn(n, 4).astype("float32"))
    w = tf.constant(r.randn(4).astype("float32"))
    got = run(xs, w)
    if n == 0:
      assert got.shape.as_list() == [0]
    else:
      assert_same(got, loop_pfor(lambda i: tf.reduce_sum(xs[i] * w), n))


def test_variable_read_in_tf_function_after_assign_between_calls():
  v = tf.Variable(tf.ones([3]))
  @tf.function
  def run(xs):
    return vectorize.vectorized_map(lambda x: tf.reduce_sum(x * v) * v[1], xs, warn=False)
  xs = tf.constant(_rng(570).randn(4, 3).astype("float32"))
  for k in range(3):
    v.assign(_rng(571 + k).randn(3).astype("float32"))
    assert_same(run(xs), loop_map(lambda x: tf.reduce_sum(x * v) * v[1], xs))


def test_assign_add_and_if_inside_tf_function():
  v = tf.Variable(0.0)
  def f(x):
    v.assign_add(x * x)
    if x > 0.0:
      return tf.sqrt(x)
    return x
  xs = tf.constant([1.0, -2.0, 4.0, 0.25])
  want = loop_map(f, xs)
  want_v = v.numpy()
  v.assign(0.0)
  got = tf.function(lambda xs: vectorize.vectorized_map(f, xs, warn=False))(xs)
  assert_same(got, want)
  np.testing.assert_allclose(v.numpy(), want_v, rtol=1e-6)


def test_keras_layer_body_inside_tf_function_and_jit():
  import keras
  keras.utils.set_random_seed(580)
  conv = keras.layers.Conv1D(3, 2, activation="relu")
  conv.build((None, 6, 2))
  f = lambda x: conv(x[None])[0]
  xs = tf.constant(_rng(580).randn(4, 6, 2).astype("float32"))
  want = loop_map(f, xs)
  assert_same(tf.function(lambda xs: vectorize.vectorized_map(f, xs, warn=False))(xs), want)
  assert_same(tf.function(lambda xs: vectorize.vectorized_map(f, xs, warn=False),
                          jit_compile=True)(xs), want)

