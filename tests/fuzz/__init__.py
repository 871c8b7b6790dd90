"""A differential fuzzer: random bodies, pfor against the sequential loop in every mode.

programs.py generates seeded bodies (ir.py holds them as data and renders them as Python),
check.py runs one in each mode and classifies the outcome, shrink.py cuts a failing one
down to a repro, run.py is the command line (`python -m tests.fuzz --help`), and
test_fuzz.py runs a fixed set of seeds in CI.
"""
