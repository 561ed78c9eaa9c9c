"""How many companies stand in each status: ``crewlet_operator_companies{condition, status,
reason}``, for alerts and the dashboard.

Counted as the Company informer's events come (never a scan at a scrape: a Prometheus scraping
every few seconds would otherwise walk every company each time), and reported only by a replica
that reconciles companies (the leader, or with sharding every member, each for its share), so
that a sum over the replicas counts each company once.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from crewlet_operator.metrics import REGISTRY as METRICS_REGISTRY
from crewlet_operator_daemon.api.conditions import ACCEPTED, READY

CONDITIONS = (ACCEPTED, READY)
"""The conditions counted; a company without one counts as ``Unknown``, reason ``""``."""
MAX_SERIES = 64
"""Series kept a replica: the operator writes fewer reasons than this; should anything else
write a Company's status, further reasons count as ``Other`` rather than grow the series."""

Key = tuple[str, str, str]


def keys(company: dict[str, Any]) -> list[Key]:
    """The (condition, status, reason) a company counts under, once for each condition."""
    found = {
        str(c.get("type")): (str(c.get("status") or "Unknown"), str(c.get("reason") or ""))
        for c in (company.get("status") or {}).get("conditions") or []
        if isinstance(c, dict)
    }
    return [(kind, *found.get(kind, ("Unknown", ""))) for kind in CONDITIONS]


class CompanyCensus:
    """An informer handler counting the companies it is told of by :func:`keys`, reported
    while ``reporting()`` says this replica reconciles them."""

    def __init__(self, reporting: Callable[[], bool]) -> None:
        self.reporting = reporting
        self.counts: Counter[Key] = Counter()

    def on_add(self, obj: dict[str, Any], initial: bool = False) -> None:
        self.counts.update(keys(obj))

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.counts.subtract(keys(old))
        self.counts.update(keys(new))

    def on_delete(self, obj: dict[str, Any]) -> None:
        self.counts.subtract(keys(obj))


class CensusCollector(Collector):
    """``crewlet_operator_companies``, summed over the censuses of this process that report
    (held weakly: a manager dropped without a stop counts nothing)."""

    def __init__(self) -> None:
        self._censuses: weakref.WeakSet[CompanyCensus] = weakref.WeakSet()

    def track(self, census: CompanyCensus) -> None:
        """Report ``census`` from now on (while it says it reports)."""
        self._censuses.add(census)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "crewlet_operator_companies",
            "Companies this replica reconciles, by the status and reason of their Accepted and "
            "Ready conditions.",
            labels=["condition", "status", "reason"],
        )
        total: Counter[Key] = Counter()
        for census in list(self._censuses):
            if census.reporting():
                total.update(census.counts)
        shown: Counter[Key] = Counter()
        for n, (key, count) in enumerate(sorted(i for i in total.items() if i[1] > 0)):
            shown[key if n < MAX_SERIES else (key[0], key[1], "Other")] += count
        for key, count in sorted(shown.items()):
            family.add_metric(list(key), count)
        yield family


COMPANIES = CensusCollector()
"""What ``crewlet_operator_companies`` is reported through."""
METRICS_REGISTRY.register(COMPANIES)
