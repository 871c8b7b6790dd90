"""What a benchmark workload is: one job, written four ways.

Every workload builds, for a batch size, the same computation in the four forms the suite
compares (each is also timed under XLA by the runner):

  hand-batched  code written directly on the batch: the speed limit;
  vectorize     the per-example code vectorized by this library;
  loop          what users write otherwise: `tf.map_fn`, or a `tf.while_loop`;
  tf pfor       the same job done by TensorFlow's own pfor (`tf.vectorized_map`,
                `GradientTape.jacobian`).

A form is a zero-argument Python function building the computation on constant inputs; the
runner wraps it in `tf.function` (with and without `jit_compile`), checks its result against
hand-batched, and times it.
"""

import dataclasses
from typing import Callable, Dict

import tensorflow as tf

import vectorize

HAND = "hand-batched"
VECTORIZE = "vectorize"
LOOP = "loop"
TF_PFOR = "tf pfor"
FORMS = (HAND, VECTORIZE, LOOP, TF_PFOR)


@dataclasses.dataclass(frozen=True)
class Workload:
  """One benchmark job.

  Attributes:
    name: the id `--suite` selects it by.
    title: what it computes, with its sizes.
    unit: what one unit of the batch axis is ("examples", "jacobian rows"), for throughput.
    build: `build(batch, jit_compile) -> {form: zero-argument function}`, one per name in
      FORMS. `jit_compile` is for workloads that compile inside (tf.data map functions);
      the others ignore it and the runner compiles the whole form.
    forms: what each form is here, e.g. {LOOP: "tf.map_fn"}.
    batch_sizes: the batch sizes of a full run; `quick_batch_sizes` those of `--quick`.
    compiles_inside: True when XLA goes inside the form (via `build(..., jit_compile=True)`)
      instead of around it.
    crashes: {label: why} for forms (runner labels, e.g. "tf pfor") that kill the process
      (a segmentation fault in TensorFlow); the runner records them as failing, unrun.
    unchecked: {label: why} for forms that run and are timed but have nothing to be
      checked against (no other form computes the same numbers there).
  """
  name: str
  title: str
  unit: str
  build: Callable[[int, bool], Dict[str, Callable[[], object]]]
  forms: Dict[str, str]
  batch_sizes: tuple = (1, 8, 32, 128, 256)
  quick_batch_sizes: tuple = (16, 128)
  compiles_inside: bool = False
  crashes: Dict[str, str] = dataclasses.field(default_factory=dict)
  unchecked: Dict[str, str] = dataclasses.field(default_factory=dict)


def map_forms(fn, elems, hand, signature=None):
  """The four forms of a job that maps a per-example `fn` over `elems`' leading axis.

  Args:
    fn: the per-example function, taking one element of `elems` (same structure).
    elems: the batch, a tensor or a structure of tensors.
    hand: the zero-argument hand-batched form.
    signature: `fn_output_signature` for `tf.map_fn` when fn's output differs from elems'.
  """
  return {
      HAND: hand,
      VECTORIZE: lambda: vectorize.vectorized_map(fn, elems, fallback_to_while_loop=False),
      LOOP: lambda: tf.map_fn(fn, elems, fn_output_signature=signature),
      TF_PFOR: lambda: tf.vectorized_map(fn, elems),
  }
