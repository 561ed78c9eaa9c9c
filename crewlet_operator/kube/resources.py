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
NODE = Resource("", "v1", "Node", "nodes", namespaced=False)
POD = Resource("", "v1", "Pod", "pods")
CONFIG_MAP = Resource("", "v1", "ConfigMap", "configmaps")
SECRET = Resource("", "v1", "Secret", "secrets")
SERVICE = Resource("", "v1", "Service", "services")
SERVICE_ACCOUNT = Resource("", "v1", "ServiceAccount", "serviceaccounts")
PERSISTENT_VOLUME_CLAIM = Resource("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims")
RESOURCE_QUOTA = Resource("", "v1", "ResourceQuota", "resourcequotas")
LIMIT_RANGE = Resource("", "v1", "LimitRange", "limitranges")
PERSISTENT_VOLUME = Resource("", "v1", "PersistentVolume", "persistentvolumes", namespaced=False)
ENDPOINT_SLICE = Resource("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices")
STATEFUL_SET = Resource("apps", "v1", "StatefulSet", "statefulsets")
DEPLOYMENT = Resource("apps", "v1", "Deployment", "deployments")
REPLICA_SET = Resource("apps", "v1", "ReplicaSet", "replicasets")
DAEMON_SET = Resource("apps", "v1", "DaemonSet", "daemonsets")
JOB = Resource("batch", "v1", "Job", "jobs")
CRON_JOB = Resource("batch", "v1", "CronJob", "cronjobs")
HORIZONTAL_POD_AUTOSCALER = Resource(
    "autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers"
)
STORAGE_CLASS = Resource("storage.k8s.io", "v1", "StorageClass", "storageclasses", namespaced=False)
PRIORITY_CLASS = Resource(
    "scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", namespaced=False
)
POD_DISRUPTION_BUDGET = Resource("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets")
NETWORK_POLICY = Resource("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies")
INGRESS = Resource("networking.k8s.io", "v1", "Ingress", "ingresses")
HTTP_ROUTE = Resource("gateway.networking.k8s.io", "v1", "HTTPRoute", "httproutes")
LEASE = Resource("coordination.k8s.io", "v1", "Lease", "leases")
EVENT = Resource("events.k8s.io", "v1", "Event", "events")
CUSTOM_RESOURCE_DEFINITION = Resource(
    "apiextensions.k8s.io",
    "v1",
    "CustomResourceDefinition",
    "customresourcedefinitions",
    namespaced=False,
)
VALIDATING_ADMISSION_POLICY = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "ValidatingAdmissionPolicy",
    "validatingadmissionpolicies",
    namespaced=False,
)
VALIDATING_ADMISSION_POLICY_BINDING = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "ValidatingAdmissionPolicyBinding",
    "validatingadmissionpolicybindings",
    namespaced=False,
)
ROLE = Resource("rbac.authorization.k8s.io", "v1", "Role", "roles")
ROLE_BINDING = Resource("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings")
CLUSTER_ROLE = Resource(
    "rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", namespaced=False
)
CLUSTER_ROLE_BINDING = Resource(
    "rbac.authorization.k8s.io",
    "v1",
    "ClusterRoleBinding",
    "clusterrolebindings",
    namespaced=False,
)
TOKEN_REVIEW = Resource(
    "authentication.k8s.io", "v1", "TokenReview", "tokenreviews", namespaced=False
)
SUBJECT_ACCESS_REVIEW = Resource(
    "authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews", namespaced=False
)
