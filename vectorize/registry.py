"""The converter registry: (op type, value kind) -> converter.

A converted value has a kind, and an op's converter is chosen by the kind of its inputs:
- `TENSOR`: stacked or invariant tensors (TensorList buffers among them, `lists.py`): the
  converter of most ops;
- `RAGGED`: an input differs in size per iteration in its first axis (`ragged.RaggedRows`;
  a ragged *view* is one too, read as it is only by `ragged.VIEW_READERS`);
- `MULTI_AXIS`: an input differs in several leading axes (`RaggedRows` with `dims`); such a
  converter also says, before conversion, whether it `accepts` an op;
- `MULTI_AXIS_PRODUCER`: not an input kind but an output one: the converter making such a
  value, used instead of the op's own where every use of its output takes it.

The contract, seen from a converter: it is called with one `OpInput` for an op of its type
whose inputs are all converted and of which at least one is stacked (or the op is stateful).
It returns a `Value`, a list of `Value`s (one per op output) or, for ops with no outputs, the
emitted `tf.Operation`. The walker then checks the output count and dtypes and sets static
shapes (`[n] + shape` for stacked outputs), so converters need not. A converter that cannot
handle an instance raises `Unvectorizable(reason)`; the walker falls back.

A family (`family.py`: the elementwise ops) is a set of op types sharing one converter per
kind: its op types are listed once, as they register, and a kind's converter of the family
is registered once (`Family.converts`). An op type's own converter for a kind comes first.

Registration happens at import time of the `converters` package. `register` and
`Family.converts` are the only writers; `registered_op_types(kind)` lists what a kind
converts, and tests/vectorize/registered_kinds.txt keeps every kind's list from shrinking.
"""

TENSOR = "tensor"
RAGGED = "ragged"
MULTI_AXIS = "multi-axis"
MULTI_AXIS_PRODUCER = "multi-axis producer"
KINDS = (TENSOR, RAGGED, MULTI_AXIS, MULTI_AXIS_PRODUCER)

_TABLES = {kind: {} for kind in KINDS}
_CONVERTERS = _TABLES[TENSOR]      # the tensor kind's table (tests patch entries of it)
_ACCEPTS = {}                      # (kind, op type) -> accepts(op) -> bool
_FAMILIES = []


def register(*op_types, kind=TENSOR, accepts=None):
  """Decorator registering one converter for the given op types and value kind; a second
  converter for one (op type, kind) raises. `accepts(op)`: whether it takes this op, asked
  before conversion (multi-axis converters: producers choose their form by their uses)."""

  def decorate(converter):
    table = _TABLES[kind]
    for op_type in op_types:
      if op_type in table:
        raise ValueError(f"A {kind} converter for {op_type!r} is already registered.")
      table[op_type] = converter
      if accepts is not None:
        _ACCEPTS[kind, op_type] = accepts
    return converter

  return decorate


class Family:
  """Op types sharing one converter per kind (`family.py` registers its tensor one)."""

  def __init__(self, name):
    self.name = name
    self.op_types = set()
    self.converters = {}

  def add(self, *op_types):
    self.op_types.update(op_types)

  def converts(self, kind):
    """Decorator registering the family's converter for `kind`."""

    def decorate(converter):
      if kind in self.converters:
        raise ValueError(f"The {self.name} family's {kind} converter is already registered.")
      self.converters[kind] = converter
      return converter

    return decorate

  def converter(self, op_type, kind):
    return self.converters.get(kind) if op_type in self.op_types else None


def family(name):
  """The family called `name`, made on first use."""
  for f in _FAMILIES:
    if f.name == name:
      return f
  _FAMILIES.append(Family(name))
  return _FAMILIES[-1]


def lookup(op_type, kind=TENSOR):
  """The converter of `op_type` for inputs of `kind`: its own, else its family's; or None."""
  own = _TABLES[kind].get(op_type)
  if own is not None:
    return own
  for f in _FAMILIES:
    converter = f.converter(op_type, kind)
    if converter is not None:
      return converter
  return None


def accepts(op, kind):
  """Whether the converter of `op`'s type for `kind` takes this op (see `register`)."""
  test = _ACCEPTS.get((kind, op.type))
  return test is None or test(op)


def converter_of(op, kind):
  """The converter for `op` (a graph op) with inputs of `kind`, if it takes this op."""
  converter = lookup(op.type, kind)
  return converter if converter is not None and accepts(op, kind) else None


def registered_op_types(kind=TENSOR):
  """The sorted op types that have a converter for `kind` (a family's included)."""
  if kind not in _TABLES:
    raise ValueError(f"{kind!r} is no value kind; the kinds are {', '.join(KINDS)}.")
  types = set(_TABLES[kind])
  for f in _FAMILIES:
    if kind in f.converters:
      types |= f.op_types
  return sorted(types)


def registered():
  """{kind: sorted op types} for every kind: what the audit checks."""
  return {kind: registered_op_types(kind) for kind in KINDS}
