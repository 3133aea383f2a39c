"""Benchmark scripts, run from a checkout as `python -m benchmarks.NAME` (never installed: the
distribution's only top-level package is `star`, and nothing in `star` imports these)."""
