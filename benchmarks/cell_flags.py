"""Flags naming one cell of the suite's table (a workload, a batch size, some forms, plain or
under XLA), shared by the tools that look into a cell: compare_forms and kernel_profile."""

from absl import flags

from benchmarks import measure
from benchmarks import workloads

flags.DEFINE_string("workload", "jacobian_vgg", "workload name")
flags.DEFINE_integer("batch", 128, "batch size")
flags.DEFINE_list("forms", ["hand-batched", "vectorize", "tf pfor"], "forms, by name")
flags.DEFINE_bool("xla", False, "the XLA forms instead")
FLAGS = flags.FLAGS


def selected_functions():
  """{label: tf.function} of the forms the flags name, in their order."""
  workload = next(w for w in workloads.ALL if w.name == FLAGS.workload)
  fns = measure.functions(workload, FLAGS.batch, FLAGS.xla)
  labels = [f + measure.XLA if FLAGS.xla else f for f in FLAGS.forms]
  return {label: fns[label] for label in labels}
