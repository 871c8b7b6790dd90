"""Recursive per-example programs through `vectorize.autobatch` (the program-counter mode),
written from the README and `help(vectorize.autobatch)` alone.

Each program is written for ONE example in plain Python, batched with `autobatch`, and run
eagerly and under `tf.function(jit_compile=True)` (a representative of each kind inside a
plain `tf.function` too, see MODES) on a batch of several examples and on a batch of one;
the reference is the same function run per example, eagerly (and, where it is cheap, a
pure-Python computation too). Where floats flow, the gradient of the batched result is
compared with the per-example gradient.
"""
import math

import numpy as np
import pytest
import tensorflow as tf

import vectorize

ALL_MODES = ["function", "xla"]
# Most programs run eagerly and under XLA; a representative of each kind (integer, captured
# tensors, parsing, graphs, float gradients, samplers, mutual recursion, tuples, the
# depth-limit error, loops) runs inside a tf.function instead of eagerly. The eager form runs
# the VM in a tf.function of autobatch's own, traced for a batch of None; the function form
# traces the same VM for the same signature inside the caller's function, and checks failures
# there with a graph assertion, which does not depend on the program.
MODES = ["eager", "xla"]
# A program whose construct another XLA run here or in tests/pc/test_autobatch.py compiles
# runs without XLA:
# - the same function: test_batch_of_one_under_xla (gcd, hanoi_moves),
#   test_xla_gradient_with_unknown_batch_signature (golden), tests/pc (abs_gcd, isqrt_ceil);
# - the same construct under XLA elsewhere here: tree recursion of int64 (binomial; not
#   hanoi_disk_moves), nested recursion (ackermann, hofstadter_female_male; not hofstadter_q),
#   a loop calling a recursion (catalan; not tree_height, nor the int32 sum_of_triangles),
#   an early return inside a loop (tests/pc's early_return; not bfs_distance nor
#   smallest_factor's), gradients of a float64 loop and recursion (newton_sqrt, power's
#   forwarding helper; not the quadrature's nor tan's continued fraction; golden's float32
#   one in its own test), per-example stateless draws (the random walk; not the rejection
#   sampler's);
# - in tests/pc, which runs it in every mode: a chained comparison over a captured tensor,
#   int64 results from literals, a forwarded tuple (the parser's XLA run returns the same
#   pair unpacked).
# Every program still runs eagerly, its gradient compared where floats flow.
NO_XLA = ["eager", "function"]
EAGER = ["eager"]


@pytest.fixture(autouse=True)
def _checked_mode(monkeypatch):
  # The users' conftest turns on the checked mode for every pfor; here every result is
  # compared with the per-example run already, and the check's loops would triple the time.
  monkeypatch.delenv("VECTORIZE_CHECKED", raising=False)


def _specs(args):
  return [tf.TensorSpec([None] + a.shape[1:].as_list(), a.dtype) for a in args]


def runner(batched, mode, args):
  """`batched` in the given form; the function form has one trace for every batch size."""
  if mode == "eager":
    return batched
  if mode == "function":
    return tf.function(batched, input_signature=_specs(args))
  return tf.function(batched, jit_compile=True)


def per_example(fn, *args):
  """The reference: `fn` called per example, eagerly, results stacked."""
  n = int(args[0].shape[0])
  outs = [fn(*[a[i] for a in args]) for i in range(n)]
  return tf.nest.map_structure(lambda *xs: np.stack([np.asarray(x) for x in xs]), *outs)


def assert_close(actual, expected, dtypes=None, rtol=None, atol=None):
  """Same structure and values; `dtypes` (a structure of dtypes) checks the batched dtypes."""
  if not isinstance(expected, tuple):
    expected = (expected,)
    actual = (actual,)
    if dtypes is not None:
      dtypes = (dtypes,)
  assert isinstance(actual, tuple) and len(actual) == len(expected), actual
  for k, (a, e) in enumerate(zip(actual, expected)):
    if dtypes is not None:
      assert a.dtype == dtypes[k], f"output {k}: dtype {a.dtype}, expected {dtypes[k]}"
    a = np.asarray(a)
    assert a.shape == e.shape, f"output {k}: shape {a.shape}, expected {e.shape}"
    if a.dtype.kind == "f":
      t = dict(rtol=1e-4, atol=1e-5) if a.dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
      if rtol is not None:
        t = dict(rtol=rtol, atol=atol or 0)
      np.testing.assert_allclose(a, e.astype(a.dtype), err_msg=f"output {k}", **t)
    else:
      np.testing.assert_array_equal(a, e, err_msg=f"output {k}")


def check(fn, mode, *args, dtypes=None, rtol=None, atol=None, expected=None, grad=False,
          grad_rtol=None, expected_grad=None, **kw):
  """autobatch(fn) on `args` against the per-example run (or `expected`).

  The batch of several runs in `mode`, with the gradient of the sum of the first output
  with respect to the first input when `grad` (compared with per-example gradients); a
  batch of one (the first row) runs too, except under XLA, where it would only compile
  the same program again for another shape.
  """
  batched = vectorize.autobatch(fn, **kw)
  x = args[0]

  def forward_and_grad(*cols):
    if not grad:
      return batched(*cols), None
    with tf.GradientTape() as tape:
      tape.watch(cols[0])
      out = batched(*cols)
      s = tf.reduce_sum(out[0] if isinstance(out, tuple) else out)
    return out, tape.gradient(s, cols[0])

  if mode == "eager":
    run = forward_and_grad
  else:
    # The function form: one trace for every batch size. Under XLA, concrete shapes
    # (test_xla_gradient_with_unknown_batch_signature takes an unknown batch there).
    run = tf.function(forward_and_grad, input_signature=_specs(args) if mode == "function"
                      else None, jit_compile=(mode == "xla"))
  batches = [args] if mode == "xla" else [args, tuple(a[:1] for a in args)]
  for cols in batches:
    n = int(cols[0].shape[0])
    ref = per_example(fn, *cols) if expected is None else tf.nest.map_structure(
        lambda e: np.asarray(e)[:n], expected)
    got, g = run(*cols)
    assert_close(got, ref, dtypes, rtol=rtol, atol=atol)
    if grad:
      assert g is not None, "no gradient reaches the input"
      want = (grads_per_example(fn, *cols) if expected_grad is None
              else np.asarray(expected_grad)[:n])
      t = dict(rtol=1e-4, atol=1e-5) if x.dtype == tf.float32 else dict(rtol=1e-8, atol=1e-10)
      if grad_rtol is not None:
        t = dict(rtol=grad_rtol, atol=grad_rtol)
      np.testing.assert_allclose(np.asarray(g), want, err_msg="gradient", **t)
  return batched


def grads_per_example(fn, x, *rest):
  gs = []
  for i in range(int(x.shape[0])):
    xi = x[i]
    with tf.GradientTape() as tape:
      tape.watch(xi)
      out = fn(xi, *[r[i] for r in rest])
      out = out[0] if isinstance(out, tuple) else out
      out = tf.reduce_sum(out)
    g = tape.gradient(out, xi)
    gs.append(np.zeros_like(np.asarray(xi)) if g is None else np.asarray(g))
  return np.stack(gs)


# ---------------------------------------------------------------------------------------
# Integer recursions
# ---------------------------------------------------------------------------------------

def ackermann(m, n):
  if m == 0:
    return n + 1
  if n == 0:
    return ackermann(m - 1, 1)
  return ackermann(m - 1, ackermann(m, n - 1))


@pytest.mark.parametrize("mode", MODES)
def test_ackermann_small(mode):
  m = tf.constant([2, 0, 1, 2, 1], tf.int32)
  n = tf.constant([2, 4, 3, 0, 0], tf.int32)
  py = {(0, 4): 5, (1, 3): 5, (2, 2): 7, (2, 0): 3, (1, 0): 2}
  want = np.array([py[(int(a), int(b))] for a, b in zip(m, n)], np.int32)
  check(ackermann, mode, m, n, dtypes=tf.int32, expected=want, max_stack_depth=40)


def collatz_len(n):
  if n == 1:
    return tf.constant(0, tf.int64)
  if n % 2 == 0:
    return 1 + collatz_len(n // 2)
  return 1 + collatz_len(3 * n + 1)


def _collatz_py(n):
  k = 0
  while n != 1:
    n = n // 2 if n % 2 == 0 else 3 * n + 1
    k += 1
  return k


@pytest.mark.parametrize("mode", MODES)
def test_collatz_length_int64(mode):
  n = tf.constant([27, 1, 6, 97, 2 ** 33 + 1] + list(range(2, 30, 2)), tf.int64)  # 2**33+1: int64
  want = np.array([_collatz_py(int(v)) for v in n.numpy()], np.int64)
  check(collatz_len, mode, n, dtypes=tf.int64, expected=want, max_stack_depth=200)


def gcd(a, b):
  if b == 0:
    return a
  return gcd(b, a % b)


@pytest.mark.parametrize("mode", NO_XLA)
def test_gcd_int32(mode):
  a = tf.constant([48, 17, 0, 1071, 7], tf.int32)
  b = tf.constant([18, 5, 9, 462, 0], tf.int32)
  want = np.array([math.gcd(int(x), int(y)) for x, y in zip(a, b)], np.int32)
  check(gcd, mode, a, b, dtypes=tf.int32, expected=want, max_stack_depth=30)


def binomial(n, k):
  if k == 0 or k == n:
    return tf.ones_like(n)
  return binomial(n - 1, k - 1) + binomial(n - 1, k)


@pytest.mark.parametrize("mode", MODES)
def test_binomial_pascal_int64(mode):
  n = tf.constant([5, 8, 0, 7, 6], tf.int64)
  k = tf.constant([2, 4, 0, 7, 1], tf.int64)
  want = np.array([math.comb(int(a), int(b)) for a, b in zip(n, k)], np.int64)
  check(binomial, mode, n, k, dtypes=tf.int64, expected=want, max_stack_depth=20)


def catalan(n):
  if n <= 1:
    return tf.ones_like(n)
  total = tf.zeros_like(n)
  for i in range(n):
    total += catalan(i) * catalan(n - 1 - i)
  return total


@pytest.mark.parametrize("mode", MODES)
def test_catalan_for_range_int32(mode):
  n = tf.constant([4, 0, 1, 5, 3], tf.int32)
  want = np.array([math.comb(2 * v, v) // (v + 1) for v in n.numpy()], np.int32)
  check(catalan, mode, n, dtypes=tf.int32, expected=want, max_stack_depth=20)


def hanoi_moves(n):
  if n == 0:
    return tf.zeros_like(n)
  return 2 * hanoi_moves(n - 1) + 1


@pytest.mark.parametrize("mode", EAGER)
def test_hanoi_move_count_int64(mode):
  n = tf.constant([3, 40, 0, 62, 10], tf.int64)
  want = np.array([2 ** int(v) - 1 for v in n.numpy()], np.int64)
  check(hanoi_moves, mode, n, dtypes=tf.int64, expected=want, max_stack_depth=70)


def hanoi_disk_moves(n, disk):
  """Moves of disk `disk` (1 = smallest) when solving n disks: recursion in both halves."""
  if n == 0:
    return tf.zeros_like(n)
  here = tf.where(n == disk, tf.ones_like(n), tf.zeros_like(n))
  return hanoi_disk_moves(n - 1, disk) + here + hanoi_disk_moves(n - 1, disk)


@pytest.mark.parametrize("mode", EAGER)
def test_hanoi_moves_of_one_disk_int64(mode):
  n = tf.constant([4, 5, 1, 6], tf.int64)
  d = tf.constant([1, 5, 1, 3], tf.int64)
  want = np.array([2 ** int(a - b) if b <= a else 0 for a, b in zip(n.numpy(), d.numpy())],
                  np.int64)
  check(hanoi_disk_moves, mode, n, d, dtypes=tf.int64, expected=want, max_stack_depth=10)


# ---------------------------------------------------------------------------------------
# Sorting
# ---------------------------------------------------------------------------------------

_rng = np.random.default_rng(7)
N_SORT = 7
SORT_DATA = tf.constant(_rng.integers(0, 30, size=[5, N_SORT]).astype(np.int32))


def put(a, i, v):
  """a with a[i] = v (no subscript assignment in compiled functions)."""
  return tf.tensor_scatter_nd_update(a, tf.reshape(i, [1, 1]), tf.reshape(v, [1]))


def swap(a, i, j):
  ai = a[i]
  aj = a[j]
  return put(put(a, i, aj), j, ai)


def partition(a, lo, hi):
  pivot = a[hi]
  i = lo
  for j in range(lo, hi):
    if a[j] < pivot:
      a = swap(a, i, j)
      i += 1
  a = swap(a, i, hi)
  return a, i


def quicksort(a, lo, hi):
  if lo < hi:
    a, p = partition(a, lo, hi)
    a = quicksort(a, lo, p - 1)
    a = quicksort(a, p + 1, hi)
  return a


def sort_row(row):
  return quicksort(SORT_DATA[row], 0, N_SORT - 1)


@pytest.mark.parametrize("mode", ALL_MODES)
def test_quicksort_index_ranges_over_captured_tensor(mode):
  rows = tf.constant([3, 0, 4, 1], tf.int32)
  want = np.sort(SORT_DATA.numpy()[rows.numpy()], axis=1)
  check(sort_row, mode, rows, dtypes=tf.int32, expected=want, max_stack_depth=N_SORT + 2)


def merge(a, lo, mid, hi):
  out = a
  i = lo
  j = mid
  k = lo
  inversions = 0
  last = a.shape[0] - 1
  while k < hi:
    ai = a[tf.minimum(i, last)]   # no short circuit: read in range, then test
    aj = a[tf.minimum(j, last)]
    if j >= hi or (i < mid and ai <= aj):
      out = put(out, k, ai)
      i += 1
    else:
      out = put(out, k, aj)
      j += 1
      inversions += mid - i
    k += 1
  return out, inversions


def merge_sort(a, lo, hi):
  if hi - lo <= 1:
    return a, 0
  mid = (lo + hi) // 2
  a, c1 = merge_sort(a, lo, mid)
  a, c2 = merge_sort(a, mid, hi)
  a, c3 = merge(a, lo, mid, hi)
  return a, c1 + c2 + c3


def sort_weighted(x):
  s, inversions = merge_sort(x, 0, x.shape[0])
  return s * tf.range(1.0, 7.0), inversions


def _inversions(r):
  return sum(1 for p in range(len(r)) for q in range(p + 1, len(r)) if r[p] > r[q])


@pytest.mark.parametrize("mode", MODES)
def test_merge_sort_returns_values_and_inversions_float32(mode):
  x = tf.constant(_rng.normal(size=[4, 6]).astype(np.float32))
  want = (np.sort(x.numpy(), axis=1) * np.arange(1.0, 7.0), np.array([_inversions(r) for r in x.numpy()], np.int32))
  # The sorted values are a permutation of x: d sum(sorted * (1..6)) / dx is the rank + 1.
  rank = np.argsort(np.argsort(x.numpy(), axis=1), axis=1)
  check(sort_weighted, mode, x, dtypes=(tf.float32, tf.int32), expected=want, grad=True,
        expected_grad=(rank + 1).astype(np.float32), max_stack_depth=8, max_steps=300)


# ---------------------------------------------------------------------------------------
# Parsing: recursive descent over a token tensor, returning (value, position)
# ---------------------------------------------------------------------------------------

PLUS, TIMES, LP, RP, END = 10, 11, 12, 13, 14
_SYM = {"+": PLUS, "*": TIMES, "(": LP, ")": RP}
EXPRS = ["2+3*4", "(2+3)*4", "7", "((1+2)*(3+4)+5)*2", "9*9*9+1"]
L_TOK = 20
TOKENS = tf.constant([[int(c) if c.isdigit() else _SYM[c] for c in e] + [END] * (L_TOK - len(e))
                      for e in EXPRS], tf.int32)


def factor(row, pos):
  t = TOKENS[row, pos]
  if t == LP:
    v, pos = expr(row, pos + 1)
    return v, pos + 1            # skips ')'
  return tf.cast(t, tf.int64), pos + 1


def term(row, pos):
  v, pos = factor(row, pos)
  while TOKENS[row, pos] == TIMES:
    w, pos = factor(row, pos + 1)
    v = v * w
  return v, pos


def expr(row, pos):
  v, pos = term(row, pos)
  while TOKENS[row, pos] == PLUS:
    w, pos = term(row, pos + 1)
    v = v + w
  return v, pos


def parse(row):
  v, pos = expr(row, 0)
  return v, pos


@pytest.mark.parametrize("mode", ALL_MODES)
def test_recursive_descent_parser(mode):
  rows = tf.constant([3, 0, 1, 4, 2], tf.int32)
  want = (np.array([eval(EXPRS[r]) for r in rows.numpy()], np.int64),
          np.array([len(EXPRS[r]) for r in rows.numpy()], np.int32))
  check(parse, mode, rows, dtypes=(tf.int64, tf.int32), expected=want, max_stack_depth=20)


# ---------------------------------------------------------------------------------------
# Trees and graphs over captured tensors
# ---------------------------------------------------------------------------------------

PARENTS = tf.constant([[-1, 0, 0, 1, 3, 4, 2, 6],
                       [-1, 0, 1, 2, 3, 4, 5, 6],
                       [1, -1, 1, 1, 0, 0, 5, 5],
                       [-1, -1, 0, 1, 2, 3, 4, 5]], tf.int32)


def depth(tree, node):
  p = PARENTS[tree, node]
  if p < 0:
    return 0
  return 1 + depth(tree, p)


def tree_height(tree):
  best = 0
  for v in range(PARENTS.shape[1]):
    best = tf.maximum(best, depth(tree, v))
  return best


def _height_py(par):
  def d(v):
    return 0 if par[v] < 0 else 1 + d(par[v])
  return max(d(v) for v in range(len(par)))


@pytest.mark.parametrize("mode", EAGER)
def test_tree_depth_from_parent_array(mode):
  trees = tf.constant([1, 0, 2, 3], tf.int32)
  want = np.array([_height_py(PARENTS.numpy()[t].tolist()) for t in trees.numpy()], np.int32)
  check(tree_height, mode, trees, dtypes=tf.int32, expected=want, max_stack_depth=10)


N_NODES = 6
ADJ = tf.constant([
    [[0, 1, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0], [1, 0, 0, 1, 0, 0],
     [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 1, 0]],
    [[0, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0],
     [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]],
    [[0, 1, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0], [0, 0, 0, 1, 0, 0],
     [0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 0, 1], [1, 0, 0, 0, 0, 0]],
], tf.int32)


def dfs(g, v, visited):
  visited = put(visited, v, 1)
  for u in range(N_NODES):
    if ADJ[g, v, u] > 0 and visited[u] == 0:
      visited = dfs(g, u, visited)
  return visited


def reachable(g, s):
  visited = dfs(g, s, tf.zeros([N_NODES], tf.int32))
  return visited, tf.reduce_sum(visited)


def _reach_py(adj, s):
  seen, todo = {s}, [s]
  while todo:
    v = todo.pop()
    for u in range(len(adj)):
      if adj[v][u] and u not in seen:
        seen.add(u)
        todo.append(u)
  return [int(u in seen) for u in range(len(adj))]


@pytest.mark.parametrize("mode", ALL_MODES)
def test_dfs_reachability_on_adjacency_matrix(mode):
  g = tf.constant([0, 2, 1, 0, 1], tf.int32)
  s = tf.constant([0, 3, 0, 4, 2], tf.int32)
  vis = np.array([_reach_py(ADJ.numpy()[a].tolist(), int(b)) for a, b in zip(g.numpy(), s.numpy())],
                 np.int32)
  check(reachable, mode, g, s, dtypes=(tf.int32, tf.int32), expected=(vis, vis.sum(1)),
        max_stack_depth=N_NODES + 1)


def bfs_distance(g, s, t):
  dist = put(tf.fill([N_NODES], -1), s, 0)
  queue = put(tf.zeros([N_NODES], tf.int32), 0, s)
  head = 0
  tail = 1
  while head < tail:
    v = queue[head]
    head += 1
    if v == t:
      return dist[v]                    # early return inside the loop
    for u in range(N_NODES):
      if ADJ[g, v, u] > 0 and dist[u] < 0:
        dist = put(dist, u, dist[v] + 1)
        queue = put(queue, tail, u)
        tail += 1
  return -1


def _bfs_py(adj, s, t):
  dist, q = {s: 0}, [s]
  while q:
    v = q.pop(0)
    if v == t:
      return dist[v]
    for u in range(len(adj)):
      if adj[v][u] and u not in dist:
        dist[u] = dist[v] + 1
        q.append(u)
  return -1


@pytest.mark.parametrize("mode", EAGER)
def test_bfs_shortest_distance_early_return(mode):
  g = tf.constant([2, 0, 0, 1, 2], tf.int32)
  s = tf.constant([0, 0, 4, 0, 3], tf.int32)
  t = tf.constant([5, 3, 0, 4, 3], tf.int32)
  want = np.array([_bfs_py(ADJ.numpy()[a].tolist(), int(b), int(c))
                   for a, b, c in zip(g.numpy(), s.numpy(), t.numpy())], np.int32)
  # No recursion, but XLA needs a stack bound all the same (README: stacks grow only outside XLA).
  check(bfs_distance, mode, g, s, t, dtypes=tf.int32, expected=want, max_stack_depth=1)


def find_path(v, t, visited):
  visited = put(visited, v, 1)
  if v == t:
    return True, visited
  found = False
  for u in range(N_NODES):
    if ADJ[0, v, u] > 0 and visited[u] == 0:
      found, visited = find_path(u, t, visited)
      if found:
        break                           # stops the search after the recursive call
  return found, visited


def path_exists(s, t):
  found, visited = find_path(s, t, tf.zeros([N_NODES], tf.int32))
  return found, visited


def _find_py(adj, v, t, visited):
  visited[v] = 1
  if v == t:
    return True
  for u in range(len(adj)):
    if adj[v][u] and not visited[u]:
      if _find_py(adj, u, t, visited):
        return True
  return False


@pytest.mark.parametrize("mode", MODES)
def test_dfs_path_search_with_break_after_recursive_call(mode):
  s = tf.constant([0, 3, 4, 2, 0], tf.int32)
  t = tf.constant([3, 0, 5, 1, 5], tf.int32)
  found, visited = [], []
  for a, b in zip(s.numpy(), t.numpy()):
    vis = [0] * N_NODES
    found.append(_find_py(ADJ.numpy()[0].tolist(), int(a), int(b), vis))
    visited.append(vis)
  check(path_exists, mode, s, t, dtypes=(tf.bool, tf.int32),
        expected=(np.array(found), np.array(visited, np.int32)), max_stack_depth=N_NODES + 1)


LEFT = tf.constant([[1, 3, 5, -1, -1, -1, -1], [1, 2, 3, -1, -1, -1, -1]], tf.int32)
RIGHT = tf.constant([[2, 4, 6, -1, -1, -1, -1], [-1, -1, -1, -1, -1, -1, -1]], tf.int32)
VALS = tf.constant(_rng.normal(size=[2, 7]).astype(np.float32))


def tree_sum(t, node, scale):
  if node < 0:
    return 0.0
  here = scale * VALS[t, node] * VALS[t, node]
  return here + tree_sum(t, LEFT[t, node], scale * 0.5) + tree_sum(t, RIGHT[t, node], scale * 0.5)


def weighted_tree_sum(scale, t):
  return tree_sum(t, 0, scale)


@pytest.mark.parametrize("mode", ALL_MODES)
def test_binary_tree_sum_float32_with_gradient(mode):
  scale = tf.constant([1.0, -2.0, 0.5, 3.0], tf.float32)
  t = tf.constant([0, 1, 1, 0], tf.int32)
  check(weighted_tree_sum, mode, scale, t, dtypes=tf.float32, grad=True, max_stack_depth=6,
        max_steps=500)


# ---------------------------------------------------------------------------------------
# Numerical recursions with floats
# ---------------------------------------------------------------------------------------

def bump(x, c):
  return tf.exp(-c * x * x)


def simpson(a, b, c):
  m = (a + b) / 2
  return (b - a) / 6 * (bump(a, c) + 4 * bump(m, c) + bump(b, c))


def adaptive(a, b, c, eps, whole, depth):
  m = (a + b) / 2
  left = simpson(a, m, c)
  right = simpson(m, b, c)
  if depth <= 0 or abs(left + right - whole) <= 15 * eps:
    return left + right + (left + right - whole) / 15, 1
  il, nl = adaptive(a, m, c, eps / 2, left, depth - 1)
  ir, nr = adaptive(m, b, c, eps / 2, right, depth - 1)
  return il + ir, nl + nr


def integrate(c, b):
  a = tf.zeros_like(b)
  integral, count = adaptive(a, b, c, 1e-6, simpson(a, b, c), 10)
  return integral, count


@pytest.mark.parametrize("mode", EAGER)
def test_adaptive_quadrature_float64_returns_integral_and_count(mode):
  c = tf.constant([4.0, 0.5, 2.0], tf.float64)
  b = tf.constant([3.0, 1.0, 0.25], tf.float64)
  got = check(integrate, mode, c, b, dtypes=(tf.float64, tf.int32), grad=True,
              max_stack_depth=12, max_steps=300)
  # and it is the integral: sqrt(pi / c) / 2 * erf(sqrt(c) b)
  vals, _ = got(c, b)
  exact = [math.sqrt(math.pi / cc) / 2 * math.erf(math.sqrt(cc) * bb) for cc, bb in zip(c.numpy(), b.numpy())]
  np.testing.assert_allclose(vals.numpy(), exact, atol=1e-5)


def cube_root_bisect(c, tol):
  lo = tf.zeros_like(c)
  hi = tf.maximum(c, 1.0)
  while hi - lo > tol:
    mid = (lo + hi) / 2
    if mid * mid * mid > c:
      hi = mid
    else:
      lo = mid
  return (lo + hi) / 2


@pytest.mark.parametrize("mode", ALL_MODES)
def test_bisection_with_tolerance_float32(mode):
  c = tf.constant([8.0, 0.125, 27.0, 2.0, 1000.0], tf.float32)
  tol = tf.constant([1e-4, 1e-6, 1e-3, 1e-5, 1e-2], tf.float32)
  check(cube_root_bisect, mode, c, tol, dtypes=tf.float32, grad=True, max_stack_depth=1,
        max_steps=200)


def newton_sqrt(c):
  x = c + 1.0
  for k in range(60):
    nx = 0.5 * (x + c / x)
    if abs(nx - x) <= 1e-12 * nx:
      return nx, k                 # early return inside the loop
    x = nx
  return x, 60


@pytest.mark.parametrize("mode", MODES)
def test_newton_sqrt_float64_early_return(mode):
  c = tf.constant([2.0, 1e6, 0.25, 9.0, 1e-4], tf.float64)
  got = check(newton_sqrt, mode, c, dtypes=(tf.float64, tf.int32), grad=True, grad_rtol=1e-6,
              max_stack_depth=1, max_steps=200)
  vals, _ = got(c)
  np.testing.assert_allclose(vals.numpy(), np.sqrt(c.numpy()), rtol=1e-12)


def tan_cf(x2, k, n):
  """(2k+1) - x^2 / ((2k+3) - x^2 / ...), Lambert's continued fraction of tan."""
  if k >= n:
    return tf.cast(2 * k + 1, x2.dtype)
  return tf.cast(2 * k + 1, x2.dtype) - x2 / tan_cf(x2, k + 1, n)


def tan_lambert(x, n):
  return x / tan_cf(x * x, 0, n)


@pytest.mark.parametrize("mode", EAGER)
def test_continued_fraction_tan_float64(mode):
  x = tf.constant([0.3, -1.2, 1.0, 0.0, 1.5], tf.float64)
  n = tf.constant([12, 14, 3, 1, 15], tf.int32)
  got = check(tan_lambert, mode, x, n, dtypes=tf.float64, grad=True, max_stack_depth=16,
              max_steps=200)
  np.testing.assert_allclose(got(x[:2], n[:2]).numpy(), np.tan(x.numpy()[:2]), rtol=1e-12)


def golden(x, n):
  if n == 0:
    return x
  return x + 1.0 / golden(x, n - 1)


@pytest.mark.parametrize("mode", NO_XLA)
def test_continued_fraction_golden_float32(mode):
  x = tf.constant([1.0, 2.0, 0.5, 3.0], tf.float32)
  n = tf.constant([20, 0, 7, 3], tf.int64)
  check(golden, mode, x, n, dtypes=tf.float32, grad=True, max_stack_depth=22, max_steps=200)


# ---------------------------------------------------------------------------------------
# Samplers
# ---------------------------------------------------------------------------------------

def random_walk(seed, start):
  """A +-1 walk from `start` until it leaves (-5, 5), with per-example stateless draws."""
  pos = start
  steps = 0
  while abs(pos) < 5 and steps < 60:
    u = tf.random.stateless_uniform([], seed=tf.stack([seed, steps]))
    if u < 0.5:
      pos -= 1
    else:
      pos += 1
    steps += 1
  return pos, steps


def draw_table(sampler, seeds, steps, xla):
  """sampler(seed=[s, k]) for every s in seeds, k < steps, computed as TF computes it in the
  mode under test (XLA draws other numbers than the TF kernels, for plain TF code too)."""
  pairs = tf.constant([[s, k] for s in seeds for k in range(steps)], tf.int32)
  # (autograph=False: nothing to convert, and converting the lambda parses this module)
  f = tf.function(lambda p: tf.map_fn(sampler, p, fn_output_signature=sampler(p[0]).dtype),
                  jit_compile=xla, autograph=False)
  values = f(pairs).numpy().reshape(len(seeds), steps)
  return {s: values[i] for i, s in enumerate(seeds)}


@pytest.mark.parametrize("mode", ALL_MODES)
def test_random_walk_stateless_per_example_seeds(mode):
  seed = tf.constant([11, 12, 13, 14, 15], tf.int32)
  start = tf.constant([0, 4, -4, 2, 5], tf.int32)
  u = draw_table(lambda p: tf.random.stateless_uniform([], seed=p), seed.numpy().tolist(), 60,
                 mode == "xla")
  def walk_py(sd, pos):
    steps = 0
    while abs(pos) < 5 and steps < 60:
      pos += -1 if u[sd][steps] < 0.5 else 1
      steps += 1
    return pos, steps
  ref = [walk_py(int(a), int(b)) for a, b in zip(seed.numpy(), start.numpy())]
  want = tuple(np.array(v, np.int32) for v in zip(*ref))
  assert want[1].max() > 5                      # the walks do differ in length
  check(random_walk, mode, seed, start, dtypes=(tf.int32, tf.int32), expected=want,
        max_stack_depth=1)


def rejection(seed, lo, tries):
  """A normal draw above `lo` by rejection, recursing once per rejected draw."""
  z = tf.random.stateless_normal([], seed=tf.stack([seed, tries]), dtype=lo.dtype)
  if z > lo:
    return z, tries
  z, tries = rejection(seed, lo, tries + 1)
  return z, tries


def truncated_normal(lo, seed):
  z, tries = rejection(seed, lo, 0)
  return z, tries                      # (`return rejection(...)`: see test_forward_tuple_result)


@pytest.mark.parametrize("mode", EAGER)
def test_rejection_sampler_recursive_float64(mode):
  lo = tf.constant([1.0, -1.0, 0.5, 1.5], tf.float64)
  seed = tf.constant([3, 4, 5, 6], tf.int32)
  z = draw_table(lambda p: tf.random.stateless_normal([], seed=p, dtype=tf.float64),
                 seed.numpy().tolist(), 200, mode == "xla")
  def rejection_py(l, sd):
    k = 0
    while not z[sd][k] > l:
      k += 1
    return z[sd][k], k
  ref = [rejection_py(float(a), int(b)) for a, b in zip(lo.numpy(), seed.numpy())]
  want = (np.array([r[0] for r in ref]), np.array([r[1] for r in ref], np.int32))
  assert len(set(want[1].tolist())) > 1          # members recurse to different depths
  # normal draws may differ in the last bits from the kernel's (README, Limitations)
  check(truncated_normal, mode, lo, seed, dtypes=(tf.float64, tf.int32), expected=want,
        rtol=1e-9, atol=1e-9, max_stack_depth=200)


def lcg(state):
  return (1103515245 * state + 12345) % 2147483648


def hash_walk(state, n):
  """Recursive walk with a linear congruential generator (int64 state)."""
  if n == 0:
    return tf.zeros_like(state), state
  state = lcg(state)
  step = tf.where(state % 3 == 0, -1, 1)
  pos, state = hash_walk(state, n - 1)
  return pos + tf.cast(step, tf.int64), state


def _hash_walk_py(state, n):
  pos = 0
  for _ in range(n):
    state = (1103515245 * state + 12345) % 2147483648
    pos += -1 if state % 3 == 0 else 1
  return pos, state


@pytest.mark.parametrize("mode", MODES)
def test_hash_based_random_walk_int64(mode):
  state = tf.constant([1, 42, 2 ** 31 - 1, 7], tf.int64)
  n = tf.constant([10, 0, 25, 3], tf.int32)
  ref = [_hash_walk_py(int(s), int(k)) for s, k in zip(state.numpy(), n.numpy())]
  want = (np.array([r[0] for r in ref], np.int64), np.array([r[1] for r in ref], np.int64))
  check(hash_walk, mode, state, n, dtypes=(tf.int64, tf.int64), expected=want,
        max_stack_depth=30)


# ---------------------------------------------------------------------------------------
# Mutual recursion
# ---------------------------------------------------------------------------------------

def is_even(n):
  if n == 0:
    return True
  return is_odd(n - 1)


def is_odd(n):
  if n == 0:
    return False
  return is_even(n - 1)


def count_even_odd(n):
  evens = 0
  odds = 0
  for k in range(n):
    if is_even(k):
      evens += 1
    if is_odd(k):
      odds += 1
  return evens, odds, is_even(n)


@pytest.mark.parametrize("mode", ALL_MODES)
def test_mutual_recursion_is_even_is_odd_in_loop(mode):
  n = tf.constant([5, 0, 8, 1, 3], tf.int32)
  want = (np.array([(v + 1) // 2 for v in n.numpy()], np.int32),
          np.array([v // 2 for v in n.numpy()], np.int32),
          np.array([v % 2 == 0 for v in n.numpy()]))
  check(count_even_odd, mode, n, dtypes=(tf.int32, tf.int32, tf.bool), expected=want,
        max_stack_depth=12)


def hof_f(n):
  if n == 0:
    return tf.ones_like(n)
  return n - hof_m(hof_f(n - 1))


def hof_m(n):
  if n == 0:
    return tf.zeros_like(n)
  return n - hof_f(hof_m(n - 1))


def _hof_py(n):
  import functools
  @functools.lru_cache(None)
  def f(k):
    return 1 if k == 0 else k - m(f(k - 1))
  @functools.lru_cache(None)
  def m(k):
    return 0 if k == 0 else k - f(m(k - 1))
  return f(n), m(n)


def hofstadter_female_male(n):
  return hof_f(n), hof_m(n)


@pytest.mark.parametrize("mode", MODES)
def test_hofstadter_female_male_int64(mode):
  n = tf.constant([6, 0, 9, 1, 4], tf.int64)
  want = tuple(np.array(v, np.int64) for v in zip(*[_hof_py(int(k)) for k in n.numpy()]))
  check(hofstadter_female_male, mode, n, dtypes=(tf.int64, tf.int64), expected=want,
        max_stack_depth=40)


def hof_q(n):
  if n <= 2:
    return tf.ones_like(n)
  return hof_q(n - hof_q(n - 1)) + hof_q(n - hof_q(n - 2))


@pytest.mark.parametrize("mode", EAGER)
def test_hofstadter_q_int32(mode):
  n = tf.constant([9, 1, 6, 3], tf.int32)
  q = [0, 1, 1]
  for k in range(3, 12):
    q.append(q[k - q[k - 1]] + q[k - q[k - 2]])
  check(hof_q, mode, n, dtypes=tf.int32, expected=np.array([q[k] for k in n.numpy()], np.int32),
        max_stack_depth=20)


# ---------------------------------------------------------------------------------------
# Tuples, forwarding, loops with tensor bounds, early returns
# ---------------------------------------------------------------------------------------

def egcd(a, b):
  if b == 0:
    return a, 1, 0
  g, x, y = egcd(b, a % b)
  return g, y, x - (a // b) * y


def _egcd_py(a, b):
  if b == 0:
    return a, 1, 0
  g, x, y = _egcd_py(b, a % b)
  return g, y, x - (a // b) * y



@pytest.mark.parametrize("mode", ALL_MODES)
def test_extended_gcd_returns_triple_int64(mode):
  a = tf.constant([240, 17, 2 ** 40, 5, 0], tf.int64)
  b = tf.constant([46, 5, 6 ** 10, 0, 7], tf.int64)
  want = tuple(np.array(v, np.int64) for v in zip(*[_egcd_py(int(x), int(y))
                                                     for x, y in zip(a.numpy(), b.numpy())]))
  check(egcd, mode, a, b, dtypes=(tf.int64,) * 3, expected=want, max_stack_depth=40)


def power_acc(x, n, acc):
  if n == 0:
    return acc
  if n % 2 == 1:
    return power_acc(x * x, n // 2, acc * x)
  return power_acc(x * x, n // 2, acc)


def power(x, n):
  return power_acc(x, n, 1.0)                # forwards the helper's result


@pytest.mark.parametrize("mode", MODES)
def test_forwarding_return_helper_power_float64(mode):
  x = tf.constant([1.5, -2.0, 0.9, 3.0, 1.01], tf.float64)
  n = tf.constant([5, 3, 0, 10, 100], tf.int32)
  got = check(power, mode, x, n, dtypes=tf.float64, grad=True, max_stack_depth=10,
              max_steps=100)
  np.testing.assert_allclose(got(x, n).numpy(), x.numpy() ** n.numpy(), rtol=1e-12)


def tri(k):
  if k <= 0:
    return tf.zeros_like(k)
  return k + tri(k - 1)


def sum_of_triangles(n):
  total = tf.zeros_like(n)
  for k in range(n):
    total += tri(k)
  return total



@pytest.mark.parametrize("mode,dtype", [
    pytest.param("eager", tf.int32, id="eager-int32"),
    pytest.param("eager", tf.int64, id="eager-int64"),
    pytest.param("xla", tf.int64, id="xla-int64")])     # int32 under XLA: test_catalan_...
def test_for_range_tensor_n_calling_recursion(mode, dtype):
  n = tf.constant([4, 0, 7, 1, 10], dtype)
  want = np.array([sum(k * (k + 1) // 2 for k in range(v)) for v in n.numpy()],
                  dtype.as_numpy_dtype)
  check(sum_of_triangles, mode, n, dtypes=dtype, expected=want, max_stack_depth=12)


def smallest_factor(n):
  for d in range(2, n):
    if d * d > n:
      return n
    if n % d == 0:
      return d
  return n


def factorize_count(n):
  """Number of prime factors with multiplicity, recursing on n / smallest factor."""
  if n < 2:
    return tf.zeros_like(n)
  return 1 + factorize_count(n // smallest_factor(n))


@pytest.mark.parametrize("mode", EAGER)
def test_early_return_inside_for_loop_int32(mode):
  n = tf.constant([360, 97, 1, 2 ** 20, 9991, 2], tf.int32)
  def omega(v):
    c, d = 0, 2
    while v > 1:
      while v % d == 0:
        v //= d
        c += 1
      d += 1
    return c
  want = np.array([omega(int(v)) for v in n.numpy()], np.int32)
  check(factorize_count, mode, n, dtypes=tf.int32, expected=want, max_stack_depth=25)


THRESH_DATA = tf.constant(_rng.integers(0, 20, size=[4, 10]).astype(np.int32))


def first_run_above(row, thresh):
  """Index of the first run of two consecutive values above thresh, skipping odd values."""
  prev_ok = False
  found = -1
  for j in range(THRESH_DATA.shape[1]):
    v = THRESH_DATA[row, j]
    if v % 2 == 1:
      prev_ok = False
      continue
    if v > thresh and prev_ok:
      found = j - 1
      break
    prev_ok = v > thresh
  return found


def _first_run_py(r, t):
  prev_ok = False
  for j, v in enumerate(r):
    if v % 2 == 1:
      prev_ok = False
      continue
    if v > t and prev_ok:
      return j - 1
    prev_ok = v > t
  return -1


@pytest.mark.parametrize("mode", ALL_MODES)
def test_break_and_continue_over_captured_row(mode):
  row = tf.constant([0, 1, 2, 3, 0], tf.int32)
  th = tf.constant([3, 5, 1, 10, 19], tf.int32)
  want = np.array([_first_run_py(THRESH_DATA.numpy()[r].tolist(), t)
                   for r, t in zip(row.numpy(), th.numpy())], np.int32)
  check(first_run_above, mode, row, th, dtypes=tf.int32, expected=want, max_stack_depth=1)


def factorial(n):
  if n <= 1:
    return 1
  return n * factorial(n - 1)


def scaled_sum(n):
  s = 0
  for k in range(3):
    s += n * (k + 1)
  return s


@pytest.mark.parametrize("mode", EAGER)
def test_int64_accumulator_started_at_literal(mode):
  n = tf.constant([5, 2 ** 40, -3], tf.int64)
  check(scaled_sum, mode, n, dtypes=tf.int64, expected=6 * n.numpy(), max_stack_depth=1)


@pytest.mark.parametrize("mode", EAGER)
def test_factorial_int64_literal_base_case(mode):
  n = tf.constant([5, 0, 20, 1], tf.int64)
  want = np.array([math.factorial(int(v)) for v in n.numpy()], np.int64)
  check(factorial, mode, n, dtypes=tf.int64, expected=want, max_stack_depth=22)


# ---------------------------------------------------------------------------------------
# Forwarding a tuple-returning call; XLA gradients under an input_signature
# ---------------------------------------------------------------------------------------

def parse_forwarding(row):
  return expr(row, 0)                          # expr returns (value, position)


@pytest.mark.parametrize("mode", EAGER)
def test_forward_tuple_result(mode):
  rows = tf.constant([3, 0, 1], tf.int32)
  want = (np.array([eval(EXPRS[r]) for r in rows.numpy()], np.int64),
          np.array([len(EXPRS[r]) for r in rows.numpy()], np.int32))
  check(parse_forwarding, mode, rows, dtypes=(tf.int64, tf.int32), expected=want,
        max_stack_depth=20)


def test_xla_gradient_with_unknown_batch_signature():
  x = tf.constant([1.0, 2.0, 0.5, 3.0], tf.float32)
  n = tf.constant([20, 0, 7, 3], tf.int64)
  batched = vectorize.autobatch(golden, max_stack_depth=22, max_steps=200)

  @tf.function(jit_compile=True, input_signature=[tf.TensorSpec([None], tf.float32),
                                                  tf.TensorSpec([None], tf.int64)])
  def grad(x, n):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = tf.reduce_sum(batched(x, n))
    return tape.gradient(y, x)
  np.testing.assert_allclose(grad(x, n).numpy(), grads_per_example(golden, x, n), rtol=1e-4)


# ---------------------------------------------------------------------------------------
# Documented limits: clear errors
# ---------------------------------------------------------------------------------------

def doubling(x, n):
  if n == 0:
    return x
  return 2.0 * doubling(x, n - 1)


@pytest.mark.parametrize("mode", ALL_MODES)
def test_recursion_deeper_than_max_stack_depth(mode):
  batched = vectorize.autobatch(doubling, max_stack_depth=5)
  x = tf.constant([1.0, 1.5, 1.0], tf.float32)
  n = tf.constant([3, 9, 0], tf.int32)
  if mode == "xla":
    # README: under a caller's jit_compile=True nothing can raise; that member's result is NaN
    got = tf.function(batched, jit_compile=True)(x, n).numpy()
    np.testing.assert_array_equal(got[[0, 2]], [8.0, 1.0])
    assert np.isnan(got[1])
    return
  run = batched if mode == "eager" else tf.function(batched)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"recursion of doubling exceeded max_stack_depth=5"):
    run(x, n)


def test_autobatch_jit_compile_called_eagerly_raises_after_run():
  # README: `autobatch(..., jit_compile=True)` called eagerly raises after the compiled run
  batched = vectorize.autobatch(doubling, max_stack_depth=4, jit_compile=True)
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"max_stack_depth=4"):
    batched(tf.constant([1.0, 1.0]), tf.constant([2, 6]))
  np.testing.assert_array_equal(batched(tf.constant([1.0]), tf.constant([2])).numpy(), [4.0])


def set_first(a):
  if a[0] > 0:
    a[1] = 3.0
  return a


def test_subscript_assignment_is_refused():
  with pytest.raises(vectorize.ConversionError,
                     match=r"test_autobatch_programs.py:\d+: autobatch: assignment to a subscript"):
    vectorize.autobatch(set_first)(tf.ones([2, 3]))


def reverse_halves(x):
  if x.shape[0] <= 1:
    return x
  h = x.shape[0] // 2
  return tf.concat([reverse_halves(x[h:]), reverse_halves(x[:h])], 0)


def test_merge_sort_on_shrinking_halves_is_refused():
  # README: every variable keeps one static per-example shape
  with pytest.raises(vectorize.ConversionError, match=r"static shape"):
    vectorize.autobatch(reverse_halves)(tf.reshape(tf.range(8.0), [2, 4]))


def count_up(n):
  k = 0
  while k < n:
    k += 1
  return k


def test_max_steps_exceeded():
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"max_steps=10"):
    vectorize.autobatch(count_up, max_steps=10)(tf.constant([3, 50]))


def test_batch_of_one_under_xla():
  for fn, args, want in [
      (gcd, (tf.constant([1071]), tf.constant([462])), [21]),
      (parse, (tf.constant([3]),), ([eval(EXPRS[3])], [len(EXPRS[3])])),
      (hanoi_moves, (tf.constant([33], tf.int64),), [2 ** 33 - 1])]:
    got = tf.function(vectorize.autobatch(fn, max_stack_depth=40), jit_compile=True)(*args)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
      np.testing.assert_array_equal(g.numpy(), w)


# ---------------------------------------------------------------------------------------
# Per-example matrices
# ---------------------------------------------------------------------------------------

def matrix_power(m, n):
  if n == 0:
    return tf.eye(2, dtype=m.dtype)
  h = matrix_power(m, n // 2)
  h = tf.matmul(h, h)
  if n % 2 == 1:
    h = tf.matmul(h, m)
  return h


@pytest.mark.parametrize("mode", MODES)
def test_matrix_power_by_squaring_float32_with_gradient(mode):
  m = tf.constant([[[1.0, 1.0], [1.0, 0.0]], [[0.5, 0.1], [0.0, 1.2]], [[0.9, -0.3], [0.2, 0.7]]])
  n = tf.constant([10, 3, 0], tf.int32)
  got = check(matrix_power, mode, m, n, dtypes=tf.float32, grad=True, max_stack_depth=6,
              max_steps=60)
  np.testing.assert_allclose(got(m, n).numpy(),
                             [np.linalg.matrix_power(a, int(k)) for a, k in zip(m.numpy(), n.numpy())],
                             rtol=1e-5)


# ---------------------------------------------------------------------------------------
# Python idioms the README's grammar suggests (once refused with unclear errors)
# ---------------------------------------------------------------------------------------

def isqrt_ceil(n):
  k = 0
  while True:
    if k * k >= n:
      return k
    k += 1


@pytest.mark.parametrize("mode", NO_XLA)
def test_while_true_with_return_inside(mode):
  n = tf.constant([10, 0, 16, 17], tf.int32)
  check(isqrt_ceil, mode, n, dtypes=tf.int32, expected=np.array([4, 0, 4, 5], np.int32),
        max_stack_depth=1)


def in_range_count(lo, hi):
  """How many of the captured row's values v satisfy lo <= v < hi (a chained comparison)."""
  count = 0
  for j in range(THRESH_DATA.shape[1]):
    if lo <= THRESH_DATA[0, j] < hi:
      count += 1
  return count


@pytest.mark.parametrize("mode", EAGER)
def test_chained_comparison(mode):
  lo = tf.constant([0, 5, 10], tf.int32)
  hi = tf.constant([5, 15, 11], tf.int32)
  row = THRESH_DATA.numpy()[0]
  want = np.array([((a <= row) & (row < b)).sum() for a, b in zip(lo.numpy(), hi.numpy())],
                  np.int32)
  check(in_range_count, mode, lo, hi, dtypes=tf.int32, expected=want, max_stack_depth=1)


def abs_gcd(a, b):
  a = a if a >= 0 else -a                  # a conditional expression, no compiled call in it
  if b == 0:
    return a
  return abs_gcd(b, a % b)


@pytest.mark.parametrize("mode", EAGER)
def test_conditional_expression_without_calls(mode):
  a = tf.constant([-48, 17, 0], tf.int32)
  b = tf.constant([18, -5, 9], tf.int32)
  check(abs_gcd, mode, a, b, dtypes=tf.int32, max_stack_depth=30)
