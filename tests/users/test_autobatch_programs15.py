"""Recursive per-example programs through `vectorize.autobatch`, written from the README alone
(section "Recursive programs: `autobatch` (program-counter mode)") and `help(autobatch)`.

New programs (not in test_autobatch_programs.py / test_autobatch_programs12.py): Takeuchi's
function, an exact binary search returning three values, digital-root persistence (a `while`
loop around a recursion), modular power by squaring and float power with negative exponents,
Karatsuba multiplication, divide-and-conquer maximum subarray (four results), a
first-child/next-sibling tree walked by a `while` over siblings, walks on a captured grid,
a prefix-expression evaluator returning (value, position), Hofstadter's G, the arctan
continued fraction, Newton's reciprocal with an early return, Delannoy numbers, a
Galton-Watson branching process with stateless per-example seeds, an early `return` inside a
`for` over `range(lo, hi)`, bool returns, divide-and-conquer min/max/argmin, straight-line
helpers with defaults and helpers calling helpers, three mutually recursive bool functions,
Stern's diatomic sequence, Horner, Chebyshev pairs, integer square roots, Stein's binary GCD,
power iteration with a captured matrix; and the documented refusals.

Every program is checked against the per-example loop (the function called eagerly on each
example's tensors, results stacked) in some of three forms: eagerly, in a `tf.function`
traced for a batch of `None` (called at two batch sizes, one trace), and in
`tf.function(jit_compile=True)` with `max_stack_depth`. Where floats flow, gradients w.r.t.
float inputs are compared with per-example gradients.
"""
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.users._autobatch_harness import (  # pylint: disable=unused-import
    _no_checked_mode, _runner, _tuple, assert_same, check_grads, f32, f64, first, i32, i64,
    per_example, run_forms)

MODES = ["eager", "function", "xla"]


# ---------------------------------------------------------------------------------------
# 1. Takeuchi's function: calls nested as the arguments of a call, three per level.
# ---------------------------------------------------------------------------------------

def tak(x, y, z):
  if y < x:
    return tak(tak(x - 1, y, z), tak(y - 1, z, x), tak(z - 1, x, y))
  return z


def _tak_py(x, y, z):
  if y < x:
    return _tak_py(_tak_py(x - 1, y, z), _tak_py(y - 1, z, x), _tak_py(z - 1, x, y))
  return z


TAK_ARGS = (i32(4, 1, 3, 5, 2, 4), i32(2, 3, 1, 2, 2, 0), i32(0, 0, 2, 1, 7, 3))


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_takeuchi_nested_call_arguments(mode):
  want = (np.array([_tak_py(*t) for t in zip(*[a.numpy().tolist() for a in TAK_ARGS])]),)
  run_forms(tak, mode, TAK_ARGS, first(TAK_ARGS, 2), want=want, dtypes=[tf.int32],
            max_stack_depth=24)


# ---------------------------------------------------------------------------------------
# 2. Exact binary search over a captured sorted float table: (found, index, probes), a bool,
#    and literal-only results in the base cases.
# ---------------------------------------------------------------------------------------

SORTED = tf.constant([-3.5, -1.0, 0.0, 0.25, 2.0, 3.0, 7.5, 9.0, 11.0, 20.0], tf.float32)


def bsearch(lo, hi, key):
  if lo > hi:
    return False, lo, 0
  mid = (lo + hi) // 2
  v = SORTED[mid]
  if v == key:
    return True, mid, 1
  if v < key:
    found, idx, probes = bsearch(mid + 1, hi, key)
  else:
    found, idx, probes = bsearch(lo, mid - 1, key)
  return found, idx, probes + 1


BS_ARGS = (i32(0, 0, 0, 2, 0, 0), i32(9, 9, 9, 6, 9, 9),
           f32(7.5, -3.5, 1.0, 2.0, 21.0, 20.0))


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_binary_search_found_index_probes(mode):
  run_forms(bsearch, mode, BS_ARGS, first(BS_ARGS, 3), dtypes=[tf.bool, tf.int32, tf.int32],
            max_stack_depth=8)


# ---------------------------------------------------------------------------------------
# 3. Digital root and persistence: a `while` loop whose body calls a recursion; int64.
# ---------------------------------------------------------------------------------------

def digit_sum(n):
  if n < 10:
    return n
  return n % 10 + digit_sum(n // 10)


def persistence(n):
  rounds = 0
  while n >= 10:
    n = digit_sum(n)
    rounds = rounds + 1
  return n, rounds


PERS_ARGS = (i64(0, 9, 10, 99, 199, 987654321987, 19999999999),)


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_digital_root_persistence_int64(mode):
  vals = [0, 9, 10, 99, 199, 987654321987, 19999999999]
  roots = [0 if v == 0 else 1 + (v - 1) % 9 for v in vals]
  run_forms(persistence, mode, PERS_ARGS, first(PERS_ARGS, 4),
            want=(np.array(roots), np.array([0, 0, 1, 2, 3, 3, 3])),
            dtypes=[tf.int64, tf.int64], max_stack_depth=14)


# ---------------------------------------------------------------------------------------
# 4. Modular power by squaring in int64; float power with negative int64 exponents.
# ---------------------------------------------------------------------------------------

def modpow(b, e, m):
  if e == 0:
    return 1 % m
  h = modpow(b, e // 2, m)
  h = h * h % m
  if e % 2 == 1:
    h = h * b % m
  return h


MP_ARGS = (i64(2, 3, 10, 7, 123456789, 5), i64(10, 0, 18, 1000000, 987654, 3),
           i64(1000, 7, 1000000007, 13, 1000000007, 1))


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_modpow_int64(mode):
  want = (np.array([pow(b, e, m) for b, e, m in
                    zip(*[a.numpy().tolist() for a in MP_ARGS])]),)
  run_forms(modpow, mode, MP_ARGS, first(MP_ARGS, 2), want=want, dtypes=[tf.int64],
            max_stack_depth=24)


def fpow(x, k):
  if k < 0:
    return 1.0 / fpow(x, -k)
  if k == 0:
    return 1.0
  h = fpow(x, k // 2)
  if k % 2 == 1:
    return h * h * x
  return h * h


FP_ARGS = (f64(1.5, -2.0, 0.5, 3.0, 1.1), i64(3, -3, 0, 7, -10))


def test_float_power_negative_exponents():
  want = (np.array([1.5 ** 3, (-2.0) ** -3, 1.0, 3.0 ** 7, 1.1 ** -10]),)
  run_forms(fpow, "xla", FP_ARGS, want=want, dtypes=[tf.float64], max_stack_depth=8)


def test_float_power_negative_exponents_grad():
  check_grads(fpow, "eager", first(FP_ARGS, 3), [0], max_stack_depth=8)


# ---------------------------------------------------------------------------------------
# 5. Karatsuba multiplication of small int64 numbers, with recursive helpers for the digit
#    count and the power of ten.
# ---------------------------------------------------------------------------------------

def ndigits(n):
  if n < 10:
    return 1
  return 1 + ndigits(n // 10)


def pow10(m):
  if m == 0:
    return 1
  return 10 * pow10(m - 1)


def karatsuba(x, y):
  if x < 10 or y < 10:
    return x * y
  m = tf.maximum(ndigits(x), ndigits(y)) // 2
  p = pow10(m)
  hx = x // p
  lx = x % p
  hy = y // p
  ly = y % p
  z0 = karatsuba(lx, ly)
  z1 = karatsuba(lx + hx, ly + hy)
  z2 = karatsuba(hx, hy)
  return z2 * p * p + (z1 - z2 - z0) * p + z0


KA_ARGS = (i64(1234, 7, 99, 12345678, 31415, 100), i64(5678, 8, 99, 87654321, 27182, 1))


def karatsuba2(x, y):
  # The digit count of the larger operand (no tf op on a recursive result), then pow10 of it.
  if x < 10 or y < 10:
    return x * y
  m = ndigits(tf.maximum(x, y)) // 2
  p = pow10(m)
  z0 = karatsuba2(x % p, y % p)
  z1 = karatsuba2(x % p + x // p, y % p + y // p)
  z2 = karatsuba2(x // p, y // p)
  return z2 * p * p + (z1 - z2 - z0) * p + z0


def karatsuba3(x, y):
  # The power of ten by a loop instead of pow10.
  if x < 10 or y < 10:
    return x * y
  m = ndigits(tf.maximum(x, y)) // 2
  p = x * 0 + 1
  while m > 0:
    p = p * 10
    m = m - 1
  hx = x // p
  lx = x % p
  hy = y // p
  ly = y % p
  z0 = karatsuba3(lx, ly)
  z1 = karatsuba3(lx + hx, ly + hy)
  z2 = karatsuba3(hx, hy)
  return z2 * p * p + (z1 - z2 - z0) * p + z0


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_karatsuba_int64(mode):
  want = (KA_ARGS[0].numpy() * KA_ARGS[1].numpy(),)
  run_forms(karatsuba3, mode, KA_ARGS, first(KA_ARGS, 3), want=want, dtypes=[tf.int64],
            max_stack_depth=16)


def test_karatsuba_tf_op_on_literal_only_recursive_result():
  """A tf op applied to the int64 result of a literal-only-return recursion
  (tf.maximum(ndigits(x), ndigits(y))) was refused: '`m` is int64[] here but int32[]
  elsewhere' (fixed in session 22: values computed from weak values only stay weak)."""
  want = (KA_ARGS[0].numpy() * KA_ARGS[1].numpy(),)
  run_forms(karatsuba, "eager", KA_ARGS, want=want, dtypes=[tf.int64], max_stack_depth=16)


def test_karatsuba_chained_literal_only_recursions():
  """pow10(m), a literal-only-return recursion, called with the int64 result of another
  (ndigits) was typed int32: 'Input 'y' of 'FloorMod' Op has type int32 that does not match
  type int64' (fixed in session 22: weak results resolve by strong parameters first)."""
  want = (KA_ARGS[0].numpy() * KA_ARGS[1].numpy(),)
  run_forms(karatsuba2, "eager", KA_ARGS, want=want, dtypes=[tf.int64], max_stack_depth=16)


# ---------------------------------------------------------------------------------------
# 6. Divide-and-conquer maximum subarray over a captured float table scaled per example:
#    four results per call.
# ---------------------------------------------------------------------------------------

W = tf.constant([2.0, -3.1, 4.2, -1.3, 2.4, 1.05, -5.3, 4.7, -0.45, 1.15], tf.float32)


def mss(s, lo, hi):
  if lo == hi:
    v = s * W[lo]
    return v, v, v, v
  mid = (lo + hi) // 2
  b1, p1, s1, t1 = mss(s, lo, mid)
  b2, p2, s2, t2 = mss(s, mid + 1, hi)
  best = tf.maximum(tf.maximum(b1, b2), s1 + p2)
  return best, tf.maximum(p1, t1 + p2), tf.maximum(s2, s1 + t2), t1 + t2


MSS_ARGS = (f32(1.0, -1.0, 0.5, 2.0, -0.7), i32(0, 0, 3, 6, 2), i32(9, 9, 8, 6, 5))


def _kadane(a):
  best = cur = a[0]
  for v in a[1:]:
    cur = max(v, cur + v)
    best = max(best, cur)
  return best


@pytest.mark.parametrize("mode", ["function"])
def test_max_subarray_four_results(mode):
  w = W.numpy()
  want_best = np.array([_kadane(s * w[lo:hi + 1]) for s, lo, hi in
                        zip(*[a.numpy().tolist() for a in MSS_ARGS])], np.float32)
  batched = run_forms(mss, mode, MSS_ARGS, first(MSS_ARGS, 1), max_stack_depth=6)
  np.testing.assert_allclose(np.asarray(batched(*MSS_ARGS)[0]), want_best, rtol=1e-5)


def test_max_subarray_four_results_grad():
  check_grads(mss, "eager", first(MSS_ARGS, 3), [0], max_stack_depth=6)


# ---------------------------------------------------------------------------------------
# 7. A first-child / next-sibling forest: a `while` over the siblings holding the recursive
#    call; (size, height, polynomial in x) per subtree.
# ---------------------------------------------------------------------------------------

#            0           7
#         /  |  \        |
#        1   2   3       8
#       / \      |      / \
#      4   5     6     9  10
#                          |
#                          11
FIRST = tf.constant([1, 4, -1, 6, -1, -1, -1, 8, 9, -1, 11, -1], tf.int32)
NEXT = tf.constant([-1, 2, 3, -1, 5, -1, -1, -1, -1, 10, -1, -1], tf.int32)
NVAL = tf.constant([1.0, 2.0, -1.0, 0.5, 3.0, 1.5, -2.0, 1.0, 0.25, 2.0, -1.0, 4.0],
                   tf.float32)


def subtree(node, x):
  size = 1
  height = 0
  total = NVAL[node]
  c = FIRST[node]
  while c >= 0:
    s, h, t = subtree(c, x)
    size = size + s
    height = tf.maximum(height, h + 1)
    total = total + x * t
    c = NEXT[c]
  return size, height, total


TREE_ARGS = (i32(0, 7, 3, 1, 11, 10, 2), f32(0.5, -1.0, 2.0, 1.5, 0.3, -0.5, 1.0))


@pytest.mark.parametrize("mode", ["xla"])
def test_sibling_tree_while_around_recursion(mode):
  want_size = np.array([7, 5, 2, 3, 1, 2, 1])
  want_height = np.array([2, 3, 1, 1, 0, 1, 0])
  ref = per_example(subtree, *TREE_ARGS)
  np.testing.assert_array_equal(ref[0], want_size)
  np.testing.assert_array_equal(ref[1], want_height)
  run_forms(subtree, mode, TREE_ARGS, first(TREE_ARGS, 4),
            dtypes=[tf.int32, tf.int32, tf.float32], max_stack_depth=6)


def test_sibling_tree_while_around_recursion_grad():
  check_grads(subtree, "eager", TREE_ARGS, [1], max_stack_depth=6)


# ---------------------------------------------------------------------------------------
# 8. Walks of length k on a captured grid of open cells: a `for d in range(4)` over captured
#    direction tables holding the recursive call, a chained comparison.
# ---------------------------------------------------------------------------------------

GRID = tf.constant([[1, 1, 0, 1],
                    [1, 1, 1, 1],
                    [0, 1, 0, 1],
                    [1, 1, 1, 1]], tf.int32)
DR = tf.constant([1, -1, 0, 0], tf.int32)
DC = tf.constant([0, 0, 1, -1], tf.int32)


def walks(r, c, k):
  if not (0 <= r < 4 and 0 <= c < 4):
    return 0
  if GRID[r, c] == 0:
    return 0
  if k == 0:
    return 1
  total = 0
  for d in range(4):
    total = total + walks(r + DR[d], c + DC[d], k - 1)
  return total


def _walks_py(r, c, k):
  g = GRID.numpy()
  if not (0 <= r < 4 and 0 <= c < 4) or g[r, c] == 0:
    return 0
  if k == 0:
    return 1
  return sum(_walks_py(r + dr, c + dc, k - 1) for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1)))


WALK_ARGS = (i32(0, 1, 3, 0, 2, 3), i32(0, 1, 3, 2, 1, 0), i32(3, 2, 3, 1, 0, 2))


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_grid_walk_counts(mode):
  want = (np.array([_walks_py(*t) for t in zip(*[a.numpy().tolist() for a in WALK_ARGS])]),)
  run_forms(walks, mode, WALK_ARGS, first(WALK_ARGS, 2), want=want, dtypes=[tf.int32],
            max_stack_depth=6)


# ---------------------------------------------------------------------------------------
# 9. A prefix expression in a captured token table: (value, next position), gradient
#    w.r.t. the variable.  Tokens: 0 x, 1 +, 2 *, 3 -, 4 unary minus, 10+k the constant k.
# ---------------------------------------------------------------------------------------

TOK = tf.constant([
    1, 0, 12,                 # 0: x + 2
    2, 0, 3, 0, 11,           # 3: x * (x - 1)
    4, 2, 1, 0, 13, 0,        # 8: -((x + 3) * x)
    3, 2, 0, 0, 2, 15, 0,     # 14: x*x - 5*x
    0,                        # 21: x
    17,                       # 22: 7
], tf.int32)


def ev(pos, x):
  t = TOK[pos]
  if t == 0:
    return x, pos + 1
  if t >= 10:
    return tf.cast(t - 10, tf.float32), pos + 1
  if t == 4:
    v, p = ev(pos + 1, x)
    return -v, p
  a, p1 = ev(pos + 1, x)
  b, p2 = ev(p1, x)
  if t == 1:
    return a + b, p2
  if t == 2:
    return a * b, p2
  return a - b, p2


EV_ARGS = (i32(0, 3, 8, 14, 21, 22), f32(1.5, 2.0, -0.5, 3.0, 4.0, 1.0))


@pytest.mark.parametrize("mode", ["xla"])
def test_prefix_expression_value_and_position(mode):
  x = EV_ARGS[1].numpy()
  want = (np.array([x[0] + 2, x[1] * (x[1] - 1), -((x[2] + 3) * x[2]), x[3] * x[3] - 5 * x[3],
                    x[4], 7.0], np.float32), np.array([3, 8, 14, 21, 22, 23]))
  run_forms(ev, mode, EV_ARGS, first(EV_ARGS, 3), want=want,
            dtypes=[tf.float32, tf.int32], max_stack_depth=8)


@pytest.mark.parametrize("mode", ["eager"])
def test_prefix_expression_value_and_position_grad(mode):
  check_grads(ev, mode, first(EV_ARGS, 3), [1], max_stack_depth=8)


# ---------------------------------------------------------------------------------------
# 10. Hofstadter's G: a recursive call as the argument of another, int64.
# ---------------------------------------------------------------------------------------

def hof_g(n):
  if n == 0:
    return n
  return n - hof_g(hof_g(n - 1))


def _hof_g_py(n):
  g = [0]
  for k in range(1, n + 1):
    g.append(k - g[g[k - 1]])
  return g[n]


HG_ARGS = (i64(0, 1, 2, 5, 8, 11),)


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_hofstadter_g_nested_int64(mode):
  want = (np.array([_hof_g_py(n) for n in HG_ARGS[0].numpy().tolist()]),)
  run_forms(hof_g, mode, HG_ARGS, first(HG_ARGS, 4), want=want, dtypes=[tf.int64],
            max_stack_depth=16)


# ---------------------------------------------------------------------------------------
# 11. Gauss's continued fraction for arctan, float64, with an int32 depth.
# ---------------------------------------------------------------------------------------

def atan_tail(x, k, n):
  if k == n:
    return tf.cast(2 * k + 1, tf.float64)
  return (tf.cast(2 * k + 1, tf.float64)
          + tf.cast((k + 1) * (k + 1), tf.float64) * x * x / atan_tail(x, k + 1, n))


def atan_cf(x, n):
  return x / atan_tail(x, 0, n)


AT_ARGS = (f64(0.3, -0.8, 1.0, 2.0, 0.0), i32(12, 12, 14, 20, 3))


@pytest.mark.parametrize("mode", ["xla"])
def test_arctan_continued_fraction_float64(mode):
  want = (np.arctan(AT_ARGS[0].numpy()),)
  run_forms(atan_cf, mode, AT_ARGS, first(AT_ARGS, 2), want=want, rtol=1e-7, atol=1e-9,
            dtypes=[tf.float64], max_stack_depth=24)


def test_arctan_continued_fraction_float64_grad():
  check_grads(atan_cf, "function", AT_ARGS, [0], rtol=1e-7, atol=1e-9, max_stack_depth=24)


# ---------------------------------------------------------------------------------------
# 12. Newton's reciprocal with an early return on convergence and an iteration cap:
#     (float32, int32).
# ---------------------------------------------------------------------------------------

def recip(a, x, k):
  e = 1.0 - a * x
  if tf.abs(e) < 1e-5 or k >= 25:
    return x, k
  return recip(a, x * (1.0 + e), k + 1)


RC_ARGS = (f32(0.5, 2.0, 4.0, 7.5, 1.0), f32(0.1, 0.1, 0.1, 0.1, 1.0), i32(0, 0, 0, 0, 0))


@pytest.mark.parametrize("mode", ["function"])
def test_newton_reciprocal_early_return(mode):
  want = (1.0 / RC_ARGS[0].numpy(), None)
  batched = run_forms(recip, mode, RC_ARGS, first(RC_ARGS, 2), dtypes=[tf.float32, tf.int32],
                      max_stack_depth=30)
  np.testing.assert_allclose(np.asarray(batched(*RC_ARGS)[0]), want[0], rtol=1e-4)


def test_newton_reciprocal_early_return_grad():
  check_grads(recip, "eager", RC_ARGS, [0, 1], rtol=1e-3, atol=1e-4, max_stack_depth=30)


# ---------------------------------------------------------------------------------------
# 13. Delannoy numbers: three recursive calls summed, int64, `or` of two comparisons.
# ---------------------------------------------------------------------------------------

def delannoy(m, n):
  if m == 0 or n == 0:
    return 1
  return delannoy(m - 1, n) + delannoy(m, n - 1) + delannoy(m - 1, n - 1)


DL_ARGS = (i64(0, 1, 2, 3, 3, 2), i64(4, 1, 2, 3, 1, 3))


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_delannoy_int64(mode):
  table = {(0, 4): 1, (1, 1): 3, (2, 2): 13, (3, 3): 63, (3, 1): 7, (2, 3): 25}
  want = (np.array([table[t] for t in zip(*[a.numpy().tolist() for a in DL_ARGS])]),)
  run_forms(delannoy, mode, DL_ARGS, first(DL_ARGS, 3), want=want, dtypes=[tf.int64],
            max_stack_depth=8)


# ---------------------------------------------------------------------------------------
# 14. A Galton-Watson branching process: a stateless draw per node from a per-example seed,
#     a `for` over a drawn count holding the recursive call.
# ---------------------------------------------------------------------------------------

def gw_size(seed, depth):
  if depth == 0:
    return 1
  u = tf.random.stateless_uniform([], seed, dtype=tf.float32)
  kids = tf.cast(u * 3.0, tf.int32)
  size = 1
  for i in range(kids):
    child = tf.stack([seed[0] * 3 + i + 1, seed[1] + depth])
    size = size + gw_size(child, depth - 1)
  return size


GW_ARGS = (tf.constant([[1, 2], [3, 4], [5, 6], [7, 8], [11, 0], [2, 9]], tf.int32),
           i32(3, 3, 2, 4, 0, 3))


def _gw_py(seed, depth, draw):
  """The same process in plain Python; `draw` gives the uniform of a seed (TF's own XLA
  kernel draws other stateless numbers than its CPU kernel, so the XLA form is compared with
  XLA's draws)."""
  if depth == 0:
    return 1
  kids = int(float(draw(tf.constant(seed, tf.int32))) * 3.0)
  size = 1
  for i in range(kids):
    size += _gw_py([seed[0] * 3 + i + 1, seed[1] + depth], depth - 1, draw)
  return size


def _uniform(seed):
  return tf.random.stateless_uniform([], seed, dtype=tf.float32)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_galton_watson_stateless_seeds(mode):
  draw = tf.function(_uniform, jit_compile=True) if mode == "xla" else _uniform
  seeds, depths = GW_ARGS[0].numpy().tolist(), GW_ARGS[1].numpy().tolist()
  want = np.array([_gw_py(s, d, draw) for s, d in zip(seeds, depths)])
  if mode != "xla":
    np.testing.assert_array_equal(per_example(gw_size, *GW_ARGS)[0], want)
  batched = vectorize.autobatch(gw_size, max_stack_depth=6)
  run = _runner(batched, mode, GW_ARGS)
  got = run(*GW_ARGS)
  assert got.dtype == tf.int32
  np.testing.assert_array_equal(np.asarray(got), want)
  if mode == "function":
    np.testing.assert_array_equal(np.asarray(run(*first(GW_ARGS, 2))), want[:2])


# ---------------------------------------------------------------------------------------
# 15. An early `return` inside `for k in range(lo, hi)` whose body calls a recursion.
# ---------------------------------------------------------------------------------------

def first_with_digit_sum(lo, hi, target):
  for k in range(lo, hi):
    if digit_sum(k) == target:
      return k
  return -1


FD_ARGS = (i64(0, 100, 5, 990, 10, 7), i64(50, 200, 9, 1000, 10, 300), i64(7, 1, 30, 27, 1, 25))


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_early_return_in_for_range_lo_hi(mode):
  def py(lo, hi, t):
    for k in range(lo, hi):
      if sum(map(int, str(k))) == t:
        return k
    return -1
  want = (np.array([py(*t) for t in zip(*[a.numpy().tolist() for a in FD_ARGS])]),)
  run_forms(first_with_digit_sum, mode, FD_ARGS, first(FD_ARGS, 2), want=want,
            dtypes=[tf.int64], max_stack_depth=6)


# ---------------------------------------------------------------------------------------
# 16. A bool result: is a per-example float vector sorted from index i on.
# ---------------------------------------------------------------------------------------

def sorted_from(v, i):
  if i >= 5:
    return True
  if v[i] > v[i + 1]:
    return False
  return sorted_from(v, i + 1)


def is_sorted(v):
  return sorted_from(v, 0)


SO_ARGS = (tf.constant([[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 6, 5], [0, 0, 0, 0, 0, 0],
                        [9, 1, 2, 3, 4, 5], [-1, 0, 0.5, 0.5, 2, 3]], tf.float32),)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_is_sorted_bool_result(mode):
  run_forms(is_sorted, mode, SO_ARGS, first(SO_ARGS, 1),
            want=(np.array([True, False, True, False, True]),), dtypes=[tf.bool],
            max_stack_depth=8)


# ---------------------------------------------------------------------------------------
# 17. Divide-and-conquer (min, max, argmin) over a per-example float vector, reached from an
#     entry that passes literal bounds.
# ---------------------------------------------------------------------------------------

def min_max_arg(v, lo, hi):
  if lo == hi:
    return v[lo], v[lo], lo
  mid = (lo + hi) // 2
  a_min, a_max, a_arg = min_max_arg(v, lo, mid)
  b_min, b_max, b_arg = min_max_arg(v, mid + 1, hi)
  if b_min < a_min:
    a_min = b_min
    a_arg = b_arg
  return a_min, tf.maximum(a_max, b_max), a_arg


def min_max(v):
  return min_max_arg(v, 0, 6)


MM_ARGS = (tf.constant([[3.0, 1.0, 4.0, 1.5, 5.0, 9.0, 2.0],
                        [-1.0, 2.0, -3.0, 4.0, -5.0, 6.0, -7.5],
                        [0.5, 0.25, 0.125, 1.0, 2.0, 4.0, 8.0],
                        [7.0, 6.0, 5.0, 4.0, 3.0, 2.5, 10.0]], tf.float32),)


@pytest.mark.parametrize("mode", ["function"])
def test_min_max_argmin_three_results(mode):
  v = MM_ARGS[0].numpy()
  want = (v.min(1), v.max(1), v.argmin(1))
  run_forms(min_max, mode, MM_ARGS, first(MM_ARGS, 1), want=want, max_stack_depth=6)


def test_min_max_argmin_three_results_grad():
  check_grads(min_max, "eager", first(MM_ARGS, 2), [0], max_stack_depth=6)


# ---------------------------------------------------------------------------------------
# 18. Happy numbers: a straight-line helper with a default argument, helpers calling
#     helpers, a compiled loop helper called from the recursion; (bool, int32).
# ---------------------------------------------------------------------------------------

def square(d, power=2):
  return d ** power


def digit_square(d):
  return square(d)


def sq_digit_sum(n):
  total = 0
  while n > 0:
    total = total + digit_square(n % 10)
    n = n // 10
  return total


def happy(n, k):
  if n == 1:
    return True, k
  if k >= 20:
    return False, k
  return happy(sq_digit_sum(n), k + 1)


def _happy_py(n, k):
  while n != 1 and k < 20:
    n = sum(int(c) ** 2 for c in str(n))
    k += 1
  return n == 1, k


HP_ARGS = (i32(1, 7, 4, 19, 100, 2, 13), i32(0, 0, 0, 0, 0, 0, 3))


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_happy_numbers_helpers_calling_helpers(mode):
  ref = [_happy_py(*t) for t in zip(*[a.numpy().tolist() for a in HP_ARGS])]
  want = (np.array([r[0] for r in ref]), np.array([r[1] for r in ref]))
  run_forms(happy, mode, HP_ARGS, first(HP_ARGS, 3), want=want, dtypes=[tf.bool, tf.int32],
            max_stack_depth=24)


# ---------------------------------------------------------------------------------------
# 19. Three mutually recursive bool functions: an automaton for divisibility by 3 over the
#     binary digits of an int64.
# ---------------------------------------------------------------------------------------

def rem0(n):
  if n == 0:
    return True
  if n % 2 == 0:
    return rem0(n // 2)
  return rem1(n // 2)


def rem1(n):
  if n == 0:
    return False
  if n % 2 == 0:
    return rem2(n // 2)
  return rem0(n // 2)


def rem2(n):
  if n == 0:
    return False
  if n % 2 == 0:
    return rem1(n // 2)
  return rem2(n // 2)


D3_ARGS = (i64(0, 3, 4, 9, 1000000000002, 1000000000001, 2 ** 40 + 5, 7),)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_three_way_mutual_recursion_divisible_by_3(mode):
  want = (D3_ARGS[0].numpy() % 3 == 0,)
  run_forms(rem0, mode, D3_ARGS, first(D3_ARGS, 3), want=want, dtypes=[tf.bool],
            max_stack_depth=48)


# ---------------------------------------------------------------------------------------
# 20. Stern's diatomic sequence: two calls on the odd branch, one on the even.
# ---------------------------------------------------------------------------------------

def stern(n):
  if n < 2:
    return n
  if n % 2 == 0:
    return stern(n // 2)
  return stern(n // 2) + stern(n // 2 + 1)


def _stern_py(n):
  s = [0, 1]
  for k in range(2, n + 1):
    s.append(s[k // 2] if k % 2 == 0 else s[k // 2] + s[k // 2 + 1])
  return s[n]


ST_ARGS = (i32(0, 1, 5, 19, 100, 255, 1000),)


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_stern_diatomic(mode):
  want = (np.array([_stern_py(n) for n in ST_ARGS[0].numpy().tolist()]),)
  run_forms(stern, mode, ST_ARGS, first(ST_ARGS, 4), want=want, dtypes=[tf.int32],
            max_stack_depth=12)


# ---------------------------------------------------------------------------------------
# 21. Horner's rule with a per-example coefficient vector read at a per-example index,
#     float64, gradients w.r.t. coefficients and point.
# ---------------------------------------------------------------------------------------

def horner(c, x, i):
  if i == 4:
    return c[4]
  return c[i] + x * horner(c, x, i + 1)


def poly(c, x):
  return horner(c, x, 0)


PO_ARGS = (tf.constant([[1, 2, 3, 4, 5], [0, -1, 0, 1, 0], [0.5, 0.5, 0.5, 0.5, 0.5],
                        [2, 0, 0, 0, -1], [1, 1, 1, 1, 1]], tf.float64),
           f64(0.5, 2.0, -1.0, 1.5, 0.0))


@pytest.mark.parametrize("mode", ["function"])
def test_horner_float64(mode):
  c, x = PO_ARGS[0].numpy(), PO_ARGS[1].numpy()
  want = (np.array([np.polyval(c[i][::-1], x[i]) for i in range(5)]),)
  run_forms(poly, mode, PO_ARGS, first(PO_ARGS, 2), want=want, rtol=1e-12, atol=1e-12,
            dtypes=[tf.float64], max_stack_depth=8)


@pytest.mark.parametrize("mode", ["xla"])
def test_horner_float64_grad(mode):
  check_grads(poly, mode, PO_ARGS, [0, 1], rtol=1e-10, atol=1e-10, max_stack_depth=8,
              max_steps=100)


# ---------------------------------------------------------------------------------------
# 22. Chebyshev pairs (T_n, T_{n-1}) of a per-example float32 vector: a linear recursion
#     returning two results.
# ---------------------------------------------------------------------------------------

def cheb(x, n):
  if n == 0:
    return tf.ones_like(x), x
  t, tp = cheb(x, n - 1)
  return 2.0 * x * t - tp, t


CH_ARGS = (tf.constant([[0.5, -0.3, 0.9], [0.1, 0.2, 0.3], [-1.0, 1.0, 0.0],
                        [0.7, -0.7, 0.25], [0.0, 0.5, -0.5]], tf.float32),
           i32(3, 0, 5, 8, 1))


@pytest.mark.parametrize("mode", ["xla"])
def test_chebyshev_pairs(mode):
  x, n = CH_ARGS[0].numpy().astype(np.float64), CH_ARGS[1].numpy()
  want = (np.stack([np.cos(n[i] * np.arccos(x[i])) for i in range(5)]).astype(np.float32),
          np.stack([np.cos((n[i] - 1) * np.arccos(x[i])) if n[i] > 0 else x[i]
                    for i in range(5)]).astype(np.float32))
  run_forms(cheb, mode, CH_ARGS, first(CH_ARGS, 3), want=want, rtol=1e-4, atol=1e-5,
            max_stack_depth=10)


@pytest.mark.parametrize("mode", ["eager"])
def test_chebyshev_pairs_grad(mode):
  check_grads(cheb, mode, CH_ARGS, [0], max_stack_depth=10, max_steps=100)


# ---------------------------------------------------------------------------------------
# 23. Integer square root by recursion on n // 4, int64; Stein's binary GCD, int64.
# ---------------------------------------------------------------------------------------

def isqrt(n):
  if n < 2:
    return n
  s = 2 * isqrt(n // 4)
  if (s + 1) * (s + 1) <= n:
    return s + 1
  return s


IS_ARGS = (i64(0, 1, 15, 16, 17, 99980001, 10 ** 12 + 7, 2 ** 50),)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_isqrt_int64(mode):
  import math
  want = (np.array([math.isqrt(n) for n in IS_ARGS[0].numpy().tolist()]),)
  run_forms(isqrt, mode, IS_ARGS, first(IS_ARGS, 3), want=want, dtypes=[tf.int64],
            max_stack_depth=30)


def bgcd(a, b):
  if a == 0:
    return b
  if b == 0:
    return a
  if a % 2 == 0 and b % 2 == 0:
    return 2 * bgcd(a // 2, b // 2)
  if a % 2 == 0:
    return bgcd(a // 2, b)
  if b % 2 == 0:
    return bgcd(a, b // 2)
  if a >= b:
    return bgcd((a - b) // 2, b)
  return bgcd((b - a) // 2, a)


BG_ARGS = (i64(0, 12, 48, 17, 2 ** 33 * 3, 1071, 7), i64(5, 0, 18, 5, 2 ** 31 * 9, 462, 7))


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_stein_binary_gcd_int64(mode):
  want = (np.gcd(BG_ARGS[0].numpy(), BG_ARGS[1].numpy()),)
  run_forms(bgcd, mode, BG_ARGS, first(BG_ARGS, 0), want=want, dtypes=[tf.int64],
            max_stack_depth=80)


# ---------------------------------------------------------------------------------------
# 24. Power iteration with a captured matrix: vector state, (vector, Rayleigh quotient).
# ---------------------------------------------------------------------------------------

AMAT = tf.constant([[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0]], tf.float32)


def power_it(v, k):
  if k == 0:
    return v, tf.reduce_sum(v * tf.linalg.matvec(AMAT, v))
  w = tf.linalg.matvec(AMAT, v)
  return power_it(w / tf.norm(w), k - 1)


PI_ARGS = (tf.constant([[1.0, 0.0, 0.0], [0.6, 0.8, 0.0], [0.0, 0.0, 1.0],
                        [0.48, 0.6, 0.64]], tf.float32), i32(0, 3, 6, 2))


@pytest.mark.parametrize("mode", ["xla"])
def test_power_iteration_vector_state(mode):
  run_forms(power_it, mode, PI_ARGS, first(PI_ARGS, 1), rtol=1e-5, atol=1e-6,
            max_stack_depth=8)


@pytest.mark.parametrize("mode", ["eager"])
def test_power_iteration_vector_state_grad(mode):
  check_grads(power_it, mode, PI_ARGS, [0], rtol=1e-4, atol=1e-5, max_stack_depth=8,
              max_steps=100)


# ---------------------------------------------------------------------------------------
# 25a. A bool input flipped by `not` at each level, a conditional expression of a recursive
#      result; float64 weights.
# ---------------------------------------------------------------------------------------

def alt_sum(n, neg, w):
  if n == 0:
    return w * 0.0
  s = alt_sum(n - 1, not neg, w * 0.5)
  return s - w if neg else s + w


AS_ARGS = (i32(0, 1, 2, 5, 6), tf.constant([True, False, True, False, True]),
           f64(1.0, 2.0, -1.0, 3.0, 0.5))


def test_alternating_bool_flag_conditional_expression():
  def py(n, neg, w):
    t = 0.0
    for _ in range(n):
      t += -w if neg else w
      neg, w = not neg, w * 0.5
    return t
  want = (np.array([py(*t) for t in zip(*[a.numpy().tolist() for a in AS_ARGS])]),)
  run_forms(alt_sum, "function", AS_ARGS, first(AS_ARGS, 2), want=want, rtol=1e-12,
            dtypes=[tf.float64], max_stack_depth=8)
  check_grads(alt_sum, "eager", AS_ARGS, [2], rtol=1e-10, atol=1e-12, max_stack_depth=8)


# ---------------------------------------------------------------------------------------
# 25b. Nested `for` loops with an early `return` of a pair from the inner one; a `while True`
#      left by `break` after a recursive call.
# ---------------------------------------------------------------------------------------

def find_stern(n, t):
  for i in range(n):
    for j in range(n):
      if stern(i * n + j) == t:
        return i, j
  return -1, -1


FS_ARGS = (i32(3, 4, 5, 2, 6), i32(3, 5, 7, 9, 4))


def test_nested_for_early_return_pair():
  sv = [_stern_py(k) for k in range(40)]

  def py(n, t):
    for i in range(n):
      for j in range(n):
        if sv[i * n + j] == t:
          return i, j
    return -1, -1
  ref = [py(*t) for t in zip(*[a.numpy().tolist() for a in FS_ARGS])]
  want = (np.array([r[0] for r in ref]), np.array([r[1] for r in ref]))
  run_forms(find_stern, "xla", FS_ARGS, want=want, dtypes=[tf.int32, tf.int32],
            max_stack_depth=8)


def sqrt_rounds(n):
  count = 0
  while True:
    if n <= 1:
      break
    n = isqrt(n)
    count = count + 1
  return n, count


SR_ARGS = (i64(0, 1, 2, 16, 65536, 2 ** 40, 10 ** 15),)


def test_while_true_break_after_recursion_int64():
  import math

  def py(n):
    c = 0
    while n > 1:
      n, c = math.isqrt(n), c + 1
    return n, c
  ref = [py(n) for n in SR_ARGS[0].numpy().tolist()]
  want = (np.array([r[0] for r in ref]), np.array([r[1] for r in ref]))
  run_forms(sqrt_rounds, "function", SR_ARGS, first(SR_ARGS, 3), want=want,
            dtypes=[tf.int64, tf.int64], max_stack_depth=30)


# ---------------------------------------------------------------------------------------
# 25c. One recursion called at an int32 and at an int64 site.
# ---------------------------------------------------------------------------------------

def two_digit_sums(a, b):
  return digit_sum(a) + tf.cast(digit_sum(b), tf.int32)


TD_ARGS = (i32(5, 123, 99999, 0), i64(7, 10 ** 12 + 1, 456, 0))


def test_one_recursion_at_two_dtypes_is_refused_naming_the_line():
  """README: every variable keeps one dtype; digit_sum's `n` would be int32 and int64."""
  np.testing.assert_array_equal(per_example(two_digit_sums, *TD_ARGS)[0], [12, 8, 60, 0])
  with pytest.raises(vectorize.ConversionError,
                     match=r"test_autobatch_programs15.py:\d+: autobatch: `n` is int\d\d\[\] "
                           r"here but int\d\d\[\] elsewhere[\s\S]*tf\.cast"):
    vectorize.autobatch(two_digit_sums, max_stack_depth=16)(*TD_ARGS)


# ---------------------------------------------------------------------------------------
# 25d. schedule="fullest", and stacks that grow (max_stack_depth=None) past a small start.
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("program", ["tak", "gw"])
def test_schedule_fullest(program):
  fn, args = {"tak": (tak, TAK_ARGS), "gw": (gw_size, GW_ARGS),
              "subtree": (subtree, TREE_ARGS)}[program]
  run_forms(fn, "function", args, first(args, 2), max_stack_depth=24, schedule="fullest")


def test_growing_stacks_deep_recursion():
  n = i32(0, 150, 7, 300, 1)
  got = vectorize.autobatch(sum_down)(n)
  np.testing.assert_array_equal(np.asarray(got), [0, 11325, 28, 45150, 1])


# ---------------------------------------------------------------------------------------
# 25e. Literals: `1 / 3` and 0.1 meeting float64 values keep float64 precision; int literals
#      past int32's range meeting int64.
# ---------------------------------------------------------------------------------------

def third_steps(x, n):
  c = 0.1
  k = 1 / 3
  if n == 0:
    return x + c
  return third_steps(x * k + c, n - 1)


def big_steps(n):
  if n == 0:
    return 5000000000
  return big_steps(n - 1) + 3000000000


def test_literal_precision_float64_and_int64():
  x, n = f64(1.0, 2.0, 0.3), i32(0, 3, 5)
  want = []
  for xv, nv in zip(x.numpy().tolist(), n.numpy().tolist()):
    for _ in range(nv):
      xv = xv * (1 / 3) + 0.1
    want.append(xv + 0.1)
  run_forms(third_steps, "eager", (x, n), want=(np.array(want),), rtol=1e-15, atol=0,
            dtypes=[tf.float64], max_stack_depth=8)
  run_forms(big_steps, "eager", (i64(0, 1, 4),),
            want=(np.array([5 * 10 ** 9, 8 * 10 ** 9, 17 * 10 ** 9]),), dtypes=[tf.int64],
            max_stack_depth=8)


# ---------------------------------------------------------------------------------------
# 25f. A recursive closure made by a factory, two closures over different tables.
# ---------------------------------------------------------------------------------------

def make_lookup(table, scale):
  def lookup(i, d):
    if d == 0:
      return table[i] * scale
    return lookup((i + 1) % 4, d - 1)
  return lookup


def test_recursive_closures_from_a_factory():
  args = (i32(0, 1, 2, 3), i32(0, 1, 2, 5))
  for table, scale, want in ((f32(1, 2, 3, 4), 1.0, [1.0, 3.0, 1.0, 1.0]),
                             (f32(10, 20, 30, 40), 2.0, [20.0, 60.0, 20.0, 20.0])):
    run_forms(make_lookup(table, scale), "function", args, first(args, 2),
              want=(np.array(want, np.float32),), max_stack_depth=8)


# ---------------------------------------------------------------------------------------
# 25g. Narrow dtypes: int8 / uint8 / int16 and float16.
# ---------------------------------------------------------------------------------------

def halve_toward_two(x, n):
  if n == 0:
    return x
  return halve_toward_two(x * 0.5 + 1.0, n - 1)


@pytest.mark.parametrize("dtype", [tf.int8, tf.uint8, tf.int16])
def test_stern_narrow_integers(dtype):
  run_forms(stern, "eager", (tf.constant([5, 19, 100, 0], dtype),),
            want=(np.array([3, 7, 7, 0]),), dtypes=[dtype], max_stack_depth=12)


def test_float16_recursion():
  x, n = tf.constant([1.0, 2.0, 3.0], tf.float16), i32(0, 2, 5)
  run_forms(halve_toward_two, "eager", (x, n), rtol=1e-3, atol=1e-3, dtypes=[tf.float16],
            max_stack_depth=8)


def test_max_steps_and_batch_size_errors():
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"autobatch\(stern\): a member was still running after max_steps=5"):
    vectorize.autobatch(stern, max_stack_depth=12, max_steps=5)(i32(5, 1000))
  with pytest.raises(vectorize.ConversionError, match=r"batch sizes differ"):
    vectorize.autobatch(bgcd, max_stack_depth=80)(i64(4, 6, 8), i64(2, 3))


# ---------------------------------------------------------------------------------------
# 25. Batches of 0 and 1.
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_empty_batch(mode):
  args = first(EV_ARGS, 0)
  batched = vectorize.autobatch(ev, max_stack_depth=8)
  run = _runner(batched, mode, EV_ARGS)
  v, p = run(*args)
  assert tuple(v.shape) == (0,) and tuple(p.shape) == (0,)
  assert v.dtype == tf.float32 and p.dtype == tf.int32
  if mode == "function":
    assert_same(run(*EV_ARGS), per_example(ev, *EV_ARGS))


@pytest.mark.parametrize("program, mode", [("tak", "xla"), ("persistence", "eager")])
def test_batch_of_one(program, mode):
  fn, args, depth = {"tak": (tak, TAK_ARGS, 24), "happy": (happy, HP_ARGS, 24),
                     "persistence": (persistence, PERS_ARGS, 14)}[program]
  one = tuple(a[3:4] for a in args)
  run_forms(fn, mode, one, max_stack_depth=depth)


# ---------------------------------------------------------------------------------------
# 26. Documented refusals and failures.
# ---------------------------------------------------------------------------------------

def countdown_default(n, acc=0):
  if n == 0:
    return acc
  return countdown_default(n - 1, acc + n)


def test_default_argument_of_compiled_function_is_refused():
  with pytest.raises(vectorize.ConversionError, match=r"`countdown_default` takes .*default parameters"):
    vectorize.autobatch(countdown_default, max_stack_depth=8)(i32(3, 4))


def any_negative_from(v, i):
  if i >= 3:
    return False
  return v[i] < 0.0 or any_negative_from(v, i + 1)


def test_call_inside_or_is_refused_naming_the_line():
  with pytest.raises(vectorize.ConversionError,
                     match=r"test_autobatch_programs15.py:\d+: autobatch: a call of a program function inside `and` / `or`"):
    vectorize.autobatch(any_negative_from, max_stack_depth=8)(
        tf.zeros([2, 4]), i32(0, 0))


def mixed_counter(n):
  limit = tf.constant(5, tf.int32)
  total = tf.constant(0, tf.int64)
  while total < limit:
    total = total + n
  return total


def test_int32_int64_mix_is_refused_naming_the_cast():
  with pytest.raises(Exception, match=r"tf\.cast"):
    vectorize.autobatch(mixed_counter, max_stack_depth=4)(i64(1, 2))


def sum_down(n):
  if n == 0:
    return n
  return n + sum_down(n - 1)


def test_recursion_past_max_stack_depth_names_function_and_bound():
  batched = vectorize.autobatch(sum_down, max_stack_depth=5)
  np.testing.assert_array_equal(np.asarray(batched(i32(3, 4, 0))), [6, 10, 0])
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"recursion of sum_down exceeded max_stack_depth=5"):
    batched(i32(3, 9, 0))


def test_failures_inside_xla_then_check():
  batched = vectorize.autobatch(sum_down, max_stack_depth=5)
  results, failures = tf.function(batched.with_failures, jit_compile=True)(i32(3, 9, 0, 20))
  got = np.asarray(_tuple(results)[0])
  np.testing.assert_array_equal(got[[0, 2]], [6, 0])
  assert (got[[1, 3]] == np.iinfo(np.int32).min).all(), got
  np.testing.assert_array_equal(np.asarray(failures) != 0, [False, True, False, True])
  with pytest.raises(tf.errors.InvalidArgumentError, match="max_stack_depth"):
    batched.check(failures)
