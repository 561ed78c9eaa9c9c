"""crewlet-operator: a controller-runtime style reconciler library for Python.

What a controller author writes every day is importable from here::

    from crewlet_operator import Client, Manager, Request, Result, Resource

Guides, each on the page of the module it describes:

- The client, :mod:`crewlet_operator.kube.client`: how a :class:`Client` is made (and its
  field manager set), that it must be closed (an async context manager), and what each call
  returns.
- The manager, :mod:`crewlet_operator.manager`: :meth:`Manager.run`, :attr:`Manager.started`,
  :meth:`Manager.stop`, the order of a graceful shutdown, leader election.
- Errors, :mod:`crewlet_operator.errors`: the one hierarchy, and what to catch for what.
- The CRD generator, :mod:`crewlet_operator.crd`: CRDs from pydantic models, with
  constraints, CEL rules, printer columns and their versions.
- The test harness, :mod:`crewlet_operator.testing`, on envtest (:mod:`crewlet_operator.envtest`
  and its pytest plugin, :mod:`crewlet_operator.envtest.pytest_plugin`).
- RBAC from the controllers' declarations, :mod:`crewlet_operator.rbac`.

This package holds the default path through a controller: the manager and the builder, the
reconcile types, the client and the built-in kinds, the cache's options, predicates, handlers,
ownership and finalizers, conditions, events, logging, the errors a reconcile meets, and the
options of the opt-in features (sharding, restart checkpoints, RBAC rules, health checks,
individually watched objects). Every other name is imported from the module that defines it,
one concept a module (as controller-runtime has one package a concept): ``objects`` (accessors
such as ``name`` and ``labels``), ``diff`` and ``fieldset`` (what an apply would change),
``conditions``, ``predicate``, ``handler``, ``kube`` (``ListParams``, ``WatchParams``,
``RetryPolicy``), ``kube.client`` (what the calls return), ``kube.mapper``, ``cache``
(informers, stores, the cluster view), ``workqueue``, ``ratelimit``, ``controller``,
``manager``, ``checkpoint``, ``leader``, ``writes`` (a controller's own writes), ``serving``,
``metrics`` (its ``REGISTRY``), ``tracing`` (a span per reconcile, OpenTelemetry's
environment), ``errors`` (the rest of the hierarchy), ``sharding``, ``rbac``,
``envtest`` (a real local control plane for tests).
"""

from crewlet_operator.cache import (
    Cache,
    Compact,
    Decoded,
    InformerOptions,
    MetadataOnly,
    Pages,
    Stream,
)
from crewlet_operator.cache.named import NamedObjects
from crewlet_operator.checkpoint import CheckpointReads, RestartCheckpoint
from crewlet_operator.conditions import (
    condition,
    find_condition,
    is_condition_true,
    set_condition,
)
from crewlet_operator.controller import Builder, Controller
from crewlet_operator.errors import (
    AlreadyExistsError,
    AlreadyOwnedError,
    ApiError,
    ConflictError,
    CrewletError,
    ForbiddenError,
    HealthCheckFailed,
    InvalidError,
    LeadershipLostError,
    NotFoundError,
    NotOwnedError,
    TerminalError,
    TransportError,
)
from crewlet_operator.events import EventRecorder
from crewlet_operator.finalizer import Finalizer
from crewlet_operator.handler import MapFunc, request_for_object, requests_for_owner
from crewlet_operator.kube.client import Client
from crewlet_operator.kube.config import RestConfig
from crewlet_operator.kube.params import Scope
from crewlet_operator.kube.resources import (
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
    CONFIG_MAP,
    CRON_JOB,
    CUSTOM_RESOURCE_DEFINITION,
    DAEMON_SET,
    DEPLOYMENT,
    ENDPOINT_SLICE,
    EVENT,
    HORIZONTAL_POD_AUTOSCALER,
    HTTP_ROUTE,
    INGRESS,
    JOB,
    LEASE,
    LIMIT_RANGE,
    NAMESPACE,
    NETWORK_POLICY,
    NODE,
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    POD,
    POD_DISRUPTION_BUDGET,
    PRIORITY_CLASS,
    REPLICA_SET,
    RESOURCE_QUOTA,
    ROLE,
    ROLE_BINDING,
    SECRET,
    SERVICE,
    SERVICE_ACCOUNT,
    STATEFUL_SET,
    STORAGE_CLASS,
    VALIDATING_ADMISSION_POLICY,
    VALIDATING_ADMISSION_POLICY_BINDING,
    Resource,
)
from crewlet_operator.leader import default_identity
from crewlet_operator.logging import configure_logging
from crewlet_operator.manager import Manager, ManagerOptions, Runnable
from crewlet_operator.objects import KubeObject
from crewlet_operator.owners import (
    add_finalizer,
    controller_reference,
    get_controller_of,
    has_finalizer,
    is_controlled_by,
    remove_finalizer,
    set_controller_reference,
)
from crewlet_operator.predicate import (
    AnnotationChanged,
    GenerationChanged,
    LabelChanged,
    LabelSelectorPredicate,
    Predicate,
    ResourceVersionChanged,
    and_,
    new_predicate_funcs,
    not_,
    or_,
)
from crewlet_operator.rbac import PolicyRule
from crewlet_operator.reconcile import ReconcileFunc, Reconciler, Request, Result
from crewlet_operator.sharding import Sharding
from crewlet_operator.workqueue import HIGH_PRIORITY, LOW_PRIORITY, NORMAL_PRIORITY

__all__ = [
    "CLUSTER_ROLE",
    "CLUSTER_ROLE_BINDING",
    "CONFIG_MAP",
    "CRON_JOB",
    "CUSTOM_RESOURCE_DEFINITION",
    "DAEMON_SET",
    "DEPLOYMENT",
    "ENDPOINT_SLICE",
    "EVENT",
    "HIGH_PRIORITY",
    "HORIZONTAL_POD_AUTOSCALER",
    "HTTP_ROUTE",
    "INGRESS",
    "JOB",
    "LEASE",
    "LIMIT_RANGE",
    "LOW_PRIORITY",
    "NAMESPACE",
    "NETWORK_POLICY",
    "NODE",
    "NORMAL_PRIORITY",
    "PERSISTENT_VOLUME",
    "PERSISTENT_VOLUME_CLAIM",
    "POD",
    "POD_DISRUPTION_BUDGET",
    "PRIORITY_CLASS",
    "REPLICA_SET",
    "RESOURCE_QUOTA",
    "ROLE",
    "ROLE_BINDING",
    "SECRET",
    "SERVICE",
    "SERVICE_ACCOUNT",
    "STATEFUL_SET",
    "STORAGE_CLASS",
    "VALIDATING_ADMISSION_POLICY",
    "VALIDATING_ADMISSION_POLICY_BINDING",
    "AlreadyExistsError",
    "AlreadyOwnedError",
    "AnnotationChanged",
    "ApiError",
    "Builder",
    "Cache",
    "CheckpointReads",
    "Client",
    "Compact",
    "ConflictError",
    "Controller",
    "CrewletError",
    "Decoded",
    "EventRecorder",
    "Finalizer",
    "ForbiddenError",
    "GenerationChanged",
    "HealthCheckFailed",
    "InformerOptions",
    "InvalidError",
    "KubeObject",
    "LabelChanged",
    "LabelSelectorPredicate",
    "LeadershipLostError",
    "Manager",
    "ManagerOptions",
    "MapFunc",
    "MetadataOnly",
    "NamedObjects",
    "NotFoundError",
    "NotOwnedError",
    "Pages",
    "PolicyRule",
    "Predicate",
    "ReconcileFunc",
    "Reconciler",
    "Request",
    "Resource",
    "ResourceVersionChanged",
    "RestConfig",
    "RestartCheckpoint",
    "Result",
    "Runnable",
    "Scope",
    "Sharding",
    "Stream",
    "TerminalError",
    "TransportError",
    "add_finalizer",
    "and_",
    "condition",
    "configure_logging",
    "controller_reference",
    "default_identity",
    "find_condition",
    "get_controller_of",
    "has_finalizer",
    "is_condition_true",
    "is_controlled_by",
    "new_predicate_funcs",
    "not_",
    "or_",
    "remove_finalizer",
    "request_for_object",
    "requests_for_owner",
    "set_condition",
    "set_controller_reference",
]
