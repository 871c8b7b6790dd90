"""Conversion options a caller sets around a pfor: `static_shapes()` and when XLA asks for it.

Control flow converts with dynamic shapes (partitioned active sets) unless the graph being
built is compiled by XLA, which needs static shapes (masked active sets), or the caller asks
for static shapes explicitly.
"""

import contextlib

import tensorflow as tf
from tensorflow.python.ops import control_flow_util


class _Options:
  static_shapes = False


_options = _Options()


@contextlib.contextmanager
def static_shapes(enabled=True):
  """Within this block, pfor converts control flow with static shapes (masks, no gathers).

  XLA contexts (`tf.function(jit_compile=True)`) get this automatically; use it to build a
  graph for XLA compiled elsewhere, or to compare both modes.

  Example:
    >>> with vectorize.static_shapes():
    ...   y = vectorize.pfor(body, 8)
  """
  previous = _options.static_shapes
  _options.static_shapes = enabled
  try:
    yield
  finally:
    _options.static_shapes = previous


def static_shapes_requested():
  """Whether the caller asked for static shapes (`static_shapes()`): part of cache keys."""
  return _options.static_shapes


def static_shapes_wanted():
  """Static-shape control flow in the graph being built: under XLA, or when requested."""
  return _options.static_shapes or compiled_by_xla()


def compiled_by_xla():
  """Whether the graph being built is compiled by XLA (`jit_compile=True`)."""
  return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
