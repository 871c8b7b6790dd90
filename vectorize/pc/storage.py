"""The VM's stacks. (The members waiting at one block are read and written as the active
set's strategy holds them: `active_set.Partitioned.members` gathers their positions (dynamic
shapes), `active_set.Masked.members` runs every lane, the others *borrowing* the first
waiting lane's inputs (static shapes, for XLA).) `Stacks` holds every stack of
one type in one static `[count, depth + 1, batch, ...]` buffer with one pointer per member
and stack: a push or pop writes or reads one entry per member, O(batch), never
O(depth x batch). Each stack's last row takes the writes that must not land (lanes not
pushing, members whose stack is full), so no write needs a gather of the old value first.
"""

import tensorflow as tf


class Stacks:
  """Every stack of one type: a `[count, depth + 1, batch, ...]` buffer. Each stack's
  pointers (one per member: the count of saved values) are registers the VM passes in."""

  def __init__(self, buffer):
    self.buffer = buffer

  @staticmethod
  def empty(count, depth, batch, dtype, shape):
    return Stacks(tf.zeros(tf.stack([count, depth + 1, batch] + list(shape)), dtype))

  def depth(self):
    static = self.buffer.shape[1]
    return static - 1 if static is not None else tf.shape(self.buffer)[1] - 1

  def top(self, index, pointer, members):
    """Stack `index`'s top value for each member (the members have at least one)."""
    rows = members.gather(pointer) - 1
    return tf.gather_nd(self.buffer, tf.stack(
        [tf.fill(tf.shape(rows), index), rows, members.positions], axis=1))

  def push(self, index, pointer, members, values, grow):
    """Pushes `values` (one per computed row) on stack `index` at once (gathered members).

    With `grow`, a full buffer doubles first; otherwise a member already at the depth
    overflows and its value goes to the discard row. Returns the stacks, the new pointer
    and who overflowed.
    """
    rows = members.gather(pointer)
    stacks = self.grown(rows) if grow else self
    depth = stacks.depth()
    overflow = rows >= depth
    rows = tf.where(overflow, depth, rows)
    where = tf.stack([tf.fill(tf.shape(rows), index), rows, members.lanes], axis=1)
    buffer = tf.tensor_scatter_nd_update(stacks.buffer, where, values)
    return (Stacks(buffer), pointer + tf.cast(members.mask, tf.int32),
            members.selected(overflow))

  def staged_push(self, pointer, members):
    """A push (masked lanes) as a write to apply later (`written`): for XLA, which copies
    whatever passes through a conditional, so the VM's dispatch must not carry the buffers.

    Returns the new pointer (the row written is one below it) and who overflowed: a
    member already at the depth writes to the discard row.
    """
    overflow = pointer >= self.depth()
    return pointer + tf.cast(members.mask, tf.int32), members.selected(overflow)

  def grown(self, rows):
    """The stacks, their depth doubled if some row to write is past it."""
    buffer = self.buffer
    return Stacks(tf.cond(tf.reduce_max(tf.concat([rows, [-1]], 0)) >= self.depth(),
                          lambda: tf.concat([buffer, tf.zeros_like(buffer)], 1),
                          lambda: buffer))

  def written(self, indices, rows, values, lanes, xla=False):
    """The stacks with staged pushes applied: `indices` [pushes] names each push's stack,
    `rows` [pushes, batch] its rows (-1 or past the depth: none), `values` [pushes, batch,
    ...] its values."""
    depth = self.depth()
    # No write: the discard row, or under XLA (its scatter skips rows out of range) none.
    rows = tf.where((rows < 0) | (rows > depth), depth + 1 if xla else depth, rows)
    where = tf.stack([tf.broadcast_to(indices[:, None], tf.shape(rows)), rows,
                      tf.broadcast_to(lanes[None, :], tf.shape(rows))], axis=-1)
    return Stacks(tf.tensor_scatter_nd_update(self.buffer, where, values))
