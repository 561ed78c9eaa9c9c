"""The queue figure's workload (bench/queue.py) and its place in the bench's command line,
without timing anything: what it measures is bench's, never a test's."""

from __future__ import annotations

from collections import Counter

from bench.queue import KEYS, NAMESPACES, REQUESTS, workload
from bench.run import DEFAULT, LOCAL, parse_args


def test_the_workload_is_ten_thousand_requests_over_a_thousand_keys() -> None:
    requests = workload()
    assert len(requests) == REQUESTS == 10_000
    per_key = Counter(request for request, _ in requests)
    assert len(per_key) == KEYS == 1_000
    assert set(per_key.values()) == {REQUESTS // KEYS}
    assert len({request.namespace for request in per_key}) == NAMESPACES
    assert workload() == requests, "the same on every run"


def test_the_queue_figure_runs_when_named_and_needs_no_control_plane() -> None:
    assert parse_args(["queue"]).figures == ["queue"]
    assert "queue" in parse_args(["all"]).figures
    assert "queue" in LOCAL
    assert "queue" not in DEFAULT
