"""Jacobians and hessians: one gradient per output element, vectorized (paper, section 5).

`jacobian(output, inputs)` is `pfor` over i of `tf.gradients(flat_output[i], inputs)`. The
body's backward pass is traced once; in it only the seed (the gradient of `gather(flat_output,
i)`, a one-hot row) is stacked, so the walker turns the m backward passes into one backward
pass whose every tensor carries a leading axis of size m, while the forward activations it
reads stay invariant. `tf.gradients` called in the body's graph differentiates through the
tensors the body captures from the caller's graph, so the forward pass is never re-run.

`jacobian_fn`, `batch_jacobian_fn` and `hessian` are the forms for eager code: they trace `f`
into a `tf.function` cached per `f`, and call the graph forms inside it.
"""

import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops

from vectorize import api
from vectorize import cache
from vectorize import dims
from vectorize import graph_io

_DEFAULT_WHILE_PARALLEL_ITERATIONS = 10


def jacobian(output, inputs, use_pfor=True, parallel_iterations=None):
  """The jacobian of `output` with respect to each of `inputs`, in graph mode.

  Args (in the order of TensorFlow's own jacobian):
    output: a tensor of a graph (a `tf.function` being traced), computed from `inputs`.
    inputs: a tensor, a variable, or a nested structure of them, in the same graph.
    use_pfor: vectorize the per-element gradients with `vectorize.pfor`; False computes them
      one at a time in a `tf.while_loop` (slower, for comparison or as a last resort).
    parallel_iterations: as in `pfor` (chunks of that many output elements at a time), or the
      `tf.while_loop` setting when `use_pfor` is False.

  Returns:
    `inputs`' structure; each entry of shape `output.shape + input.shape`, where entry
    `[i..., j...]` is d output[i...] / d input[j...], or None where `output` does not depend
    on that input.

  Raises:
    RuntimeError: called eagerly (use `jacobian_fn` or `tf.GradientTape` there).
    ConversionError: a gradient op has neither a vectorized form nor a sequential fallback
      (`vectorize.last_report()` lists the ops that fell back).

  Example:
    >>> @tf.function
    ... def f(x):
    ...   return vectorize.jacobian(tf.tanh(x) * 2.0, x)   # [3] -> [3, 3], diagonal
    >>> f(tf.ones([3]))

  Limits: like `tf.gradients`, it sees only the graph; the output must be computed in the
  graph being traced (or one it captures from), not in an eager tape.
  """
  flat_inputs = tf.nest.flatten(inputs)
  if not flat_inputs:   # nothing to differentiate (a model with no trainable variables yet)
    return tf.nest.pack_sequence_as(inputs, [])
  _require_graph("jacobian")
  output = tf.convert_to_tensor(output)
  targets = [_gradient_target(x) for x in flat_inputs]
  flat_output = tf.reshape(output, [-1])
  num_rows = _static_or_dynamic(dims.leading(flat_output), lambda: tf.size(output))

  def row_gradients(i):
    return tf.gradients(tf.gather(flat_output, i), targets)

  rows = _loop_over_rows(row_gradients, num_rows, flat_inputs, parallel_iterations, use_pfor)
  results = []
  for row, x in zip(rows, flat_inputs):
    # [m] + x.shape -> output.shape + x.shape
    results.append(None if row is None else _reshape_rows(row, output, x))
  return tf.nest.pack_sequence_as(inputs, results)


def batch_jacobian(output, inp, use_pfor=True, parallel_iterations=None):
  """Per-example jacobians: d output[b, ...] / d inp[b, ...] for each row b of a batch.

  Assumes example b of `output` depends only on example b of `inp` (cross-example terms
  are summed over the batch, as in TensorFlow's `batch_jacobian`). It needs one gradient per
  element of an example's output, not per element of the whole output.

  Args:
    output: a graph tensor `[b, ...]` computed from `inp`.
    inp: a graph tensor or variable `[b, ...]` in the same graph.
    use_pfor, parallel_iterations: as in `jacobian` (TF's order).

  Returns:
    A tensor `[b] + output.shape[1:] + inp.shape[1:]`, or None if `output` does not depend
    on `inp`.

  Raises:
    ValueError: `output` or `inp` has no batch axis, or their batch sizes differ (checked at
      run time when unknown while tracing).
    RuntimeError: called eagerly (use `batch_jacobian_fn`).

  Example:
    >>> @tf.function
    ... def f(x):                                          # x: [4, 3]
    ...   return vectorize.batch_jacobian(tf.matmul(x, w), x)   # [4, 5, 3]
  """
  _require_graph("batch_jacobian")
  output = tf.convert_to_tensor(output)
  target = _gradient_target(inp)
  inp_shape = inp.shape
  if output.shape.rank == 0 or inp_shape.rank == 0:
    raise ValueError(f"batch_jacobian needs a leading batch axis on output and inp; got "
                     f"shapes {output.shape} and {inp_shape}.")
  if not output.shape[:1].is_compatible_with(inp_shape[:1]):
    raise ValueError(f"batch_jacobian needs the same batch size in output and inp; got "
                     f"output shape {output.shape} and inp shape {inp_shape}.")
  static_batch = dims.leading(output)
  if static_batch is None:
    static_batch = dims.leading(inp)
  batch = _static_or_dynamic(static_batch, lambda: tf.shape(output)[0])
  row_size = _static_or_dynamic(output.shape[1:].num_elements(),
                                lambda: tf.reduce_prod(tf.shape(output)[1:]))
  if dims.leading(output) is None or dims.leading(inp) is None:
    check = tf.debugging.assert_equal(
        tf.shape(output)[0], tf.shape(inp)[0],
        message="batch_jacobian needs the same batch size in output and inp")
    with tf.control_dependencies([check]):
      output = tf.identity(output)
  rows_of_output = tf.reshape(output, [batch, row_size])

  def column_gradient(j):
    return tf.gradients(tf.gather(rows_of_output, j, axis=1), [target])

  column, = _loop_over_rows(column_gradient, row_size, [inp], parallel_iterations, use_pfor)
  if column is None:
    return None
  example_size = _static_or_dynamic(inp_shape[1:].num_elements(),
                                    lambda: tf.reduce_prod(tf.shape(inp)[1:]))
  # [m, b] + inp.shape[1:] -> [m, b, k] -> [b, m, k] -> [b] + output.shape[1:] + inp.shape[1:]
  per_example = tf.transpose(tf.reshape(column, [row_size, batch, example_size]), [1, 0, 2])
  result = tf.reshape(per_example, tf.concat(
      [tf.shape(output), tf.shape(inp)[1:]], axis=0))
  result.set_shape(output.shape.concatenate(inp_shape[1:]))
  return result


def jacobian_fn(f, use_pfor=True, parallel_iterations=None):
  """`f` -> `g` with `g(x)` the jacobian of `f` at `x`, for eager code.

  `g` runs a `tf.function` cached per `f` (by its code and what it closes over), so calling
  it again with inputs of the same shapes and dtypes traces nothing.

  Args:
    f: a function of one argument `x` (a tensor or nested structure of tensors) returning a
      tensor or a nested structure of tensors.
    use_pfor, parallel_iterations: as in `jacobian`.

  Returns:
    `g(x)`: for each output of `f` (in `f`'s output structure), `x`'s structure of jacobians
    of shape `output.shape + leaf.shape` (None where there is no gradient path, and where
    `f` returns None).

  Example:
    >>> g = vectorize.jacobian_fn(lambda x: tf.sin(x) * x[0])
    >>> g(tf.ones([3]))      # [3, 3]

  Limits: `f` is traced as in `tf.function`: Python side effects run once per trace, and
  Python values it reads are frozen at trace time.
  """
  def in_graph(x):
    return tf.nest.map_structure(
        lambda y: None if y is None else jacobian(y, x, use_pfor, parallel_iterations), f(x))

  return _cached_function(("jacobian_fn", use_pfor, parallel_iterations), f, in_graph)


def batch_jacobian_fn(f, use_pfor=True, parallel_iterations=None):
  """`f` -> `g` with `g(x)` the per-example jacobian (`batch_jacobian`) of `f` at `x`.

  Args:
    f: a function of one tensor `x` `[b, ...]` returning a tensor (or a nested structure of
      tensors) `[b, ...]`, example b of the output depending only on example b of `x`.
    use_pfor, parallel_iterations: as in `jacobian`.

  Returns:
    `g(x)`: `f`'s output structure, each `[b] + output.shape[1:] + x.shape[1:]`.

  Raises:
    ValueError (from `g`): the batch sizes of an output and `x` differ.

  Example:
    >>> g = vectorize.batch_jacobian_fn(lambda x: tf.tanh(tf.matmul(x, w)))
    >>> g(tf.ones([8, 3]))   # [8, 5, 3]
  """
  def in_graph(x):
    return tf.nest.map_structure(
        lambda y: None if y is None else batch_jacobian(y, x, use_pfor, parallel_iterations),
        f(x))

  return _cached_function(("batch_jacobian_fn", use_pfor, parallel_iterations), f, in_graph)


def hessian(f, x, use_pfor=True, parallel_iterations=None):
  """Second derivatives of `f` at `x`: the jacobian of its gradient, for every output element.

  For a scalar `f`, the usual hessian. For a non-scalar `f`, the hessian of each output
  element: `result[i..., j..., k...]` = d2 f(x)[i...] / dx[j...] dx[k...]. The first
  jacobian is vectorized, and the second differentiates that vectorized graph, so this works
  through `tf.cond` in `f`. Cached per `f` like `jacobian_fn`.

  Args:
    f: a function of `x` returning one tensor.
    x: a tensor, or a nested structure of tensors.
    use_pfor, parallel_iterations: as in `jacobian`.

  Returns:
    For a tensor `x`, a tensor of shape `f(x).shape + x.shape + x.shape`. For a nested `x`,
    `x`'s structure of `x`'s structures: entry [a][b] is the block
    `f(x).shape + x_a.shape + x_b.shape`. None where a block has no gradient path.

  Example:
    >>> vectorize.hessian(lambda x: tf.reduce_sum(x ** 3), tf.ones([3]))   # diag(6)
    >>> vectorize.hessian(lambda x: x ** 2, tf.ones([3]))                   # [3, 3, 3]

  An `f` with a `tf.while_loop`, `tf.scan` or `tf.map_fn` differentiates through its loop
  twice (the loop's gradient's gradient), as nested tapes do.
  """
  def in_graph(x):
    y = f(x)
    flat_x = tf.nest.flatten(x)
    first = jacobian(y, flat_x, use_pfor, parallel_iterations)
    blocks = [None if j is None else jacobian(j, flat_x, use_pfor, parallel_iterations)
              for j in first]
    blocks = [[None] * len(flat_x) if b is None else b for b in blocks]
    return tf.nest.pack_sequence_as(x, [tf.nest.pack_sequence_as(x, b) for b in blocks])

  return _cached_function(("hessian", use_pfor, parallel_iterations), f, in_graph)(x)


# ----------------------------------------------------------------------------- internals

def _require_graph(name):
  if tf.executing_eagerly():
    raise RuntimeError(f"{name} differentiates a graph and needs graph tensors (inside a "
                       f"tf.function); in eager code use {name}_fn(f)(x) or "
                       "tf.GradientTape.")


def _gradient_target(x):
  """What `tf.gradients`, called in the loop body's graph, must be given for input `x`.

  A variable is differentiated through its handle as the caller's graph sees it: the body's
  graph would otherwise capture the variable anew and find no path to the reads made
  outside it.
  """
  if resource_variable_ops.is_resource_variable(x):
    return graph_io.capture(x.handle)
  return tf.convert_to_tensor(x)


def _static_or_dynamic(static, dynamic):
  return static if static is not None else dynamic()


def _loop_over_rows(row_fn, num_rows, inputs, parallel_iterations, use_pfor):
  """`[row_fn(i) for i in range(num_rows)]` stacked per input, None where `row_fn` gave None
  (decided once, when the body is traced; pfor passes None through)."""
  if not use_pfor:
    return _while_loop_rows(row_fn, num_rows, inputs, parallel_iterations)
  return api.pfor(row_fn, num_rows, parallel_iterations=parallel_iterations)


def _while_loop_rows(row_fn, num_rows, inputs, parallel_iterations):
  """The sequential form: a `tf.while_loop` writing one row per step into TensorArrays.

  One array per input; the arrays of inputs without a gradient are never written, and come
  back as None.
  """
  arrays = [tf.TensorArray(x.dtype.base_dtype, size=num_rows, element_shape=x.shape)
            for x in inputs]
  is_none = []

  def step(i, arrays):
    grads = row_fn(i)
    is_none[:] = [g is None for g in grads]
    return i + 1, [a if g is None else a.write(i, tf.convert_to_tensor(g))
                   for a, g in zip(arrays, grads)]

  _, arrays = tf.while_loop(
      lambda i, _: i < num_rows, step, (tf.constant(0), arrays),
      parallel_iterations=parallel_iterations or _DEFAULT_WHILE_PARALLEL_ITERATIONS)
  return [None if none else a.stack() for a, none in zip(arrays, is_none)]


def _reshape_rows(rows, output, x):
  result = tf.reshape(rows, tf.concat([tf.shape(output), tf.shape(rows)[1:]], axis=0))
  result.set_shape(output.shape.concatenate(x.shape))
  return result


def _cached_function(tag, f, in_graph):
  """One `tf.function` of `in_graph` per (tag, f), shared by every call with that f; it runs
  as a graph even under `tf.config.run_functions_eagerly(True)`."""
  # tf.function's own autograph converts `f` as it calls it (a Python loop over a tensor).
  return lambda x: cache.eager_call(tag, f, (), lambda: cache.internal_function(in_graph, autograph=True), x)
