"""The local control plane the figures run on, and the objects the bench itself creates there.

One control plane serves the whole run: etcd and kube-apiserver only, as no figure needs pods
and no controller-manager, scheduler or kwok then competes for the two cores; with
``BENCH_WORKLOADS=1`` (:data:`WORKLOADS`) those three run too, as ``make run`` has them, and
every StatefulSet's pods are created, scheduled and made Ready (on one node that takes
:data:`NODE_PODS`).
Companies share a handful of EngineClasses, each referencing one model key in a platform
Secret, as a real class does; they are spread ten to a namespace, in namespaces named after the
phase that created them, so that every burst is in fresh namespaces.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from crewlet_operator import (
    CUSTOM_RESOURCE_DEFINITION,
    NAMESPACE,
    POD,
    SECRET,
    AlreadyExistsError,
    Client,
    Resource,
)
from crewlet_operator.envtest import ControlPlane
from crewlet_operator.envtest.wait import eventually
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS
from crewlet_operator_daemon.plan import MANAGER_NAME

ROOT = Path(__file__).resolve().parent.parent
PLATFORM = "crewlet-platform"
"""The operator's namespace: its Lease, and the Secret the classes reference."""
IMAGE = "ghcr.io/crewlet/crewlet-operator/engine:v0.2.0"
CLASSES = ("bench-a", "bench-b", "bench-c")
MODEL_KEYS = "bench-model-keys"
COMPANIES_PER_NAMESPACE = 10
CREATE_CONCURRENCY = 16
"""Requests the bench keeps in flight when it creates namespaces and Companies."""
WORKLOADS = "BENCH_WORKLOADS"
"""Set to 1 to run the control plane with workloads (controller-manager, scheduler, kwok)."""
NODE_PODS = 100_000
"""Pods kwok's node takes with workloads: every pod the bench's Companies ask for, so that each
is scheduled and its status written as on a real cluster (a kubelet's default of 110 left most
of a burst's pods Pending, loading neither the scheduler nor the status writes)."""

Object = dict[str, Any]
T = TypeVar("T")


@dataclass(frozen=True)
class CompanyRef:
    """A Company the bench creates (or renders children for, in the floor)."""

    namespace: str
    name: str
    class_name: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def manifest(self) -> Object:
        return {
            "apiVersion": COMPANY.api_version,
            "kind": COMPANY.kind,
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {"className": self.class_name},
        }


def model_keys_manifest() -> Object:
    """The platform Secret every class takes its model key from."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": MODEL_KEYS, "namespace": PLATFORM},
        "type": "Opaque",
        "data": {"anthropic": base64.b64encode(b"sk-bench").decode()},
    }


def engine_class_manifest(class_name: str) -> Object:
    """One of the bench's EngineClasses: the engine image and one model key."""
    return {
        "apiVersion": ENGINE_CLASS.api_version,
        "kind": ENGINE_CLASS.kind,
        "metadata": {"name": class_name},
        "spec": {
            "engine": {"image": IMAGE},
            "modelKeys": [
                {
                    "name": "ANTHROPIC_API_KEY",
                    "secretRef": {"namespace": PLATFORM, "name": MODEL_KEYS, "key": "anthropic"},
                }
            ],
        },
    }


async def each(
    items: Iterable[T], work: Callable[[T], Awaitable[object]], concurrency: int
) -> None:
    """Run ``work`` on every item, ``concurrency`` at a time, in order of the items."""
    pending = iter(items)

    async def worker() -> None:
        for item in pending:
            await work(item)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


class Cluster:
    """The control plane, an admin client, the classes, and the names handed out so far."""

    def __init__(self, run_dir: Path, workloads: bool = False) -> None:
        self.plane = ControlPlane(run_dir / "envtest", workloads=workloads, node_pods=NODE_PODS)
        self.client: Client | None = None
        self.classes: dict[str, Object] = {}
        self.per_class: Counter[str] = Counter()
        """Companies created, by class."""
        self.model_keys: Object = {}
        self._serial = 0

    @property
    def api(self) -> Client:
        assert self.client is not None, "cluster not started"
        return self.client

    async def start(self) -> None:
        """Start the control plane, install the CRDs, create the platform and the classes."""
        await asyncio.to_thread(self.plane.start)
        # As the operator: the floor and the fills apply what it would, and it must find them
        # its own (its field manager's), with nothing to write.
        self.client = Client(self.plane.admin_config(), field_manager=MANAGER_NAME)
        await self._install_crds()
        await self.api.create(NAMESPACE, {"metadata": {"name": PLATFORM}})
        self.model_keys = await self.api.create(SECRET, model_keys_manifest())
        for class_name in CLASSES:
            self.classes[class_name] = await self.api.create(
                ENGINE_CLASS, engine_class_manifest(class_name)
            )

    async def stop(self) -> None:
        if self.client is not None:
            await self.client.close()
            self.client = None
        await asyncio.to_thread(self.plane.stop)

    async def _install_crds(self) -> None:
        crds = [
            yaml.safe_load(path.read_text())
            for path in sorted((ROOT / "manifests" / "crds").glob("*.yaml"))
        ]
        for crd in crds:
            await self.api.apply(CUSTOM_RESOURCE_DEFINITION, crd)

        async def served() -> bool:
            self.api.forget_discovery()
            kinds = (COMPANY, ENGINE_CLASS)
            return all([await self.api.is_served(k.api_version, k.kind) for k in kinds])

        await eventually(served, timeout=60, message="crewlet.ai CRDs served")

    def allocate(self, phase: str, count: int) -> list[CompanyRef]:
        """``count`` new Companies (not created yet), ten to a fresh namespace of ``phase``."""
        refs = []
        for i in range(count):
            self._serial += 1
            refs.append(
                CompanyRef(
                    namespace=f"{phase}-{i // COMPANIES_PER_NAMESPACE:04d}",
                    name=f"c{self._serial:05d}",
                    class_name=CLASSES[self._serial % len(CLASSES)],
                )
            )
        return refs

    async def create_namespaces(self, companies: Sequence[CompanyRef]) -> None:
        names = sorted({c.namespace for c in companies})

        async def create(name: str) -> None:
            with contextlib.suppress(AlreadyExistsError):  # a phase may grow more than once
                await self.api.create(NAMESPACE, {"metadata": {"name": name}})

        await each(names, create, CREATE_CONCURRENCY)

    async def create_company(
        self, company: CompanyRef, annotations: Mapping[str, str] | None = None
    ) -> Object:
        """Create it (with ``annotations``); return it as created (with its uid)."""
        manifest = company.manifest()
        if annotations:
            manifest["metadata"]["annotations"] = dict(annotations)
        created = await self.api.create(COMPANY, manifest)
        self.per_class[company.class_name] += 1
        return created

    async def create_companies(self, companies: Sequence[CompanyRef]) -> list[Object]:
        """Create them in one burst, ``CREATE_CONCURRENCY`` requests in flight."""
        created: list[Object] = []

        async def create(company: CompanyRef) -> None:
            created.append(await self.create_company(company))

        await each(companies, create, CREATE_CONCURRENCY)
        return created

    async def pods_by_phase(self) -> dict[str, int]:
        """Every pod's phase, counted (with workloads: how much of a burst runs, and how much
        waits for a node)."""
        pods = await self.api.list(POD)
        return dict(Counter(str((p.get("status") or {}).get("phase")) for p in pods.items))

    async def remove(self, companies: Sequence[CompanyRef], kinds: Sequence[Resource]) -> None:
        """Delete every object of ``kinds`` in the companies' namespaces (list their Companies
        last), then the namespaces themselves, and compact etcd."""

        async def remove(name: str) -> None:
            for resource in kinds:
                await self.api.request("DELETE", resource.path(name))
            await self.api.delete(NAMESPACE, name)
            # The namespace controller does not run here: release the namespace ourselves.
            await self.api.request(
                "PUT",
                NAMESPACE.path(name=name, subresource="finalize"),
                body={
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": name},
                    "spec": {"finalizers": []},
                },
            )

        await each(sorted({c.namespace for c in companies}), remove, CREATE_CONCURRENCY)
        self.per_class.subtract(c.class_name for c in companies)
        await asyncio.to_thread(self.plane.etcd_compact)
