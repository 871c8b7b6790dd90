"""explain(): how pfor would convert a body, op by op, without running anything.

The trick: pfor already logs every op it converts in a `Report` (context.py), including the
ops of called functions, branches and loop bodies, which share their caller's report, while
the dry runs that decide stackedness (`walker.output_flags`, `walker.dry_run`) log into a
scratch report that is thrown away. So `explain` only traces pfor inside a `tf.function`
(`get_concrete_function`: the graph is built, never run), takes the report of that
conversion, and summarizes it per op type, with the reason of each fallback.
"""

import collections
import dataclasses
from typing import Dict, List, Optional, Tuple

import tensorflow as tf

from vectorize import api
from vectorize import registry
from vectorize.context import OpRecord
from vectorize.errors import ConversionError

KINDS = ("vectorized", "invariant", "fallback")
NO_CONVERTER = "no converter is registered"
DECLINED = "converter declined"


@dataclasses.dataclass(frozen=True)
class Fallback:
  """One op that falls back to the sequential loop.

  Attributes:
    op_name: the op's name in its traced graph (the body, or a function it calls).
    op_type: e.g. "PyFunc".
    cause: `NO_CONVERTER`, or `DECLINED` when a converter exists but refused this instance.
    reason: the converter's reason (for `DECLINED`, it names the input that stopped it).
    location: ' created at file:line', the user's line that created the op ('' if unknown).
  """
  op_name: str
  op_type: str
  cause: str
  reason: str
  location: str = ""

  def __str__(self):
    detail = self.cause if self.cause == NO_CONVERTER else f"{self.cause}: {self.reason}"
    return f"{self.op_name} ({self.op_type}){self.location}: {detail}"


@dataclasses.dataclass
class Explanation:
  """What `explain` found; `str()` gives a table.

  Attributes:
    records: every op conversion, in conversion order (`context.OpRecord`s).
    counts: {op type: {kind: count}} for kind in `KINDS`, every kind present (maybe 0).
    fallbacks: the ops that fall back, with cause and reason.
    error: the `ConversionError` message when the conversion stopped (fallback off), else
      None; records, counts and fallbacks then cover the ops converted before it.
  """
  records: Tuple[OpRecord, ...]
  counts: Dict[str, Dict[str, int]]
  fallbacks: List[Fallback]
  error: Optional[str] = None

  @property
  def num_vectorized(self):
    return sum(c["vectorized"] for c in self.counts.values())

  @property
  def num_invariant(self):
    return sum(c["invariant"] for c in self.counts.values())

  @property
  def num_fallbacks(self):
    return len(self.fallbacks)

  def __str__(self):
    lines = [f"vectorize.explain: {len(self.records)} ops: {self.num_vectorized} vectorized, "
             f"{self.num_invariant} invariant, {self.num_fallbacks} fallback"]
    width = max([len("op type")] + [len(t) for t in self.counts])
    lines.append(f"  {'op type':<{width}}  " + "  ".join(f"{k:>10}" for k in KINDS))
    for op_type in sorted(self.counts):
      c = self.counts[op_type]
      lines.append(f"  {op_type:<{width}}  " + "  ".join(f"{c[k]:>10}" for k in KINDS))
    if self.fallbacks:
      lines.append("fallbacks (each runs in a sequential loop):")
      lines.extend(f"  {f}" for f in self.fallbacks)
    if self.error is not None:
      lines.append(f"conversion stopped: {self.error}")
    return "\n".join(lines)


def explain(loop_fn, iters, fallback_to_while_loop=True):
  """Traces `pfor(loop_fn, iters)` and tells, per op type, how its ops were converted.

  Nothing runs: the vectorized graph is built in a `tf.function` and never executed. Ops of
  functions, conditionals and loops inside the body are included; the dry runs that decide
  their stackedness are not.

  Args:
    loop_fn: as for `pfor`.
    iters: as for `pfor` (the conversion can differ for a static and a run-time n).
    fallback_to_while_loop: as for `pfor`; when False, the first op that cannot be
      vectorized stops the conversion, and the explanation says which (`error`).

  Returns:
    An `Explanation`; `print(explanation)` shows the table.

  Raises:
    Whatever tracing the body raises (a bug in loop_fn, a bad `iters`), and a
    `ConversionError` raised before any op was converted.

  Example:
    >>> x = tf.random.normal([4, 6])
    >>> print(vectorize.explain(lambda i: tf.numpy_function(np.sort, [x[i]], tf.float32), 4))
    vectorize.explain: 9 ops: 5 vectorized, 3 invariant, 1 fallback
      op type       vectorized   invariant    fallback
      ...
      PyFunc                 0           0           1
      StridedSlice           1           0           0
    fallbacks (each runs in a sequential loop):
      PyFunc (PyFunc) created at <your file>:<line>: no converter is registered

  Limits: an op converted twice (the condition of a while loop converted with static
  shapes, once before the loop and once in it) counts twice. Ops vectorized on purpose by a
  loop (stateless random ops with per-iteration seeds) count as vectorized, not fallback.
  """
  previous = api.last_report()
  error = None
  try:
    tf.function(lambda: api.pfor(loop_fn, iters, fallback_to_while_loop=fallback_to_while_loop),
                autograph=False).get_concrete_function()
  except ConversionError as e:
    if api.last_report() is previous:
      raise
    error = str(e)
  report = api.last_report()
  return _summarize(report.records, error)


def _summarize(records, error):
  counts = collections.defaultdict(lambda: dict.fromkeys(KINDS, 0))
  fallbacks = []
  for r in records:
    counts[r.op_type][r.kind] += 1
    if r.kind == "fallback":
      cause = NO_CONVERTER if registry.lookup(r.op_type) is None else DECLINED
      fallbacks.append(Fallback(r.op_name, r.op_type, cause, r.reason, r.location))
  return Explanation(tuple(records), dict(counts), fallbacks, error)
