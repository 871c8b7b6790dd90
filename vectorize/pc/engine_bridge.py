"""The one door from the program-counter mode into the pfor engine.

The VM hands each block's straight-line per-example function here with its members' inputs;
the engine vectorizes it over those members. Whether the graph being built wants static
shapes (XLA) is asked here too, so a change of the engine's entry is a change of this file.
"""

import tensorflow as tf

from vectorize import engine, options


def run_for_members(fn, inputs, n, static_n=None):
  """[fn(*[x[i] for x in inputs]) for i in range(n)], each output stacked on axis 0.

  `fn` returns a list of tensors; `inputs` have a leading axis of n (a scalar int32 tensor).
  """

  @tf.autograph.experimental.do_not_convert
  def body(i):
    return list(fn(*[tf.gather(x, i) for x in inputs]))

  return list(engine.vectorize_loop(body, n, static_n, fallback_allowed=True))


def static_shapes_wanted():
  """Whether the graph being built is compiled by XLA (or static shapes were asked for)."""
  return options.static_shapes_wanted()


def compiled_by_xla():
  """Whether the graph being built is compiled by XLA (where no op fails at run time)."""
  return options.compiled_by_xla()
