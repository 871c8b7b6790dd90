"""vectorize: static vectorization of TensorFlow 2 programs (parallel-for)."""

from vectorize.api import last_report, pfor, static_shapes, vectorized_map
from vectorize.config import PForConfig
from vectorize.errors import ConversionError, Unvectorizable
from vectorize.registry import registered_op_types

__all__ = ["pfor", "vectorized_map", "registered_op_types", "last_report", "static_shapes",
           "PForConfig", "ConversionError", "Unvectorizable"]
