"""Peak memory of a form, each form in its own process (forms sharing one would inherit each
other's high-water marks and caches).

  python -m benchmarks.memory --workloads=per_example_convnet --batch=128  # every form
  python -m benchmarks.memory --chunking      # parallel_iterations bounding memory

A child process builds the workload, notes its resident memory, calls the form twice (first
call and a steady one) and reports its peak resident memory above that baseline: what the
form's tracing, conversion and run add, outputs included (`peak_mb`); and a steady call's
peak of TensorFlow's CPU allocator, the tensors it holds at once (`step_peak_mb`: weights,
optimizer state, activations, temporaries), and that peak above what was held before the
call (`step_above_held_mb`). A process's resident peak is no measure of a steady call: the
allocator keeps the first call's pages. `--chunking` measures per-example
convnet gradients and a VGG jacobian at batch 1,024, unchunked and in chunks of
`parallel_iterations` (`chunking_form`).
"""

import json
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags

flags.DEFINE_list("workloads", [], "workloads to measure")
flags.DEFINE_integer("batch", 128, "batch size")
flags.DEFINE_list("forms", [], "forms to measure (default: all four)")
flags.DEFINE_bool("child", False, "internal: measure one form in this process")
flags.DEFINE_bool("chunking", False, "per-example convnet gradients, unchunked and chunked")
flags.DEFINE_integer("chunk", 128, "parallel_iterations for --chunking")
flags.DEFINE_integer("chunking_batch", 1024, "batch size for --chunking")
flags.DEFINE_bool("jit", False, "compile the form with XLA")
FLAGS = flags.FLAGS

TIMEOUT_S = 900
CHUNKING = "chunking"   # the pseudo-workload of --chunking
PRIVATE = "private:"    # pseudo-workloads "private:<model>": private_forms.py's DP-SGD steps


def _status_mb(field):
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1]) / 1024
  return float("nan")


def _resident_mb():
  return _status_mb("VmRSS")


def _peak_mb():
  """This process's peak resident memory. Not getrusage's ru_maxrss: Linux carries that
  across exec from the parent, so a child of a big runner would report the runner's peak."""
  return _status_mb("VmHWM")


def chunking_form(kind, batch, parallel_iterations):
  """A vectorize form with `parallel_iterations`, by kind:

  - "per_example_convnet": per-example gradients of the MNIST convnet with a 128-unit dense
    layer (455k parameters: the output at batch 1,024 is 1.9 GB, where the 1024-unit one's
    would be 13 GB): memory held mostly by the output.
  - "jacobian_vgg": the VGG-like convnet's jacobian, `batch` output rows: memory held mostly
    by each row's backward pass (a row of the output is 6,912 floats).
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  import vectorize
  from benchmarks import models
  rng = np.random.default_rng(0)
  if kind == "jacobian_vgg":
    params = models.as_variables(models.vgg_params(outputs=batch))
    image = tf.constant(rng.standard_normal([48, 48, 3]), tf.float32)

    def jacobian():
      x = tf.identity(image)
      return vectorize.jacobian(models.vgg_outputs(params, x[None])[0], x,
                                parallel_iterations=parallel_iterations)
    return jacobian
  params = models.as_variables(models.convnet_params(hidden=128))
  images = tf.constant(rng.standard_normal([batch, 28, 28, 1]), tf.float32)
  labels = tf.constant(rng.integers(0, 10, [batch]), tf.int32)

  def loss(x, y):
    return models.softmax_loss(models.convnet_logits(params, x[None]), y[None])

  return lambda: vectorize.per_example_gradients(
      loss, params, images, labels, fallback_to_while_loop=False,
      parallel_iterations=parallel_iterations)


def _child(name, form, batch, jit):
  """Measures one form here; prints one JSON line."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from benchmarks import workloads
  tf.get_logger().setLevel("ERROR")
  if name.startswith(CHUNKING):
    kind, chunk = form.split(":")
    fn = chunking_form(kind, batch, int(chunk) or None)
  elif name.startswith(PRIVATE):
    from benchmarks import private_forms  # pylint: disable=g-import-not-at-top
    fn = private_forms.build(name[len(PRIVATE):], batch, only=form)[form]
  else:
    (workload,) = [w for w in workloads.ALL if w.name == name]
    fn = workload.build(batch, jit)[form]
  fn = tf.function(fn, jit_compile=jit or None)

  def call():   # waits for the outputs without copying them out (numpy would)
    for t in tf.nest.flatten(fn()):
      if isinstance(t, tf.Tensor) and t.shape.num_elements():
        tf.reshape(t, [-1])[:1].numpy()

  baseline = _resident_mb()
  start = time.perf_counter()
  call()
  first = time.perf_counter() - start
  peak = _peak_mb() - baseline
  tf.config.experimental.reset_memory_stats("CPU:0")
  held = tf.config.experimental.get_memory_info("CPU:0")["current"]
  start = time.perf_counter()
  call()
  steady = time.perf_counter() - start
  step_peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
  print(json.dumps({"peak_mb": peak, "baseline_mb": baseline, "first_s": first,
                    "steady_s": steady, "step_peak_mb": step_peak / 2**20,
                    "step_above_held_mb": (step_peak - held) / 2**20}), flush=True)


def measure(name, form, batch, jit=False):
  """{peak_mb, baseline_mb, first_s, steady_s} of one form, from a child process; or
  {"error": ...} when it fails or runs past TIMEOUT_S."""
  command = [sys.executable, "-m", "benchmarks.memory", "--child", f"--workloads={name}",
             f"--forms={form}", f"--batch={batch}", f"--jit={jit}"]
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  try:
    done = subprocess.run(command, cwd=root, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)
  except subprocess.TimeoutExpired:
    return {"error": f"ran past {TIMEOUT_S} s"}
  lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
  if done.returncode or not lines:
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"exit {done.returncode}: {tail[:160]}"}
  return json.loads(lines[-1])


def main(argv):
  del argv
  from benchmarks import workload as wl  # pylint: disable=g-import-not-at-top
  if FLAGS.child:
    _child(FLAGS.workloads[0], FLAGS.forms[0], FLAGS.batch, FLAGS.jit)
    return
  if FLAGS.chunking:
    for kind in ("per_example_convnet", "jacobian_vgg"):
      for chunk in (0, FLAGS.chunk):
        r = measure(CHUNKING, f"{kind}:{chunk}", FLAGS.chunking_batch)
        print(f"{kind}, batch {FLAGS.chunking_batch}, parallel_iterations={chunk or None}: "
              f"{json.dumps(r)}", flush=True)
    return
  for name in FLAGS.workloads:
    for form in FLAGS.forms or wl.FORMS:
      print(f"{name} batch {FLAGS.batch} {form}: "
            f"{json.dumps(measure(name, form, FLAGS.batch, FLAGS.jit))}", flush=True)


if __name__ == "__main__":
  app.run(main)
