"""The clipped sum of per-example gradients, for differentially private training.

`clipped_gradient_sum(loss_fn, variables, *batch, l2_norm_clip=C)` is
sum_i min(1, C / ||g_i||) g_i, where g_i is the gradient at example i of all the variables
together (its norm over all of them). It equals building `per_example_gradients` and
clipping them, without building them where the graph allows: the body returns, for each
variable, what `factored.decompose` reads from the op that computed its gradient (the
factors of a dense layer's or an embedding's weight gradient, else the gradient itself),
and pfor keeps only the forward and backward ops those need. The norms and the clipped sum
come from the stacked factors (see factored.py).
"""

import numpy as np
import tensorflow as tf

from vectorize import api
from vectorize import cache
from vectorize import trace
from vectorize.helpers import factored
from vectorize.helpers import per_example


def clipped_gradient_sum(loss_fn, variables, *batch, l2_norm_clip, return_norms=False,
                         has_aux=False, fallback_to_while_loop=True):
  """sum_i min(1, l2_norm_clip / ||g_i||) g_i over the examples of `batch`.

  Args:
    loss_fn: `loss_fn(*example)` returns the scalar loss of ONE example (as in
      `per_example_gradients`: a model that expects a batch axis is called on `x[None]`).
    variables: a `tf.Variable`, a nested structure of them, or an object with
      `trainable_variables` (a `tf.Module`, a built Keras model or layer).
    *batch: tensors (or nested structures of tensors) sharing their leading dimension b.
    l2_norm_clip: C > 0, a Python number or scalar tensor: each example's gradient (over all
      variables together) is scaled to norm at most C before the sum.
    return_norms: also return the `[b]` norms ||g_i|| before clipping.
    has_aux: `loss_fn` returns (loss, aux), aux a nested structure of tensors (the
      example's prediction, its loss); their stacks are returned too, from the same pass.
    fallback_to_while_loop: as in `pfor`.

  Returns:
    The variables' structure (a list for a module or model) of clipped sums, each of its
    variable's shape (None for a variable the loss does not depend on); with
    `return_norms`, the pair (sums, norms); with `has_aux`, aux's stacks after them.

  Example (one DP-SGD step; noise and averaging are the caller's):
    >>> sums = vectorize.clipped_gradient_sum(loss_fn, model, images, labels,
    ...                                       l2_norm_clip=1.0)
    >>> noised = [s + tf.random.normal(s.shape, stddev=1.0 * 1.1) for s in sums]
    >>> optimizer.apply_gradients(zip([g / b for g in noised], model.trainable_variables))

  Limits: as `per_example_gradients` (a layer that mixes examples sees a batch of one).
  """
  _check_positive(l2_norm_clip)
  structure, flat_vars, batch = per_example.checked_arguments(variables, batch,
                                                              "clipped_gradient_sum")

  def run(batch, clip):
    return _clipped_sum_in_graph(loss_fn, flat_vars, batch, clip, has_aux,
                                 fallback_to_while_loop)

  if tf.executing_eagerly():
    key = (tuple(cache.Identity(v) for v in flat_vars), has_aux, fallback_to_while_loop)
    sums, norms, aux = cache.eager_call("clipped_gradient_sum", loss_fn, key,
                                        lambda: cache.body_function(run), batch,
                                        _as_float64(l2_norm_clip))
  else:
    sums, norms, aux = run(batch, _as_float64(l2_norm_clip))
  result = (tf.nest.pack_sequence_as(structure, sums),)
  result += (norms,) if return_norms else ()
  result += (aux,) if has_aux else ()
  return result if len(result) > 1 else result[0]


def per_example_gradient_norms(loss_fn, variables, *batch, fallback_to_while_loop=True):
  """The `[b]` norms ||g_i|| of each example's gradient over all `variables` together, as
  `clipped_gradient_sum(..., return_norms=True)` computes them (from the factors where the
  graph allows), without the clipped sum. Arguments as in `clipped_gradient_sum`."""
  _, flat_vars, batch = per_example.checked_arguments(variables, batch,
                                                      "per_example_gradient_norms")

  def run(batch):
    return _clipped_sum_in_graph(loss_fn, flat_vars, batch, None, False,
                                 fallback_to_while_loop)[1]

  if tf.executing_eagerly():
    key = (tuple(cache.Identity(v) for v in flat_vars), fallback_to_while_loop)
    return cache.eager_call("per_example_gradient_norms", loss_fn, key,
                            lambda: cache.body_function(run), batch)
  return run(batch)


_CLIP_MESSAGE = "clipped_gradient_sum needs l2_norm_clip > 0"


def _check_positive(clip):
  """A ValueError for a bound <= 0 known now (a number, an eager tensor), else None; a bound
  known only at run time is checked there (`_asserted_positive`)."""
  value = clip if isinstance(clip, (int, float)) else tf.get_static_value(clip)
  if value is not None and not np.all(np.asarray(value) > 0):
    raise ValueError(f"{_CLIP_MESSAGE}, got {value}: each example's clip factor "
                     "min(1, C / norm) would be <= 0 (a zero or reversed step).")


def _asserted_positive(clip):
  """`clip`, checked to be > 0 when the graph runs (an InvalidArgumentError naming it);
  under XLA, which drops assertions, a bound <= 0 gives NaN sums, never a reversed step."""
  if tf.get_static_value(clip) is not None:
    return clip
  with tf.control_dependencies([tf.debugging.assert_positive(clip, message=_CLIP_MESSAGE)]):
    return tf.where(clip > 0, clip, tf.constant(np.nan, clip.dtype))


def _as_float64(number_or_tensor):
  """The clip bound as a float64 tensor (cast to the norms' dtype inside): `tf.cast` of a
  Python float would round it to float32 first."""
  if isinstance(number_or_tensor, (int, float)):
    return tf.constant(number_or_tensor, tf.float64)
  return tf.cast(number_or_tensor, tf.float64)


def _clipped_sum_in_graph(loss_fn, flat_vars, batch, clip, has_aux, fallback):
  n = per_example.batch_size(tf.nest.flatten(batch), "clipped_gradient_sum")
  loss_fn = trace.autograph_like_caller(loss_fn)
  terms = {}   # filled while pfor traces the body

  def example_factors(i):
    example = tf.nest.map_structure(lambda t: tf.gather(t, i), batch)
    with tf.GradientTape() as tape:
      tape.watch([per_example.watchable(v) for v in flat_vars])
      loss, aux = loss_fn(*example) if has_aux else (loss_fn(*example), None)
    grads = tape.gradient(loss, flat_vars)
    terms["all"] = [factored.decompose(g, v.shape) for g, v in zip(grads, flat_vars)]
    return [t.tensors if t is not None else None for t in terms["all"]], aux

  stacked, aux = api.pfor(example_factors, n, fallback_to_while_loop=fallback, warn=True)
  present = [(t, s) for t, s in zip(terms["all"], stacked) if t is not None]
  squared = [t.squared_norms(s) for t, s in present]
  dtype = tf.float64 if any(q.dtype == tf.float64 for q in squared) else tf.float32
  norms = tf.sqrt(tf.add_n([tf.cast(q, dtype) for q in squared])) if squared else \
      tf.zeros([n], dtype)
  if clip is None:   # the norms only
    return None, norms, aux
  clip = tf.cast(_asserted_positive(clip), dtype)
  weights = clip / tf.maximum(norms, clip)   # min(1, C / norm), and 1 where the norm is 0
  sums = iter(t.clipped_sum(s, weights) for t, s in present)
  return [next(sums) if t is not None else None for t in terms["all"]], norms, aux
