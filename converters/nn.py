"""nn converters (being written)."""
