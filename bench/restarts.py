"""Figures made by restarting the operator over a converged world.

2, resync: the mutating requests a new process makes on its first pass (the API server's own
   ``apiserver_request_total``, by verb and resource), until
   ``controller_runtime_reconcile_total{controller="company"}`` has grown by N.
3, memory: the operator's RSS (VmRSS a few seconds after a restart's first pass, and VmHWM)
   at two sizes; bytes per Company is the slope between them.
6, start-up: process start to /readyz 200 (caches synced: the children by their metadata, see
   crewlet_operator_daemon.controller), to every child held whole, and to the first pass done, the
   writes of that pass, and peak over steady RSS: of the first process over a world filled
   with none running (every company rendered), and of a restart after it (the checkpoint of
   crewlet_operator_daemon.checkpoint). Its times are judged on the restart, the start-up of the
   issue ("a restart costs up to two minutes"); the first process's are printed beside them, not
   judged: a new version must render every company to learn what it would write (so would
   the issue's own suggestion, an inputs digest that includes the operator's version). Both
   must write nothing and keep their peak RSS. Beside it, what the world costs to read: its
   etcd revision over its objects (its history), and one kind (StatefulSets, the largest)
   listed in pages of 100 as informers did (paged lists are read from etcd, history and all)
   and streamed (from the API server's watch cache); and the reader's floor: every kind the
   operator caches read at once, as its informers read it until synced (its children's
   metadata in pages of crewlet_operator_daemon.controller.LISTED_CHILDREN_PAGE, the others
   streamed), by readers that only
   read the bytes (no decoding): what the API server alone takes to send the world, the
   least a sync can take on this machine. And the CPU each side spent until the sync, the
   operator's and the control plane's, beside what the machine's cores had meanwhile: when
   the two fill them, the sync waited for the machine, not for either; and the garbage
   collections the API server finished meanwhile, whose marking is a share of its CPU.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import re
import time
import urllib.parse
import urllib.request

from bench.report import MIB, Figure
from bench.session import Pass, Reading, Session
from crewlet_operator import NAMESPACE, PERSISTENT_VOLUME_CLAIM, STATEFUL_SET, Resource
from crewlet_operator.cache.informer import INITIAL_EVENTS_END
from crewlet_operator.envtest import ControlPlane
from crewlet_operator.kube import ListParams, WatchParams
from crewlet_operator.kube.params import METADATA_LIST_ACCEPT
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS
from crewlet_operator_daemon.cli import gateway_api_served
from crewlet_operator_daemon.controller import LISTED_CHILDREN_PAGE
from crewlet_operator_daemon.naming import MANAGED_BY_SELECTOR
from crewlet_operator_daemon.plan import CHILD_RESOURCES, GATEWAY_CHILD_RESOURCES

MEMORY_LIMIT = 256 * MIB
SYNC_LIMIT = 10.0
STARTUP_LIMIT = 15.0
PEAK_OVER_STEADY = 1.3
TARGET_COMPANIES = 10_000
"""The size memory and start-up are judged at; smaller runs judge a linear projection."""
RESYNC_TARGET = "0 mutating requests"
MEMORY_TARGET = "10,000 companies in <= 256 MiB (peak)"
_CONTINUE = re.compile(rb'"continue":"([^"]+)"')
STARTUP_TARGET = (
    f"a restart with 10,000: caches synced < {SYNC_LIMIT:.0f} s, first pass < "
    f"{STARTUP_LIMIT:.0f} s; it and the first start: 0 writes, peak RSS <= {PEAK_OVER_STEADY}x "
    "steady"
)


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
    world = await _world(session)
    # The world was filled with no operator running: the first process renders every company
    # (the first start of a new version looks the same). The next one restarts over the world
    # the first left, as a rolling update, a rescheduled pod or a crash does, and resumes from
    # its checkpoint (crewlet_operator_daemon.checkpoint). The times are judged on the restart; both
    # must write nothing and keep their peak (see the module's docstring).
    cold = await session.restart()
    result = await session.restart()
    scale = max(1.0, TARGET_COMPANIES / result.companies)
    passes = {"cold": cold, "restart": result}
    projected = {k: (p.ready_s * scale, p.first_pass_s * scale) for k, p in passes.items()}
    writes = {k: sum(p.writes.values()) for k, p in passes.items()}
    peak_ratio = {k: p.memory.peak / max(1, p.memory.rss) for k, p in passes.items()}
    cores = os.cpu_count() or 1
    data: dict[str, object] = {
        "pass": result.as_json(),
        "cold_pass": cold.as_json(),
        "peak_over_steady": round(peak_ratio["restart"], 2),
        "cold_peak_over_steady": round(peak_ratio["cold"], 2),
        "world": world,
    }
    line = (
        f"{result.companies} companies: a restart synced its caches (/readyz; the children "
        f"by their metadata) in {result.ready_s:.1f} s, held every child whole at "
        f"{result.whole_s:.1f} s and finished its first pass in {result.first_pass_s:.1f} s, "
        f"the first start over the world (every company rendered, not judged) in "
        f"{cold.ready_s:.1f} s, {cold.whole_s:.1f} s and {cold.first_pass_s:.1f} s; CPU until "
        f"synced: the operator "
        f"{result.ready_cpu_s:.1f} s and {cold.ready_cpu_s:.1f} s, the API server and etcd "
        f"{result.ready_server_cpu_s:.1f} s and {cold.ready_server_cpu_s:.1f} s (with "
        f"{result.ready_server_collections} and {cold.ready_server_collections} of the API "
        f"server's garbage collections), of the "
        f"{cores * result.ready_s:.1f} s and {cores * cold.ready_s:.1f} s the machine's {cores} "
        f"cores had; "
        f"{writes['restart']} and {writes['cold']} writes, peak RSS "
        f"{peak_ratio['restart']:.2f}x and {peak_ratio['cold']:.2f}x steady; the world: "
        f"{world['revisions_per_object']} etcd revisions an object, {world['statefulsets']} "
        f"StatefulSets listed in pages in {world['paged_list_s']} s, streamed in "
        f"{world['streamed_list_s']} s; every cached kind read at once as the caches read it "
        f"until synced (the children's metadata in pages, the others streamed) by readers that "
        f"decode nothing (the API server's floor for a sync) in {world['reader_floor_s']} s"
    )
    if result.companies < TARGET_COMPANIES:
        data["projected_at_10000"] = {
            k: {"synced_s": round(v[0], 1), "first_pass_s": round(v[1], 1)}
            for k, v in projected.items()
        }
        line += "; projected at 10,000: " + ", ".join(
            f"{k} synced {v[0]:.0f} s, first pass {v[1]:.0f} s" for k, v in projected.items()
        )
    met = (
        projected["restart"][0] < SYNC_LIMIT
        and projected["restart"][1] < STARTUP_LIMIT
        and all(writes[k] == 0 and peak_ratio[k] <= PEAK_OVER_STEADY for k in passes)
    )
    return Figure("startup", line, STARTUP_TARGET, met, data)


async def _world(session: Session) -> dict[str, object]:
    """What the world the operator starts over costs to read (see the module's docstring)."""
    api, plane = session.cluster.api, session.cluster.plane
    objects = 0.0
    for line in plane.admin_request("GET", "/metrics", raw=True).splitlines():
        if line.startswith("apiserver_resource_objects{"):  # 1.37's name (was _storage_)
            objects += float(line.rsplit(" ", 1)[1])
    started, count, revision = time.monotonic(), 0, ""
    async for page in api.list_pages(STATEFUL_SET, ListParams(page_size=100)):
        count += len(page.items)
        revision = page.resource_version
    paged = time.monotonic() - started
    started = time.monotonic()
    streaming = WatchParams(send_initial_events=True, timeout_seconds=300)
    async for event in api.watch(STATEFUL_SET, streaming):
        annotations = (event.object.get("metadata") or {}).get("annotations") or {}
        if event.type == "BOOKMARK" and annotations.get(INITIAL_EVENTS_END) == "true":
            break
    streamed = time.monotonic() - started
    # What the operator caches (crewlet_operator_daemon.controller.CrewletControllers), by selector.
    streamed_kinds: list[tuple[Resource, str | None]] = [
        (COMPANY, None),
        (ENGINE_CLASS, None),
        (NAMESPACE, None),
        (PERSISTENT_VOLUME_CLAIM, MANAGED_BY_SELECTOR),
    ]
    children = list(CHILD_RESOURCES)
    if await gateway_api_served(api):
        children += GATEWAY_CHILD_RESOURCES
    started = time.monotonic()
    await asyncio.gather(
        *(asyncio.to_thread(_read_stream, plane, *kind) for kind in streamed_kinds),
        *(asyncio.to_thread(_read_pages, plane, child) for child in children),
    )
    floor = time.monotonic() - started
    return {
        "objects": int(objects),
        "etcd_revision": int(revision or 0),
        "revisions_per_object": round(int(revision or 0) / max(1.0, objects), 1),
        "statefulsets": count,
        "paged_list_s": round(paged, 2),
        "streamed_list_s": round(streamed, 2),
        "reader_floor_s": round(floor, 2),
    }


def _read_pages(plane: ControlPlane, child: Resource) -> None:
    """List every child of kind ``child`` in pages as the operator's informers do until they
    have synced (their metadata alone, one kept-alive connection), reading the bytes and
    decoding nothing but each page's continue token (in the list's metadata, sent before its
    items)."""
    server = urllib.parse.urlsplit(plane.host)
    connection = http.client.HTTPSConnection(
        server.hostname or "127.0.0.1", server.port, context=plane.admin_ssl_context(), timeout=60
    )
    token = ""
    try:
        while True:
            query = {
                "labelSelector": MANAGED_BY_SELECTOR,
                "limit": str(LISTED_CHILDREN_PAGE),
                **({"continue": token} if token else {}),
            }
            path = f"{child.path()}?{urllib.parse.urlencode(query)}"
            connection.request("GET", path, headers={"Accept": METADATA_LIST_ACCEPT})
            answer = connection.getresponse()
            head = b""
            while b'"items":' not in head and (chunk := answer.read1(1 << 20)):
                head += chunk
            while answer.read1(1 << 20):  # to its end, so the connection serves the next page
                pass
            answer.close()
            items_at = head.find(b'"items":')
            found = _CONTINUE.search(head[: items_at if items_at >= 0 else None])
            token = found.group(1).decode() if found else ""
            if not token:
                return
    finally:
        connection.close()


def _read_stream(plane: ControlPlane, resource: Resource, selector: str | None) -> None:
    """Stream every object of ``resource`` (``sendInitialEvents``), reading the bytes until the
    bookmark that ends the list and decoding nothing."""
    query = {
        "watch": "true",
        "sendInitialEvents": "true",
        "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "300",
    }
    if selector:
        query["labelSelector"] = selector
    url = f"{plane.host}{resource.path()}?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(url, context=plane.admin_ssl_context(), timeout=60) as response:
        tail = b""
        while chunk := response.read1(1 << 20):
            # The marker may straddle two reads: look in the end of the last one too.
            if INITIAL_EVENTS_END.encode() in tail + chunk:
                return
            tail = chunk[-64:]
