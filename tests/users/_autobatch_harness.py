"""The users' autobatch programs' harness: each program against the per-example loop (the
function called eagerly on each example's tensors, results stacked), eagerly, in a
`tf.function` traced for a batch of None, under XLA; gradients against per-example tapes."""
import numpy as np
import pytest
import tensorflow as tf

import vectorize


@pytest.fixture(autouse=True)
def _no_checked_mode(monkeypatch):
  # Every result here is compared with the per-example run by the test itself.
  monkeypatch.delenv("VECTORIZE_CHECKED", raising=False)


# ---------------------------------------------------------------------------------------
# Harness
# ---------------------------------------------------------------------------------------

def _specs(args):
  return [tf.TensorSpec([None] + a.shape[1:].as_list(), a.dtype) for a in args]


def _tuple(x):
  return tuple(x) if isinstance(x, (tuple, list)) else (x,)


_REFERENCE = []   # (fn, inputs as arrays, reference)


def per_example(fn, *args):
  """The reference: `fn` called eagerly on each example's tensors, each output stacked (kept
  per program and inputs, a prefix of a batch read from the whole batch's)."""
  n = int(args[0].shape[0])
  for f, key, ref in _REFERENCE:
    if f is fn and len(key) == len(args) and all(
        k.shape[0] >= n and np.array_equal(k[:n], np.asarray(a)) for k, a in zip(key, args)):
      return tuple(r[:n] for r in ref)
  outs = [_tuple(fn(*[a[i] for a in args])) for i in range(n)]
  ref = tuple(np.stack([np.asarray(o[k]) for o in outs]) for k in range(len(outs[0])))
  _REFERENCE.append((fn, tuple(np.asarray(a) for a in args), ref))
  return ref


def assert_same(got, want, rtol=1e-5, atol=1e-5, what="", dtypes=None):
  got = _tuple(got)
  assert len(got) == len(want), f"{what}: {len(got)} outputs, expected {len(want)}"
  for k, (g, w) in enumerate(zip(got, want)):
    if dtypes is not None and dtypes[k] is not None:
      assert g.dtype == dtypes[k], f"{what} output {k}: dtype {g.dtype}, expected {dtypes[k]}"
    g = np.asarray(g)
    assert g.shape == w.shape, f"{what} output {k}: shape {g.shape}, expected {w.shape}"
    if w.dtype.kind == "f" or g.dtype.kind == "f":
      np.testing.assert_allclose(g, w.astype(g.dtype), rtol=rtol, atol=atol,
                                 err_msg=f"{what} output {k}")
    else:
      np.testing.assert_array_equal(g, w, err_msg=f"{what} output {k}")


def _runner(batched, mode, args):
  if mode == "eager":
    return batched
  if mode == "function":
    return tf.function(batched, input_signature=_specs(args))
  return tf.function(batched, jit_compile=True)


def run_forms(fn, mode, args, more_args=None, rtol=1e-5, atol=1e-5, dtypes=None,
              want=None, **kw):
  """autobatch(fn) on `args` (and, in the function form, also on `more_args`, a batch of
  another size through the same trace) against the per-example loop."""
  batched = vectorize.autobatch(fn, **kw)
  run = _runner(batched, mode, args)
  batches = [args]
  if mode == "function" and more_args is not None:
    batches.append(more_args)
  for cols in batches:
    if int(cols[0].shape[0]) == 0:   # an empty batch: every result has 0 rows
      full = per_example(fn, *args)
      got = _tuple(run(*cols))
      assert len(got) == len(full)
      for g, w in zip(got, full):
        assert tuple(g.shape) == (0,) + w.shape[1:], (g.shape, w.shape)
      continue
    ref = per_example(fn, *cols)
    if want is not None and cols is args:
      assert_same(ref, want, rtol, atol, what="reference vs independent values")
    assert_same(run(*cols), ref, rtol, atol, what=f"{mode} batch {int(cols[0].shape[0])}",
                dtypes=dtypes)
  return batched


def _loss(outs):
  total = tf.constant(0.0, tf.float64)
  for k, o in enumerate(_tuple(outs)):
    if tf.is_tensor(o) and o.dtype.is_floating:
      term = (k + 1.0) * tf.reduce_sum(o) + 0.3 * tf.reduce_sum(o * o)
      total = total + tf.cast(term, tf.float64)
  return total


def per_example_grads(fn, args, wrt):
  n = int(args[0].shape[0])
  rows = []
  for i in range(n):
    cols = [a[i] for a in args]
    with tf.GradientTape() as tape:
      for k in wrt:
        tape.watch(cols[k])
      loss = _loss(fn(*cols))
    gs = tape.gradient(loss, [cols[k] for k in wrt])
    rows.append([np.zeros(cols[k].shape, cols[k].dtype.as_numpy_dtype) if g is None
                 else np.asarray(g) for k, g in zip(wrt, gs)])
  return [np.stack([r[j] for r in rows]) for j in range(len(wrt))]


def check_grads(fn, mode, args, wrt, rtol=1e-4, atol=1e-5, **kw):
  """The gradient of `_loss` of the batched outputs w.r.t. the inputs `wrt` (indices),
  against per-example gradients, and the outputs computed beside it against the loop. The
  tape is inside the compiled function under XLA ("xla_dynamic": traced for a batch of
  None, called at two batch sizes)."""
  batched = vectorize.autobatch(fn, **kw)

  def grads(*cols):
    with tf.GradientTape() as tape:
      for k in wrt:
        tape.watch(cols[k])
      outs = batched(*cols)
      loss = _loss(outs)
    gs = tape.gradient(loss, [cols[k] for k in wrt])
    return outs, [tf.zeros_like(cols[k]) if g is None else g for k, g in zip(wrt, gs)]

  batches = [args]
  if mode == "eager":
    run = grads
  elif mode == "function":
    run = tf.function(grads, input_signature=_specs(args))
  elif mode == "xla_dynamic":
    run = tf.function(grads, input_signature=_specs(args), jit_compile=True)
    batches.append(first(args, 2))
  else:
    run = tf.function(grads, jit_compile=True)
  for cols in batches:
    outs, got = run(*cols)
    assert_same(outs, per_example(fn, *cols), rtol, atol, what=f"{mode} (under a tape)")
    want = per_example_grads(fn, cols, wrt)
    for j, (g, w) in enumerate(zip(got, want)):
      np.testing.assert_allclose(np.asarray(g), w, rtol=rtol, atol=atol,
                                 err_msg=f"{mode}: gradient w.r.t. input {wrt[j]}")


def f32(*v):
  return tf.constant(v, tf.float32)


def f64(*v):
  return tf.constant(v, tf.float64)


def i32(*v):
  return tf.constant(v, tf.int32)


def i64(*v):
  return tf.constant(v, tf.int64)


def first(args, n):
  return tuple(a[:n] for a in args)
