"""The floor: what the API server itself needs to apply Companies' children.

A plain script applies exactly the objects the operator would write, rendered by the
reconciler's own :func:`~reconcilers.company.desired_children` for Companies that exist (so
byte-identical, owner references included), through the same client, ``workers`` companies at
a time, each company's children in order. Nothing else: no cache, no diff, no status.

The same script pre-creates children when the bench needs many converged Companies quickly
(the operator then adopts them, writing only their status): see :meth:`Session.grow`.
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from bench.cluster import MODEL_KEYS, PLATFORM, Cluster, each
from reconcilers.company import desired_children
from reconcilers.plan import Apply, ClusterFacts, Observed

FACTS = ClusterFacts(gateway_api=False, operator_namespace=PLATFORM)
"""What the daemon learns at start-up on this control plane (no Gateway API)."""

Object = dict[str, Any]


def _token(company: Object) -> Callable[[], str]:
    """As long as the operator's own token (43 URL-safe characters), fixed per company."""
    return lambda: hashlib.sha256(company["metadata"]["uid"].encode()).hexdigest()[:43]


def render(cluster: Cluster, company: Object) -> list[Apply]:
    """The children the operator applies for ``company`` (as created) on its first reconcile."""
    return desired_children(
        company,
        cluster.classes[company["spec"]["className"]],
        Observed(secrets={(PLATFORM, MODEL_KEYS): cluster.model_keys}),
        FACTS,
        token_factory=_token(company),
    )


async def _apply(cluster: Cluster, children: list[Apply]) -> None:
    for child in children:
        await cluster.api.apply(child.resource, child.object)


async def timed(cluster: Cluster, companies: Sequence[Object], workers: int) -> float:
    """Seconds to apply the companies' children, rendered before the clock starts."""
    rendered = deque(render(cluster, c) for c in companies)

    async def worker(_: int) -> None:
        while rendered:
            await _apply(cluster, rendered.popleft())

    started = time.monotonic()
    await each(range(workers), worker, workers)
    return time.monotonic() - started


async def fill(cluster: Cluster, companies: Sequence[Object], workers: int) -> None:
    """Apply the companies' children, rendering each just before it is applied."""
    await each(companies, lambda c: _apply(cluster, render(cluster, c)), workers)
