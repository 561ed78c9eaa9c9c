"""Figure 4, latency under load: Companies created while background Companies are created at
a steady rate; the time from each probe's create to its ``Accepted=True``, p50 and p99; then
the time until the whole backlog has converged, beside what the API server alone needs for as
many Companies in the same world.

The probes are spread evenly over the load. Probes are waited for up to :data:`PATIENCE` after
the load, the backlog up to the scale's timeout; what the operator has not finished by then is
handed to the session, whose floor script completes it before the next operator starts.

The backlog's floor is measured in the world the backlog ran in, with the operator stopped:
the floor script applies as many Companies as the convergence figure's largest burst, at its
best concurrency, right before the load and again right after the backlog has converged. A
bigger world makes each Company dearer for the API server (bench/README.md, "How the world is
built"); the backlog's world grew from the first floor's end to the second's start, so its
middle lies midway between the two floors' middles, and the backlog is held to the mean of
their seconds per Company.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.cluster import CompanyRef, Object
from bench.convergence import measure_floor
from bench.daemon import Daemon, Sample, gc_cycles, total
from bench.floor import verdict_status
from bench.progress import Key, Progress
from bench.report import Figure
from bench.session import FILL_WORKERS, WRITTEN, Session, writes_between
from crewlet_operator import NORMAL_PRIORITY, ApiError, TransportError
from crewlet_operator.objects import name, namespace
from crewlet_operator_daemon.api.v1alpha1 import COMPANY

TARGET_P99 = 1.0
TARGET_BACKLOG_RATIO = 1.25
TARGET = (
    f"p99 < {TARGET_P99:.0f} s at 100 creates/s, the backlog converged within "
    f"{TARGET_BACKLOG_RATIO}x the best floor"
)
PATIENCE = 60.0
"""Seconds after the load ends that probes are waited for; a probe not Accepted by then
counts as infinitely late (the figure says "> N s")."""
IN_FLIGHT = 64
"""Creates the load generator keeps in flight at most (more means the server is behind); the
verdict floor's writer keeps as many status writes in flight at most."""
COLLECTION_AT = 0.5
"""Where in the verdict floor's load the API server is made to collect its garbage (a fraction
of the load's seconds): the operator's load meets one collection at a time of its own."""


LOOP_LAG = "crewlet_operator_event_loop_lag_seconds"
REQUEST_DURATION = "apiserver_request_duration_seconds"
COMPANY_CREATES = {"resource": "companies", "verb": "POST", "subresource": ""}
COMPANY_STATUS_APPLIES = {"resource": "companies", "verb": "APPLY", "subresource": "status"}


QUEUE_DEPTH = "workqueue_depth"
DEPTH_INTERVAL = 1.0
"""Seconds between two reads of the operator's verdict queue during the load (a scrape is a few
milliseconds of the operator's CPU)."""


def verdicts_waiting(samples: list[Sample]) -> int:
    """How many Companies wait in the operator's queue at the normal priority (creates and
    changes: their verdicts), from ``workqueue_depth``: verdicts that queue for a worker, not
    for the API server."""
    return round(
        total(samples, QUEUE_DEPTH, {"controller": "company", "priority": str(NORMAL_PRIORITY)})
    )


async def sample_verdicts_waiting(daemon: Daemon, into: list[int]) -> None:
    """Append :func:`verdicts_waiting` every :data:`DEPTH_INTERVAL` seconds until cancelled."""
    while True:
        into.append(verdicts_waiting(await daemon.samples()))
        await asyncio.sleep(DEPTH_INTERVAL)


def histogram_between(
    before: list[Sample], after: list[Sample], name: str, labels: dict[str, str]
) -> dict[float, float]:
    """The cumulative bucket counts (upper bound to count) that the histogram ``name`` gained
    between two scrapes, summed over its series whose labels include ``labels``."""
    counts: dict[float, float] = {}
    for sign, samples in ((-1, before), (1, after)):
        for sample, found, value in samples:
            if sample == f"{name}_bucket" and all(found.get(k, "") == v for k, v in labels.items()):
                bound = float(found["le"])
                counts[bound] = counts.get(bound, 0.0) + sign * value
    return dict(sorted(counts.items()))


def bucket_quantile(buckets: dict[float, float], fraction: float) -> float | None:
    """The smallest bucket bound at or under which ``fraction`` of the observations fell (what
    a histogram can say of a quantile: it is at most that), or None when nothing was
    observed."""
    observed = buckets.get(math.inf, 0.0)
    if observed <= 0:
        return None
    return next(bound for bound, count in buckets.items() if count >= fraction * observed)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of ``values`` (sorted)."""
    return values[max(0, math.ceil(fraction * len(values)) - 1)]


async def floor_per_company(session: Session, when: str) -> tuple[float, int]:
    """Seconds a Company takes the floor script in the world as it is now (the operator is
    stopped first), and the concurrency it ran at: the convergence figure's best, else
    :data:`~bench.session.FILL_WORKERS`."""
    await session.stop_operator()
    count = session.scale.convergence[-1]
    workers = session.floor_workers or FILL_WORKERS
    seconds, _, _ = await measure_floor(session, f"latency-floor-{when}", count, workers)
    return seconds / count, workers


AcceptedAt = Callable[[Key], float | None]
"""When a company was seen Accepted (monotonic), or None: :meth:`Progress.accepted_at`."""


@dataclass
class Load:
    """The load's Companies, created on schedule: the background at a steady rate and the
    probes spread evenly among it; when each create was sent and answered."""

    background: list[CompanyRef]
    probes: list[CompanyRef]
    sent: dict[Key, float] = field(default_factory=dict)
    answered: dict[Key, float] = field(default_factory=dict)
    created: dict[Key, Object] = field(default_factory=dict)
    started: float = 0.0
    seconds: float = 0.0
    """From the first create sent to the last answered."""

    @classmethod
    async def allocate(cls, session: Session, prefix: str = "") -> Load:
        """The scale's load, in fresh namespaces (``prefix`` ahead of their names)."""
        scale, cluster = session.scale, session.cluster
        background = cluster.allocate(f"{prefix}load", round(scale.load_rate * scale.load_seconds))
        probes = cluster.allocate(f"{prefix}probe", scale.probes)
        await cluster.create_namespaces([*background, *probes])
        return cls(background, probes)

    @property
    def keys(self) -> list[Key]:
        return [r.key for r in (*self.background, *self.probes)]

    async def create(self, session: Session) -> None:
        """Create every Company on schedule, at most :data:`IN_FLIGHT` creates in flight."""
        scale, cluster = session.scale, session.cluster
        schedule = sorted(
            [(i / scale.load_rate, ref) for i, ref in enumerate(self.background)]
            + [
                ((j + 0.5) * scale.load_seconds / len(self.probes), ref)
                for j, ref in enumerate(self.probes)
            ],
            key=lambda entry: entry[0],
        )
        slots = asyncio.Semaphore(IN_FLIGHT)

        async def create(ref: CompanyRef) -> None:
            async with slots:
                self.sent[ref.key] = time.monotonic()
                self.created[ref.key] = await cluster.create_company(ref)
                self.answered[ref.key] = time.monotonic()

        self.started = time.monotonic()
        tasks = []
        for offset, ref in schedule:
            await asyncio.sleep(max(0.0, self.started + offset - time.monotonic()))
            tasks.append(asyncio.create_task(create(ref)))
        await asyncio.gather(*tasks)
        self.seconds = time.monotonic() - self.started

    def latencies(self, accepted_at: AcceptedAt, refs: list[CompanyRef]) -> list[float]:
        """Each of ``refs``' seconds from its create to ``Accepted=True`` (infinite when not
        Accepted), in the order given."""
        return [(accepted_at(r.key) or math.inf) - self.sent[r.key] for r in refs]


def everyone(load: Load, accepted_at: AcceptedAt) -> dict[str, object]:
    """Every company of the load, beside the probes, for a p99 that is not the slowest of 30
    (the probes' figure stays what is judged)."""
    latencies = sorted(load.latencies(accepted_at, [*load.background, *load.probes]))
    return {
        "every_create_p50_s": _seconds(percentile(latencies, 0.5)),
        "every_create_p99_s": _seconds(percentile(latencies, 0.99)),
        "every_create_over_target": sum(1 for x in latencies if x >= TARGET_P99),
    }


async def collect_garbage(session: Session, after: float) -> None:
    """Have the API server collect its garbage ``after`` seconds from now: Go's heap profile
    runs a collection first when asked (``gc=1``), and answers once it is done."""
    await asyncio.sleep(after)
    await session.cluster.api.request("GET", "/debug/pprof/heap", query={"gc": 1}, timeout=PATIENCE)


class VerdictWriter:
    """The verdict floor's writer: :meth:`tell` a Company as its watch event arrives, and it
    writes the status the reconciler decides for a new company of its class, server-side
    applied as the operator writes it; nothing else (no queue, no render, no children, no
    Event), at most :data:`IN_FLIGHT` writes in flight."""

    def __init__(self, session: Session) -> None:
        self._cluster = session.cluster
        self._statuses: dict[str, Object] = {}
        self._slots = asyncio.Semaphore(IN_FLIGHT)
        self._writes: set[asyncio.Task[None]] = set()
        self.failed = 0
        """Status writes the API server refused, or that got no answer."""

    def tell(self, company: Object) -> None:
        """Write ``company``'s verdict (in a task of its own)."""
        write = asyncio.create_task(self._write(company))
        self._writes.add(write)
        write.add_done_callback(self._writes.discard)

    async def finish(self) -> None:
        """Wait for the writes on their way."""
        await asyncio.gather(*self._writes)

    async def _write(self, company: Object) -> None:
        class_name = company["spec"]["className"]
        status = self._statuses.get(class_name)
        if status is None:
            status = self._statuses[class_name] = verdict_status(self._cluster, company)
        async with self._slots:
            try:
                await self._cluster.api.apply_status(
                    COMPANY,
                    {
                        "apiVersion": COMPANY.api_version,
                        "kind": COMPANY.kind,
                        "metadata": {"name": name(company), "namespace": namespace(company)},
                        "status": status,
                    },
                )
            except (ApiError, TransportError):
                self.failed += 1


async def verdict_floor(session: Session) -> dict[str, object]:
    """The same load in the same world, the operator stopped, its companies told their
    verdicts by a :class:`VerdictWriter` in the bench, and the API server made to collect its
    garbage at the load's middle (a collection slows its writes for seconds: bench/NOTES.md);
    then its Companies are deleted, so the world is as it was."""
    load = await Load.allocate(session, "floor-")
    server_before = await session.server_metrics()
    writer = VerdictWriter(session)
    async with Progress(session.cluster.api, load.keys, on_created=writer.tell) as progress:
        collection = asyncio.create_task(
            collect_garbage(session, session.scale.load_seconds * COLLECTION_AT)
        )
        await load.create(session)
        with contextlib.suppress(TimeoutError):
            await progress.wait_accepted(load.keys, PATIENCE)
        await collection
        await writer.finish()
        collected = gc_cycles(await session.server_metrics()) - gc_cycles(server_before)
    latencies = sorted(load.latencies(progress.accepted_at, load.probes))
    await session.cluster.remove([*load.background, *load.probes], [COMPANY])
    return {
        "p50_s": _seconds(percentile(latencies, 0.5)),
        "p99_s": _seconds(percentile(latencies, 0.99)),
        "latencies_s": [_seconds(x) for x in latencies],
        **everyone(load, progress.accepted_at),
        "api_server_gc_cycles": collected,
        "status_writes_failed": writer.failed,
    }


async def latency(session: Session) -> Figure:
    floor_before, floor_workers = await floor_per_company(session, "before")
    floor = await verdict_floor(session)
    daemon = await session.operator()
    scale, cluster = session.scale, session.cluster
    load = await Load.allocate(session)
    background, probes, sent, answered = load.background, load.probes, load.sent, load.answered
    keys = load.keys
    writes_before = cluster.plane.mutating_requests(WRITTEN)
    server_before = await session.server_metrics()
    operator_before = await daemon.samples()
    waiting: list[int] = []
    async with Progress(cluster.api, keys) as progress:
        sampler = asyncio.create_task(sample_verdicts_waiting(daemon, waiting))
        try:
            await load.create(session)
            started = load.started
            with contextlib.suppress(TimeoutError):
                await progress.wait_accepted([p.key for p in probes], PATIENCE)
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        waited = time.monotonic() - started
        server_after = await session.server_metrics()
        collected = gc_cycles(server_after) - gc_cycles(server_before)
        waits = who_waited(
            server_before,
            server_after,
            operator_before,
            await daemon.samples(),
        )
        in_order = load.latencies(progress.accepted_at, probes)
        latencies = sorted(in_order)
        # Where a probe's time went: the API server answering its create, then the rest (the
        # operator's verdict, and the watch that tells the bench).
        creates = sorted(answered[p.key] - sent[p.key] for p in probes)
        after = sorted((progress.accepted_at(p.key) or math.inf) - answered[p.key] for p in probes)
        split = {
            f"{part}_p{round(100 * q)}": percentile(values, q)
            for part, values in (("create_answered", creates), ("after_create", after))
            for q in (0.5, 0.99)
        }
        finished_when_probes_done = {k for k in keys if progress.has_converged(k)}
        backlog_s: float | None = None
        left: list[Object] = []
        try:
            await progress.wait(scale.timeout)
            backlog_s = progress.last_converged() - started
        except TimeoutError:
            # What the operator did not finish, the floor script completes before the next
            # operator starts.
            left = [load.created[k] for k in keys if not progress.has_converged(k)]
    every = everyone(load, progress.accepted_at)
    writes = writes_between(cluster.plane.mutating_requests(WRITTEN), writes_before)
    # The session counts what converged; what is left, it counts once the floor script is done.
    session.unfilled += left
    session.converged += len(keys) - len(left)
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    rate = len(background) / load.seconds
    data: dict[str, object] = {
        "background_per_s": round(rate, 1),
        "background_companies": len(background),
        "probes": len(probes),
        "p50_s": _seconds(p50),
        "p99_s": _seconds(p99),
        "max_s": _seconds(latencies[-1]),
        "latencies_s": [_seconds(x) for x in latencies],
        **{f"{name}_s": _seconds(value) for name, value in split.items()},
        "latencies_in_creation_order_s": [_seconds(x) for x in in_order],
        "probes_not_accepted": sum(1 for x in latencies if math.isinf(x)),
        **every,
        "api_server_gc_cycles_until_probes_accepted": collected,
        "until_probes_accepted_at_most_s": waits,
        "verdicts_waiting_max": max(waiting, default=0),
        "verdicts_waiting_each_s": waiting,
        "waited_s": round(waited, 1),
        "background_converged_when_probes_done": sum(
            1 for r in background if r.key in finished_when_probes_done
        ),
        "backlog_converged_s": None if backlog_s is None else round(backlog_s, 1),
        "writes": writes,
        "writes_per_company": round(sum(writes.values()) / len(keys), 1),
    }
    line = (
        f"p50 {_text(p50)}, p99 {_text(p99)} for {len(probes)} probes while "
        f"{rate:.0f} companies/s were created for {load.seconds:.0f} s (the create answered: p50 "
        f"{_text(split['create_answered_p50'])}, p99 {_text(split['create_answered_p99'])}; "
        f"from its answer to Accepted: p50 {_text(split['after_create_p50'])}, p99 "
        f"{_text(split['after_create_p99'])}; the API server collected garbage {collected} "
        f"times meanwhile; every one of the {len(keys)} created: {_every_text(every)}; until "
        f"the probes were Accepted, by the histograms, p99 at most: {_waits_text(waits)}; "
        f"Companies waiting in the operator's queue for a verdict, read each second: at most "
        f"{data['verdicts_waiting_max']}); {_floor_text(floor)}"
    )
    data["verdict_floor"] = floor
    backlog_met = False
    if backlog_s is not None:
        floor_after, _ = await floor_per_company(session, "after")
        floor_s = len(keys) * (floor_before + floor_after) / 2
        ratio = backlog_s / floor_s
        backlog_met = ratio <= TARGET_BACKLOG_RATIO
        data |= {
            "floor_workers": floor_workers,
            "floor_s_per_1000_before": round(1000 * floor_before, 1),
            "floor_s_per_1000_after": round(1000 * floor_after, 1),
            "backlog_floor_s": round(floor_s, 1),
            "backlog_ratio": round(ratio, 2),
        }
        line += (
            f"; all {len(keys)} converged in {backlog_s:.0f} s, the floor's {floor_s:.0f} s in "
            f"the same world ({1000 * floor_before:.1f} s a thousand before the load, "
            f"{1000 * floor_after:.1f} s after the backlog) -> {ratio:.2f}x"
        )
    else:
        line += f"; the backlog had not converged after {scale.timeout:.0f} s"
    return Figure("latency", line, TARGET, p99 < TARGET_P99 and backlog_met, data)


def who_waited(
    server_before: list[Sample],
    server_after: list[Sample],
    operator_before: list[Sample],
    operator_after: list[Sample],
) -> dict[str, dict[str, float | None]]:
    """Where a late verdict waited, from the histograms between two scrapes (p99 and the
    largest, each at most a bucket's bound): the API server's own time for the Companies'
    creates and status applies (``apiserver_request_duration_seconds``), and how late the
    operator's event loop ran (``crewlet_operator_event_loop_lag_seconds``: a high lag means the
    operator was short of CPU; a low one, only that it took each answer up promptly, since a
    loop busy all the time still does, and its verdicts then wait in the workqueue). A part
    with nothing observed is left out; null is over the histogram's largest finite bound."""
    histograms = {
        "api_server_company_create": histogram_between(
            server_before, server_after, REQUEST_DURATION, COMPANY_CREATES
        ),
        "api_server_company_status_apply": histogram_between(
            server_before, server_after, REQUEST_DURATION, COMPANY_STATUS_APPLIES
        ),
        "operator_event_loop_lag": histogram_between(operator_before, operator_after, LOOP_LAG, {}),
    }
    waits: dict[str, dict[str, float | None]] = {}
    for part, buckets in histograms.items():
        p99, largest = bucket_quantile(buckets, 0.99), bucket_quantile(buckets, 1.0)
        if p99 is not None and largest is not None:
            waits[part] = {"p99": _seconds(p99), "max": _seconds(largest)}
    return waits


def _waits_text(waits: dict[str, dict[str, float | None]]) -> str:
    names = {
        "api_server_company_create": "the API server's creates",
        "api_server_company_status_apply": "its status applies",
        "operator_event_loop_lag": "the operator's event loop lag",
    }

    def bound(value: float | None) -> str:
        return "over the largest bucket" if value is None else f"{value:g} s"

    return ", ".join(
        f"{names[part]} {bound(bounds['p99'])} (largest {bound(bounds['max'])})"
        for part, bounds in waits.items()
    )


def _every_text(every: dict[str, object]) -> str:
    return (
        f"p50 {_shown(every['every_create_p50_s'])}, p99 {_shown(every['every_create_p99_s'])}, "
        f"{every['every_create_over_target']} at {TARGET_P99:.0f} s or more"
    )


def _floor_text(floor: dict[str, object]) -> str:
    return (
        f"the verdict floor (a bare status writer, the operator stopped, the same load with a "
        f"collection forced midway; {floor['api_server_gc_cycles']} collections): p50 "
        f"{_shown(floor['p50_s'])}, p99 {_shown(floor['p99_s'])}; every one created: "
        f"{_every_text(floor)}"
    )


def _shown(value: object) -> str:
    """A figure's seconds as the JSON holds them (null: never, or later than PATIENCE)."""
    return f"> {PATIENCE:.0f} s" if value is None else f"{value:.2f} s"


def _seconds(value: float) -> float | None:
    """JSON has no infinity: a probe never Accepted, or a histogram's +Inf bucket, is null."""
    return None if math.isinf(value) else round(value, 3)


def _text(value: float) -> str:
    return _shown(None if math.isinf(value) else value)
