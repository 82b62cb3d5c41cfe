"""Benchmarks, not tests: `make bench` runs the main() of each module."""
