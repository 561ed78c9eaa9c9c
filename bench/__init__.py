"""Benchmarks: the figures DESIGN.md holds the operator to, measured on a local control plane."""
