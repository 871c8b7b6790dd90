"""straight_line.StraightLine: how a block body runs for one example (VM and interpreter)."""

import tensorflow as tf

from vectorize.pc import ir
from vectorize.pc.straight_line import StraightLine

_INT = ir.VarType(tf.int32, ())


def test_a_move_is_a_parallel_copy():
  """`a, b, c <- b, c, a` (a rotation, as argument passing makes it): `c` takes the old
  `a`. A copy one pair at a time gave it the `b` just moved into `a`."""
  names = ("f.a", "f.b", "f.c")
  move = ir.Move(names, ("f.b", "f.c", "f.a"))
  code = StraightLine((move,), names, None, {"f": {}}, {v: _INT for v in names}, "test")
  values = {"f.a": 1, "f.b": 2, "f.c": 3}
  got = code.run(*[tf.constant(values[v]) for v in code.reads])
  assert [int(x) for x in got] == [2, 3, 1]
