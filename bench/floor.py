"""The floor: what the API server itself needs to apply a burst's children.

A plain script applies exactly the objects the operator would write (rendered by the
reconciler's own :func:`~reconcilers.company.desired_children`, so byte-identical but for their
namespace and owner) with the operator's concurrency: ``WORKERS`` workers, each applying one
company's children in order, through the same client. Nothing else: no cache, no diff, no
status. The objects are rendered before the clock starts and go to fresh namespaces; afterwards
they are deleted, so the operator never caches them.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections import deque

from bench.cluster import MODEL_KEYS, PLATFORM, Cluster, CompanyRef, each
from bench.daemon import WORKERS
from bench.progress import CHILDREN, MANAGED_BY
from crewlet_operator import Resource
from reconcilers.company import desired_children
from reconcilers.plan import Apply, ClusterFacts, Observed

FACTS = ClusterFacts(gateway_api=False, operator_namespace=PLATFORM)
"""What the daemon learns at start-up on this control plane (no Gateway API)."""


def _token(company: CompanyRef) -> str:
    """As long as the operator's own token (43 URL-safe characters), fixed per company."""
    return hashlib.sha256(company.name.encode()).hexdigest()[:43]


def render(cluster: Cluster, company: CompanyRef) -> list[Apply]:
    """The children the operator applies for ``company`` on its first reconcile."""
    owner = company.manifest()
    owner["metadata"] |= {"uid": str(uuid.uuid4()), "generation": 1}
    return desired_children(
        owner,
        cluster.classes[company.class_name],
        Observed(secrets={(PLATFORM, MODEL_KEYS): cluster.model_keys}),
        FACTS,
        token_factory=lambda: _token(company),
    )


async def apply_all(cluster: Cluster, rendered: list[list[Apply]], workers: int) -> None:
    """Apply every company's children, ``workers`` companies at a time."""
    pending = deque(rendered)

    async def worker(_: int) -> None:
        while pending:
            for child in pending.popleft():
                await cluster.api.apply(child.resource, child.object)

    await each(range(workers), worker, workers)


async def measure(cluster: Cluster, phase: str, count: int) -> float:
    """Seconds the API server needs to apply ``count`` companies' children; cleans up after."""
    companies = cluster.allocate(phase, count)
    await cluster.create_namespaces(companies)
    rendered = [render(cluster, c) for c in companies]
    started = time.monotonic()
    await apply_all(cluster, rendered, WORKERS)
    elapsed = time.monotonic() - started
    await delete_children(cluster, sorted({c.namespace for c in companies}))
    return elapsed


async def delete_children(cluster: Cluster, namespaces: list[str]) -> None:
    """Delete the managed children in ``namespaces`` (no garbage collector runs here)."""
    work = [(ns, resource) for ns in namespaces for resource in CHILDREN]

    async def delete(item: tuple[str, Resource]) -> None:
        ns, resource = item
        await cluster.api.request(
            "DELETE", resource.path(ns), query={"labelSelector": MANAGED_BY}
        )

    await each(work, delete, 16)
