"""Context: what the walker knows about the loop it is vectorizing.

One context per converted graph: the loop length n, the ids of the active iterations
(`indices`, all of `range(n)` unless a conditional partitioned them), and the conversion
policy. The `Report`, shared by every context of one conversion, records how each op was
converted (for `explain()` and for tests that count fallbacks).
"""

import collections
import dataclasses
from typing import Optional

import tensorflow as tf


@dataclasses.dataclass
class OpRecord:
  """How one op was converted: kind is 'vectorized', 'invariant' or 'fallback'."""
  op_name: str
  op_type: str
  kind: str
  reason: str = ""


class Report:
  """The conversion log of one pfor call, shared by nested contexts."""

  def __init__(self, warn=True):
    self.records = []
    self.warn = warn             # log the first fallback of each op type
    self.warned_types = set()

  def add(self, op, kind, reason=""):
    self.records.append(OpRecord(op.name, op.type, kind, reason))

  @property
  def num_fallbacks(self):
    return sum(r.kind == "fallback" for r in self.records)

  def counts(self):
    """{op_type: Counter(kind -> count)}."""
    out = collections.defaultdict(collections.Counter)
    for r in self.records:
      out[r.op_type][r.kind] += 1
    return dict(out)


@dataclasses.dataclass
class Context:
  """The loop being vectorized.

  Attributes:
    n: scalar int32 tensor, the number of active iterations.
    indices: int32 `[n]` tensor, the ids of the active iterations.
    static_n: n as a Python int when known at trace time, else None.
    partitioned: True inside a branch that only some iterations take.
    fallback_allowed: whether unconvertible ops may run in a sequential loop.
    report: the shared conversion log.
    reductions: {placeholder op name: PForConfig reduction} for `pfor_config.reduce`.
    static_shapes: convert control flow with static shapes (masks instead of gathers), as
      XLA needs.
    indices_are_range: `indices` is exactly `range(n)` (the whole loop, not a chunk or a
      subset), so a gather at the loop index of a tensor with n rows is that tensor.
  """
  n: tf.Tensor
  indices: tf.Tensor
  static_n: Optional[int] = None
  partitioned: bool = False
  fallback_allowed: bool = True
  report: Report = dataclasses.field(default_factory=Report)
  reductions: dict = dataclasses.field(default_factory=dict)
  static_shapes: bool = False
  indices_are_range: bool = False

  def is_loop_index(self, value):
    """Whether `value` is this loop's index and that index is `range(n)`."""
    return self.indices_are_range and value.stacked and value.tensor is self.indices

  def subset(self, indices, static_n=None):
    """The context of a branch taken by the iterations `indices` (positions in ours)."""
    return dataclasses.replace(
        self, n=tf.size(indices, out_type=tf.int32), indices=tf.gather(self.indices, indices),
        static_n=static_n, partitioned=True, indices_are_range=False)
