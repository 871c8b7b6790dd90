"""Conversion options a caller sets around a pfor: `static_shapes()` and when XLA asks for it,
and the checked mode's sample (`vectorize.checked()`, `checked.py`).

Control flow converts with dynamic shapes (partitioned active sets) unless the graph being
built is compiled by XLA, which needs static shapes (masked active sets), or the caller asks
for static shapes explicitly. A pfor inside another pfor's body converts control flow with
masks too (`masked_control_flow`), its shapes staying dynamic.
"""

import contextlib
import os

import tensorflow as tf
from tensorflow.python.ops import control_flow_util


class _Options:
  static_shapes = False
  masked_control_flow = False
  checked = None          # the checked mode's sample: an int, "all", or None (off)
  outside_xla = False     # a conversion for XLA checked outside it, where nothing compiles


_options = _Options()
CHECKED_VARIABLE = "VECTORIZE_CHECKED"
CHECK_ALL = "all"
DEFAULT_SAMPLE = 8


@contextlib.contextmanager
def setting(name, value):
  """Sets option `name` to `value` within the block, then restores it."""
  previous = getattr(_options, name)
  setattr(_options, name, value)
  try:
    yield
  finally:
    setattr(_options, name, previous)


def static_shapes(enabled=True):
  """Within this block, pfor converts control flow with static shapes (masks, no gathers).

  XLA contexts (`tf.function(jit_compile=True)`) get this automatically; use it to build a
  graph for XLA compiled elsewhere, or to compare both modes.

  Example:
    >>> with vectorize.static_shapes():
    ...   y = vectorize.pfor(body, 8)
  """
  return setting("static_shapes", enabled)


def masked_control_flow():
  """Within this block, pfor converts control flow with masks, shapes staying dynamic.

  The engine traces a loop body in this block: a pfor inside it emits a graph that the outer
  loop converts, and a partitioned inner conditional or loop would give every outer
  iteration parts of their own sizes, which its gathers and stitches cannot take.
  """
  return setting("masked_control_flow", True)


def tracing_a_body():
  """Whether a loop body is being traced: a pfor here is nested in another's body."""
  return bool(_options.masked_control_flow)


def masked_control_flow_wanted():
  """Control flow converts with masks: static shapes wanted, or a body being traced."""
  return _options.masked_control_flow or static_shapes_wanted()


def checked_sample():
  """The checked mode's sample (an int, or CHECK_ALL), or None when not checking: set by
  `vectorize.checked()`, else by the environment variable VECTORIZE_CHECKED ("1": the
  default sample, "all", or a number)."""
  if _options.checked is not None:
    return _options.checked
  env = os.environ.get(CHECKED_VARIABLE, "").strip().lower()
  if env in ("", "0", "false", "no", "off"):
    return None
  if env in ("1", "true", "yes", "on"):
    return DEFAULT_SAMPLE
  if env == CHECK_ALL:
    return CHECK_ALL
  if not env.isdigit():
    raise ValueError(
        f"{CHECKED_VARIABLE}={os.environ[CHECKED_VARIABLE]!r} is not understood: set it to 1 "
        "(check a sample of 8 iterations), all (every iteration), a number of iterations "
        "k >= 2, or 0 (off).")
  return int(env)


def cache_key():
  """What a caller asks of every conversion, which an eager cache key must hold: static
  shapes (`static_shapes()`) and the checked mode."""
  return (_options.static_shapes, checked_sample())


def static_shapes_wanted():
  """Static-shape control flow in the graph being built: under XLA, or when requested."""
  return _options.static_shapes or compiled_by_xla()


def static_shapes_cause():
  """Where static shapes were asked for, for a refusal's message: ('under XLA', the way out)
  or ('under vectorize.static_shapes()', ...)."""
  if compiled_by_xla() or outside_xla_check():   # the checked mode checks XLA's conversion
    return "under XLA (jit_compile=True)", "run without jit_compile"
  return ("under vectorize.static_shapes() (a graph built for XLA)",
          "convert outside vectorize.static_shapes()")


def outside_xla_check():
  """Whether a conversion meant for XLA is being checked outside it (`checked.py`)."""
  return _options.outside_xla


def compiled_by_xla():
  """Whether the graph being built is compiled by XLA (`jit_compile=True`)."""
  if _options.outside_xla:    # a function traced in tf.init_scope() still reads as XLA's
    return False
  return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
