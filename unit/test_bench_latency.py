"""The latency figure's own arithmetic (bench/latency.py), without a server."""

from __future__ import annotations

import math

import pytest

from bench.cluster import CompanyRef
from bench.daemon import gc_cycles, parse_samples
from bench.latency import (
    Load,
    bucket_quantile,
    everyone,
    histogram_between,
    percentile,
    verdicts_waiting,
    who_waited,
)


def test_the_bench_reads_the_api_servers_garbage_collections() -> None:
    metrics = parse_samples(
        "# TYPE go_gc_duration_seconds summary\n"
        'go_gc_duration_seconds{quantile="0.5"} 0.0001\n'
        "go_gc_duration_seconds_sum 0.25\n"
        "go_gc_duration_seconds_count 417\n"
    )
    assert gc_cycles(metrics) == 417
    with pytest.raises(ValueError, match="go_gc_duration_seconds_count"):
        gc_cycles(parse_samples("apiserver_request_total 3\n"))


def test_verdicts_waiting_are_the_company_queues_normal_priority_depth() -> None:
    metrics = parse_samples(
        "# TYPE workqueue_depth gauge\n"
        'workqueue_depth{controller="company",name="company",priority="0"} 43.0\n'
        'workqueue_depth{controller="company",name="company",priority="-200"} 950.0\n'
        'workqueue_depth{controller="engineclass",name="engineclass",priority="0"} 7.0\n'
    )
    assert verdicts_waiting(metrics) == 43
    assert verdicts_waiting(parse_samples("workqueue_adds_total 3\n")) == 0


def test_percentiles_are_nearest_rank() -> None:
    values = [0.1 * i for i in range(1, 31)]
    assert percentile(values, 0.5) == values[14]
    assert percentile(values, 0.99) == values[-1], "p99 of 30 probes is their slowest"


def test_every_company_of_a_load_counts_and_one_never_accepted_is_later_than_any() -> None:
    refs = [CompanyRef("load-0000", f"c{i:05d}", "bench-a") for i in range(100)]
    load = Load(background=refs[:99], probes=refs[99:])
    load.sent = {r.key: 10.0 for r in refs}
    # 97 accepted within 0.5 s, two after 1.5 s, the probe never.
    accepted = {r.key: 10.0 + (0.5 if i < 97 else 1.5) for i, r in enumerate(refs[:99])}
    assert load.latencies(accepted.get, load.probes) == [math.inf]
    every = everyone(load, accepted.get)
    assert every == {
        "every_create_p50_s": 0.5,
        "every_create_p99_s": 1.5,
        "every_create_over_target": 3,
    }
    accepted[refs[99].key] = 10.25
    assert everyone(load, accepted.get)["every_create_p99_s"] == 1.5
    assert everyone(load, accepted.get)["every_create_over_target"] == 2


def _requests(post: tuple[int, int, int, int], apply: tuple[int, int, int, int]) -> str:
    """The API server's request histograms for Companies: counts at le 0.1, 0.4, 1 and +Inf."""
    lines = []
    for verb, subresource, counts in (("POST", "", post), ("APPLY", "status", apply)):
        for bound, count in zip(("0.1", "0.4", "1", "+Inf"), counts, strict=True):
            lines.append(
                f'apiserver_request_duration_seconds_bucket{{group="crewlet.ai",'
                f'resource="companies",scope="resource",subresource="{subresource}",'
                f'verb="{verb}",version="v1alpha1",le="{bound}"}} {count}'
            )
    return "\n".join(lines) + "\n"


def _lag(counts: tuple[int, int, int]) -> str:
    """The operator's loop lag: counts at le 0.01, 0.5 and +Inf."""
    return "".join(
        f'crewlet_operator_event_loop_lag_seconds_bucket{{le="{bound}"}} {count}\n'
        for bound, count in zip(("0.01", "0.5", "+Inf"), counts, strict=True)
    )


def test_a_histogram_is_read_between_two_scrapes_and_its_quantiles_are_bucket_bounds() -> None:
    before = parse_samples(_requests((5, 9, 10, 10), (1, 1, 1, 1)))
    after = parse_samples(_requests((105, 190, 209, 210), (1, 1, 1, 1)))
    creates = histogram_between(
        before, after, "apiserver_request_duration_seconds", {"verb": "POST", "subresource": ""}
    )
    assert creates == {0.1: 100.0, 0.4: 181.0, 1.0: 199.0, float("inf"): 200.0}
    assert bucket_quantile(creates, 0.5) == 0.1, "half took 0.1 s or less"
    assert bucket_quantile(creates, 0.6) == 0.4
    assert bucket_quantile(creates, 0.99) == 1.0
    assert bucket_quantile(creates, 1.0) == float("inf"), "one took over a second"
    applies = histogram_between(
        before, after, "apiserver_request_duration_seconds", {"verb": "APPLY"}
    )
    assert bucket_quantile(applies, 0.99) is None, "nothing was applied in between"


def test_who_waited_names_the_api_servers_time_and_the_operators_loop_lag() -> None:
    waits = who_waited(
        parse_samples(_requests((0, 0, 0, 0), (0, 0, 0, 0))),
        parse_samples(_requests((90, 100, 100, 100), (10, 99, 100, 101))),
        parse_samples(_lag((50, 50, 50))),
        parse_samples(_lag((349, 350, 350))),
    )
    assert waits == {
        "api_server_company_create": {"p99": 0.4, "max": 0.4},
        "api_server_company_status_apply": {"p99": 1.0, "max": None},
        "operator_event_loop_lag": {"p99": 0.01, "max": 0.5},
    }, "null: one apply took longer than the largest finite bound"
    assert "operator_event_loop_lag" not in who_waited([], [], [], []), "nothing observed"
