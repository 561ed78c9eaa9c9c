"""Figures made by restarting the operator over a converged world.

2, resync: the mutating requests a new process makes on its first pass (the API server's own
   ``apiserver_request_total``, by verb and resource), until
   ``controller_runtime_reconcile_total{controller="company"}`` has grown by N.
3, memory: the operator's RSS (VmRSS a few seconds after a restart's first pass, and VmHWM)
   at two sizes; bytes per Company is the slope between them.
6, start-up: process start to /readyz 200 (caches synced) and to the first pass done.
"""

from __future__ import annotations

from bench.report import MIB, Figure
from bench.session import Pass, Reading, Session

MEMORY_LIMIT = 256 * MIB
STARTUP_LIMIT = 60.0
TARGET_COMPANIES = 10_000
"""The size memory and start-up are judged at; smaller runs judge a linear projection."""
RESYNC_TARGET = "0 mutating requests"
MEMORY_TARGET = "10,000 companies in <= 256 MiB (peak)"
STARTUP_TARGET = f"first pass < {STARTUP_LIMIT:.0f} s with 10,000"


async def resync(session: Session) -> Figure:
    await session.grow(session.scale.resync)
    result = await session.restart()
    writes = sum(result.writes.values())
    return Figure(
        "resync",
        f"{writes} mutating requests while {result.companies} companies were reconciled "
        f"again ({result.first_pass_s:.1f} s){_by_verb(result)}",
        RESYNC_TARGET,
        writes == 0,
        {"pass": result.as_json()},
    )


def _by_verb(result: Pass) -> str:
    return f": {result.writes}" if result.writes else ""


async def _reading_at(session: Session, companies: int, more_than: int = -1) -> Reading:
    found = session.reading(companies, more_than)
    if found is None:
        await session.grow(max(companies, more_than + 1))
        await session.restart()
        found = session.reading(companies, more_than)
        assert found is not None
    return found


async def memory(session: Session) -> Figure:
    low = await _reading_at(session, session.scale.memory[0])
    high = await _reading_at(session, session.scale.memory[1], more_than=low.companies)
    per_company = (high.memory.rss - low.memory.rss) / max(1, high.companies - low.companies)
    points = [
        {
            "companies": r.companies,
            "rss_mib": round(r.memory.rss / MIB, 1),
            "peak_rss_mib": round(r.memory.peak / MIB, 1),
        }
        for r in (low, high)
    ]
    peak = high.memory.peak + max(0, TARGET_COMPANIES - high.companies) * per_company
    data: dict[str, object] = {
        "points": points,
        "bytes_per_company": round(per_company),
        "every_reading": [
            {"companies": r.companies, "rss_mib": round(r.memory.rss / MIB, 1)}
            for r in session.readings
        ],
    }
    line = (
        "; ".join(
            f"{p['companies']} companies: {p['rss_mib']} MiB steady, {p['peak_rss_mib']} MiB peak"
            for p in points
        )
        + f"; {per_company / 1024:.1f} KiB per company (with its 13 children)"
    )
    if high.companies < TARGET_COMPANIES:
        data["projected_peak_mib_at_10000"] = round(peak / MIB)
        line += f"; projected peak at 10,000: {peak / MIB:.0f} MiB"
    return Figure("memory", line, MEMORY_TARGET, peak <= MEMORY_LIMIT, data)


async def startup(session: Session) -> Figure:
    await session.grow(session.scale.startup)
    result = await session.restart()
    first_pass = result.first_pass_s * max(1.0, TARGET_COMPANIES / result.companies)
    data: dict[str, object] = {"pass": result.as_json()}
    line = (
        f"{result.companies} companies: caches synced (/readyz) in {result.ready_s:.1f} s, "
        f"first pass done in {result.first_pass_s:.1f} s"
    )
    if result.companies < TARGET_COMPANIES:
        data["projected_first_pass_s_at_10000"] = round(first_pass, 1)
        line += f"; projected at 10,000: {first_pass:.0f} s"
    return Figure(
        "startup",
        line,
        STARTUP_TARGET,
        first_pass < STARTUP_LIMIT,
        data,
    )
