"""Drop-in behaviours: what TensorFlow's own `parallel_for` does, vectorize does too.

TF's pfor (`control_flow_ops.pfor`, `tf.vectorized_map`) is the reference: each test runs
the same client code on both, or swaps TF's entry point for ours and runs TF's own callers
(`GradientTape.jacobian`).
"""

import inspect

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops.parallel_for import control_flow_ops as tf_pfor_ops
from tensorflow.python.ops.parallel_for import gradients as tf_pfor_gradients

import vectorize
from tests import testing

keras = tf.keras
X = tf.reshape(tf.range(24.0), [8, 3])


def _numpy(structure):
  return tf.nest.map_structure(lambda t: None if t is None else np.asarray(t), structure)


def _assert_same(actual, expected, tol=1e-5):
  """Equal nested structures (None where the other has None), values within tol."""
  tf.nest.assert_same_structure(actual, expected)
  for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
    assert (a is None) == (e is None), f"{a!r} vs {e!r}"
    if a is not None:
      np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=tol, atol=tol)


class _Absl:
  """Collects absl warnings."""

  def __enter__(self):
    from absl import logging
    self.messages, self._original = [], logging.warning
    logging.warning = lambda msg, *args: self.messages.append(msg % args if args else msg)
    return self.messages

  def __exit__(self, *exc):
    from absl import logging
    logging.warning = self._original
    return False


# ----------------------------------------------------------------------------- None outputs

def _body_with_nones(i):
  return (tf.gather(X, i) * 2.0, None, {"a": None, "b": [tf.cast(i, tf.float32), None]})


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_none_outputs_pass_through_as_in_tf_pfor(mode):
  def run(pfor):
    if mode == "eager":
      return _numpy(pfor(_body_with_nones, 8))
    return _numpy(tf.function(lambda: pfor(_body_with_nones, 8))())

  _assert_same(run(vectorize.pfor), run(tf_pfor_ops.pfor))


def _none_and_sum(row):
  return None, tf.reduce_sum(row), [None]


def test_none_outputs_of_vectorized_map_pass_through_as_in_tf():
  fn = _none_and_sum
  _assert_same(_numpy(vectorize.vectorized_map(fn, X)), _numpy(tf.vectorized_map(fn, X)))


def test_none_outputs_with_parallel_iterations():
  out = tf.function(lambda: vectorize.pfor(_body_with_nones, 8, parallel_iterations=3))()
  _assert_same(_numpy(out), _numpy(tf_pfor_ops.pfor(_body_with_nones, 8)))


class ModelWithAnUnusedVariable(keras.Model):
  """A classifier with a weight its forward pass never reads (a frozen head, a spare
  embedding): `tape.gradient` gives None for it."""

  def __init__(self):
    super().__init__()
    self.hidden = keras.layers.Dense(5, activation="tanh")
    self.out = keras.layers.Dense(4)
    self.unused = self.add_weight(shape=(3,), initializer="ones", name="unused")

  def call(self, x):
    return self.out(self.hidden(x))


def _model_and_batch():
  keras.utils.set_random_seed(0)
  model = ModelWithAnUnusedVariable()
  model(tf.zeros([1, 6]))
  x = tf.constant(np.random.default_rng(0).standard_normal([8, 6]), tf.float32)
  y = tf.constant(np.random.default_rng(1).integers(0, 4, [8]), tf.int32)
  return model, x, y


def _dp_sgd_step(vectorized_map, model, x, y, clip=1.0, noise=0.0):
  """A DP-SGD step as client code writes it: per-example gradients over every trainable
  variable, each clipped, summed and averaged; an unused variable's gradient is None."""
  variables = model.trainable_variables

  def example_gradient(example):
    xi, yi = example
    with tf.GradientTape() as tape:
      logits = model(xi[None])
      loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(yi[None], logits))
    return tape.gradient(loss, variables)

  grads = vectorized_map(example_gradient, (x, y))
  present = [g for g in grads if g is not None]
  norms = tf.sqrt(tf.add_n([tf.reduce_sum(tf.reshape(g, [tf.shape(g)[0], -1]) ** 2, 1)
                            for g in present]))
  factor = tf.minimum(1.0, clip / (norms + 1e-12))
  return [None if g is None else
          tf.reduce_mean(g * tf.reshape(factor, [-1] + [1] * (g.shape.rank - 1)), 0) + noise
          for g in grads]


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_dp_sgd_step_over_a_model_with_an_unused_variable(mode):
  model, x, y = _model_and_batch()

  def run(vectorized_map):
    def step():
      return _dp_sgd_step(vectorized_map, model, x, y)
    return _numpy(step() if mode == "eager" else tf.function(step)())

  actual = run(vectorize.vectorized_map)
  unused = [v is model.unused for v in model.trainable_variables]
  assert [g is None for g in actual] == unused and any(unused)
  _assert_same(actual, run(tf.vectorized_map))


def test_per_example_gradients_of_a_model_with_an_unused_variable():
  model, x, y = _model_and_batch()

  def loss_fn(xi, yi):
    logits = model(xi[None])
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(yi[None], logits))

  grads = vectorize.per_example_gradients(loss_fn, model, x, y, fallback_to_while_loop=False)
  expected = []
  for i in range(8):
    with tf.GradientTape() as tape:
      loss = loss_fn(x[i], y[i])
    expected.append(tape.gradient(loss, model.trainable_variables))
  assert [g is None for g in expected[0]] == [v is model.unused
                                              for v in model.trainable_variables]
  expected = [None if gs[0] is None else np.stack(gs) for gs in zip(*expected)]
  _assert_same(_numpy(grads), expected, tol=1e-4)


class _OursAsTfPfor:
  """Points TF's `control_flow_ops.pfor` (what `GradientTape.jacobian` calls) at ours."""

  def __init__(self, monkeypatch):
    self.calls = 0

    def pfor(*args, **kwargs):
      self.calls += 1
      return vectorize.pfor(*args, **kwargs)

    monkeypatch.setattr(tf_pfor_ops, "pfor", pfor)


@pytest.mark.parametrize("unconnected", [tf.UnconnectedGradients.NONE,
                                         tf.UnconnectedGradients.ZERO])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_tape_jacobian_with_an_unconnected_source_on_our_pfor(monkeypatch, unconnected, mode):
  x, unused = tf.constant([1.0, 2.0, 3.0]), tf.constant([4.0, 5.0])

  def jacobian():
    with tf.GradientTape() as tape:
      tape.watch([x, unused])
      y = tf.sin(x) * x[0]
    return tape.jacobian(y, [x, unused], unconnected_gradients=unconnected)

  run = jacobian if mode == "eager" else tf.function(jacobian)
  expected = _numpy(run())
  ours = _OursAsTfPfor(monkeypatch)
  actual = _numpy(run() if mode == "eager" else tf.function(jacobian)())
  assert ours.calls == 1
  _assert_same(actual, expected)
  if unconnected == tf.UnconnectedGradients.NONE:
    assert actual[1] is None
  else:
    assert actual[1].shape == (3, 2) and not actual[1].any()


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_tape_batch_jacobian_on_our_pfor(monkeypatch, mode):
  x = tf.reshape(tf.range(6.0), [2, 3])

  def batch_jacobian():
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = tf.tanh(x * 0.1) * x[:, :1]
    return tape.batch_jacobian(y, x)

  run = batch_jacobian if mode == "eager" else tf.function(batch_jacobian)
  expected = _numpy(run())
  ours = _OursAsTfPfor(monkeypatch)
  actual = _numpy(batch_jacobian() if mode == "eager" else tf.function(batch_jacobian)())
  assert ours.calls == 1
  _assert_same(actual, expected)


def test_jacobian_helpers_give_none_for_an_unconnected_input():
  x, unused = tf.constant([1.0, 2.0]), tf.constant([3.0])
  graph = tf.function(lambda x, u: vectorize.jacobian(tf.sin(x), [x, u]))(x, unused)
  assert graph[1] is None and graph[0].shape == (2, 2)
  eager = vectorize.jacobian_fn(lambda xs: tf.sin(xs[0]))([x, unused])
  assert eager[1] is None
  with_none = vectorize.jacobian_fn(lambda x: (tf.sin(x), None))(x)
  assert with_none[1] is None and with_none[0].shape == (2, 2)
  assert vectorize.batch_jacobian_fn(lambda x: [None, x * 2.0])(tf.ones([2, 3]))[0] is None
  assert tf.function(lambda x, u: vectorize.batch_jacobian(x * 2.0, u))(
      tf.ones([2, 3]), tf.ones([2, 1])) is None


def test_jacobian_with_respect_to_nothing_is_empty_as_tf():
  """TF's tests take the jacobian of an eager output with respect to a model's trainable
  variables, [] before it is built: TF returns [] (an empty structure), eagerly too."""
  y = tf.constant([1.0, 2.0])
  assert tf_pfor_gradients.jacobian(y, []) == []
  assert vectorize.jacobian(y, []) == []
  assert vectorize.jacobian(y, ()) == ()
  with pytest.raises(RuntimeError, match="needs graph tensors"):
    vectorize.jacobian(y, [tf.constant(1.0)])


# ----------------------------------------------------------------------------- signatures

@pytest.mark.parametrize("ours,theirs", [
    (vectorize.pfor, tf_pfor_ops.pfor),
    (vectorize.vectorized_map, tf.vectorized_map),
    (vectorize.jacobian, tf_pfor_gradients.jacobian),
    (vectorize.batch_jacobian, tf_pfor_gradients.batch_jacobian),
], ids=["pfor", "vectorized_map", "jacobian", "batch_jacobian"])
def test_signatures_match_tf(ours, theirs):
  def params(fn):
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]

  # One deliberate difference: our pfor warns about fallbacks by default (TF's: warn=False).
  expected = [("warn", True) if ours is vectorize.pfor and name == "warn" else (name, default)
              for name, default in params(theirs)]
  assert params(ours) == expected


def test_jacobian_takes_use_pfor_positionally_as_tf():
  x = tf.constant([1.0, 2.0, 3.0])
  f = lambda x: tf.sin(x) * x[0]  # pylint: disable=unnecessary-lambda-assignment

  @tf.function
  def both(x):
    y, batch = f(x), x[None]
    batch_y = tf.sin(batch) * batch[:, :1]
    return (vectorize.jacobian(y, x, False, 2), tf_pfor_gradients.jacobian(y, x, False, 2),
            vectorize.batch_jacobian(batch_y, batch, False, 2),
            # TF's batch_jacobian fails under TF2 shapes (Dimension methods on an int); a batch
            # of one is the full jacobian's diagonal block
            tf_pfor_gradients.jacobian(batch_y, batch, False, 2)[:, :, 0])

  ours, theirs, batch_ours, batch_theirs = both(x)
  _assert_same(_numpy(ours), _numpy(theirs))
  _assert_same(_numpy(batch_ours), _numpy(batch_theirs))


def _set_difference_body(i):
  difference = tf.raw_ops.ListDiff(x=tf.stack([i, i + 1, i]), y=tf.stack([i + 1]))[0]
  return tf.ensure_shape(difference, [2])   # ListDiff has no converter: falls back


def test_warn_controls_the_fallback_warning():
  with _Absl() as default_pfor:
    tf.function(lambda: vectorize.pfor(_set_difference_body, 3))()
  with _Absl() as pfor_quiet:
    tf.function(lambda: vectorize.pfor(_set_difference_body, 3, warn=False))()
  with _Absl() as default_map:
    tf.function(lambda: vectorize.vectorized_map(_set_difference_body, tf.range(3)))()
  with _Absl() as map_quiet:
    actual = vectorize.vectorized_map(_set_difference_body, tf.range(3), warn=False)
  assert not any("ListDiff" in m for m in pfor_quiet + map_quiet)
  assert sum("ListDiff" in m for m in default_pfor) == 1
  assert sum("ListDiff" in m for m in default_map) == 1
  np.testing.assert_array_equal(actual, testing.sequential(_set_difference_body, 3))


# ----------------------------------------------------------------------------- eager calls

def test_eager_body_closing_over_a_tf_api_function():
  def run(pfor):
    fn = tf.math.reduce_sum
    return pfor(lambda i: fn(tf.gather(X, i)), 3)

  _assert_same(_numpy(run(vectorize.pfor)), _numpy(run(tf_pfor_ops.pfor)))


def test_eager_body_that_calls_itself_through_its_closure():
  def make():
    def body(i, depth=0):
      return tf.gather(X, i) if depth else body(i, 1) * 2.0
    return body

  np.testing.assert_allclose(vectorize.pfor(make(), 3), X[:3] * 2.0)


def _python_if_body(i):
  row = tf.gather(X, i)
  if tf.reduce_sum(row) > 20.0:   # a Python `if` on a tensor: needs autograph
    return row * 2.0
  return -row


def _python_if_on_row(row):
  if tf.reduce_sum(row) > 20.0:
    return row * 2.0
  return -row


def test_eager_python_if_on_a_tensor_as_in_tf_pfor():
  _assert_same(_numpy(vectorize.pfor(_python_if_body, 8)),
               _numpy(tf_pfor_ops.pfor(_python_if_body, 8)))
  # TF's vectorized_map does not convert fn in eager mode (a step beyond TF): map_fn does.
  _assert_same(_numpy(vectorize.vectorized_map(_python_if_on_row, X)),
               _numpy(tf.map_fn(_python_if_on_row, X)))
  # tf.map_fn runs fn as Python eagerly; vectorize.map_fn traces it, converted.
  _assert_same(_numpy(vectorize.map_fn(_python_if_on_row, X)),
               _numpy(tf.map_fn(_python_if_on_row, X)))


@pytest.fixture(name="functions_run_eagerly")
def _functions_run_eagerly():
  tf.config.run_functions_eagerly(True)
  yield
  tf.config.run_functions_eagerly(False)


@pytest.mark.usefixtures("functions_run_eagerly")
def test_run_functions_eagerly_does_not_break_pfor():
  expected = (X * 2.0).numpy()
  body = lambda i: tf.gather(X, i) * 2.0  # pylint: disable=unnecessary-lambda-assignment
  np.testing.assert_allclose(vectorize.pfor(body, 8), expected)
  np.testing.assert_allclose(vectorize.vectorized_map(lambda r: r * 2.0, X), expected)
  np.testing.assert_allclose(tf.function(lambda: vectorize.pfor(body, 8))(), expected)
  assert tf.config.functions_run_eagerly()
  np.testing.assert_allclose(vectorize.jacobian_fn(lambda x: x * 2.0)(tf.ones([2])),
                             2.0 * np.eye(2))
  np.testing.assert_allclose(
      vectorize.map_fn(lambda r: r * 2.0, X), expected)
  tf.config.run_functions_eagerly(False)
  np.testing.assert_allclose(vectorize.pfor(body, 8), expected)
  np.testing.assert_allclose(vectorize.pfor(lambda i: tf.gather(X, i) * 2.0, 8), expected)


# ----------------------------------------------------------------------------- pfor_config

def test_reduce_concat_stacks_the_per_iteration_values_as_tf():
  def body(i, pfor_config):
    return pfor_config.reduce_concat(tf.gather(X, i))

  actual = vectorize.pfor(body, 8)
  assert actual.shape == (8, 8, 3)
  _assert_same(_numpy(actual), _numpy(tf_pfor_ops.pfor(body, 8)))


# ----------------------------------------------------------------------------- vectorized_map

def test_vectorized_map_broadcasts_a_leading_dimension_of_one_as_tf():
  elems = (tf.constant([3.1]), tf.constant([-2.0, 6.0, 9.0]))
  fn = lambda e: e[0] * e[1]  # pylint: disable=unnecessary-lambda-assignment
  actual = vectorize.vectorized_map(fn, elems)
  assert actual.shape == (3,)
  _assert_same(_numpy(actual), _numpy(tf.vectorized_map(fn, elems)))


def test_vectorized_map_broadcasts_at_run_time():
  fn = tf.function(lambda a, b: vectorize.vectorized_map(lambda e: e[0] * e[1], (a, b)),
                   input_signature=[tf.TensorSpec([None])] * 2)
  np.testing.assert_allclose(fn(tf.constant([2.0]), tf.constant([1.0, 2.0, 3.0])),
                             [2.0, 4.0, 6.0])
  np.testing.assert_allclose(fn(tf.constant([1.0, 2.0]), tf.constant([3.0])), [3.0, 6.0])


def test_vectorized_map_leading_dimensions_that_differ_fail_at_trace_time():
  with pytest.raises(ValueError, match="4, 3"):
    vectorize.vectorized_map(lambda e: e[0] * e[1], (tf.ones([4]), tf.ones([3])))


def test_vectorized_map_leading_dimensions_that_differ_at_run_time():
  fn = tf.function(lambda a, b: vectorize.vectorized_map(lambda e: e[0] * e[1], (a, b)),
                   input_signature=[tf.TensorSpec([None])] * 2)
  with pytest.raises(tf.errors.InvalidArgumentError, match="same leading dimension"):
    fn(tf.ones([4]), tf.ones([3]))


# ----------------------------------------------------------------------------- Operations

def _assert_body(i):
  return tf.debugging.Assert(i < 2, [i])


def test_operation_output_in_graph_mode_runs_the_vectorized_op_as_tf():
  graph = tf.Graph()
  with graph.as_default():
    ours = vectorize.pfor(_assert_body, 3)
    theirs = tf_pfor_ops.pfor(_assert_body, 3)
    fine = vectorize.pfor(_assert_body, 2)
    assert isinstance(ours, tf.Operation) and isinstance(theirs, tf.Operation)
  with tf.compat.v1.Session(graph=graph) as session:
    session.run(fine)
    for op in (ours, theirs):
      with pytest.raises(tf.errors.InvalidArgumentError, match="assertion failed"):
        session.run(op)


def test_tuple_with_an_operation_inside_a_tf_function():
  def body(i):
    return tf.gather(X, i), tf.debugging.Assert(i < 2, [i])

  @tf.function
  def run(n):
    rows, check = vectorize.pfor(body, n)
    assert isinstance(check, tf.Operation)
    with tf.control_dependencies([check]):
      return tf.identity(rows)

  np.testing.assert_allclose(run(2), X[:2])
  with pytest.raises(tf.errors.InvalidArgumentError, match="assertion failed"):
    run(3)


def test_operation_output_with_parallel_iterations():
  graph = tf.Graph()
  with graph.as_default():
    x = tf.constant(X.numpy())
    rows, check = vectorize.pfor(lambda i: (tf.gather(x, i), _assert_body(i)), 5,
                                 parallel_iterations=2)
  with tf.compat.v1.Session(graph=graph) as session:
    with pytest.raises(tf.errors.InvalidArgumentError, match="assertion failed"):
      session.run(check)
    del rows


def test_operation_output_in_eager_mode_runs_and_gives_none():
  assert vectorize.pfor(_assert_body, 2) is None
  rows, check = vectorize.pfor(lambda i: (tf.gather(X, i), _assert_body(i)), 2)
  assert check is None
  np.testing.assert_allclose(rows, X[:2])
  with pytest.raises(tf.errors.InvalidArgumentError, match="assertion failed"):
    vectorize.pfor(_assert_body, 3)


# ----------------------------------------------------------------------------- errors

def test_conversion_error_is_a_value_error():
  assert issubclass(vectorize.ConversionError, ValueError)
  with pytest.raises(ValueError, match="ListDiff"):
    vectorize.pfor(_set_difference_body, 3, fallback_to_while_loop=False)


# ----------------------------------------------------------------------------- edge sizes

@pytest.mark.parametrize("iters", [2**32 + 3, 2**40, 2**31])
def test_iters_beyond_int32_are_refused_naming_iters(iters):
  zero_size = lambda i: tf.zeros([0])  # pylint: disable=unnecessary-lambda-assignment
  for value in (iters, tf.constant(iters, tf.int64)):
    with pytest.raises(ValueError, match="iters"):
      vectorize.pfor(zero_size, value)
    with pytest.raises(ValueError, match="iters"):
      tf.function(lambda: vectorize.pfor(zero_size, value))()  # pylint: disable=cell-var-from-loop


@pytest.mark.parametrize("iters", [2**32 + 3, 2**40, -2])
def test_run_time_iters_out_of_range_fail_naming_iters(iters):
  fn = tf.function(lambda n: vectorize.pfor(lambda i: tf.zeros([0]), n),
                   input_signature=[tf.TensorSpec([], tf.int64)])
  with pytest.raises(tf.errors.InvalidArgumentError, match="iters must be in"):
    fn(tf.constant(iters, tf.int64))


def test_negative_int32_run_time_iters_fail_naming_iters():
  fn = tf.function(lambda n: vectorize.pfor(lambda i: tf.gather(X, i), n),
                   input_signature=[tf.TensorSpec([], tf.int32)])
  with pytest.raises(tf.errors.InvalidArgumentError, match="iters must be in"):
    fn(tf.constant(-2))
  assert fn(tf.constant(2)).shape == (2, 3)


# ----------------------------------------------------------------------------- TF1 graphs

def test_tf1_dimension_as_iters():
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [4, 3])
    out = vectorize.pfor(lambda i: tf.gather(x, i) * 2.0, tf.compat.v1.Dimension(4))
    with pytest.raises(ValueError, match="unknown size"):
      vectorize.pfor(lambda i: tf.gather(x, i), tf.compat.v1.Dimension(None))
  expected = X.numpy()[:4] * 2.0
  with tf.compat.v1.Session(graph=graph) as session:
    np.testing.assert_allclose(session.run(out, {x: X.numpy()[:4]}), expected)


def _lazy_variable_body(x):
  def body(i):
    with tf.compat.v1.variable_scope("lazy", reuse=tf.compat.v1.AUTO_REUSE):
      w = tf.compat.v1.get_variable("w", [3, 2], initializer=tf.compat.v1.ones_initializer())
    return tf.matmul(tf.gather(x, i)[None], w)
  return body


def test_tf1_variables_created_in_loop_fn_join_the_callers_collections():
  """A TF1 training step: the variable built lazily inside loop_fn is trainable in the
  caller's graph, so the optimizer finds it, as with TF's pfor."""
  losses = {}
  for name, pfor in (("ours", vectorize.pfor), ("tf", tf_pfor_ops.pfor)):
    graph = tf.Graph()
    with graph.as_default():
      x = tf.compat.v1.placeholder(tf.float32, [4, 3])
      loss = tf.reduce_sum(pfor(_lazy_variable_body(x), 4) ** 2)
      assert [v.name for v in tf.compat.v1.trainable_variables()] == ["lazy/w:0"]
      train = tf.compat.v1.train.GradientDescentOptimizer(0.001).minimize(loss)
      init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as session:
      session.run(init)
      losses[name] = [session.run([loss, train], {x: X.numpy()[:4]})[0] for _ in range(3)]
  np.testing.assert_allclose(losses["ours"], losses["tf"], rtol=1e-5)


def _raised(call):
  with pytest.raises(Exception) as info:
    call()
  return info.value


@pytest.mark.parametrize("pfor", [tf_pfor_ops.pfor, vectorize.pfor], ids=["tf", "vectorize"])
def test_zero_parallel_iterations_names_a_positive_integer(pfor):
  """Code that matches TF's error text ("positive integer") keeps working with ours."""
  error = _raised(lambda: pfor(lambda i: tf.cast(i, tf.float32), 8, parallel_iterations=0))
  assert isinstance(error, ValueError) and "positive integer" in str(error)


@pytest.mark.parametrize("pfor", [tf_pfor_ops.pfor, vectorize.pfor], ids=["tf", "vectorize"])
def test_reduction_with_parallel_iterations_says_unsupported(pfor):
  """A pfor_config reduction under parallel_iterations is refused with TF's wording."""
  def body(i, pfor_config):
    return pfor_config.reduce_sum(tf.gather(X, i))

  error = _raised(lambda: pfor(body, 8, parallel_iterations=2))
  assert isinstance(error, ValueError)
  assert "`parallel_iterations` currently unsupported" in str(error)
