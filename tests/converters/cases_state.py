"""OpCases for converters/state.py.

Builders use variables created here, at import. Reads are compared by value; writes return a
value that does not read the variable back (reads after writes are refused, see state.py),
so these cases check conversion, shapes and XLA, while test_state.py checks the effect of
writes on the variables against a sequential loop.
"""

import os
import tempfile

import numpy as np
import tensorflow as tf

from tests.converters.op_cases import OpCase, indices_below

_rng = np.random.default_rng(7)


def _variables(shape, dtypes=(tf.float32, tf.float64)):
  return {d: tf.Variable(_rng.standard_normal(shape).astype(d.as_numpy_dtype)) for d in dtypes}


_MATRIX = _variables([4, 3])
_TABLE = tf.Variable(_rng.standard_normal([5, 3]).astype(np.float32))
_BATCHED_TABLE = tf.Variable(_rng.standard_normal([2, 5, 3]).astype(np.float32))
_ASSIGNED = _variables([3], (tf.float32, tf.float64, tf.int32))
_ADDED = _variables([3], (tf.float32, tf.float64, tf.int32))
_SCATTERED = _variables([5, 3])
PRINT_STREAM = os.path.join(tempfile.gettempdir(), f"vectorize_cases_state_{os.getpid()}.txt")
_NO_XLA_STRINGS = "XLA has no kernels for strings or printing"


def _assign(x):
  _ASSIGNED[x.dtype].assign(x, read_value=False)
  return x + 1


def _assign_then_read(c, x):
  variable = _ASSIGNED[x.dtype]
  variable.assign(c, read_value=False)
  return variable.read_value() * x


def _assign_add(x):
  _ADDED[x.dtype].assign_add(x, read_value=False)
  return x + 1


def _assign_sub(x):
  _ADDED[x.dtype].assign_sub(x, read_value=False)
  return x + 1


def _scatter_add(indices, updates):
  _SCATTERED[updates.dtype].scatter_add(tf.IndexedSlices(updates, indices))
  return updates * 2


def _scatter_sub(indices, updates):
  _SCATTERED[updates.dtype].scatter_sub(tf.IndexedSlices(updates, indices))
  return updates * 2


def _assert(x, y):
  tf.raw_ops.Assert(condition=tf.reduce_all(tf.abs(y) < 100.0), data=[x, y])
  return x + y


def _print(x):
  tf.print("x:", x, output_stream="file://" + PRINT_STREAM)
  return x + 1


CASES = [
    OpCase("ReadVariableOp", lambda x: x * _MATRIX[x.dtype], [[4, 3]],
           dtypes=[tf.float32, tf.float64]),
    OpCase("ResourceGather", lambda i: tf.gather(_TABLE, i), [[2]],
           dtypes=[tf.int32, tf.int64], make=[indices_below(5)]),
    OpCase("ResourceGather-matrix_indices", lambda i: tf.gather(_TABLE, i), [[2, 2]],
           dtypes=[tf.int32], make=[indices_below(5)]),
    OpCase("ResourceGather-batch_dims",
           lambda i: tf.raw_ops.ResourceGather(resource=_BATCHED_TABLE.handle, indices=i,
                                               dtype=tf.float32, batch_dims=1),
           [[2, 4]], dtypes=[tf.int32], make=[indices_below(5)]),
    OpCase("ResourceGatherNd", lambda i: tf.gather_nd(_TABLE, i), [[2, 1]],
           dtypes=[tf.int32, tf.int64], make=[indices_below(5)],
           xla="XLA has no ResourceGatherNd kernel: the body itself cannot compile"),
    OpCase("VariableShape",
           lambda x: x + tf.cast(tf.raw_ops.VariableShape(input=_TABLE.handle), x.dtype),
           [[2]], dtypes=[tf.int32, tf.float32]),
    OpCase("VarIsInitializedOp",
           lambda x: tf.where(tf.raw_ops.VarIsInitializedOp(resource=_TABLE.handle), x, -x),
           [[3]]),
    OpCase("AssignVariableOp", _assign, [[3]], dtypes=[tf.float32, tf.float64, tf.int32]),
    OpCase("AssignVariableOp-then_read", _assign_then_read, [[3], [3]],
           patterns=[(False, True)], op_types=("AssignVariableOp", "ReadVariableOp")),
    OpCase("AssignAddVariableOp", _assign_add, [[3]],
           dtypes=[tf.float32, tf.float64, tf.int32]),
    OpCase("AssignSubVariableOp", _assign_sub, [[3]], dtypes=[tf.float32, tf.int32]),
    OpCase("ResourceScatterAdd", _scatter_add, [[2], [2, 3]],
           dtypes=[(tf.int32, tf.float32), (tf.int64, tf.float64)],
           make=[indices_below(5), None]),
    OpCase("ResourceScatterSub", _scatter_sub, [[2], [2, 3]],
           dtypes=[(tf.int32, tf.float32)], make=[indices_below(5), None]),
    OpCase("Assert", _assert, [[3], [3]]),
    OpCase("PrintV2", _print, [[2]], op_types=("PrintV2", "StringFormat"),
           xla=_NO_XLA_STRINGS),
]
