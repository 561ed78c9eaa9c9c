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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "whole_module: checks what every test of its module did; runs only when all of them "
        "are selected (else deselected, as -k deselects: never reported as skipped or passed)",
    )


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected what they do
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    partial = []
    for item in items:
        if item.get_closest_marker("whole_module") is None:
            continue
        module = item.module  # type: ignore[attr-defined]
        defined = {n for n in vars(module) if n.startswith("test_")}
        selected = {i.originalname for i in items if i.module is module}  # type: ignore[attr-defined]
        if defined - selected:
            partial.append(item)
    if partial:
        config.hook.pytest_deselected(items=partial)
        items[:] = [i for i in items if i not in partial]


@pytest.fixture(scope="session")
def envtest_crds() -> list[dict[str, Any]]:
    """The operator's CRDs, served before the session plane's controller-manager starts: its
    garbage collector then knows their kinds at once, instead of after a late rediscovery."""
    return load_crds(ROOT / "manifests" / "crds")
