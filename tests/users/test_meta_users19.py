"""Round 19 users: meta-learning, ensembles, per-example second-order and adversarial programs.

The classic "vmap" use cases, each written for ONE task / replica / example:

  1. MAML-style inner loops (a tape inside the body: unrolled, `tf.while_loop`, autograph
     `for` over `tf.range`, `tf.scan`), outer gradients through the inner steps (second
     order), meta-training loops, cross-task reductions, nested pfor;
  2. ensembles over stacked weights (MLP, conv net, Keras layers / RNNs), per-replica
     training steps, replicas writing their rows of a stacked variable;
  3. per-example hessian-vector products (nested tapes, ForwardAccumulator), diagonal
     Fisher, influence functions (conjugate gradient in a `tf.while_loop` per example, an
     explicit hessian and a solve), jacobians / hessians inside the body;
  4. saliency, integrated gradients, SmoothGrad with per-example stateless seeds;
  5. FGSM, PGD (`tf.while_loop`, `clip_by_value` / `clip_by_norm` projections, per-example
     early stopping, per-example trajectories) on Keras models;
  6. hand-written per-example clipping (and `clipped_gradient_sum` of adversarial losses),
     `tf.custom_gradient`, `tf.stop_gradient`, `tf.recompute_grad`, tape features.

Each program is checked against the per-example loop (body(i) for each i, eagerly,
stacked); with `params`, also the gradient of a fixed function of the outputs taken by an
OUTER tape around pfor, against the same tape around the loop. Modes:

  eager      vectorize.pfor(body, n) called eagerly (outer tape eager too)
  xla        everything inside tf.function(jit_compile=True)
  runtime_n  inside tf.function with n a run-time scalar (input_signature [] int32)
  zero       n = 0: outputs [0] + per-example shape, outer gradients zero

TensorFlow's own limits met on the way (the plain loop fails alike; not tested as bugs):
a second derivative through `tf.recompute_grad` ("recompute_grad tried to transpose grad");
an outer tape under XLA through a body's loop without `maximum_iterations`; tracing a
`tf.cond` under an active `ForwardAccumulator` (any tf.function / map_fn fails alike).
"""
import numpy as np
import pytest
import tensorflow as tf
import keras

import vectorize

ALL = ("eager", "xla", "runtime_n", "zero")

# ----------------------------------------------------------------------------- harness


def R(*shape, seed=0, lo=-1.0, hi=1.0):
  return np.random.RandomState(seed).uniform(lo, hi, size=shape).astype(np.float32)


def T(*shape, seed=0, lo=-1.0, hi=1.0):
  return tf.constant(R(*shape, seed=seed, lo=lo, hi=hi))


def _np(x):
  return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


def assert_close(got, want, rtol=1e-5, atol=1e-6, path="out"):
  if want is None:
    assert got is None, f"{path}: expected None, got {got!r}"
    return
  if isinstance(want, dict):
    assert isinstance(got, dict) and sorted(got) == sorted(want), (path, got, want)
    for k in want:
      assert_close(got[k], want[k], rtol, atol, f"{path}[{k!r}]")
    return
  if isinstance(want, (list, tuple)):
    assert isinstance(got, (list, tuple)) and len(got) == len(want), (path, got, want)
    for k, (g, w) in enumerate(zip(got, want)):
      assert_close(g, w, rtol, atol, f"{path}[{k}]")
    return
  assert got is not None, f"{path}: got None, expected a value"
  g, w = _np(got), _np(want)
  assert g.dtype == w.dtype, f"{path}: dtype {g.dtype} != {w.dtype}"
  assert g.shape == w.shape, f"{path}: shape {g.shape} != {w.shape}"
  if w.dtype.kind == "f":
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=path)
  else:
    np.testing.assert_array_equal(g, w, err_msg=path)


def python_loop(body, n):
  """The reference: body(i) for each i, eagerly, stacked."""
  outs = [body(tf.constant(i)) for i in range(int(n))]
  return tf.nest.map_structure(lambda *xs: tf.stack(xs), *outs)


def _objective(out):
  """A fixed scalar function of the stacked outputs (its gradient is what the outer tape
  takes): every float output, each weighted differently."""
  total = 0.0
  for k, t in enumerate(tf.nest.flatten(out)):
    if t.dtype.is_floating:
      total += tf.reduce_sum(t * (1.0 + 0.1 * k) + 0.05 * tf.square(t))
  return total


def _with_grads(mapper, body, n, params):
  """mapper(body, n), and the gradient of `_objective` of it w.r.t. `params` (variables or
  tensors, watched), by a tape around the whole map."""
  if not params:
    return mapper(body, n), []
  with tf.GradientTape() as tape:
    tape.watch([p for p in params if isinstance(p, tf.Tensor)])
    out = mapper(body, n)
    obj = _objective(out)
  grads = tape.gradient(obj, params)
  # None (no path; a Keras variable's str dtype breaks UnconnectedGradients.ZERO) as zeros;
  # IndexedSlices (a gather's gradient) as dense
  return out, [tf.zeros(p.shape, p.dtype) if g is None else tf.convert_to_tensor(g)
               for p, g in zip(params, grads)]


def _pfor(body, n):
  return vectorize.pfor(body, n)


def run_mode(fn, n, mode):
  """fn(n) in the mode: eagerly, under XLA, or in a tf.function with a run-time n."""
  if mode in ("eager", "zero"):
    return fn(0 if mode == "zero" else n)
  if mode == "xla":
    return tf.function(lambda: fn(n), jit_compile=True)()
  if mode == "runtime_n":
    f = tf.function(fn, input_signature=[tf.TensorSpec([], tf.int32)])
    return f(tf.constant(n, tf.int32))
  raise AssertionError(mode)


_REFERENCES = {}


def _reference(body, n, params):
  """The loop's outputs and outer gradients, computed once per body (the modes of one
  program share it: the bodies are pure functions of module-level constants)."""
  key = (getattr(body, "__code__", None), n, len(params))
  if key[0] is None or key not in _REFERENCES:
    _REFERENCES[key] = _with_grads(python_loop, body, n, params)
  return _REFERENCES[key]


def check(body, n, mode, params=(), rtol=1e-5, atol=1e-6, grad_rtol=None, grad_atol=None,
          mapper=_pfor):
  """pfor(body, n) in `mode` against the loop; with `params`, also the gradient of a fixed
  function of the outputs taken by a tape around pfor, against the tape around the loop.
  Returns the loop's outputs."""
  params = list(params)
  grad_rtol = rtol if grad_rtol is None else grad_rtol
  grad_atol = atol if grad_atol is None else grad_atol
  got_out, got_grads = run_mode(lambda k: _with_grads(mapper, body, k, params), n, mode)
  if mode == "zero":
    one = body(tf.constant(0))
    want_out = tf.nest.map_structure(
        lambda t: np.zeros((0,) + tuple(t.shape), t.dtype.as_numpy_dtype), one)
    want_grads = [np.zeros(p.shape, tf.as_dtype(p.dtype).as_numpy_dtype) for p in params]
  else:
    want_out, want_grads = _reference(body, n, params)
  assert_close(got_out, want_out, rtol, atol)
  assert_close(list(got_grads), list(want_grads), grad_rtol, grad_atol, path="grad")
  return want_out


def tol(mode, tight=(1e-5, 1e-6), loose=(2e-4, 2e-5)):
  rtol, atol = loose if mode == "xla" else tight
  return dict(rtol=rtol, atol=atol)


def sgd_steps_unrolled(loss_of, w, steps, lr):
  """`steps` SGD steps of loss_of(w) from w (a list of tensors), a tape per step."""
  for _ in range(steps):
    with tf.GradientTape() as t:
      t.watch(w)
      loss = loss_of(w)
    g = t.gradient(loss, w)
    w = [wi - lr * gi for wi, gi in zip(w, g)]
  return w


def check_loop_compiles_under_xla(body, n, params):
  """For the XLA xfails: the loop of examples, with the same outer tape, compiles under XLA
  (a failure there is raised as an AssertionError, which the xfail does not accept)."""
  try:
    tf.function(lambda: _with_grads(python_loop, body, n, params), jit_compile=True)()
  except tf.errors.InvalidArgumentError as e:
    raise AssertionError(f"the loop itself does not compile under XLA: {e}") from None


# ============================================================================ 1. MAML

N_TASKS = 3
XS = T(N_TASKS, 4, 3, seed=1)          # support inputs per task
YS = T(N_TASKS, 4, 2, seed=2)          # support targets
XQ = T(N_TASKS, 3, 3, seed=3)          # query inputs
YQ = T(N_TASKS, 3, 2, seed=4)
MAML_TOL = dict(tight=(5e-5, 5e-6), loose=(1e-3, 1e-4))


def mlp(w, x):
  w1, b1, w2 = w
  return tf.matmul(tf.tanh(tf.matmul(x, w1) + b1), w2)


def mse(w, x, y):
  return tf.reduce_mean(tf.square(mlp(w, x) - y))


def _maml_vars(seed=10):
  return [tf.Variable(R(3, 4, seed=seed)), tf.Variable(R(4, seed=seed + 1) * 0.1),
          tf.Variable(R(4, 2, seed=seed + 2))]


def _maml_tensors(seed=20):
  return [T(3, 4, seed=seed), T(4, seed=seed + 1) * 0.1, T(4, 2, seed=seed + 2)]


MAML_VARS = _maml_vars()
W0_T = _maml_tensors()


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_maml_unrolled_inner_sgd_on_variables(mode):
  """Two inner SGD steps (a tape per step in the body) from weights in tf.Variables, query
  loss; the outer gradient w.r.t. the variables is second order through the inner steps."""
  def body(i):
    adapted = sgd_steps_unrolled(lambda w: mse(w, XS[i], YS[i]),
                                 [v + 0.0 for v in MAML_VARS], 2, 0.3)
    return mse(adapted, XQ[i], YQ[i]), adapted[2]
  check(body, N_TASKS, mode, params=MAML_VARS, **tol(mode, **MAML_TOL))


@pytest.mark.parametrize("mode", ["xla"])
def test_maml_while_loop_inner_steps_on_plain_tensors(mode):
  """Inner loop as a tf.while_loop (maximum_iterations given, so XLA can differentiate it)
  over weights passed as plain tensors; the outer tape watches the tensors."""
  def body(i):
    def step(k, w1, b1, w2):
      with tf.GradientTape() as t:
        t.watch([w1, b1, w2])
        loss = mse([w1, b1, w2], XS[i], YS[i])
      g = t.gradient(loss, [w1, b1, w2])
      return [k + 1] + [a - 0.25 * ga for a, ga in zip([w1, b1, w2], g)]
    _, w1, b1, w2 = tf.while_loop(lambda k, *_: k < 3, step, [0] + W0_T, maximum_iterations=3)
    return mse([w1, b1, w2], XQ[i], YQ[i])
  check(body, N_TASKS, mode, params=W0_T, **tol(mode, **MAML_TOL))


@pytest.mark.parametrize("mode", ["eager"])
def test_maml_autograph_for_over_tf_range(mode):
  """`for _ in tf.range(steps)` in the body: plain tracing fails (iterating a tensor), so
  the README says pfor traces it again with autograph."""
  steps = tf.constant(2)

  def body(i):
    w = [v + 0.0 for v in MAML_VARS]
    for _ in tf.range(steps):
      with tf.GradientTape() as t:
        t.watch(w)
        loss = mse(w, XS[i], YS[i])
      g = t.gradient(loss, w)
      w = [a - 0.2 * ga for a, ga in zip(w, g)]
    return mse(w, XQ[i], YQ[i])
  check(body, N_TASKS, mode, params=MAML_VARS, rtol=5e-5, atol=5e-6)


@pytest.mark.parametrize("mode", ["eager"])
def test_first_order_maml_with_stop_gradient_and_reptile_update(mode):
  """FOMAML: the inner gradient is tf.stop_gradient'ed, so the outer gradient is first
  order; also the adapted weights' difference from the initial ones (Reptile's update)."""
  w0 = _maml_vars(seed=40)

  def body(i):
    w = [v + 0.0 for v in w0]
    for _ in range(2):
      with tf.GradientTape() as t:
        t.watch(w)
        loss = mse(w, XS[i], YS[i])
      g = [tf.stop_gradient(x) for x in t.gradient(loss, w)]
      w = [a - 0.3 * ga for a, ga in zip(w, g)]
    return mse(w, XQ[i], YQ[i]), [a - v for a, v in zip(w, w0)]
  check(body, N_TASKS, mode, params=w0, **tol(mode, **MAML_TOL))


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_meta_sgd_learned_per_parameter_learning_rates(mode):
  """Meta-SGD: per-parameter learning rates in tf.Variables; the outer gradient w.r.t. the
  learning rates and the initial weights."""
  w0 = _maml_vars(seed=50)
  lrs = [tf.Variable(np.full(v.shape, 0.1 + 0.05 * k, np.float32)) for k, v in enumerate(w0)]

  def body(i):
    w = [v + 0.0 for v in w0]
    with tf.GradientTape() as t:
      t.watch(w)
      loss = mse(w, XS[i], YS[i])
    g = t.gradient(loss, w)
    return mse([a - lr * ga for a, lr, ga in zip(w, lrs, g)], XQ[i], YQ[i])
  check(body, N_TASKS, mode, params=w0 + lrs, **tol(mode, **MAML_TOL))


INNER_STEPS = tf.constant([1, 3, 0, 2])


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_maml_per_task_number_of_inner_steps(mode):
  """A data-dependent number of inner steps per task (a while loop whose trip count differs
  per iteration, 0 included), differentiated by the outer tape (maximum_iterations for
  XLA); the inner steps keep a fixed-size TensorArray of their losses."""
  w0 = [T(3, 2, seed=60)]
  xs, ys = T(4, 5, 3, seed=61), T(4, 5, 2, seed=62)

  def body(i):
    def step(k, w, ta):
      with tf.GradientTape() as t:
        t.watch(w)
        loss = tf.reduce_mean(tf.square(tf.matmul(xs[i], w) - ys[i]))
      return [k + 1, w - 0.4 * t.gradient(loss, w), ta.write(k, loss)]
    ta = tf.TensorArray(tf.float32, size=4, element_shape=[], clear_after_read=False)
    _, w, ta = tf.while_loop(lambda k, w, ta: k < INNER_STEPS[i], step, [0, w0[0], ta],
                             maximum_iterations=4)
    return tf.reduce_mean(tf.square(tf.matmul(xs[i], w) - ys[i])), w, ta.stack()
  check(body, 4, mode, params=w0, **tol(mode, **MAML_TOL))


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_maml_hypergradient_and_its_derivative_wrt_inner_learning_rate(mode):
  """The inner learning rate as a watched scalar tensor: d meta-loss / d lr, and its second
  derivative by a second outer tape, both through pfor."""
  lr = tf.constant(0.2)

  def body(i):
    w = sgd_steps_unrolled(lambda w: mse(w, XS[i], YS[i]), list(W0_T), 2, lr)
    return mse(w, XQ[i], YQ[i])

  def f(mapper, n):
    with tf.GradientTape() as t2:
      t2.watch(lr)
      with tf.GradientTape() as t1:
        t1.watch(lr)
        out = mapper(body, n)
        total = tf.reduce_sum(out)
      g = t1.gradient(total, lr)
    return out, g, t2.gradient(g, lr)
  got = run_mode(lambda k: f(_pfor, k), N_TASKS, mode)
  assert_close(got, f(python_loop, N_TASKS), 1e-4, 1e-5)


@pytest.mark.parametrize("mode", ["eager"])
def test_maml_over_vectorized_map_of_task_tuples(mode):
  """The task batch as vectorized_map elems (nested support and query tuples)."""
  w0 = _maml_vars(seed=80)

  def task_loss(task):
    (xs, ys), (xq, yq) = task
    w = sgd_steps_unrolled(lambda w: mse(w, xs, ys), [v + 0.0 for v in w0], 1, 0.5)
    return mse(w, xq, yq)

  def vmap(body, n):
    return vectorize.vectorized_map(task_loss, ((XS[:n], YS[:n]), (XQ[:n], YQ[:n])))
  check(lambda i: task_loss(((XS[i], YS[i]), (XQ[i], YQ[i]))), N_TASKS, mode, params=w0,
        rtol=5e-5, atol=5e-6, mapper=vmap)


keras.utils.set_random_seed(5)
KMLP = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                         keras.layers.Dense(2)])


@pytest.mark.parametrize("mode", ["eager"])
def test_maml_on_keras_model_via_stateless_call(mode):
  """MAML on a Keras 3 model: `model.stateless_call(weights, [], x)` with the adapted
  weights, two inner steps, the outer gradient w.r.t. the model's own variables."""
  tv = KMLP.trainable_variables

  def body(i):
    w = [v.value + 0.0 for v in tv]
    for _ in range(2):
      with tf.GradientTape() as t:
        t.watch(w)
        pred, _ = KMLP.stateless_call(w, [], XS[i])
        loss = tf.reduce_mean(tf.square(pred - YS[i]))
      w = [a - 0.3 * b for a, b in zip(w, t.gradient(loss, w))]
    pred, _ = KMLP.stateless_call(w, [], XQ[i])
    return tf.reduce_mean(tf.square(pred - YQ[i]))
  check(body, N_TASKS, mode, params=list(tv), **tol(mode, **MAML_TOL))


CK1, CK2 = T(3, 3, 2, 3, seed=31) * 0.5, T(3, 3, 3, 2, seed=32) * 0.5
IMG_S, LAB_S = T(3, 2, 7, 7, 2, seed=33), T(3, 2, 2, seed=34)
IMG_Q, LAB_Q = T(3, 2, 7, 7, 2, seed=35), T(3, 2, 2, seed=36)


def small_convnet(w, x):
  h = tf.nn.elu(tf.nn.conv2d(x, w[0], strides=2, padding="SAME"))
  return tf.reduce_mean(tf.nn.conv2d(h, w[1], strides=1, padding="VALID"), [1, 2])


@pytest.mark.parametrize("mode", ["eager"])
def test_maml_on_conv_net_second_order_through_filter_gradients(mode):
  """MAML on a strided conv net: the outer gradient differentiates the filter gradients
  (Conv2DBackpropFilter / Input) of the inner steps."""
  def body(i):
    w = sgd_steps_unrolled(
        lambda w: tf.reduce_mean(tf.square(small_convnet(w, IMG_S[i]) - LAB_S[i])),
        [CK1, CK2], 1, 0.5)
    return tf.reduce_mean(tf.square(small_convnet(w, IMG_Q[i]) - LAB_Q[i]))
  check(body, 3, mode, params=[CK1, CK2], **tol(mode, **MAML_TOL))


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_maml_inner_steps_as_tf_scan_over_minibatches(mode):
  """The inner loop as tf.scan over per-task minibatches (a tape per step); the whole
  trajectory of weights is returned and differentiated."""
  w0 = [T(3, 2, seed=91)]
  xs, ys = T(3, 4, 5, 3, seed=92), T(3, 4, 5, 2, seed=93)

  def body(i):
    def step(w, batch):
      x, y = batch
      with tf.GradientTape() as t:
        t.watch(w)
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
      return w - 0.3 * t.gradient(loss, w)
    ws = tf.scan(step, (xs[i], ys[i]), initializer=w0[0])
    return tf.reduce_mean(tf.square(tf.matmul(XQ[i], ws[-1]) - YQ[i])), ws
  check(body, 3, mode, params=w0, **tol(mode, **MAML_TOL))


def test_meta_training_loop_with_keras_optimizer_matches_looped_training():
  """Three outer steps of meta-training, eagerly: each an outer tape around pfor and a
  Keras SGD step on the shared variables (the eager cache must see the new values)."""
  def train(mapper):
    w0 = _maml_vars(seed=12)
    opt = keras.optimizers.SGD(0.1)

    def body(i):
      adapted = sgd_steps_unrolled(lambda w: mse(w, XS[i], YS[i]), [v + 0.0 for v in w0],
                                   1, 0.3)
      return mse(adapted, XQ[i], YQ[i])
    losses = []
    for _ in range(3):
      with tf.GradientTape() as tape:
        meta = tf.reduce_mean(mapper(body, N_TASKS))
      opt.apply_gradients(zip(tape.gradient(meta, w0), w0))
      losses.append(meta)
    return losses, [v.numpy() for v in w0]
  assert_close(train(vectorize.pfor), train(python_loop), 1e-5, 1e-6)


@pytest.mark.parametrize("mode", ["eager", "runtime_n"])
def test_cross_task_mean_gradient_with_pfor_config(mode):
  """pfor_config.reduce_mean of the tasks' inner gradients (a task-normalized step); the
  outer gradient flows through the reduction."""
  w0 = [T(3, 2, seed=70)]

  def inner_grad(i):
    with tf.GradientTape() as t:
      t.watch(w0[0])
      loss = tf.reduce_mean(tf.square(tf.matmul(XS[i], w0[0]) - YS[i]))
    return t.gradient(loss, w0[0])

  def body(i, pfor_config):
    g = inner_grad(i)
    w = w0[0] - 0.3 * (g - pfor_config.reduce_mean(g))
    return tf.reduce_mean(tf.square(tf.matmul(XQ[i], w) - YQ[i]))

  def looped(_, n):
    gs = [inner_grad(i) for i in range(n)]
    gm = tf.reduce_mean(tf.stack(gs), 0)
    return tf.stack([tf.reduce_mean(tf.square(tf.matmul(XQ[i], w0[0] - 0.3 * (gs[i] - gm))
                                              - YQ[i])) for i in range(n)])
  got = run_mode(lambda k: _with_grads(lambda b, kk: vectorize.pfor(b, kk), body, k, w0),
                 N_TASKS, mode)
  assert_close(got, _with_grads(looped, None, N_TASKS, w0), 1e-5, 1e-6)


@tf.function
def adapt_in_a_tf_function(w1, b1, w2, xs, ys):
  """The inner loop as users factor it out: a tf.function, autograph `for` over tf.range."""
  w = [w1, b1, w2]
  for _ in tf.range(2):
    with tf.GradientTape() as t:
      t.watch(w)
      loss = mse(w, xs, ys)
    w = [a - 0.3 * b for a, b in zip(w, t.gradient(loss, w))]
  return w


@pytest.mark.parametrize("mode", ["eager", "runtime_n"])
def test_maml_inner_loop_in_a_nested_tf_function(mode):
  """The body calls a tf.function holding the inner loop (converted in line); the outer
  gradient differentiates through the call. (Under XLA the loop of tasks fails alike: an
  autograph loop over tf.range has no maximum_iterations.)"""
  def body(i):
    return mse(adapt_in_a_tf_function(*W0_T, XS[i], YS[i]), XQ[i], YQ[i])
  check(body, N_TASKS, mode, params=W0_T, **tol(mode, **MAML_TOL))


@pytest.mark.parametrize("mode", ["xla", "zero"])
def test_loop_fn_that_is_a_tf_function(mode):
  """loop_fn itself a tf.function (README: allowed), one inner step."""
  @tf.function
  def body(i):
    w = sgd_steps_unrolled(lambda w: mse(w, XS[i], YS[i]), list(W0_T), 1, 0.3)
    return mse(w, XQ[i], YQ[i])
  got = run_mode(lambda k: _with_grads(_pfor, body, k, W0_T), N_TASKS, mode)
  if mode == "zero":
    assert_close(got, (np.zeros([0], np.float32), [np.zeros(w.shape, np.float32) for w in W0_T]))
  else:
    assert_close(got, _with_grads(python_loop, body.python_function, N_TASKS, W0_T),
                 **tol(mode, **MAML_TOL))


@pytest.mark.parametrize("mode", ["eager"])
def test_nested_pfor_replicas_by_tasks_with_outer_gradient(mode):
  """An ensemble of meta-learners: pfor over replicas, each a pfor over tasks; the outer
  gradient w.r.t. the replicas' stacked initial weights."""
  ws = T(2, 3, 2, seed=98)

  def task(r, i):
    w = ws[r]
    with tf.GradientTape() as t:
      t.watch(w)
      loss = tf.reduce_mean(tf.square(tf.matmul(XS[i], w) - YS[i]))
    w2 = w - 0.3 * t.gradient(loss, w)
    return tf.reduce_mean(tf.square(tf.matmul(XQ[i], w2) - YQ[i]))

  got = run_mode(lambda k: _with_grads(
      _pfor, lambda r: vectorize.pfor(lambda i: task(r, i), N_TASKS), k, [ws]), 2, mode)
  want = _with_grads(python_loop,
                     lambda r: python_loop(lambda i: task(r, i), N_TASKS), 2, [ws])
  assert_close(got, want, 1e-5, 1e-6)


@pytest.mark.parametrize("mode", ["eager"])
def test_outer_gradient_through_parallel_iterations_chunks(mode):
  """pfor(..., parallel_iterations=2) (chunks written into one output buffer) under the
  outer tape: MAML's meta-gradient through the chunked conversion."""
  def body(i):
    w = sgd_steps_unrolled(lambda w: mse(w, XS[i], YS[i]), list(W0_T), 1, 0.3)
    return mse(w, XQ[i], YQ[i])
  check(body, N_TASKS, mode, params=W0_T, rtol=5e-5, atol=5e-6,
        mapper=lambda b, n: vectorize.pfor(b, n, parallel_iterations=2))


def test_inner_tape_through_loop_without_maximum_iterations_under_xla_is_conversion_error():
  """README: under XLA a loop must have maximum_iterations to be differentiated; without
  it, a ConversionError names the loop's line and says so."""
  w = T(3, 2, seed=60)

  def body(i):
    with tf.GradientTape() as t:
      t.watch(w)
      _, w2 = tf.while_loop(lambda k, v: k < INNER_STEPS[i],
                            lambda k, v: [k + 1, v * 0.9 + tf.sin(v)], [0, w])
      loss = tf.reduce_sum(tf.matmul(XS[i], w2))
    return t.gradient(loss, w)
  with pytest.raises(vectorize.ConversionError, match="maximum_iterations") as info:
    tf.function(lambda: vectorize.pfor(body, 3), jit_compile=True)()
  assert "test_meta_users19.py" in str(info.value)


# ======================================================================== 2. ensembles

N_REP = 3
X_SHARED = T(5, 4, seed=100)
Y_SHARED = tf.constant([0, 2, 1, 1, 0])


@pytest.mark.parametrize("mode", ["eager", "xla", "zero"])
def test_ensemble_mlp_over_stacked_weight_variables(mode):
  """Replicas' weights stacked in tf.Variables, w_stack[i] read in the body; the outer
  gradient w.r.t. the stacked variables (each replica's rows get only its own gradient)."""
  w1 = tf.Variable(R(N_REP, 4, 6, seed=101))
  b1 = tf.Variable(R(N_REP, 6, seed=102) * 0.1)
  w2 = tf.Variable(R(N_REP, 6, 3, seed=103))

  def body(i):
    logits = tf.matmul(tf.nn.relu(tf.matmul(X_SHARED, w1[i]) + b1[i]), w2[i])
    return tf.nn.softmax(logits), tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(Y_SHARED, logits))
  check(body, N_REP, mode, params=[w1, b1, w2], **tol(mode))


@pytest.mark.parametrize("mode", ["xla"])
def test_ensemble_conv_net_per_replica_kernels(mode):
  """A small conv net per replica: tf.nn.conv2d with the replica's kernel, pooling, a
  strided conv, dense head; per-replica images too (bagging)."""
  k1 = tf.Variable(R(N_REP, 3, 3, 2, 4, seed=110) * 0.5)
  k2 = tf.Variable(R(N_REP, 2, 2, 4, 3, seed=111) * 0.5)
  head = tf.Variable(R(N_REP, 3, 2, seed=112))
  images = T(N_REP, 2, 6, 6, 2, seed=113)

  def body(i):
    h = tf.nn.relu(tf.nn.conv2d(images[i], k1[i], strides=1, padding="SAME"))
    h = tf.nn.max_pool2d(h, 2, 2, "VALID")
    h = tf.nn.conv2d(h, k2[i], strides=[1, 2, 2, 1], padding="VALID")
    return tf.matmul(tf.reduce_mean(h, [1, 2]), head[i])
  check(body, N_REP, mode, params=[k1, k2, head], **tol(mode, (2e-5, 2e-6)))


@pytest.mark.parametrize("mode", ["eager", "zero"])
def test_ensemble_training_step_with_bootstrap_indices(mode):
  """Each replica takes one SGD step (a tape in the body) on its own bootstrap sample
  (tf.gather of per-replica indices) and returns its new weights, loss and gradient norm;
  the tape also differentiates a tf.gather of the whole stack (IndexedSlices, dense out)."""
  w_stack = T(N_REP, 4, 3, seed=120)
  w_var = tf.Variable(R(N_REP, 4, 3, seed=121))
  boot = tf.constant([[0, 0, 1, 4], [2, 3, 3, 1], [4, 4, 4, 0]])

  def body(i):
    x, y = tf.gather(X_SHARED, boot[i]), tf.gather(Y_SHARED, boot[i])
    w = w_stack[i]
    with tf.GradientTape() as t:
      t.watch(w)
      loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
          y, tf.matmul(x, w) + tf.matmul(x, tf.gather(w_var, i))))
    g, g_var = t.gradient(loss, [w, w_var])
    return w - 0.5 * g, loss, tf.norm(g), tf.convert_to_tensor(g_var)
  check(body, N_REP, mode, params=[w_stack, w_var])


@pytest.mark.parametrize("mode", ["eager"])
def test_ensemble_via_map_fn_of_weight_tuples(mode):
  """vectorize.map_fn over the stacked weights themselves (elems are the replicas)."""
  w1, w2 = T(N_REP, 4, 5, seed=150), T(N_REP, 5, 2, seed=151)

  def replica(ws):
    a, b = ws
    return tf.reduce_logsumexp(tf.matmul(tf.nn.elu(tf.matmul(X_SHARED, a)), b), axis=1)

  def mapper(body, n):
    return vectorize.map_fn(replica, (w1[:n], w2[:n]), fn_output_signature=tf.float32)
  check(lambda i: replica((w1[i], w2[i])), N_REP, mode, params=[w1, w2], mapper=mapper)


@pytest.mark.parametrize("mode", ["eager", "zero"])
def test_ensemble_vectorized_map_broadcasts_shared_inputs(mode):
  """vectorized_map over (stacked weights, inputs[None]): a leading 1 is broadcast; the
  outer gradient w.r.t. the broadcast inputs sums over the replicas."""
  ws = T(N_REP, 4, 2, seed=1)

  def fn(elems):
    w, x = elems
    return tf.nn.softmax(tf.matmul(x, w))

  def mapper(body, n):
    return vectorize.vectorized_map(fn, (ws[:n], X_SHARED[None]))
  check(lambda i: fn((ws[i], X_SHARED)), N_REP, mode, params=[ws, X_SHARED], mapper=mapper,
        **tol(mode))


@pytest.mark.parametrize("mode", ["eager", "runtime_n"])
def test_ensemble_replicas_write_their_rows_of_a_stacked_variable(mode):
  """Each replica's SGD step writes its row of the stacked variable (scatter_update) and
  adds its loss to a running total (assign_add): outputs and final states as the loop's."""
  ws = tf.Variable(R(N_REP, 4, 3, seed=120))
  total = tf.Variable(0.0)
  init = ws.numpy()

  def body(i):
    w = ws[i]
    with tf.GradientTape() as t:
      t.watch(w)
      loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
          Y_SHARED, tf.matmul(X_SHARED, w)))
    ws.scatter_update(tf.IndexedSlices((w - 0.5 * t.gradient(loss, w))[None], i[None]))
    total.assign_add(loss)
    return loss

  want = python_loop(body, N_REP)
  want_ws, want_total = ws.numpy(), total.numpy()
  ws.assign(init)
  total.assign(0.0)
  got = run_mode(lambda k: vectorize.pfor(body, k), N_REP, mode)
  assert_close(got, want)
  assert_close(ws.numpy(), want_ws)
  assert_close(total.numpy(), want_total)


EMB = tf.Variable(R(7, 3, seed=170))
keras.utils.set_random_seed(1)
KEMB = keras.layers.Embedding(7, 3)
KEMB.build((None,))
TOKENS = tf.constant([[1, 1, 6, 2], [0, 0, 0, 0], [5, 4, 4, 6]])


@pytest.mark.parametrize("mode", ["eager", "zero"])
def test_per_replica_embedding_gradients_returned_as_indexed_slices(mode):
  """The body returns tape gradients of embedding tables (tf.gather, embedding_lookup and a
  Keras Embedding: IndexedSlices with repeated ids); README: returned dense, the repeated
  rows summed as tf.convert_to_tensor does."""
  def body(i):
    with tf.GradientTape() as t:
      e = tf.gather(EMB, TOKENS[i])
      k = KEMB(TOKENS[i])
      loss = (tf.reduce_sum(tf.sin(e) * tf.cos(k))
              + tf.reduce_sum(tf.nn.embedding_lookup(EMB, TOKENS[i][:2]) ** 2))
    return t.gradient(loss, [EMB, KEMB.embeddings])

  def dense_body(i):
    return [tf.convert_to_tensor(g) for g in body(i)]
  got = run_mode(lambda k: vectorize.pfor(body, k), 3, mode)
  want = ([np.zeros([0, 7, 3], np.float32)] * 2 if mode == "zero"
          else python_loop(dense_body, 3))
  assert_close(list(got), list(want))


keras.utils.set_random_seed(0)
ENS_LSTM = keras.layers.LSTM(2)
ENS_LSTM.build((None, 4, 2))
ENS_SEQ = T(N_REP, 4, 2, seed=160)
ENS_SCALE = T(N_REP, 2, seed=161)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_ensemble_of_keras_lstm_heads_outer_gradient(mode):
  """A Keras LSTM (its while loop's maximum_iterations = tf.shape(inputs)[0], static) on
  each replica's scaled sequence; the outer gradient w.r.t. the scales and the LSTM.
  Under XLA the vectorized loop keeps the LSTM loop's static bound (a Max of lengths), which
  its gradient needs (round 19 found it lost: 'XLA compilation requires a fixed tensor
  list size')."""
  def body(i):
    return ENS_LSTM(ENS_SEQ[i][None] * ENS_SCALE[i])[0]
  params = [ENS_SCALE] + ENS_LSTM.trainable_variables[:1]
  if mode == "xla":
    check_loop_compiles_under_xla(body, N_REP, params)
  check(body, N_REP, mode, params=params, **tol(mode))


# ================================================= 3. per-example second-order quantities

B = 4
XB = T(B, 3, seed=200)
YB = tf.constant([1, 0, 2, 1])
W_CLS = [T(3, 5, seed=201), T(5, seed=202) * 0.1, T(5, 3, seed=203)]
V_DIR = [T(3, 5, seed=204), T(5, seed=205), T(5, 3, seed=206)]
HVP_TOL = dict(tight=(2e-5, 2e-6), loose=(5e-4, 5e-5))


def cls_loss(w, x, y):
  w1, b1, w2 = w
  logits = tf.matmul(tf.nn.softplus(tf.matmul(x[None], w1) + b1), w2)[0]
  return tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits)


@pytest.mark.parametrize("mode", ["xla"])
def test_per_example_hvp_reverse_over_reverse_nested_tapes(mode):
  """H_i v by nested tapes: the gradient of <grad_i, v>; and v^T H_i v. The outer tape
  differentiates that again w.r.t. the weights (third order)."""
  def body(i):
    with tf.GradientTape() as outer:
      outer.watch(W_CLS)
      with tf.GradientTape() as inner:
        inner.watch(W_CLS)
        loss = cls_loss(W_CLS, XB[i], YB[i])
      g = inner.gradient(loss, W_CLS)
      gv = tf.add_n([tf.reduce_sum(a * b) for a, b in zip(g, V_DIR)])
    hv = outer.gradient(gv, W_CLS)
    return hv, tf.add_n([tf.reduce_sum(a * b) for a, b in zip(hv, V_DIR)])
  check(body, B, mode, params=W_CLS[:1], **tol(mode, **HVP_TOL))


@pytest.mark.parametrize("mode", ["runtime_n", "zero"])
def test_per_example_hvp_forward_over_reverse_accumulator(mode):
  """H_i v forward-over-reverse (tf.autodiff.ForwardAccumulator around a tape), and a plain
  JVP of the per-example input features."""
  u = T(3, seed=207)

  def body(i):
    with tf.autodiff.ForwardAccumulator(W_CLS, V_DIR) as acc:
      with tf.GradientTape() as tape:
        tape.watch(W_CLS)
        loss = cls_loss(W_CLS, XB[i], YB[i])
      g = tape.gradient(loss, W_CLS)
    x = XB[i]
    with tf.autodiff.ForwardAccumulator(x, u) as acc2:
      h = tf.tanh(tf.linalg.matvec(W_CLS[0], x, transpose_a=True))
    return acc.jvp(g), acc2.jvp(h)
  check(body, B, mode, **tol(mode, **HVP_TOL))


@pytest.mark.parametrize("mode", ["eager"])
def test_forward_accumulator_around_pfor_jvp_of_meta_loss(mode):
  """Forward mode OVER pfor: a ForwardAccumulator around the vectorized MAML losses."""
  tangents = [T(3, 4, seed=23), T(4, seed=24), T(4, 2, seed=25)]

  def body(i):
    w = sgd_steps_unrolled(lambda w: mse(w, XS[i], YS[i]), list(W0_T), 1, 0.3)
    return mse(w, XQ[i], YQ[i])

  def f(mapper, n):
    with tf.autodiff.ForwardAccumulator(W0_T, tangents) as acc:
      out = mapper(body, n)
    return out, acc.jvp(out)
  got = run_mode(lambda k: f(_pfor, k), N_TASKS, mode)
  assert_close(got, f(python_loop, N_TASKS), **tol(mode, **MAML_TOL))


@pytest.mark.parametrize("mode", ["eager", "zero"])
def test_per_example_diagonal_fisher_squared_gradients(mode):
  """Empirical diagonal Fisher: each example's squared gradient; and the 'true' Fisher with
  a label drawn per example from the model (tf.random.stateless_categorical, seed [i, 3])."""
  def body(i):
    with tf.GradientTape(persistent=True) as t:
      t.watch(W_CLS)
      loss = cls_loss(W_CLS, XB[i], YB[i])
      w1, b1, w2 = W_CLS
      logits = tf.matmul(tf.nn.softplus(tf.matmul(XB[i][None], w1) + b1), w2)
      y_model = tf.random.stateless_categorical(tf.stop_gradient(logits), 1,
                                                seed=tf.stack([i, 3]))[0, 0]
      model_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(y_model, logits[0])
    emp = [tf.square(g) for g in t.gradient(loss, W_CLS)]
    true = [tf.square(g) for g in t.gradient(model_loss, W_CLS)]
    return emp, true, y_model
  check(body, B, mode, params=W_CLS[2:])


@pytest.mark.parametrize("mode", ["eager", "runtime_n"])
def test_fisher_accumulated_into_a_variable_with_assign_add(mode):
  """The diagonal Fisher summed into a tf.Variable by assign_add in the body (its only
  write): the final state as the loop's."""
  fisher = tf.Variable(tf.zeros([5, 3]))

  def body(i):
    with tf.GradientTape() as t:
      t.watch(W_CLS)
      loss = cls_loss(W_CLS, XB[i], YB[i])
    g = t.gradient(loss, W_CLS[2])
    fisher.assign_add(tf.square(g) / 4.0)
    return tf.reduce_sum(tf.square(g))
  want = python_loop(body, B)
  want_fisher = fisher.numpy()
  fisher.assign(tf.zeros([5, 3]))
  got = run_mode(lambda k: vectorize.pfor(body, k), B, mode)
  assert_close(got, want)
  assert_close(fisher.numpy(), want_fisher)


LIN_X = T(B, 6, 3, seed=210)
LIN_Y = T(B, 6, seed=211)
W_LIN = T(3, seed=212)
G_TEST = T(3, seed=213)
CG_TOL = tf.constant([1e-3, 1e-9, 5e-3, 1e-1])


def _lin_loss(i, w):
  r = tf.linalg.matvec(LIN_X[i], w) - LIN_Y[i]
  return tf.reduce_mean(tf.square(r)) + 0.01 * tf.reduce_sum(tf.square(w)) ** 2


def _per_example_hvp(i, v):
  with tf.GradientTape() as outer:
    outer.watch(W_LIN)
    with tf.GradientTape() as inner:
      inner.watch(W_LIN)
      loss = _lin_loss(i, W_LIN)
    g = inner.gradient(loss, W_LIN)
    gv = tf.reduce_sum(g * tf.stop_gradient(v))
  return g, outer.gradient(gv, W_LIN) + 0.1 * v


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_influence_conjugate_gradient_while_loop_per_example(mode):
  """Influence-style grad_test . (H_i + 0.1 I)^-1 grad_i: conjugate gradient in a
  tf.while_loop that stops per example when the residual is below its tolerance (a
  per-example trip count, up to 6 steps), each step an HVP by nested tapes."""
  def body(i):
    g, _ = _per_example_hvp(i, tf.zeros([3]))

    def step(k, x, r, p, rs):
      _, hp = _per_example_hvp(i, p)
      alpha = rs / tf.reduce_sum(p * hp)
      x = x + alpha * p
      r = r - alpha * hp
      rs_new = tf.reduce_sum(r * r)
      return [k + 1, x, r, r + (rs_new / rs) * p, rs_new]
    k, x, _, _, _ = tf.while_loop(
        lambda k, x, r, p, rs: tf.logical_and(k < 6, rs > CG_TOL[i]), step,
        [0, tf.zeros([3]), g, g, tf.reduce_sum(g * g)], maximum_iterations=6)
    return tf.reduce_sum(G_TEST * x), x, k
  want = check(body, B, mode, **tol(mode, (1e-4, 1e-5), (1e-3, 1e-4)))
  if mode != "zero":
    assert len(set(want[2].numpy().tolist())) > 1       # the trip counts differ per example


@pytest.mark.parametrize("mode", ["eager"])
def test_influence_with_explicit_per_example_hessian_and_solve(mode):
  """The per-example hessian by tape.jacobian (a while loop) of the gradient, damped,
  tf.linalg.solve and eigvalsh; the outer gradient w.r.t. the per-example data."""
  def body(i):
    with tf.GradientTape(persistent=True) as outer:
      outer.watch(W_LIN)
      with tf.GradientTape() as inner:
        inner.watch(W_LIN)
        loss = _lin_loss(i, W_LIN)
      g = inner.gradient(loss, W_LIN)
    h = outer.jacobian(g, W_LIN, experimental_use_pfor=False) + 0.1 * tf.eye(3)
    x = tf.linalg.solve(h, g[:, None])[:, 0]
    return tf.reduce_sum(G_TEST * x), tf.linalg.eigvalsh(h)
  check(body, B, mode, params=[LIN_X], rtol=5e-5, atol=5e-6)


def _hessian_reference(i):
  """The per-example hessian w.r.t. W_CLS[2] by nested tapes and a while-loop jacobian."""
  w = W_CLS[2]
  with tf.GradientTape(persistent=True) as outer:
    outer.watch(w)
    with tf.GradientTape() as inner:
      inner.watch(w)
      loss = cls_loss([W_CLS[0], W_CLS[1], w], XB[i], YB[i])
    g = inner.gradient(loss, w)
  return outer.jacobian(g, w, experimental_use_pfor=False)


@pytest.mark.parametrize("mode", ["eager"])
def test_per_example_hessian_by_tf_tape_jacobian_in_body(mode):
  """tape.jacobian with TF's own pfor (experimental_use_pfor=True), traced inside our body."""
  w = W_CLS[2]

  def body(i):
    with tf.GradientTape() as outer:
      outer.watch(w)
      with tf.GradientTape() as inner:
        inner.watch(w)
        loss = cls_loss([W_CLS[0], W_CLS[1], w], XB[i], YB[i])
      g = inner.gradient(loss, w)
    return outer.jacobian(g, w)
  got = run_mode(lambda k: vectorize.pfor(body, k), B, mode)
  assert_close(got, python_loop(_hessian_reference, B), 2e-5, 2e-6)


@pytest.mark.parametrize("mode", ["eager", "zero"])
def test_vectorize_jacobian_called_inside_the_body(mode):
  """A nested pfor: vectorize.jacobian (graph-mode, TF's parallel_for signature) of the
  per-example gradient, called inside the per-example body: the per-example hessian. (The
  reference loop runs eagerly, where vectorize.jacobian refuses: it uses nested tapes.)"""
  w = W_CLS[2]

  def body(i):
    with tf.GradientTape() as inner:
      inner.watch(w)
      loss = cls_loss([W_CLS[0], W_CLS[1], w], XB[i], YB[i])
    return vectorize.jacobian(inner.gradient(loss, w), w)
  got = run_mode(lambda k: vectorize.pfor(body, k), B, mode)
  want = tf.zeros([0, 5, 3, 5, 3]) if mode == "zero" else python_loop(_hessian_reference, B)
  assert_close(got, want, 2e-5, 2e-6)


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_vectorize_hessian_helper_called_inside_the_body(mode):
  """vectorize.hessian(f, x) of a per-example f, called inside the body."""
  w = W_CLS[2]

  def body(i):
    return vectorize.hessian(lambda ww: cls_loss([W_CLS[0], W_CLS[1], ww], XB[i], YB[i]), w)
  got = run_mode(lambda k: vectorize.pfor(body, k), B, mode)
  assert_close(got, python_loop(_hessian_reference, B), 2e-5, 2e-6)


# ============================================================= 4. saliency and attribution

IMG = T(4, 5, 5, 1, seed=300, lo=0.0, hi=1.0)
LBL = tf.constant([0, 2, 1, 2])
keras.utils.set_random_seed(0)
CONVNET = keras.Sequential([
    keras.Input((5, 5, 1)), keras.layers.Conv2D(3, 3, activation="softplus"),
    keras.layers.Flatten(), keras.layers.Dense(3)])


def _logit(model, x, label):
  return tf.gather(model(x[None])[0], label)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_input_gradient_saliency_of_keras_convnet(mode):
  """|d logit_label / d x| per example, and gradient x input; the outer tape differentiates
  the saliency w.r.t. the model's weights (double backprop, as in saliency regularizers)."""
  def body(i):
    x = IMG[i]
    with tf.GradientTape() as t:
      t.watch(x)
      s = _logit(CONVNET, x, LBL[i])
    g = t.gradient(s, x)
    return tf.reduce_max(tf.abs(g), axis=-1), g * x
  check(body, 4, mode, params=CONVNET.trainable_variables[:1], **tol(mode))


@pytest.mark.parametrize("mode", ["eager"])
def test_integrated_gradients_python_loop_over_alphas(mode):
  """Integrated gradients with a black baseline: a Python loop of 3 alphas (unrolled), a tape
  per alpha, the Riemann sum times (x - baseline); plus the completeness gap."""
  def body(i):
    x = IMG[i]
    total = tf.zeros_like(x)
    for alpha in (1 / 6, 3 / 6, 5 / 6):
      xa = alpha * x
      with tf.GradientTape() as t:
        t.watch(xa)
        s = _logit(CONVNET, xa, LBL[i])
      total += t.gradient(s, xa)
    ig = x * total / 3.0
    gap = tf.reduce_sum(ig) - (_logit(CONVNET, x, LBL[i]) - _logit(CONVNET, 0.0 * x, LBL[i]))
    return ig, gap
  check(body, 4, mode)


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_integrated_gradients_while_loop_map_fn_and_batched_path(mode):
  """IG three ways in one body: the alphas in a tf.while_loop accumulating gradients, in a
  tf.map_fn, and as one batch of path images through the model."""
  def grad_at(x, label, alpha):
    xa = alpha * x
    with tf.GradientTape() as t:
      t.watch(xa)
      s = _logit(CONVNET, xa, label)
    return t.gradient(s, xa)

  def body(i):
    x = IMG[i]
    alphas = (tf.range(3, dtype=tf.float32) + 0.5) / 3.0
    _, acc = tf.while_loop(
        lambda k, acc: k < 3,
        lambda k, acc: [k + 1, acc + grad_at(x, LBL[i], alphas[k])], [0, tf.zeros_like(x)])
    mapped = tf.map_fn(lambda a: grad_at(x, LBL[i], a), alphas)
    path = alphas[:, None, None, None] * x[None]
    with tf.GradientTape() as t:
      t.watch(path)
      s = tf.reduce_sum(tf.gather(CONVNET(path), LBL[i], axis=1))
    return (x * acc / 3.0, x * tf.reduce_mean(mapped, 0),
            x * tf.reduce_mean(t.gradient(s, path), 0))
  check(body, 4, mode)


@pytest.mark.parametrize("mode", ["eager"])
def test_smoothgrad_with_stateless_noise_seeded_per_example(mode):
  """SmoothGrad: 2 noisy copies per example, noise from tf.random.stateless_normal seeded by
  [example, sample]; the mean input gradient."""
  def body(i):
    x = IMG[i]
    total = tf.zeros_like(x)
    for s in range(2):
      xn = x + 0.1 * tf.random.stateless_normal(tf.shape(x), seed=tf.stack([i, s]))
      with tf.GradientTape() as t:
        t.watch(xn)
        y = _logit(CONVNET, xn, LBL[i])
      total += t.gradient(y, xn)
    return total / 2.0
  check(body, 4, mode, rtol=1e-4, atol=1e-5)      # normal draws may differ in the last bit


RNN_W = T(2, 2, seed=310)
RNN_H0 = T(3, 2, seed=311)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_rnn_saliency_regularizer_outer_gradient(mode):
  """A saliency penalty of a recurrence: the inner tape differentiates a tf.while_loop
  (maximum_iterations=4) w.r.t. the initial state, the outer tape differentiates the
  penalty w.r.t. the recurrent weights. Under XLA the vectorized gradient loop keeps its
  forward loop's bound (round 19 found it lost)."""
  def body(i):
    h0 = RNN_H0[i]
    with tf.GradientTape() as t:
      t.watch(h0)
      _, h = tf.while_loop(lambda k, h: k < 4,
                           lambda k, h: [k + 1, tf.tanh(tf.linalg.matvec(RNN_W, h))],
                           [0, h0], maximum_iterations=4)
      out = tf.reduce_sum(h)
    return tf.reduce_sum(tf.square(t.gradient(out, h0)))
  if mode == "xla":
    check_loop_compiles_under_xla(body, 3, [RNN_W])
  check(body, 3, mode, params=[RNN_W], **tol(mode))


# ================================================================ 5. adversarial examples

keras.utils.set_random_seed(3)
MLP = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh"),
                        keras.layers.Dense(3)])
ADV_X = T(5, 6, seed=400, lo=0.0, hi=1.0)
ADV_Y = tf.constant([0, 1, 2, 1, 0])


def _ce(model, x, y):
  return tf.nn.sparse_softmax_cross_entropy_with_logits(y, model(x[None])[0])


def _input_grad(model, x, y):
  with tf.GradientTape() as t:
    t.watch(x)
    loss = _ce(model, x, y)
  return t.gradient(loss, x)


@pytest.mark.parametrize("mode", ["eager", "zero"])
def test_fgsm_on_keras_mlp(mode):
  """FGSM: x + eps sign(grad), clipped to [0, 1]; its loss; the outer gradient of the
  adversarial loss w.r.t. the model (adversarial training, sign() has zero gradient)."""
  def body(i):
    x = ADV_X[i]
    x_adv = tf.clip_by_value(x + 0.1 * tf.sign(_input_grad(MLP, x, ADV_Y[i])), 0.0, 1.0)
    return x_adv, _ce(MLP, x_adv, ADV_Y[i])
  check(body, 5, mode, params=MLP.trainable_variables)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_pgd_linf_while_loop_with_clip_by_value_projection(mode):
  """PGD: 4 steps in a tf.while_loop (maximum_iterations for XLA's gradient), signed steps,
  projection on the eps-box around x by tf.clip_by_value and on [0, 1]; adversarial
  training's outer gradient with the attack tf.stop_gradient'ed."""
  eps = 0.08

  def body(i):
    x, y = ADV_X[i], ADV_Y[i]

    def step(k, xa):
      xa = xa + 0.03 * tf.sign(_input_grad(MLP, xa, y))
      xa = tf.clip_by_value(xa, x - eps, x + eps)
      return [k + 1, tf.clip_by_value(xa, 0.0, 1.0)]
    _, x_adv = tf.while_loop(lambda k, xa: k < 4, step, [0, x], maximum_iterations=4)
    x_adv = tf.stop_gradient(x_adv)
    return x_adv, _ce(MLP, x_adv, y)
  check(body, 5, mode, params=MLP.trainable_variables, **tol(mode))


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_pgd_l2_with_clip_by_norm_projection(mode):
  """L2 PGD: normalized gradient steps, projection of the perturbation with
  tf.clip_by_norm; an unrolled Python loop of 2 steps."""
  def body(i):
    x, y = ADV_X[i], ADV_Y[i]
    delta = tf.zeros_like(x)
    for _ in range(2):
      g = _input_grad(MLP, x + delta, y)
      delta = tf.clip_by_norm(delta + 0.2 * g / (tf.norm(g) + 1e-12), 0.25)
    return delta, tf.norm(delta), _ce(MLP, x + delta, y)
  check(body, 5, mode, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("mode", ["xla"])
def test_pgd_early_stopping_per_example(mode):
  """PGD that stops per example once the model misclassifies it: a while loop whose trip
  count is data-dependent (each example's own), up to 6 steps; returns the steps taken."""
  def body(i):
    x, y = ADV_X[i], ADV_Y[i]

    def correct(xa):
      return tf.equal(tf.argmax(MLP(xa[None])[0], output_type=tf.int32), y)

    def step(k, xa):
      xa = xa + 0.15 * tf.sign(_input_grad(MLP, xa, y))
      return [k + 1, tf.clip_by_value(xa, x - 0.5, x + 0.5)]
    k, x_adv = tf.while_loop(lambda k, xa: tf.logical_and(k < 6, correct(xa)), step, [0, x],
                             maximum_iterations=6)
    return k, x_adv, _ce(MLP, x_adv, y)
  want = check(body, 5, mode, params=MLP.trainable_variables, **tol(mode))
  if mode != "zero":
    assert len(set(want[0].numpy().tolist())) > 1       # the trip counts differ per example


@pytest.mark.parametrize("mode", ["eager"])
def test_pgd_autograph_while_with_break(mode):
  """PGD written with a Python `while` on tensors, an `if` and a `break` (autograph, after
  plain tracing fails): stop when the loss exceeds a per-example threshold."""
  thresholds = tf.constant([0.5, 2.0, 1.0, 5.0, 1.5])

  def body(i):
    x, y = ADV_X[i], ADV_Y[i]
    xa = x
    k = tf.constant(0)
    while k < 5:
      if _ce(MLP, xa, y) > thresholds[i]:
        break
      xa = tf.clip_by_value(xa + 0.1 * tf.sign(_input_grad(MLP, xa, y)), 0.0, 1.0)
      k += 1
    return k, xa
  want = check(body, 5, mode)
  assert len(set(want[0].numpy().tolist())) > 1


@pytest.mark.parametrize("mode", ["eager"])
def test_pgd_per_example_loss_trajectories_come_back_ragged(mode):
  """Each example's losses along its own early-stopped attack in a dynamic-size
  TensorArray: pfor returns a RaggedTensor equal to the loop's rows."""
  y_pred = tf.argmax(MLP(ADV_X), axis=1, output_type=tf.int32)     # all start correct

  def body(i):
    x, y = ADV_X[i], y_pred[i]

    def correct(xa):
      return tf.equal(tf.argmax(MLP(xa[None])[0], output_type=tf.int32), y)

    def step(k, xa, ta):
      ta = ta.write(k, _ce(MLP, xa, y))
      xa = tf.clip_by_value(xa + 0.1 * tf.sign(_input_grad(MLP, xa, y)), x - 0.6, x + 0.6)
      return [k + 1, xa, ta]
    _, _, ta = tf.while_loop(lambda k, xa, ta: tf.logical_and(k < 8, correct(xa)), step,
                             [0, x, tf.TensorArray(tf.float32, size=0, dynamic_size=True)])
    return ta.stack()
  want = [body(tf.constant(i)) for i in range(5)]
  assert len({int(w.shape[0]) for w in want}) > 1
  got = run_mode(lambda k: vectorize.pfor(body, k), 5, mode)
  assert isinstance(got, tf.RaggedTensor), type(got)
  assert got.shape[0] == 5
  for k, w in enumerate(want):
    assert_close(got[k], w, 1e-5, 1e-6, path=f"row {k}")


X_STEPS = tf.constant([1.0, 2.0, 0.45, 1.3, 0.7])


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_steps_not_taken_would_be_nan_per_example_trip_counts(mode):
  """A per-example loop whose next step would take sqrt of a negative number (NaN) for the
  examples that stopped; values and the outer gradient w.r.t. the starts stay finite, as
  the loop's; a tf.cond whose untaken branch is NaN, under the tape in the body too."""
  def body(i):
    x = X_STEPS[i]
    k, xf = tf.while_loop(lambda k, x: tf.logical_and(x > 0.6, k < 8),
                          lambda k, x: [k + 1, x - 0.3 * tf.sqrt(x - 0.4)], [0, x],
                          maximum_iterations=8)
    z = x - 1.0
    with tf.GradientTape() as t:
      t.watch(z)
      c = tf.cond(z > 0, lambda: tf.sqrt(z) * tf.math.log(z), lambda: z * z)
    return xf, k, c, t.gradient(c, z)
  check(body, 5, mode, params=[X_STEPS], **tol(mode))


# ========================================== 6. clipping, custom gradients, recomputation

@pytest.mark.parametrize("mode", ["eager", "runtime_n"])
def test_hand_written_per_example_clipping_against_loop(mode):
  """DP-SGD by hand: a tape in the body, the global norm over all variables, the clip
  factor min(1, C / norm); the sum is also compared with vectorize.clipped_gradient_sum."""
  variables = MLP.trainable_variables

  def body(i):
    with tf.GradientTape() as t:
      loss = _ce(MLP, ADV_X[i], ADV_Y[i])
    g = t.gradient(loss, variables)
    norm = tf.linalg.global_norm(g)
    factor = tf.minimum(1.0, 0.5 / (norm + 1e-6))
    return [x * factor for x in g], norm
  want = check(body, 5, mode, **tol(mode))
  if mode == "eager":
    got = vectorize.clipped_gradient_sum(
        lambda x, y: _ce(MLP, x, y), variables, ADV_X, ADV_Y, l2_norm_clip=0.5)
    assert_close(list(got), [tf.reduce_sum(g, 0) for g in want[0]], 1e-4, 1e-5)


def _clip_reference(loss_fn, variables, batch, clip):
  sums, norms = None, []
  for i in range(int(batch[0].shape[0])):
    with tf.GradientTape() as t:
      loss = loss_fn(*[x[i] for x in batch])
    g = [tf.convert_to_tensor(x) for x in t.gradient(loss, variables)]
    norms.append(tf.linalg.global_norm(g))
    f = tf.minimum(1.0, clip / norms[-1])
    sums = [f * x for x in g] if sums is None else [s + f * x for s, x in zip(sums, g)]
  return sums, tf.stack(norms)


@pytest.mark.parametrize("mode", ["eager"])
def test_clipped_gradient_sum_of_adversarial_and_penalized_losses(mode):
  """clipped_gradient_sum / per_example_gradient_norms (factored where the graph allows) of
  losses whose weight gradients are not one matmul: FGSM without stop_gradient (second-order
  terms) plus an input-gradient penalty."""
  variables = MLP.trainable_variables

  def loss_fn(x, y):
    with tf.GradientTape() as t:
      t.watch(x)
      clean = _ce(MLP, x, y)
    g = t.gradient(clean, x)
    return 0.5 * clean + _ce(MLP, x + 0.1 * tf.tanh(10.0 * g), y) + tf.reduce_sum(g * g)

  x, y = ADV_X[:3], ADV_Y[:3]
  sums, norms = vectorize.clipped_gradient_sum(loss_fn, variables, x, y, l2_norm_clip=0.5,
                                               return_norms=True)
  got = list(sums), norms, vectorize.per_example_gradient_norms(loss_fn, variables, x, y)
  sums, norms = _clip_reference(loss_fn, variables, (x, y), 0.5)
  assert_close(got, (sums, norms, norms), 1e-4, 1e-5)


@tf.custom_gradient
def clip_gradient_op(x):
  def grad(dy):
    return tf.clip_by_norm(dy, 0.3)
  return tf.identity(x), grad


@tf.custom_gradient
def straight_through_round(x):
  return tf.round(x * 4.0) / 4.0, lambda dy: dy


@pytest.mark.parametrize("mode", ["eager", "zero"])
def test_custom_gradient_in_body_under_inner_and_outer_tapes(mode):
  """tf.custom_gradient ops in the per-example loss (a backward clip_by_norm of the
  activation's gradient, a straight-through rounding): the inner tape's per-example gradient
  uses them, and the outer tape differentiates through them."""
  w = tf.Variable(R(6, 4, seed=500))

  def body(i):
    x = ADV_X[i]
    with tf.GradientTape() as t:
      h = clip_gradient_op(tf.linalg.matvec(w, straight_through_round(x), transpose_a=True))
      loss = tf.reduce_sum(tf.sin(h))
    return t.gradient(loss, w), loss
  check(body, 5, mode, params=[w], **tol(mode))


CG_VAR = tf.Variable(R(6, 3, seed=7))


@tf.custom_gradient
def linear_with_clipped_weight_gradient(x):
  """A custom gradient over a variable: grad_fn returns (dx, [dvariable])."""
  y = tf.linalg.matvec(CG_VAR, x, transpose_a=True)

  def grad(dy, variables=None):
    return tf.linalg.matvec(CG_VAR, dy), [tf.clip_by_value(x[:, None] * dy[None, :],
                                                           -0.05, 0.05)]
  return y, grad


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_custom_gradients_with_variables_and_per_example_closures(mode):
  """Two custom gradients: one over a tf.Variable (its grad_fn returns variable
  gradients), one defined in the body whose backward reads per-example values captured in
  the forward (a per-example gradient scale, a saved sigmoid)."""
  scales = tf.constant([0.5, 1.0, 2.0, 0.0, -1.0])

  def body(i):
    @tf.custom_gradient
    def scaled_softplus(z):
      s = tf.nn.sigmoid(z)
      return tf.nn.softplus(z), lambda dy: dy * s * scales[i]
    with tf.GradientTape() as t:
      t.watch(CG_VAR)
      h = linear_with_clipped_weight_gradient(ADV_X[i])
      loss = tf.reduce_sum(scaled_softplus(h) * ADV_X[i][:3])
    return t.gradient(loss, CG_VAR), loss
  check(body, 5, mode)


@pytest.mark.parametrize("mode", ["eager", "zero"])
def test_recompute_grad_block_in_per_example_loss(mode):
  """tf.recompute_grad around a block (gradient checkpointing) of plain tensors and of a
  tf.Variable: the per-example gradient through it. (No outer tape: TF cannot
  differentiate recompute_grad's gradient twice, the loop fails alike.)"""
  w1, w2 = T(6, 5, seed=520), T(5, 2, seed=521)
  kv = tf.Variable(R(2, 3, seed=522))

  @tf.recompute_grad
  def block(x, a, b):
    return tf.matmul(tf.tanh(tf.matmul(x, a)), b)

  @tf.recompute_grad
  def var_block(h):
    return tf.tanh(tf.matmul(h, kv))

  def body(i):
    with tf.GradientTape() as t:
      t.watch([w1, w2])
      loss = tf.reduce_sum(tf.square(var_block(block(ADV_X[i][None], w1, w2))))
    return t.gradient(loss, [w1, w2, kv])
  check(body, 5, mode, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("mode", ["eager"])
def test_meta_gradient_with_stop_gradient_on_bootstrap_target(mode):
  """A TD-style per-example loss: the bootstrap target from the same weights under
  tf.stop_gradient; one inner step, then the outer gradient w.r.t. the weights (the
  stop_gradient must cut the target's path in both orders)."""
  w = T(6, 3, seed=530)
  x_next = T(5, 6, seed=531)
  rewards = T(5, seed=532)

  def body(i):
    with tf.GradientTape() as t:
      t.watch(w)
      q = tf.reduce_max(tf.linalg.matvec(w, ADV_X[i], transpose_a=True))
      target = rewards[i] + 0.9 * tf.stop_gradient(
          tf.reduce_max(tf.linalg.matvec(w, x_next[i], transpose_a=True)))
      loss = tf.square(q - target)
    w_new = w - 0.1 * t.gradient(loss, w)
    return tf.reduce_max(tf.linalg.matvec(w_new, ADV_X[i], transpose_a=True)) - target, loss
  check(body, 5, mode, params=[w])


keras.utils.set_random_seed(7)
CRITIC = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh"),
                           keras.layers.Dense(1)])


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_wgan_gradient_penalty_per_example(mode):
  """WGAN-GP: (||d D(x_hat_i) / d x_hat_i|| - 1)^2 at a per-example interpolate (alpha from
  a stateless uniform seeded per example), differentiated by the outer tape w.r.t. the
  critic (double backprop through a Keras model). Under XLA against the loop compiled by
  XLA (its own random numbers)."""
  fake = T(5, 6, seed=540)

  def body(i):
    alpha = tf.random.stateless_uniform([], seed=tf.stack([i, 11]))
    x_hat = alpha * ADV_X[i] + (1 - alpha) * fake[i]
    with tf.GradientTape() as t:
      t.watch(x_hat)
      d = CRITIC(x_hat[None])[0, 0]
    return tf.square(tf.norm(t.gradient(d, x_hat)) - 1.0)
  if mode == "xla":
    params = CRITIC.trainable_variables
    got = tf.function(lambda: _with_grads(_pfor, body, 5, params), jit_compile=True)()
    want = tf.function(lambda: _with_grads(python_loop, body, 5, params), jit_compile=True)()
    assert_close(got, want, 2e-4, 2e-5)
  else:
    check(body, 5, mode, params=CRITIC.trainable_variables, rtol=2e-5, atol=2e-6)


TAPE_V = tf.Variable(R(3, 2, seed=1))


@pytest.mark.parametrize("mode", ["runtime_n"])
def test_tape_features_in_body_persistent_stop_recording_output_gradients(mode):
  """A persistent tape with several gradient calls, stop_recording, a list of targets,
  output_gradients, unconnected_gradients=ZERO, and a tape with
  watch_accessed_variables=False (the variable it reads is not watched by it, but is by
  the outer tape)."""
  def body(i):
    w = TAPE_V * 1.0
    with tf.GradientTape(persistent=True) as t:
      t.watch(w)
      y = tf.matmul(XS[i], w)
      with t.stop_recording():
        y_nograd = tf.matmul(XS[i], w)
      loss1 = tf.reduce_sum(tf.square(y - YS[i])) + tf.reduce_sum(y_nograd)
      loss2 = tf.reduce_sum(tf.sin(y))
    g1 = t.gradient(loss1, w)
    g2 = t.gradient([loss1, loss2], w)
    g3 = t.gradient(y, w, output_gradients=YS[i])
    g4 = t.gradient(loss2, [w, XQ[i]], unconnected_gradients=tf.UnconnectedGradients.ZERO)
    del t
    with tf.GradientTape(watch_accessed_variables=False) as t2:
      t2.watch(w)
      l3 = tf.reduce_sum(TAPE_V * w * w)
    return g1, g2, g3, g4, t2.gradient(l3, w)
  check(body, 3, mode, params=[TAPE_V])


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_outer_gradient_through_a_body_that_reads_then_writes_state(mode):
  """A body that reads a variable then writes it (an exponential moving sum of each
  replica's gradient): sequential semantics (the whole body as a loop); the outputs depend
  on the state read, and the outer gradient flows through that loop."""
  ws = T(3, 4, 3, seed=120)
  state = tf.Variable(tf.zeros([3]))

  def body(i):
    w = ws[i]
    with tf.GradientTape() as t:
      t.watch(w)
      loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
          Y_SHARED, tf.matmul(X_SHARED, w)))
    g = t.gradient(loss, w)
    prev = state.read_value()
    state.assign(prev * 0.5 + tf.reduce_sum(g, 0))
    return loss * (1.0 + 0.1 * tf.reduce_sum(prev))
  want = _with_grads(python_loop, body, 3, [ws])
  want_state = state.numpy()
  state.assign(tf.zeros([3]))
  got = run_mode(lambda k: _with_grads(_pfor, body, k, [ws]), 3, mode)
  assert_close(got, want, **tol(mode))
  assert_close(state.numpy(), want_state, **tol(mode))
