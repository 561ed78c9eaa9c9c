"""One bench run: the control plane, the operator process, and the Companies on it.

Figures share the run's world so that nothing is built twice: the floor's Companies stay (the
operator adopts them), bursts add up, and the Companies that memory and start-up need include
every Company created before. Every figure leaves the world converged, except the latency
figure, whose unfinished background load the next operator start completes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import floor
from bench.cluster import Cluster
from bench.daemon import Daemon, Memory, until
from bench.scale import Scale
from crewlet_operator import find_condition
from crewlet_operator.api.v1alpha1 import COMPANY
from crewlet_operator.envtest.wait import eventually

FILL_WORKERS = 16
"""Companies whose children the bench pre-creates at once (enough to keep the server busy)."""
SETTLE = 3.0
"""Seconds an operator idles after its first pass before its steady RSS is read."""
WRITTEN = {
    "companies",
    "engineclasses",
    "namespaces",
    "secrets",
    "serviceaccounts",
    "statefulsets",
    "services",
    "poddisruptionbudgets",
    "networkpolicies",
    "ingresses",
    "persistentvolumeclaims",
    "events",
}
"""What the operator could write, its Lease aside (renewing it is not part of a resync)."""

Object = dict[str, Any]


@dataclass(frozen=True)
class Pass:
    """An operator process from its start to the end of its first pass over every Company."""

    companies: int
    adopted: int
    """Companies without a status, whose children were pre-created: it writes their status."""
    ready_s: float
    first_pass_s: float
    writes: dict[str, int]
    lease_writes: int
    memory: Memory
    """VmRSS after the pass and :data:`SETTLE` idle seconds; VmHWM until then."""

    def as_json(self) -> dict[str, Any]:
        return {
            "companies": self.companies,
            "adopted": self.adopted,
            "ready_s": round(self.ready_s, 2),
            "first_pass_s": round(self.first_pass_s, 2),
            "mutating_requests": sum(self.writes.values()),
            "mutating_requests_by_verb": self.writes,
            "lease_writes": self.lease_writes,
            "rss_bytes": self.memory.rss,
            "peak_rss_bytes": self.memory.peak,
        }


def _writes(plane_counts: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {
        k: v - before.get(k, 0) for k, v in sorted(plane_counts.items()) if v != before.get(k, 0)
    }


@dataclass
class Session:
    """The run's shared state; figures call its methods to get the world they need."""

    scale: Scale
    run_dir: Path
    profile: bool = False
    cluster: Cluster = field(init=False)
    daemon: Daemon | None = None
    passes: list[Pass] = field(default_factory=list)
    converged: int = 0
    """Companies that are Accepted and have every child."""
    pending: int = 0
    """Companies whose children exist but which the operator has not accepted yet."""
    unfilled: list[Object] = field(default_factory=list)
    """Companies that may lack children (the latency figure's backlog), as created."""
    floor_rate: float | None = None
    """Companies per second whose children the API server alone applies (largest floor)."""
    _daemons: int = 0

    def __post_init__(self) -> None:
        self.cluster = Cluster(self.run_dir)

    async def start(self) -> None:
        await self.cluster.start()

    async def close(self) -> None:
        await self.stop_operator()
        await self.cluster.stop()

    def new_daemon(self, role: str) -> Daemon:
        """A daemon (not started yet) with its own ports and log file."""
        self._daemons += 1
        name = f"operator-{self._daemons:02d}-{role}"
        return Daemon(self.cluster.plane.kubeconfig, self.run_dir, name, self.profile)

    async def stop_operator(self) -> None:
        if self.daemon is not None:
            await self.daemon.stop()
            self.daemon = None

    async def operator(self) -> Daemon:
        """The single operator, started if needed, done with its first pass."""
        if self.daemon is None:
            await self.restart()
        assert self.daemon is not None
        return self.daemon

    async def restart(self) -> Pass:
        """Stop the operator, start a new process, and follow its first pass.

        A backlog is completed first by the floor script, so the pass adopts it.
        """
        await self.stop_operator()
        if self.unfilled:
            await floor.fill(self.cluster, self.unfilled, FILL_WORKERS)
            self.pending += len(self.unfilled)
            self.unfilled = []
        plane = self.cluster.plane
        before = plane.mutating_requests(WRITTEN | {"leases"})
        total = self.converged + self.pending
        daemon = self.new_daemon("single")
        daemon.start()
        self.daemon = daemon
        ready = await until(daemon.ready, self.scale.timeout, f"{daemon.name} ready")

        async def first_pass() -> bool:
            return await daemon.reconciles() >= total

        passed = await until(first_pass, self.scale.timeout, f"{daemon.name} first pass")
        writes = _writes(plane.mutating_requests(WRITTEN | {"leases"}), before)
        if self.pending:
            await self._all_accepted(total)
        adopted, self.converged, self.pending = self.pending, total, 0
        await asyncio.sleep(SETTLE)
        result = Pass(
            companies=total,
            adopted=adopted,
            ready_s=ready - daemon.started_at,
            first_pass_s=passed - daemon.started_at,
            writes={k: v for k, v in writes.items() if not k.endswith(" leases")},
            lease_writes=sum(v for k, v in writes.items() if k.endswith(" leases")),
            memory=daemon.memory(),
        )
        self.passes.append(result)
        return result

    async def _all_accepted(self, total: int) -> None:
        async def accepted() -> bool:
            listed = await self.cluster.api.list(COMPANY)
            conditions = [(c.get("status") or {}).get("conditions") for c in listed.items]
            found = [find_condition(c, "Accepted") or {} for c in conditions]
            return sum(1 for a in found if a.get("status") == "True") >= total

        await eventually(accepted, timeout=self.scale.timeout, interval=1.0)

    async def grow(self, target: int) -> None:
        """At least ``target`` converged Companies. The new ones get their children from the
        floor script while the operator is stopped (much quicker than a burst); the operator
        then adopts them on its next start, writing only their status."""
        missing = target - self.converged - self.pending - len(self.unfilled)
        if missing <= 0 and not self.unfilled and not self.pending:
            return
        await self.stop_operator()
        refs = self.cluster.allocate("grow", max(0, missing))
        await self.cluster.create_namespaces(refs)
        self.unfilled += await self.cluster.create_companies(refs)
        await self.restart()

    def pass_with(self, companies: int) -> Pass | None:
        """The pass over the fewest Companies, at least ``companies``, preferring one that
        adopted none (a plain restart), if any."""
        found = [p for p in self.passes if p.companies >= companies]
        return min(found, key=lambda p: (p.companies, p.adopted > 0), default=None)
