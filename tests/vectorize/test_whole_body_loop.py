"""The whole body as a sequential loop (vectorize/whole_body_loop.py), checked against the
loop of `body(i)` calls."""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests import testing

V = tf.Variable(0)


def _doubling_body(i):
  """A variable assigned in a loop that only some iterations run (so the whole body runs as
  a sequential loop) and, in another loop, `c + tf.reduce_sum(c)`: a reduction over no
  axes, which Grappler rewrote into a dead value inside a lowered loop (fuzz seed 3100017,
  shrunk)."""
  def write(j, c):
    V.assign(c, read_value=False)
    return j + 1, c
  tf.while_loop(lambda j, c: j < i, write, (0, i))

  def double(j, c):
    return j + 1, c + tf.reduce_sum(c)
  return tf.while_loop(lambda j, c: j < 2, double, (0, i + 1))[1]


@pytest.mark.parametrize("mode", testing.MODES)
@pytest.mark.parametrize("n", [0, 3])
def test_body_survives_grappler(mode, n):
  """The sequential loop is emitted unlowered: lowered, the function returned an empty
  float32 tensor of shape (0,) for every output, the loop's and the others'."""
  expected = testing.sequential(_doubling_body, n, testing.output_spec(_doubling_body))
  final_state = V.numpy()
  V.assign(-1)
  got = testing.run_pfor(_doubling_body, n, mode=mode, fallback=True)
  testing.assert_allclose(got, expected)
  if n:
    assert V.numpy() == final_state


def test_body_survives_grappler_in_the_gradient():
  """Fuzz seed 3100017's mode: a gradient taken beside the loop (the loss reads no float
  output, so it is zeros of x's shape); the whole function's outputs were shape (0,)."""
  x = tf.constant(np.ones([4, 2], np.float32))

  @tf.function(autograph=False)
  def grad(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      out = vectorize.pfor(_doubling_body, 3, fallback_to_while_loop=True)
      loss = tf.reduce_sum(tf.cast(out, tf.float32)) * 0.0 + tf.reduce_sum(x[0])
    return tape.gradient(loss, x), out

  gradient, out = grad(x)
  expected = np.zeros([4, 2], np.float32)
  expected[0] = 1.0
  np.testing.assert_array_equal(gradient, expected)
  np.testing.assert_array_equal(out, testing.sequential(_doubling_body, 3))


W = tf.Variable(0.0)
X = tf.constant([[3, 1, 4], [1, 5, 9], [2, 6, 5], [3, 5, 8]])


def _sized_outputs_body(i):
  """A body that runs as a sequential loop (a variable assigned in a loop of i trips) and
  returns values of per-iteration size (`x[i, :i]`, a TensorArray's stack, a RaggedTensor
  it builds, split strings), a slice TF's shapes leave unknown but that has one size
  (`x[i, :2]`: dense, as the loop stacks it) and a float."""
  def write(j, c):
    W.assign(W * 0.5 + c)
    return j + 1, c * 2.0
  _, total = tf.while_loop(lambda j, c: j < i, write, (0, 1.0))
  ta = tf.TensorArray(tf.float32, size=i, element_shape=[2])
  ta = tf.while_loop(lambda j, ta: j < i,
                     lambda j, ta: (j + 1, ta.write(j, tf.fill([2], tf.cast(j, tf.float32)))),
                     (0, ta))[1]
  return {"prefix": X[i, :i],
          "stacked": ta.stack(),
          "built": tf.RaggedTensor.from_row_lengths(tf.range(i * 2), [i, i]),
          "words": tf.strings.split(tf.strings.as_string(tf.range(i + 1))),
          "pair": X[i, :2],
          "total": total}


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])
@pytest.mark.parametrize("n", [0, 1, 4])
def test_outputs_of_per_iteration_size(mode, n):
  """Ragged where the converted body would be (fuzz seed 3100301: 'Incompatible shapes
  during merge' before), dense where the loop is (a probe conversion tells them apart);
  the state the loop leaves."""
  W.assign(0.0)
  want = [_sized_outputs_body(tf.constant(i)) for i in range(n)]
  want_state = W.numpy()
  W.assign(0.0)
  got = testing.pfor_in_mode(_sized_outputs_body, n, mode, fallback=True)
  assert W.numpy() == want_state
  for key in ("total", "pair"):
    assert isinstance(got[key], tf.Tensor), (key, type(got[key]))
    assert got[key].shape[0] == n
    if n:
      np.testing.assert_array_equal(got[key], tf.stack([w[key] for w in want]))
  for key in ("prefix", "stacked", "built", "words"):
    assert isinstance(got[key], tf.RaggedTensor), (key, type(got[key]))
    assert got[key].shape[0] == n
    if n:
      assert got[key].to_list() == tf.ragged.stack([w[key] for w in want]).to_list(), key


LENGTHS = tf.constant([3, 0, 4, 2, 1])
XF = tf.reshape(tf.range(20.0) * 0.25 - 1.0, [5, 4])
C = tf.Variable(1.0)


def _cond_writing_and_returning_a_prefix(i):
  def long_():
    C.assign_add(1.0)
    return XF[i, :LENGTHS[i]]
  def short():
    C.assign(C * 2.0)
    return XF[i, :1]
  return tf.cond(LENGTHS[i] > 2, long_, short)


def _while_writing_and_carrying_a_growing_vector(i):
  def step(j, acc):
    C.assign_add(tf.reduce_sum(acc))
    return j + 1, tf.concat([acc, XF[i, j:j + 1]], 0)
  return tf.while_loop(lambda j, acc: j < LENGTHS[i], step,
                       (0, tf.zeros([0])), shape_invariants=(tf.TensorShape([]),
                                                             tf.TensorShape([None])))[1]


@pytest.mark.parametrize("mode", ["eager", "function", "dynamic"])
@pytest.mark.parametrize("n", [0, 1, 5])
@pytest.mark.parametrize("body", [_cond_writing_and_returning_a_prefix,
                                  _while_writing_and_carrying_a_growing_vector])
def test_control_flow_that_writes_and_then_cannot_convert_writes_once(body, mode, n):
  """A conditional or loop whose converter gives up (a ragged output) after emitting its
  branches' writes: falling back for it alone applied the writes twice (code-blind finding:
  v = 18 where the loop leaves 10); the whole body runs as a loop instead."""
  C.assign(1.0)
  want = [body(tf.constant(i)) for i in range(n)]
  want_state = C.numpy()
  C.assign(1.0)
  got = testing.pfor_in_mode(body, n, mode, fallback=True)
  np.testing.assert_allclose(C.numpy(), want_state, rtol=1e-6)
  assert got.shape[0] == n
  if n:
    assert got.to_list() == tf.ragged.stack(want).to_list()


R = tf.Variable(0.0)


def _shapes_from_the_index(i):
  """A variable assigned in a loop of per-iteration trips (the whole body runs as a loop)
  beside shapes derived from i: XLA compiles them only for a constant i (fuzz seeds
  3100085, 3100119, 3100856: 'Tried to explicitly squeeze dimension 0', 'must be a
  compile-time constant' in a while loop of the whole body)."""
  row = tf.squeeze(XF[i:i + 1], 0)

  def step(t):
    R.assign(R * 0.5 + row[t])
    return [t + 1]
  tf.while_loop(lambda t: t < LENGTHS[i], step, [0])
  ta = tf.TensorArray(tf.float32, size=i + 1).write(i, R.read_value())
  return row * R, tf.reduce_sum(ta.stack()), tf.range(i + 1)[:1]


@pytest.mark.parametrize("n", [0, 1, 5])
def test_whole_body_under_xla_runs_unrolled(n):
  R.assign(0.0)
  want = [_shapes_from_the_index(tf.constant(i)) for i in range(n)]
  want_state = R.numpy()
  R.assign(0.0)
  got = tf.function(lambda: vectorize.pfor(_shapes_from_the_index, n), jit_compile=True,
                    autograph=False)()
  np.testing.assert_allclose(R.numpy(), want_state, rtol=1e-6)
  for k, g in enumerate(got):
    assert g.shape[0] == n
    if n:
      np.testing.assert_allclose(g, tf.stack([w[k] for w in want]), rtol=1e-6)




def _switch_over_a_self_addition_and_a_write(x, v):
  """Fuzz seed 3102302, as shrunk: the whole body runs as a loop (a write in a loop only
  some iterations run); one branch of a switch_case holds a cond adding a value to its own
  sum. Lowered inside the branch's function, Grappler emptied it: "Retval[0] does not have
  value" in a TF1 session."""
  rows = tf.constant(np.random.default_rng(237270).standard_normal([4, 2, 2]), tf.float32)

  def body(i):
    row = tf.gather(rows, i)
    k = tf.squeeze(x[i:i + 1], 0)

    def adds():
      def twice():
        return k + tf.reduce_sum(tf.cast(k, tf.int32))
      return tf.cond(k > 1, twice, lambda: k)

    def writes():
      first = tf.gather(row, [0, 0, 0], axis=0)

      def step(j, c):
        v.assign(j, read_value=False)
        return j + 1, c
      tf.while_loop(lambda j, c: j < k, step, (0, first), maximum_iterations=5)
      return k
    return tf.switch_case(tf.math.floormod(i, 2), [adds, writes])
  return body




def _lowering_of_nested_conditionals(graph, inside=False):
  """The `_lower_using_switch_merge` attr of every If/Case inside another op's function."""
  found = []
  for op in graph.get_operations():
    if inside and op.type in ("If", "StatelessIf", "Case", "StatelessCase"):
      found.append(op.get_attr("_lower_using_switch_merge")
                   if "_lower_using_switch_merge" in op.node_def.attr else None)
    for value in op.node_def.attr.values():
      names = [value.func.name] if value.HasField("func") else [f.name for f in value.list.func]
      for name in filter(None, names):
        inner = graph._get_function(name).graph  # pylint: disable=protected-access
        found += _lowering_of_nested_conditionals(inner, True)
  return found


def test_the_whole_body_loop_keeps_nested_conditionals_functional():
  """Fuzz seed 3102302 (a TF1 session, n = 1): the cond nested in the switch_case's branch
  was defined lowered inside the branch's function, where no scan could mark it, and
  Grappler emptied it ("Retval[0] does not have value"). The whole body's loop now builds
  the user's control flow unlowered, at every depth."""
  x = tf.constant([4, 2, 3, 1])
  v = tf.Variable(2)
  body = _switch_over_a_self_addition_and_a_write(x, v)
  graph = tf.function(lambda: vectorize.pfor(body, 1)).get_concrete_function().graph
  lowering = _lowering_of_nested_conditionals(graph)
  assert lowering and not any(lowering), lowering

def test_a_nested_conditional_survives_grappler_in_a_function():
  x = tf.constant([4, 2, 3, 1])
  v = tf.Variable(2)
  body = _switch_over_a_self_addition_and_a_write(x, v)
  got = tf.function(lambda: vectorize.pfor(body, 4))().numpy()
  got_v = v.numpy()
  v.assign(2)
  want = np.stack([body(tf.constant(i)).numpy() for i in range(4)])
  np.testing.assert_array_equal(got, want)
  assert got_v == v.numpy()


def test_an_output_of_unknown_shape_under_xla_is_refused_not_padded():
  """Fuzz seed 3600387: the whole body runs as a loop under XLA (an assign in a branch) and
  returns `tf.where`'s coordinates, whose count differs per iteration: XLA stacked them
  padded with zeros, silently. Now a ConversionError says so."""
  v = tf.Variable(0.0)
  xs = tf.constant([[1.0, -1.0, 2.0], [-1.0, -1.0, 3.0], [4.0, 5.0, 6.0]])

  def body(i):
    c = tf.cond(xs[i, 0] > 0, lambda: v.assign(xs[i, 1]).value(), lambda: v.read_value())
    return tf.where(xs[i] > c * 0.0)     # converted after the refused update

  run = tf.function(lambda: vectorize.pfor(body, 3), jit_compile=True)
  with pytest.raises(vectorize.ConversionError, match="XLA would pad it"):
    run()
  v.assign(0.0)     # one iteration: nothing to differ from (fuzz seed 3630116)
  want = body(tf.constant(0))
  v.assign(0.0)
  got = tf.function(lambda: vectorize.pfor(body, 1), jit_compile=True)()
  np.testing.assert_array_equal(got, [want])
