"""Benchmarks (ARCHITECTURE §10): each script prints one JSON line of ratios against a
baseline measured in the same run; `python -m bench.run` runs them all and writes the report."""
