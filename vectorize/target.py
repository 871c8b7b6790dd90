"""The execution target: where one conversion runs, decided once and carried by its Context.

Three questions used to be asked three ways (global options, the active set, the context);
they are answered here, once per conversion, by the engine (`Target.for_this_graph`):
- **shapes**: must every emitted shape be static (the graph is compiled by XLA, or the
  caller asked with `vectorize.static_shapes()`), or may sizes be computed at run time;
- **compiler**: is the graph compiled by XLA (some kernels exist only outside it; some
  fused forms pay only outside it);
- **strategy**: how this context's iterations run, its active set
  (`control_flow/active_set.py`): every lane, a gathered subset (`Partitioned`), or every
  lane under a mask (`Masked`).

A region that only some iterations run (a branch, a loop's live set) gets its context's
target with a narrower active set (`inside`); shapes and compiler never change within one
conversion. Converters and constructs read `op.ctx.target` (`tests/vectorize/
test_layering.py` keeps them off the global options).
"""

import dataclasses

from vectorize import options
from vectorize.active_set import ActiveSet, Masked, Partitioned
from vectorize.errors import ConversionError, user_location


@dataclasses.dataclass(frozen=True)
class Target:
  """Where a conversion runs.

  Attributes:
    static_shapes: every emitted shape must be static (XLA, or `vectorize.static_shapes()`).
    xla: the graph being built is compiled by XLA.
    cause: (where static shapes were asked for, the way out), for a refusal's message.
    active_set: how this context's iterations run.
  """
  static_shapes: bool = False
  xla: bool = False
  cause: tuple = ("", "")
  active_set: ActiveSet = dataclasses.field(default_factory=Partitioned)

  @classmethod
  def for_this_graph(cls, indices_are_range=False):
    """The target of a conversion emitted into the current graph: static shapes under XLA
    or where asked for; masked control flow there and inside a loop body being traced (a
    pfor nested in another's body), else partitioned."""
    static = options.static_shapes_wanted()
    strategy = (Masked(indices_are_range=indices_are_range)
                if options.masked_control_flow_wanted()
                else Partitioned(indices_are_range=indices_are_range))
    return cls(static_shapes=static, xla=options.compiled_by_xla(),
               cause=options.static_shapes_cause(),
               active_set=strategy)

  @property
  def masked(self):
    """Whether dead lanes compute too (their results selected away)."""
    return self.active_set.dead_lanes_compute

  @property
  def subset(self):
    """Whether only some iterations run here (inside a branch, or a loop's live set)."""
    return self.active_set.is_subset

  @property
  def grows_lists_in_place(self):
    """Whether TensorLists may be written in place here (`lists.uniform_here`): every
    iteration runs every step together, and sizes may be dynamic."""
    return not self.static_shapes and not self.subset

  def inside(self, live=None):
    """The target of a region that only some iterations run (`ActiveSet.inside`)."""
    return dataclasses.replace(self, active_set=self.active_set.inside(live))

  def running(self, active_set):
    """This target with its iterations run by `active_set` (a loop carrying lists runs
    masked inside a partitioned context)."""
    return dataclasses.replace(self, active_set=active_set)

  def running_masked(self):
    """This target with its iterations run under masks, the active set's facts kept (a
    loop carrying per-iteration TensorLists, which grow at each lane's own pace, runs
    masked inside a partitioned context, its body told so)."""
    current = self.active_set
    fields = {f.name: getattr(current, f.name) for f in dataclasses.fields(current)}
    return dataclasses.replace(self, active_set=Masked(**fields))

  def require_dynamic_shapes(self, op, what, fix="give the value a fixed size in the body "
                             "(pad or slice it to a bound)"):
    """Raises ConversionError where shapes must be static: `what` (of the body's op `op`)
    has per-iteration sizes, which have no static shape."""
    if self.static_shapes:
      where, way_out = self.cause
      raise ConversionError(
          f"Cannot vectorize op {op.name!r} of type {op.type}{user_location(op)} "
          f"{where}: {what} has a different size in every iteration, and XLA needs static "
          f"shapes. To fix: {fix}, or {way_out}.")
