"""OpInput: what a converter receives.

It wraps the original op (for attrs and per-iteration static shapes), its converted inputs
and the context, and offers the few accessors every converter needs: the input as stacked or
invariant tensor, attrs, and `rebuild` to re-emit the same op type on new inputs.
"""

import numpy as np
import tensorflow as tf

from vectorize import graph_io
from vectorize import values
from vectorize.errors import Unvectorizable


class OpInput:
  """The op being converted, its converted inputs and the context."""

  def __init__(self, op, inputs, ctx, lookup=None, needed=None):
    self.op = op
    self.inputs = inputs
    self.ctx = ctx
    self._lookup = lookup
    self._needed = needed

  @property
  def type(self):
    return self.op.type

  @property
  def num_inputs(self):
    return len(self.inputs)

  def value(self, i):
    """The converted `Value` of input i."""
    return self.inputs[i]

  def output_used(self, k):
    """Whether anything the converted graph returns depends on output k (True when the
    walker does not say)."""
    return self._needed is None or self.op.outputs[k].ref() in self._needed

  def is_stacked(self, i):
    return self.inputs[i].stacked

  def stacked(self, i):
    """Input i with the loop axis, tiling it if it is invariant."""
    return values.stack(self.inputs[i], self.ctx.n)

  def invariant(self, i):
    """Input i at its own shape; raises Unvectorizable naming the input if it is stacked."""
    v = self.inputs[i]
    if v.stacked:
      raise Unvectorizable(
          f"input {i} ({self.op.inputs[i].name}) differs per iteration; this converter needs "
          "it loop-invariant")
    return v.tensor

  def static_value(self, i):
    """Input i as a numpy value; raises Unvectorizable unless invariant and known now."""
    value = tf.get_static_value(self.invariant(i))
    if value is None:
      value = tf.get_static_value(self.op.inputs[i])
    if value is None:
      raise Unvectorizable(f"input {i} ({self.op.inputs[i].name}) is not known at trace time")
    return np.asarray(value)

  def converted(self, tensor):
    """The Value of any body tensor converted before this op (for rewrites that look past
    the op's own inputs), or None."""
    return self._lookup(tensor) if self._lookup is not None else None

  def attr(self, name):
    return self.op.get_attr(name)

  def input_shape(self, i):
    """The per-iteration static shape of input i."""
    return self.op.inputs[i].shape

  def known_input_shape(self, i):
    """The per-iteration static shape of input i, with what its converted value knows
    besides (a slice at the loop index, `x[i, 1:]`, has no static size in the body's graph
    but has one once batched)."""
    shape, converted = self.input_shape(i), values.static_iteration_shape(self.value(i))
    return shape.merge_with(converted) if shape.is_compatible_with(converted) else shape

  def output_shape(self, k=0):
    """The per-iteration static shape of output k."""
    return self.op.outputs[k].shape

  def align_for_broadcast(self):
    """All inputs as tensors, stacked ones padded so every input broadcasts per iteration."""
    return values.align_ranks(self.inputs)

  def rebuild(self, inputs, attrs=None, op_type=None):
    """Re-emits this op (or `op_type`) with new input tensors and optionally changed attrs.

    Returns the list of output tensors, or the new operation when it has no outputs.
    """
    new_attrs = graph_io.attrs_of(self.op)
    for name, value in (attrs or {}).items():
      new_attrs[name] = graph_io.attr_value(value)
    new_op = graph_io.emit(op_type or self.op.type, inputs, new_attrs, self.op.graph,
                           name=self.op.name)
    return new_op.outputs if new_op.outputs else new_op
