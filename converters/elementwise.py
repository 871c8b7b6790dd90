"""Elementwise ops: unary and binary math, comparisons, logical and bitwise ops, casts, select.

The trick: per-iteration shapes broadcast from the right, so a stacked input whose
per-iteration rank is lower than the others' gets unit dims just after its loop axis; then
the op itself broadcasts stacked against stacked and stacked against invariant.
"""

from vectorize.family import register_elementwise

register_elementwise(
    "Abs",
    "AddV2",
    "Mul",
    "Sub",
)
