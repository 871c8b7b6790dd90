"""reductions converters (being written)."""
