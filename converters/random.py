"""random converters (being written)."""
