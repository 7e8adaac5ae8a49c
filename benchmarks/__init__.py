"""Benchmarks with baselines measured in the same run."""
