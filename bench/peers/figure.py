"""The ``peers`` figure: the Python operator beside the same reconcile written with
controller-runtime and with kopf, on the same API server, one at a time.

The template of a Company's 13 children (:mod:`bench.peers.template`) is rendered from the
reconciler first, then each contender (:mod:`bench.peers.contenders`) in turn, the others
stopped, in namespaces of its own:

1. is started, and converges one warm-up Company (so its watches are open and it leads);
2. a burst of N Companies of one EngineClass (1,000; small: 200) is created as in the
   convergence figure and followed the same way (:class:`bench.progress.Progress`: Accepted and
   every child seen through watches): the time until the last one converged, the mutating
   requests the API server counted (``apiserver_request_total``, the bench's own creates and
   Lease renewals aside) until none came for :data:`QUIET` seconds, and the contender's CPU;
   for the peers, one Company's children are checked against the template;
3. is restarted over the world it owns (N + 1 Companies): from the new process's start until it
   has reconciled each of them once (the restart pass), its writes until quiet, and its RSS
   :data:`~bench.session.SETTLE` idle seconds after the pass;
4. with ``BENCH_PEERS_LARGE=1``: the world is grown to 10,000 (small: 500) by one more burst,
   and the restart is measured again;
5. is stopped, and its world deleted (no garbage collector or namespace controller runs on
   this control plane: the bench deletes the objects itself), and etcd compacted.

It needs an empty world, so it runs first, and it leaves the world empty. Not in the default
run: ``make bench FIGURES=peers``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from bench.cluster import CLASSES, CompanyRef
from bench.daemon import until
from bench.peers import template, toolchain
from bench.peers.contenders import Contender, ControllerRuntime, Crewlet, Kopf
from bench.peers.placeholders import instantiate
from bench.progress import CHILDREN, Progress
from bench.report import MIB, Figure
from bench.session import SETTLE, WRITTEN, Session
from crewlet_operator import Resource, find_condition
from crewlet_operator_daemon.api.v1alpha1 import COMPANY

TARGET = "every contender converges and the peers apply the template's children"
ONLY = "BENCH_PEERS"
"""A comma-separated list of the contenders to run (all of them when unset)."""
LARGE = "BENCH_PEERS_LARGE"
"""Set to 1 to grow each contender's world to the large size and restart it there too."""
CLASS = CLASSES[0]
"""Every contender's Companies are of this EngineClass."""
QUIET = 2.0
"""Seconds without a mutating request that end a burst's count."""
BENCH_WRITES = frozenset({"POST companies"})
"""The bench's own requests, which no contender makes."""
CORE_EVENT = Resource("", "v1", "Event", "events")
"""kopf posts core Events, ours events.k8s.io ones; both are one collection."""

Object = dict[str, Any]


def large() -> bool:
    """Whether ``BENCH_PEERS_LARGE`` asks for the large size."""
    return os.environ.get(LARGE, "") not in ("", "0")


async def peers(session: Session) -> Figure:
    """The figure (see the module's docstring)."""
    cluster = session.cluster
    if (await cluster.api.request("GET", COMPANY.path(), query={"limit": 1}))["items"]:
        raise RuntimeError("the peers figure needs a world without Companies (it runs first)")
    path = session.run_dir / "peers-template.json"
    template.write(template.renderer(cluster.classes[CLASS], cluster.model_keys), CLASS, path)
    kubeconfig = cluster.plane.kubeconfig
    binary = await asyncio.to_thread(toolchain.controller_runtime_binary)
    venv = await asyncio.to_thread(toolchain.kopf_environment)
    contenders: list[Contender] = [
        Crewlet(session.run_dir, session.new_daemon),
        ControllerRuntime(session.run_dir, kubeconfig, path, binary),
        Kopf(session.run_dir, kubeconfig, path, venv),
    ]
    chosen = [name for name in os.environ.get(ONLY, "").split(",") if name]
    if unknown := set(chosen) - {contender.name for contender in contenders}:
        raise ValueError(f"{ONLY} names no contender {sorted(unknown)}")
    contenders = [c for c in contenders if not chosen or c.name in chosen]
    sizes = (session.scale.peers, session.scale.peers_large if large() else None)
    rows = []
    for contender in contenders:
        print(f"bench: peers: {contender.name}", flush=True)
        rows.append(await _measure(session, contender, path, *sizes))
    return Figure(
        "peers",
        " | ".join(_readable(row) for row in rows),
        TARGET,
        not any("error" in row for row in rows),
        {"class": CLASS, "contenders": rows},
    )


async def _measure(
    session: Session, contender: Contender, path: Path, size: int, large_size: int | None
) -> Object:
    """The contender's row: what it measured, and the error that ended it early, if one did."""
    cluster = session.cluster
    refs = [
        dataclasses.replace(ref, class_name=CLASS)
        for ref in cluster.allocate(f"peers-{contender.name}", 1 + size)
    ]
    row: Object = {"contender": contender.name, **contender.settings()}
    await cluster.create_namespaces(refs)
    contender.start()
    try:
        await _burst(session, contender, refs[:1])  # the warm-up
        row["burst"] = await _burst(session, contender, refs[1:])
        if contender.from_template:
            await _check_children(session, contender, refs[1], path)
        row["restart"] = await _restart(session, contender, len(refs))
        if large_size is not None and large_size > len(refs):
            more = [
                dataclasses.replace(ref, class_name=CLASS)
                for ref in cluster.allocate(f"peers-{contender.name}-more", large_size - len(refs))
            ]
            await cluster.create_namespaces(more)
            refs += more
            row["growth"] = await _burst(session, contender, more)
            row["large_restart"] = await _restart(session, contender, len(refs))
    except Exception as error:  # one contender failing must not hide the others
        row["error"] = f"{type(error).__name__}: {error}"
    finally:
        await contender.stop()
        await cluster.remove(refs, [*CHILDREN, CORE_EVENT, COMPANY])
    return row


async def _burst(session: Session, contender: Contender, refs: list[CompanyRef]) -> Object:
    """Create the Companies at once; follow them until converged, and the writes until quiet."""
    cluster = session.cluster
    timeout = session.scale.timeout * max(1.0, len(refs) / session.scale.peers)
    before = cluster.plane.mutating_requests(WRITTEN)
    async with Progress(cluster.api, [r.key for r in refs]) as progress:
        cpu = contender.cpu()
        started = time.monotonic()
        await cluster.create_companies(refs)
        await while_alive(contender, progress.wait(timeout))
        converged = progress.last_converged() - started
        cpu = contender.cpu() - cpu
    writes = _writes(await quiet(session, QUIET), before)
    return {
        "companies": len(refs),
        "converge_s": round(converged, 2),
        "mutating_requests": sum(writes.values()),
        "mutating_requests_by_verb": writes,
        "cpu_s": round(cpu, 1),
    }


async def _restart(session: Session, contender: Contender, companies: int) -> Object:
    """Stop the contender, start it again, and follow its first pass over ``companies``."""
    await contender.stop()
    before = session.cluster.plane.mutating_requests(WRITTEN)
    contender.start()

    async def passed() -> bool:
        return await contender.handled() >= companies

    done = await until(passed, session.scale.timeout, f"{contender.name} restart", interval=0.25)
    writes = _writes(await quiet(session, SETTLE), before)
    memory = contender.memory()
    return {
        "companies": companies,
        "pass_s": round(done - contender.started_at, 2),
        "mutating_requests": sum(writes.values()),
        "mutating_requests_by_verb": writes,
        "rss_mib": round(memory.rss / MIB, 1),
        "peak_rss_mib": round(memory.peak / MIB, 1),
    }


async def while_alive(contender: Contender, wait: Coroutine[Any, Any, None]) -> None:
    """Await ``wait``, failing as soon as the contender exits."""
    task = asyncio.ensure_future(wait)
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=1.0)
            if not task.done():
                contender.check_alive()
        task.result()
    finally:
        task.cancel()


async def quiet(session: Session, seconds: float) -> dict[str, int]:
    """The API server's mutating request counts once none has come for ``seconds``."""
    plane = session.cluster.plane
    counts, changed = plane.mutating_requests(WRITTEN), time.monotonic()
    deadline = changed + session.scale.timeout
    while time.monotonic() - changed < seconds:
        if time.monotonic() > deadline:
            raise TimeoutError(f"mutating requests still coming after {session.scale.timeout} s")
        await asyncio.sleep(0.5)
        now = plane.mutating_requests(WRITTEN)
        if now != counts:
            counts, changed = now, time.monotonic()
    return counts


def _writes(counts: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {
        key: value - before.get(key, 0)
        for key, value in sorted(counts.items())
        if value != before.get(key, 0) and key not in BENCH_WRITES
    }


async def _check_children(
    session: Session, contender: Contender, ref: CompanyRef, path: Path
) -> None:
    """The peer applied exactly the template's children (server defaults aside), under its own
    field manager, and accepted the Company."""
    api = session.cluster.api
    company = await api.get(COMPANY, ref.name, ref.namespace)
    accepted = find_condition((company.get("status") or {}).get("conditions"), "Accepted")
    if accepted is None or accepted.get("observedGeneration") != company["metadata"]["generation"]:
        raise RuntimeError(f"{contender.name}: {ref.name} accepted as {accepted}")
    tpl = template.load(path)
    resources = {r.kind: r for r in CHILDREN}
    uid = company["metadata"]["uid"]
    for child in instantiate(tpl, ref.namespace, ref.name, uid):
        live = await api.get(resources[child["kind"]], child["metadata"]["name"], ref.namespace)
        differences = template.differences(child, live)
        managers = {m.get("manager") for m in live["metadata"].get("managedFields") or []}
        if differences or contender.field_manager not in managers:
            raise RuntimeError(
                f"{contender.name}: {child['kind']} {child['metadata']['name']} is not the "
                f"template's: {differences[:5]}, managers {sorted(map(str, managers))}"
            )


def _readable(row: Object) -> str:
    parts = []
    if "burst" in row:
        burst = row["burst"]
        parts.append(
            f"{burst['companies']} in {burst['converge_s']} s, {burst['mutating_requests']} writes"
        )
    for key in ("restart", "large_restart"):
        if key in row:
            restart = row[key]
            parts.append(
                f"restart over {restart['companies']}: {restart['pass_s']} s, "
                f"{restart['mutating_requests']} writes, {restart['rss_mib']} MiB"
            )
    if "error" in row:
        parts.append(f"FAILED: {row['error'].splitlines()[0]}")
    return f"{row['contender']}: " + "; ".join(parts)
