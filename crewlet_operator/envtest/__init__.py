"""envtest for Python: a real, local Kubernetes control plane for tests.

The binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, and kubectl
and helm) come from ``python -m crewlet_operator.envtest bins`` (:func:`install_binaries`);
see :mod:`crewlet_operator.envtest.binaries` for where they are looked up.

- :class:`ControlPlane` starts and stops them and hands out identities (admin, users by client
  certificate, impersonated ServiceAccounts, real ServiceAccount tokens). CRDs given to it
  (``crds=``, ``crd_paths=``) are served before kube-controller-manager starts.
- :func:`install_crds` applies CRDs to a running plane and waits until they are served
  (:func:`load_crds` reads them from YAML files or directories); :func:`go_module_dir` finds
  CRDs that ship inside a Go module.
- ``crewlet_operator.envtest.pytest_plugin`` provides fixtures for a platform team's own suite.
- ``python -m crewlet_operator.envtest up --dir DIR [--workloads] [--crds PATH]`` runs one
  until interrupted.

Without workloads the aggregated ClusterRoles ``admin``, ``edit`` and ``view`` have no rules
(kube-controller-manager fills them in): test RBAC that relies on them with ``workloads=True``.
A plane started without workloads warns so (:class:`EmptyAggregatedRolesWarning`).
"""

from crewlet_operator.envtest.binaries import KUBERNETES_VERSION
from crewlet_operator.envtest.controlplane import (
    KWOK_NODE,
    USER_FIELD_MANAGER,
    ControlPlane,
    EmptyAggregatedRolesWarning,
)
from crewlet_operator.envtest.crds import install_crds, load_crds
from crewlet_operator.envtest.install import go_module_dir, install_binaries
from crewlet_operator.errors import (
    BinaryNotFoundError,
    GoUnavailableError,
    InstallError,
    ProcessFailedError,
)

__all__ = [
    "KUBERNETES_VERSION",
    "KWOK_NODE",
    "USER_FIELD_MANAGER",
    "BinaryNotFoundError",
    "ControlPlane",
    "EmptyAggregatedRolesWarning",
    "GoUnavailableError",
    "InstallError",
    "ProcessFailedError",
    "go_module_dir",
    "install_binaries",
    "install_crds",
    "load_crds",
]
