"""Recursive per-example programs through `vectorize.autobatch`, written from the README alone
(section "Recursive programs: `autobatch` (program-counter mode)").

Emphasis: an `if`/`else` whose two branches call the SAME recursive function on different
variables and assign the results to different variables (NUTS tree doubling, bisection,
divide and conquer to one side), forwarded tuple results, mutual recursion, loops holding
recursive calls, early returns, depths that differ widely between members, and a small NUTS
step whose leapfrog takes a `tf.GradientTape` in a helper.

Every program is checked against the per-example loop (the function called eagerly on each
example's tensors, results stacked) in three forms: eagerly, in a `tf.function` traced for a
batch of `None` (called at two batch sizes, one trace), and in `tf.function(jit_compile=True)`.
Where floats flow, gradients w.r.t. float inputs are compared with per-example gradients
(eagerly and under XLA, the tape inside the compiled function), the outputs computed under
the tape compared too. Batches of 5 (6), 1-4 and 0.
"""
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.users._autobatch_harness import (  # pylint: disable=unused-import
    _no_checked_mode, _specs, _tuple, assert_same, check_grads, f32, first, i32, i64,
    per_example, run_forms)

MODES = ["eager", "function", "xla"]
# A program whose gradient test runs eagerly and under XLA checks its values in both there
# (check_grads compares the outputs too); its forward-only test takes the third form.
FORWARD_MODES = ["function"]


# ---------------------------------------------------------------------------------------
# 1. Bisection bracket: if/else calls the same function with different variables, results
#    assigned to different variables (`a` only in one branch, `b` only in the other), a
#    tuple-returning callee, `d - 1` in both branches, results used after the if.
# ---------------------------------------------------------------------------------------

def cbrt_bracket(lo, hi, target, d):
  if d == 0:
    return lo, hi, 0
  mid = 0.5 * (lo + hi)
  go_left = mid * mid * mid > target
  if go_left:
    lo, a, n = cbrt_bracket(lo, mid, target, d - 1)
    hi = a
  else:
    b, hi, n = cbrt_bracket(mid, hi, target, d - 1)
    lo = b
  return lo, hi, n + 1


CBRT_ARGS = (f32(0.0, 0.0, 1.0, 0.0, 2.0), f32(2.0, 3.0, 4.0, 1.0, 5.0),
             f32(1.1, 2.0, 8.5, 0.3, 30.0), i32(3, 7, 1, 0, 12))


@pytest.mark.parametrize("mode", FORWARD_MODES)
def test_cbrt_bracket_bisection(mode):
  run_forms(cbrt_bracket, mode, CBRT_ARGS, first(CBRT_ARGS, 2), max_stack_depth=14)


@pytest.mark.parametrize("mode", ["eager", "xla", "xla_dynamic"])
def test_cbrt_bracket_bisection_grad(mode):
  check_grads(cbrt_bracket, mode, CBRT_ARGS, wrt=[0, 1], max_stack_depth=14, max_steps=400)


# ---------------------------------------------------------------------------------------
# 2. Branches pass different constants to the same callee: f(x, -1.0) vs f(x, 1.0), on a
#    vector state of shape [5], tuple results (float vector, int count).
# ---------------------------------------------------------------------------------------

def spread(x, s, d):
  if d == 0:
    return x * s, 1
  if tf.reduce_sum(x) * s > 0.0:
    y, c = spread(x, -1.0, d - 1)
  else:
    y, c = spread(x, 1.0, d - 1)
  return tf.tanh(y) + 0.5 * x * s, c + 1


SPREAD_ARGS = (tf.constant([[0.5, -1.0, 2.0, 0.1, 0.3],
                            [-1.0, -2.0, 0.5, 0.0, 0.2],
                            [0.3, 0.3, 0.3, 0.3, 0.3],
                            [-0.1, 0.2, -0.4, 0.8, -1.6],
                            [2.0, 1.0, -3.5, 0.0, 0.25]]),
               f32(1.0, -1.0, 1.0, -1.0, 1.0), i32(0, 3, 6, 1, 9))


@pytest.mark.parametrize("mode", FORWARD_MODES)
def test_spread_signed_constant_branches(mode):
  run_forms(spread, mode, SPREAD_ARGS, first(SPREAD_ARGS, 3), max_stack_depth=12)


@pytest.mark.parametrize("mode", ["xla"])   # eager gradients: the cheaper programs
def test_spread_signed_constant_branches_grad(mode):
  check_grads(spread, mode, SPREAD_ARGS, wrt=[0, 1], max_stack_depth=12, max_steps=400)


# ---------------------------------------------------------------------------------------
# 3. The same argument expression computed in both branches (`x * 0.9`, `d - 1`), a single
#    result assigned to different variables, used after the if with a function of both.
# ---------------------------------------------------------------------------------------

def bounce(x, s, d):
  if d <= 0:
    return x * s
  left = x
  right = -x
  if x * s > 0.5:
    left = bounce(x * 0.9, -1.0, d - 1)
  else:
    right = bounce(x * 0.9, 1.0, d - 1)
  return left * 0.5 + right * 0.25 + tf.sin(x) * s


BOUNCE_ARGS = (f32(0.7, -2.0, 3.0, 0.1, -0.6), f32(1.0, 1.0, -1.0, -1.0, 1.0),
               i32(4, 0, 11, 2, 7))


@pytest.mark.parametrize("mode", FORWARD_MODES)
def test_bounce_same_expression_both_branches(mode):
  run_forms(bounce, mode, BOUNCE_ARGS, first(BOUNCE_ARGS, 1), max_stack_depth=14)


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
def test_bounce_same_expression_both_branches_grad(mode):
  check_grads(bounce, mode, BOUNCE_ARGS, wrt=[0, 1], max_stack_depth=14, max_steps=400)


# ---------------------------------------------------------------------------------------
# 4. Integer binary search over a captured sorted tensor (reads at per-example indices),
#    a tuple-returning callee, different variables in the two branches.
# ---------------------------------------------------------------------------------------

SORTED = tf.constant([1, 3, 3, 4, 8, 9, 12, 15, 15, 15, 20, 27, 31, 40, 41, 50], tf.int32)


def lower_bound(lo, hi, key):
  if lo >= hi:
    return lo, 0
  mid = (lo + hi) // 2
  if SORTED[mid] < key:
    lo, steps = lower_bound(mid + 1, hi, key)
  else:
    found, steps = lower_bound(lo, mid, key)
    lo = found
  return lo, steps + 1


LB_ARGS = (i32(0, 0, 4, 0, 0, 10), i32(16, 16, 16, 5, 16, 11), i32(15, 0, 16, 100, 51, 20))


@pytest.mark.parametrize("mode", MODES)
def test_lower_bound_captured_sorted(mode):
  run_forms(lower_bound, mode, LB_ARGS, first(LB_ARGS, 4), max_stack_depth=8)
  # and against the plain answer
  got = vectorize.autobatch(lower_bound, max_stack_depth=8)(*LB_ARGS)
  want = [np.searchsorted(SORTED.numpy()[lo:hi], k) + lo for lo, hi, k in
          zip(*[a.numpy() for a in LB_ARGS])]
  np.testing.assert_array_equal(got[0], want)


# ---------------------------------------------------------------------------------------
# 5. int64 recursion whose branches pass different int constants to the same callee.
# ---------------------------------------------------------------------------------------

def weighted_steps(n, w):
  if n <= 1:
    return w
  if n % 2 == 0:
    r = weighted_steps(n // 2, 1)
  else:
    r = weighted_steps(n - 1, 2)
  return r + w


WS_ARGS = (i64(1, 2, 7, 1000, 255, 2 ** 40 + 3), i64(5, 0, 1, 3, 2, 7))


@pytest.mark.parametrize("mode", MODES)
def test_weighted_steps_int64(mode):
  b = run_forms(weighted_steps, mode, WS_ARGS, first(WS_ARGS, 2), max_stack_depth=90)
  if mode == "eager":
    assert b(*WS_ARGS).dtype == tf.int64


# ---------------------------------------------------------------------------------------
# 6. A NUTS-like transition on a vector state of shape [3]: recursive tree doubling whose
#    two directions call build_tree on different variables and assign different results;
#    the leapfrog's gradient comes from a tf.GradientTape in a helper.
# ---------------------------------------------------------------------------------------

def grad_potential(q):
  prec = tf.constant([1.0, 2.0, 0.5])
  with tf.GradientTape() as tape:
    tape.watch(q)
    u = 0.5 * tf.reduce_sum(prec * q * q) + 0.05 * tf.reduce_sum(q * q * q * q)
  return tape.gradient(u, q)


def hamiltonian(q, p):
  prec = tf.constant([1.0, 2.0, 0.5])
  u = 0.5 * tf.reduce_sum(prec * q * q) + 0.05 * tf.reduce_sum(q * q * q * q)
  return u + 0.5 * tf.reduce_sum(p * p)


def leapfrog(q, p, eps):
  p = p - 0.5 * eps * grad_potential(q)
  q = q + eps * p
  p = p - 0.5 * eps * grad_potential(q)
  return q, p


def build_tree(q, p, v, depth, eps, h0):
  if depth == 0:
    q1, p1 = leapfrog(q, p, v * eps)
    h = hamiltonian(q1, p1)
    n = tf.cast(h <= h0 + 0.5, tf.int32)
    ok = h < h0 + 50.0
    return q1, p1, q1, p1, q1, n, ok
  qm, pm, qp, pp, qprop, n1, s1 = build_tree(q, p, v, depth - 1, eps, h0)
  if s1:
    if v < 0.0:
      qm, pm, _, _, q2, n2, s2 = build_tree(qm, pm, v, depth - 1, eps, h0)
    else:
      _, _, qp, pp, q2, n2, s2 = build_tree(qp, pp, v, depth - 1, eps, h0)
    if n2 > n1:
      qprop = q2
    n1 = n1 + n2
    dq = qp - qm
    s1 = s2 and tf.reduce_sum(dq * pm) >= 0.0 and tf.reduce_sum(dq * pp) >= 0.0
  return qm, pm, qp, pp, qprop, n1, s1


def nuts_step(q0, p0, eps, seed):
  h0 = hamiltonian(q0, p0)
  qm = q0
  pm = p0
  qp = q0
  pp = p0
  q = q0
  n = 1
  s = True
  j = 0
  while s and j < 4:
    v = 2.0 * tf.cast(tf.sin(seed * (j + 1.0)) > 0.0, tf.float32) - 1.0
    if v < 0.0:
      qm, pm, _, _, q2, n2, s2 = build_tree(qm, pm, v, j, eps, h0)
    else:
      _, _, qp, pp, q2, n2, s2 = build_tree(qp, pp, v, j, eps, h0)
    if s2 and n2 >= n:
      q = q2
    n = n + n2
    dq = qp - qm
    s = s2 and tf.reduce_sum(dq * pm) >= 0.0 and tf.reduce_sum(dq * pp) >= 0.0
    j = j + 1
  return q, n, j


NUTS_ARGS = (tf.constant([[0.5, -0.3, 1.0], [1.5, 0.2, -0.7], [0.0, 0.0, 0.1],
                          [-2.0, 1.0, 0.5], [0.3, 0.3, -0.3]]),
             tf.constant([[0.2, 0.9, -0.4], [-1.0, 0.1, 0.3], [0.8, -0.8, 0.05],
                          [0.1, 0.2, 0.3], [1.2, -0.5, 0.7]]),
             f32(0.3, 0.2, 0.5, 0.1, 0.4), f32(1.3, -0.7, 2.9, 0.4, -2.2))


@pytest.mark.parametrize("mode", FORWARD_MODES)
def test_nuts_step_vector_state(mode):
  run_forms(nuts_step, mode, NUTS_ARGS, first(NUTS_ARGS, 2), rtol=1e-4, atol=1e-5,
            max_stack_depth=6)


@pytest.mark.parametrize("mode", ["xla"])   # eager gradients: the cheaper programs
def test_nuts_step_vector_state_grad(mode):
  check_grads(nuts_step, mode, NUTS_ARGS, wrt=[0, 1, 2], rtol=1e-4, atol=1e-4,
              max_stack_depth=6, max_steps=800)


# ---------------------------------------------------------------------------------------
# 7. Divide and conquer over a per-example vector [5]: two recursive calls in one expression,
#    reads of the vector at per-example indices.
# ---------------------------------------------------------------------------------------

def range_energy(x, lo, hi):
  if hi - lo == 1:
    return x[lo] * x[lo]
  mid = (lo + hi) // 2
  return range_energy(x, lo, mid) + tf.sin(range_energy(x, mid, hi))


RE_ARGS = (tf.constant([[0.1, 0.2, 0.3, 0.4, 0.5], [1.0, -1.0, 2.0, -2.0, 0.5],
                        [0.0, 0.7, 0.0, -0.7, 3.0], [0.9, 0.8, 0.7, 0.6, 0.5],
                        [-0.2, 0.4, -0.6, 0.8, -1.0]]),
           i32(0, 1, 0, 4, 2), i32(5, 3, 1, 5, 5))


@pytest.mark.parametrize("mode", FORWARD_MODES)
def test_range_energy_divide_and_conquer(mode):
  run_forms(range_energy, mode, RE_ARGS, first(RE_ARGS, 3), max_stack_depth=6)


@pytest.mark.parametrize("mode", ["xla"])   # eager gradients: the cheaper programs
def test_range_energy_divide_and_conquer_grad(mode):
  check_grads(range_energy, mode, RE_ARGS, wrt=[0], max_stack_depth=6, max_steps=300)


# ---------------------------------------------------------------------------------------
# 8. Divide and conquer to one side: descend into the heavier half of a vector [5].
# ---------------------------------------------------------------------------------------

def heavy_leaf(x, lo, hi, d):
  if hi - lo <= 1:
    return lo, x[lo], d
  mid = (lo + hi) // 2
  idx = tf.range(5)
  left = tf.reduce_sum(tf.where((idx >= lo) & (idx < mid), x, 0.0))
  right = tf.reduce_sum(tf.where((idx >= mid) & (idx < hi), x, 0.0))
  if left >= right:
    i, v, d2 = heavy_leaf(x, lo, mid, d + 1)
  else:
    i, v, d2 = heavy_leaf(x, mid, hi, d + 1)
  return i, v * 2.0 - left * 0.1, d2


HL_ARGS = (RE_ARGS[0], i32(0, 0, 1, 0, 2), i32(5, 4, 5, 1, 5), i32(0, 0, 0, 0, 10))


@pytest.mark.parametrize("mode", FORWARD_MODES)
def test_heavy_leaf_one_sided(mode):
  run_forms(heavy_leaf, mode, HL_ARGS, first(HL_ARGS, 4), max_stack_depth=6)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_heavy_leaf_one_sided_grad(mode):
  check_grads(heavy_leaf, mode, HL_ARGS, wrt=[0], max_stack_depth=6, max_steps=200)


# ---------------------------------------------------------------------------------------
# 9. Mutual recursion, tuple results forwarded with `return other(...)`.
# ---------------------------------------------------------------------------------------

def ping(x, k, acc):
  if k <= 0:
    return x, acc
  return pong(tf.cos(x) + x * 0.5, k - 1, acc + x)


def pong(x, k, acc):
  if x > 1.0:
    return ping(x - 1.0, k - 1, acc * 0.9)
  return ping(x * x, k - 1, acc + 1.0)


PP_ARGS = (f32(0.3, 2.5, -1.0, 0.9, 1.7), i32(0, 1, 12, 5, 30), f32(0.0, 1.0, -2.0, 0.5, 0.0))


@pytest.mark.parametrize("mode", FORWARD_MODES)
def test_ping_pong_forwarded_tuples(mode):
  run_forms(ping, mode, PP_ARGS, first(PP_ARGS, 2), max_stack_depth=40)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_ping_pong_forwarded_tuples_grad(mode):
  check_grads(ping, mode, PP_ARGS, wrt=[0, 2], max_stack_depth=40, max_steps=600)


# ---------------------------------------------------------------------------------------
# 10. A loop calling a recursion whose depth differs widely between members (subtractive
#     gcd: depth 0 to ~60), with an early return from inside the loop.
# ---------------------------------------------------------------------------------------

def sub_gcd(a, b):
  if a == b:
    return a
  if a > b:
    return sub_gcd(a - b, b)
  return sub_gcd(a, b - a)


def first_coprime(xs, m):
  for k in range(5):
    g = sub_gcd(xs[k], m)
    if g == 1:
      return k, g
  return -1, 0


FC_ARGS = (tf.constant([[6, 9, 12, 7, 4], [60, 2, 3, 5, 7], [4, 8, 12, 16, 20],
                        [1, 1, 1, 1, 1], [30, 45, 61, 2, 3]], tf.int32),
           i32(6, 1, 4, 13, 15))


@pytest.mark.parametrize("mode", MODES)
def test_first_coprime_loop_with_deep_recursion(mode):
  run_forms(first_coprime, mode, FC_ARGS, first(FC_ARGS, 3), max_stack_depth=70)


# ---------------------------------------------------------------------------------------
# 11. A while loop holding a recursive call, with break: integer partitions.
# ---------------------------------------------------------------------------------------

def partitions(n, maxpart):
  if n == 0:
    return 1
  total = 0
  k = 1
  while k <= maxpart:
    if k > n:
      break
    total = total + partitions(n - k, k)
    k = k + 1
  return total


PART_ARGS = (i32(0, 1, 5, 8, 7), i32(0, 1, 5, 8, 3))


@pytest.mark.parametrize("mode", MODES)
def test_partitions_while_break(mode):
  run_forms(partitions, mode, PART_ARGS, first(PART_ARGS, 4), max_stack_depth=12)
  got = vectorize.autobatch(partitions, max_stack_depth=12)(*PART_ARGS)
  np.testing.assert_array_equal(got, [1, 1, 7, 22, 8])


# ---------------------------------------------------------------------------------------
# 12. A k-d descent on vector boxes [3]: the branches pass different boxes, assign different
#     result variables, and the other result is copied after the call.
# ---------------------------------------------------------------------------------------

def kd_cell(x, lo, hi, depth):
  if depth == 0:
    return lo, hi
  axis = depth % 3
  onehot = tf.one_hot(axis, 3)
  mid = 0.5 * (lo + hi)
  split = tf.reduce_sum(mid * onehot)
  if tf.reduce_sum(x * onehot) < split:
    lo, new_hi = kd_cell(x, lo, hi * (1.0 - onehot) + mid * onehot, depth - 1)
    hi = new_hi
  else:
    new_lo, hi = kd_cell(x, lo * (1.0 - onehot) + mid * onehot, hi, depth - 1)
    lo = new_lo
  return lo, hi


KD_ARGS = (tf.constant([[0.3, 0.7, 0.11], [0.9, 0.05, 0.6], [0.45, 0.45, 0.45],
                        [0.1, 0.2, 0.95], [0.66, 0.33, 0.01]]),
           tf.zeros([5, 3]), tf.ones([5, 3]) * f32(1.0, 1.0, 1.0, 1.0, 1.0)[:, None],
           i32(0, 1, 4, 7, 9))


@pytest.mark.parametrize("mode", FORWARD_MODES)
def test_kd_cell_vector_boxes(mode):
  run_forms(kd_cell, mode, KD_ARGS, first(KD_ARGS, 2), max_stack_depth=11)


@pytest.mark.parametrize("mode", ["xla"])   # eager gradients: the cheaper programs
def test_kd_cell_vector_boxes_grad(mode):
  check_grads(kd_cell, mode, KD_ARGS, wrt=[1, 2], max_stack_depth=11, max_steps=300)


# ---------------------------------------------------------------------------------------
# 13. Ternary search along a direction on a [5] state; single-value callee, both branches
#     assign `t`.
# ---------------------------------------------------------------------------------------

def objective(z):
  return tf.reduce_sum((z - 1.0) ** 2) + 0.1 * tf.reduce_sum(z ** 4)


def ternary(a, b, x0, u, d):
  if d == 0:
    return 0.5 * (a + b)
  m1 = a + (b - a) / 3.0
  m2 = b - (b - a) / 3.0
  f1 = objective(x0 + m1 * u)
  f2 = objective(x0 + m2 * u)
  if f1 < f2:
    t = ternary(a, m2, x0, u, d - 1)
  else:
    t = ternary(m1, b, x0, u, d - 1)
  return t


TS_ARGS = (f32(-2.0, -1.0, 0.0, -3.0, -0.5), f32(2.0, 3.0, 1.0, 3.0, 4.5),
           tf.constant([[0.0, 0.1, 0.2, 0.3, 0.4], [1.0, 1.0, 1.0, 1.0, 1.0],
                        [-1.0, 0.5, 0.0, 2.0, 0.3], [0.2, 0.2, 0.2, 0.2, 0.2],
                        [3.0, -3.0, 0.0, 0.0, 1.0]]),
           tf.constant([[1.0, 0.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.5, 0.5, 0.0],
                        [0.0, 1.0, -1.0, 0.0, 0.0], [0.3, -0.2, 0.1, 0.9, 0.4],
                        [-1.0, 1.0, 0.0, 0.5, 0.5]]),
           i32(0, 3, 8, 12, 5))


@pytest.mark.parametrize("mode", FORWARD_MODES)
def test_ternary_search_direction(mode):
  run_forms(ternary, mode, TS_ARGS, first(TS_ARGS, 1), max_stack_depth=14)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_ternary_search_direction_grad(mode):
  check_grads(ternary, mode, TS_ARGS, wrt=[0, 1, 2], max_stack_depth=14, max_steps=300)


# ---------------------------------------------------------------------------------------
# 14. Expression-tree evaluation over captured arrays at per-example node indices.
# ---------------------------------------------------------------------------------------

LEFT = tf.constant([1, 3, 5, -1, -1, 7, -1, -1, -1], tf.int32)
RIGHT = tf.constant([2, 4, 6, -1, -1, 8, -1, -1, -1], tf.int32)
OPS = tf.constant([1, 2, 1, 0, 0, 2, 0, 0, 0], tf.int32)
VALS = tf.constant([0.0, 0.0, 0.0, 1.5, -0.5, 0.0, 2.0, 0.25, 3.0], tf.float32)


def eval_node(i, x):
  if LEFT[i] < 0:
    return VALS[i] * x + 1.0
  a = eval_node(LEFT[i], x)
  b = eval_node(RIGHT[i], x)
  if OPS[i] == 1:
    return a + b
  return a * b


ET_ARGS = (i32(0, 3, 1, 5, 2), f32(0.5, -1.0, 2.0, 0.3, 1.1))


@pytest.mark.parametrize("mode", FORWARD_MODES)
def test_expression_tree_captured(mode):
  run_forms(eval_node, mode, ET_ARGS, first(ET_ARGS, 2), max_stack_depth=6)


@pytest.mark.parametrize("mode", ["xla"])   # eager gradients: the cheaper programs
def test_expression_tree_captured_grad(mode):
  check_grads(eval_node, mode, ET_ARGS, wrt=[1], max_stack_depth=6, max_steps=300)


# ---------------------------------------------------------------------------------------
# 15. Subset-sum count over an int vector [5]: early returns, two calls per level.
# ---------------------------------------------------------------------------------------

def count_subsets(xs, i, target):
  if target == 0:
    return 1
  if i >= 5 or target < 0:
    return 0
  return count_subsets(xs, i + 1, target - xs[i]) + count_subsets(xs, i + 1, target)


CS_ARGS = (tf.constant([[1, 2, 3, 4, 5], [2, 2, 2, 2, 2], [5, 1, 1, 3, 9], [7, 7, 7, 7, 7],
                        [1, 1, 1, 1, 1]], tf.int32),
           i32(0, 0, 1, 0, 2), i32(5, 4, 5, 0, 2))


@pytest.mark.parametrize("mode", MODES)
def test_count_subsets(mode):
  run_forms(count_subsets, mode, CS_ARGS, first(CS_ARGS, 4), max_stack_depth=8)


# ---------------------------------------------------------------------------------------
# 16. Early returns in a DFS over an implicit binary tree (found / pruned / recurse twice).
# ---------------------------------------------------------------------------------------

def find_depth(node, target, d):
  if node == target:
    return d
  if node > target:
    return -1
  r = find_depth(2 * node, target, d + 1)
  if r >= 0:
    return r
  return find_depth(2 * node + 1, target, d + 1)


FD_ARGS = (i32(1, 1, 1, 3, 2, 1), i32(1, 37, 6, 2, 21, 63), i32(0, 0, 0, 0, 5, 0))


@pytest.mark.parametrize("mode", MODES)
def test_find_depth_early_returns(mode):
  run_forms(find_depth, mode, FD_ARGS, first(FD_ARGS, 4), max_stack_depth=10)


# ---------------------------------------------------------------------------------------
# 17. Result variables assigned in only one branch each, both read after the if (float).
# ---------------------------------------------------------------------------------------

def climb(x, d):
  if d <= 0:
    return x
  left = x
  right = x
  if x < 0.0:
    left = climb(x + 1.0, d - 1)
  else:
    right = climb(x * 0.5 - 0.2, d - 1)
  return left * 0.5 + right * 0.25


CL_ARGS = (f32(-3.3, 0.7, 2.0, -0.1, 5.0), i32(6, 0, 3, 10, 20))


@pytest.mark.parametrize("mode", FORWARD_MODES)
def test_climb_one_sided_results(mode):
  run_forms(climb, mode, CL_ARGS, first(CL_ARGS, 2), max_stack_depth=22)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_climb_one_sided_results_grad(mode):
  check_grads(climb, mode, CL_ARGS, wrt=[0], max_stack_depth=22, max_steps=300)


# ---------------------------------------------------------------------------------------
# 18. McCarthy 91 on int64: nested recursion, the number of steps differs widely.
# ---------------------------------------------------------------------------------------

def mc91(n):
  if n > 100:
    return n - 10
  return mc91(mc91(n + 11))


MC_ARGS = (i64(150, 101, 100, 0, 57, 91),)


@pytest.mark.parametrize("mode", MODES)
def test_mccarthy91_int64(mode):
  run_forms(mc91, mode, MC_ARGS, first(MC_ARGS, 1), max_stack_depth=30)
  np.testing.assert_array_equal(vectorize.autobatch(mc91, max_stack_depth=30)(*MC_ARGS),
                                [140, 91, 91, 91, 91, 91])


# ---------------------------------------------------------------------------------------
# 19. A for loop over a tensor range with `continue`, calling a recursion in the body.
# ---------------------------------------------------------------------------------------

def power_rec(x, k):
  if k == 0:
    return 1.0
  half = power_rec(x, k // 2)
  if k % 2 == 0:
    return half * half
  return half * half * x


def even_series(x, n):
  total = tf.constant(0.0)
  for k in range(n):
    if k % 2 == 1:
      continue
    total = total + power_rec(x, k) / (tf.cast(k, tf.float32) + 1.0)
  return total


ES_ARGS = (f32(0.5, -1.2, 0.9, 2.0, 0.1), i32(0, 1, 7, 5, 12))


@pytest.mark.parametrize("mode", FORWARD_MODES)
def test_even_series_for_continue(mode):
  run_forms(even_series, mode, ES_ARGS, first(ES_ARGS, 3), max_stack_depth=8)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_even_series_for_continue_grad(mode):
  check_grads(even_series, mode, ES_ARGS, wrt=[0], max_stack_depth=8, max_steps=500)


# ---------------------------------------------------------------------------------------
# 20. Mutual recursion on a vector [3] where one side's branches forward different constants
#     to the other (`contract(v, -1.0, ...)` vs `contract(v * 1.5, 1.0, ...)`).
# ---------------------------------------------------------------------------------------

def expand(v, d):
  if d <= 0:
    return v, tf.reduce_sum(v)
  if tf.reduce_max(v) > 2.0:
    return contract(v, -1.0, d - 1)
  return contract(v * 1.5, 1.0, d - 1)


def contract(v, s, d):
  w, e = expand(v * 0.5 + 0.1 * s, d)
  return w, e + s


EX_ARGS = (tf.constant([[1.0, 2.0, 3.0], [0.1, 0.2, 0.3], [-1.0, 4.0, 0.0],
                        [2.5, 2.5, 2.5], [0.0, 0.0, 0.0]]), i32(0, 3, 6, 2, 9))


@pytest.mark.parametrize("mode", FORWARD_MODES)
def test_expand_contract_mutual(mode):
  run_forms(expand, mode, EX_ARGS, first(EX_ARGS, 3), max_stack_depth=24)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_expand_contract_mutual_grad(mode):
  check_grads(expand, mode, EX_ARGS, wrt=[0], max_stack_depth=24, max_steps=300)


# ---------------------------------------------------------------------------------------
# 21. A recursive descent tree on a [3] state with the gradient from a tape in a helper;
#     the two branches call the same function with different steps and assign different
#     tuple results.
# ---------------------------------------------------------------------------------------

def rosen_grad(x):
  with tf.GradientTape() as tape:
    tape.watch(x)
    f = tf.reduce_sum((x - 0.5) ** 2) + 0.5 * (x[0] * x[1] - x[2]) ** 2
  return tape.gradient(f, x)


def rosen_value(x):
  return tf.reduce_sum((x - 0.5) ** 2) + 0.5 * (x[0] * x[1] - x[2]) ** 2


def descend(x, step, d):
  if d == 0:
    return x, rosen_value(x)
  g = rosen_grad(x)
  if tf.reduce_sum(g * g) > 1.0:
    xa, fa = descend(x - step * g, step * 0.5, d - 1)
    x = xa
    fx = fa
  else:
    xb, fb = descend(x - 2.0 * step * g, step, d - 1)
    x = xb
    fx = fb + 0.0
  return x, fx


DE_ARGS = (tf.constant([[2.0, -1.0, 0.5], [0.5, 0.5, 0.25], [-1.5, 1.0, 0.5],
                        [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]),
           f32(0.2, 0.1, 0.1, 0.25, 0.15), i32(5, 0, 8, 3, 1))


@pytest.mark.parametrize("mode", FORWARD_MODES)
def test_descend_tree_with_tape_helper(mode):
  run_forms(descend, mode, DE_ARGS, first(DE_ARGS, 1), rtol=1e-4, atol=1e-5,
            max_stack_depth=10)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_descend_tree_with_tape_helper_grad(mode):
  check_grads(descend, mode, DE_ARGS, wrt=[0, 1], max_stack_depth=10, max_steps=300)


# ---------------------------------------------------------------------------------------
# 22. Binary-search a monotone float function, int count forwarded through a helper that
#     returns a tuple; the branch on a bool variable assigns `lo` in one, `hi` in the other.
# ---------------------------------------------------------------------------------------

def root_step(lo, hi, c, d):
  if d == 0:
    return 0.5 * (lo + hi), d
  return root_split(lo, hi, c, d)


def root_split(lo, hi, c, d):
  mid = 0.5 * (lo + hi)
  below = tf.exp(mid) - c < 0.0
  if below:
    lo = mid
  else:
    hi = mid
  r, k = root_step(lo, hi, c, d - 1)
  return r, k + 1


RS_ARGS = (f32(0.0, -1.0, 0.0, 1.0, -5.0), f32(3.0, 1.0, 1.0, 4.0, 5.0),
           f32(10.0, 1.0, 2.0, 20.0, 0.5), i32(10, 3, 0, 16, 20))


@pytest.mark.parametrize("mode", FORWARD_MODES)
def test_root_step_forwarded_helper(mode):
  run_forms(root_step, mode, RS_ARGS, first(RS_ARGS, 3), max_stack_depth=44)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_root_step_forwarded_helper_grad(mode):
  check_grads(root_step, mode, RS_ARGS, wrt=[0, 1], max_stack_depth=44, max_steps=300)


# ---------------------------------------------------------------------------------------
# More merged calls (an if/else calling the same function in both branches). For these the
# eager and XLA forms check the values and the gradients under one tape; the function form
# checks the values at two batch sizes through one trace.
# ---------------------------------------------------------------------------------------

def values_and_grads(fn, mode, args, wrt, **kw):
  if mode == "function":
    run_forms(fn, mode, args, first(args, 2), **kw)
  else:
    check_grads(fn, mode, args, wrt, **kw)


# 23. The branch condition is itself a result of the call in one branch (`go`), and the
#     other branch's results go to different variables (`y`, `z`).
def toggle(x, go, d):
  if d <= 0:
    return x, x > 0.5
  y = x
  z = False
  if go:
    x, go = toggle(x * 0.5, go, d - 1)
  else:
    y, z = toggle(x + 1.0, go, d - 1)
  if go:
    return x + y, z
  return x - y, go


TG_ARGS = (f32(1.0, -2.0, 0.5, 3.0, 0.2), tf.constant([True, False, True, False, True]),
           i32(3, 5, 0, 2, 7))


@pytest.mark.parametrize("mode", MODES)
def test_toggle_condition_reassigned_by_call(mode):
  values_and_grads(toggle, mode, TG_ARGS, [0], max_stack_depth=9, max_steps=300)


# 24. The branches pass the same two variables in swapped positions, and the result goes to
#     the variable that is an argument in the other branch.
def cross_args(a, b, d):
  if d <= 0:
    return a - b
  if a > b:
    a = cross_args(b, a * 0.5, d - 1)
  else:
    b = cross_args(a + 1.0, b, d - 1)
  return a * 2.0 + b


CA_ARGS = (f32(1.0, -2.0, 0.5, 3.3, 0.1), f32(0.3, 0.7, 2.5, -1.0, 0.01), i32(3, 5, 0, 2, 7))


@pytest.mark.parametrize("mode", MODES)
def test_cross_args_swapped(mode):
  values_and_grads(cross_args, mode, CA_ARGS, [0, 1], max_stack_depth=9, max_steps=300)


# 25. Tuple results in swapped positions: `a, b = f(...)` in one branch, `b, a = f(...)` in
#     the other.
def swap_res(x, y, d):
  if d <= 0:
    return x, y
  if x > y:
    a, b = swap_res(x - 1.0, y * 0.5, d - 1)
  else:
    b, a = swap_res(y + 0.5, x, d - 1)
  return a * 0.9, b + 0.1


@pytest.mark.parametrize("mode", MODES)
def test_swapped_tuple_results(mode):
  values_and_grads(swap_res, mode, CA_ARGS, [0, 1], max_stack_depth=9, max_steps=300)


# 26. A call in a return in one branch, an assignment in the other (float64 state).
def f64_bracket(x, lo, hi, d):
  if d == 0:
    return lo + hi * x
  mid = 0.5 * (lo + hi)
  if tf.math.log(mid + 3.0) < x:
    return f64_bracket(x, mid, hi, d - 1) + lo
  else:
    r = f64_bracket(x, lo, mid, d - 1)
  return r * hi


F64_ARGS = (tf.constant([1.0, -0.5, 0.3, 1.3, 0.9], tf.float64),
            tf.constant([0.0, -1.0, 0.0, 1.0, -2.0], tf.float64),
            tf.constant([2.0, 1.0, 1.0, 4.0, 5.0], tf.float64), i32(3, 5, 0, 12, 7))


@pytest.mark.parametrize("mode", MODES)
def test_float64_return_in_one_branch(mode):
  values_and_grads(f64_bracket, mode, F64_ARGS, [0, 1, 2], max_stack_depth=14,
                   max_steps=300)


# 27. Merged calls inside a while loop with a break after the call in one branch.
def damp(x, s, d):
  if d <= 0:
    return x
  return damp(x * 0.8 + 0.05 * s, s, d - 1)


def damped_walk(x, n):
  k = 0
  acc = 0.0
  while k < n:
    if x > 0.0:
      x = damp(x, -1.0, 3)
      if x < 0.1:
        break
    else:
      acc = damp(x, 1.0, 2) + acc
      x = x + 0.6
    k = k + 1
  return x, acc, k


DW_ARGS = (f32(1.2, -2.0, 0.5, 3.3, 0.05), i32(3, 5, 0, 6, 7))


@pytest.mark.parametrize("mode", MODES)
def test_damped_walk_loop_break(mode):
  values_and_grads(damped_walk, mode, DW_ARGS, [0], max_stack_depth=6, max_steps=500)


# 28. An int vector state [3]; the branches assign `v` and `w` and share `c`.
def int_vec(v, c, d):
  if d <= 0:
    return v, c
  if tf.reduce_sum(v) > 10:
    v, c = int_vec(v // 2, c + 1, d - 1)
  else:
    w, c = int_vec(v + 3, c, d - 1)
    v = w - 1
  return v, c


IV_ARGS = (tf.constant([[1, 2, 3], [10, 20, 30], [0, 0, 0], [5, 5, 1], [100, -3, 7]]),
           i32(0, 1, 2, 3, 4), i32(3, 5, 0, 2, 7))


@pytest.mark.parametrize("mode", MODES)
def test_int_vector_state(mode):
  run_forms(int_vec, mode, IV_ARGS, first(IV_ARGS, 2), max_stack_depth=9)


# 29. A bool and a float result, the bool negated in one branch only.
def bool_res(x, d):
  if d <= 0:
    return x > 0.0, x
  if x > 0.5:
    ok, y = bool_res(x - 1.0, d - 1)
  else:
    ok2, y = bool_res(x * 2.0 + 0.1, d - 1)
    ok = not ok2
  return ok, y * 1.5


BR_ARGS = (f32(1.0, -2.0, 0.5, 3.3, 0.1), i32(3, 5, 0, 2, 7))


@pytest.mark.parametrize("mode", MODES)
def test_bool_and_float_results(mode):
  values_and_grads(bool_res, mode, BR_ARGS, [0], max_stack_depth=9, max_steps=300)


# 30. An int literal (-1) in one branch and a float literal (2.5) in the other, for a float
#     parameter.
def lit_mix(x, s, d):
  if d <= 0:
    return x * s
  if x > 0.0:
    y = lit_mix(x - 0.4, -1, d - 1)
  else:
    y = lit_mix(x + 0.3, 2.5, d - 1)
  return y + s


LM_ARGS = (f32(1.0, -2.0, 0.5, 3.3, 0.1), f32(1.0, 2.0, -1.0, 0.5, 1.0), i32(3, 5, 0, 2, 7))


@pytest.mark.parametrize("mode", MODES)
def test_int_and_float_literal_arguments(mode):
  values_and_grads(lit_mix, mode, LM_ARGS, [0, 1], max_stack_depth=9, max_steps=300)


# 31. A tape in a helper called on different arguments in the two branches, vector [3].
def grad_sinq(q):
  with tf.GradientTape() as tape:
    tape.watch(q)
    e = tf.reduce_sum(tf.sin(q) * q)
  return tape.gradient(e, q)


def tape_both(q, d):
  if d <= 0:
    return q
  g = grad_sinq(q)
  if tf.reduce_sum(g) > 0.0:
    q1 = tape_both(q - 0.1 * grad_sinq(q * 0.5), d - 1)
    return q1
  else:
    q2 = tape_both(q + 0.05 * grad_sinq(q + 1.0), d - 1)
  return q2 * 0.9


TB_ARGS = (tf.constant([[1.0, 2.0, 3.0], [0.0, 0.0, 1.0], [-1.0, 1.0, -1.0],
                        [0.5, 0.5, 0.5], [3.0, 0.0, -2.0]]), i32(3, 5, 0, 2, 7))


@pytest.mark.parametrize("mode", MODES)
def test_tape_helper_in_both_branches(mode):
  values_and_grads(tape_both, mode, TB_ARGS, [0], max_stack_depth=9, max_steps=300)


# 32. A result assigned in one branch each and read later under the same condition: valid
#     Python (every read is guarded), run per example fine.
def guarded_results(x, c, d):
  if d <= 0:
    return x
  if c:
    a = guarded_results(x * 0.5 - 1.0, c, d - 1)
  else:
    b = guarded_results(x + 2.0, c, d - 1)
  if c:
    return a + 1.0
  return b * 0.5


GR_ARGS = (f32(1.0, -2.0, 0.5, 3.0, 0.0), tf.constant([True, False, True, False, True]),
           i32(3, 5, 0, 2, 7))


def test_guarded_one_branch_results_are_refused_naming_the_line_and_the_fix():
  """A documented limit (README: a variable must be assigned on every path that may reach
  a read of it): a clear refusal, not a wrong answer."""
  with pytest.raises(vectorize.ConversionError,
                     match=r"test_autobatch_programs12.py:\d+: autobatch: `a` may be used "
                           r"before it is assigned. Assign it on every path"):
    run_forms(guarded_results, "eager", GR_ARGS, max_stack_depth=9)


# ---------------------------------------------------------------------------------------
# Batch sizes: one under XLA (the other forms run their second batch inside run_forms), and
# an empty batch.
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("program", ["cbrt", "spread", "bounce"])
def test_batch_of_one_under_xla(program):
  fn, args, depth = {"cbrt": (cbrt_bracket, CBRT_ARGS, 14),
                     "spread": (spread, SPREAD_ARGS, 12),
                     "bounce": (bounce, BOUNCE_ARGS, 14)}[program]
  one = tuple(a[4:5] for a in args)
  run_forms(fn, "xla", one, rtol=1e-4, atol=1e-5, max_stack_depth=depth)


@pytest.mark.parametrize("mode", MODES)
def test_empty_batch(mode):
  args = first(SPREAD_ARGS, 0)
  batched = vectorize.autobatch(spread, max_stack_depth=12)
  if mode == "eager":
    run = batched
  elif mode == "function":
    run = tf.function(batched, input_signature=_specs(SPREAD_ARGS))
  else:
    run = tf.function(batched, jit_compile=True)
  y, c = run(*args)
  assert tuple(y.shape) == (0, 5) and tuple(c.shape) == (0,)
  np.testing.assert_array_equal(np.asarray(y), np.zeros([0, 5], np.float32))
  if mode == "function":   # the same trace, then a batch of 5
    assert_same(run(*SPREAD_ARGS), per_example(spread, *SPREAD_ARGS))


def test_depth_failures_inside_xla_and_eagerly():
  """Members deeper than max_stack_depth: NaN under XLA with failure codes, the others
  right; `check` raises outside; eagerly the call raises."""
  batched = vectorize.autobatch(climb, max_stack_depth=8)   # depths 6, 0, 3, 10, 20
  results, failures = tf.function(batched.with_failures, jit_compile=True)(*CL_ARGS)
  got = np.asarray(_tuple(results)[0])
  want = per_example(climb, *CL_ARGS)[0]
  np.testing.assert_allclose(got[:3], want[:3], rtol=1e-5, atol=1e-5)
  assert np.isnan(got[3:]).all(), got
  np.testing.assert_array_equal(np.asarray(failures) != 0, [False, False, False, True, True])
  with pytest.raises(tf.errors.InvalidArgumentError, match="max_stack_depth"):
    batched.check(failures)
  with pytest.raises(tf.errors.InvalidArgumentError, match="max_stack_depth"):
    batched(*CL_ARGS)
