"""A few forms of one workload timed against each other over many interleaved rounds, without
the suite's checks, loop form and tables: for re-measuring one cell of the table.

  python -m benchmarks.compare_forms --cell_workload jacobian_vgg --compare_rounds 21
  python -m benchmarks.compare_forms --cell_workload per_example_lstm --cell_xla \
      --cell_forms vectorize,"tf pfor"

Prints, for each form, its median wall and CPU milliseconds, and the median within-round
ratio of each form to the first, in wall and CPU time, with the load average before and after.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import numpy as np

from benchmarks import cell_flags
from benchmarks import timing

flags.DEFINE_integer("compare_rounds", 15, "interleaved rounds")
FLAGS = flags.FLAGS


def main(argv):
  del argv
  print("load before:", os.getloadavg())
  forms = cell_flags.selected_functions()
  labels = list(forms)
  for fn in forms.values():
    timing.run(fn)
  calls = {label: timing.calls_for(min(timing.seconds(fn) for _ in range(2)))
           for label, fn in forms.items()}
  cpu = {}
  wall = timing.rounds(forms, FLAGS.compare_rounds, calls, cpu)
  base = labels[0]
  for label in labels:
    print(f"{label:22s} wall {1e3 * np.median(wall[label]):8.1f} ms  "
          f"CPU {1e3 * np.median(cpu[label]):8.1f} ms  "
          f"/ {base}: wall {timing.median_ratio(wall[label], wall[base]):.3f}  "
          f"CPU {timing.median_ratio(cpu[label], cpu[base]):.3f}")
  print("load after:", os.getloadavg())


if __name__ == "__main__":
  app.run(main)
