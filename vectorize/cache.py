"""The eager cache: one `tf.function` per body, keyed by what the body computes with.

An eager pfor (and each eager helper) wraps its whole conversion in a `tf.function`, kept
here so that calling it again neither traces nor converts again. The key is the body's code
and what it closes over: user functions recursively, tensors and other objects by identity
(held alive, so an id cannot be reused), numbers and strings by value, and the tensors
(and variables, layers, functions, and numbers and strings outside lists) a body reaches
through containers and its own objects (a bound method's `self.scale`, a closure's
`params["scale"]`, a few levels deep), so rebinding such an attribute or entry converts
anew too, as the loop would read the new value.

One recipe serves every eager entry point (`eager_call`): the key is (the entry's name, the
user function's `callable_key`, what else the conversion depends on), plus the options the
caller set; the function is traced with autograph on for the user's code (`body_function`:
eagerly the user's code ran as Python, so a Python `if` on a tensor must work); the call runs
in `functions_traced`.
"""

import collections
import contextlib
import functools
import numbers
import types

from absl import logging
import tensorflow as tf

from vectorize import errors
from vectorize import options
from vectorize import trace

_EAGER_CACHE_SIZE = 64
_eager_cache = collections.OrderedDict()


def eager_call(tag, user_fn, key, make, *args):
  """Calls the function cached under (`tag`, `user_fn`'s key, `key`) on `args`, made by
  `make()` on a miss (`body_function` of the entry's graph code, most often).

  A body that changes what it closes over while it is traced (a trace counter in a list, a
  log it appends to) has another key after its trace: the function is cached under that
  one too, so the next call finds it rather than tracing again, and again."""
  full_key = (tag, callable_key(user_fn)) + tuple(key)
  made = []
  graph_fn = cached(full_key, lambda: made.append(1) or make())
  traces = _tracing_count(graph_fn)
  with functions_traced():
    result = graph_fn(*args)
  if made or _tracing_count(graph_fn) != traces:   # the body was traced
    after = (tag, callable_key(user_fn)) + tuple(key)
    if after != full_key:
      cached(after, lambda: graph_fn)
  return result


def _tracing_count(fn):
  count = getattr(fn, "experimental_get_tracing_count", None)
  return count() if count is not None else None


def internal_function(fn, autograph=False, **function_options):
  """`tf.function(fn)` for a conversion of ours. It traces once per batch size and body by
  design (static shapes), so TensorFlow's frequent-retracing warning, which would name our
  closure and tell the user to move a tf.function they never wrote, is off for it."""
  made = tf.function(fn, autograph=autograph, **function_options)
  made._omit_frequent_tracing_warning = True  # pylint: disable=protected-access
  return made


def body_function(run, **function_options):
  """`run` as a `tf.function` that traces the user's code inside it with autograph on (as
  an eager body's Python ran), our own code untouched."""

  def traced(*args):
    with trace.autograph_enabled():
      return run(*args)

  return internal_function(traced, **function_options)


def cached(key, make):
  """The function cached under `key` and the conversion options the caller set
  (`options.cache_key()`: static shapes, the checked mode), made by `make()` on a miss
  (least recent evicted)."""
  key = (key, options.cache_key())
  fn = _eager_cache.get(key)
  if fn is None:
    fn = _eager_cache[key] = make()
    if len(_eager_cache) > _EAGER_CACHE_SIZE:
      _eager_cache.popitem(last=False)
  else:
    _eager_cache.move_to_end(key)
  return fn


class Identity:
  """Keys an object by identity while holding it alive (so its id cannot be reused)."""
  __slots__ = ("obj",)

  def __init__(self, obj):
    self.obj = obj

  def __hash__(self):
    return id(self.obj)

  def __eq__(self, other):
    return isinstance(other, Identity) and other.obj is self.obj


def callable_key(fn, seen=frozenset()):
  """A key that changes when the body's code or anything it closes over changes.

  Module globals the code names count too, callables included: rebinding a global layer
  must convert anew. Recurses into the user's functions only: a library function it closes over
  (`tf.math.reduce_sum`, whose wrappers close over each other) is keyed by identity, and so
  is a function met again through its own closure (recursion), which would never end.
  """
  if isinstance(fn, functools.partial):
    return ("partial", callable_key(fn.func, seen),
            tuple(_value_key(a, seen) for a in fn.args),
            tuple(sorted((k, _value_key(v, seen)) for k, v in fn.keywords.items())))
  python_function = getattr(fn, "python_function", None)   # a tf.function
  if python_function is not None:
    return ("tf.function", Identity(fn), callable_key(python_function, seen))
  if isinstance(fn, types.MethodType):
    return ("method", _value_key(fn.__self__, seen), callable_key(fn.__func__, seen))
  code = getattr(fn, "__code__", None)
  if id(fn) in seen:   # met again through its own closure (recursion)
    return ("object", Identity(fn))
  if code is None:     # a callable object: by its attributes (`_value_key`)
    return ("object", _value_key(fn, seen))
  seen = seen | {id(fn)}
  closure = tuple(_value_key(_cell_contents(c), seen) for c in fn.__closure__ or ())
  defaults = tuple(_value_key(d, seen) for d in fn.__defaults__ or ())
  globals_ = tuple((name, _value_key(fn.__globals__[name], seen)) for name in code.co_names
                   if name in fn.__globals__)
  return ("function", code, closure, defaults, globals_)


# How deep the key follows containers and user objects, and the most entries it reads of
# one (beyond that, the container is keyed by identity alone).
_CONTENT_DEPTH = 3
_CONTENT_ENTRIES = 256
_PLAIN = (numbers.Number, str, bytes, type(None))


def _value_key(value, seen, depth=0):
  if isinstance(value, (types.ModuleType, type)) or value is None:
    return value
  if isinstance(value, (numbers.Number, str, bytes, tf.DType)):
    return (type(value), value)
  if callable(value) and hasattr(value, "__code__") and not _is_library_function(value):
    return callable_key(value, seen)
  contents = _contents(value) if depth < _CONTENT_DEPTH and id(value) not in seen else None
  if contents is None:
    return Identity(value)
  # The entries a body may read a tensor, a variable, a layer, a function or a Python value
  # through (a hyperparameter in a config dict or attribute: read at trace time, so a new
  # value must convert anew, as the loop would read it). A list's plain Python entries are
  # left out: a list is where a body keeps a log or a count of its calls, which grows with
  # every call and would otherwise make a new key at each.
  inner = seen | {id(value)}
  plain_too = type(value) is not list
  return (Identity(value), tuple((_value_key(k, inner, depth + 1),
                                  _value_key(v, inner, depth + 1))
                                 for k, v in contents if plain_too or not isinstance(v, _PLAIN)))


def _contents(value):
  """(key, entry) pairs of a list, tuple, dict or user object (its attributes), which a
  body may read a tensor through; None for anything else, or a container too long."""
  if type(value) in (list, tuple):
    pairs = list(enumerate(value))
  elif type(value) is dict:
    pairs = list(value.items())
  elif hasattr(value, "__dict__") and not _is_library_object(value):
    pairs = list(vars(value).items())
    if any(_is_library_class(c) for c in type(value).__mro__[1:]):   # a Keras model's own
      pairs = [(k, v) for k, v in pairs if not k.startswith("_")]   # bookkeeping left out
  else:
    return None
  return pairs if len(pairs) <= _CONTENT_ENTRIES else None


def _is_library_class(cls):
  return (cls.__module__ or "").split(".")[0] in _LIBRARY_PREFIXES


def _is_library_object(value):
  """An object of TensorFlow, Keras, numpy or vectorize (a layer, a model, a tensor): keyed
  by identity, its state being in variables or managed by its library."""
  module = type(value).__module__ or ""
  return module.split(".")[0] in _LIBRARY_PREFIXES or callable(getattr(value, "numpy", None))


_LIBRARY_PREFIXES = ("tensorflow", "keras", "tf_keras", "numpy", "vectorize", "converters")


def _is_library_function(fn):
  module = getattr(fn, "__module__", None) or ""
  return module.split(".")[0] in _LIBRARY_PREFIXES


def _cell_contents(cell):
  try:
    return cell.cell_contents
  except ValueError:   # a cell not yet filled (a name the function defines later)
    return None


@contextlib.contextmanager
def functions_traced():
  """The block of an eager call of a cached function: a failed check raises CheckError,
  and `tf.config.run_functions_eagerly(True)` is off, as TF's pfor does (the walker needs
  the body as a graph, and runs our cached `tf.function`s to get it)."""
  with errors.raising_check_errors():
    if not tf.config.functions_run_eagerly():
      yield
      return
    with _functions_not_run_eagerly():
      yield


@contextlib.contextmanager
def _functions_not_run_eagerly():
  logging.warning("vectorize: tf.config.run_functions_eagerly(True) is set; vectorizing "
                  "needs tf.function, so it is turned off for this call.")
  tf.config.run_functions_eagerly(False)
  try:
    yield
  finally:
    tf.config.run_functions_eagerly(True)
