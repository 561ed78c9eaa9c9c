"""The operator as users run it: ``python -m crewlet_operator_daemon.cli`` in its own process.

Metrics are served over plain HTTP (``--metrics-secure=false``) so that the bench can scrape
them without a token; everything else is the daemon's default, leader election included.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from bench.cluster import PLATFORM
from crewlet_operator.envtest.process import ManagerProcess
from crewlet_operator.incarnation import PodRef, downward_environment
from crewlet_operator_daemon.cli import MAX_CONCURRENT_RECONCILES

WORKERS = int(os.environ.get("BENCH_WORKERS") or MAX_CONCURRENT_RECONCILES)
"""``--max-concurrent-reconciles``: the daemon's default unless ``BENCH_WORKERS`` says
otherwise (how that default was chosen)."""
EVENT_LOOP = os.environ.get("BENCH_EVENT_LOOP")
"""``--event-loop`` for every operator process when ``BENCH_EVENT_LOOP`` names one (how the
default was chosen); the daemon's default otherwise."""
LEASE = "crewlet-operator-leader"
SHARDED = "company"
"""The controller ``--sharding`` spreads over the replicas (its primary kind is sharded)."""
METADATA_ONLY = "crewlet_operator_cache_metadata_only_objects"
"""The operator's objects cached by their metadata alone (children, until listed whole)."""
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
Sample = tuple[str, dict[str, str], float]
"""A metric sample: name, labels, value."""


async def until(
    probe: Callable[[], Awaitable[bool]], timeout: float, what: str, interval: float = 0.05
) -> float:
    """Poll ``probe`` every ``interval`` seconds until it is true; return when (monotonic).

    A scrape that fails counts as "not yet"; an operator that exited fails at once.
    """
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            if await probe():
                return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        await asyncio.sleep(interval)


def total(samples: list[Sample], name: str, labels: Mapping[str, str]) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels``."""
    return sum(
        value
        for sample, found, value in samples
        if sample == name and all(found.get(k) == v for k, v in labels.items())
    )


def idle(samples: list[Sample], controller: str | None = None) -> bool:
    """Whether an operator's ``samples`` show nothing queued and no reconcile running, in
    ``controller`` (any controller when None)."""
    of = {"controller": controller} if controller else {}
    return (
        total(samples, "workqueue_depth", of) == 0
        and total(samples, "controller_runtime_active_workers", of) == 0
    )


async def http_get(port: int, path: str) -> tuple[int, str]:
    """GET ``http://127.0.0.1:<port><path>``: the status and the body."""
    timeout = aiohttp.ClientTimeout(total=10)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"http://127.0.0.1:{port}{path}") as response,
    ):
        return response.status, await response.text()


async def scrape(port: int) -> list[Sample]:
    """Every sample of the Prometheus endpoint ``/metrics`` on ``port``: name, labels, value."""
    _, text = await http_get(port, "/metrics")
    return parse_samples(text)


GC_COUNT = "go_gc_duration_seconds_count"


def gc_cycles(metrics: list[Sample]) -> int:
    """Garbage collections a Go process (the API server) has finished (:data:`GC_COUNT` of its
    /metrics): a mark phase slows its writes for seconds and costs it CPU (bench/NOTES.md,
    "A new company's verdict under load")."""
    counts = [v for name, _, v in metrics if name == GC_COUNT]
    if not counts:
        raise ValueError(f"no {GC_COUNT} in the API server's /metrics")
    return int(sum(counts))


def parse_samples(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition: name, labels, value."""
    found = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is not None:
            labels = dict(_LABEL.findall(match.group(2) or ""))
            found.append((match.group(1), labels, float(match.group(3))))
    return found


def cpu_seconds(pid: int) -> float:
    """User and system CPU time the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Memory:
    """A process's resident set now (VmRSS) and at its highest (VmHWM), in bytes."""

    rss: int
    peak: int


def process_memory(pid: int) -> Memory:
    """The process's VmRSS and VmHWM now."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024
    return Memory(rss=fields["VmRSS"], peak=fields["VmHWM"])


class Daemon(ManagerProcess):
    """One operator process; ``profile`` runs it under cProfile (the profile is written on a
    graceful stop), ``sharding`` with ``--sharding`` (a member of the ring), ``pod`` in a Pod
    (its downward API's variables), ``environment`` with those variables besides."""

    def __init__(
        self,
        kubeconfig: Path,
        log_dir: Path,
        name: str,
        *,
        profile: bool = False,
        sharding: bool = False,
        pod: PodRef | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        self.pod = pod
        """The Pod it runs in, as the chart's downward API would say (none by default)."""
        command = [sys.executable]
        if profile:
            command += ["-m", "cProfile", "-o", str(log_dir / f"{name}.prof")]
        command += [
            "-m",
            "crewlet_operator_daemon.cli",
            "--kubeconfig",
            str(kubeconfig),
            "--leader-election-namespace",
            PLATFORM,
            "--leader-election-id",
            LEASE,
            "--metrics-secure=false",
            f"--max-concurrent-reconciles={WORKERS}",
        ]
        if EVENT_LOOP:
            command.append(f"--event-loop={EVENT_LOOP}")
        if sharding:
            command.append("--sharding")
        # Two ports free now: check_alive() starts it again on fresh ones if one was taken.
        super().__init__(
            name, command, log_dir, {**downward_environment(pod), **(environment or {})}
        )
        self.idle_controller = SHARDED if sharding else None
        """The controller whose queue tells that it is idle: with sharding, the sharded one
        (the others run on the leader alone, and a follower's queues of them fill unserved);
        without, every controller."""
        self.started_at = 0.0

    def start(self) -> None:
        self.started_at = time.monotonic()
        super().start()

    @property
    def pid(self) -> int:
        pid = self.process.pid
        assert pid is not None, f"{self.name} is not running"
        return pid

    def check_alive(self) -> None:
        """Raise if the process exited (:class:`ProcessFailedError`), unless a port it was given
        was taken before it bound it: then it starts again on fresh ones."""
        self.check()

    async def ready(self) -> bool:
        """Whether /readyz answers 200 (every informer has synced)."""
        self.check_alive()
        status, _ = await http_get(self.health_port, "/readyz")
        return status == 200

    async def samples(self) -> list[Sample]:
        """Every sample of /metrics: name, labels, value."""
        self.check_alive()
        return await scrape(self.metrics_port)

    async def metric(self, sample: str, /, **labels: str) -> float:
        """The sum of the samples named ``sample`` whose labels include ``labels``."""
        return total(await self.samples(), sample, labels)

    async def reconciles(self, controller: str = "company") -> float:
        """``controller_runtime_reconcile_total`` of ``controller``, every result."""
        return await self.metric("controller_runtime_reconcile_total", controller=controller)

    async def write_requests(self) -> float:
        """The requests it has sent that may write (``rest_client_requests_total`` of POST,
        PUT, PATCH and DELETE, its Lease renewals among them), answered or not."""
        samples = await self.samples()
        return sum(
            total(samples, "rest_client_requests_total", {"method": method})
            for method in ("POST", "PUT", "PATCH", "DELETE")
        )

    async def whole(self) -> bool:
        """Whether its caches hold every object whole (none by its metadata alone)."""
        return await self.metric(METADATA_ONLY) == 0

    async def leading(self) -> bool:
        """Whether it holds the Lease and runs its controllers."""
        return await self.metric("leader_election_master_status", name=LEASE) == 1

    async def member(self) -> str | None:
        """With ``--sharding``, its member name (the member Lease it holds); None until it
        holds one."""
        held = [
            found["name"]
            for sample, found, value in await self.samples()
            if sample == "leader_election_master_status" and found.get("name") != LEASE and value
        ]
        return held[0] if held else None

    async def idle(self) -> bool:
        """Nothing queued and no reconcile running, in any controller (with sharding, in the
        sharded one: :attr:`idle_controller`)."""
        return idle(await self.samples(), self.idle_controller)

    async def quiesce(
        self, timeout: float, done: Callable[[], Awaitable[bool]] | None = None
    ) -> float:
        """Until :meth:`idle` (or ``done``, when given) on two scrapes 250 ms apart; when the
        first one was (monotonic)."""
        probe = done or self.idle
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            first = await until(probe, left, f"{self.name} idle", interval=0.25)
            await asyncio.sleep(0.25)
            if await probe():
                return first

    def memory(self) -> Memory:
        return process_memory(self.pid)

    async def exited(self) -> bool:
        return not self.process.running()

    def terminate(self) -> None:
        """SIGTERM: a graceful stop (drain, release the lease, exit)."""
        self.process.signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL: a crash."""
        self.process.kill()

    def freeze(self) -> None:
        """SIGSTOP: the process stops where it is, its connections open, and writes nothing."""
        self.process.signal(signal.SIGSTOP)

    async def stop(self, timeout: float = 45.0) -> None:
        """SIGTERM, then wait for the exit (SIGKILL after ``timeout``)."""
        self.terminate()
        with contextlib.suppress(TimeoutError):
            await until(self.exited, timeout, f"{self.name} exit")
        self.process.stop()
