"""Figure 4, latency under load: Companies created while background Companies are created at
a steady rate; the time from each probe's create to its ``Accepted=True``, p50 and p99.

The probes are spread evenly over the load. The figure ends when every probe is Accepted; the
background Companies the operator has not finished by then are handed to the session, which
completes them with the floor script before the next operator start.
"""

from __future__ import annotations

import asyncio
import math
import time

from bench.cluster import CompanyRef, Object
from bench.progress import Progress
from bench.report import Figure
from bench.session import Session
from crewlet_operator.api.v1alpha1 import COMPANY

TARGET_P99 = 1.0
IN_FLIGHT = 64
"""Creates the load generator keeps in flight at most (more means the server is behind)."""


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of ``values`` (sorted)."""
    return values[max(0, math.ceil(fraction * len(values)) - 1)]


async def latency(session: Session) -> Figure:
    await session.operator()
    scale, cluster = session.scale, session.cluster
    background = cluster.allocate("load", round(scale.load_rate * scale.load_seconds))
    probes = cluster.allocate("probe", scale.probes)
    await cluster.create_namespaces([*background, *probes])
    schedule = sorted(
        [(i / scale.load_rate, ref) for i, ref in enumerate(background)]
        + [((j + 0.5) * scale.load_seconds / scale.probes, ref) for j, ref in enumerate(probes)],
        key=lambda entry: entry[0],
    )
    sent: dict[tuple[str, str], float] = {}
    created: dict[tuple[str, str], Object] = {}
    slots = asyncio.Semaphore(IN_FLIGHT)

    async def create(ref: CompanyRef) -> None:
        async with slots:
            sent[ref.key] = time.monotonic()
            created[ref.key] = await cluster.api.create(COMPANY, ref.manifest())

    keys = [r.key for r in (*background, *probes)]
    async with Progress(cluster.api, keys) as progress:
        started = time.monotonic()
        tasks = []
        for offset, ref in schedule:
            await asyncio.sleep(max(0.0, started + offset - time.monotonic()))
            tasks.append(asyncio.create_task(create(ref)))
        await asyncio.gather(*tasks)
        load_s = time.monotonic() - started
        await progress.wait_accepted([p.key for p in probes], scale.timeout)
        done = [k for k in keys if progress.has_converged(k)]
        latencies = sorted((progress.accepted_at(p.key) or math.inf) - sent[p.key] for p in probes)
    finished = set(done)
    session.converged += len(finished)
    session.unfilled += [created[k] for k in keys if k not in finished]
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    rate = len(background) / load_s
    data: dict[str, object] = {
        "background_per_s": round(rate, 1),
        "background_companies": len(background),
        "probes": len(probes),
        "p50_s": round(p50, 3),
        "p99_s": round(p99, 3),
        "max_s": round(latencies[-1], 3),
        "latencies_s": [round(x, 3) for x in latencies],
        "background_converged_when_probes_done": sum(1 for r in background if r.key in finished),
    }
    if session.floor_rate is not None:
        data["floor_companies_per_s"] = round(session.floor_rate, 1)
    return Figure(
        "latency",
        f"p50 {p50:.2f} s, p99 {p99:.2f} s, max {latencies[-1]:.2f} s for {len(probes)} "
        f"probes while {rate:.0f} companies/s were created",
        f"p99 < {TARGET_P99:.0f} s at 100 creates/s",
        p99 < TARGET_P99,
        data,
    )
