"""Optionals per iteration: a conditional's intermediates on their way to its gradient.

Where a tape differentiates a `tf.function` holding a `tf.cond` after the function was
built (an eager training step), TensorFlow rewrites the conditional to also output the
intermediates its gradient needs, each wrapped in an Optional: `OptionalFromValue(x)` in
the branch that computes x, `OptionalNone` in the others; the gradient's conditional, on
the same predicate, unwraps them with `OptionalGetValue` in the branch that computed them.
Per iteration, the lanes of a stacked predicate take different branches, and a variant
cannot be merged lane by lane. So an Optional is held as its value: x itself, and where a
branch has none, zeros of x's type (which the gradient never reads: it reads a lane's
value in the branch that made it). It is the FakeParam scheme TensorFlow uses under XLA.
An Optional's presence (`OptionalHasValue`) is not held, and refuses.
"""

import numpy as np
import tensorflow as tf

from vectorize import graph_io
from vectorize.errors import Unvectorizable
from vectorize.registry import register
from vectorize.values import Value, invariant

_SPEC = "_vectorize_payload_spec"   # set on an OptionalNone op by `mark_stand_ins`


def mark_stand_ins(graphs):
  """Gives each `OptionalNone` output of a conditional's branches the value type of
  another branch's Optional at the same output (what its stand-in must look like)."""
  for outputs in zip(*[g.outputs for g in graphs]):
    specs = [graph_io.optional_payload_spec(t) for t in outputs if t.dtype == tf.variant]
    specs = [s for s in specs if s is not None]
    if not specs:
      continue
    for t in outputs:
      source = graph_io.through_identities(t)
      if source.op.type == "OptionalNone":
        setattr(source.op, _SPEC, specs[0])


def flattened_where_shapes_differ(graphs, outputs):
  """`outputs` (per branch, each its outputs stacked on its lanes) with each Optional that
  holds values of different static shapes in different branches flattened to `[lanes,
  size]` and padded to the largest size: a lane's value is read back, at its shape, in the
  gradient's branch of the same index (`OptionalGetValue`)."""
  for k, outs in enumerate(zip(*[g.outputs for g in graphs])):
    if not any(t.dtype == tf.variant and graph_io.carries_optional(t) for t in outs):
      continue
    held = [o[k] for o in outputs]
    shapes = {tuple(t.shape[1:].as_list()) for t in held if isinstance(t, tf.Tensor)}
    if len(shapes) < 2:
      continue
    if len({t.dtype for t in held}) > 1 or any(None in s for s in shapes):
      raise Unvectorizable(f"Optional output {k} holds values of other types or shapes "
                           "(not static) in different branches")
    size = max(int(np.prod(s)) for s in shapes)
    for o in outputs:
      own = int(np.prod(o[k].shape[1:].as_list()))
      rows = tf.reshape(o[k], [tf.shape(o[k])[0], own])
      o[k] = tf.pad(rows, [[0, 0], [0, size - own]])
  return outputs


@register("OptionalFromValue")
def _convert_optional_from_value(op):
  """The Optional of one value is that value."""
  if op.num_inputs != 1:
    raise Unvectorizable("an Optional of several values")
  return op.value(0)


@register("OptionalNone")
def _convert_optional_none(op):
  """Zeros of the value type another branch gives (`mark_stand_ins`)."""
  spec = getattr(op.op, _SPEC, None)
  if spec is None or spec[1].rank is None:
    raise Unvectorizable("an Optional with no value, of a type nothing in the graph gives")
  dtype, shape = spec
  return invariant(tf.zeros([0 if d is None else d for d in shape.as_list()], dtype))


@register("OptionalGetValue")
def _convert_optional_get_value(op):
  """The value held; a real Optional (loop-invariant, made outside) is read as such."""
  v = op.value(0)
  if v.tensor.dtype == tf.variant:
    if v.stacked:
      raise Unvectorizable("an Optional that differs per iteration, held as a variant")
    return [invariant(t) for t in op.rebuild([v.tensor])]
  declared = op.op.outputs[0].shape
  held = v.tensor.shape[1:] if v.stacked else v.tensor.shape
  if declared.is_fully_defined() and held.is_fully_defined() and held != declared:
    # held flattened and padded (`flattened_where_shapes_differ`): this branch's values
    flat = v.tensor[..., :declared.num_elements()]
    if not v.stacked:
      return invariant(tf.reshape(flat, declared))
    shape = tf.concat([tf.shape(flat)[:1], tf.constant(declared.as_list(), tf.int32)], 0)
    return Value(tf.reshape(flat, shape), True)
  return Value(v.tensor, v.stacked)


@register("OptionalHasValue")
def _convert_optional_has_value(op):
  v = op.value(0)
  if v.tensor.dtype == tf.variant and not v.stacked:
    return invariant(op.rebuild([v.tensor])[0])
  raise Unvectorizable("whether an Optional per iteration has a value is not held")
