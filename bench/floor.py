"""The floor: what the API server itself needs to apply Companies' children.

A plain script applies exactly the objects the operator would write, rendered by the
reconciler's own :func:`~crewlet_operator_daemon.company.desired_children` for Companies that exist
(so byte-identical, owner references included), through the same client, ``workers`` companies at
a time, each company's children in order. Nothing else: no cache, no diff, no status.

The same script builds large worlds quickly (:func:`fill`): it applies the children, then the
status the reconciler decides for them, so that the operator finds nothing to write when it
starts (every operator start reports the writes it made, which checks this).
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from bench.cluster import MODEL_KEYS, PLATFORM, Cluster, each
from bench.progress import Progress
from crewlet_operator import condition, set_condition
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS
from crewlet_operator_daemon.company import desired_children, reconcile
from crewlet_operator_daemon.plan import Apply, ClusterFacts, Observed

FACTS = ClusterFacts(gateway_api=False, operator_namespace=PLATFORM)
"""What the daemon learns at start-up on this control plane (no Gateway API)."""

Object = dict[str, Any]


def _token(company: Object) -> Callable[[], str]:
    """As long as the operator's own token (43 URL-safe characters), fixed per company."""
    return lambda: hashlib.sha256(company["metadata"]["uid"].encode()).hexdigest()[:43]


def _observed(cluster: Cluster, children: Sequence[Object] = ()) -> Observed:
    return Observed(
        children={(c["kind"], c["metadata"]["name"]): c for c in children},
        secrets={(PLATFORM, MODEL_KEYS): cluster.model_keys},
    )


def render(cluster: Cluster, company: Object) -> list[Apply]:
    """The children the operator applies for ``company`` (as created) on its first reconcile."""
    return desired_children(
        company,
        cluster.classes[company["spec"]["className"]],
        _observed(cluster),
        FACTS,
        token_factory=_token(company),
    )


def verdict_status(cluster: Cluster, company: Object) -> Object:
    """The status the operator writes first for ``company`` as created, before any child: its
    verdict (the reconciler's decision with nothing observed)."""
    status = reconcile(
        company, cluster.classes[company["spec"]["className"]], {}, _observed(cluster), FACTS
    ).status
    if status is None:
        raise RuntimeError(f"the reconciler decides no status for {company['metadata']['name']}")
    return status


async def _apply(cluster: Cluster, children: list[Apply]) -> list[Object]:
    return [await cluster.api.apply(child.resource, child.object) for child in children]


async def timed(
    cluster: Cluster, companies: Sequence[Object], workers: int, cpu: Callable[[], float]
) -> tuple[float, float]:
    """Seconds until every child of the companies, rendered before the clock starts, has been
    applied and seen by the same observer that follows the operator's bursts
    (:class:`~bench.progress.Progress`: its watches load the API server and share the machine
    alike), and the CPU seconds ``cpu`` counted meanwhile; then (off the clock) their status."""
    rendered = deque((c, render(cluster, c)) for c in companies)
    applied: list[tuple[Object, list[Object]]] = []

    async def worker(_: int) -> None:
        while rendered:
            company, children = rendered.popleft()
            applied.append((company, await _apply(cluster, children)))

    keys = [(c["metadata"]["namespace"], c["metadata"]["name"]) for c in companies]
    async with Progress(cluster.api, keys, accepted=False) as progress:
        started, cpu_started = time.monotonic(), cpu()
        await each(range(workers), worker, workers)
        await progress.wait(timeout=600)
        elapsed, used = progress.last_converged() - started, cpu() - cpu_started
    statuses = Statuses(cluster)
    await each(applied, lambda item: statuses.apply(*item), workers)
    await statuses.count_classes()
    return elapsed, used


async def fill(cluster: Cluster, companies: Sequence[Object], workers: int) -> None:
    """Apply the companies' children and status, rendering each just before it is applied."""
    statuses = Statuses(cluster)

    async def one(company: Object) -> None:
        await statuses.apply(company, await _apply(cluster, render(cluster, company)))

    await each(companies, one, workers)
    await statuses.count_classes()


class Statuses:
    """Writes the status the reconciler decides for a company whose children exist, and the
    classes' status that counts them, as the operator would.

    A company's status is decided once per class, from the first company's children as the API
    server returned them (every company of a class has the same status), and that reconcile
    must find nothing else to write: proof that the floor's children are the operator's.
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._by_class: dict[str, Object] = {}

    def _decide(self, company: Object, children: list[Object]) -> Object:
        class_name = company["spec"]["className"]
        found = self._by_class.get(class_name)
        if found is not None:
            return found
        plan = reconcile(
            company, self.cluster.classes[class_name], {}, _observed(self.cluster, children), FACTS
        )
        if plan.applies or plan.deletes or plan.status is None:
            wrong = [f"{a.resource.kind} {a.object['metadata']['name']}" for a in plan.applies]
            raise RuntimeError(f"the operator would still write {wrong or 'no status'}")
        self._by_class[class_name] = plan.status
        return plan.status

    async def apply(self, company: Object, children: list[Object]) -> None:
        meta = company["metadata"]
        await self.cluster.api.apply_status(
            COMPANY,
            {
                "apiVersion": COMPANY.api_version,
                "kind": COMPANY.kind,
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "status": self._decide(company, children),
            },
        )

    async def count_classes(self) -> None:
        """The classes' ``status.companies``, as the EngineClass controller writes it."""
        for class_name in self.cluster.classes:
            engine_class = await self.cluster.api.get(ENGINE_CLASS, class_name)
            resolved = condition(
                "ReferencesResolved",
                True,
                "Resolved",
                "every referenced Secret key exists",
                observed_generation=engine_class["metadata"].get("generation"),
            )
            old = (engine_class.get("status") or {}).get("conditions") or []
            await self.cluster.api.apply_status(
                ENGINE_CLASS,
                {
                    "apiVersion": ENGINE_CLASS.api_version,
                    "kind": ENGINE_CLASS.kind,
                    "metadata": {"name": class_name},
                    "status": {
                        "companies": self.cluster.per_class[class_name],
                        "conditions": set_condition(old, resolved),
                    },
                },
            )
