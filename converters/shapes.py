"""Shape ops: identity, reshape, transpose, expand/squeeze, concat, pack, pad, tile, ...

The trick: the loop axis is axis 0 of every stacked tensor, so a per-iteration axis `a`
becomes `a + 1` (negative axes stay), and a per-iteration shape `s` becomes `[n] + s`.
"""

from vectorize.registry import register
from vectorize.values import Value


@register("Identity", "StopGradient", "Snapshot", "PreventGradient")
def _convert_identity(op):
  """Passes the value through, stacked or not (kept as an op so gradients stop where asked)."""
  v = op.value(0)
  return Value(op.rebuild([v.tensor])[0], v.stacked)


@register("IdentityN")
def _convert_identity_n(op):
  outs = op.rebuild([v.tensor for v in op.inputs])
  return [Value(t, v.stacked) for t, v in zip(outs, op.inputs)]
