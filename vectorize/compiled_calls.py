"""XLA-compiled calls inside graphs that run op by op on the CPU.

Some conversions emit long chains of small ops over one batch (a random generator's rounds,
a projective transform's per-pixel arithmetic). Run by TensorFlow's executor on the CPU,
each op is a step of its own and a pass over memory, and every tf.data iterator start
optimizes each node again; compiled by XLA as one call, the chain runs fused and the graph
holds one call node. Where the graph is compiled by XLA already, or runs on a GPU, the
function is emitted as plain ops (XLA, or the GPU's kernels, take it with the rest).
"""

import functools

import tensorflow as tf

from vectorize import options


@functools.lru_cache(maxsize=None)
def _has_gpu():
  return bool(tf.config.list_logical_devices("GPU"))


def compiled_on_cpu(fn):
  """`fn` (a function of tensors and Python values) as an XLA-compiled call where the graph
  being built runs on the CPU outside XLA, else as its own ops. XLA compiles once per input
  signature; use it for functions whose results XLA computes exactly as the kernels do
  (integer arithmetic, or float ops XLA does not contract or reorder)."""
  compiled = tf.function(fn, jit_compile=True, autograph=False)

  def call(*args, **kwargs):
    if options.compiled_by_xla() or _has_gpu():
      return fn(*args, **kwargs)
    return compiled(*args, **kwargs)

  call.__doc__, call.__name__ = fn.__doc__, fn.__name__
  return call
