"""Finding the control plane's binaries.

Lookup order, first hit wins, for each binary separately:

1. ``CREWLET_ENVTEST_ASSETS``: a directory holding the binaries (ours);
2. ``KUBEBUILDER_ASSETS``: the directory controller-runtime's envtest reads, so a platform team
   that already runs ``setup-envtest`` can point us at the same binaries;
3. the cache ``python -m crewlet_operator.envtest bins`` fills (see
   :mod:`crewlet_operator.envtest.install`): ``$CREWLET_CACHE/bin/k8s-<version>`` (default
   ``~/.cache/crewlet-operator/bin/k8s-v1.37.2``).

A missing binary is one clear error that names the command that installs it, never a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

from crewlet_operator.errors import BinaryNotFoundError

KUBERNETES_VERSION = "v1.37.2"
"""The Kubernetes release the local control plane runs and the operator is tested against."""

CONTROL_PLANE_BINARIES = ("etcd", "kube-apiserver")
WORKLOAD_BINARIES = ("kube-controller-manager", "kube-scheduler", "kwok")
TOOL_BINARIES = ("kubectl", "helm")
KWOK_STAGES = "kwok-stages.yaml"


def cache_dir(kubernetes_version: str = KUBERNETES_VERSION) -> Path:
    """Where ``python -m crewlet_operator.envtest bins`` puts the binaries for
    ``kubernetes_version``: outside any checkout or virtualenv, so every one of them reuses it."""
    base = os.environ.get("CREWLET_CACHE") or str(Path.home() / ".cache" / "crewlet-operator")
    return Path(base) / "bin" / f"k8s-{kubernetes_version}"


def search_dirs() -> list[Path]:
    """The directories searched, in order."""
    dirs = [os.environ.get(var) for var in ("CREWLET_ENVTEST_ASSETS", "KUBEBUILDER_ASSETS")]
    return [Path(d) for d in dirs if d] + [cache_dir()]


def find(name: str) -> Path:
    """Return the path of binary (or asset) ``name``; raise :class:`BinaryNotFoundError`."""
    dirs = search_dirs()
    for directory in dirs:
        candidate = directory / name
        if candidate.is_file() and (name.endswith(".yaml") or os.access(candidate, os.X_OK)):
            return candidate
    searched = ", ".join(str(d) for d in dirs)
    raise BinaryNotFoundError(
        f"{name} not found (searched {searched}). Run `python -m crewlet_operator.envtest bins` "
        "(`make bins` in the crewlet-operator checkout) to build the Kubernetes binaries into "
        "the cache, or point CREWLET_ENVTEST_ASSETS or KUBEBUILDER_ASSETS at a directory that "
        "holds them."
    )
