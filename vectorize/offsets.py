"""Bounds that differ per iteration by an invariant difference.

`tf.range(i, i + 3)`, `tf.range(s, s + k)` and `x[s:s + k]` have per-iteration bounds, yet
the size between them is the same in every iteration: both bounds are one body tensor (the
root) plus offsets that are loop-invariant. A converter sizing its output by such a
difference stacks the output, as the loop does, instead of making it ragged
(`vectorize/ragged.py`): a length provably invariant is no ragged length.

Integer bounds only: a float sum rounds, so `(s + 2.5) - s` may differ per iteration.
"""

import numpy as np
import tensorflow as tf

# Ops that pass a bound on unchanged, and those adding an offset to it.
_PASS_THROUGH = frozenset(["Identity", "Snapshot"])
_ADDITIONS = frozenset(["AddV2", "Add", "Sub"])


def invariant_difference(op, end, begin, k=None, dtype=None):
  """Column k (or the scalar) of body inputs `end - begin` of the OpInput `op`, where the
  graph proves it the same in every iteration: an int when the offsets are constants, else a
  scalar tensor of `dtype` (the end's by default) computed from the invariant offsets. None
  when it cannot tell, or for non-integer bounds."""
  end_t, begin_t = op.op.inputs[end], op.op.inputs[begin]
  if not end_t.dtype.is_integer:
    return None
  end_key, end_terms = _offset_form(end_t, k, op.converted)
  begin_key, begin_terms = _offset_form(begin_t, k, op.converted)
  if end_key != begin_key:
    return None
  terms = end_terms + [(-sign, term) for sign, term in begin_terms]
  return _sum(terms, dtype or end_t.dtype)


def _offset_form(tensor, k, converted):
  """(key, terms): column k of `tensor` is the root named by key plus the sum of the signed
  terms (`(sign, int or invariant tensor)`). Follows pass-throughs, Pack and additions of an
  invariant operand in the body's graph, so `i + k` and `i` share a key."""
  terms = []
  while True:
    if k is not None and tensor.shape.rank == 0:
      k = None
    o = tensor.op
    if o.type in _PASS_THROUGH:
      tensor = o.inputs[0]
    elif o.type == "Pack" and k is not None and o.get_attr("axis") == 0:
      tensor, k = o.inputs[k], None
    elif o.type in _ADDITIONS:
      a, b = o.inputs
      ib, ia = _invariant_column(b, k, converted), _invariant_column(a, k, converted)
      if ib is not None:
        terms.append((-1 if o.type == "Sub" else 1, ib))
        tensor = a
      elif ia is not None and o.type != "Sub":
        terms.append((1, ia))
        tensor = b
      else:
        return (tensor.ref(), k), terms
    else:
      return (tensor.ref(), k), terms


def _invariant_column(tensor, k, converted):
  """Column k (or the scalar) of a body tensor the same in every iteration: an int where the
  graph holds a constant, else its converted tensor's; None where it varies or has no such
  column."""
  value = tf.get_static_value(tensor)
  if value is not None:
    value = np.asarray(value)
    if value.ndim == 0:
      return int(value)
    if value.ndim == 1 and k is not None:
      return int(value[k if value.shape[0] > 1 else 0])
    return None
  v = converted(tensor)
  if v is None or v.stacked or not isinstance(v.tensor, tf.Tensor):
    return None
  t = v.tensor
  if t.shape.rank == 0:
    return t
  if t.shape.rank == 1 and k is not None and t.shape[0] is not None:
    return t[k if t.shape[0] > 1 else 0]
  return None


def _sum(terms, dtype):
  """The sum of signed terms: an int when all are ints."""
  constant = sum(sign * t for sign, t in terms if isinstance(t, int))
  tensors = [t if sign > 0 else -t for sign, t in
             ((sign, tf.cast(t, dtype)) for sign, t in terms if not isinstance(t, int))]
  if not tensors:
    return constant
  return tf.math.add_n(tensors) + tf.constant(constant, dtype)
