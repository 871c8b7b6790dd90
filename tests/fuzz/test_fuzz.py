"""The fuzzer in CI: a fixed set of seeds, every mode, against the sequential loop.

A failing seed prints its program and the command that shrinks it to a repro. Seeds that
fail because of a bug not fixed yet are xfailed strictly, so a fix is noticed (remove the
mark then). Programs that use an op with no converter, or that the loop itself cannot run
(a generator bug), are skipped with the reason, not failed.
"""

import numpy as np
import pytest
import tensorflow as tf

import vectorize
from tests.fuzz import check, ir, programs, shrink

# The CI seeds (25 of the first pool, and 62, a known failure until Optionals per iteration),
# six of the newest pool (ragged values and late ops, programs.NEWEST_FROM), and one with pads
# by per-iteration paddings (PADDINGS_FROM). Campaigns outside CI run thousands more
# (`python -m tests.fuzz`).
SEEDS = list(range(0, 50, 2)) + [62] + list(range(1130000, 1130012, 2)) + [4200003]

# seed -> the failure kind, one line. Keep this short and honest: each is a library bug.
KNOWN_FAILURES = {}


def _params():
  for seed in SEEDS:
    reason = KNOWN_FAILURES.get(seed)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    yield pytest.param(seed, marks=marks, id=str(seed))


# The modes the CI seeds were fixed with; the campaign also runs "tf1" and "data".
CI_MODES = ("eager", "closure", "function", "xla", "dynamic", "n0", "grad")


@pytest.mark.parametrize("seed", list(_params()))
def test_seed(seed):
  program = programs.generate(seed)
  result = check.check(program, CI_MODES)
  failures = result.failures()
  if failures:
    lines = [f"{mode}: {o.category}: {o.message}" for mode, o in failures.items()]
    pytest.fail(f"fuzz seed {seed} fails\n" + "\n".join(lines) +
                f"\nshrink it: python -m tests.fuzz --start {seed} --seeds 1"
                f"\n{ir.render(program)}", pytrace=False)
  skipped = {m: o for m, o in result.outcomes.items()
             if o.category in ("unsupported", "invalid")}
  if skipped:
    mode, o = next(iter(skipped.items()))
    pytest.skip(f"{o.category} in {mode}: {o.message}")


def test_program_names_do_not_split_failure_kinds():
  a = "ConversionError: Cannot vectorize X created at <fuzz seed 3 e0a1b2c3>:12 under XLA"
  b = "ConversionError: Cannot vectorize X created at <fuzz seed 41 77ffab01>:9 under XLA"
  assert check.Outcome("crash", a).kind == check.Outcome("crash", b).kind


def test_xla_refusal_where_the_xla_loop_drops_writes_is_not_a_failure():
  """Seed 10254: a dynamic-size TensorArray grown in a loop and read; vectorize refuses
  under XLA, and XLA's own loop drops the writes (another answer than the eager loop)."""
  outcome = check.check(programs.generate(10254), ["xla"]).outcomes["xla"]
  assert outcome.category == "xla_unsupported", outcome
  assert "differs from the eager loop" in outcome.message


def test_eager_semantics_of_a_loop_with_no_trip_are_not_a_failure():
  """Seed 1000393: a while loop making no trip returns its input itself eagerly, so a tape
  watching the loop's output differentiates the input; in a graph (where pfor runs) the
  output is another tensor. pfor matches the loop traced in a graph: not a failure."""
  result = check.check(programs.generate(1000393), ["eager", "grad"])
  assert not result.failures(), result.outcomes
  assert result.outcomes["eager"].category == "ok"


def test_gradient_that_fails_in_a_graph_loop_too_is_invalid():
  """Seed 1000304: in a graph, an unwritten TensorArray read after a loop is connected to
  the input, and AdjustContrastv2 has no gradient; the eager loop never asks for it.
  Since pfor leaves a loop's unread variables out, its gradient is the eager loop's: ok."""
  outcome = check.check(programs.generate(1000304), ["grad"]).outcomes["grad"]
  assert outcome.category == "ok" or (
      outcome.category == "invalid" and "fails in a graph too" in outcome.message), outcome


def test_body_that_fails_in_a_graph_loop_too_is_invalid():
  """Seed 1001460: a tape's gradient of a gather is an IndexedSlices in a graph (a tensor
  eagerly), and a second tape differentiating by it fails ('no attribute _id') when the
  body is traced, in the loop as in pfor."""
  outcome = check.check(programs.generate(1001460), ["function"]).outcomes["function"]
  assert outcome.category == "invalid", outcome
  assert "fails in a graph too" in outcome.message


def test_generation_is_reproducible():
  for seed in (0, 7, 123):
    assert ir.render(programs.generate(seed)) == ir.render(programs.generate(seed))


def test_shrink_keeps_the_failure_and_deletes_the_rest():
  """Shrinking to 'the body still calls tf.nn.softmax' leaves little beyond that call."""
  seed = next(s for s in range(1000) if "tf.nn.softmax(" in ir.render(programs.generate(s))
              and len(programs.generate(s).stmts) > 5)
  program = programs.generate(seed)
  small = shrink.shrink(program, lambda p: "tf.nn.softmax(" in ir.render(p), budget_s=60)
  assert "tf.nn.softmax(" in ir.render(small)
  assert shrink.size(small) < shrink.size(program)
  assert shrink.size(small) <= 4


def test_values_of_per_iteration_size_are_compared_with_ragged_stack():
  """pfor's RaggedTensor equals the loop's `tf.ragged.stack` (uniform inner axes either way);
  other row lengths, values or a dense result are failures."""
  rows = [tf.constant([[1., 2.]]), tf.constant([[3., 4.], [5., 6.]])]
  expected = check.stack(rows)
  same = tf.RaggedTensor.from_row_lengths(tf.constant([[1., 2.], [3., 4.], [5., 6.]]), [1, 2])
  assert check.compare([same], [expected]) is None
  moved = tf.RaggedTensor.from_row_lengths(same.flat_values, [2, 1])
  assert check.compare([moved], [expected]).category == "wrong_shape"
  off = same.with_flat_values(same.flat_values + 1.)
  assert check.compare([off], [expected]).category == "wrong_value"
  assert check.compare([np.zeros([2, 2, 2], np.float32)], [expected]).category == "wrong_shape"


def test_newest_seeds_draw_ragged_values_and_late_ops():
  kinds = [k for s in range(programs.NEWEST_FROM, programs.NEWEST_FROM + 30)
           for k in programs.generate(s).kinds()]
  assert any(k.startswith("ragged_") for k in kinds)
  assert any(k.startswith("late_") for k in kinds)
  old = [k for s in range(30) for k in programs.generate(s).kinds()]
  assert not any(k.startswith(("ragged_", "late_")) for k in old)


def test_index_slice_seeds_draw_slices_at_the_index_with_constant_bounds():
  import re  # pylint: disable=import-outside-toplevel
  sliced = re.compile(r"\[i, -?\d*:-?\d*\]")
  new = [ir.render(programs.generate(s)) for s in range(programs.INDEX_SLICES_FROM,
                                                        programs.INDEX_SLICES_FROM + 20)]
  assert sum(bool(sliced.search(src)) for src in new) >= 2
  old = [ir.render(programs.generate(s)) for s in range(programs.INDEX_SLICES_FROM - 20,
                                                        programs.INDEX_SLICES_FROM)]
  assert not any(sliced.search(src) for src in old)


def test_pattern_seeds_draw_state_ragged_tensor_arrays_and_mixed_dtypes():
  start = programs.PATTERNS_FROM
  got = [programs.generate(s) for s in range(start, start + 40)]
  kinds = {k for p in got for k in p.kinds()}
  assert {"state_while", "state_while_ta", "state_cond", "ta_ragged_dynamic",
          "ta_ragged_sized", "int64", "string"} <= kinds, kinds
  assert any(p.out_form == "dict" for p in got)
  assert any(inp.stateful for p in got for inp in p.inputs)
  old = [programs.generate(s) for s in range(programs.NESTED_FROM, programs.NESTED_FROM + 30)]
  assert not any(k.startswith(("state_", "ta_ragged")) for p in old for k in p.kinds())
  assert all(p.out_form == "tuple" for p in old)


def test_variable_state_after_the_run_is_compared():
  same = ([np.ones([2], np.float32)], [np.float32(3.0)])
  assert check.compare_run(same, same) is None
  other_state = (same[0], [np.float32(6.0)])
  outcome = check.compare_run(other_state, same)
  assert outcome.category == "wrong_value" and outcome.message.startswith("variable state")


def test_stateful_refusal_is_a_refusal_not_a_crash():
  from vectorize.whole_body_loop import StatefulRefusal  # pylint: disable=g-import-not-at-top
  e = StatefulRefusal("Cannot vectorize AssignSubVariableOp 'x': a stateful op cannot be "
                      "vectorized when it adds to a variable assigned earlier in the body")
  assert check.classify_error(e).category == "refused"
  assert check.classify_error(ValueError("a stateful op cannot be vectorized")).category == (
      "crash")


def test_tensor_array_read_and_then_gathered_is_read_many_in_the_loop_too():
  """Seed 3103023: a TensorArray read at its last index and then gathered whole. Eagerly
  the read clears the element (clear_after_read) and the loop's gather gives a zero there;
  traced, as pfor's body is, it reads many times. The generator asks for read-many arrays."""
  outcome = check.check(programs.generate(3103023), ["eager"]).outcomes["eager"]
  assert outcome.category == "ok", outcome


def test_tf1_loop_gradient_of_a_gather_is_compared_dense():
  """Seed 3103191: in a TF1 graph a tape's gradient of a gather is an IndexedSlices; the
  loop's fetched value was compared as its (values, indices, shape) against pfor's tensor."""
  outcome = check.check(programs.generate(3103191), ["tf1"]).outcomes["tf1"]
  assert outcome.category == "ok", outcome


def test_eager_gather_of_an_empty_tensor_array_is_not_held_against_pfor():
  """Seed 3410596: eagerly, a TensorArray's gather of no elements is float32 whatever its
  dtype (in a graph, as pfor runs, its own dtype). The graph loop decides, its rows stacked
  by their run-time shapes (stacked in the graph, other outputs of shapes unknown there came
  back ragged), and n = 0's expected outputs come from iteration 0 traced."""
  result = check.check(programs.generate(3410596), ["eager", "n0"])
  assert not result.failures(), result.outcomes


@pytest.mark.unchecked   # the checked mode's own loop loses the update too, and says they differ
def test_a_side_effect_grappler_drops_from_the_loop_is_not_held_against_pfor():
  """Seed 3410663: TF 2.21's Grappler drops `v.assign_add(q + tf.reduce_sum(tf.cast(q,
  tf.int32)))` in the taken branch of a tf.cond whose output is unused, in a tf.function the
  body calls; pfor's graph applies it. The loop without Grappler decides."""
  result = check.check(programs.generate(3410663), ["eager", "grad"])
  assert not result.failures(), result.outcomes


def test_recurrence_seeds_draw_variables_the_body_reads_and_writes():
  start = programs.RECURRENCES_FROM
  got = [programs.generate(s) for s in range(start, start + 30)]
  recurrences = [st for p in got for st in p.stmts if st.kind == "state_recurrence"]
  text = "\n".join(line for st in recurrences for line in st.lines)
  assert ".read_value()" in text and ".assign(" in text and ".assign_add(" in text
  old = [programs.generate(s) for s in range(programs.PATTERNS_FROM,
                                              programs.PATTERNS_FROM + 30)]
  assert not any("state_recurrence" in p.kinds() for p in old)


def test_refused_loop_over_state_is_a_refusal_wrapped_or_not():
  from vectorize.whole_body_loop import StatefulRefusal  # pylint: disable=g-import-not-at-top
  e = StatefulRefusal("Cannot vectorize the tf.while_loop 'w': its steps read a variable or "
                      "table that they also change")
  assert check.classify_error(e).category == "refused"
  try:
    try:
      raise e
    except StatefulRefusal as inner:
      raise vectorize.ConversionError("map_and_batch cannot vectorize body") from inner
  except vectorize.ConversionError as wrapped:
    assert check.classify_error(wrapped).category == "refused"


def test_n0_shapes_come_from_iteration_0_traced_without_grappler():
  """Seed 3600030: with Grappler on, TF 2.21 traces iteration 0 of this body (a cond's
  `a + tf.reduce_sum(a)`, then a switch_case on it) to a float32 [0] output where the body
  returns an int32 scalar; n = 0's expected outputs no longer take that dtype."""
  program = programs.generate(3600030)
  assert check.check(program, ("n0",)).outcomes["n0"].category == "ok"


def test_closure_mode_runs_a_new_closure_over_permuted_inputs():
  """The closure mode's inputs: same shapes and dtypes, values permuted (indices and trip
  counts stay in range), a body of its own; the loop over them is its reference."""
  program = programs.generate(3)
  loaded = check.Loaded(program)
  other = loaded.with_new_inputs(program.seed)
  assert other.body is not loaded.body
  for a, b in zip(loaded.args, other.args):
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_array_equal(np.sort(np.asarray(a).reshape(-1)),
                                  np.sort(np.asarray(b).reshape(-1)))
  assert any(not np.array_equal(a, b) for a, b in zip(loaded.args, other.args))
  assert check.check(program, ("eager", "closure")).outcomes["closure"].category == "ok"


def test_gradient_that_fails_with_the_body_as_one_function_is_invalid():
  """Seed 3400827: AdjustHue, which has no gradient, on a path the loss does not use. An
  eager tape never differentiates it; the gradient of the body traced as one function (as
  pfor traces it, and TF's own traced loop) differentiates every output and raises
  LookupError: the loop's gradient fails there too, so not vectorize's failure."""
  program = programs.generate(3400827)
  assert check.check(program, ("grad",)).outcomes["grad"].category == "invalid"


def test_grappler_rewriting_argmax_of_relu_is_not_held_against_pfor():
  """Seed 3640223's closure mode: TF 2.21's Grappler turns `tf.argmax(tf.nn.relu(x))` into
  `tf.argmax(x)` in any tf.function, wrong where relu makes ties (the permuted inputs have a
  row of two negatives). pfor's output is a graph: the loop traced in a graph decides."""
  x = tf.constant([[-0.761, -0.0328]])
  assert tf.argmax(tf.nn.relu(x), -1).numpy()[0] == 0
  assert tf.function(lambda: tf.argmax(tf.nn.relu(x), -1))().numpy()[0] == 1
  program = programs.generate(3640223)
  assert check.check(program, ("eager", "closure")).outcomes["closure"].category == "ok"


def test_a_tf_data_function_disagreeing_with_eager_is_not_held_against_pfor():
  """Seed 4300195's data mode: in a tf.data map function Grappler moves a relu past a max,
  and the max of an empty relu is 0 there, -inf eagerly (and in pfor's batches). A batch
  equal to the eager loop's rows is accepted."""
  empty = tf.zeros([0], tf.float32)
  assert tf.reduce_max(tf.nn.relu(empty)).numpy() == -np.inf
  program = programs.generate(4300195)
  assert check.check(program, ("data",)).outcomes["data"].category == "ok"


def test_a_body_that_cannot_be_traced_for_a_symbolic_index_is_invalid():
  """Seed 4400059: tf.unstack of a pad by per-iteration paddings runs with Python ints (the
  loop, eager or in a graph) and cannot be traced for a symbolic index, as pfor traces it."""
  program = programs.generate(4400059)
  assert check.check(program, ("eager",)).outcomes["eager"].category == "invalid"


class _DyingChild:
  """A child's end of the pipe that died before answering."""

  def send(self, _):
    pass

  def poll(self, _):
    return True

  def recv(self):
    raise EOFError


class _Proc:
  exitcode = -6

  def is_alive(self):
    return True

  def kill(self):
    pass

  def join(self):
    pass


@pytest.mark.parametrize("loop_aborts, category", [(True, "xla_unsupported"),
                                                  (False, "abort")])
def test_an_xla_abort_is_ours_only_where_the_plain_loop_survives_xla(loop_aborts, category):
  from tests.fuzz import run  # pylint: disable=import-outside-toplevel

  class Worker(run.Worker):
    def _start(self):
      self.conn, self.proc, self.served = _DyingChild(), _Proc(), 0

    def xla_loop_aborts(self, program):
      return loop_aborts

  result = Worker(1).check(programs.generate(0), ["xla"])
  assert result.outcomes["xla"].category == category
