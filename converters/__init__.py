"""The per-op converters, one module per op family; importing this fills the registry."""

# pylint: disable=unused-import
from converters import arrays
from converters import backprop
from converters import elementwise
from converters import image
from converters import linalg
from converters import nn
from converters import parsing
from converters import per_row
from converters import ragged_arrays
from converters import ragged_consumers
from converters import ragged_layers
from converters import ragged_images
from converters import ragged_producers
from converters import random
from converters import reductions
from converters import shapes
from converters import slicing
from converters import spectral
from converters import state
from converters import strings
from converters import tensor_lists
from converters import tensor_arrays
