"""Figure: fairness between tenants (issue 38). A burst of new Companies in busy tenants'
namespaces (ten to a namespace, as every burst: 40 namespaces for 400), and from the burst's
first create on, probe Companies created one every :data:`PROBE_INTERVAL` seconds in a quiet
namespace of their own: each probe's time from its create to ``Accepted=True``, p50 and p99;
when the burst's last create was answered, when its last Company was Accepted, and when every
one of them had converged. Probes created after the burst's last verdict met no backlog: how
many did is printed beside the figure, which is judged on every probe.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import time

from bench.cluster import Object
from bench.latency import percentile
from bench.progress import Key, Progress
from bench.report import Figure
from bench.session import Session

TARGET_P99 = 1.0
TARGET = f"quiet tenant p99 create -> Accepted < {TARGET_P99:.0f} s under a burst of 400"
PROBE_INTERVAL = 0.3
"""Seconds between two probes' creates (the issue's measurement)."""
PATIENCE = 60.0
"""Seconds after the last probe's create that the probes are waited for; a probe not Accepted
by then counts as infinitely late."""


async def fairness(session: Session) -> Figure:
    scale, cluster = session.scale, session.cluster
    daemon = await session.operator()
    workers = await daemon.metric(
        "controller_runtime_max_concurrent_reconciles", controller="company"
    )
    burst = cluster.allocate("fair-burst", scale.fairness_burst)
    probes = [
        dataclasses.replace(ref, namespace="fair-quiet")
        for ref in cluster.allocate("fair-quiet", scale.fairness_probes)
    ]
    await cluster.create_namespaces([*burst, *probes])
    keys = [r.key for r in (*burst, *probes)]
    sent: dict[Key, float] = {}
    created: list[Object] = []

    async def probe() -> None:
        for i, ref in enumerate(probes):
            await asyncio.sleep(max(0.0, started + (i + 1) * PROBE_INTERVAL - time.monotonic()))
            sent[ref.key] = time.monotonic()
            created.append(await cluster.create_company(ref))

    async with Progress(cluster.api, keys) as progress:
        started = time.monotonic()
        prober = asyncio.create_task(probe())
        created += await cluster.create_companies(burst)
        burst_created = time.monotonic() - started
        await prober
        with contextlib.suppress(TimeoutError):
            await progress.wait_accepted([p.key for p in probes], PATIENCE)
        with contextlib.suppress(TimeoutError):
            await progress.wait_accepted([b.key for b in burst], scale.timeout)
        burst_accepted = [progress.accepted_at(b.key) for b in burst]
        last_verdict = max((t for t in burst_accepted if t is not None), default=math.inf)
        converged_s: float | None = None
        left: list[Object] = []
        try:
            await progress.wait(scale.timeout)
            converged_s = progress.last_converged() - started
        except TimeoutError:
            # What the operator did not finish, the floor script completes before the next
            # operator starts.
            unfinished = {k for k in keys if not progress.has_converged(k)}
            left = [
                c
                for c in created
                if (c["metadata"]["namespace"], c["metadata"]["name"]) in unfinished
            ]
        in_order = [(progress.accepted_at(p.key) or math.inf) - sent[p.key] for p in probes]
        latencies = sorted(in_order)
    session.unfilled += left
    session.converged += len(keys) - len(left)
    during = sum(1 for p in probes if sent[p.key] < last_verdict)
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    data: dict[str, object] = {
        "burst": len(burst),
        "burst_namespaces": len({b.namespace for b in burst}),
        "probes": len(probes),
        "probe_interval_s": PROBE_INTERVAL,
        "probes_created_before_the_bursts_last_verdict": during,
        "p50_s": _seconds(p50),
        "p99_s": _seconds(p99),
        "max_s": _seconds(latencies[-1]),
        "latencies_s": [_seconds(x) for x in latencies],
        "latencies_in_creation_order_s": [_seconds(x) for x in in_order],
        "burst_created_s": round(burst_created, 2),
        "burst_accepted_s": _seconds(last_verdict - started),
        "burst_converged_s": None if converged_s is None else round(converged_s, 1),
        "operator_workers": workers,
    }
    line = (
        f"a quiet tenant's new company under a burst of {len(burst)} in "
        f"{data['burst_namespaces']} other namespaces: p50 {_text(p50)}, p99 {_text(p99)} "
        f"(max {_text(latencies[-1])}) for {len(probes)} probes one every {PROBE_INTERVAL} s, "
        f"{during} of them created before the burst's last verdict (those: "
        f"{', '.join(_text(x) for x in in_order[:during])}); the burst created in "
        f"{burst_created:.1f} s, every one Accepted after {_text(last_verdict - started)}, "
        + (
            f"converged after {converged_s:.0f} s"
            if converged_s is not None
            else f"not converged after {scale.timeout:.0f} s"
        )
    )
    return Figure("fairness", line, TARGET, p99 < TARGET_P99, data)


def _seconds(value: float) -> float | None:
    """JSON has no infinity: a probe never Accepted is null."""
    return None if math.isinf(value) else round(value, 3)


def _text(value: float) -> str:
    return "never" if math.isinf(value) else f"{value:.2f} s"
