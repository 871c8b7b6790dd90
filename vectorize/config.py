"""PForConfig: values computed across all iterations, usable inside the body.

`pfor_config.reduce(fn, *args)` traces, inside the body, a placeholder per output of `fn`
(with control edges from `args` so that the walker reaches it after them). The walker
replaces each placeholder by `fn` applied to the stacked `args`: a loop-invariant value.
"""

import tensorflow as tf

from vectorize.values import invariant, stack


class _Reduction:
  """One `reduce` call: `fn`, its per-iteration arguments, and the cached result."""

  def __init__(self, fn, args):
    self.fn = fn
    self.args = args
    self.outputs = None
    self.graph = None   # where `outputs` were computed

  def bind(self, output_index):
    return _ReductionOutput(self, output_index)


class _ReductionOutput:

  def __init__(self, reduction, index):
    self.reduction = reduction
    self.index = index

  @property
  def args(self):
    return self.reduction.args

  def result(self, ctx, arg_values):
    """The reduction's output `index`, from the converted `args`: computed once per graph
    (a loop's condition and a dry run of it, in a scratch graph, each compute their own)."""
    r = self.reduction
    graph = tf.compat.v1.get_default_graph()
    if r.graph is not graph:
      if ctx.target.subset:
        raise ValueError("pfor_config reductions are not supported inside a conditional "
                         "whose predicate differs per iteration.")
      args = [stack(v, ctx.n) for v in arg_values]
      r.outputs, r.graph = tf.nest.flatten(r.fn(*args)), graph
    return invariant(tf.convert_to_tensor(r.outputs[self.index]))


class PForConfig:
  """Passed as `pfor_config` to a loop body that asks for it."""

  def __init__(self):
    self._reductions = {}   # placeholder op name -> _ReductionOutput

  def reduce(self, fn, *args):
    """`fn` applied to `args` stacked over all iterations; the result is loop-invariant.

    Args:
      fn: takes tensors with a leading iteration axis, returns a nested structure of tensors.
      *args: per-iteration tensors.

    Returns:
      fn's output structure, each tensor the same for every iteration.
    """
    args = [tf.convert_to_tensor(a) for a in args]
    specs = [tf.TensorSpec([None] + a.shape.as_list() if a.shape.rank is not None else None,
                           a.dtype) for a in args]
    structure = tf.function(fn, autograph=False).get_concrete_function(*specs).structured_outputs
    reduction = _Reduction(fn, args)
    flat = tf.nest.flatten(structure)
    placeholders = []
    with tf.control_dependencies([a.op for a in args]):
      for k, spec in enumerate(flat):
        ph = tf.compat.v1.placeholder(spec.dtype, spec.shape, name="pfor_reduce")
        self._reductions[ph.op.name] = reduction.bind(k)
        placeholders.append(ph)
    return tf.nest.pack_sequence_as(structure, placeholders)

  def reduce_sum(self, x):
    return self.reduce(lambda y: tf.reduce_sum(y, axis=0), x)

  def reduce_mean(self, x):
    return self.reduce(lambda y: tf.reduce_mean(y, axis=0), x)

  def reduce_concat(self, x):
    """The per-iteration values of `x` stacked: `[n] + x.shape`, as TF's `reduce_concat`
    (the concatenation of the per-iteration values, each given a leading axis)."""
    return self.reduce(lambda y: y, x)

  @property
  def reductions(self):
    """{placeholder op name: reduction output}, for the walker."""
    return dict(self._reductions)

  @property
  def has_reductions(self):
    return bool(self._reductions)
