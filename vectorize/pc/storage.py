"""How the VM reads and writes the members waiting at one block, and its stacks.

`Partitioned` gathers the waiting members' positions (dynamic shapes); `Masked` runs every
lane, the waiting ones marked by a mask and the others *borrowing* the first waiting lane's
inputs, so no lane computes on junk (static shapes, for XLA). `Stacks` holds every stack of
one type in one static `[count, depth + 1, batch, ...]` buffer with one pointer per member
and stack: a push or pop writes or reads one entry per member, O(batch), never
O(depth x batch). Each stack's last row takes the writes that must not land (lanes not
pushing, members whose stack is full), so no write needs a gather of the old value first.
"""

import tensorflow as tf


class Partitioned:
  """The members at a block, gathered: a leading axis of their count."""

  def __init__(self, mask, lanes):
    del lanes
    self.mask = mask
    self.positions = tf.cast(tf.where(mask)[:, 0], tf.int32)
    self.lanes = self.positions        # where each computed row is written
    self.n = tf.size(self.positions)
    self.static_n = None

  def gather(self, x):
    return tf.gather(x, self.positions)

  def update(self, x, new):
    """`x` with the members' rows replaced by `new` (one row per member)."""
    return tf.tensor_scatter_nd_update(x, self.positions[:, None], new)

  def selected(self, flags):
    """`flags` (one per computed row) as a mask over the whole batch."""
    return tf.scatter_nd(self.positions[:, None], flags, tf.shape(self.mask))


class Masked:
  """Every lane runs; lanes not at the block borrow the first waiting lane's inputs."""

  def __init__(self, mask, lanes, first):
    """`first`: the lowest lane in `mask` (the lanes not in it borrow its inputs)."""
    self.mask = mask
    self.lanes = lanes
    batch = tf.shape(mask)[0]
    self.positions = tf.where(mask, lanes, first)
    self.borrowing = True
    self.n = batch
    self.static_n = mask.shape[0]

  def unborrowed(self):
    """The same members, every lane on its own inputs: for a block under XLA that can
    neither fail nor make a gradient of other lanes' junk NaN (integers only), which then
    gathers nothing (a kernel less per block to compile)."""
    out = Masked.__new__(Masked)
    out.__dict__.update(self.__dict__, positions=self.lanes, borrowing=False)
    return out

  def gather(self, x):
    return tf.gather(x, self.positions) if self.borrowing else x

  def sized_here(self):
    """The same members, their count read again from the mask's shape in the graph being
    built: a gradient that recomputes a block reads the mask the forward step kept, whose
    shape XLA knows, but the count as the forward step computed it would come back as a
    value, not a compile-time constant (XLA refuses it as a `range`'s size)."""
    out = Masked.__new__(Masked)
    out.__dict__.update(self.__dict__, n=tf.shape(self.mask)[0])
    return out

  def update(self, x, new):
    """`new` in every lane: the VM keeps only the members' lanes of what a block writes
    to registers, after the dispatch (`registers.Layout.written`)."""
    del x
    return new

  def selected(self, flags):
    return flags & self.mask


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

  def written(self, indices, rows, values, lanes):
    """The stacks with staged pushes applied: `indices` [pushes] names each push's stack,
    `rows` [pushes, batch] its rows (-1 or past the depth: none), `values` [pushes, batch,
    ...] its values."""
    depth = self.depth()
    rows = tf.where((rows < 0) | (rows > depth), depth, rows)   # no write: the discard row
    where = tf.stack([tf.broadcast_to(indices[:, None], tf.shape(rows)), rows,
                      tf.broadcast_to(lanes[None, :], tf.shape(rows))], axis=-1)
    return Stacks(tf.tensor_scatter_nd_update(self.buffer, where, values))
