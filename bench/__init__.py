"""Benchmarks: the operator's figures, measured on a local control plane; bench/README.md
gives each one's target."""
