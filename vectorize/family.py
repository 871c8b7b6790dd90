"""Family helpers: one converter shape registered for many op types.

Most ops need no hand-written converter. Elementwise ops broadcast once stacked inputs are
padded after the loop axis; ops that accept any leading batch dims take the stacked input as
is; reductions and other axis-taking ops see their axis shifted past the loop axis; ops with
exactly one batch axis (conv, pool) get the loop axis folded into it and split back after.
"""

import dataclasses

import numpy as np
import tensorflow as tf

from vectorize import fallback
from vectorize import registry
from vectorize import values
from vectorize.errors import Unvectorizable
from vectorize.op_input import OpInput
from vectorize.registry import register
from vectorize.values import Value, stacked, invariant


ELEMENTWISE = registry.family("elementwise")   # its other kinds' converters: ragged ones


def register_elementwise(*op_types):
  """Ops that broadcast their inputs elementwise: align ranks, re-emit, all outputs stacked."""
  ELEMENTWISE.add(*op_types)

  def convert(op):
    return [stacked(t) for t in op.rebuild(op.align_for_broadcast())]

  register(*op_types)(convert)


def register_leading_batch(*op_types, batch_inputs=(0,)):
  """Ops whose `batch_inputs` accept any number of leading batch dims (the loop axis is one).

  Other inputs must be loop-invariant; every output is stacked.
  """

  def convert(op):
    inputs = []
    for i in range(op.num_inputs):
      inputs.append(op.stacked(i) if i in batch_inputs else op.invariant(i))
    return [stacked(t) for t in op.rebuild(inputs)]

  register(*op_types)(convert)


def register_axis_shift(*op_types, axis_input=None, axis_attr=None, data_inputs=(0,),
                        identity_if_no_axis=False):
  """Ops taking an axis (as input `axis_input` or attr `axis_attr`): shift it past axis 0.

  Data inputs are stacked (tiled if invariant), the axis must be loop-invariant; every
  output is stacked. Negative axes count from the end and need no shift.
  `identity_if_no_axis`: a reduction over no axes (`reduce_sum` of a scalar) is its input,
  emitted as nothing (Grappler miscompiles such a Sum inside a conditional branch).
  """

  def convert(op):
    if identity_if_no_axis and not op.is_stacked(axis_input):
      axes = tf.get_static_value(op.invariant(axis_input))
      if axes is not None and np.size(axes) == 0:
        return [Value(op.value(0).tensor, op.is_stacked(0))]
    return shifted(op)

  def shifted(op):
    axis = None if axis_input is None else values.shift_axis(op.invariant(axis_input))
    inputs = []
    for i in range(op.num_inputs):
      if i == axis_input:
        inputs.append(axis)
      elif i in data_inputs or data_inputs == "all":
        inputs.append(op.stacked(i))
      else:
        inputs.append(op.invariant(i))
    attrs = {}
    if axis_attr is not None:
      attrs[axis_attr] = values.shift_axis(op.attr(axis_attr))
    return [stacked(t) for t in op.rebuild(inputs, attrs)]

  register(*op_types)(convert)


def unless_empty(op, convert):
  """`convert(op)` on at least one iteration, for kernels that reject the empty batch or zero
  channels that n = 0 makes (some abort the process: oneDNN's MaxPoolGrad, on some CPUs).
  Unless n is known to be positive, stacked inputs get zero rows up to one iteration and
  stacked outputs are cut back to n (no cond, so XLA compiles it too).
  """
  n = values.loop_length(op.ctx)
  known = not isinstance(n, tf.Tensor)
  if known and n > 0:
    return convert(op)
  m = 1 if known else tf.maximum(n, 1)
  inputs = [Value(tf.pad(v.tensor, [[0, m - n]] + [[0, 0]] * (values.rank(v.tensor) - 1)),
                  True) if v.stacked else v for v in op.inputs]
  ctx = dataclasses.replace(op.ctx, n=tf.convert_to_tensor(m),
                            static_n=1 if known else None)
  results = convert(OpInput(op.op, inputs, ctx))
  results = [results] if isinstance(results, Value) else results
  return [stacked(v.tensor[:n]) if v.stacked else v for v in results]


def fold_into_batch(op, batch_inputs=(0,), sizes_input=None):
  """Runs `op` with the loop axis folded into its batch axis, `[n, b, ...] -> [n*b, ...]`.

  Inputs in `batch_inputs` are folded (tiled first if invariant); entry 0 of the shape
  vector input `sizes_input` (an op whose output shape is an input, e.g. AvgPoolGrad) is
  multiplied by n; the other inputs must be invariant. Every output is split back,
  `[n*b, ...] -> [n, b, ...]`.
  """
  first = next((i for i in batch_inputs if op.is_stacked(i)), None)
  if first is None:
    raise Unvectorizable("only a non-batch input differs per iteration")
  n = values.loop_length(op.ctx)
  b = values.dynamic_shape(op.value(first).tensor)[1]
  inputs = []
  for i in range(op.num_inputs):
    if i in batch_inputs:
      inputs.append(values.merge_leading(op.stacked(i)))
    elif i == sizes_input:
      sizes = size_list(op, i)
      inputs.append(values.shape_vector([sizes[0] * n] + sizes[1:], op.op.inputs[i].dtype))
    else:
      inputs.append(op.invariant(i))
  return [stacked(values.split_leading(t, n, b)) for t in op.rebuild(inputs)]


def size_list(op, i):
  """Invariant shape-vector input i, which is also the shape of output 0, as a list of ints
  (where known at trace time) and scalar tensors."""
  t = op.invariant(i)
  known = op.output_shape(0)
  if known.is_fully_defined():
    return known.as_list()
  value = tf.get_static_value(t)
  if value is None:
    value = tf.get_static_value(op.op.inputs[i])
  if value is not None:
    return [int(d) for d in value]
  if t.shape.rank != 1 or t.shape[0] is None:
    raise Unvectorizable(f"shape input {i} has unknown length")
  dims = tf.unstack(t, t.shape[0])
  if known.rank != len(dims):
    return dims
  return [d if s is None else s for d, s in zip(dims, known.as_list())]


def register_merge_batch(*op_types, batch_inputs=(0,), sizes_input=None, rejects_empty=False):
  """Ops with one batch axis (axis 0 per iteration): fold the loop axis into it
  (`fold_into_batch`). `sizes_input`: the index of a shape-vector input giving the output's
  shape, whose batch entry is scaled by n. `rejects_empty`: the kernel cannot take an empty
  batch, so n = 0 runs it on one padded iteration (`unless_empty`).
  """
  register_converter(*op_types, rejects_empty=rejects_empty)(
      lambda op: fold_into_batch(op, batch_inputs, sizes_input))


def register_converter(*op_types, rejects_empty=False):
  """Decorator registering a hand-written converter with the family options:
  `rejects_empty` puts it behind the n = 0 guard (`unless_empty`), for kernels that reject
  an empty batch."""

  def decorate(convert):
    register(*op_types)(
        (lambda op: unless_empty(op, convert)) if rejects_empty else convert)
    return convert

  return decorate


def register_invariant_output(*op_types, per_iteration):
  """Ops whose result depends only on the per-iteration shape of their stacked input 0.

  `per_iteration(op, shape)` builds the result from the per-iteration shape (an int32
  vector); the result is invariant.
  """

  def convert(op):
    shape = values.per_iteration_shape(op.value(0))
    if any(op.is_stacked(i) for i in range(1, op.num_inputs)):
      raise Unvectorizable("only input 0 may differ per iteration")
    return [invariant(t) for t in tf.nest.flatten(per_iteration(op, shape))]

  register(*op_types)(convert)


def run_sequential(op):
  """A deliberate loop over the iterations for this op (exact; not counted as a fallback).

  For converters that vectorize some input patterns and must loop for others.
  """
  return fallback.run_sequentially(op.op, op.inputs, op.ctx)


def register_sequential(*op_types):
  """Ops vectorized on purpose by a loop over the iterations (e.g. stacked random seeds)."""
  register(*op_types)(run_sequential)
