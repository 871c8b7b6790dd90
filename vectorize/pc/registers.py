"""The VM's registers: one `[count + 1, batch, ...]` file per variable type.

XLA copies whatever passes through a conditional, so a dispatch (`tf.switch_case`) that
carried every register would cost the whole state at every step (measured: 50 us a step
for 60 registers of `[100, 10]`, against 3 us for the arithmetic). A block instead returns
only the registers it writes that some later block reads, as *slots*: per type, `width`
whole registers `[batch, ...]` (under XLA the block keeps the other lanes' values itself),
padded to the most registers of that type any block writes. After the dispatch, one
scatter per type writes the slots to the rows a static table gives for the block that ran;
the last row of each file takes the padding.
"""

import numpy as np
import tensorflow as tf


class Layout:
  """Where each variable lives in the file of its type, and which rows each block's slots
  are written to (the VM lays out its stacks the same way, one buffer per type).

  types: variable -> `ir.VarType`; writes: for each block (in dispatch order), the variables
  it may write; padding: the row padding slots go to (None: a spare last row).
  """

  def __init__(self, types, writes, padding=None):
    self.types = {}
    self.names = {}                      # type key -> registers of that type, in row order
    for var in sorted(types):
      key = str(types[var])
      self.types[key] = types[var]
      self.names.setdefault(key, []).append(var)
    self.rows = {v: (key, r) for key, vs in self.names.items() for r, v in enumerate(vs)}
    self.slots = [{key: [v for v in block if self.rows[v][0] == key] for key in self.names}
                  for block in writes]
    self.width = {key: max([len(s[key]) for s in self.slots] + [0]) for key in self.names}
    self.targets = {key: np.array([[self.rows[v][1] for v in s[key]] +
                                   [len(self.names[key]) if padding is None else padding] *
                                   (self.width[key] - len(s[key]))
                                   for s in self.slots], np.int32).reshape(len(writes), -1)
                    for key in self.names}

  def __contains__(self, var):
    return var in self.rows

  def initial(self, values, batch):
    """The files, with `values` (register -> `[batch, ...]` tensor, or a Python number for
    every lane) set and every other row zero. Built as selects over one broadcast of the
    numbers, which XLA fuses into one kernel per file (a stack of rows is one kernel per
    row, and XLA on CPU fuses no concatenate of more than 8 parts)."""
    files = {}
    for key, names in self.names.items():
      t = self.types[key]
      numbers = np.zeros([len(names) + 1], t.dtype.as_numpy_dtype)
      for r, v in enumerate(names):
        if v in values and not tf.is_tensor(values[v]):
          numbers[r] = values[v]
      shape = tf.stack([len(names) + 1, batch] + list(t.shape))
      ones = [1] * len(t.shape)
      file = tf.broadcast_to(tf.reshape(tf.constant(numbers), [-1, 1] + ones), shape)
      row = tf.reshape(tf.range(len(names) + 1), [-1, 1] + ones)
      for r, v in enumerate(names):
        if v in values and tf.is_tensor(values[v]):
          file = tf.where(tf.equal(row, r), tf.cast(values[v], t.dtype)[None], file)
      files[key] = file
    return files

  def read(self, files, var):
    key, row = self.rows[var]
    return files[key][row]

  def gathered(self, files, names, members):
    """The registers `names` as `members` read them (register -> `[members.n, ...]`): one
    read per file, not one per register (under XLA each is a kernel)."""
    out = {}
    for key in self.names:
      wanted = [v for v in names if self.rows[v][0] == key]
      if wanted:
        rows = tf.gather(files[key], [self.rows[v][1] for v in wanted])
        out.update(zip(wanted, tf.unstack(members.gather(rows, axis=1))))
    return out

  def rows_of(self, files):
    """Every register's value, read lazily: one unstack per file, at its first read."""
    return _Rows(self, files)

  def slots_of(self, block, values):
    """The slots of the block at dispatch index `block`: per type, a `[width, batch, ...]`
    tensor (register -> its value after the block), the padding repeating
    a value (it lands in the spare row)."""
    out = {}
    for key, names in self.slots[block].items():
      if self.width[key]:
        filler = values[names[0] if names else self.names[key][0]]
        out[key] = tf.stack([values[v] for v in names] +
                            [filler] * (self.width[key] - len(names)))
    return out

  def written(self, files, block, slots, xla=False):
    """The files after the block at dispatch index `block` (a scalar tensor) ran: one
    scatter per file (each slot a whole register: the block kept its other lanes). Under
    XLA, whose scatter skips rows out of range, padding goes past the file: no write at
    all (5-10% of a NUTS or fib step)."""
    files = dict(files)
    for key, values in slots.items():
      targets = self.targets[key]
      if xla:
        spare = len(self.names[key])
        targets = np.where(targets == spare, spare + 1, targets)
      rows = tf.gather(tf.constant(targets), block)
      files[key] = tf.tensor_scatter_nd_update(files[key], rows[:, None], values)
    return files


class _Rows:
  """Registers read from the files, one `tf.unstack` per file (not one slice per read)."""

  def __init__(self, layout, files):
    self.layout = layout
    self.files = files
    self.unstacked = {}

  def __getitem__(self, var):
    key, row = self.layout.rows[var]
    if key not in self.unstacked:
      self.unstacked[key] = tf.unstack(self.files[key])
    return self.unstacked[key][row]
