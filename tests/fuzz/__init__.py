"""A differential fuzzer: random bodies, pfor against the sequential loop in every mode."""
