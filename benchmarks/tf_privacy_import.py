"""TF Privacy 0.9.0 on this stack, for the benchmarks and tests that compare against it.

Its pins exclude numpy 2, so it is installed without its dependencies (`pip install
--no-deps tensorflow-privacy==0.9.0`); its package `__init__` then imports scikit-learn and
tensorflow_estimator for modules the DP Keras models do not use. Where those are not
installed they are stood in for by empty modules. It needs tf.keras to be tf_keras: set
`TF_USE_LEGACY_KERAS=1` before TensorFlow is first asked for `tf.keras`.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

_STOOD_IN = ("tensorflow_estimator", "sklearn")


def available():
  """Whether TF Privacy is installed."""
  return importlib.util.find_spec("tensorflow_privacy") is not None


def dp_keras_model():
  """TF Privacy's `dp_keras_model` module (DPModel, DPSequential)."""
  _stand_in_missing()
  return importlib.import_module("tensorflow_privacy.privacy.keras_models.dp_keras_model")


def layer_registry():
  """TF Privacy's `layer_registry` module (make_default_layer_registry)."""
  _stand_in_missing()
  return importlib.import_module(
      "tensorflow_privacy.privacy.fast_gradient_clipping.layer_registry")


class _Anything(type):
  def __getattr__(cls, name):
    if name.startswith("__"):
      raise AttributeError(name)
    return cls


class _StandIn(types.ModuleType):
  def __getattr__(self, name):
    if name.startswith("__"):
      raise AttributeError(name)
    return _Anything("StandIn", (), {"__init__": lambda self, *a, **k: None})


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """Empty modules for the top-level packages named."""

  def __init__(self, names):
    self.names = names

  def find_spec(self, name, path, target=None):
    del path, target
    if name.split(".")[0] in self.names:
      return importlib.machinery.ModuleSpec(name, self, is_package=True)
    return None

  def create_module(self, spec):
    module = _StandIn(spec.name)
    module.__path__ = []
    return module

  def exec_module(self, module):
    pass


def _stand_in_missing():
  missing = [n for n in _STOOD_IN if importlib.util.find_spec(n) is None]
  if missing and not any(isinstance(f, _StandIns) for f in sys.meta_path):
    sys.meta_path.insert(0, _StandIns(missing))
