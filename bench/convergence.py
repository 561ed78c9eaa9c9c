"""Figure 1, convergence: a burst of N Companies until every one is Accepted and has every
child, beside the floor (the same children applied by a plain script, same concurrency, same
API server, same run)."""

from __future__ import annotations

import time

from bench import floor
from bench.daemon import WORKERS
from bench.progress import Progress
from bench.report import MIB, Figure
from bench.session import Session

TARGET_RATIO = 1.25
TARGET = f"<= {TARGET_RATIO}x the floor at 1,000"


async def burst(session: Session, phase: str, count: int) -> tuple[float, float]:
    """Create ``count`` Companies at once with the operator running; seconds until the last
    create returned, and until every one converged."""
    refs = session.cluster.allocate(phase, count)
    await session.cluster.create_namespaces(refs)
    async with Progress(session.cluster.api, [r.key for r in refs]) as progress:
        started = time.monotonic()
        await session.cluster.create_companies(refs)
        created = time.monotonic() - started
        await progress.wait(session.scale.timeout)
    session.converged += count
    return created, progress.last_converged() - started


async def convergence(session: Session) -> Figure:
    cluster = session.cluster
    sizes = session.scale.convergence
    # The floors first, with no operator running to take CPU from the API server; their
    # Companies stay, so the next operator adopts them (and must find nothing to change).
    await session.stop_operator()
    floors: dict[int, float] = {}
    for n in sizes:
        refs = cluster.allocate(f"floor{n}", n)
        await cluster.create_namespaces(refs)
        created = await cluster.create_companies(refs)
        floors[n] = await floor.timed(cluster, created, WORKERS)
        session.pending += n
    adoption = await session.restart()
    daemon = await session.operator()
    workers = await daemon.metric(
        "controller_runtime_max_concurrent_reconciles", controller="company"
    )
    rows = []
    for n in sizes:
        created_s, converged_s = await burst(session, f"burst{n}", n)
        rows.append(
            {
                "companies": n,
                "operator_s": round(converged_s, 2),
                "floor_s": round(floors[n], 2),
                "ratio": round(converged_s / floors[n], 2),
                "creates_s": round(created_s, 2),
                "floor_applies_per_s": round(n * 13 / floors[n], 1),
            }
        )
    session.floor_rate = max(sizes) / floors[max(sizes)]
    child_writes = {k: v for k, v in adoption.writes.items() if not k.endswith("/status")}
    peak = daemon.memory().peak
    last = rows[-1]
    return Figure(
        "convergence",
        "; ".join(
            f"{r['companies']} companies in {r['operator_s']} s, floor {r['floor_s']} s "
            f"-> {r['ratio']}x"
            for r in rows
        )
        + f" (operator workers: {workers:.0f}, floor workers: {WORKERS})",
        TARGET,
        float(last["ratio"]) <= TARGET_RATIO,
        {
            "bursts": rows,
            "floor_workers": WORKERS,
            "operator_workers": workers,
            "operator_peak_rss_mib": round(peak / MIB, 1),
            "children_rewritten_adopting_floor_objects": child_writes,
        },
    )
