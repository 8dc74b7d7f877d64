"""Comparison benchmarks: timeshard and its peers on the same generated input (issue 5)."""
