"""OpCases for the linalg converters."""

import tensorflow as tf

from tests.converters.op_cases import OpCase

CASES = []
