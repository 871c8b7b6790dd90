"""Helpers for users2's tests: ragged comparison by values (to_list), as the README says."""
import numpy as np
import tensorflow as tf


def to_py(x):
  if isinstance(x, tf.RaggedTensor):
    return x.to_list()
  return x.numpy().tolist()


def _close(a, b, path, exact, rtol, atol):
  if isinstance(b, list):
    assert isinstance(a, list), f"{path}: got {a!r}, loop gives a list {b!r}"
    assert len(a) == len(b), f"{path}: length {len(a)}, loop gives {len(b)}"
    for k, (x, y) in enumerate(zip(a, b)):
      _close(x, y, f"{path}[{k}]", exact, rtol, atol)
    return
  assert not isinstance(a, list), f"{path}: got list {a!r}, loop gives {b!r}"
  if exact:
    assert a == b, f"{path}: got {a!r}, loop gives {b!r}"
  else:
    assert abs(complex(a) - complex(b)) <= atol + rtol * abs(complex(b)), f"{path}: {a} vs {b}"


def assert_ragged_values(got, ref, rtol=1e-5, atol=1e-6):
  """got: pfor's RaggedTensor; ref: tf.ragged.stack of the loop; equal values and dtype."""
  assert isinstance(got, tf.RaggedTensor), f"kind: got {type(got).__name__}, loop gives ragged"
  assert got.dtype == ref.dtype, f"dtype: got {got.dtype}, loop gives {ref.dtype}"
  assert got.shape.rank == ref.shape.rank, (got.shape, ref.shape)
  exact = not (ref.dtype.is_floating or ref.dtype.is_complex)
  _close(got.to_list(), ref.to_list(), "out", exact, rtol, atol)


def ragged_loop(body, n):
  """tf.ragged.stack of body(i) for i in range(n) (each output)."""
  outs = [body(tf.constant(i)) for i in range(n)]
  return tf.nest.map_structure(lambda *xs: tf.ragged.stack(list(xs)), *outs)
