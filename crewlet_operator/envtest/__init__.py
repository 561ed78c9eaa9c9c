"""envtest for Python: a real, local Kubernetes control plane for tests.

The binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) come from
``make bins``; see :mod:`crewlet_operator.envtest.binaries` for where they are looked up.

- :class:`ControlPlane` starts and stops them and hands out identities (admin, users by client
  certificate, impersonated ServiceAccounts, real ServiceAccount tokens).
- :func:`install_crds` applies CRDs and waits until they are served (:func:`load_crds` reads
  them from YAML files or directories).
- ``crewlet_operator.envtest.pytest_plugin`` provides fixtures for a platform team's own suite.
- ``python -m crewlet_operator.envtest up --dir DIR [--workloads]`` runs one until interrupted.
"""

from crewlet_operator.envtest.binaries import KUBERNETES_VERSION, BinaryNotFoundError
from crewlet_operator.envtest.controlplane import KWOK_NODE, ControlPlane
from crewlet_operator.envtest.crds import install_crds, load_crds
from crewlet_operator.envtest.process import ProcessFailedError

__all__ = [
    "KUBERNETES_VERSION",
    "KWOK_NODE",
    "BinaryNotFoundError",
    "ControlPlane",
    "ProcessFailedError",
    "install_crds",
    "load_crds",
]
