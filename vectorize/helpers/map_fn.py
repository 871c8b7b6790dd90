"""A drop-in `tf.map_fn` that vectorizes: `fn` over the leading axis of `elems`, via pfor.

The trick: `map_fn(fn, elems)` is `pfor(lambda i: fn(elems[i]), n)`. The element an
iteration sees is a gather of each `elems` tensor at the loop index, which the walker turns
into one gather of all rows, so `fn` is traced once and converted op by op. The output
signature (`fn_output_signature`, or the deprecated `dtype`, or `elems`' own structure when
neither is given) is checked inside the traced body, before any conversion: a structure or
dtype mismatch is an error at trace time, as tf.map_fn's is at run time, never a cast.

In eager mode the traced and converted function is cached per (fn, signature), as pfor's is,
and called with `elems` as arguments, so calling again with the same shapes neither traces
nor converts again.
"""

from absl import logging
import tensorflow as tf
from tensorflow.python.util import nest

from vectorize import api
from vectorize import cache
from vectorize import dims
from vectorize import trace

_COMPOSITE_VALUES = (tf.RaggedTensor, tf.SparseTensor)
_COMPOSITE_SPECS = (tf.RaggedTensorSpec, tf.SparseTensorSpec)


# Not converted by AutoGraph when a tf.function calls it: this is library code. fn itself is
# still converted, when pfor traces the body.
def map_fn(fn, elems, dtype=None, parallel_iterations=None, back_prop=True, swap_memory=False,
           infer_shape=True, name=None, fn_output_signature=None, *,
           fallback_to_while_loop=True):
  """`tf.map_fn(fn, elems, ...)`, computed by one vectorized graph instead of a while loop.

  Takes tf.map_fn's arguments. Ops of `fn` that have no vectorized form run in a sequential
  loop with a warning per op type, as in `pfor`.

  Args:
    fn: takes one element (`elems`' structure, leading axis removed) and returns a nested
      structure of tensors (or Python numbers) matching the output signature.
    elems: a tensor or nested structure of tensors (numpy values, lists of numbers) sharing
      their leading dimension n, which may be 0 or known only at run time.
    dtype: deprecated alias of `fn_output_signature`; give at most one of the two.
    parallel_iterations: accepted for compatibility and ignored: all iterations run at once.
      To bound memory, call `vectorize.pfor(..., parallel_iterations=k)`.
    back_prop: False stops gradients through the result (deprecated in tf.map_fn too).
    swap_memory: accepted for compatibility; there is no loop whose memory could be swapped.
    infer_shape: accepted for compatibility; outputs always get static shapes where known.
    name: a name scope for the emitted ops.
    fn_output_signature: fn's output structure, as dtypes or `tf.TensorSpec`s (shapes are
      checked where given). Needed when fn's output differs from `elems` in structure or
      dtype. `tf.RaggedTensorSpec` / `tf.SparseTensorSpec` are handed to tf.map_fn itself.
    fallback_to_while_loop: keyword only; False raises `ConversionError` instead of running
      an op sequentially.

  Returns:
    The output signature's structure, each tensor with a new leading axis of size n.

  Raises:
    ValueError: no tensor in `elems`, a scalar in `elems`, leading dimensions that differ,
      both `dtype` and `fn_output_signature`, or an output shape the signature rejects.
    TypeError / ValueError: fn's output structure differs from the signature's.
    TypeError: fn returns a dtype other than the signature's.
    ConversionError: an op cannot be vectorized and the fallback is off.

  Example:
    >>> x = tf.random.normal([8, 3])
    >>> vectorize.map_fn(lambda row: (tf.reduce_sum(row), tf.argmax(row)), x,
    ...                  fn_output_signature=(tf.float32, tf.int64))   # ([8], [8])

  Limits: ragged and sparse elements or outputs are handed to `tf.map_fn` (sequential, with
  a warning). As with pfor, Python values fn reads are read once, at trace time.
  """
  del parallel_iterations, swap_memory, infer_shape   # no loop: nothing to tune
  if dtype is not None and fn_output_signature is not None:
    raise ValueError("map_fn: pass fn_output_signature or its deprecated alias dtype, not "
                     "both.")
  signature = fn_output_signature if fn_output_signature is not None else dtype
  if _has_composites(elems, signature):
    logging.warning("vectorize.map_fn: ragged or sparse elems or outputs have no vectorized "
                    "form; running tf.map_fn, a sequential loop.")
    return tf.map_fn(fn, elems, back_prop=back_prop, name=name,
                     fn_output_signature=signature)
  elems = tf.nest.map_structure(tf.convert_to_tensor, elems)
  with tf.name_scope(name or "map_fn"):
    if tf.executing_eagerly():
      # A closure, not functools.partial: tf.function would trace a partial's bound
      # arguments as inputs, turning the signature's TensorSpecs into placeholders.
      outputs = cache.eager_call(
          "map_fn", fn, (_signature_key(signature), fallback_to_while_loop),
          lambda: cache.body_function(lambda e: _map_in_graph(fn, e, signature,
                                                              fallback_to_while_loop)), elems)
    else:
      outputs = _map_in_graph(fn, elems, signature, fallback_to_while_loop)
  if not back_prop:
    outputs = tf.nest.map_structure(tf.stop_gradient, outputs)
  return outputs


def _has_composites(elems, signature):
  return (any(isinstance(e, _COMPOSITE_VALUES) for e in tf.nest.flatten(elems)) or
          any(isinstance(s, _COMPOSITE_SPECS) for s in tf.nest.flatten(signature)))


def _signature_key(signature):
  """A hashable key equal for equal signatures (users rebuild them on every call)."""
  if signature is None:
    return None
  leaves = tuple(s if isinstance(s, tf.TypeSpec) else tf.as_dtype(s)
                 for s in tf.nest.flatten(signature))
  return (repr(tf.nest.map_structure(lambda _: 0, signature)), leaves)


def _as_specs(signature, elems):
  """The signature as TensorSpecs; elems' structure and dtypes (any shape) when none is."""
  if signature is None:
    return tf.nest.map_structure(lambda e: tf.TensorSpec(None, e.dtype), elems)
  return tf.nest.map_structure(
      lambda s: s if isinstance(s, tf.TensorSpec) else tf.TensorSpec(None, tf.as_dtype(s)),
      signature)


def _map_in_graph(fn, elems, signature, fallback):
  """The vectorized map, in the graph being built; returns the signature's structure."""
  fn = trace.autograph_like_caller(fn)
  flat = tf.nest.flatten(elems)
  if not flat:
    raise ValueError(f"map_fn: elems must contain at least one tensor, got {elems!r}.")
  for t in flat:
    if t.shape.rank == 0:
      raise ValueError(f"map_fn: every tensor of elems needs a leading axis; got the scalar "
                       f"{t.name if hasattr(t, 'name') else t}.")
  flat, n = _leading_dim(flat)
  flat = [_dense_gradient(t) if t.dtype.is_floating or t.dtype.is_complex else t
          for t in flat]
  elems = tf.nest.pack_sequence_as(elems, flat)
  specs = _as_specs(signature, elems)
  where = ("fn_output_signature" if signature is not None else
           "elems (pass fn_output_signature when fn returns another structure or dtype)")

  def loop_fn(i):
    element = tf.nest.pack_sequence_as(elems, [tf.gather(t, i) for t in flat])
    return _match_signature(fn(element), specs, where)

  outputs = api.pfor(loop_fn, n, fallback_to_while_loop=fallback, warn=True)
  static_n = n if isinstance(n, int) else None
  for t, spec in zip(tf.nest.flatten(outputs), tf.nest.flatten(specs)):
    t.set_shape(tf.TensorShape([static_n]).concatenate(spec.shape))
  return outputs


@tf.custom_gradient
def _dense_gradient(t):
  """Identity whose gradient is dense: rows read by gathers would give `IndexedSlices`,
  where tf.map_fn's callers get a dense gradient for elems."""
  return tf.identity(t), tf.convert_to_tensor


def _leading_dim(flat):
  """(flat, n): n a Python int when any tensor knows it, else a run-time scalar.

  Leading dimensions known at trace time must agree; unknown ones are checked at run time.
  """
  leading = [dims.leading(t) for t in flat]
  known = sorted({d for d in leading if d is not None})
  if len(known) > 1:
    raise ValueError(f"map_fn: the tensors of elems must share their leading dimension; "
                     f"got {', '.join(str(d) for d in leading)}.")
  n = known[0] if known else tf.shape(flat[0], out_type=tf.int32)[0]
  if len(flat) > 1 and None in leading:
    checks = [tf.debugging.assert_equal(tf.shape(t, out_type=tf.int32)[0], n, message=
                                        "map_fn: elems differ in their leading dimension")
              for t in flat]
    with tf.control_dependencies(checks):
      flat = [tf.identity(t) for t in flat]
  return flat, n


def _match_signature(result, specs, where):
  """fn's result as tensors in the signature's structure; raises on a mismatch."""
  try:
    tf.nest.assert_same_structure(specs, result)
  except (ValueError, TypeError) as e:
    raise type(e)(f"map_fn: fn's output structure does not match {where}: {e}") from None
  tensors = []
  paths = [p for p, _ in nest.flatten_with_joined_string_paths(specs)]
  for path, spec, value in zip(paths, tf.nest.flatten(specs), tf.nest.flatten(result)):
    path = path or "<top level>"
    if isinstance(value, (tf.Tensor, tf.Variable, tf.IndexedSlices)):
      if value.dtype.base_dtype != spec.dtype:
        raise TypeError(f"map_fn: fn returned {value.dtype.name} at {path}, but {where} "
                        f"says {spec.dtype.name}. Cast inside fn, or fix the signature.")
      tensor = tf.convert_to_tensor(value)
    else:
      tensor = tf.convert_to_tensor(value, dtype=spec.dtype)
    if not spec.shape.is_compatible_with(tensor.shape):
      raise ValueError(f"map_fn: fn returned shape {tensor.shape} at {path}, but {where} "
                       f"says {spec.shape}.")
    tensors.append(tensor)
  return tf.nest.pack_sequence_as(specs, tensors)
