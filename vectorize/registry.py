"""The converter table: op type string -> converter.

The contract, seen from a converter: it is called with one `OpInput` for an op of its type
whose inputs are all converted and of which at least one is stacked (or the op is stateful).
It returns a `Value`, a list of `Value`s (one per op output) or, for ops with no outputs, the
emitted `tf.Operation`. The walker then checks the output count and dtypes and sets static
shapes (`[n] + shape` for stacked outputs), so converters need not. A converter that cannot
handle an instance raises `Unvectorizable(reason)`; the walker falls back.

Registration happens at import time of the `converters` package. `register` is the only
writer of the table; family helpers call it.
"""

_CONVERTERS = {}


def register(*op_types):
  """Decorator registering one converter for the given op types; duplicates raise."""
  return registering_into(_CONVERTERS, op_types, "A converter")


def registering_into(table, op_types, what):
  """A decorator that enters its converter in `table` under each op type; a second entry for
  one type raises naming `what` (the ragged table uses it too)."""

  def decorate(converter):
    for op_type in op_types:
      if op_type in table:
        raise ValueError(f"{what} for {op_type!r} is already registered.")
      table[op_type] = converter
    return converter

  return decorate


def lookup(op_type):
  """The converter for `op_type`, or None."""
  return _CONVERTERS.get(op_type)


def registered_op_types():
  """The sorted op types that have a converter."""
  return sorted(_CONVERTERS)
