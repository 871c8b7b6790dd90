"""Per-example gradients of a loss written for one example.

`per_example_gradients(loss_fn, variables, *batch)` is `pfor` over the examples of
`tape.gradient(loss_fn(*example_i), variables)`: the body slices example i out of the batch,
runs the forward and backward pass for that one example, and the walker turns the whole
thing into one batched forward and backward pass that keeps the per-example gradients
apart (a matmul's weight gradient becomes a batched matmul, not a sum over the batch).
In eager mode the conversion is traced once into a `tf.function` cached per (loss_fn,
variables), so repeated calls with batches of the same shapes trace nothing; inside a
`tf.function` it is emitted in place, as `pfor` is (a nested function would cost a second
trace, a function definition and its own instantiation at the first call).
"""

import numbers

import numpy as np
import tensorflow as tf

from vectorize import api
from vectorize import cache
from vectorize import dims
from vectorize import trace


def per_example_gradients(loss_fn, variables, *batch, fallback_to_while_loop=True,
                          parallel_iterations=None):
  """The gradient of `loss_fn` at each example of `batch`, for every variable.

  Args:
    loss_fn: `loss_fn(*example)` returns the scalar loss of ONE example, where `example`
      holds each element of `batch` with its leading (batch) axis removed. A model that
      expects a batch axis is called on `x[None]` (a batch of one). A non-scalar loss is
      summed, as `tape.gradient` does.
    variables: the variables to differentiate: a `tf.Variable`, a list, dict or nested
      structure of them, or an object with `trainable_variables` (a `tf.Module`, a Keras
      model or layer, built).
    *batch: tensors (or nested structures of tensors) sharing their leading dimension b.
    fallback_to_while_loop: as in `pfor`: ops with no vectorized form run in a sequential
      loop (with a warning) instead of raising `ConversionError`.
    parallel_iterations: as in `pfor`: examples at a time, to bound memory.

  Returns:
    The variables' structure (for a module or model, the list of its trainable
    variables), each gradient `[b] + variable.shape`; None for a variable the loss does
    not depend on.

  Raises:
    ValueError: no batch, elements without a leading axis or with different leading
      dimensions, or no variables.
    ConversionError: an op cannot be vectorized and `fallback_to_while_loop` is False.

  Example:
    >>> model = tf.keras.Sequential([tf.keras.layers.Dense(10)]); model.build((None, 4))
    >>> def loss_fn(x, y):
    ...   logits = model(x[None])[0]
    ...   return tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
    >>> grads = vectorize.per_example_gradients(loss_fn, model, images, labels)
    >>> [g.shape for g in grads]    # [[b, 4, 10], [b, 10]]

  Limits: layers that mix examples (batch normalization in training mode) see a batch of
  one; the Python in `loss_fn` runs at trace time only (use `tf.Variable`s for state).
  """
  structure, flat_vars, batch = checked_arguments(variables, batch)
  if not tf.executing_eagerly():
    return tf.nest.pack_sequence_as(structure, _per_example_in_graph(
        loss_fn, flat_vars, batch, fallback_to_while_loop, parallel_iterations))
  key = (tuple(cache.Identity(v) for v in flat_vars), fallback_to_while_loop,
         parallel_iterations)
  grads = cache.eager_call("per_example_gradients", loss_fn, key, lambda: cache.body_function(
      lambda batch: _per_example_in_graph(loss_fn, flat_vars, batch, fallback_to_while_loop,
                                          parallel_iterations)), batch)
  return tf.nest.pack_sequence_as(structure, grads)


def variable_structure(variables):
  """The variables as a nested structure: an object's trainable variables, as a list."""
  if isinstance(variables, (list, tuple, dict)) or isinstance(variables, tf.Variable):
    return variables
  trainable = getattr(variables, "trainable_variables", None)
  if trainable is not None:
    return list(trainable)
  return variables


def watchable(variable):
  """What `tape.watch` accepts for `variable`: a Keras 3 variable wraps a `tf.Variable`."""
  if isinstance(variable, tf.Variable):
    return variable
  inner = getattr(variable, "value", None)
  return inner if isinstance(inner, tf.Variable) else variable


def checked_arguments(variables, batch, who="per_example_gradients"):
  """(the variables' structure, its flat list, the batch as dense tensors), or a ValueError
  naming what is missing."""
  structure = variable_structure(variables)
  flat_vars = tf.nest.flatten(structure)
  if not flat_vars:
    raise ValueError(f"{who} got no variables to differentiate (a Keras model has none "
                     "until it is built: call it once first).")
  if not batch:
    raise ValueError(f"{who} needs at least one batch element.")
  return structure, flat_vars, dense_batch(batch, who)


def dense_batch(batch, who="per_example_gradients"):
  """The batch's leaves as tensors; a composite (ragged, sparse) or a Python list of numbers
  (which tf.nest reads as a structure of scalars) is refused, naming the fix."""
  for k, element in enumerate(batch):
    if isinstance(element, (list, tuple)) and element and all(
        isinstance(e, (numbers.Number, np.generic)) for e in element):
      raise ValueError(
          f"{who}: batch element {k} is a Python {type(element).__name__} of numbers, "
          "which tf.nest reads as a structure of scalars, none with a batch axis. Pass it "
          "as one tensor: `np.asarray(...)` or `tf.constant(...)`.")

  def dense(t):
    if isinstance(t, tf.SparseTensor):
      raise TypeError(
          f"{who} takes dense tensors as batch elements; got a SparseTensor. Pass "
          "`tf.sparse.to_dense(x)` (zeros that loss_fn multiplies add nothing to the "
          "gradient), or its indices and values as dense tensors padded per example.")
    if isinstance(t, tf.__internal__.CompositeTensor):
      raise TypeError(
          f"{who} takes dense tensors as batch elements; got a {type(t).__name__}. Pad "
          "it to a dense tensor (a RaggedTensor's `.to_tensor()`), pass each example's "
          "length beside it, and slice the example in loss_fn (`x[:length]`): padding "
          "rows that loss_fn never reads add nothing to the gradient.")
    return tf.convert_to_tensor(t)
  return tf.nest.map_structure(dense, batch)


def batch_size(flat_batch, who="per_example_gradients"):
  """The shared leading dimension of the batch tensors: an int, or a scalar tensor."""
  for k, t in enumerate(flat_batch):
    if t.shape.rank == 0:
      raise ValueError(f"{who} needs a leading batch axis on every batch element; "
                       f"element {k} of the flattened batch is a scalar. Pass per-example "
                       "values stacked on a first axis (a scalar shared by all examples "
                       "belongs in loss_fn's closure).")
  static = {dims.leading(t) for t in flat_batch} - {None}
  if len(static) > 1:
    raise ValueError(f"{who} needs the same leading dimension in every "
                     f"batch element; got {sorted(static)}.")
  if static:
    return static.pop()
  return tf.shape(flat_batch[0])[0]


def _per_example_in_graph(loss_fn, flat_vars, batch, fallback, parallel_iterations):
  flat_batch = tf.nest.flatten(batch)
  n = batch_size(flat_batch)
  loss_fn = trace.autograph_like_caller(loss_fn)

  def example_gradients(i):
    example = tf.nest.map_structure(lambda t: tf.gather(t, i), batch)
    with tf.GradientTape() as tape:
      tape.watch([watchable(v) for v in flat_vars])   # non-trainable ones too
      loss = loss_fn(*example)
    return tape.gradient(loss, flat_vars)   # None for a variable the loss does not use

  return api.pfor(example_gradients, n, fallback_to_while_loop=fallback,
                  parallel_iterations=parallel_iterations, warn=True)
