"""crewlet-operator: a controller-runtime style reconciler library for Python.

Everything a controller author needs is importable from here::

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

Every name below is importable from this package. The pieces, one concept a module (as
controller-runtime has one package a concept): ``kube`` (client, resources, config), ``cache``
(informers), ``workqueue``, ``controller`` (controller and builder), ``manager``,
``checkpoint`` (restarts that redo nothing), ``leader``, ``sharding`` (objects spread over
every replica), ``serving``, ``conditions``, ``owners``, ``diff``, ``predicate``, ``writes`` (a
controller's own writes), ``events``, ``rbac`` (the RBAC the controllers declare),
``metrics``, ``envtest`` (a real local control plane for tests).
"""

from crewlet_operator.cache import (
    Cache,
    Compact,
    Decoded,
    EventHandler,
    Informer,
    InformerOptions,
    ListStrategy,
    MetadataOnly,
    Pages,
    Storage,
    Store,
    Stream,
)
from crewlet_operator.cache.named import NamedObjects
from crewlet_operator.checkpoint import (
    Checkpoint,
    CheckpointLines,
    CheckpointReads,
    RestartCheckpoint,
)
from crewlet_operator.conditions import (
    Condition,
    condition,
    find_condition,
    is_condition_true,
    remove_condition,
    set_condition,
)
from crewlet_operator.controller import Builder, Controller, FairnessKey, by_namespace
from crewlet_operator.diff import hash_of, needs_apply, parse_quantity, semantic_subset
from crewlet_operator.errors import (
    AlreadyExistsError,
    AlreadyOwnedError,
    ApiError,
    BadRequestError,
    BinaryNotFoundError,
    ConflictError,
    CrewletError,
    ForbiddenError,
    GoneError,
    GoUnavailableError,
    HealthCheckFailed,
    InstallError,
    InvalidError,
    LeadershipLostError,
    MetadataOnlyError,
    NoInformerError,
    NotFoundError,
    NotOwnedError,
    NotServedError,
    ProcessFailedError,
    QueueShutDown,
    SchemaError,
    ServerError,
    TerminalError,
    TooManyRequestsError,
    TransportError,
    UnauthorizedError,
)
from crewlet_operator.events import EventRecorder
from crewlet_operator.fieldset import (
    apply_would_change,
    keep_owned_fields_of,
)
from crewlet_operator.finalizer import Finalizer
from crewlet_operator.handler import (
    EnqueueHandler,
    MapFunc,
    request_for_object,
    requests_for_owner,
)
from crewlet_operator.kube.client import Client, ObjectList, RawObjectList, WatchEvent
from crewlet_operator.kube.config import RestConfig
from crewlet_operator.kube.mapper import RESTMapper
from crewlet_operator.kube.ownership import is_ours
from crewlet_operator.kube.params import ListParams, Scope, WatchParams
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
from crewlet_operator.kube.retry import RetryPolicy
from crewlet_operator.label_selector import validate_label_selector
from crewlet_operator.leader import LeaderElectionConfig, LeaderElector, default_identity
from crewlet_operator.logging import configure_logging
from crewlet_operator.manager import (
    Manager,
    ManagerOptions,
    Runnable,
    default_namespace,
)
from crewlet_operator.metrics import REGISTRY as _METRICS
from crewlet_operator.objects import (
    MAX_LABEL_LENGTH,
    MAX_NAME_LENGTH,
    KubeObject,
    generation,
    is_being_deleted,
    labels,
    micro_time,
    name,
    namespace,
    namespaced_key,
    object_key,
    resource_version,
    resource_version_at_most,
    resource_version_before,
    uid,
)
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
    label_selector_matches,
    new_predicate_funcs,
    not_,
    or_,
)
from crewlet_operator.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_controller_rate_limiter,
)
from crewlet_operator.rbac import PolicyRule
from crewlet_operator.reconcile import ReconcileFunc, Reconciler, Request, Result
from crewlet_operator.serving import HealthServer, MetricsServer
from crewlet_operator.sharding import Sharding
from crewlet_operator.workqueue import (
    AGING_INTERVAL,
    HIGH_PRIORITY,
    LOW_PRIORITY,
    NORMAL_PRIORITY,
    FairQueue,
)
from crewlet_operator.writes import OwnStatusWrites, OwnWrites, Write

METRICS_REGISTRY = _METRICS
"""The registry of every metric the library exports (what the manager serves on ``/metrics``):
register a controller's own collectors here to serve them beside it, as controller-runtime's
``metrics.Registry``."""

__all__ = [
    "AGING_INTERVAL",
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
    "MAX_LABEL_LENGTH",
    "MAX_NAME_LENGTH",
    "METRICS_REGISTRY",
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
    "BadRequestError",
    "BinaryNotFoundError",
    "BucketRateLimiter",
    "Builder",
    "Cache",
    "Checkpoint",
    "CheckpointLines",
    "CheckpointReads",
    "Client",
    "Compact",
    "Condition",
    "ConflictError",
    "Controller",
    "CrewletError",
    "Decoded",
    "EnqueueHandler",
    "EventHandler",
    "EventRecorder",
    "FairQueue",
    "FairnessKey",
    "Finalizer",
    "ForbiddenError",
    "GenerationChanged",
    "GoUnavailableError",
    "GoneError",
    "HealthCheckFailed",
    "HealthServer",
    "Informer",
    "InformerOptions",
    "InstallError",
    "InvalidError",
    "ItemExponentialFailureRateLimiter",
    "KubeObject",
    "LabelChanged",
    "LabelSelectorPredicate",
    "LeaderElectionConfig",
    "LeaderElector",
    "LeadershipLostError",
    "ListParams",
    "ListStrategy",
    "Manager",
    "ManagerOptions",
    "MapFunc",
    "MaxOfRateLimiter",
    "MetadataOnly",
    "MetadataOnlyError",
    "MetricsServer",
    "NamedObjects",
    "NoInformerError",
    "NotFoundError",
    "NotOwnedError",
    "NotServedError",
    "ObjectList",
    "OwnStatusWrites",
    "OwnWrites",
    "Pages",
    "PolicyRule",
    "Predicate",
    "ProcessFailedError",
    "QueueShutDown",
    "RESTMapper",
    "RateLimiter",
    "RawObjectList",
    "ReconcileFunc",
    "Reconciler",
    "Request",
    "Resource",
    "ResourceVersionChanged",
    "RestConfig",
    "RestartCheckpoint",
    "Result",
    "RetryPolicy",
    "Runnable",
    "SchemaError",
    "Scope",
    "ServerError",
    "Sharding",
    "Storage",
    "Store",
    "Stream",
    "TerminalError",
    "TooManyRequestsError",
    "TransportError",
    "UnauthorizedError",
    "WatchEvent",
    "WatchParams",
    "Write",
    "add_finalizer",
    "and_",
    "apply_would_change",
    "by_namespace",
    "condition",
    "configure_logging",
    "controller_reference",
    "default_controller_rate_limiter",
    "default_identity",
    "default_namespace",
    "find_condition",
    "generation",
    "get_controller_of",
    "has_finalizer",
    "hash_of",
    "is_being_deleted",
    "is_condition_true",
    "is_controlled_by",
    "is_ours",
    "keep_owned_fields_of",
    "label_selector_matches",
    "labels",
    "micro_time",
    "name",
    "namespace",
    "namespaced_key",
    "needs_apply",
    "new_predicate_funcs",
    "not_",
    "object_key",
    "or_",
    "parse_quantity",
    "remove_condition",
    "remove_finalizer",
    "request_for_object",
    "requests_for_owner",
    "resource_version",
    "resource_version_at_most",
    "resource_version_before",
    "semantic_subset",
    "set_condition",
    "set_controller_reference",
    "uid",
    "validate_label_selector",
]
