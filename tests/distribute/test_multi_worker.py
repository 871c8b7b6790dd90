"""DP-SGD through `per_example_gradients` and through `clipped_gradient_sum` under
`tf.distribute.MultiWorkerMirroredStrategy`: two worker processes on loopback addresses,
started here, train a small Keras model, and their weights equal a single process's run on
the same global batch."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

_WORKER = os.path.join(os.path.dirname(__file__), "dpsgd_worker.py")
_TIMEOUT_S = 240


def _free_ports(count):
  sockets = [socket.socket() for _ in range(count)]
  for s in sockets:
    s.bind(("127.0.0.1", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


def _start(out, form, tf_config=None):
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))] +
      [p for p in [os.environ.get("PYTHONPATH")] if p]))
  env.pop("TF_CONFIG", None)
  if tf_config is not None:
    env["TF_CONFIG"] = json.dumps(tf_config)
  return subprocess.Popen([sys.executable, _WORKER, out, form], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def _wait(processes):
  """Waits for every process (all killed at the deadline); their outputs, or a failure."""
  outputs = []
  try:
    for p in processes:
      outputs.append(p.communicate(timeout=_TIMEOUT_S)[0])
  finally:
    for p in processes:
      if p.poll() is None:
        p.kill()
        p.communicate()
  for p, text in zip(processes, outputs):
    assert p.returncode == 0, f"a worker failed (exit {p.returncode}):\n{text[-3000:]}"


def _weights(path, which):
  with np.load(path) as f:
    return [f[f"{which}{k}"] for k in range(len(f.files) // 2)]


@pytest.mark.parametrize("form", ["materialized", "clipped"])
def test_two_workers_equal_one_process(tmp_path, form):
  ports = _free_ports(2)
  cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
  outs = [str(tmp_path / f"worker{k}.npz") for k in range(2)]
  single = str(tmp_path / "single.npz")
  processes = [_start(outs[k], form,
                      {"cluster": cluster, "task": {"type": "worker", "index": k}})
               for k in range(2)]
  processes.append(_start(single, form))
  _wait(processes)
  expected = _weights(single, "final")
  assert len(expected) == 4
  for out in outs:
    for a, e in zip(_weights(out, "final"), expected, strict=True):
      np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
  # The steps moved the weights: a step that did nothing would agree too.
  for before, after in zip(_weights(single, "initial"), expected):
    assert np.max(np.abs(after - before)) > 1e-3
