"""Helpers for the users' tests: the sequential loop, pfor in each mode, a strict
comparison."""
import numpy as np
import tensorflow as tf

import vectorize


def stack(values):
  """Stacks like a user would: tf.stack if shapes agree, else tf.ragged.stack."""
  values = list(values)
  if values and isinstance(values[0], tf.RaggedTensor):
    return tf.ragged.stack(values)
  shapes = {tuple(v.shape.as_list()) for v in values}
  if len(shapes) <= 1:
    return tf.stack(values)
  return tf.ragged.stack(values)


def loop(body, n):
  """stack(body(i) for i in range(n)) for n >= 1."""
  outs = [body(tf.constant(i)) for i in range(n)]
  return tf.nest.map_structure(lambda *xs: stack(xs), *outs)


def run_pfor(body, n, mode):
  """`vectorize.pfor(body, n)` eagerly, in a `tf.function` (static n), under XLA, with n a
  run-time tensor ("runtime_n", inside a `tf.function`), or at n = 0 ("zero")."""
  if mode == "eager":
    return vectorize.pfor(body, n)
  if mode == "function":
    return tf.function(lambda: vectorize.pfor(body, n))()
  if mode == "xla":
    return tf.function(lambda: vectorize.pfor(body, n), jit_compile=True)()
  if mode == "runtime_n":
    f = tf.function(lambda k: vectorize.pfor(body, k),
                    input_signature=[tf.TensorSpec([], tf.int32)])
    return f(tf.constant(n, tf.int32))
  if mode == "zero":
    return vectorize.pfor(body, 0)
  raise AssertionError(mode)


def rows(fn, elems):
  """Python loop over the rows of a nested elems."""
  n = tf.nest.flatten(elems)[0].shape[0]
  outs = [fn(tf.nest.map_structure(lambda e: e[i], elems)) for i in range(n)]
  return tf.nest.map_structure(lambda *xs: stack(xs), *outs)


def tol(dtype):
  dtype = tf.as_dtype(dtype)
  if dtype in (tf.float16, tf.bfloat16):
    return dict(rtol=1e-2, atol=1e-2)
  if dtype in (tf.float32, tf.complex64):
    return dict(rtol=1e-4, atol=1e-5)
  if dtype in (tf.float64, tf.complex128):
    return dict(rtol=1e-10, atol=1e-12)
  return None  # exact


def assert_same(actual, expected, rtol=None, atol=None):
  """Same structure, same kinds (dense/ragged), dtypes, shapes and values."""
  tf.nest.assert_same_structure(expected, actual, expand_composites=False)
  for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
    if e is None:
      assert a is None, a
      continue
    assert a is not None
    assert isinstance(a, tf.RaggedTensor) == isinstance(e, tf.RaggedTensor), (
        f"kind: got {type(a).__name__}, loop gives {type(e).__name__}")
    assert a.dtype == e.dtype, f"dtype: got {a.dtype}, loop gives {e.dtype}"
    if isinstance(e, tf.RaggedTensor):
      assert a.ragged_rank == e.ragged_rank, (a.ragged_rank, e.ragged_rank)
      assert a.shape.rank == e.shape.rank, (a.shape, e.shape)
      for ra, re in zip(a.nested_row_lengths(), e.nested_row_lengths()):
        np.testing.assert_array_equal(ra.numpy(), re.numpy())
      a, e = a.flat_values, e.flat_values
    a = np.asarray(a.numpy() if hasattr(a, "numpy") else a)
    e = np.asarray(e.numpy() if hasattr(e, "numpy") else e)
    assert a.shape == e.shape, f"shape: got {a.shape}, loop gives {e.shape}"
    t = tol(e.dtype) if e.dtype != object else None
    if rtol is not None or atol is not None:
      t = dict(rtol=rtol or 0, atol=atol or 0)
    if t is None:
      np.testing.assert_array_equal(a, e)
    else:
      np.testing.assert_allclose(a.astype(np.complex128) if np.iscomplexobj(e) else a.astype(np.float64),
                                 e.astype(np.complex128) if np.iscomplexobj(e) else e.astype(np.float64), **t)
