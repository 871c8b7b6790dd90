"""Converters for ops that call functions; they convert the callee with the walker."""

# pylint: disable=unused-import
from vectorize.control_flow import calls
from vectorize.control_flow import cond
from vectorize.control_flow import while_loop
