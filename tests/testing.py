"""Shared test machinery: the sequential reference, argument generation, comparisons.

`pfor(body, n)` must equal `tf.stack([body(i) for i in range(n)])`; `sequential` computes
that reference one iteration at a time in eager mode, and `run_pfor` runs the vectorized
form eagerly, in a `tf.function`, with n known only at run time, or under XLA.
"""

import numpy as np
import tensorflow as tf

import vectorize

MODES = ("function", "eager", "dynamic", "xla")


def sequential(body, n, output_spec=None):
  """`tf.stack([body(i) for i in range(n)])` per output, as numpy; n = 0 uses output_spec."""
  if n == 0:
    return tf.nest.map_structure(
        lambda s: np.zeros([0] + s.shape.as_list(), s.dtype.as_numpy_dtype), output_spec)
  outs = [body(tf.constant(i)) for i in range(n)]
  return tf.nest.map_structure(
      lambda *xs: np.stack([np.asarray(tf.convert_to_tensor(x)) for x in xs]), *outs)


def output_spec(body):
  """The per-iteration output structure of `body` as TensorSpecs (traced, not run)."""
  return tf.function(body, autograph=False).get_concrete_function(
      tf.TensorSpec([], tf.int32)).structured_outputs


def example_spec(body):
  """The per-iteration output structure of `body`, from running iteration 0 (so dims that
  tracing leaves unknown are known)."""
  return tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype),
                               body(tf.constant(0)))


def run_pfor(body, n, mode="function", fallback=False, **kwargs):
  """Vectorizes `body` over n iterations in one of MODES; returns numpy structure."""
  out = pfor_in_mode(body, n, mode, fallback, **kwargs)
  return tf.nest.map_structure(lambda t: np.asarray(t), out)


def pfor_in_mode(body, n, mode="function", fallback=False, **kwargs):
  """Vectorizes `body` over n iterations in one of MODES; returns what pfor returns
  (RaggedTensors stay ragged)."""
  if mode == "eager":
    out = vectorize.pfor(body, n, fallback_to_while_loop=fallback, **kwargs)
  elif mode == "function":
    out = tf.function(lambda: vectorize.pfor(body, n, fallback_to_while_loop=fallback,
                                             **kwargs), autograph=False)()
  elif mode == "dynamic":
    fn = tf.function(lambda m: vectorize.pfor(body, m, fallback_to_while_loop=fallback,
                                              **kwargs),
                     input_signature=[tf.TensorSpec([], tf.int32)], autograph=False)
    out = fn(tf.constant(n))
  elif mode == "xla":
    out = tf.function(lambda: vectorize.pfor(body, n, fallback_to_while_loop=fallback,
                                             **kwargs), jit_compile=True, autograph=False)()
  else:
    raise ValueError(mode)
  return out


def assert_allclose(actual, expected, tol=1e-5):
  """Compares nested numpy structures: shapes and dtypes exactly, values within tol."""
  tf.nest.assert_same_structure(actual, expected)
  for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
    a, e = np.asarray(a), np.asarray(e)
    assert a.shape == e.shape, f"shape {a.shape} != expected {e.shape}"
    assert a.dtype == e.dtype, f"dtype {a.dtype} != expected {e.dtype}"
    if a.dtype.kind in "fc":
      np.testing.assert_allclose(a, e, rtol=tol, atol=tol)
    else:
      np.testing.assert_array_equal(a, e)


def random_array(rng, shape, dtype):
  """Test data of a dtype: normal floats, small ints (negatives too), random bools."""
  dtype = tf.as_dtype(dtype)
  if dtype.is_floating:
    return rng.standard_normal(shape).astype(dtype.as_numpy_dtype)
  if dtype.is_complex:
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(
        dtype.as_numpy_dtype)
  if dtype == tf.bool:
    return rng.random(shape) < 0.5
  if dtype.is_unsigned:
    return rng.integers(0, 10, shape).astype(dtype.as_numpy_dtype)
  if dtype.is_integer:
    return rng.integers(-5, 10, shape).astype(dtype.as_numpy_dtype)
  if dtype == tf.string:
    return np.array(rng.choice(["a", "bc", "def"], shape), dtype=object)
  raise ValueError(dtype)


def check_against_loop(body, n, mode="function", tol=1e-5):
  """pfor(body, n) in `mode` equals the sequential loop."""
  expected = sequential(body, n, output_spec(body))
  assert_allclose(run_pfor(body, n, mode=mode), expected, tol)


def check_gradient_against_loop(make_body, x, n, tol=1e-5):
  """The gradient w.r.t. `x` of the sum of squares of `pfor(make_body(x), n)` (fallback off,
  in a tf.function) equals that of the stacked loop of `make_body(x)`."""

  @tf.function(autograph=False)
  def pfor_grad(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      out = vectorize.pfor(make_body(x), n, fallback_to_while_loop=False)
      total = tf.reduce_sum(out * out)
    return tf.convert_to_tensor(tape.gradient(total, x, unconnected_gradients="zero"))

  with tf.GradientTape() as tape:
    tape.watch(x)
    body = make_body(x)
    out = tf.stack([body(tf.constant(i)) for i in range(n)])
    total = tf.reduce_sum(out * out)
  expected = tf.convert_to_tensor(tape.gradient(total, x, unconnected_gradients="zero"))
  np.testing.assert_allclose(pfor_grad(x), expected, rtol=tol)


def all_ops(graph):
  """The ops of a graph and of every function in its library."""
  ops = list(graph.get_operations())
  for fn in graph._functions.values():  # pylint: disable=protected-access
    if getattr(fn, "graph", None) is not None:
      ops.extend(all_ops(fn.graph))
  return ops


def all_op_types(graph):
  """The op types of a graph and of every function in its library, with repeats."""
  return [op.type for op in all_ops(graph)]
