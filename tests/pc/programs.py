"""Per-example recursive programs shared by the program-counter mode's tests.

Each `Case` holds a plain Python function written for ONE example (recursion by name, `if`,
loops, several returns), a generator of batched inputs, and the deepest recursion it needs.
The plain function itself, called per example on eager tensors, is the reference.
"""

from typing import Callable, NamedTuple, Tuple

import numpy as np
import tensorflow as tf

DATA = tf.constant([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0])
MATRIX = tf.constant([[0.9, 0.1, 0.0], [0.0, 0.8, 0.3], [0.2, 0.0, 0.7]])


def fib(n):
  if n < 2:
    return n
  return fib(n - 1) + fib(n - 2)


def is_even(n):
  if n == 0:
    return 1
  return is_odd(n - 1)


def is_odd(n):
  if n == 0:
    return 0
  return is_even(n - 1)


def mc91(n):
  """McCarthy's 91 function: nested recursion (a call's result is another call's argument)."""
  if n > 100:
    return n - 10
  return mc91(mc91(n + 11))


def deep_sum(x, n):
  """x * n by n non-tail calls: recursion as deep as n."""
  if n == 0:
    return 0.0 * x
  return x + deep_sum(x, n - 1)


def fib_sum(n):
  """A recursion inside a loop."""
  acc = 0
  for k in range(n):
    acc += fib(k)
  return acc


def triangle_rec(n):
  """A loop inside a recursion."""
  if n <= 0:
    return 0
  s = 0
  k = 0
  while k < n:
    s += k
    k += 1
  return s + triangle_rec(n - 1)


def first_square_at_least(n, target):
  """An early return inside a loop (and one after it)."""
  for k in range(n):
    if k * k >= target:
      return k
  return -1


def gcd(a, b):
  """Tail recursion that passes its parameters back in another order."""
  if b == 0:
    return a
  return gcd(b, a % b)


def divmod_rec(a, b):
  """Tuples in and out of a recursion."""
  if a < b:
    return 0, a
  q, r = divmod_rec(a - b, b)
  return q + 1, r


def square(x):
  return x * x


def power(x, n):
  """A float recursion through a non-recursive helper: x ** n."""
  if n == 0:
    return tf.ones_like(x)
  if n % 2 == 0:
    return square(power(x, n // 2))
  return x * power(x, n - 1)


def vector_walk(v, n):
  """Vector state: n steps of a linear map, each normalized, then summed with its children."""
  if n == 0:
    return v
  w = tf.linalg.matvec(MATRIX, v)
  w = w / (1.0 + tf.reduce_sum(w * w))
  return w + 0.5 * vector_walk(w, n - 1)


def count_below(i, limit):
  """A guarded per-example index: DATA[i] is read only while i is in range."""
  if i >= 10:
    return 0
  if DATA[i] >= limit:
    return 0
  return 1 + count_below(i + 1, limit)


def twice(n):
  """Two calls with the same argument: the saved n is popped and pushed back (a peek)."""
  if n < 1:
    return 0
  a = twice(n - 1)
  b = twice(n - 1)
  return a + b + n


def guarded_log(x):
  """log(x) only where x > 0: members at the other branch must not leak NaN into gradients."""
  if x > 0.0:
    return tf.math.log(x)
  return 0.0 * x


def suffix_sum(v, i):
  """A per-example vector read at a per-example index, guarded by the recursion's test."""
  if i >= 5:
    return 0.0 * v[0]
  return v[i] + suffix_sum(v, i + 1)


def collatz_steps(n):
  """`and` / `not` on tensors in a while condition and an if."""
  steps = 0
  while n != 1 and steps < 200:
    if not n % 2 == 0:
      n = 3 * n + 1
    else:
      n = n // 2
    steps += 1
  return steps


def rotate(a, b, c, n):
  """Tail calls that pass the parameters on rotated: argument passing is a parallel copy
  (`c` takes the old `a`, not the `b` that `a` has just been given)."""
  if n == 0:
    return a * 100 + b * 10 + c
  return rotate(b, c, a, n - 1)


def simpson(f_a, f_m, f_b, a, b, eps, whole, depth):
  """Adaptive Simpson quadrature of sin(x * x) on [a, b]: (integral, splits). The first
  recursive call shifts `f_m` into the `f_b` slot while `f_lm` takes `f_m`'s."""
  m = (a + b) / 2
  lm = (a + m) / 2
  rm = (m + b) / 2
  f_lm = tf.sin(lm * lm)
  f_rm = tf.sin(rm * rm)
  left = (m - a) / 6 * (f_a + 4 * f_lm + f_m)
  right = (b - m) / 6 * (f_m + 4 * f_rm + f_b)
  delta = left + right - whole
  if depth <= 0 or abs(delta) <= 15 * eps:
    return left + right + delta / 15, 0
  l, left_splits = simpson(f_a, f_lm, f_m, a, m, eps / 2, left, depth - 1)
  r, right_splits = simpson(f_m, f_rm, f_b, m, b, eps / 2, right, depth - 1)
  return l + r, left_splits + right_splits + 1


def integrate(a, b, eps):
  """The entry of `simpson`: the endpoints' and midpoint's values, the first estimate."""
  f_a = tf.sin(a * a)
  f_b = tf.sin(b * b)
  m = (a + b) / 2
  f_m = tf.sin(m * m)
  whole = (b - a) / 6 * (f_a + 4 * f_m + f_b)
  value, splits = simpson(f_a, f_m, f_b, a, b, eps, whole, 12)
  return value, splits


def simpson_splits(f_a, f_m, f_b, a, b, eps, whole, depth):
  """`simpson` returning only its count of splits (one result, the same wrong answers)."""
  m = (a + b) / 2
  lm = (a + m) / 2
  rm = (m + b) / 2
  f_lm = tf.sin(lm * lm)
  f_rm = tf.sin(rm * rm)
  left = (m - a) / 6 * (f_a + 4 * f_lm + f_m)
  right = (b - m) / 6 * (f_m + 4 * f_rm + f_b)
  if depth <= 0 or abs(left + right - whole) <= 15 * eps:
    return 0
  return (simpson_splits(f_a, f_lm, f_m, a, m, eps / 2, left, depth - 1) +
          simpson_splits(f_m, f_rm, f_b, m, b, eps / 2, right, depth - 1) + 1)


def count_splits(a, b, eps):
  f_a = tf.sin(a * a)
  f_b = tf.sin(b * b)
  m = (a + b) / 2
  f_m = tf.sin(m * m)
  whole = (b - a) / 6 * (f_a + 4 * f_m + f_b)
  return simpson_splits(f_a, f_m, f_b, a, b, eps, whole, 12)


def bisect_walk(lo, hi, depth, key):
  """Halves an interval `depth` times, the half picked by `key`'s bits: each branch of the
  `if` calls the walk on its own half and assigns its own results (the shape of NUTS's
  tree doubling, which call merging makes one call site)."""
  if depth == 0:
    return lo * 0.5 + 0.25, hi * 0.75 - 0.5, 1
  mid = 0.5 * (lo + hi)
  if key % 2 == 0:
    lo, mid, n = bisect_walk(lo, mid, depth - 1, key // 2)
  else:
    mid, hi, n = bisect_walk(mid, hi, depth - 1, key // 2)
  return lo + mid, hi - mid, n + 1


def bisect_walks(lo, hi, key):
  lo, hi, n = bisect_walk(lo, hi, 3, key)
  return lo + 2.0 * hi + tf.cast(n, tf.float32)


def one_sided_results(n, k):
  """One branch assigns a result (`a`) the other leaves unassigned, read by nothing after:
  merged into one call, its select would read `a` on a path that never assigned it, so
  the program compiles as written."""
  if n == 0:
    return 0
  b = n
  if k > 0:
    a = one_sided_results(n - 1, k)
  else:
    b = one_sided_results(n - 1, k)
  return b + 2


def signed_steps(x, n):
  """Calls in both branches that differ in a signed constant (`-1.0` and `1.0`)."""
  if n == 0:
    return x
  if x > 0.0:
    y = signed_steps(x + -1.0 * 0.25, n - 1)
  else:
    y = signed_steps(x + 1.0 * 0.25, n - 1)
  return 0.5 * y + x


def _subtree(x, d, key):
  if d == 0:
    return x * 0.5 + 0.1
  if key % 2 == 0:
    return _subtree(x * 0.9, d - 1, key // 2)
  return _subtree(x, d - 1, key // 3) + _subtree(x * 1.1, d - 1, key // 2)


def drifting_walk(x, seed):
  """Six recursions in a loop, each of its own depth and shape per member: the members
  drift apart, each at its own pass of the loop (a sampler's chain of transitions)."""
  i = 0
  while i < 6:
    x = _subtree(x, (seed + i * 3) % 5, seed * 13 + i) * 0.25
    i += 1
  return x


class Case(NamedTuple):
  name: str
  fn: Callable
  inputs: Callable     # (batch size, numpy Generator) -> tuple of numpy arrays
  depth: int           # a max_stack_depth that suffices
  grad: Tuple[int, ...] = ()   # positions of float inputs to differentiate


def _ints(low, high):
  return lambda n, rng: (rng.integers(low, high, size=[n]).astype(np.int32),)


def quadrature(a, b, eps):
  """`integrate` forwarding `simpson`'s pair with `return simpson(...)`, as Python allows."""
  f_a = tf.sin(a * a)
  f_b = tf.sin(b * b)
  m = (a + b) / 2
  f_m = tf.sin(m * m)
  whole = (b - a) / 6 * (f_a + 4 * f_m + f_b)
  return simpson(f_a, f_m, f_b, a, b, eps, whole, 12)


def digits(n, count, total):
  """(number of digits, digit sum) of n: a recursion forwarding its own call's pair."""
  if n < 10:
    return count + 1, total + n
  return digits(n // 10, count + 1, total + n % 10)


def digit_stats(n):
  """Returns `digits`' pair on, then a pair built from another forwarded call's values."""
  if n < 0:
    return digit_stats(-n)
  return digits(n, 0, 0)


def hanoi_moves(n):
  """The moves of a Tower of Hanoi of n disks: every return built from Python literals."""
  if n == 0:
    return 0
  return 2 * hanoi_moves(n - 1) + 1


def hanoi_total(n):
  """The moves for 0 .. n - 1 disks: a loop over range(n) whose count may be int64."""
  total = 0
  for k in range(n):
    total = total + hanoi_moves(k)
  return total


def count_digits(n):
  """The digits of n: `return 1` and `return 1 + count_digits(n // 10)`."""
  if n < 10:
    return 1
  return 1 + count_digits(n // 10)


def isqrt_ceil(n):
  """`while True:` left only by `return`: the function cannot fall off its end."""
  k = 0
  while True:
    if k * k >= n:
      return k
    k += 1


def first_power_at_least(n):
  """`while 1:` left by `break`: the code after the loop runs."""
  p = 1
  while 1:
    if p >= n:
      break
    p *= 2
  return p


def count_in_range(lo, hi):
  """How many of DATA's values v satisfy lo <= v < hi: a chained comparison whose middle
  operand reads a captured tensor."""
  count = 0
  for j in range(DATA.shape[0]):
    if lo <= DATA[j] < hi:
      count += 1
  return count


def abs_gcd(a, b):
  """gcd of |a| and |b|, the sign dropped by a conditional expression (a select)."""
  a = a if a >= 0 else -a
  if b == 0:
    return a
  return abs_gcd(b, a % b)


def soft_clip(x, n):
  """Conditional expressions on floats, one with a Python number on a side, under a
  recursion: a select has a gradient."""
  y = x * x if x < 1.0 else 2.0 * x - 1.0
  if n == 0:
    return y if y < 4.0 else 4.0
  return soft_clip(0.5 * y + 0.25, n - 1)


def _interval(n, rng):
  """Float64 intervals [a, b] of sin(x * x), which oscillates faster to the right, and a
  tolerance."""
  a = rng.uniform(0.0, 2.5, size=[n])
  return a, a + rng.uniform(0.5, 1.5, size=[n]), np.full([n], 1e-7)


CASES = [
    Case("fib", fib, _ints(0, 9), 10),
    Case("mutual", is_even, _ints(0, 12), 2),
    Case("mc91", mc91, _ints(80, 105), 24),
    Case("deep", deep_sum, lambda n, rng: (rng.normal(size=[n]).astype(np.float32),
                                           rng.integers(95, 110, size=[n]).astype(np.int32)),
         112, grad=(0,)),
    Case("fib_sum", fib_sum, _ints(0, 7), 8),
    Case("triangle", triangle_rec, _ints(0, 6), 8),
    Case("early_return", first_square_at_least, lambda n, rng: (
        rng.integers(0, 6, size=[n]).astype(np.int32),
        rng.integers(0, 30, size=[n]).astype(np.int32)), 2),
    Case("gcd", gcd, lambda n, rng: (rng.integers(1, 60, size=[n]).astype(np.int32),
                                     rng.integers(0, 60, size=[n]).astype(np.int32)), 2),
    Case("divmod", divmod_rec, lambda n, rng: (rng.integers(0, 30, size=[n]).astype(np.int32),
                                               rng.integers(1, 7, size=[n]).astype(np.int32)),
         32),
    Case("power", power, lambda n, rng: (rng.uniform(0.5, 1.5, size=[n]).astype(np.float32),
                                         rng.integers(0, 9, size=[n]).astype(np.int32)),
         10, grad=(0,)),
    Case("vector", vector_walk, lambda n, rng: (rng.normal(size=[n, 3]).astype(np.float32),
                                                rng.integers(0, 5, size=[n]).astype(np.int32)),
         6, grad=(0,)),
    Case("guarded_index", count_below, lambda n, rng: (
        rng.integers(0, 11, size=[n]).astype(np.int32),
        rng.uniform(0.0, 10.0, size=[n]).astype(np.float32)), 12),
    Case("twice", twice, _ints(0, 5), 6),
    Case("collatz", collatz_steps, _ints(1, 40), 1),
    Case("vector_index", suffix_sum, lambda n, rng: (
        rng.normal(size=[n, 5]).astype(np.float32),
        rng.integers(0, 7, size=[n]).astype(np.int32)), 7, grad=(0,)),
    Case("guarded_log", guarded_log, lambda n, rng: (
        rng.uniform(-1.0, 1.0, size=[n]).astype(np.float32),), 1, grad=(0,)),
    Case("rotate", rotate, lambda n, rng: tuple(
        rng.integers(0, 10, size=[n]).astype(np.int32) for _ in range(3)) + (
            rng.integers(0, 7, size=[n]).astype(np.int32),), 1),
    Case("simpson", integrate, _interval, 14),
    Case("simpson_splits", count_splits, _interval, 14),
    Case("forwarded_pair", quadrature, _interval, 14),
    Case("forwarded_recursion", digit_stats, _ints(-100000, 100000), 2),
    Case("hanoi_int64", hanoi_total, lambda n, rng: (
        rng.integers(30, 40, size=[n]).astype(np.int64),), 40),
    Case("digits_int64", count_digits, lambda n, rng: (
        rng.integers(0, 10**15, size=[n]).astype(np.int64),), 16),
    Case("while_true", isqrt_ceil, _ints(0, 50), 1),
    Case("while_true_break", first_power_at_least, _ints(0, 100), 1),
    Case("chained_comparison", count_in_range, lambda n, rng: (
        rng.integers(0, 6, size=[n]).astype(np.float32),
        rng.integers(1, 11, size=[n]).astype(np.float32)), 1),
    Case("conditional_expression", abs_gcd, lambda n, rng: (
        rng.integers(-60, 60, size=[n]).astype(np.int32),
        rng.integers(-60, 60, size=[n]).astype(np.int32)), 12),
    Case("branch_calls", bisect_walks, lambda n, rng: (
        rng.uniform(-1.0, 0.0, size=[n]).astype(np.float32),
        rng.uniform(0.0, 1.0, size=[n]).astype(np.float32),
        rng.integers(0, 8, size=[n]).astype(np.int32)), 4, grad=(0, 1)),
    Case("branch_calls_one_sided", one_sided_results, lambda n, rng: (
        rng.integers(0, 5, size=[n]).astype(np.int32),
        rng.integers(-2, 3, size=[n]).astype(np.int32)), 5),
    Case("branch_calls_other_expressions", signed_steps, lambda n, rng: (
        rng.uniform(-1.0, 1.0, size=[n]).astype(np.float32),
        rng.integers(0, 4, size=[n]).astype(np.int32)), 4, grad=(0,)),
    Case("drifting", drifting_walk, lambda n, rng: (
        rng.normal(size=[n]).astype(np.float32),
        rng.integers(0, 1000, size=[n]).astype(np.int32)), 6, grad=(0,)),
    Case("float_conditional_expression", soft_clip, lambda n, rng: (
        rng.uniform(-2.0, 3.0, size=[n]).astype(np.float32),
        rng.integers(0, 4, size=[n]).astype(np.int32)), 4, grad=(0,)),
]

BY_NAME = {c.name: c for c in CASES}


def reference(fn, inputs):
  """fn on each example eagerly, results stacked (a tuple of numpy arrays)."""
  per_example = []
  for k in range(inputs[0].shape[0]):
    out = fn(*[tf.constant(x[k]) for x in inputs])
    out = out if isinstance(out, tuple) else (out,)
    per_example.append([np.asarray(o) for o in out])
  return tuple(np.stack([e[j] for e in per_example]) for j in range(len(per_example[0])))
