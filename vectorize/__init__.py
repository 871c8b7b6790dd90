"""vectorize: static vectorization of TensorFlow 2 programs (parallel-for)."""

from vectorize.api import last_report, pfor, static_shapes, vectorized_map
from vectorize.checked import checked
from vectorize.config import PForConfig
from vectorize.errors import CheckError, ConversionError, Unvectorizable
from vectorize.explanation import Explanation, explain
from vectorize.helpers import data
from vectorize.helpers.jacobian import (batch_jacobian, batch_jacobian_fn, hessian, jacobian,
                                        jacobian_fn)
from vectorize.helpers.map_fn import map_fn
from vectorize.helpers.clipping import clipped_gradient_sum, per_example_gradient_norms
from vectorize.helpers.per_example import per_example_gradients
from vectorize.helpers.tf_privacy import tf_privacy_layer_registry
from vectorize.pc import autobatch
from vectorize.registry import registered_op_types

__all__ = [
    "CheckError", "ConversionError", "Explanation", "PForConfig", "Unvectorizable", "autobatch",
    "batch_jacobian", "checked", "clipped_gradient_sum", "batch_jacobian_fn", "data", "explain", "hessian", "jacobian", "jacobian_fn",
    "last_report", "map_fn", "per_example_gradient_norms", "per_example_gradients", "pfor",
    "registered_op_types", "tf_privacy_layer_registry",
    "static_shapes", "vectorized_map", "PrivateModel",
]


def __getattr__(name):
  """`PrivateModel` imports Keras, which `import vectorize` does not need otherwise."""
  if name == "PrivateModel":
    from vectorize.helpers.private_model import PrivateModel  # pylint: disable=import-outside-toplevel
    return PrivateModel
  raise AttributeError(f"module 'vectorize' has no attribute {name!r}")
