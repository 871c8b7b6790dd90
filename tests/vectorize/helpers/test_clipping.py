"""clipped_gradient_sum against a Python loop: one `tape.gradient` per example, each clipped
to norm C over all variables together, summed. Keras 3 layers, raw variables, the fallback
off; eagerly, in tf.function, under XLA, at a run-time batch size and at b = 0. The emitted
graph of a factored weight has no `[b] + weight.shape` tensor."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize

keras = tf.keras
RNG = np.random.default_rng(0)
B = 5


def _loop(loss_fn, variables, batch, clip):
  """The reference: per-example gradients, their global norms, clipped and summed."""
  grads, norms = [], []
  for i in range(int(tf.nest.flatten(batch)[0].shape[0])):
    with tf.GradientTape() as tape:
      loss = loss_fn(*tf.nest.map_structure(lambda t, i=i: t[i], batch))
    g = [None if x is None else tf.convert_to_tensor(x).numpy().astype(np.float64)
         for x in tape.gradient(loss, variables)]
    norms.append(np.sqrt(sum(np.sum(x ** 2) for x in g if x is not None)))
    grads.append(g)
  sums = []
  for k, v in enumerate(variables):
    if not grads or grads[0][k] is None:
      sums.append(None if grads else np.zeros(v.shape))
      continue
    sums.append(sum(g[k] * min(1.0, clip / norm) if norm > 0 else g[k]
                    for g, norm in zip(grads, norms)))
  return sums, np.array(norms)


def _assert_matches(loss_fn, variables, batch, clip, got_sums, got_norms, tol=1e-4):
  want_sums, want_norms = _loop(loss_fn, variables, batch, clip)
  np.testing.assert_allclose(got_norms, want_norms, rtol=tol, atol=tol)
  assert len(got_sums) == len(want_sums)
  # One scale for all: an attention key bias's gradient is rounding noise (softmax ignores it).
  scale = max([np.max(np.abs(w)) for w in want_sums if w is not None and w.size] + [1e-6])
  for v, got, want in zip(variables, got_sums, want_sums):
    if want is None:
      assert got is None, v.name
      continue
    np.testing.assert_allclose(np.asarray(got) / scale, want / scale, atol=tol, rtol=0,
                               err_msg=v.name)


def _normal(shape, dtype=tf.float32):
  return tf.constant(RNG.standard_normal(shape), dtype)


def _labels(classes=3):
  return tf.constant(RNG.integers(0, classes, B), tf.int32)


def _classifier_loss(model):
  def loss_fn(x, y):
    logits = model(x[None])[0]
    return tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
  return loss_fn


def _built(layers, input_shape):
  keras.utils.set_random_seed(3)
  model = keras.Sequential([keras.Input(input_shape)] + layers)
  return model


MODELS = {
    "dense": lambda: (_built([keras.layers.Dense(7, activation="relu"),
                              keras.layers.Dense(3)], (4,)), _normal([B, 4])),
    "dense_on_positions": lambda: (_built([keras.layers.Dense(2), keras.layers.Flatten(),
                                           keras.layers.Dense(3)], (40, 3)),
                                   _normal([B, 40, 3])),
    "conv1d": lambda: (_built([keras.layers.Conv1D(4, 3, strides=2, padding="same"),
                               keras.layers.Conv1D(3, 2, dilation_rate=2),
                               keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(3)],
                              (9, 2)), _normal([B, 9, 2])),
    "conv2d": lambda: (_built([keras.layers.Conv2D(4, 3, strides=2, padding="same"),
                               keras.layers.Conv2D(3, 2, dilation_rate=2, padding="valid"),
                               keras.layers.DepthwiseConv2D(2),
                               keras.layers.Flatten(), keras.layers.Dense(3)], (8, 8, 2)),
                       _normal([B, 8, 8, 2])),
    "conv_few_positions": lambda: (_built([keras.layers.Conv2D(6, 3, padding="same"),
                                           keras.layers.Conv2D(8, 2, strides=2),
                                           keras.layers.Flatten(), keras.layers.Dense(3)],
                                          (4, 4, 5)), _normal([B, 4, 4, 5])),  # Gram norms
    "conv3d": lambda: (_built([keras.layers.Conv3D(2, 2, padding="same"),
                               keras.layers.Flatten(), keras.layers.Dense(3)], (3, 4, 3, 2)),
                       _normal([B, 3, 4, 3, 2])),
    "embedding": lambda: (_built([keras.layers.Embedding(11, 4),
                                  keras.layers.GlobalAveragePooling1D(),
                                  keras.layers.Dense(3)], (6,)),
                          tf.constant(RNG.integers(0, 4, [B, 6]), tf.int32)),   # repeats
    "masked_lstm": lambda: (_built([keras.layers.Embedding(11, 4, mask_zero=True),
                                    keras.layers.LSTM(5), keras.layers.Dense(3)], (6,)),
                            tf.constant([[3, 4, 0, 0, 0, 0], [1, 2, 3, 4, 5, 6],
                                         [7, 0, 0, 0, 0, 0], [2, 2, 2, 0, 0, 0],
                                         [9, 8, 7, 6, 5, 0]], tf.int32)),
    "gru": lambda: (_built([keras.layers.GRU(4), keras.layers.Dense(3)], (5, 3)),
                    _normal([B, 5, 3])),
}


def _transformer_block():
  keras.utils.set_random_seed(4)
  inputs = keras.Input((5, 6))
  h = keras.layers.MultiHeadAttention(2, 3)(inputs, inputs)
  h = keras.layers.LayerNormalization()(h + inputs)
  h = keras.layers.Dense(4, activation="relu")(h)
  outputs = keras.layers.Dense(3)(keras.layers.GlobalAveragePooling1D()(h))
  return keras.Model(inputs, outputs), _normal([B, 5, 6])


MODELS["transformer_block"] = _transformer_block


@pytest.mark.parametrize("name", sorted(MODELS))
def test_keras_model_equals_the_clipped_loop(name):
  model, x = MODELS[name]()
  y = _labels()
  loss_fn = _classifier_loss(model)
  sums, norms = vectorize.clipped_gradient_sum(loss_fn, model, x, y, l2_norm_clip=0.3,
                                               return_norms=True,
                                               fallback_to_while_loop=False)
  _assert_matches(loss_fn, model.trainable_variables, (x, y), 0.3, sums, norms)


def test_clip_above_every_norm_is_the_plain_gradient_sum():
  model, x = MODELS["dense"]()
  y = _labels()
  loss_fn = _classifier_loss(model)
  sums = vectorize.clipped_gradient_sum(loss_fn, model, x, y, l2_norm_clip=1e6)
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(y, model(x)))
  for got, want in zip(sums, tape.gradient(loss, model.trainable_variables)):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


class _RawModel(tf.Module):
  """Raw variables: a weight used on a vector, a weight shared by two positions, a lookup
  table read by `tf.gather` (IndexedSlices gradients), a bias, and an unused variable."""

  def __init__(self, dtype):
    super().__init__()
    self.w = tf.Variable(_normal([4, 3], dtype))
    self.shared = tf.Variable(_normal([3, 3], dtype))
    self.table = tf.Variable(_normal([9, 3], dtype))
    self.bias = tf.Variable(_normal([3], dtype))
    self.unused = tf.Variable(_normal([2], dtype))

  def loss(self, x, ids):
    h = tf.tanh(tf.matmul(x[None], self.w))                # [1, 3]
    h = tf.matmul(tf.matmul(h, self.shared), self.shared)  # shared twice: AddN of two terms
    rows = tf.reduce_sum(tf.gather(self.table, ids), 0)    # repeated ids add up
    return tf.reduce_sum(tf.sin(h[0] + rows + self.bias))


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_raw_variables_equal_the_clipped_loop(dtype):
  model = _RawModel(dtype)
  variables = [model.w, model.shared, model.table, model.bias, model.unused]
  x = _normal([B, 4], dtype)
  ids = tf.constant([[1, 1, 2], [0, 8, 8], [3, 3, 3], [5, 6, 7], [2, 4, 2]])
  sums, norms = vectorize.clipped_gradient_sum(model.loss, variables, x, ids, l2_norm_clip=0.7,
                                               return_norms=True,
                                               fallback_to_while_loop=False)
  assert sums[-1] is None
  assert sums[0].dtype == dtype
  _assert_matches(model.loss, variables, (x, ids), 0.7, sums, norms,
                  tol=1e-4 if dtype == tf.float32 else 1e-10)


def test_examples_of_different_lengths_give_ragged_factors():
  w = tf.Variable(_normal([3, 2]))
  x = _normal([B, 6, 3])
  lengths = tf.constant([0, 6, 2, 5, 1])

  def loss_fn(xi, length):
    return tf.reduce_sum(tf.square(tf.matmul(xi[:length], w)))   # T = length positions

  sums, norms = vectorize.clipped_gradient_sum(loss_fn, [w], x, lengths, l2_norm_clip=2.0,
                                               return_norms=True,
                                               fallback_to_while_loop=False)
  _assert_matches(loss_fn, [w], (x, lengths), 2.0, sums, norms)


MODES = ["function", "xla", "runtime_batch"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("b", [0, B])
def test_modes_and_empty_batches(mode, b):
  model, x = MODELS["embedding"]() if mode != "xla" else MODELS["dense"]()
  if mode == "xla":
    model, x = _built([keras.layers.Conv1D(3, 2), keras.layers.Flatten(),
                       keras.layers.Dense(3)], (4, 2)), _normal([B, 4, 2])
  x, y = x[:b], _labels()[:b]
  loss_fn = _classifier_loss(model)

  def run(x, y):
    return vectorize.clipped_gradient_sum(loss_fn, model, x, y, l2_norm_clip=0.3,
                                          return_norms=True, fallback_to_while_loop=False)

  if mode == "runtime_batch":
    fn = tf.function(run, input_signature=[tf.TensorSpec([None] + x.shape[1:], x.dtype),
                                           tf.TensorSpec([None], tf.int32)])
  else:
    fn = tf.function(run, jit_compile=(mode == "xla"))
  sums, norms = fn(x, y)
  assert norms.shape == [b]
  _assert_matches(loss_fn, model.trainable_variables, (x, y), 0.3, sums, norms)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("b", [0, B])
def test_lookup_rows_of_repeated_and_per_example_ids(mode, b):
  """A table read at repeated ids, and at a per-example number of ids (ragged factors): the
  rows of one id add up before they are squared."""
  model = _RawModel(tf.float32)
  variables = [model.table, model.w]
  x = _normal([B, 4])[:b]
  ids = tf.constant([[1, 1, 2, 1], [0, 8, 8, 8], [3, 3, 3, 3], [5, 6, 7, 0], [2, 4, 2, 4]])[:b]
  lengths = tf.constant([4, 2, 0, 3, 4])[:b]

  def loss_fn(xi, row_ids, length):
    # (under XLA a per-example length is a dynamic shape, which it refuses: three ids)
    read = row_ids[:3] if mode == "xla" else row_ids[:length]
    return model.loss(xi, row_ids) + tf.reduce_sum(tf.gather(model.table, read) ** 2)

  def run(x, ids, lengths):
    return vectorize.clipped_gradient_sum(loss_fn, variables, x, ids, lengths, l2_norm_clip=0.5,
                                          return_norms=True, fallback_to_while_loop=False)

  if mode == "runtime_batch":
    fn = tf.function(run, input_signature=[tf.TensorSpec([None, 4]),
                                           tf.TensorSpec([None, 4], tf.int32),
                                           tf.TensorSpec([None], tf.int32)])
  else:
    fn = tf.function(run, jit_compile=(mode == "xla"))
  sums, norms = fn(x, ids, lengths)
  _assert_matches(loss_fn, variables, (x, ids, lengths), 0.5, sums, norms)


def _all_shapes(graph):
  """Static shapes of every op output in `graph` and the functions it calls, any depth."""
  shapes, seen, todo = [], set(), [graph]
  while todo:
    g = todo.pop()
    for op in g.get_operations():
      shapes += [(op.type, tuple(t.shape.as_list())) for t in op.outputs
                 if t.shape.rank is not None]
      for attr in op.node_def.attr.values():
        names = [attr.func.name] if attr.HasField("func") else \
            [f.name for f in attr.list.func]
        for name in names:
          if name and name not in seen:
            seen.add(name)
            todo.append(g._get_function(name).graph)  # pylint: disable=protected-access
  return shapes


def test_factored_weights_have_no_per_example_gradient_in_the_graph():
  b = 6
  keras.utils.set_random_seed(5)
  model = keras.Sequential([keras.Input((8,)), keras.layers.Embedding(13, 16),
                            keras.layers.Dense(16), keras.layers.Flatten(),
                            keras.layers.Dense(5)])
  factored = [v for v in model.trainable_variables if v.shape.rank == 2]
  assert len(factored) == 3
  x = tf.constant(RNG.integers(0, 13, [b, 8]), tf.int32)
  fn = tf.function(lambda x, y: vectorize.clipped_gradient_sum(
      _classifier_loss(model), model, x, y, l2_norm_clip=1.0))
  shapes = _all_shapes(fn.get_concrete_function(x, tf.zeros([b], tf.int32)).graph)
  for v in factored:
    per_example = (b,) + tuple(v.shape)
    assert not [s for s in shapes if s[1] == per_example], (v.name, per_example)
  # The test can fail: per_example_gradients builds exactly those tensors.
  materialized = tf.function(lambda x, y: vectorize.per_example_gradients(
      _classifier_loss(model), model, x, y))
  shapes = _all_shapes(materialized.get_concrete_function(x, tf.zeros([b], tf.int32)).graph)
  assert [s for s in shapes if s[1] == (b,) + tuple(factored[0].shape)]


@pytest.mark.parametrize("mode", ["function", "runtime_batch", "xla"])
def test_convolution_kernels_have_no_per_example_gradient_in_the_graph(mode):
  """Conv1D/2D kernels bigger than their layer's input and output gradient (strides,
  dilation, SAME/VALID; few positions: the Gram norms): norms per filter tap or from Gram
  matrices, the clipped sum one filter-gradient op."""
  b = 6
  keras.utils.set_random_seed(6)
  model = keras.Sequential([
      keras.Input((7, 7, 8)), keras.layers.Conv2D(16, 3, strides=2, padding="same"),
      keras.layers.Conv2D(16, 2, dilation_rate=2), keras.layers.Reshape((4, 16)),
      keras.layers.Conv1D(12, 3, padding="same"), keras.layers.Conv1D(24, 2),
      keras.layers.Flatten(), keras.layers.Dense(3)])
  kernels = [v for v in model.trainable_variables if v.shape.rank >= 3]
  assert len(kernels) == 4
  x, y = _normal([b, 7, 7, 8]), tf.constant(RNG.integers(0, 3, [b]), tf.int32)

  def run(x, y):
    return vectorize.clipped_gradient_sum(_classifier_loss(model), model, x, y,
                                          l2_norm_clip=0.2, return_norms=True,
                                          fallback_to_while_loop=False)

  signature = [tf.TensorSpec([None, 7, 7, 8]), tf.TensorSpec([None], tf.int32)]
  fn = tf.function(run, jit_compile=mode == "xla",
                   input_signature=signature if mode == "runtime_batch" else None)
  sums, norms = fn(x, y)
  _assert_matches(_classifier_loss(model), model.trainable_variables, (x, y), 0.2, sums, norms)
  shapes = _all_shapes(fn.get_concrete_function(x, y).graph if mode != "runtime_batch"
                       else fn.get_concrete_function().graph)
  for v in kernels:
    assert not [s for s in shapes if s[1][1:] == tuple(v.shape) and s[1][0] in (b, None)], \
        v.name
  for n in (0, 1):   # empty and one-example batches
    sums, norms = fn(x[:n], y[:n])
    _assert_matches(_classifier_loss(model), model.trainable_variables, (x[:n], y[:n]), 0.2,
                    sums, norms)


def test_bad_arguments_are_named():
  model, x = MODELS["dense"]()
  with pytest.raises(ValueError, match="l2_norm_clip > 0"):
    vectorize.clipped_gradient_sum(_classifier_loss(model), model, x, _labels(),
                                   l2_norm_clip=0.0)
  with pytest.raises(ValueError, match="no variables"):
    vectorize.clipped_gradient_sum(_classifier_loss(model), [], x, _labels(),
                                   l2_norm_clip=1.0)
  with pytest.raises(ValueError, match="same leading dimension"):
    vectorize.clipped_gradient_sum(_classifier_loss(model), model, x, _labels()[:2],
                                   l2_norm_clip=1.0)


def test_einsum_weight_is_factored_and_equals_the_loop():
  """A Keras EinsumDense (as in MultiHeadAttention) gets its weight gradient as a sum over
  the batch axes of a batch matmul: one contraction over all positions."""
  b = 4
  keras.utils.set_random_seed(6)
  inputs = keras.Input((8, 16))
  h = keras.layers.EinsumDense("abc,cde->abde", output_shape=(8, 4, 8))(inputs)
  model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Flatten()(h)))
  kernel = model.layers[1].kernel
  x, y = _normal([b, 8, 16]), _labels()[:b]
  loss_fn = _classifier_loss(model)
  fn = tf.function(lambda x, y: vectorize.clipped_gradient_sum(
      loss_fn, model, x, y, l2_norm_clip=0.5, return_norms=True,
      fallback_to_while_loop=False))
  sums, norms = fn(x, y)
  _assert_matches(loss_fn, model.trainable_variables, (x, y), 0.5, sums, norms)
  shapes = _all_shapes(fn.get_concrete_function(x, y).graph)
  assert not [s for s in shapes if s[1] == (b,) + tuple(kernel.shape)], kernel.shape
