"""Resources: what the client needs to build a URL for a kind (group, version, plural, scope)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True)
class Resource:
    """A kind as served by the API server.

    For example ``Resource("apps", "v1", "StatefulSet", "statefulsets")``.

    Instances are cheap values; the common built-in kinds are defined below, and
    :class:`~crewlet_operator.kube.mapper.RESTMapper` finds any other served kind by its group
    and kind, as the API server's discovery documents it.
    """

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """``group/version`` (just ``version`` for the core group)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """``resource.group`` as Kubernetes prints it (``statefulsets.apps``)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def group_kind(self) -> str:
        """``Kind.group`` as Kubernetes prints it (``StatefulSet.apps``)."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The URL path of the collection, or of one object (and its subresource)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


# The core and built-in kinds the library and the operator use.
NAMESPACE = Resource("", "v1", "Namespace", "namespaces", namespaced=False)
"""Namespace, v1, cluster-scoped."""
NODE = Resource("", "v1", "Node", "nodes", namespaced=False)
"""Node, v1, cluster-scoped."""
POD = Resource("", "v1", "Pod", "pods")
"""Pod, v1, namespaced."""
CONFIG_MAP = Resource("", "v1", "ConfigMap", "configmaps")
"""ConfigMap, v1, namespaced."""
SECRET = Resource("", "v1", "Secret", "secrets")
"""Secret, v1, namespaced."""
SERVICE = Resource("", "v1", "Service", "services")
"""Service, v1, namespaced."""
SERVICE_ACCOUNT = Resource("", "v1", "ServiceAccount", "serviceaccounts")
"""ServiceAccount, v1, namespaced."""
PERSISTENT_VOLUME_CLAIM = Resource("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims")
"""PersistentVolumeClaim, v1, namespaced."""
RESOURCE_QUOTA = Resource("", "v1", "ResourceQuota", "resourcequotas")
"""ResourceQuota, v1, namespaced."""
LIMIT_RANGE = Resource("", "v1", "LimitRange", "limitranges")
"""LimitRange, v1, namespaced."""
PERSISTENT_VOLUME = Resource("", "v1", "PersistentVolume", "persistentvolumes", namespaced=False)
"""PersistentVolume, v1, cluster-scoped."""
ENDPOINT_SLICE = Resource("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices")
"""EndpointSlice, discovery.k8s.io/v1, namespaced."""
STATEFUL_SET = Resource("apps", "v1", "StatefulSet", "statefulsets")
"""StatefulSet, apps/v1, namespaced."""
DEPLOYMENT = Resource("apps", "v1", "Deployment", "deployments")
"""Deployment, apps/v1, namespaced."""
REPLICA_SET = Resource("apps", "v1", "ReplicaSet", "replicasets")
"""ReplicaSet, apps/v1, namespaced."""
DAEMON_SET = Resource("apps", "v1", "DaemonSet", "daemonsets")
"""DaemonSet, apps/v1, namespaced."""
JOB = Resource("batch", "v1", "Job", "jobs")
"""Job, batch/v1, namespaced."""
CRON_JOB = Resource("batch", "v1", "CronJob", "cronjobs")
"""CronJob, batch/v1, namespaced."""
HORIZONTAL_POD_AUTOSCALER = Resource(
    "autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers"
)
"""HorizontalPodAutoscaler, autoscaling/v2, namespaced."""
STORAGE_CLASS = Resource("storage.k8s.io", "v1", "StorageClass", "storageclasses", namespaced=False)
"""StorageClass, storage.k8s.io/v1, cluster-scoped."""
PRIORITY_CLASS = Resource(
    "scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", namespaced=False
)
"""PriorityClass, scheduling.k8s.io/v1, cluster-scoped."""
FLOW_SCHEMA = Resource(
    "flowcontrol.apiserver.k8s.io", "v1", "FlowSchema", "flowschemas", namespaced=False
)
"""FlowSchema, flowcontrol.apiserver.k8s.io/v1, cluster-scoped."""
PRIORITY_LEVEL_CONFIGURATION = Resource(
    "flowcontrol.apiserver.k8s.io",
    "v1",
    "PriorityLevelConfiguration",
    "prioritylevelconfigurations",
    namespaced=False,
)
"""PriorityLevelConfiguration, flowcontrol.apiserver.k8s.io/v1, cluster-scoped."""
POD_DISRUPTION_BUDGET = Resource("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets")
"""PodDisruptionBudget, policy/v1, namespaced."""
NETWORK_POLICY = Resource("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies")
"""NetworkPolicy, networking.k8s.io/v1, namespaced."""
INGRESS = Resource("networking.k8s.io", "v1", "Ingress", "ingresses")
"""Ingress, networking.k8s.io/v1, namespaced."""
HTTP_ROUTE = Resource("gateway.networking.k8s.io", "v1", "HTTPRoute", "httproutes")
"""HTTPRoute, gateway.networking.k8s.io/v1, namespaced."""
LEASE = Resource("coordination.k8s.io", "v1", "Lease", "leases")
"""Lease, coordination.k8s.io/v1, namespaced."""
EVENT = Resource("events.k8s.io", "v1", "Event", "events")
"""Event, events.k8s.io/v1, namespaced."""
CUSTOM_RESOURCE_DEFINITION = Resource(
    "apiextensions.k8s.io",
    "v1",
    "CustomResourceDefinition",
    "customresourcedefinitions",
    namespaced=False,
)
"""CustomResourceDefinition, apiextensions.k8s.io/v1, cluster-scoped."""
VALIDATING_ADMISSION_POLICY = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "ValidatingAdmissionPolicy",
    "validatingadmissionpolicies",
    namespaced=False,
)
"""ValidatingAdmissionPolicy, admissionregistration.k8s.io/v1, cluster-scoped."""
VALIDATING_ADMISSION_POLICY_BINDING = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "ValidatingAdmissionPolicyBinding",
    "validatingadmissionpolicybindings",
    namespaced=False,
)
"""ValidatingAdmissionPolicyBinding, admissionregistration.k8s.io/v1, cluster-scoped."""
ROLE = Resource("rbac.authorization.k8s.io", "v1", "Role", "roles")
"""Role, rbac.authorization.k8s.io/v1, namespaced."""
ROLE_BINDING = Resource("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings")
"""RoleBinding, rbac.authorization.k8s.io/v1, namespaced."""
CLUSTER_ROLE = Resource(
    "rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", namespaced=False
)
"""ClusterRole, rbac.authorization.k8s.io/v1, cluster-scoped."""
CLUSTER_ROLE_BINDING = Resource(
    "rbac.authorization.k8s.io",
    "v1",
    "ClusterRoleBinding",
    "clusterrolebindings",
    namespaced=False,
)
"""ClusterRoleBinding, rbac.authorization.k8s.io/v1, cluster-scoped."""
TOKEN_REVIEW = Resource(
    "authentication.k8s.io", "v1", "TokenReview", "tokenreviews", namespaced=False
)
"""TokenReview, authentication.k8s.io/v1, cluster-scoped."""
SUBJECT_ACCESS_REVIEW = Resource(
    "authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews", namespaced=False
)
"""SubjectAccessReview, authorization.k8s.io/v1, cluster-scoped."""
