"""A sequential loop's per-iteration values, collected and stacked as pfor holds them.

Both sequential loops (one op that falls back, `fallback.py`; the whole body,
`whole_body_loop.py`) write each iteration's values into TensorArrays and read them back
after the loop. A value whose first axes may differ in size per iteration comes back ragged
(its values concatenated, with each iteration's sizes); one whose later axis the graph
leaves unknown is checked to have one shape in every iteration (an error names the
shapes); with no iteration, an unknown dimension stacks as 0.
"""

import tensorflow as tf

from vectorize import ragged
from vectorize.values import stacked


class IterationOutputs:
  """The TensorArrays of a sequential loop's outputs: `arrays()` before the loop, `write`
  in each step, `values` after it.

  Args:
    outputs: one tensor (or TensorSpec) per output, whose static shape is one iteration's.
    varying: per output, how many leading axes may differ in size per iteration (0:
      stacked; 1: ragged; more: a multi-axis ragged value).
    mismatch: the error for a stacked output whose shape differs per iteration: what holds
      it and how to fix it (it is raised with the shapes per iteration).
  """

  def __init__(self, outputs, varying, mismatch):
    self._specs = [(t.dtype, t.shape) for t in outputs]
    self._varying = list(varying)
    self._mismatch = mismatch
    # One shape in every iteration, checked: a size (or rank) the graph leaves unknown.
    self._unsure = [not k and not shape.is_fully_defined()
                    for (_, shape), k in zip(self._specs, self._varying)]

  @property
  def any_varying(self):
    return any(self._varying)

  def arrays(self, n):
    """The loop's initial TensorArrays, `n` elements each."""
    values = tuple(
        tf.TensorArray(dtype, size=n, infer_shape=not k,
                       element_shape=tf.TensorShape([None]).concatenate(shape[k:]) if k else
                       shape)
        for (dtype, shape), k in zip(self._specs, self._varying))
    sizes = tuple(tf.TensorArray(tf.int32, size=n, element_shape=[k])
                  for k in self._varying if k)
    shapes = tuple(tf.TensorArray(tf.int32, size=n, element_shape=[shape.rank])
                   for (_, shape), u in zip(self._specs, self._unsure) if u)
    return values + sizes + shapes

  def write(self, arrays, i, tensors):
    """`arrays` with iteration i's `tensors` (one per output) written."""
    count = len(self._specs)
    values = tuple(a.write(i, _merged(t, k))
                   for a, t, k in zip(arrays, tensors, self._varying))
    sizes = tuple(a.write(i, tf.shape(t, out_type=tf.int32)[:k]) for a, (t, k) in
                  zip(arrays[count:], [(t, k) for t, k in zip(tensors, self._varying) if k]))
    shapes = tuple(a.write(i, tf.shape(t, out_type=tf.int32)) for a, t in
                   zip(arrays[count + len(sizes):],
                       [t for t, u in zip(tensors, self._unsure) if u]))
    return values + sizes + shapes

  def values(self, arrays, n, static_n):
    """The outputs after the loop, as Values: stacked, or ragged where sizes vary."""
    count = len(self._specs)
    sizes = iter(arrays[count:count + sum(1 for k in self._varying if k)])
    shapes = iter(arrays[count + sum(1 for k in self._varying if k):])
    result = []
    for array, (_, shape), k, unsure in zip(arrays, self._specs, self._varying,
                                            self._unsure):
      if k:
        result.append(ragged.multi_axis(array.concat(), next(sizes).stack()))
      else:
        # (a body's output of unknown rank: its shapes' element shape is `[None]`, which an
        # empty array cannot stack)
        check = self._one_shape(_stack(next(shapes), tf.TensorShape([None]), n, static_n)) \
            if unsure else None
        result.append(stacked(_stack(array, shape, n, static_n, check)))
    return result

  def _one_shape(self, shapes):
    """An assertion that every iteration gave one shape (`shapes`: `[n, rank]`)."""
    same = tf.reduce_all(tf.equal(shapes, shapes[:1]))
    return tf.debugging.Assert(same, [f"vectorize: {self._mismatch} Shapes per iteration:",
                                      shapes], summarize=12)


def _merged(tensor, k):
  """`tensor` with its first k axes merged into one (as a value of k varying axes is held)."""
  if k <= 1:
    return tensor
  return tf.reshape(tensor, tf.concat([[-1], tf.shape(tensor)[k:]], 0))


def _stack(array, shape, n, static_n, check=None):
  """The array stacked (after `check`); with no iteration, an empty tensor even if a dim is
  unknown (0)."""
  if check is not None:
    with tf.control_dependencies([check]):
      return _stack(array, shape, n, static_n)
  if shape.is_fully_defined() or static_n:
    return array.stack()
  empty_shape = [0] + [d if d is not None else 0 for d in shape.as_list()] \
      if shape.rank is not None else [0]
  return tf.cond(n > 0, array.stack, lambda: tf.zeros(empty_shape, array.dtype))
