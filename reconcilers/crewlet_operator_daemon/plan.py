"""The contract between the pure Crewlet reconcile function and the controller around it.

The controller gathers the inputs from its caches (no request is made to build them), calls
:func:`crewlet_operator_daemon.company.reconcile`, and executes the :class:`Plan` it returns:
applies, deletes, the status write and the claim annotation. The function does no I/O, so every
decision it makes is unit-tested on plain dicts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from crewlet_operator import (
    HTTP_ROUTE,
    INGRESS,
    NETWORK_POLICY,
    POD_DISRUPTION_BUDGET,
    SECRET,
    SERVICE,
    SERVICE_ACCOUNT,
    STATEFUL_SET,
    Resource,
)
from crewlet_operator import KubeObject as Object

MANAGER_NAME = "crewlet-operator"
"""The operator's manager's name (``ManagerOptions.name``): the field manager it applies
every child and status as, and its Lease, ``crewlet-operator-leader``. Fixed for good: an
install's children are its own by their fields applied under this name, so another name would
orphan them on upgrade, and the chart's RBAC and docs name the Lease."""

CHILD_RESOURCES = (
    SERVICE_ACCOUNT,
    SECRET,
    STATEFUL_SET,
    SERVICE,
    POD_DISRUPTION_BUDGET,
    NETWORK_POLICY,
    INGRESS,
)
"""The kinds a Company owns without the Gateway API. Not a PersistentVolumeClaim: the data
claim belongs to the StatefulSet's template and outlives the Company."""
GATEWAY_CHILD_RESOURCES = (HTTP_ROUTE,)
"""The kinds a Company owns besides when the Gateway API is served."""


@dataclass(frozen=True)
class ClusterFacts:
    """What the operator learnt about the cluster at start-up, and who it writes as there."""

    gateway_api: bool
    """Whether gateway.networking.k8s.io/v1 HTTPRoute was served when the operator started."""
    operator_namespace: str
    """The operator's own namespace (admitted to the engine's API port)."""
    field_manager: str = MANAGER_NAME
    """The field manager the operator applies as: a child is compared with what that manager
    owns of it (the manager's ``field_manager``)."""
    shard_labels: tuple[tuple[str, str], ...] = ()
    """Labels every child of the company decided carries besides the operator's: with sharding,
    its slot label (``Manager.shard_labels_for``), which the caches of children of the replica
    holding it select. The controller sets it for each company; empty at start."""


def child_resources(facts: ClusterFacts) -> list[Resource]:
    """The kinds a Company owns; HTTPRoutes only when the Gateway API is served."""
    if facts.gateway_api:
        return [*CHILD_RESOURCES, *GATEWAY_CHILD_RESOURCES]
    return list(CHILD_RESOURCES)


@dataclass(frozen=True)
class Observed:
    """The current state, read from the caches.

    ``children`` maps ``(kind, name)`` to the existing object in the company's namespace:
    objects labelled as the company's, and any the company controls whose labels were taken
    off. ``namesakes`` maps ``(kind, name)`` to an object that holds the name of one of the
    company's children without being labelled as the company's (its metadata alone): a
    tenant's own object, or another company's. ``secrets`` maps ``(namespace, name)`` of every
    Secret the class references to the Secret, or None when it does not exist;
    ``unreadable_secrets`` maps those the operator may not read to why (the API server's
    answer). ``data_claim`` is the data StatefulSet's volume claim (``data-<company>-data-0``)
    when it exists. ``hostname_holder`` is the Company (``namespace/name``) that holds the
    webhook hostname this company asks for, when another one does; ``hostname_route`` the
    route of another workload (``Kind namespace/name``) that serves it where the company's
    would attach, when one does and the company does not route it yet. ``rejection`` is what the
    API server answered when it refused a child rendered for the company (a dry run or a
    write), when one did (the operator takes that refusal from the plan it refused:
    :attr:`Plan.rejected`).
    """

    children: dict[tuple[str, str], Object] = field(default_factory=dict)
    namesakes: dict[tuple[str, str], Object] = field(default_factory=dict)
    secrets: dict[tuple[str, str], Object | None] = field(default_factory=dict)
    unreadable_secrets: dict[tuple[str, str], str] = field(default_factory=dict)
    data_claim: Object | None = None
    hostname_holder: str | None = None
    hostname_route: str | None = None
    rejection: str | None = None


@dataclass(frozen=True)
class Apply:
    """Server-side apply ``object`` (a complete desired object of ``resource``) onto
    ``existing``, the company's child as observed, and onto nothing else: with ``existing``
    None the apply only creates (:meth:`~crewlet_operator.kube.client.Client.apply_owned`)."""

    resource: Resource
    object: Object
    existing: Object | None = None


@dataclass(frozen=True)
class Delete:
    """Delete a child that is no longer wanted (never a PersistentVolumeClaim)."""

    resource: Resource
    namespace: str
    name: str
    uid: str | None = None


@dataclass
class Plan:
    """What to write. Empty when observed already equals desired."""

    applies: list[Apply] = field(default_factory=list)
    deletes: list[Delete] = field(default_factory=list)
    status: Object | None = None
    """The Company's desired ``status`` when it differs from the observed one, else None."""
    claim_annotations: dict[str, str] = field(default_factory=dict)
    """Annotations to set on the data claim (the engine-version high-water mark)."""
    complete: bool = True
    """Whether the applies may be written: False when a new company's config files were left
    out (:func:`crewlet_operator_daemon.company.reconcile` with ``render_files=False``); its status
    is the complete plan's all the same."""
    rejected: Callable[[str], Plan] | None = field(default=None, compare=False, repr=False)
    """What the plan becomes when the API server refuses one of its children, from its answer:
    the company refused (``InvalidClass``), nothing applied; what
    :func:`~crewlet_operator_daemon.company.reconcile` decides when
    :attr:`Observed.rejection` holds that answer, without deciding again. None when the plan
    applies nothing (nothing to refuse)."""

    @property
    def empty(self) -> bool:
        """Nothing to write."""
        return not (self.applies or self.deletes or self.status or self.claim_annotations)
