"""Figures: tracing and quiet (issue 51). What a reconcile's trace costs (``tracing``), and
where a quiet tenant's verdict spends its time, read from the traces themselves (``quiet``).

1. **quiet**, every reconcile traced over OTLP to a real Jaeger (hack/jaeger.py), in the world
   as the run found it (fresh when the figure runs first, as issue 51's test was made):
   :data:`BURST` Companies created over the busy tenants' namespaces (ten to a namespace), then
   :data:`PROBES` probe Companies one every :data:`PROBE_INTERVAL` seconds in a quiet namespace
   of their own while the burst's children are written, each with a ``traceparent`` in its
   trace annotation. Each probe's create -> Accepted is cut, from the spans of its trace, into:
   the create answered and its event queued (``event``), the queue (``queued``), the
   reconcile's work before its verdict (``work``, the apply-slot waits inside it beside), the
   status write (``status``), and the verdict reaching the bench's watch (``seen``; 0 when the
   watch saw it before the operator read the write's answer, the status stage ending there). With
   ``BENCH_WORKLOADS=1`` the control plane runs pods for the StatefulSets (bench/cluster.py),
   whose status changes the operator follows too.
2. **tracing**: bursts of N Companies (the convergence figure's largest) with tracing off and
   traced, in :data:`ORDER`: the seconds until the last one converged and the operator's CPU
   seconds, on against off, each averaged over its bursts.
3. And bursts with one trace in ten kept (OpenTelemetry's ``parentbased_traceidratio``
   sampler), against the untraced ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable

from bench.cluster import Object
from bench.convergence import burst
from bench.daemon import until
from bench.latency import percentile
from bench.progress import Progress
from bench.report import Figure
from bench.session import Session
from crewlet_operator_daemon.naming import TRACE_ANNOTATION
from hack.jaeger import Jaeger, Span, follows_from, parent_of, tags

TARGET_COST = 1.05
TARGET_QUIET = 1.0
TARGET = f"convergence traced <= {TARGET_COST}x untraced"
BURST = 400
QUIET_TARGET = (
    f"a quiet tenant's worst create -> Accepted < {TARGET_QUIET:.0f} s under a burst of {BURST}"
)
PROBES = 10
PROBE_INTERVAL = 0.3
PATIENCE = 60.0
"""Seconds the probes are waited for after the last one's create."""
SERVICE = "crewlet-operator-bench"
SAMPLED = 0.1
"""The ratio of traces kept in the third burst (OTEL_TRACES_SAMPLER=parentbased_traceidratio)."""
STAGES = ("event", "queued", "work", "status", "seen")


@contextlib.asynccontextmanager
async def jaeger_for(session: Session) -> AsyncIterator[Jaeger]:
    """A Jaeger for the run, answering; the daemons started meanwhile trace into it (once
    :func:`traced` sets their environment)."""
    jaeger = Jaeger(session.run_dir)
    jaeger.start()
    try:
        await until(_answers(jaeger), session.scale.timeout, "Jaeger answers")
        yield jaeger
    finally:
        session.environment = {}
        jaeger.stop()


def traced(jaeger: Jaeger) -> dict[str, str]:
    """The environment of a daemon that traces every reconcile into ``jaeger``."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.endpoint(), "OTEL_SERVICE_NAME": SERVICE}


ORDER = ("untraced", "traced", "sampled", "sampled", "traced", "untraced")
"""The cost figure's bursts, each kind as often early as late: a burst adds its Companies to the
world the next one runs in, and a larger world makes a burst slower: the API server's and
etcd's work grows with it, the operator's does not (bench/NOTES.md, "Tracing's cost in a
balanced order")."""


def _mean(bursts: list[dict[str, float]]) -> dict[str, float]:
    """Each figure of ``bursts`` averaged."""
    return {key: round(sum(b[key] for b in bursts) / len(bursts), 2) for key in bursts[0]}


def _environment(kind: str, jaeger: Jaeger) -> dict[str, str]:
    """The daemon's environment for a burst of ``kind``, one of :data:`ORDER`'s."""
    if kind == "untraced":
        return {}
    if kind == "traced":
        return traced(jaeger)
    return traced(jaeger) | {
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": str(SAMPLED),
    }


async def tracing(session: Session) -> Figure:
    """The cost figure (see the module's docstring, 2 and 3), in :data:`ORDER`."""
    runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in ORDER}
    async with jaeger_for(session) as jaeger:
        size = session.scale.convergence[-1]
        for kind in ORDER:
            await session.stop_operator()
            session.environment = _environment(kind, jaeger)
            runs[kind].append(await burst(session, kind, size))
        await session.stop_operator()
    off, on, sampled = (_mean(runs[kind]) for kind in ("untraced", "traced", "sampled"))
    cost = on["operator_s"] / off["operator_s"]
    cpu = on["operator_cpu_s"] / off["operator_cpu_s"]
    sampled_cost = sampled["operator_s"] / off["operator_s"]
    sampled_cpu = sampled["operator_cpu_s"] / off["operator_cpu_s"]
    line = (
        f"{size} companies converged in {on['operator_s']} s traced, {off['operator_s']} s "
        f"untraced ({cost:.3f}x; operator CPU {on['operator_cpu_s']} s against "
        f"{off['operator_cpu_s']} s, {cpu:.2f}x), {sampled['operator_s']} s with one trace in "
        f"{1 / SAMPLED:.0f} kept ({sampled_cost:.3f}x; CPU {sampled_cpu:.2f}x); means of "
        f"{ORDER.count('traced')} bursts each"
    )
    return Figure(
        "tracing",
        line,
        TARGET,
        cost <= TARGET_COST,
        {
            "companies": size,
            "order": list(ORDER),
            "bursts": runs,
            "untraced": off,
            "traced": on,
            "cost_ratio": round(cost, 3),
            "operator_cpu_ratio": round(cpu, 3),
            "sampled": {"ratio": SAMPLED, **sampled},
            "sampled_cost_ratio": round(sampled_cost, 3),
            "sampled_operator_cpu_ratio": round(sampled_cpu, 3),
        },
    )


async def quiet_tenant(session: Session) -> Figure:
    """The quiet tenant's figure (see the module's docstring, 1)."""
    async with jaeger_for(session) as jaeger:
        await session.stop_operator()
        session.environment = traced(jaeger)
        probes, pods = await _quiet_tenant(session, jaeger)
        await session.stop_operator()
    totals = sorted(p["total"] for p in probes)
    worst = max(probes, key=lambda p: p["total"])
    by_stage = {
        stage: {
            "p50_s": round(percentile(sorted(p[stage] for p in probes), 0.5), 3),
            "max_s": round(max(p[stage] for p in probes), 3),
        }
        for stage in (*STAGES, "slot_waits")
    }
    line = (
        f"a quiet tenant under a burst of {BURST}"
        + (" (with workloads)" if session.workloads else "")
        + f": create -> Accepted p50 {percentile(totals, 0.5):.2f} s, worst {totals[-1]:.2f} s = "
        + " + ".join(f"{stage} {worst[stage]:.2f}" for stage in STAGES)
        + "; by stage p50/max: "
        + ", ".join(f"{stage} {v['p50_s']:.2f}/{v['max_s']:.2f}" for stage, v in by_stage.items())
        + (f"; pods at the end, by phase: {pods}" if pods else "")
    )
    return Figure(
        "quiet",
        line,
        QUIET_TARGET,
        totals[-1] < TARGET_QUIET,
        {
            "burst": BURST,
            "workloads": session.workloads,
            "pods_by_phase": pods,
            "probes": probes,
            "p50_s": round(percentile(totals, 0.5), 3),
            "p99_s": round(percentile(totals, 0.99), 3),
            "max_s": round(totals[-1], 3),
            "stages": by_stage,
        },
    )


def _answers(jaeger: Jaeger) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return jaeger.answers()

    return probe


async def _quiet_tenant(
    session: Session, jaeger: Jaeger
) -> tuple[list[dict[str, float]], dict[str, int]]:
    """The probes' create -> Accepted, each cut into its stages from its trace, and with
    workloads the pods by phase once every Company converged."""
    cluster = session.cluster
    await session.operator()
    busy = cluster.allocate("trace-busy", BURST)
    probes = [
        dataclasses.replace(ref, namespace="trace-quiet")
        for ref in cluster.allocate("trace-quiet", PROBES)
    ]
    await cluster.create_namespaces([*busy, *probes])
    traces = {ref.key: secrets.token_hex(16) for ref in probes}
    sent: dict[tuple[str, str], float] = {}
    # Wall-clock time minus the monotonic clock's: spans carry the first, Progress the second.
    offset = time.time() - time.monotonic()
    async with Progress(cluster.api, [r.key for r in (*busy, *probes)]) as progress:
        await cluster.create_companies(busy)
        started = time.monotonic()
        for i, ref in enumerate(probes):
            await asyncio.sleep(max(0.0, started + i * PROBE_INTERVAL - time.monotonic()))
            parent = f"00-{traces[ref.key]}-{secrets.token_hex(8)}-01"
            sent[ref.key] = time.time()
            await cluster.create_company(ref, {TRACE_ANNOTATION: parent})
        with contextlib.suppress(TimeoutError):
            await progress.wait_accepted([p.key for p in probes], PATIENCE)
        accepted = {p.key: progress.accepted_at(p.key) for p in probes}
        await progress.wait(session.scale.timeout)
    pods = await cluster.pods_by_phase() if session.workloads else {}
    session.converged += BURST + PROBES
    found: list[dict[str, float]] = []
    for ref in probes:
        at = accepted[ref.key]
        spans = await _verdict_spans(jaeger, traces[ref.key])
        found.append(_stages(spans, sent[ref.key], math.inf if at is None else at + offset))
    return found, pods


async def _verdict_spans(jaeger: Jaeger, trace_id: str) -> list[Span]:
    """The spans of ``trace_id`` once its verdict's status write has arrived (the exporter
    sends in batches)."""
    for _ in range(100):
        spans = jaeger.trace(trace_id)
        if any(s["operationName"] == "PATCH companies/status" for s in spans):
            return spans
        await asyncio.sleep(0.2)
    raise RuntimeError(f"trace {trace_id} holds no status write")


def _stages(spans: list[Span], sent: float, accepted: float) -> dict[str, float]:
    """A probe's create (``sent``) -> Accepted (``accepted``, wall-clock seconds) by stage."""
    by_id = {s["spanID"]: s for s in spans}
    status = min(
        (s for s in spans if s["operationName"] == "PATCH companies/status"),
        key=lambda s: s["startTime"],
    )
    root = by_id[parent_of(status) or ""]
    queued = next(
        s for s in spans if s["operationName"] == "queued" and parent_of(s) == root["spanID"]
    )

    def start(span: Span) -> float:
        return float(span["startTime"]) / 1e6

    def end(span: Span) -> float:
        return (float(span["startTime"]) + float(span["duration"])) / 1e6

    waits = [
        s
        for s in spans
        if s["operationName"].startswith("wait for")
        and parent_of(s) == root["spanID"]
        and end(s) <= start(status)
    ]
    # The bench's watch can show the verdict before the operator has read the write's answer
    # (the status span's end): the status stage then ends when the watch saw it, seen is 0.
    written = min(end(status), accepted)
    return {
        "total": accepted - sent,
        "event": start(root) - sent,
        "queued": end(queued) - start(queued),
        "work": start(status) - end(queued),
        "status": written - start(status),
        "seen": accepted - written,
        "slot_waits": sum(end(s) - start(s) for s in waits),
        "events_folded": float(tags(root).get("crewlet.trigger.events", 1)),
    }


async def reconcile_stages(jaeger: Jaeger, window: tuple[float, float]) -> Object:
    """Every company reconcile traced in ``window`` (wall-clock seconds) by stage: the queue
    (its ``queued`` span), the work after it, the API requests inside by kind (the status
    write, the children's applies, the rest) and the apply-slot waits; p50 and p99 of each, in
    seconds, and how many. And each new company's two reconciles, its verdict's and the one it
    left its children to (which links to the verdict's span), as one chain
    (:func:`create_stages`)."""
    spans = await asyncio.to_thread(
        jaeger.spans, SERVICE, int(window[0] * 1e6), int(window[1] * 1e6)
    )
    roots = {s["spanID"]: s for s in spans if s["operationName"] == "reconcile company"}
    stages: dict[str, list[float]] = {
        "queued": [],
        "work": [],
        "status write": [],
        "child apply": [],
        "other request": [],
        "apply-slot wait": [],
    }
    for span in spans:
        root = roots.get(parent_of(span) or "")
        if root is None:
            continue
        seconds = float(span["duration"]) / 1e6
        name = span["operationName"]
        if name == "queued":
            stages["queued"].append(seconds)
            stages["work"].append(float(root["duration"]) / 1e6 - seconds)
        elif name == "PATCH companies/status":
            stages["status write"].append(seconds)
        elif name.startswith("wait for"):
            stages["apply-slot wait"].append(seconds)
        elif name.startswith("PATCH "):
            stages["child apply"].append(seconds)
        else:
            stages["other request"].append(seconds)
    triggers = Counter(
        str(tags(root).get("crewlet.trigger.watch") or tags(root)["crewlet.trigger.event"])
        for root in roots.values()
    )
    return {
        "traced_reconciles": len(roots),
        "traced_triggers": dict(triggers.most_common()),
        "traced_stages_s": _quantiles(stages),
        "traced_create_stages_s": _quantiles(create_stages(spans, roots)),
    }


def create_stages(spans: list[Span], roots: dict[str, Span]) -> dict[str, list[float]]:
    """A new company's verdict and children by stage, from the pairs of ``roots`` (reconcile
    spans by id) where one links to the other: the verdict's reconcile (from the create's event
    until its status was written and it queued the company again), the children's wait for a
    worker (their reconcile's ``queued``), their reconcile's work (the applies), and the whole,
    from the create's event until the last child was applied."""
    queued = {parent_of(s): s for s in spans if s["operationName"] == "queued"}
    stages: dict[str, list[float]] = {
        "verdict reconcile": [],
        "children's turn": [],
        "children's work": [],
        "event to children written": [],
    }
    for children in roots.values():
        verdict = next((roots[i] for i in follows_from(children) if i in roots), None)
        waited = queued.get(children["spanID"])
        if verdict is None or waited is None:
            continue
        turn = float(waited["duration"]) / 1e6
        stages["verdict reconcile"].append(float(verdict["duration"]) / 1e6)
        stages["children's turn"].append(turn)
        stages["children's work"].append(float(children["duration"]) / 1e6 - turn)
        end = float(children["startTime"]) + float(children["duration"])
        stages["event to children written"].append((end - float(verdict["startTime"])) / 1e6)
    return stages


def _quantiles(stages: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Each stage's count, p50 and p99 (seconds), for the stages with values."""
    return {
        stage: {
            "count": len(values),
            "p50": round(percentile(sorted(values), 0.5), 3),
            "p99": round(percentile(sorted(values), 0.99), 3),
        }
        for stage, values in stages.items()
        if values
    }
