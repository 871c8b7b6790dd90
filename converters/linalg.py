"""linalg converters (being written)."""
