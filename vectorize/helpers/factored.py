"""Per-example weight gradients kept as factors, for clipping without `[n] + weight.shape`.

In one example's backward pass, a weight's gradient is often a single op that contracts a
per-example activation with a per-example output gradient over their leading (position)
axis: the `MatMul(x, dy, transpose_a=True)` of a dense layer (T positions: T = 1 for a
vector, the sequence length for a layer applied per position), the `IndexedSlices` (or
`UnsortedSegmentSum`) of an embedding lookup. Such an op sums over that axis and is linear
in each factor, so:

- the clipped sum over examples, sum_i c_i g_i, is the same op on all examples' factors laid
  end to end along that axis, one factor scaled by c_i: the non-private step's own
  weight-gradient op;
- ||g_i||^2 comes from the factors' Gram matrices (T x T per example) where that is cheaper
  than the weight's size, else from g_i built one batch at a time inside the norm.

`decompose(grad, shape)` reads the op that made one example's gradient (in the body being
traced) and returns a `Term`: the body tensors pfor should return for it, and how to get the
norms and the clipped sum from their stacked values. Any other gradient is a `Whole` term:
returned per example, as `per_example_gradients` does. Nothing here knows a layer type.
"""

import numpy as np
import tensorflow as tf

from converters import nn

# Ops that pass a gradient through without changing its values or their order.
_PASS_THROUGH = ("Identity", "Reshape")
_REAL = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
_BATCH_MATMULS = ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
_FILTER_GRADIENTS = {"Conv2DBackpropFilter": tf.raw_ops.Conv2DBackpropFilter,
                     "Conv3DBackpropFilterV2": tf.raw_ops.Conv3DBackpropFilterV2}


class Term:
  """One variable's per-example gradient, as the body tensors it is computed from."""

  def __init__(self, tensors, shape):
    self.tensors = list(tensors)   # in the body: pfor returns their stacked values
    self.shape = shape             # the gradient's (the variable's) shape

  def squared_norms(self, stacked):
    """[n] squared L2 norms of the per-example gradients, from the stacked tensors."""
    raise NotImplementedError

  def clipped_sum(self, stacked, weights):
    """sum_i weights[i] * g_i, in the variable's shape."""
    raise NotImplementedError


class Whole(Term):
  """A gradient with no factored form: returned per example, `[n] + shape`."""

  def squared_norms(self, stacked):
    (g,) = stacked
    return _sum_of_squares(g, axes=range(1, g.shape.rank))

  def clipped_sum(self, stacked, weights):
    (g,) = stacked
    return tf.tensordot(tf.cast(weights, g.dtype), g, 1)


class Contraction(Term):
  """g = L^T R per example, L [T, a] and R [T, b] (a dense layer's MatMul weight gradient)."""

  def __init__(self, left, right, shape, gram):
    super().__init__([left, right], shape)
    self.gram = gram   # norms from the T x T Gram matrices (else from g, inside the norm)

  def squared_norms(self, stacked):
    left, right = _dense(stacked)
    if left.shape[1] == 1:   # one position: ||l r^T||^2 = ||l||^2 ||r||^2
      return _sum_of_squares(left, [1, 2]) * _sum_of_squares(right, [1, 2])
    if self.gram:
      return _gram_product(_gram(left), _gram(right))
    return _sum_of_squares(tf.einsum("nta,ntb->nab", left, right), [1, 2])

  def clipped_sum(self, stacked, weights):
    left, right = _dense(stacked)
    right = right * tf.cast(weights, right.dtype)[:, None, None]
    total = tf.matmul(_merge_leading(left), _merge_leading(right), transpose_a=True)
    return tf.reshape(total, self.shape)


class Rows(Term):
  """g = rows `values` [T, d] added at rows `indices` [T] of a `[rows, d]` zero tensor per
  example (an embedding lookup's gradient)."""

  def __init__(self, values, indices, shape):
    super().__init__([values, indices], shape)

  def squared_norms(self, stacked):
    values, indices = _dense(stacked)
    same_row = tf.equal(indices[:, :, None], indices[:, None, :])
    products = tf.where(same_row, _gram(values), tf.zeros([], _norm_dtype(values.dtype)))
    return tf.reduce_sum(products, [1, 2])

  def clipped_sum(self, stacked, weights):
    values, indices = _dense(stacked)
    values = values * tf.cast(weights, values.dtype)[:, None, None]
    total = tf.math.unsorted_segment_sum(_merge_leading(values), tf.reshape(indices, [-1]),
                                         self.shape[0])
    return tf.reshape(total, self.shape)


class Convolution(Term):
  """g = a convolution's filter gradient per example, from its input x `[b, *spatial, c]`
  and output gradient dy `[b, *out, k]` (a Conv1D/2D/3D layer's kernel): a sum over output
  positions of patch-by-dy products. The clipped sum is the same filter-gradient op on all
  examples with clip-weighted dy (the non-private step's own op); the norms come per filter
  tap (one `[n, c, k]` product at a time, squared and summed: no `[n] + filter` tensor), or
  from the Gram matrices of the positions where those are cheaper (few positions)."""

  def __init__(self, x, dy, op, sizes, shape):
    super().__init__([x, dy], shape)
    self.op, self.sizes, self.ksize = op, sizes, sizes[:-2]   # sizes: the op's filter shape
    _, self.window = nn.window_of(op)

  def squared_norms(self, stacked):
    x, dy = _dense(stacked)
    c, k = x.shape[-1], dy.shape[-1]
    taps = int(np.prod(self.ksize))
    positions = dy.shape[1:-1].num_elements()
    if positions is not None and positions * (taps * c + k) < taps * c * k:
      return self._gram_norms(x, dy)
    products = nn.filter_gradient_taps(x, dy, self.ksize, self.window)
    return tf.add_n([_sum_of_squares(p, [1, 2]) for p in products])

  def _gram_norms(self, x, dy):
    """sum_pq (sum_t X_t X_t^T)_pq (D D^T)_pq, X_t [positions, c] the pixels tap t meets."""
    dy = tf.reshape(dy, [tf.shape(dy)[0], dy.shape[1:-1].num_elements(), dy.shape[-1]])
    grams = [dy]   # the taps are cut once dy is (see nn.tap_pixels)
    for pixels in nn.tap_pixels(x, self.ksize, self.window, after=grams):
      grams.append(_gram(pixels))
    return _gram_product(tf.add_n(grams[1:]), _gram(dy))

  def clipped_sum(self, stacked, weights):
    x, dy = _dense(stacked)
    dy = dy * tf.reshape(tf.cast(weights, dy.dtype), [-1] + [1] * (dy.shape.rank - 1))
    attrs = {name: self.op.get_attr(name) for name in ("strides", "padding", "data_format",
                                                       "dilations")}
    if "explicit_paddings" in self.op.node_def.attr:
      attrs["explicit_paddings"] = self.op.get_attr("explicit_paddings")
    total = _FILTER_GRADIENTS[self.op.type](
        input=_merge_leading(x), filter_sizes=tf.constant(self.sizes, tf.int32),
        out_backprop=_merge_leading(dy), **attrs)
    return tf.reshape(total, self.shape)


def decompose(grad, shape):
  """The `Term` of one example's gradient `grad` (a body tensor, `IndexedSlices` or None)
  of a variable of static `shape`; None for None."""
  if grad is None:
    return None
  shape = tf.TensorShape(shape)
  if isinstance(grad, tf.IndexedSlices):
    return _rows(grad.values, grad.indices, shape) or Whole([tf.convert_to_tensor(grad)],
                                                            shape)
  grad = tf.convert_to_tensor(grad)
  op = grad.op
  while op.type in _PASS_THROUGH:
    op = op.inputs[0].op
  if op.outputs[0].dtype in _REAL and shape.is_fully_defined():
    if op.type == "MatMul":
      term = _contraction(op, shape)
      if term is not None:
        return term
    if op.type == "Sum" and op.inputs[0].op.type in _BATCH_MATMULS:
      term = _summed_batch_contraction(op, shape)
      if term is not None:
        return term
    if op.type in _FILTER_GRADIENTS:
      term = _convolution(op, shape)
      if term is not None:
        return term
    if op.type == "UnsortedSegmentSum":
      term = _rows(op.inputs[0], op.inputs[1], shape)
      if term is not None:
        return term
  return Whole([grad], shape)


def _contraction(op, shape):
  a, b = op.inputs
  left = a if op.get_attr("transpose_a") else tf.transpose(a)
  right = tf.transpose(b) if op.get_attr("transpose_b") else b
  if left.shape.rank != 2 or right.shape.rank != 2:
    return None
  positions, width = left.shape[0], left.shape[1] * right.shape[1]
  gram = positions is None or positions * (left.shape[1] + right.shape[1]) <= width
  return Contraction(left, right, shape, gram)


def _convolution(op, shape):
  """A `Convolution` term for a channels-last filter gradient of static geometry whose
  filter has the input's channels (no groups) and is bigger than the example's input and
  output gradient together, else None.

  A filter no bigger than those is computed per example (a `Whole` term): its `[n] +
  filter` stack holds no more than the activations the step holds anyway, and on CPU the
  per-example gradients then give the clipped sum for less than the batched filter-gradient
  op (the convnet's first layer, a ResNet's wide early stages)."""
  x, sizes, dy = op.inputs
  sizes = op.outputs[0].shape.as_list() if op.outputs[0].shape.is_fully_defined() else \
      tf.get_static_value(sizes)   # the filter's shape (a Shape op of the filter's read)
  if (sizes is None or op.get_attr("data_format").decode().startswith("NC") or
      int(np.prod(sizes)) != shape.num_elements() or not x.shape[1:].is_fully_defined() or
      not dy.shape[1:].is_fully_defined() or x.shape[-1] != sizes[-2] or
      shape.num_elements() <= x.shape[1:].num_elements() + dy.shape[1:].num_elements()):
    return None
  return Convolution(x, dy, op, [int(s) for s in sizes], shape)


def _summed_batch_contraction(op, shape):
  """Sum over every batch axis of a batch matmul (how an einsum's weight gradient comes,
  e.g. a Keras EinsumDense's): the batch's products are one contraction over all their
  positions, the batch axes laid end to end."""
  product = op.inputs[0].op
  a, b = product.inputs
  rank = product.outputs[0].shape.rank
  if rank is None or rank < 3 or not _sums_batch_axes(op, rank):
    return None
  if a.shape.rank != rank or b.shape.rank != rank or a.shape[:-2] != b.shape[:-2] or \
      not a.shape[:-2].is_fully_defined():
    return None   # a broadcast batch axis: not one product per position
  left = a if product.get_attr("adj_x") else tf.linalg.matrix_transpose(a)
  right = tf.linalg.matrix_transpose(b) if product.get_attr("adj_y") else b
  if left.shape[-1] is None or right.shape[-1] is None:
    return None
  left = tf.reshape(left, [-1, left.shape[-1]])
  right = tf.reshape(right, [-1, right.shape[-1]])
  positions, width = left.shape[0], left.shape[1] * right.shape[1]
  gram = positions is None or positions * (left.shape[1] + right.shape[1]) <= width
  return Contraction(left, right, shape, gram)


def _sums_batch_axes(op, rank):
  """Whether the Sum `op` reduces exactly the batch axes (all but the last two) of its
  rank-`rank` input: static axes saying so, or the axes a batch matmul's gradient takes from
  `BroadcastGradientArgs` (batch axes only, by construction) leaving a matrix."""
  axes = tf.get_static_value(op.inputs[1])
  if axes is not None:
    return sorted(int(k) % rank for k in np.ravel(axes)) == list(range(rank - 2))
  return (op.inputs[1].op.type == "BroadcastGradientArgs" and
          op.outputs[0].shape.rank == 2)


def _rows(values, indices, shape):
  """A `Rows` term for values whose leading axes match the indices' (flattened to [T, d])."""
  if values.dtype not in _REAL or not shape.is_fully_defined() or shape.rank < 1:
    return None
  row = int(np.prod(shape[1:], dtype=np.int64))
  if indices.shape.rank is None or values.shape.rank != indices.shape.rank + shape.rank - 1:
    return None
  return Rows(tf.reshape(values, [-1, row]), tf.reshape(indices, [-1]), shape)


def _dense(stacked):
  """Stacked factors as dense tensors: a factor whose length differs per example comes back
  ragged, and its zero padding adds nothing to a contraction, a Gram matrix or a row sum."""
  return [t.to_tensor() if isinstance(t, tf.RaggedTensor) else t for t in stacked]


def _norm_dtype(dtype):
  return tf.float64 if dtype == tf.float64 else tf.float32


def _sum_of_squares(t, axes):
  t = tf.cast(t, _norm_dtype(t.dtype))
  return tf.reduce_sum(tf.square(t), list(axes))


def _gram(t):
  """[n, T, T] inner products of each example's rows."""
  t = tf.cast(t, _norm_dtype(t.dtype))
  return tf.matmul(t, t, transpose_b=True)


def _gram_product(gram_left, gram_right):
  """||L^T R||^2 = sum_ts (L L^T)_ts (R R^T)_ts per example."""
  return tf.reduce_sum(gram_left * gram_right, [1, 2])


def _merge_leading(t):
  """[n, T, d] -> [n * T, d]: the examples' rows end to end."""
  return tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0))
