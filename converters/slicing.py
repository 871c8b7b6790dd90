"""Slicing ops: slice, strided slice, gather, gather_nd.

The trick for gathers: a loop-invariant `params` gathered by stacked indices is a single
gather whose result already carries the loop axis; stacked params use `batch_dims` to pair
each iteration's params with its own indices.
"""

import tensorflow as tf

from vectorize.errors import Unvectorizable
from vectorize.registry import register
from vectorize.values import stacked


@register("GatherV2")
def _convert_gather_v2(op):
  """Invariant params: one gather (axis 0 only, for now). TODO: the other cases fall back."""
  axis = int(op.static_value(2))
  if op.attr("batch_dims") != 0 or axis != 0 or op.is_stacked(0):
    raise Unvectorizable("only gathers of loop-invariant params on axis 0 are handled so far")
  return stacked(tf.gather(op.invariant(0), op.value(1).tensor, axis=0))
