"""The two ways a conversion can fail.

`Unvectorizable` means "this op, with these inputs, has no vectorized form here": the walker
answers it with the sequential fallback (or a `ConversionError` when fallback is off).
`ConversionError` means a bug or invalid input; it is never swallowed.
"""


class Unvectorizable(Exception):
  """Raised by a converter that cannot vectorize this instance; the walker falls back."""


class ConversionError(ValueError):
  """A conversion that cannot proceed: bad input, a disabled fallback, or a converter bug.

  A `ValueError`, as TF's pfor raises, so code catching that catches this.
  """

  # Autograph re-raises an error from a tf.function's user code with the same type only if
  # that type's __init__ is Exception's (ValueError's is not); otherwise a StagingError.
  __init__ = Exception.__init__
