"""A variational quantum circuit per example, as simulator users write it: a 5-qubit state
vector in complex64, 6 layers of parametrized single-qubit rotations (RX, RZ) and two-qubit
ZZ rotations after CNOTs, then <Z> on each qubit. Each gate is an einsum on the state
tensor: about 2,400 ops per example (TensorCircuit's `vmap` converts bodies of this kind).

It is the suite's large body for conversion cost (`benchmarks/conversion.py`,
`benchmarks/closure_calls.py`); its steady time is timed like any workload's. The same code
batches by hand: every gate's einsum takes a leading `...` of batch axes.
"""

import numpy as np
import tensorflow as tf

from benchmarks import workload

QUBITS, LAYERS = 5, 6
_AXES = "abcde"[:QUBITS]


def _gate(matrix):
  return tf.constant(np.asarray(matrix, np.complex64))


_X = _gate([[0, 1], [1, 0]])
_I = _gate(np.eye(2))
_Z = _gate([[1, 0], [0, -1]])
_CNOT = tf.reshape(_gate([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]]),
                   [2, 2, 2, 2])


def _apply1(state, gate, q):
  """A one-qubit gate `[..., 2, 2]` on qubit q of `state` `[..., 2] * QUBITS`."""
  into = _AXES.replace(_AXES[q], "z")
  return tf.einsum(f"...yz,...{into}->...{_AXES.replace(_AXES[q], 'y')}", gate, state)


def _apply2(state, gate, q1, q2):
  """A two-qubit gate `[..., 2, 2, 2, 2]` on qubits q1, q2."""
  into = _AXES.replace(_AXES[q1], "w").replace(_AXES[q2], "x")
  out = _AXES.replace(_AXES[q1], "u").replace(_AXES[q2], "v")
  return tf.einsum(f"...uvwx,...{into}->...{out}", gate, state)


def _complex(x):
  return tf.cast(x, tf.complex64)[..., None, None]


def _rx(theta):
  return _complex(tf.cos(theta / 2)) * _I - 1j * _complex(tf.sin(theta / 2)) * _X


def _rz(theta):
  phase = tf.exp(tf.complex(tf.zeros_like(theta), theta / 2))[..., None, None]
  return tf.math.conj(phase) * _gate([[1, 0], [0, 0]]) + phase * _gate([[0, 0], [0, 1]])


def _rzz(theta):
  signs = tf.constant([1, -1, -1, 1], tf.float32)
  diagonal = tf.exp(tf.complex(tf.zeros_like(signs), -theta[..., None] / 2 * signs))
  return tf.reshape(tf.linalg.diag(diagonal), tf.concat([tf.shape(theta), [2, 2, 2, 2]], 0))


def expectations(thetas, weights):
  """<Z_q> for each qubit after the circuit of `thetas` `[..., LAYERS, 3, QUBITS]`."""
  batch = tf.shape(thetas)[:-3]
  start = tf.one_hot(0, 2 ** QUBITS, dtype=tf.complex64)
  state = tf.reshape(tf.broadcast_to(start, tf.concat([batch, [2 ** QUBITS]], 0)),
                     tf.concat([batch, [2] * QUBITS], 0))
  for layer in range(LAYERS):
    for q in range(QUBITS):
      state = _apply1(state, _rx(thetas[..., layer, 0, q] * weights[q]), q)
      state = _apply1(state, _rz(thetas[..., layer, 1, q]), q)
    for q in range(QUBITS - 1):
      state = _apply2(state, _CNOT, q, q + 1)
      state = _apply2(state, _rzz(thetas[..., layer, 2, q] + weights[q]), q, q + 1)
  axes = list(range(-QUBITS, 0))
  return tf.stack([tf.math.real(tf.reduce_sum(tf.math.conj(state) * _apply1(state, _Z, q),
                                              axes)) for q in range(QUBITS)], -1)


def inputs(batch, seed=0):
  rng = np.random.default_rng(seed)
  return (tf.constant(rng.uniform(0, np.pi, [batch, LAYERS, 3, QUBITS]), tf.float32),
          tf.constant(rng.standard_normal([QUBITS]), tf.float32))


def build(batch, jit_compile=False):
  del jit_compile
  thetas, weights = inputs(batch)
  return workload.map_forms(lambda t: expectations(t, weights), thetas,
                            lambda: expectations(thetas, weights))


WORKLOAD = workload.Workload(
    name="circuit",
    title=f"Variational circuit: {QUBITS} qubits, {LAYERS} layers, complex64 state vector, "
          "about 2,400 ops per example",
    unit="examples",
    build=build,
    forms={workload.LOOP: "tf.map_fn", workload.TF_PFOR: "tf.vectorized_map",
           workload.VECTORIZE: "vectorize.vectorized_map"},
    batch_sizes=(1, 8, 32, 128),
    quick_batch_sizes=(16, 128),
)
