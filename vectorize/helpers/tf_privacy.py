"""TF Privacy's fast gradient clipping for every layer, through the engine.

TF Privacy's DP Keras models (`DPModel`, `DPSequential`) clip fast only when every trainable
layer has a hand-written rule in their `layer_registry` (Dense and Embedding by default);
one layer without (any convolution, any RNN) and the whole step falls back to full
per-example gradients from TensorFlow's own vectorizer. `tf_privacy_layer_registry()`
answers for every layer: its rule runs the layer forward as usual, and its squared-norm
function gets the per-example norms of the layer's weight gradients from the output
gradients TF Privacy hands it, by `per_example_gradient_norms` of the vector-Jacobian product
<layer(x_i), dy_i> (factored where the layer's graph allows: see factored.py). TF Privacy
keeps its own algorithm around it (norms, clip weights, a weighted second backward pass,
noise), so a user changes one argument:

    model = DPSequential(l2_norm_clip=1.0, noise_multiplier=1.1, layers=[...],
                         layer_registry=vectorize.tf_privacy_layer_registry())

The registry is duck-typed (`is_elem`, `lookup`, `insert`): TF Privacy need not be
installed to import vectorize. A rule inserted for a layer class is kept and used for it.
"""

import tensorflow as tf

from vectorize.helpers import clipping


class LayerRegistry:
  """A TF Privacy layer registry that has every layer."""

  def __init__(self):
    self._inserted = {}

  def is_elem(self, layer_instance):
    del layer_instance
    return True

  def lookup(self, layer_instance):
    return self._inserted.get(type(layer_instance), layer_norms_computation)

  def insert(self, layer_class, layer_registry_function):
    self._inserted[layer_class] = layer_registry_function


def tf_privacy_layer_registry():
  """A layer registry for TF Privacy's DP Keras models that covers every layer (see the
  module's docstring)."""
  return LayerRegistry()


def layer_norms_computation(layer_instance, input_args, input_kwargs, tape,
                            num_microbatches=None):
  """TF Privacy's registry-function protocol for any layer: returns (base_vars, outputs,
  sqr_norm_fn), base_vars the layer's outputs (watched by `tape`), and
  `sqr_norm_fn(d summed_loss / d outputs)` the `[b]` (or `[num_microbatches]`) squared
  norms of the layer's weight gradients, per example (or microbatch)."""
  outputs = layer_instance(*input_args, **input_kwargs)
  tape.watch(outputs)
  batch = tf.shape(tf.nest.flatten(outputs)[0])[0]

  def sqr_norm_fn(output_grads):
    per_example, rebuild = _split_batch_arguments((input_args, input_kwargs), batch)
    grads = tf.nest.flatten(output_grads)
    groups = [_grouped(t, num_microbatches) for t in per_example + grads]

    def loss_fn(*group):
      example = [_as_batch(t, num_microbatches) for t in group]
      args, kwargs = rebuild(example[:len(per_example)])
      out = tf.nest.flatten(layer_instance(*args, **kwargs))
      return tf.add_n([tf.reduce_sum(o * tf.cast(g, o.dtype))
                       for o, g in zip(out, example[len(per_example):])])

    norms = clipping.per_example_gradient_norms(loss_fn, layer_instance.trainable_variables,
                                                *groups)
    return tf.cast(tf.square(norms), grads[0].dtype)

  return outputs, outputs, sqr_norm_fn


def _split_batch_arguments(arguments, batch):
  """The tensors among `arguments` with the batch's leading dimension (to be taken per
  example), and `rebuild(tensors)` putting such tensors back in their places; everything
  else (flags, invariant tensors) stays as given."""
  flat = tf.nest.flatten(arguments)
  static_batch = tf.get_static_value(batch)
  positions = [k for k, t in enumerate(flat) if isinstance(t, tf.Tensor) and t.shape.rank
               and (t.shape[0] is None or static_batch is None or t.shape[0] == static_batch)]

  def rebuild(tensors):
    filled = list(flat)
    for k, t in zip(positions, tensors):
      filled[k] = t
    return tf.nest.pack_sequence_as(arguments, filled)

  return [flat[k] for k in positions], rebuild


def _grouped(tensor, num_microbatches):
  """`[b, ...]` -> `[num_microbatches, b / num_microbatches, ...]` (unchanged for None)."""
  if num_microbatches is None:
    return tensor
  shape = tf.shape(tensor)
  return tf.reshape(tensor, tf.concat([[num_microbatches, shape[0] // num_microbatches],
                                       shape[1:]], 0))


def _as_batch(example, num_microbatches):
  """One example as a batch of one for the layer; a microbatch is a batch already."""
  return example[None] if num_microbatches is None else example
