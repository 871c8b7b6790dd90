"""Hand-batched baselines: what an expert writes directly on a batch, with no vectorizer.

The benchmarks compare `vectorize` against these, so they are the speed limit and each does
the least work it can: one forward pass (the jacobians run it on the single example only and
broadcast its activations against a batch of cotangents), one backward pass written by hand,
and per-example weight gradients as contractions of activations with output gradients. TF ops
only, no Python loop over examples (the LSTM loops over its static time steps); every function
also compiles under `tf.function(jit_compile=True)`.

They compute exactly the functions of `benchmarks.models`:

- `lstm_per_example_gradients`, `convnet_per_example_gradients`: d loss / d params of each
  example's own loss (`models.softmax_loss` on a batch of one), as dicts like params with a
  leading batch axis.
- `vgg_jacobian`, `lstm_jacobian`, `lstm_batch_jacobian`: d outputs / d input of one example,
  or of each example of a batch w.r.t. its own input.
"""

import tensorflow as tf


def _matmul(x, w, transpose_b=False):
  """x [..., k] times w [k, m] (or w [m, k] transposed), as one 2-D matmul over the merged
  leading axes rather than a broadcasting batch matmul."""
  rows = tf.reshape(x, [-1, x.shape[-1]])
  y = tf.matmul(rows, w, transpose_b=transpose_b)
  return tf.reshape(y, tf.concat([tf.shape(x)[:-1], tf.shape(y)[-1:]], 0))


def _softmax_loss_gradient(logits, labels):
  """d cross-entropy / d logits, row b for example b's own loss (the mean over a batch of one
  is the example's loss, and examples are independent)."""
  return tf.nn.softmax(logits) - tf.one_hot(labels, logits.shape[-1], dtype=logits.dtype)


def _outer(a, b):
  """Per-example outer products: a [batch, i], b [batch, j] -> [batch, i, j]."""
  return a[:, :, None] * b[:, None, :]


def _relu_mask(x):
  """d relu / d pre-activation, from the relu's output (as TF's ReluGrad: 0 where x <= 0)."""
  return tf.cast(x > 0, x.dtype)


# ----------------------------------------------------------------------------- LSTM

def _lstm_kernels(params, input_size):
  """The kernel split into its input rows and its recurrent rows."""
  return params["kernel"][:input_size], params["kernel"][input_size:]


def _lstm_forward(params, sequences):
  """`models.lstm_unrolled_logits` on sequences [batch, steps, input], keeping what the
  backward pass needs. The input projections of all steps are one matmul up front.

  Returns (logits, h, cache): the final h [batch, state], and per step a dict of the previous
  h, the forget gate and the local derivatives, each [batch, state].
  """
  kernel_x, kernel_h = _lstm_kernels(params, sequences.shape[-1])
  projected = _matmul(sequences, kernel_x) + params["bias"]     # [batch, steps, 4 state]
  c = h = tf.zeros([tf.shape(sequences)[0], params["dense"].shape[0]], sequences.dtype)
  cache = []
  for t in range(sequences.shape[1]):
    gates = projected[:, t] if t == 0 else projected[:, t] + tf.matmul(h, kernel_h)
    i, f, g, o = tf.split(gates, 4, axis=1)
    i, f, g, o = tf.sigmoid(i), tf.sigmoid(f), tf.tanh(g), tf.sigmoid(o)
    c_prev, h_prev = c, h
    c = f * c + i * g
    tanh_c = tf.tanh(c)
    h = o * tanh_c
    cache.append({
        "h_prev": h_prev, "f": f,
        "dc_dh": o * (1 - tanh_c * tanh_c),       # d c / d h through h = o tanh(c)
        # d loss / d gate pre-activation = d c * these (i, f, g) or d h * do (o).
        "di": g * i * (1 - i), "df": c_prev * f * (1 - f), "dg": i * (1 - g * g),
        "do": tanh_c * o * (1 - o),
    })
  return tf.matmul(h, params["dense"]) + params["dense_bias"], h, cache


def _lstm_backward(params, input_size, cache, d_h, per_step):
  """Backpropagates cotangents d_h [*lead, batch, state] of the final h through all steps.

  The cached activations ([batch, state]) broadcast against the leading cotangent axes, so
  one pass carries many cotangents per example (the rows of a jacobian). Each step's d gate
  pre-activations [*lead, batch, 4 state] go through `per_step` as soon as they are known
  (off the recurrence's critical path; cheaper than stacking them first where the results
  are smaller); returns its results stacked in time order: [steps, ...].
  """
  _, kernel_h = _lstm_kernels(params, input_size)
  d_c = 0.0
  results = []
  for t in reversed(range(len(cache))):
    s = cache[t]
    d_c = d_c + d_h * s["dc_dh"]
    d_gates = tf.concat([d_c * s["di"], d_c * s["df"], d_c * s["dg"], d_h * s["do"]],
                        axis=-1)
    results.append(per_step(d_gates))
    if t > 0:                                       # the state before step 0 is constant
      d_c = d_c * s["f"]
      d_h = _matmul(d_gates, kernel_h, transpose_b=True)
  return tf.stack(results[::-1])


def lstm_per_example_gradients(params, sequences, labels):
  """Per-example gradients from one batched backward pass: d loss_b / d gates_t is row b of
  the batched gradient (examples are independent), so each weight's per-example gradient is
  a contraction over time of its inputs with those rows. The backward pass is written by
  hand: a tape would also compute the unused d input of every step.

  sequences [batch, steps, input], labels [batch] -> a dict like params, leading batch axis.
  """
  logits, h, cache = _lstm_forward(params, sequences)
  d_logits = _softmax_loss_gradient(logits, labels)
  d_h = tf.matmul(d_logits, params["dense"], transpose_b=True)
  d_gates = _lstm_backward(params, sequences.shape[-1], cache, d_h,
                           lambda d_gates: d_gates)            # [steps, batch, 4 state]
  cell_inputs = tf.concat([tf.transpose(sequences, [1, 0, 2]),
                           tf.stack([s["h_prev"] for s in cache])], axis=-1)
  return {
      "kernel": tf.einsum("tbi,tbj->bij", cell_inputs, d_gates),
      "bias": tf.reduce_sum(d_gates, axis=0),
      "dense": _outer(h, d_logits),
      "dense_bias": d_logits,
  }


def lstm_batch_jacobian(params, sequences):
  """d logits_b / d sequences_b for each example: [batch, classes, steps, input].

  One forward pass; the backward pass carries `classes` cotangents per example at once (the
  rows of `dense`, since d logits_k / d h = dense[:, k]).
  """
  input_size = sequences.shape[-1]
  _, _, cache = _lstm_forward(params, sequences)
  kernel_x, _ = _lstm_kernels(params, input_size)
  d_h = tf.transpose(params["dense"])[:, None, :]               # [classes, 1, state]
  d_inputs = _lstm_backward(params, input_size, cache, d_h, lambda d_gates: _matmul(
      d_gates, kernel_x, transpose_b=True))                     # [steps, classes, batch, in]
  return tf.transpose(d_inputs, [2, 1, 0, 3])


def lstm_jacobian(params, sequence):
  """d logits / d sequence for one sequence [steps, input]: [classes, steps, input]."""
  return lstm_batch_jacobian(params, sequence[None])[0]


# ----------------------------------------------------------------------------- convolutions

def _per_example_filter_gradient(inputs, d_outputs, filter_shape):
  """Per-example d loss / d filter of a stride-1 SAME conv: for each filter tap, the inputs
  shifted by that tap contracted over positions with the output gradients, per example.

  One batch matmul per tap: on CPU this runs 2x (32 input channels) to 20x (1 channel)
  faster than contracting tf.image.extract_patches in one matmul.
  inputs [batch, h, w, c_in], d_outputs [batch, h, w, c_out] -> [batch, *filter_shape].
  """
  kh, kw, c_in, c_out = filter_shape
  h, w = d_outputs.shape[1:3]
  padded = tf.pad(inputs, [[0, 0], [(kh - 1) // 2, kh // 2], [(kw - 1) // 2, kw // 2], [0, 0]])
  d_rows = tf.reshape(d_outputs, [-1, h * w, c_out])
  taps = [tf.matmul(tf.reshape(padded[:, i:i + h, j:j + w], [-1, h * w, c_in]), d_rows,
                    transpose_a=True)
          for i in range(kh) for j in range(kw)]
  return tf.reshape(tf.stack(taps, axis=1), [-1, kh, kw, c_in, c_out])


def _conv_input_gradient(d_outputs, conv_filter, input_shape):
  """d loss / d input of a stride-1 SAME conv with an odd-sized filter, for cotangents
  d_outputs [n, h, w, c_out].

  That is the forward conv with the filter flipped and its channel axes swapped, which on CPU
  (oneDNN) runs faster than Conv2DBackpropInput, except into a few channels (an RGB image's
  gradient), where the latter wins. XLA compiles both to the same convolution.
  """
  if conv_filter.shape[2] <= 4:
    return tf.raw_ops.Conv2DBackpropInput(
        input_sizes=input_shape, filter=conv_filter, out_backprop=d_outputs,
        strides=[1, 1, 1, 1], padding="SAME")
  flipped = tf.transpose(tf.reverse(conv_filter, [0, 1]), [0, 1, 3, 2])
  return tf.nn.conv2d(d_outputs, flipped, 1, "SAME")


def _max_pool_gradient(inputs, outputs, d_outputs):
  """d loss / d input of a 2x2 stride-2 SAME max pool, all three tensors of one batch."""
  return tf.raw_ops.MaxPoolGrad(orig_input=inputs, orig_output=outputs, grad=d_outputs,
                                ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME")


def convnet_per_example_gradients(params, images, labels):
  """Per-example gradients of `models.convnet_logits`' softmax loss, from one batched forward
  and one hand-written batched backward pass: dense weights are outer products of each
  example's activations and output gradients, conv filters its inputs (shifted per filter
  tap) contracted with its output gradients, biases sums of output gradients.

  images [batch, h, w, 1], labels [batch] -> a dict like params, leading batch axis.
  """
  a1 = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(images, params["conv1"], 1, "SAME"),
                                 params["bias1"]))
  p1 = tf.nn.max_pool2d(a1, 2, 2, "SAME")
  a2 = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(p1, params["conv2"], 1, "SAME"),
                                 params["bias2"]))
  p2 = tf.nn.max_pool2d(a2, 2, 2, "SAME")
  flat = tf.reshape(p2, [tf.shape(p2)[0], p2.shape[1] * p2.shape[2] * p2.shape[3]])
  a3 = tf.nn.relu(tf.matmul(flat, params["dense1"]) + params["bias3"])
  logits = tf.matmul(a3, params["dense2"]) + params["bias4"]

  d_logits = _softmax_loss_gradient(logits, labels)
  d_z3 = tf.matmul(d_logits, params["dense2"], transpose_b=True) * _relu_mask(a3)
  d_p2 = tf.reshape(tf.matmul(d_z3, params["dense1"], transpose_b=True), tf.shape(p2))
  d_z2 = _max_pool_gradient(a2, p2, d_p2) * _relu_mask(a2)
  d_p1 = _conv_input_gradient(d_z2, params["conv2"], tf.shape(p1))
  d_z1 = _max_pool_gradient(a1, p1, d_p1) * _relu_mask(a1)
  return {
      "conv1": _per_example_filter_gradient(images, d_z1, params["conv1"].shape),
      "bias1": tf.reduce_sum(d_z1, axis=[1, 2]),
      "conv2": _per_example_filter_gradient(p1, d_z2, params["conv2"].shape),
      "bias2": tf.reduce_sum(d_z2, axis=[1, 2]),
      "dense1": _outer(flat, d_z3),
      "bias3": d_z3,
      "dense2": _outer(a3, d_logits),
      "bias4": d_logits,
  }


def _max_pool_routing(x):
  """Where a 2x2 stride-2 SAME max pool of x [1, h, w, c] sends its output gradients: 1 at
  the first maximum of each window (row-major, as MaxPoolGrad), else 0; shaped like x.

  Computed once on the single forward pass, so the backward pass of many cotangents needs
  no per-cotangent argmax."""
  _, h, w, c = x.shape
  padded = tf.pad(x, [[0, 0], [0, h % 2], [0, w % 2], [0, 0]], constant_values=float("-inf"))
  windows = tf.reshape(padded, [(h + 1) // 2, 2, (w + 1) // 2, 2, c])
  windows = tf.reshape(tf.transpose(windows, [0, 2, 4, 1, 3]), [(h + 1) // 2, (w + 1) // 2,
                                                                c, 4])
  is_max = tf.cast(tf.equal(windows, tf.reduce_max(windows, axis=-1, keepdims=True)), x.dtype)
  first = is_max * tf.cast(tf.equal(tf.cumsum(is_max, axis=-1), 1), x.dtype)
  routing = tf.transpose(tf.reshape(first, [(h + 1) // 2, (w + 1) // 2, c, 2, 2]),
                         [0, 3, 1, 4, 2])
  return tf.reshape(routing, [1, h + h % 2, w + w % 2, c])[:, :h, :w]


def _unpool(d_outputs, height, width):
  """Each output gradient [n, h2, w2, c] copied to its 2x2 window: [n, height, width, c]."""
  n, h2, w2, c = (tf.shape(d_outputs)[0],) + tuple(d_outputs.shape[1:])
  up = tf.broadcast_to(d_outputs[:, :, None, :, None], [n, h2, 2, w2, 2, c])
  return tf.reshape(up, [n, 2 * h2, 2 * w2, c])[:, :height, :width]


def vgg_jacobian(params, image):
  """d models.vgg_outputs(params, image[None])[0] / d image: [outputs, h, w, 3].

  One forward pass on the single image keeps the relu masks and max-pool routings; one
  hand-written backward pass then carries all `outputs` cotangents (the rows of the
  identity, so d flat = dense^T) as a batch, with the single image's masks broadcast.
  """
  num_blocks = sum(k.startswith("conv") for k in params) // 2
  outputs = params["dense"].shape[1]
  x = image[None]
  blocks = []
  for b in range(num_blocks):
    input_sizes, masks = [], []                     # per conv: its input's size in backward
    for k in range(2):
      input_sizes.append([outputs] + x.shape[1:].as_list())
      x = tf.nn.relu(tf.nn.conv2d(x, params[f"conv{b}_{k}"], 1, "SAME")
                     + params[f"bias{b}_{k}"])
      masks.append(_relu_mask(x))
    masks[1] = masks[1] * _max_pool_routing(x)      # the pool's routing, then the relu
    blocks.append((input_sizes, masks, x.shape))
    x = tf.nn.max_pool2d(x, 2, 2, "SAME")

  d = tf.reshape(tf.transpose(params["dense"]), [outputs] + x.shape[1:].as_list())
  for b in reversed(range(num_blocks)):
    input_sizes, masks, pool_input_shape = blocks[b]
    d = _unpool(d, pool_input_shape[1], pool_input_shape[2]) * masks[1]
    d = _conv_input_gradient(d, params[f"conv{b}_1"], input_sizes[1]) * masks[0]
    d = _conv_input_gradient(d, params[f"conv{b}_0"], input_sizes[0])
  return d
