"""Value kinds: what the tensor of a converted `Value` is, one class each.

A Value's tensor is one of:
- `TENSOR`: a `tf.Tensor`, with the loop axis first where stacked, at its own shape where
  invariant;
- `LIST`: a TensorList per iteration: a `lists.DenseList` (a buffer and one length per
  iteration) or a `lists.UniformList` (one real list of stacked elements, written in place);
- `RAGGED`: values whose first axis differs per iteration, a `ragged.RaggedRows`;
- `MULTI_AXIS`: values that differ in several leading axes, a `RaggedRows` with `dims`;
- `VIEW`: a loop's view of a ragged value's iterations, a `RaggedRows` with `starts` (rows
  read where they lie; materialized before any op but `ragged.VIEW_READERS`).

Each kind names the registry table that converts an op with such an input (`table`; an
op's inputs of several kinds go to the most specific one's: `dispatch_kind`), states its
invariants (`problems`) and packs a body output to the user's type (`pack`: a tensor, or a
`tf.RaggedTensor` equal to `tf.ragged.stack` of the loop's).
"""

import tensorflow as tf

from vectorize import lists
from vectorize import ragged
from vectorize import registry
from vectorize import values


class ValueKind:
  """One kind of Value tensor (see the module docstring)."""
  name = ""
  table = registry.TENSOR
  precedence = 0     # among an op's inputs, the kind of highest precedence picks the table

  def holds(self, tensor):
    raise NotImplementedError

  def problems(self, value):
    """What about `value` breaks this kind's invariants (static facts only), or []."""
    del value
    return []

  def pack(self, value, n):
    """`value` as a body output: the user's type, with a loop axis of n."""
    return values.stack(value, n)

  def __repr__(self):
    return f"<kind {self.name}>"


class _Tensor(ValueKind):
  name = "tensor"

  def holds(self, tensor):
    return isinstance(tensor, tf.Tensor)

  def problems(self, value):
    rank = value.tensor.shape.rank
    return ["a stacked tensor has no loop axis (rank 0)"] if value.stacked and rank == 0 \
        else []


class _List(ValueKind):
  name = "list"

  def holds(self, tensor):
    return isinstance(tensor, (lists.DenseList, lists.UniformList))

  def problems(self, value):
    t = value.tensor
    if isinstance(t, lists.UniformList):
      return [] if t.handle.dtype == tf.variant else ["a UniformList handle is not a variant"]
    out = []
    if t.buffer.shape.rank is not None and t.buffer.shape.rank < 2:
      out.append("a DenseList buffer is not [n, capacity] + element shape")
    if t.lengths.dtype != tf.int32 or t.lengths.shape.rank not in (None, 1):
      out.append("a DenseList's lengths are not [n] int32")
    return out


class _Ragged(ValueKind):
  """Also the base of the two other RaggedRows kinds."""
  name = "ragged"
  table = registry.RAGGED
  precedence = 1

  def holds(self, tensor):
    return (isinstance(tensor, ragged.RaggedRows) and tensor.dims is None and
            tensor.starts is None)

  def problems(self, value):
    rows, out = value.tensor, []
    if not value.stacked:
      out.append("a ragged value is not stacked")
    if rows.row_lengths.dtype != tf.int32 or rows.row_lengths.shape.rank not in (None, 1):
      out.append("row lengths are not [n] int32")
    if rows.values.shape.rank == 0:
      out.append("flat values have no rows axis (rank 0)")
    return out

  def pack(self, value, n):
    """A `tf.RaggedTensor` (int64 row splits, as `tf.ragged.stack` gives)."""
    del n
    rows = value.tensor
    return tf.RaggedTensor.from_row_lengths(rows.values, tf.cast(rows.row_lengths, tf.int64),
                                            validate=False)


class _MultiAxis(_Ragged):
  name = "multi-axis"
  table = registry.MULTI_AXIS
  precedence = 2

  def holds(self, tensor):
    return isinstance(tensor, ragged.RaggedRows) and tensor.dims is not None

  def problems(self, value):
    dims = value.tensor.dims
    out = super().problems(value)
    if dims.shape.rank != 2 or (dims.shape[1] is not None and dims.shape[1] < 2):
      out.append("dims are not [n, k] with k >= 2 (one axis is ragged, none stacked)")
    return out

  def pack(self, value, n):
    """A `tf.RaggedTensor` with one ragged dimension per axis of per-iteration size, every
    row of an axis as long as its iteration's next size."""
    del n
    rows = value.tensor
    dims = tf.cast(rows.dims, tf.int64)
    lengths, counts = [dims[:, 0]], dims[:, 0]
    for k in range(1, dims.shape[1]):
      lengths.append(tf.repeat(dims[:, k], counts))
      counts *= dims[:, k]
    return tf.RaggedTensor.from_nested_row_lengths(rows.values, lengths, validate=False)


class _View(_Ragged):
  name = "view"

  def holds(self, tensor):
    return (isinstance(tensor, ragged.RaggedRows) and tensor.dims is None and
            tensor.starts is not None)

  def problems(self, value):
    starts = value.tensor.starts
    out = super().problems(value)
    if starts.dtype != tf.int32 or starts.shape.rank not in (None, 1):
      out.append("a view's starts are not [n] int32")
    return out

  def pack(self, value, n):
    return super().pack(ragged.materialized(value), n)


TENSOR, LIST, RAGGED, MULTI_AXIS, VIEW = _Tensor(), _List(), _Ragged(), _MultiAxis(), _View()
KINDS = (TENSOR, LIST, RAGGED, MULTI_AXIS, VIEW)


def of(value):
  """The kind of `value` (a `Value`); a tensor-like that is no other kind is a tensor."""
  for kind in (LIST, RAGGED, MULTI_AXIS, VIEW):
    if kind.holds(value.tensor):
      return kind
  return TENSOR


def dispatch_kind(inputs):
  """The registry table (`registry.TENSOR`, `RAGGED`, `MULTI_AXIS`) of an op with these
  input Values: that of its most specific input kind."""
  return max((of(v) for v in inputs), key=lambda k: k.precedence, default=TENSOR).table
