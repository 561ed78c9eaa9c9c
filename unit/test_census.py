"""``crewlet_operator_companies{condition, status, reason}``: the companies counted by their
Accepted and Ready conditions as the informer's events come, reported only by a replica that
reconciles them (no API server: the events are told by hand)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from crewlet_operator_daemon.census import MAX_SERIES, CensusCollector, CompanyCensus, keys


def company(name: str, **conditions: tuple[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "t"},
        "status": {
            "conditions": [
                {"type": kind, "status": status, "reason": reason}
                for kind, (status, reason) in conditions.items()
            ]
        },
    }


def scraped(*censuses: CompanyCensus) -> CollectorRegistry:
    registry = CollectorRegistry()
    collector = CensusCollector()
    for census in censuses:
        collector.track(census)
    registry.register(collector)
    return registry


def count(registry: CollectorRegistry, condition: str, status: str, reason: str) -> float | None:
    return registry.get_sample_value(
        "crewlet_operator_companies",
        {"condition": condition, "status": status, "reason": reason},
    )


def test_a_company_counts_once_under_each_condition() -> None:
    accepted = company("a", Accepted=("True", "Accepted"), Ready=("False", "DataNotReady"))
    assert keys(accepted) == [("Accepted", "True", "Accepted"), ("Ready", "False", "DataNotReady")]
    # A new company has no status yet: Unknown, no reason.
    assert keys({"metadata": {"name": "new"}}) == [
        ("Accepted", "Unknown", ""),
        ("Ready", "Unknown", ""),
    ]


def test_the_counts_follow_the_events() -> None:
    census = CompanyCensus(lambda: True)
    registry = scraped(census)
    progressing = company("a", Accepted=("True", "Accepted"), Ready=("False", "Progressing"))
    refused = company("b", Accepted=("False", "NameTaken"), Ready=("False", "NotAccepted"))
    census.on_add(progressing, initial=True)
    census.on_add(refused)
    assert count(registry, "Accepted", "True", "Accepted") == 1
    assert count(registry, "Accepted", "False", "NameTaken") == 1
    assert count(registry, "Ready", "False", "Progressing") == 1
    ready = company("a", Accepted=("True", "Accepted"), Ready=("True", "DataReady"))
    census.on_update(progressing, ready)
    assert count(registry, "Ready", "True", "DataReady") == 1
    assert count(registry, "Ready", "False", "Progressing") is None, "no series at zero"
    census.on_delete(refused)
    assert count(registry, "Accepted", "False", "NameTaken") is None
    assert count(registry, "Accepted", "True", "Accepted") == 1


def test_only_a_replica_that_reconciles_reports_and_replicas_sum() -> None:
    leading = [False]
    standby, member = CompanyCensus(lambda: leading[0]), CompanyCensus(lambda: True)
    registry = scraped(standby, member)
    for census in (standby, member):
        census.on_add(company("a", Accepted=("True", "Accepted"), Ready=("True", "DataReady")))
    assert count(registry, "Ready", "True", "DataReady") == 1, "a standby's cache is not counted"
    leading[0] = True
    assert count(registry, "Ready", "True", "DataReady") == 2


def test_reasons_beyond_the_bound_count_as_other() -> None:
    census = CompanyCensus(lambda: True)
    registry = scraped(census)
    for i in range(MAX_SERIES + 10):
        census.on_add(company(f"c{i}", Accepted=("False", f"Reason{i:03d}")))
    samples = [s for m in registry.collect() for s in m.samples]
    assert len(samples) <= MAX_SERIES + 2  # and one Other a (condition, status)
    assert sum(s.value for s in samples if s.labels["condition"] == "Accepted") == MAX_SERIES + 10
    assert count(registry, "Accepted", "False", "Other") is not None
