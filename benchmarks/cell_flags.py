"""Flags naming one cell of the suite's table (a workload, a batch size, some forms, plain or
under XLA), shared by the tools that look into a cell: compare_forms and kernel_profile.
Their names carry `cell_`: other benchmark modules, imported beside these in one test
process, define `batch`, `forms` and `xla` flags of their own."""

from absl import flags

from benchmarks import measure
from benchmarks import workloads

flags.DEFINE_string("cell_workload", "jacobian_vgg", "workload name")
flags.DEFINE_integer("cell_batch", 128, "batch size")
flags.DEFINE_list("cell_forms", ["hand-batched", "vectorize", "tf pfor"], "forms, by name")
flags.DEFINE_bool("cell_xla", False, "the XLA forms instead")
FLAGS = flags.FLAGS


def selected_functions():
  """{label: tf.function} of the forms the flags name, in their order."""
  workload = next(w for w in workloads.ALL if w.name == FLAGS.cell_workload)
  fns = measure.functions(workload, FLAGS.cell_batch, FLAGS.cell_xla)
  labels = [f + measure.XLA if FLAGS.cell_xla else f for f in FLAGS.cell_forms]
  return {label: fns[label] for label in labels}
