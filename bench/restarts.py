"""Figures made by restarting the operator over a converged world.

2, resync: the mutating requests a new process makes on its first pass (the API server's own
   ``apiserver_request_total``, by verb and resource), until
   ``controller_runtime_reconcile_total{controller="company"}`` has grown by N.
3, memory: the operator's RSS (VmRSS after its first pass, VmHWM) at two sizes.
6, start-up: process start to /readyz 200 (caches synced) and to the first pass done.
"""

from __future__ import annotations

from bench.report import MIB, Figure
from bench.session import Pass, Session

MEMORY_LIMIT = 256 * MIB
STARTUP_LIMIT = 60.0


async def resync(session: Session) -> Figure:
    if session.converged + session.pending + len(session.unfilled) < session.scale.resync:
        await session.grow(session.scale.resync)
    if session.pending or session.unfilled:
        await session.restart()  # adopt first: the figure is about a converged world
    result = await session.restart()
    writes = sum(result.writes.values())
    return Figure(
        "resync",
        f"{writes} mutating requests while {result.companies} companies were reconciled "
        f"again ({result.first_pass_s:.1f} s){_by_verb(result)}",
        "0 mutating requests",
        writes == 0,
        {"pass": result.as_json()},
    )


def _by_verb(result: Pass) -> str:
    return f": {result.writes}" if result.writes else ""


async def _pass_at(session: Session, companies: int) -> Pass:
    found = session.pass_with(companies)
    if found is None:
        await session.grow(companies)
        found = session.pass_with(companies)
        if found is None:  # grow found enough Companies already: read this process's
            found = await session.restart()
    return found


async def memory(session: Session) -> Figure:
    low = await _pass_at(session, session.scale.memory[0])
    high = await _pass_at(session, session.scale.memory[1])
    per_company = (high.memory.rss - low.memory.rss) / max(1, high.companies - low.companies)
    points = [
        {
            "companies": p.companies,
            "objects_cached": p.companies * 14,
            "rss_mib": round(p.memory.rss / MIB, 1),
            "peak_rss_mib": round(p.memory.peak / MIB, 1),
            "adopted": p.adopted,
        }
        for p in (low, high)
    ]
    return Figure(
        "memory",
        "; ".join(
            f"{p['companies']} companies: {p['rss_mib']} MiB steady, {p['peak_rss_mib']} MiB peak"
            for p in points
        )
        + f"; {per_company / 1024:.1f} KiB per company (with its 13 children)",
        "10,000 companies in <= 256 MiB (peak)",
        high.memory.peak <= MEMORY_LIMIT,
        {"points": points, "bytes_per_company": round(per_company)},
    )


async def startup(session: Session) -> Figure:
    await session.grow(session.scale.startup)
    if session.pending or session.unfilled:
        await session.restart()
    result = await session.restart()
    return Figure(
        "startup",
        f"{result.companies} companies: caches synced (/readyz) in {result.ready_s:.1f} s, "
        f"first pass done in {result.first_pass_s:.1f} s",
        f"first pass < {STARTUP_LIMIT:.0f} s with 10,000",
        result.first_pass_s < STARTUP_LIMIT,
        {"pass": result.as_json()},
    )
