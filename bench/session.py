"""One bench run: the control plane, the operator process, and the Companies on it.

Figures share the run's world so that nothing is built twice: the floor's Companies stay (the
operator finds them done), bursts add up, and the Companies that memory and start-up need
include every Company created before. Every figure leaves the world converged, except the
latency figure, whose unfinished background load :meth:`Session.grow` completes.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import floor
from bench.cluster import Cluster
from bench.daemon import (
    METADATA_ONLY,
    Daemon,
    Memory,
    Sample,
    cpu_seconds,
    gc_cycles,
    parse_samples,
    total,
    until,
)
from bench.scale import Scale
from crewlet_operator.incarnation import PodRef
from crewlet_operator_daemon.controller import WRITTEN_RESOURCES

FILL_WORKERS = 16
"""Companies whose children the bench pre-creates at once (enough to keep the server busy)."""
SETTLE = 3.0
"""Seconds an operator idles after its first pass before its steady RSS is read."""
WRITTEN = WRITTEN_RESOURCES | {"events"}
"""What the operator could write, its Lease aside (renewing it is not part of a resync)."""

Object = dict[str, Any]


@dataclass(frozen=True)
class Reading:
    """An operator's memory after its first pass over ``companies`` Companies."""

    companies: int
    memory: Memory


@dataclass(frozen=True)
class Pass:
    """An operator process from its start to the end of its first pass over every Company."""

    companies: int
    ready_s: float
    whole_s: float
    """Until the caches held every object whole (the children are listed by their metadata
    first, and whole after the sync)."""
    first_pass_s: float
    writes: dict[str, int]
    """Mutating requests during the pass, by ``VERB resource[/subresource]`` (no Lease)."""
    lease_writes: int
    memory: Memory
    """VmRSS after the pass and :data:`SETTLE` idle seconds; VmHWM until then."""
    ready_cpu_s: float
    """The operator's CPU seconds from its start to its caches' sync (/readyz)."""
    ready_server_cpu_s: float
    """The control plane's (API server and etcd) CPU seconds over the same time."""
    ready_server_collections: int
    """Garbage collections the API server finished over the same time (each costs it CPU in
    proportion to its heap, and a start's lists grow that heap)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "companies": self.companies,
            "ready_s": round(self.ready_s, 2),
            "whole_s": round(self.whole_s, 2),
            "first_pass_s": round(self.first_pass_s, 2),
            "mutating_requests": sum(self.writes.values()),
            "mutating_requests_by_verb": self.writes,
            "lease_writes": self.lease_writes,
            "rss_bytes": self.memory.rss,
            "peak_rss_bytes": self.memory.peak,
            "ready_cpu_s": round(self.ready_cpu_s, 1),
            "ready_server_cpu_s": round(self.ready_server_cpu_s, 1),
            "ready_server_collections": self.ready_server_collections,
        }


def writes_between(counts: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    """What changed between two readings of :meth:`ControlPlane.mutating_requests`."""
    return {k: v - before.get(k, 0) for k, v in sorted(counts.items()) if v != before.get(k, 0)}


@dataclass
class Session:
    """The run's shared state; figures call its methods to get the world they need."""

    scale: Scale
    run_dir: Path
    profile: bool = False
    workloads: bool = False
    """Whether the control plane runs workloads (:data:`bench.cluster.WORKLOADS`)."""
    cluster: Cluster = field(init=False)
    daemon: Daemon | None = None
    readings: list[Reading] = field(default_factory=list)
    passes: list[Pass] = field(default_factory=list)
    """Every restart's pass, in order."""
    converged: int = 0
    """Companies that are Accepted and have every child."""
    unfilled: list[Object] = field(default_factory=list)
    """Companies that may lack children (the latency figure's backlog), as created."""
    floor_workers: int | None = None
    """The concurrency of the convergence figure's best floor at its largest burst."""
    environment: dict[str, str] = field(default_factory=dict)
    """Variables the daemons started from now on run with (the tracing figure's OTEL_*)."""
    _daemons: int = 0

    def __post_init__(self) -> None:
        self.cluster = Cluster(self.run_dir, self.workloads)

    async def start(self) -> None:
        await self.cluster.start()

    async def close(self) -> None:
        await self.stop_operator(quiesce=False)
        await self.cluster.stop()

    def new_daemon(self, role: str, sharding: bool = False, pod: PodRef | None = None) -> Daemon:
        """A daemon (not started yet) with its own ports and log file; ``sharding``: with
        ``--sharding``; ``pod``: the Pod it runs in (by the downward API's variables)."""
        self._daemons += 1
        name = f"operator-{self._daemons:02d}-{role}"
        return Daemon(
            self.cluster.plane.kubeconfig,
            self.run_dir,
            name,
            profile=self.profile,
            sharding=sharding,
            pod=pod,
            environment=self.environment,
        )

    async def stop_operator(self, quiesce: bool = True) -> None:
        """Stop the single operator, once it has nothing left to do (unless ``quiesce`` is
        false: then what it has not done is left to whoever comes next)."""
        if self.daemon is not None:
            if quiesce and not self.unfilled:
                await self.daemon.quiesce(self.scale.timeout)
            await self.daemon.stop()
            self.daemon = None

    async def operator(self) -> Daemon:
        """The single operator, started if needed, done with its first pass."""
        if self.daemon is None:
            await self.restart()
        assert self.daemon is not None
        return self.daemon

    async def restart(self) -> Pass:
        """Stop the operator, start a new process, and follow its first pass."""
        await self.grow(0)
        await self.stop_operator()
        plane = self.cluster.plane
        before = plane.mutating_requests(WRITTEN | {"leases"})
        collections_before = gc_cycles(await self.server_metrics())
        server_cpu_before = self.server_cpu()
        daemon = self.new_daemon("single")
        daemon.start()
        self.daemon = daemon
        ready = await until(daemon.ready, self.scale.timeout, f"{daemon.name} ready")
        ready_cpu = cpu_seconds(daemon.pid)
        ready_server_cpu = self.server_cpu() - server_cpu_before
        ready_collections = gc_cycles(await self.server_metrics()) - collections_before

        whole: list[float] = []

        async def first_pass() -> bool:
            # One scrape for both: the operator's CPU serves each.
            samples = await daemon.samples()
            if not whole and total(samples, METADATA_ONLY, {}) == 0:
                whole.append(time.monotonic())
            reconciled = total(
                samples, "controller_runtime_reconcile_total", {"controller": "company"}
            )
            return reconciled >= self.converged

        passed = await until(
            first_pass, self.scale.timeout, f"{daemon.name} first pass", interval=0.25
        )
        if not whole:
            whole.append(await until(daemon.whole, self.scale.timeout, f"{daemon.name} whole"))
        writes = writes_between(plane.mutating_requests(WRITTEN | {"leases"}), before)
        found = Pass(
            companies=self.converged,
            ready_s=ready - daemon.started_at,
            whole_s=whole[0] - daemon.started_at,
            first_pass_s=passed - daemon.started_at,
            writes={k: v for k, v in writes.items() if not k.endswith(" leases")},
            lease_writes=sum(v for k, v in writes.items() if k.endswith(" leases")),
            memory=await self._read_memory(daemon),
            ready_cpu_s=ready_cpu,
            ready_server_cpu_s=ready_server_cpu,
            ready_server_collections=ready_collections,
        )
        self.passes.append(found)
        return found

    async def server_metrics(self) -> list[Sample]:
        """The API server's /metrics, now."""
        return parse_samples(
            await asyncio.to_thread(self.cluster.plane.admin_request, "GET", "/metrics", raw=True)
        )

    def server_cpu(self) -> float:
        """CPU seconds the control plane's processes (API server, etcd) have used so far."""
        return sum(cpu_seconds(pid) for pid in self.cluster.plane.pids().values())

    async def _read_memory(self, daemon: Daemon) -> Memory:
        """``daemon``'s memory :data:`SETTLE` seconds from now, kept as a reading."""
        await asyncio.sleep(SETTLE)
        memory = daemon.memory()
        self.readings.append(Reading(self.converged, memory))
        return memory

    async def grow(self, target: int) -> None:
        """At least ``target`` converged Companies, and no backlog. New Companies and the
        backlog get their children and status from the floor script while no operator runs
        (much quicker than a burst); the next operator start finds nothing to write."""
        missing = target - self.converged - len(self.unfilled)
        if missing <= 0 and not self.unfilled:
            return
        await self.stop_operator()
        refs = self.cluster.allocate("grow", max(0, missing))
        await self.cluster.create_namespaces(refs)
        pids = self.cluster.plane.pids()
        cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
        started, script = time.monotonic(), time.process_time()
        backlog = [*self.unfilled, *await self.cluster.create_companies(refs)]
        await floor.fill(self.cluster, backlog, FILL_WORKERS)
        elapsed = time.monotonic() - started
        used = {name: cpu_seconds(pid) - cpu[name] for name, pid in pids.items()}
        used["script"] = time.process_time() - script
        self.unfilled = []
        self.converged += len(backlog)
        print(
            f"bench: the floor script built {len(backlog)} companies in {elapsed:.0f} s "
            f"({len(backlog) / elapsed:.1f} a second; {self.converged} now); CPU seconds: "
            + ", ".join(f"{name} {seconds:.0f}" for name, seconds in used.items()),
            flush=True,
        )

    def reading(self, companies: int, more_than: int = -1) -> Reading | None:
        """The reading with the fewest Companies, at least ``companies`` and more than
        ``more_than``, if any."""
        found = [r for r in self.readings if r.companies >= max(companies, more_than + 1)]
        return min(found, key=lambda r: r.companies, default=None)
