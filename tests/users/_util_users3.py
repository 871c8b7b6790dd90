"""Shared helpers for the users3 programs: the plain Python loop as the oracle, and
comparisons of structure, dtype, shape and value (ragged outputs by `.to_list()`)."""
import math

import numpy as np
import pytest
import tensorflow as tf

import vectorize


def _stack_one(parts):
  """tf.stack of the iterations' values, or tf.ragged.stack where their shapes differ."""
  if isinstance(parts[0], tf.RaggedTensor):
    return tf.ragged.stack(parts)
  shapes = {tuple(p.shape) for p in parts}
  if len(shapes) == 1:
    return tf.stack(parts)
  return tf.ragged.stack(parts)


def loop(body, n):
  """The plain Python loop: body(i) for each i, stacked per output."""
  outs = [body(tf.constant(i, tf.int32)) for i in range(n)]
  if not outs:
    raise ValueError("use expected values for n = 0")
  flat = [tf.nest.flatten(o, expand_composites=False) for o in outs]
  stacked = [_stack_one([f[k] for f in flat]) for k in range(len(flat[0]))]
  return tf.nest.pack_sequence_as(outs[0], stacked)


def _to_py(x):
  if isinstance(x, tf.RaggedTensor):
    return x.to_list()
  return np.asarray(x).tolist()


def _close(a, b, tol):
  if isinstance(a, list):
    return isinstance(b, list) and len(a) == len(b) and all(
        _close(x, y, tol) for x, y in zip(a, b))
  if isinstance(a, float) or isinstance(b, float):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
      return True
    if isinstance(a, float) and math.isinf(a) or isinstance(b, float) and math.isinf(b):
      return a == b
    return abs(a - b) <= tol * (1 + abs(b))
  return a == b


def assert_same(got, want, tol=1e-5):
  """Same nested structure, kinds (dense / ragged), dtypes and values (shapes for dense)."""
  gflat = tf.nest.flatten(got, expand_composites=False)
  wflat = tf.nest.flatten(want, expand_composites=False)
  tf.nest.assert_same_structure(got, want, expand_composites=False)
  for k, (g, w) in enumerate(zip(gflat, wflat)):
    assert g.dtype == w.dtype, f"output {k}: dtype {g.dtype} != loop's {w.dtype}"
    if isinstance(w, tf.RaggedTensor):
      # The README allows a dense-row ragged output of ragged rank 1 where ragged.stack
      # marks later axes ragged too: compare by to_list.
      assert isinstance(g, (tf.RaggedTensor, tf.Tensor)), type(g)
      if not isinstance(g, tf.RaggedTensor):
        raise AssertionError(f"output {k}: dense {g.shape} where the loop is ragged")
    else:
      assert not isinstance(g, tf.RaggedTensor), f"output {k}: ragged where loop is dense"
      assert tuple(g.shape) == tuple(w.shape), f"output {k}: shape {g.shape} != {w.shape}"
    gl, wl = _to_py(g), _to_py(w)
    if w.dtype == tf.string:
      assert gl == wl, f"output {k}: {gl} != {wl}"
    else:
      assert _close(gl, wl, tol), f"output {k}:\n got  {gl}\n want {wl}"


def assert_empty_like(got, want_dtypes_shapes):
  """For n = 0: each output a [0, ...] tensor (or a ragged one of no rows) of its dtype."""
  gflat = tf.nest.flatten(got, expand_composites=False)
  assert len(gflat) == len(want_dtypes_shapes)
  for g, (dtype, tail) in zip(gflat, want_dtypes_shapes):
    assert g.dtype == dtype, (g.dtype, dtype)
    if tail is None:   # ragged
      assert _to_py(g) == [], _to_py(g)
    else:
      assert tuple(g.shape) == (0,) + tuple(tail), (g.shape, tail)


def runtime_n(body, signature_dtype=tf.int32):
  """pfor inside a tf.function whose n is a run-time tensor."""
  @tf.function(input_signature=[tf.TensorSpec([], signature_dtype)])
  def f(n):
    return vectorize.pfor(body, n)
  return f


def in_function(body, n, jit=False):
  @tf.function(jit_compile=jit)
  def f():
    return vectorize.pfor(body, n)
  return f()


def stateful_compare(variables, inits, body, n, run):
  """Runs the loop, then `run()`, each from `inits`: (loop_out, loop_state, out, state)."""
  for v, x in zip(variables, inits):
    v.assign(x)
  want = loop(body, n)
  want_state = [v.numpy().tolist() for v in variables]
  for v, x in zip(variables, inits):
    v.assign(x)
  got = run()
  got_state = [v.numpy().tolist() for v in variables]
  return want, want_state, got, got_state


def assert_state(got_state, want_state, tol=1e-5):
  for k, (g, w) in enumerate(zip(got_state, want_state)):
    assert _close(g, w, tol), f"variable {k}:\n got  {g}\n want {w}"


def without_checked_env(monkeypatch):
  """This suite's conftest runs every test under VECTORIZE_CHECKED=1; plain mode drops it."""
  monkeypatch.delenv("VECTORIZE_CHECKED", raising=False)


@pytest.fixture(autouse=True)
def plain_mode_users3(monkeypatch):
  """Imported by each users3 file: tests run plain (the checked mode triples each
  conversion's cost); the tests that want the checked mode say so with vectorize.checked()."""
  without_checked_env(monkeypatch)


def checked_pfor(body, n, **kwargs):
  """pfor in the README's checked mode, every iteration checked against the loop."""
  with vectorize.checked(sample=None):
    return vectorize.pfor(body, n, **kwargs)
