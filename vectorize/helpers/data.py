"""tf.data: a per-element map, vectorized and applied after `batch()`.

`ds.apply(map_and_batch(fn, b))` yields what `ds.map(fn).batch(b)` yields, element for
element, but runs `fn` once per batch instead of once per element: it is
`ds.batch(b).map(vectorized_fn)`, where `vectorized_fn` runs `pfor` over the batch's leading
axis. The trick is that tf.data traces a map function as a graph function at apply time, so
the conversion runs then, inside that graph; n is read from the batch at run time, so the
last, smaller batch needs no second trace. tf.data passes a tuple element as positional
arguments; the vectorized fn receives the batch the same way and hands each iteration's
slices to `fn` in the same form.

Every new iterator instantiates the map function again. tf.data runs Grappler over it then
unless the function carries the `experimental_ints_on_device` attribute, which sends it through
the single-device function runtime; a vectorized function is several times larger than the
per-element one, so Grappler was most of each epoch's start (30 of 44 ms CPU for the
tfdata_records pipeline). The map over batches therefore carries that attribute: on the CPU
device where tf.data runs map functions, where int32 values live changes nothing. But the
attribute turns each int32 output into a `_DeviceRetval` node, and tf.data's pipeline rewrites
at iterator creation (inject_prefetch and others) tell a function from the pipeline by its
outputs all being `_Retval`s: a function with an int32 output and another output is taken for
a pipeline with several fetch nodes ("Expected only one fetch node"). So the map over batches
returns its int32 outputs bitcast to uint32 (no copy), and a map of bitcasts after it, a
function too small for Grappler to matter, gives them back as int32.

A fn that calls Python per element fails at apply time with a `ConversionError` saying what
to do; so does one that reads and writes a variable in an order-dependent way when the
fallback is off (with it on, each batch runs fn element after element, as map then batch).
"""

import tensorflow as tf
from tensorflow.python.autograph.core import ag_ctx
from tensorflow.python.autograph.impl import api as autograph
from tensorflow.python.data.ops import dataset_ops
from tensorflow.python.data.ops import structured_function
from tensorflow.python.framework import composite_tensor
from tensorflow.python.ops import gen_dataset_ops
from tensorflow.python.util import nest

from vectorize import api
from vectorize import whole_body_loop
from vectorize import dims
from vectorize.errors import ConversionError

# Ops that call back into Python for each element.
_PYTHON_CALL_TYPES = frozenset(["EagerPyFunc", "PyFunc", "PyFuncStateless"])


def map_and_batch(fn, batch_size, drop_remainder=False, num_parallel_calls=None,
                  fallback_to_while_loop=True):
  """A dataset transformation equal to `map(fn)` then `batch(batch_size, drop_remainder)`.

  Args:
    fn: the per-element function, as for `Dataset.map` (a tuple element arrives as
      positional arguments). Its outputs are batched as `batch()` batches them: a dense
      output gives dense batches (checked at run time to have one shape in every element,
      where pfor alone would give a RaggedTensor), a RaggedTensor or SparseTensor output
      gives ragged or sparse batches.
    batch_size: elements per batch, a Python int or scalar int64 tensor, as for `batch`.
    drop_remainder: drop the last batch when it has fewer than `batch_size` elements.
    num_parallel_calls: passed to the `map` over batches (e.g. `tf.data.AUTOTUNE`).
    fallback_to_while_loop: ops of fn with no vectorized form run one element at a time (with
      a warning); False makes them a `ConversionError` at apply time.

  Returns:
    A function `Dataset -> Dataset`, for `dataset.apply(...)`.

  Raises (when applied):
    TypeError: the dataset's elements hold ragged or sparse tensors or nested datasets, or
      a dense tensor whose size may differ between elements past its first axis (one whose
      first axis may differ, a spec of `[None]` or `[None, 3]`, is batched ragged and fn
      sees each element at its own size, as map then batch gives it).
    ConversionError: fn calls Python (`tf.py_function`, `tf.numpy_function`) per element;
      or, with the fallback off, an op cannot be vectorized or fn reads and writes a
      `tf.Variable` with per-element values in an order-dependent way (with the fallback on,
      such a fn runs element after element within each batch).

  Example:
    >>> ds = tf.data.Dataset.from_tensor_slices(tf.random.normal([100, 8]))
    >>> ds = ds.apply(vectorize.data.map_and_batch(lambda x: tf.nn.l2_normalize(x), 32))
    >>> [b.shape[0] for b in ds]                           # [32, 32, 32, 4]

  Limits: like `Dataset.map`, fn is traced once and Python values it reads are read then;
  stateful random ops draw per batch, so their values differ from map-then-batch (their
  distribution does not). Every element of a batch must give values of one size, as
  `.batch()` needs: images decoded at different sizes and resized to one size in fn
  convert; returned unresized, they stop with an error at run time, as map then batch
  does. Sparse and variable-length tf.Example features fall back.
  """

  def apply(dataset):
    _check_dense(dataset.element_spec)
    vectorized, carried = _int32_as_uint32(_vectorized(fn, fallback_to_while_loop))
    batched = _batches(dataset, batch_size, drop_remainder)
    mapped = _MapBatches(batched, vectorized, num_parallel_calls)
    if drop_remainder and whole_body_loop.writes_variables(mapped.function.graph):
      # map(fn) runs fn on the elements batch() drops after it: their effects count.
      mapped = _full_batches(_MapBatches(_batches(dataset, batch_size), vectorized,
                                         num_parallel_calls), batch_size)
    return _restore_int32(mapped, carried)

  return apply


# Marks a function for the single-device runtime, which tf.data instantiates without Grappler.
_SINGLE_DEVICE_ATTRIBUTES = {"experimental_ints_on_device": True}


class _MapBatches(dataset_ops.UnaryDataset):
  """`batched.map(vectorized_fn, num_parallel_calls)`, its function without Grappler."""

  def __init__(self, batched, vectorized_fn, num_parallel_calls):
    self._name = None
    self._map_func = structured_function.StructuredFunctionWrapper(
        vectorized_fn, "map_and_batch()", dataset=batched,
        defun_kwargs=dict(_SINGLE_DEVICE_ATTRIBUTES))
    function = self._map_func.function
    if num_parallel_calls is None:
      variant = gen_dataset_ops.map_dataset(
          batched._variant_tensor, function.captured_inputs, f=function,  # pylint: disable=protected-access
          preserve_cardinality=True, **self._common_args)
    else:
      variant = gen_dataset_ops.parallel_map_dataset_v2(
          batched._variant_tensor, function.captured_inputs, f=function,  # pylint: disable=protected-access
          num_parallel_calls=tf.convert_to_tensor(num_parallel_calls, tf.int64),
          preserve_cardinality=True, **self._common_args)
    super().__init__(batched, variant)

  def _functions(self):
    return [self._map_func]

  @property
  def function(self):
    return self._map_func.function

  @property
  def element_spec(self):
    return self._map_func.output_structure


def _int32_as_uint32(fn):
  """`fn` with its int32 tensor outputs bitcast to uint32, and the list of flags (one per
  flat output) that tracing it fills: which outputs were int32. A function carrying
  `_SINGLE_DEVICE_ATTRIBUTES` must not return int32 (see the module docstring)."""
  carried = []

  def without_int32(*batch):
    outputs = fn(*batch)
    flat = tf.nest.flatten(outputs)
    carried[:] = [isinstance(t, tf.Tensor) and t.dtype == tf.int32 for t in flat]
    return tf.nest.pack_sequence_as(outputs, [
        tf.bitcast(t, tf.uint32) if is_int32 else t for t, is_int32 in zip(flat, carried)])

  return without_int32, carried


def _full_batches(dataset, size):
  """The batches of `size` elements (the last, partial one left out), typed as
  `batch(size, drop_remainder=True)` types them: a static leading size."""
  spec = dataset.element_spec
  is_tuple = isinstance(spec, tuple)

  def leading(*parts):
    first = tf.nest.flatten(parts, expand_composites=False)[0]
    rows = first.nrows() if isinstance(first, tf.RaggedTensor) else tf.shape(first)[0]
    return tf.equal(tf.cast(rows, tf.int64), size)

  def static(*parts):
    element = parts if is_tuple else parts[0]

    def sized(t):
      if isinstance(t, tf.RaggedTensor):
        t._set_shape(tf.TensorShape([size]).concatenate(t.shape[1:]))  # pylint: disable=protected-access
        return t
      return tf.ensure_shape(t, tf.TensorShape([size]).concatenate(t.shape[1:]))
    return tf.nest.map_structure(sized, element)

  return dataset.filter(leading).map(static)


def _restore_int32(dataset, carried):
  """`dataset` with the outputs `carried` flags bitcast back to int32 (a plain map, so its
  function returns int32 by `_Retval`s), or `dataset` itself where there are none."""
  if not any(carried):
    return dataset
  is_tuple = isinstance(dataset.element_spec, tuple)

  def restore(*parts):
    element = parts if is_tuple else parts[0]
    flat = tf.nest.flatten(element)
    return tf.nest.pack_sequence_as(element, [
        tf.bitcast(t, tf.int32) if is_int32 else t for t, is_int32 in zip(flat, carried)])

  return dataset.map(restore)


def _batches(dataset, batch_size, drop_remainder=False):
  """The batches fn's elements come from: `batch()`, or where a component's size may differ
  between elements (a spec of `[None]`: a sequence, a record of its own length) a ragged
  batch, whose rows fn sees at their own sizes, as map then batch gives them to it."""
  specs = tf.nest.flatten(dataset.element_spec)
  if all(spec.shape.is_fully_defined() for spec in specs):
    return dataset.batch(batch_size, drop_remainder=drop_remainder)
  for path, spec in nest.flatten_with_joined_string_paths(dataset.element_spec):
    shape = spec.shape
    if shape.rank is None or not shape[1:].is_fully_defined():
      raise TypeError(
          f"map_and_batch: the dataset element at {path or '<top level>'} has shape {shape}: "
          "its size may differ between elements in an axis after its first (or its rank is "
          "unknown), which a batch cannot hold for fn's rows. To fix: give the element a "
          "shape known past its first axis (tf.ensure_shape or a reshape in an earlier "
          "map), or use dataset.map(fn).batch(...).")
  return dataset.ragged_batch(batch_size, drop_remainder=drop_remainder)


def _check_dense(element_spec):
  for path, spec in nest.flatten_with_joined_string_paths(element_spec):
    if not isinstance(spec, tf.TensorSpec):
      raise TypeError(
          f"map_and_batch: the dataset element at {path or '<top level>'} is a "
          f"{type(spec).__name__}; only dense tensors can be vectorized. Use "
          "dataset.map(fn).batch(...) (or ragged_batch) for such elements.")


def _name(fn):
  return getattr(fn, "__name__", type(fn).__name__)


def _vectorized(fn, fallback):
  """`fn` over every element of a batch (the batch's structure, tuples as arguments).

  `fn` gets autograph, as `Dataset.map` gives it, so Python control flow on tensors works.
  """
  fn = autograph.tf_convert(fn, ag_ctx.ControlStatusCtx(status=ag_ctx.Status.ENABLED))

  def vectorized_fn(*batch):
    flat = tf.nest.flatten(batch)
    if not flat:
      raise ValueError("map_and_batch: the dataset's elements hold no tensor.")
    first = flat[0]
    static_n = dims.leading(first)
    # The last batch may be smaller: n is read from the batch.
    n = static_n if static_n is not None else (
        first.nrows(out_type=tf.int32) if isinstance(first, tf.RaggedTensor)
        else tf.shape(first, out_type=tf.int32)[0])

    element = []   # fn's outputs for one element, as traced

    def loop_fn(i):
      element[:] = [fn(*tf.nest.map_structure(lambda t: _row(t, i), batch))]
      return tf.nest.map_structure(_as_value, element[0])

    try:
      outputs = api.pfor_in_graph(loop_fn, n, fallback, None, is_a_size=True)
    except ConversionError as e:
      raise ConversionError(
          f"map_and_batch cannot vectorize {_name(fn)}: {e} map_and_batch computes every "
          "element of a batch at once, so a fn whose result depends on the order of "
          "elements cannot run there: use dataset.map(fn).batch(...) for it, or make the "
          "state update commutative (assign_add) or per-batch.") from e
    _refuse_python_calls(api.last_report(), fn)
    return _typed_as_batches(outputs, element[0], static_n, fn)

  return vectorized_fn


def _row(batch, i):
  """Element i of a batch: a row of a tensor, or of a ragged batch at its own size (a
  gather over a range of per-element bounds, which converts to a ragged value)."""
  if isinstance(batch, tf.RaggedTensor):
    splits = batch.row_splits
    return tf.gather(batch.values, tf.range(splits[i], splits[i + 1]))
  return tf.gather(batch, i)


def _as_value(output):
  """A Python number or string fn returns, as `Dataset.map` takes it: a tensor."""
  if isinstance(output, (tf.Tensor, composite_tensor.CompositeTensor, tf.Operation)):
    return output
  return tf.convert_to_tensor(output)


def _typed_as_batches(outputs, element, static_n, fn):
  """`outputs` (pfor's) typed as `batch()` types a batch of `element`s (fn's outputs for one
  element): pfor gives a tf.RaggedTensor where sizes may differ per element, but map then
  batch gives a dense batch of a dense output, and stops where sizes differ; and the static
  shapes of the per-element outputs hold for the batch too."""
  flat_element = tf.nest.flatten(element)
  paths = [path for path, _ in nest.flatten_with_joined_string_paths(element)]
  return tf.nest.pack_sequence_as(outputs, [
      _typed_as_batch(output, _spec(one)._batch(static_n), path or "<top level>", fn)
      for output, one, path in zip(tf.nest.flatten(outputs), flat_element, paths)])


def _spec(value):
  if isinstance(value, (tf.Tensor, composite_tensor.CompositeTensor)):
    return tf.type_spec_from_value(value)
  return tf.type_spec_from_value(tf.convert_to_tensor(value))


def _typed_as_batch(output, spec, path, fn):
  """`output` of the type `spec` (the batch's, as `batch()` gives it)."""
  if isinstance(spec, tf.TensorSpec):
    if isinstance(output, tf.RaggedTensor):
      output = _dense_batch(output, path, fn)
    output.set_shape(spec.shape)
  elif isinstance(spec, tf.SparseTensorSpec):
    output.set_shape(spec.shape)
  elif isinstance(spec, tf.RaggedTensorSpec):
    output = output.with_row_splits_dtype(spec.row_splits_dtype)
    output._set_shape(spec.shape)  # pylint: disable=protected-access
  return output


def _dense_batch(rt, path, fn):
  """The dense batch of a dense per-element output whose size pfor could not prove equal in
  every element: checked equal at run time, where map then batch would stop too."""
  same = [tf.reduce_all(tf.equal(lengths, lengths[:1])) for lengths in rt.nested_row_lengths()]
  check = tf.debugging.Assert(tf.reduce_all(tf.stack(same)), [
      f"map_and_batch: the output {path} of {_name(fn)} has different shapes in the elements "
      "of a batch, which map(fn).batch(...) cannot batch either. To fix: give it one shape "
      "in fn (pad, slice or resize it), or return a tf.RaggedTensor from fn for ragged "
      "batches. Sizes per element:", rt.nested_row_lengths()[0]], summarize=20)
  with tf.control_dependencies([check]):
    return rt.to_tensor()


def _refuse_python_calls(report, fn):
  calls = [r for r in report.records if r.op_type in _PYTHON_CALL_TYPES]
  if calls:
    raise ConversionError(
        f"map_and_batch cannot vectorize {_name(fn)}: it calls Python per element "
        f"(op {calls[0].op_name!r} of type {calls[0].op_type}, from tf.py_function or "
        "tf.numpy_function), which has no vectorized form. Use dataset.map(fn).batch(...) "
        "for this fn, or write the Python part with TensorFlow ops.")
