"""The two ways a conversion can fail.

`Unvectorizable` means "this op, with these inputs, has no vectorized form here": the walker
answers it with the sequential fallback (or a `ConversionError` when fallback is off).
`ConversionError` means a bug or invalid input; it is never swallowed.
"""


class Unvectorizable(Exception):
  """Raised by a converter that cannot vectorize this instance; the walker falls back."""


class ConversionError(Exception):
  """A conversion that cannot proceed: bad input, a disabled fallback, or a converter bug."""
