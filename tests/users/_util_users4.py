"""Shared helpers for the users4 programs: the reference loop and comparisons.

Every reference is computed by our own Python loop over body(i), never by vectorize.
"""
import numpy as np
import pytest
import tensorflow as tf

import vectorize


@pytest.fixture(autouse=True)
def _no_checked_env(monkeypatch):
  monkeypatch.delenv("VECTORIZE_CHECKED", raising=False)


class Rows:
  """The loop's values of one output whose size differs per iteration (not a nest)."""

  def __init__(self, rows):
    self.rows = list(rows)


def _stack(vals):
  """np values of one output over the iterations: np.stack or Rows where sizes differ."""
  shapes = {np.shape(v) for v in vals}
  if len(shapes) <= 1:
    return np.stack(vals) if vals else None
  return Rows(vals)


def loop(body, n, *, index_dtype=tf.int32):
  """Runs body(tf.constant(i)) for i in range(n) eagerly; returns the nest of stacked numpy
  values (a list of per-iteration arrays where sizes differ)."""
  outs, flat = [], []
  for i in range(n):
    o = body(tf.constant(i, index_dtype))
    outs.append(o)
    # read now: an eager assign_add returns a lazy read of the variable
    flat.append([to_np(t) for t in tf.nest.flatten(o)])
  if not outs:
    return None
  per = [_stack([f[k] for f in flat]) for k in range(len(flat[0]))]
  return tf.nest.pack_sequence_as(outs[0], per)


def to_np(x):
  if isinstance(x, tf.RaggedTensor):
    return Rows([to_np(r) for r in x])
  if isinstance(x, tf.compat.v1.ragged.RaggedTensorValue):
    splits, vals = x.row_splits, x.values
    return Rows([to_np(vals)[splits[k]:splits[k + 1]] if not isinstance(vals, Rows)
                 else Rows(vals.rows[splits[k]:splits[k + 1]]) for k in range(len(splits) - 1)])
  if isinstance(x, (tf.Tensor, tf.Variable)):
    return x.numpy()
  if isinstance(x, tf.IndexedSlices):
    return tf.convert_to_tensor(x).numpy()
  return np.asarray(x)


def assert_same(got, want, rtol=1e-5, atol=1e-5):
  """got: pfor's (nest of tensors / ragged); want: loop()'s nest."""
  gf = tf.nest.flatten(got, expand_composites=False)
  wf = tf.nest.flatten(want)
  assert len(gf) == len(wf), (len(gf), len(wf))
  for g, w in zip(gf, wf):
    g = to_np(g)
    _cmp(g, w, rtol, atol)


def _cmp(g, w, rtol, atol):
  if isinstance(w, Rows) or isinstance(g, Rows):
    g = g.rows if isinstance(g, Rows) else list(g)
    w = w.rows if isinstance(w, Rows) else list(w)
    assert len(g) == len(w), (len(g), len(w))
    for a, b in zip(g, w):
      _cmp(a if isinstance(a, Rows) else np.asarray(a),
           b if isinstance(b, Rows) else np.asarray(b), rtol, atol)
    return
  g = np.asarray(g)
  w = np.asarray(w)
  assert g.shape == w.shape, (g.shape, w.shape)
  if w.dtype.kind in "fc":
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
  else:
    assert g.dtype == w.dtype or (g.dtype.kind in "OSU" and w.dtype.kind in "OSU"), (
        g.dtype, w.dtype)
    np.testing.assert_array_equal(g, w)


def run_modes(body, n, modes=("eager", "function", "runtime_n")):
  """pfor(body, n) in each mode; yields (mode, result)."""
  for mode in modes:
    if mode == "eager":
      yield mode, vectorize.pfor(body, n)
    elif mode == "function":
      yield mode, tf.function(lambda: vectorize.pfor(body, n))()
    elif mode == "runtime_n":
      f = tf.function(lambda k: vectorize.pfor(body, k),
                      input_signature=[tf.TensorSpec([], tf.int32)])
      yield mode, f(tf.constant(n))
    elif mode == "xla":
      yield mode, tf.function(lambda: vectorize.pfor(body, n), jit_compile=True)()
    else:
      raise ValueError(mode)


def check_modes(body, n, modes=("eager", "function", "runtime_n"), **tol):
  want = loop(body, n)
  for mode, got in run_modes(body, n, modes):
    try:
      assert_same(got, want, **tol)
    except AssertionError as e:
      raise AssertionError(f"mode {mode}: {e}") from e
  return want


def check_stateful(body, n, variables, modes=("eager", "runtime_n"), **tol):
  init = [v.numpy() for v in variables]

  def reset():
    for v, x in zip(variables, init):
      v.assign(x)

  reset()
  want = loop(body, n)
  want_state = [v.numpy() for v in variables]
  for mode in modes:
    reset()
    if mode == "eager":
      got = vectorize.pfor(body, n)
    elif mode == "function":
      got = tf.function(lambda: vectorize.pfor(body, n))()
    elif mode == "runtime_n":
      got = tf.function(lambda k: vectorize.pfor(body, k),
                        input_signature=[tf.TensorSpec([], tf.int32)])(tf.constant(n))
    elif mode == "xla":
      got = tf.function(lambda: vectorize.pfor(body, n), jit_compile=True)()
    try:
      if n:
        assert_same(got, want, **tol)
      for v, s in zip(variables, want_state):
        _cmp(np.asarray(v.numpy()), np.asarray(s), 1e-5, 1e-5) if np.asarray(s).dtype.kind not in "fc" else \
        np.testing.assert_allclose(v.numpy(), s, rtol=1e-5, atol=1e-5,
                                   err_msg=f"variable {getattr(v, 'path', v.name)} after pfor")
    except AssertionError as e:
      raise AssertionError(f"mode {mode}: {e}") from e
  reset()
