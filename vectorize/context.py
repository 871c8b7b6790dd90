"""Context: what the walker knows about the loop it is vectorizing.

One context per converted graph: the loop length n, the loop index of each lane
(`indices`, all of `range(n)` unless a conditional or loop runs a subset), its execution
target (static shapes or not, XLA or not, the active set's strategy: `target.py`) and the
conversion policy. The `Report`, shared by
every context of one conversion, records how each op was converted (for `explain()` and for
tests that count fallbacks).
"""

import collections
import dataclasses
from typing import Optional

import tensorflow as tf

from vectorize.errors import user_location
from vectorize.target import Target


@dataclasses.dataclass
class OpRecord:
  """How one op was converted: kind is 'vectorized', 'invariant' or 'fallback'; for a
  fallback, the user's line that created the op (' created at file:line', or '')."""
  op_name: str
  op_type: str
  kind: str
  reason: str = ""
  location: str = ""


class Report:
  """The conversion log of one pfor call, shared by nested contexts."""

  def __init__(self, warn=True):
    self.records = []
    self.warn = warn             # log the first fallback of each op type
    self.warned_types = set()

  def add(self, op, kind, reason=""):
    location = user_location(op) if kind == "fallback" else ""
    self.records.append(OpRecord(op.name, op.type, kind, reason, location))

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
    n: scalar int32 tensor, the number of lanes (iterations) of this context.
    indices: int32 `[n]` tensor, the loop index of each lane.
    static_n: n as a Python int when known at trace time, else None.
    fallback_allowed: whether unconvertible ops may run in a sequential loop.
    report: the shared conversion log.
    reductions: {placeholder op name: PForConfig reduction} for `pfor_config.reduce`.
    target: where this context's conversion runs (`target.py`): static shapes or not, XLA
      or not, and its active set, whose class is the strategy of the conditionals and
      loops converted here, Partitioned (dynamic shapes) or Masked (XLA, nested pfors).
    variable_starts: {(body read op, output graph): tensor}, the state of a variable the
      body updates as its first read saw it, before the converted updates ran
      (converters/recurrences.py); shared by nested contexts.
    variables_being_solved: the variables whose sequential reads are being solved now
      (converters/recurrences.py), so that updates that read each other (a swap) are
      refused rather than solved in a circle.
  """
  n: tf.Tensor
  indices: tf.Tensor
  static_n: Optional[int] = None
  fallback_allowed: bool = True
  report: Report = dataclasses.field(default_factory=Report)
  reductions: dict = dataclasses.field(default_factory=dict)
  target: Target = dataclasses.field(default_factory=Target)
  variable_starts: dict = dataclasses.field(default_factory=dict)
  variables_being_solved: set = dataclasses.field(default_factory=set)

  @property
  def live_lanes(self):
    """`[n]` bool, the lanes whose effects count where dead lanes run too, else None.

    Converters with effects (variable updates, prints, assertions) read this, not the
    strategy: a masked loop can run inside a partitioned context."""
    return self.target.active_set.live

  def is_loop_index(self, value):
    """Whether `value` is this loop's index and that index is `range(n)`."""
    return (self.target.active_set.indices_are_range and value.stacked and
            value.tensor is self.indices)
