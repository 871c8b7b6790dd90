"""Ragged values: per-iteration values whose first dimension differs between iterations.

The outputs of `tf.range` with per-iteration bounds, one-argument `tf.where`, `tf.unique` or
`tf.boolean_mask` have a size of their own in every iteration, so they cannot be stacked on
a loop axis (a range or slice whose bounds differ by an invariant amount,
`tf.range(s, s + k)`, has one length and is stacked instead: `vectorize/offsets.py`). They
are held as a `RaggedRows`: the iterations' values concatenated along
their first axis (`values`, `[sum of row lengths] + rest`) and one row length per iteration.
Iteration j's value is `values[splits[j]:splits[j + 1]]`. The flat values have the rank of
one iteration's value, and every per-iteration axis past the first keeps its index there,
which is what lets most consumers work on `values` directly.

Values that differ in several leading axes (images decoded at their own height and width)
are held alike, those axes merged into one (`dims` holds each iteration's sizes of them), but
only where every use of the value has a converter for them (`register_multi_axis`), ending
in ops whose output the graph knows whole (a resize to a fixed size): the producer
(`register_multi_axis_producer`) is chosen by looking at the uses first
(`uses_take`). Elsewhere such a value stays with its dense converter. The other
axes (`rest`) are the same in every iteration. A while loop reads a ragged value that it
passes through unchanged (`take_iterations` gives each step its live iterations); otherwise
conditionals and loops do not carry ragged values: an op with a ragged input and no ragged
converter (an If, a MatMul of two ragged values) falls back, or is a `ConversionError`
naming the op when the fallback is off.

A ragged value is a stacked `Value` whose tensor is a `RaggedRows`. Converters never meet
one unawares: an op with a ragged input goes to the converter registered here for its type
(`register`), and the walker treats every other such op as unvectorizable. Ragged results
whose per-iteration shape the traced graph knows fully (after `tf.ensure_shape`, a reshape
to a fixed shape) become stacked tensors again (`settle`). What stays ragged at the body's
output comes back as a `tf.RaggedTensor`.
"""

from typing import NamedTuple, Optional

import tensorflow as tf

from vectorize import registry
from vectorize import values
from vectorize.errors import ConversionError, Unvectorizable
from vectorize.values import Value


class RaggedRows(NamedTuple):
  """Per-iteration values of different first dimensions (or first k axes, merged),
  concatenated."""
  values: tf.Tensor        # [sum(row_lengths)] + rest
  row_lengths: tf.Tensor   # [n] int32
  dims: Optional[tf.Tensor] = None   # [n, k] int32 sizes of the first k axes, k >= 2
  # A view (`take_iterations(..., view=True)`): each iteration's first row in `values`,
  # which then hold other rows too; only the ops of VIEW_READERS read one as it is.
  starts: Optional[tf.Tensor] = None

  @property
  def dtype(self):
    return self.values.dtype

  @property
  def op(self):
    return self.values.op

  @property
  def row_splits(self):
    """`[n + 1]`: where each iteration's rows start in `values`, then the total."""
    return tf.concat([tf.zeros([1], tf.int32), tf.cumsum(self.row_lengths)], 0)

  @property
  def row_starts(self):
    """`[n]`: where each iteration's rows start in `values`."""
    if self.starts is not None:
      return self.starts
    return tf.cumsum(self.row_lengths, exclusive=True)

  @property
  def row_ids(self):
    """`[sum(row_lengths)]`: the iteration of each row of `values`."""
    return _row_index(self.row_lengths)[0]

  @property
  def positions(self):
    """`[sum(row_lengths)]`: each row's index within its iteration's value."""
    return _row_index(self.row_lengths)[1]


_ROW_INDEX = "_vectorize_row_index"   # graph attribute: {(row lengths, context): (ids, positions)}


def _row_table():
  """The default graph's table of row ids and positions (kept on the graph: it goes with
  the graph)."""
  graph = tf.compat.v1.get_default_graph()
  table = getattr(graph, _ROW_INDEX, None)
  if table is None:
    table = {}
    setattr(graph, _ROW_INDEX, table)
  return table


def _row_key(row_lengths):
  graph = tf.compat.v1.get_default_graph()
  return row_lengths.ref(), getattr(graph, "_get_control_flow_context", lambda: None)()


def _row_index(row_lengths):
  """The row ids and positions of `row_lengths`, made once per graph (and control-flow
  context) and reused by every value laid out alike: one ragged range of the iterations'
  numbers times the longest length, `i * longest + position`, split by a division."""
  table = _row_table()
  key = _row_key(row_lengths)
  if key not in table:
    lengths = tf.cast(row_lengths, tf.int64)
    longest = tf.maximum(tf.reduce_max(tf.concat([[0], lengths], 0)), 1)
    bases = tf.range(tf.size(lengths, out_type=tf.int64)) * longest
    _, numbers = tf.raw_ops.RaggedRange(starts=bases, limits=bases + lengths,
                                        deltas=tf.ones([], tf.int64))
    ids = numbers // longest
    table[key] = (tf.cast(ids, tf.int32), tf.cast(numbers - ids * longest, tf.int32))
  return table[key]


def ragged(values, row_lengths, row_ids=None):
  """A ragged Value from flat values and one int32 row length per iteration; `row_ids`,
  where the producer has them, are kept for the consumers (`RaggedRows.row_ids`)."""
  rows = RaggedRows(tf.convert_to_tensor(values), tf.cast(row_lengths, tf.int32))
  if row_ids is not None:
    positions = tf.range(tf.size(row_ids)) - tf.gather(rows.row_starts, row_ids)
    _row_table()[_row_key(rows.row_lengths)] = (row_ids, positions)
  return Value(rows, True)


def multi_axis(values, dims):
  """A Value from values merged over their first k axes, whose sizes per iteration are
  `dims` `[n, k]`: ragged when k is 1, stacked when 0."""
  k = dims.shape[1]
  if k == 0:
    return Value(values, True)
  if k == 1:
    return ragged(values, dims[:, 0])
  dims = tf.cast(dims, tf.int32)
  return Value(RaggedRows(values, tf.reduce_prod(dims, 1), dims), True)


# Op types whose ragged converters read a view as it is: by each iteration's first row
# (`row_starts`) and row lengths, never by the flat values' layout.
VIEW_READERS = frozenset(["StridedSlice", "Shape", "Size", "Rank"])


def take_iterations(value, positions, view=False):
  """The ragged Value of the iterations at `positions` (`[m]` of value's n, repeats
  allowed): a loop's live ones, each one's rows read from where they lie; or, with `view`,
  a view of them that moves no data (a loop reading one row per step would otherwise copy
  every live sequence at every step)."""
  rows = value.tensor
  taken = Value(RaggedRows(rows.values, tf.gather(rows.row_lengths, positions),
                           starts=tf.gather(rows.row_starts, positions)), True)
  return taken if view else materialized(taken)


def materialized(value):
  """`value`, a view's rows gathered into a ragged value of its own."""
  if not is_ragged(value) or value.tensor.starts is None:
    return value
  rows = value.tensor
  layout = RaggedRows(rows.values, rows.row_lengths)
  index = tf.gather(rows.starts, layout.row_ids) + layout.positions
  return ragged(tf.gather(rows.values, index), rows.row_lengths)


def readable_inputs(op, inputs):
  """`inputs` of `op` with any view materialized, unless op's converter reads views."""
  if op.type in VIEW_READERS:
    return inputs
  return [materialized(v) for v in inputs]


def is_ragged(value):
  return isinstance(value.tensor, RaggedRows)


def is_multi_axis(value):
  return is_ragged(value) and value.tensor.dims is not None


def same_rows(flat, rows):
  """A ragged Value of flat values `flat` laid out like `rows` (same row lengths and dims)."""
  return Value(rows._replace(values=flat, starts=None), True)


def first_dim_varies(shape):
  """Whether a per-iteration static shape leaves only its first dimension unknown: the
  outputs the fallback returns ragged."""
  return (shape.rank is not None and shape.rank >= 1 and shape[0] is None and
          shape[1:].is_fully_defined())


def row(rows, i, splits=None):
  """Iteration i's value (for the sequential fallback)."""
  splits = rows.row_splits if splits is None else splits
  flat = rows.values[splits[i]:splits[i + 1]]
  if rows.dims is None:
    return flat
  return tf.reshape(flat, tf.concat([rows.dims[i], tf.shape(flat)[1:]], 0))


def agreed(per_iteration, message, when_none=0, static_shapes=False):
  """The `s`-shaped value that every iteration's row of `per_iteration` (`[n] + s`) holds,
  checked at run time (`message` if not), or `when_none` where there is no iteration: sizes
  of later axes, which a ragged value's iterations share.

  With `static_shapes` (XLA, which drops run-time checks and wants sizes it can fold) the
  check is a reshape that compiles only where the rows agree, and a `ConversionError`
  (`message`) now where the trace already folds them apart."""
  none = tf.broadcast_to(tf.cast(when_none, per_iteration.dtype), tf.shape(per_iteration)[1:])
  common = tf.concat([per_iteration, none[None]], 0)[0]
  if static_shapes:
    spread = tf.cast(tf.reduce_sum(tf.abs(per_iteration - common)), tf.int32)
    try:
      guard = tf.size(tf.reshape(tf.zeros([0]), tf.reshape(spread, [1]),
                                 name="check_every_iteration_has_one_size"))
    except ValueError:
      raise Unvectorizable(message) from None
    return common + tf.cast(guard, common.dtype)
  check = tf.debugging.Assert(tf.reduce_all(tf.equal(per_iteration, common)),
                              [f"{message}. Per iteration:", per_iteration], summarize=20)
  with tf.control_dependencies([check]):
    return tf.identity(common)


def settle(value, static_shape, ctx):
  """A converter's ragged result as the walker keeps it: a stacked tensor when the traced
  graph knows the per-iteration shape fully (row lengths checked at run time), else ragged
  with the static shape of `rest` set."""
  rows = value.tensor
  k = 1 if rows.dims is None else rows.dims.shape[1]
  if not static_shape.is_fully_defined():
    if static_shape.rank is not None:
      rows.values.set_shape(tf.TensorShape([None]).concatenate(static_shape[k:]))
    return value
  sizes = rows.row_lengths if rows.dims is None else rows.dims
  if static_shape.rank == 0:      # a scalar per iteration (a reshape to []): one element each
    expected = 1
  else:
    expected = static_shape[:k].as_list() if k > 1 else static_shape[0]
  check = tf.debugging.Assert(
      tf.reduce_all(tf.equal(sizes, expected)),
      [f"vectorize: a value of per-iteration shape {static_shape} has other sizes in some "
       "iterations:", sizes], summarize=20)
  n = ctx.static_n if ctx.static_n is not None else ctx.n
  with tf.control_dependencies([check]):
    shape = tf.concat([tf.reshape(tf.cast(n, tf.int32), [1]),
                       tf.constant(static_shape.as_list(), tf.int32)], 0)
    return Value(tf.reshape(rows.values, shape), True)


def stack_ragged_outputs(flat_values, row_splits):
  """The stack of per-iteration RaggedTensors from their stacked components: the flat
  values (ragged or stacked) and each level's row splits (ragged or stacked). Iteration i's
  rows become row i's, so the result has one more ragged dimension (as `tf.ragged.stack`
  gives)."""
  if isinstance(flat_values, tf.RaggedTensor):
    flat = flat_values.values
  else:
    flat = tf.reshape(flat_values, tf.concat([[-1], tf.shape(flat_values)[2:]], 0))
  nested = []
  for splits in row_splits:
    if not isinstance(splits, tf.RaggedTensor):
      splits = tf.RaggedTensor.from_tensor(splits)
    lengths = tf.cast(splits[:, 1:] - splits[:, :-1], tf.int64)   # per iteration, per row
    if not nested:
      nested.append(lengths.row_lengths())
    nested.append(lengths.values)
  return tf.RaggedTensor.from_nested_row_lengths(flat, nested, validate=False)


def refuse_in_chunks(value):
  """`parallel_iterations` stitches chunks of stacked outputs; a ragged one is refused."""
  if is_ragged(value):
    raise ConversionError(
        "An output of the loop body has a different size in every iteration (it would be a "
        "RaggedTensor); parallel_iterations cannot chunk such an output yet. To fix: drop "
        "parallel_iterations, or give the output a fixed size in the body.")


def from_ragged_tensor(rt):
  """The RaggedRows of a `tf.RaggedTensor` of ragged rank 1 (row i: iteration i)."""
  if rt.ragged_rank != 1:
    raise ValueError(f"vectorize takes RaggedTensors of ragged rank 1 as elems; got ragged "
                     f"rank {rt.ragged_rank}. To fix: pass rt.merge_dims or a dense tensor.")
  return RaggedRows(rt.values, tf.cast(rt.row_lengths(), tf.int32))


def common_rows(op):
  """The RaggedRows of op's ragged inputs, which must agree (checked at run time when they
  are not the same tensors), and the checks to depend on."""
  rows = [v.tensor for v in op.inputs if is_ragged(v)]
  if any((r.dims is None) != (rows[0].dims is None) or
         (r.dims is not None and r.dims.shape[1] != rows[0].dims.shape[1]) for r in rows):
    raise Unvectorizable("operands that differ per iteration in different axes")
  if any(values.rank(r.values) != values.rank(rows[0].values) for r in rows):
    raise Unvectorizable("ragged operands of different ranks")
  sizes = lambda r: r.row_lengths if r.dims is None else r.dims
  checks = [tf.debugging.Assert(
      tf.reduce_all(tf.equal(sizes(r), sizes(rows[0]))),
      [f"vectorize: {op.op.name}: operands of different sizes in the same iteration"])
            for r in rows[1:] if sizes(r) is not sizes(rows[0])]
  return rows[0], checks


def index_check(op, index, limit):
  """An assertion that every gather index of op lies in [0, limit)."""
  return tf.debugging.Assert(
      tf.reduce_all(tf.logical_and(index >= 0, index < limit)),
      [f"vectorize: {op.op.name}: a gather index out of range in some iteration"])


# ----------------------------------------------------------------------------- converters

def register(*op_types):
  """Decorator registering the converter of op types for inputs of which one is ragged.

  It has the registry's signature (`OpInput` -> Value or list of Values) and may return
  ragged Values (`ragged`, `same_rows`).
  """
  return registry.register(*op_types, kind=registry.RAGGED)


def register_multi_axis(*op_types, accepts=lambda op: True):
  """Decorator registering the converter of op types for inputs that differ in several
  axes (`is_multi_axis`); `accepts(op)` says, before conversion, whether it takes this op
  (its attributes, constant inputs), so that producers choose the form by their uses."""
  return registry.register(*op_types, kind=registry.MULTI_AXIS, accepts=accepts)


def register_multi_axis_producer(*op_types):
  """Decorator registering a converter giving values that differ in several axes, used
  instead of the op's own converter where every use of its output takes them."""
  return registry.register(*op_types, kind=registry.MULTI_AXIS_PRODUCER)


def uses_take(tensor, kind):
  """Whether every use of `tensor` has a converter for inputs of `kind` (`registry.RAGGED`,
  `registry.MULTI_AXIS`) that accepts it, and so on down through the uses whose outputs the
  graph does not know whole (a value the graph knows again is stacked again), none of them
  an output of the body: a producer may then make that form, and the body's outputs stay
  as the loop stacks them (dense wherever the iterations agree)."""
  uses = tensor.consumers()
  if not uses or any(tensor is t for t in getattr(tensor.graph, "outputs", ())):
    return False
  for use in uses:
    if registry.converter_of(use, kind) is None:
      return False
    if not all(t.shape.is_fully_defined() or uses_take(t, kind) for t in use.outputs):
      return False
  return True


def multi_axis_producer(op, target):
  """The multi-axis producer of op where its output differs in several axes and every use
  takes that (shapes dynamic: `target`); else None."""
  producer = registry.lookup(op.type, registry.MULTI_AXIS_PRODUCER)
  if producer is None or target.static_shapes or len(op.outputs) != 1:
    return None
  shape = op.outputs[0].shape
  if shape.rank is None or sum(d is None for d in shape.as_list()) < 2:
    return None
  return producer if uses_take(op.outputs[0], registry.MULTI_AXIS) else None
