"""Benchmarks: one module per question, each run as ``python -m benchmarks.<name> [--quick] [--out FILE]``.

They report ratios measured within one run (so a loaded machine slows both sides alike) and
state every target as PASS or MISS; they are not timed tests. See ``benchmarks/README.md``.
"""
