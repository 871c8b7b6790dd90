"""state converters (being written)."""
