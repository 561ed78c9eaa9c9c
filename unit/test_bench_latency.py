"""The latency figure's own arithmetic (bench/latency.py), without a server."""

from __future__ import annotations

import pytest

from bench.latency import gc_cycles, percentile


def test_the_latency_figure_reads_the_api_servers_garbage_collections() -> None:
    metrics = (
        "# TYPE go_gc_duration_seconds summary\n"
        'go_gc_duration_seconds{quantile="0.5"} 0.0001\n'
        "go_gc_duration_seconds_sum 0.25\n"
        "go_gc_duration_seconds_count 417\n"
    )
    assert gc_cycles(metrics) == 417
    with pytest.raises(ValueError, match="go_gc_duration_seconds_count"):
        gc_cycles("apiserver_request_total 3\n")


def test_percentiles_are_nearest_rank() -> None:
    values = [0.1 * i for i in range(1, 31)]
    assert percentile(values, 0.5) == values[14]
    assert percentile(values, 0.99) == values[-1], "p99 of 30 probes is their slowest"
