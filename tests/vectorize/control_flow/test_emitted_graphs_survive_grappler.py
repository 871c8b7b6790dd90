"""Emitted graphs must give the loop's answer after Grappler rewrites them.

A Sum over no axes (`reduce_sum` of a per-iteration scalar) inside a branch taken by some
iterations, with n known only at run time, came back from Grappler (constant folding with
arithmetic and dependency optimization) as an empty float32 tensor: a silent wrong shape
and dtype. Reductions over no axes now emit nothing.
"""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

X = tf.constant([1, 3, 0, 2], tf.int32)


def _cond_sum(i):
  x = tf.gather(X, i)
  return tf.cond(tf.equal(tf.math.floormod(i, 2), 0), lambda: x + tf.reduce_sum(x), lambda: x)


def _switch_case_sum(i):
  x = tf.cast(tf.gather(X, i), tf.float32)
  return tf.switch_case(tf.math.floormod(i, 2),
                        [lambda: x + tf.reduce_sum(tf.cast(x, tf.float32)), lambda: x])


def _reductions_of_a_scalar(i):
  x = tf.cast(tf.gather(X, i), tf.float32)
  return tf.cond(x > 1.0, lambda: tf.reduce_max(x) + tf.reduce_mean(x) * tf.reduce_prod(x),
                 lambda: tf.reduce_min(x))


@pytest.mark.parametrize("mode", testing.MODES)
@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("body", [_cond_sum, _switch_case_sum, _reductions_of_a_scalar])
def test_reduction_over_no_axes_in_a_branch(body, n, mode):
  testing.assert_allclose(testing.run_pfor(body, n, mode), testing.sequential(body, n))


ROWS = tf.constant([[1, 2, 3], [10, 20, 30], [100, 200, 300], [5, 5, 5]])
IMAGES = tf.constant(np.random.default_rng(1).standard_normal([4, 3, 4]).astype(np.float32))


def _nested_write_body(v, images):
  """An update in a branch nested in a branch whose output a gradient reads: with n static
  the guards' branch indices are constants to Grappler, which dropped the update (fuzz seed
  3100399)."""
  def body(i):
    row, image = ROWS[i], images[i]

    def odd():
      tf.cond(i < 2, lambda: (v.assign_add(row), row)[1], lambda: row)
      return image * 2.0
    return tf.cond(tf.math.floormod(i, 2) == 1, odd, lambda: image)
  return body


@pytest.mark.parametrize("n", [2, 4])
def test_a_nested_update_survives_a_gradient_of_the_outer_branch(n):
  v = tf.Variable(tf.zeros([3], tf.int32))

  @tf.function(autograph=False)
  def gradient(images):
    with tf.GradientTape() as tape:
      tape.watch(images)
      out = vectorize.pfor(_nested_write_body(v, images), n, fallback_to_while_loop=False)
      loss = tf.reduce_sum(out * out)
    return tape.gradient(loss, images)   # IndexedSlices: densified inside, it hid the bug

  actual = tf.convert_to_tensor(gradient(IMAGES))
  np.testing.assert_array_equal(v.numpy(), ROWS[1].numpy())
  np.testing.assert_allclose(actual, 2.0 * IMAGES * np.where(
      (np.arange(4) % 2 == 1) & (np.arange(4) < n), 4.0, 1.0)[:, None, None] *
      (np.arange(4) < n)[:, None, None], rtol=1e-6)


A = tf.constant(3.0)
FLAG = tf.Variable(True)
V = tf.Variable(0)


def _invariant_cond_adding_a_scalar_to_itself(i):
  """A loop-invariant tf.cond, copied as it is: lowered, Grappler made it an empty float32
  (0,) in any tf.function (plain TF's too; the README said to leave the reduction out)."""
  return tf.cond(FLAG, lambda: A + tf.reduce_sum(A), lambda: A) + tf.cast(i, tf.float32)


def _update_in_a_cond_in_an_invariant_loop(i):
  """Fuzz seed 3100843, shrunk: an invariant cond inside an invariant while loop adds the
  counter to itself (`j + tf.reduce_sum(tf.cast(j, tf.int32))`) and updates a variable;
  lowered, the function returned (0,) float32 for the loop's other value."""
  def step(j, c):
    def update():
      total = j + tf.reduce_sum(tf.cast(j, tf.int32))
      V.assign_add(total)
      return total
    tf.cond(j > 0, update, lambda: j)
    return j + 1, c + tf.cast(i, tf.float32)
  return tf.while_loop(lambda j, c: j < 2, step, (0, tf.zeros([4, 3])),
                       maximum_iterations=5)[1]


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])
@pytest.mark.parametrize("n", [0, 3])
@pytest.mark.parametrize("body", [_invariant_cond_adding_a_scalar_to_itself,
                                  _update_in_a_cond_in_an_invariant_loop])
def test_a_value_added_to_itself_through_a_no_op(body, n, mode):
  V.assign(0)
  want = testing.sequential(body, n, testing.output_spec(body))
  want_state = V.numpy()
  V.assign(0)
  testing.assert_allclose(testing.run_pfor(body, n, mode), want)
  assert V.numpy() == want_state


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])
@pytest.mark.parametrize("n", [0, 1, 3])
def test_a_loop_invariant_cond_that_adds_a_value_to_itself_and_writes(n, mode):
  """Fuzz seed 3102002: a cond on a loop-invariant predicate, whose branch adds a scalar to
  its own sum and updates a variable. The cond converter's own conditional was lowered, and
  Grappler emptied the whole function: every output came back float32 (0,) and the update
  was lost."""
  def run(pfor_or_loop):
    total = tf.Variable(0)
    weights = tf.Variable([0.5, -0.25, 1.0])

    def body(i):
      del i
      size = tf.size(tf.strings.split(tf.constant("a b c")))
      read = tf.identity(weights)

      def add():
        step = size + tf.reduce_sum(tf.cast(size, tf.int32))
        total.assign_add(step)
        return step
      tf.cond(tf.reduce_sum(read) > 0.0, add, lambda: size)
      return read
    return pfor_or_loop(body), total.numpy()

  got, got_total = run(lambda body: testing.run_pfor(body, n, mode))
  want, want_total = run(lambda body: testing.sequential(
      body, n, output_spec=tf.TensorSpec([3], tf.float32)))
  testing.assert_allclose(got, want)
  assert got_total == want_total == 6 * n


PICKS = tf.constant([3, 0, 2, 0])


def _update_in_a_called_functions_unused_cond(total):
  def body(i):
    size = tf.size(tf.strings.split(tf.constant("ab")))

    @tf.function(autograph=False)
    def count(q):
      def add():
        step = q + tf.reduce_sum(tf.cast(q, tf.int32))
        total.assign_add(step)
        return step
      tf.cond(tf.gather(PICKS, i) > 1, add, lambda: q)   # its output unused
      return q
    count(size)
    return tf.cast(i, tf.float32)
  return body


@pytest.mark.unchecked   # the checked mode's own loop loses the update too, and says they differ
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_an_update_grappler_drops_from_the_loop_is_applied(mode):
  """Fuzz seed 3410663: TF 2.21's Grappler drops the update of the taken branch of a cond
  whose output is unused (the value added to its own sum) in a tf.function the body calls,
  so the loop (eager or traced) leaves the variable unchanged. pfor's graph applies it: the
  program's meaning, which the loop gives without Grappler."""
  total = tf.Variable(0)
  body = _update_in_a_called_functions_unused_cond(total)
  [body(tf.constant(k)) for k in range(3)]                 # pylint: disable=expression-not-assigned
  with_grappler = total.numpy()
  total.assign(0)
  options = tf.config.optimizer.get_experimental_options()
  tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
  try:
    [body(tf.constant(k)) for k in range(3)]               # pylint: disable=expression-not-assigned
  finally:
    tf.config.optimizer.set_experimental_options(dict(options, disable_meta_optimizer=False))
  meant = total.numpy()
  total.assign(0)
  np.testing.assert_allclose(testing.run_pfor(body, 3, mode), [0.0, 1.0, 2.0])
  assert meant == 4 and total.numpy() == meant    # iterations 0 and 2 pick more than 1: +2 each
  assert with_grappler == 0, "TF's Grappler bug is fixed: drop this README caveat"


# Lowered, a loop is shape-inferred by Grappler from its first iteration: a value sized from
# a loop variable whose shape changes (the live lanes of a loop of per-iteration trips) kept
# the first iteration's size, and a RaggedRange got starts and limits of different sizes
# (fuzz seed 3200748; `graph_io.while_loop`).
WORDS = tf.constant([[1, 2, -1, 3], [-2, 4, 5, -1], [1, 1, 1, 1], [-1, -1, 2, -3]])
COUNTER = tf.Variable([[0.5]])


def _ragged_read_in_a_loop_of_per_iteration_trips(i):
  row = WORDS[i]
  words = tf.strings.split(tf.strings.reduce_join(tf.where(row > 0, "ab", " "), separator=""))
  lengths = tf.strings.length(words)                 # per-iteration length: ragged

  def step(j, c):
    def count():
      total = tf.reduce_mean(tf.cast(tf.cumsum(lengths, axis=0), tf.float32))
      COUNTER.assign_sub([[total]], read_value=False)
      return total
    c = c + tf.cond(i < 1, count, lambda: 1.0)
    return j + 1, c
  return tf.while_loop(lambda j, c: j < tf.maximum(i, 1), step, (0, 0.0),
                       maximum_iterations=5)[1]


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("n", [1, 4])
def test_ragged_value_read_in_a_loop_of_per_iteration_trips(n, mode):
  body = _ragged_read_in_a_loop_of_per_iteration_trips
  start = COUNTER.numpy()
  expected = testing.sequential(body, n)
  expected_counter = COUNTER.numpy()
  COUNTER.assign(start)
  testing.assert_allclose(testing.run_pfor(body, n, mode), expected)
  np.testing.assert_allclose(COUNTER.numpy(), expected_counter, rtol=1e-6)


def test_loop_variables_of_changing_shape_keep_no_folded_size():
  """`tf.size(tf.range(tf.size(live)))` in a loop whose `live` shrinks from [1] to []."""
  from vectorize import graph_io  # pylint: disable=g-import-not-at-top

  @tf.function
  def count():
    def body(j, live, total):
      kept = tf.reshape(tf.where(live < 0), [-1])
      return j + 1, tf.gather(live, kept), total + tf.size(tf.range(tf.size(live)))
    return graph_io.while_loop(lambda j, live, total: j < 3, body, (0, tf.range(1), 0),
                               shape_invariants=(tf.TensorShape([]), tf.TensorShape([None]),
                                                 tf.TensorShape([])))[2]
  assert count().numpy() == 1
