"""The e2e suite runs against one real local control plane, with workloads, per session."""

import os
from pathlib import Path
from typing import Any

import pytest

from crewlet_operator.envtest import load_crds

# Garbage collection, StatefulSet pods and Ready pods need the controller-manager, the scheduler
# and kwok; the whole suite shares one control plane, so it runs them all.
os.environ.setdefault("CREWLET_ENVTEST_WORKLOADS", "1")

pytest_plugins = ["crewlet_operator.envtest.pytest_plugin"]

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def envtest_crds() -> list[dict[str, Any]]:
    """The operator's CRDs, served before the session plane's controller-manager starts: its
    garbage collector then knows their kinds at once, instead of after a late rediscovery."""
    return load_crds(ROOT / "manifests" / "crds")
