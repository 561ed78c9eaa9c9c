"""dist/install.yaml is the chart rendered with default values, and stays so."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hack"))

from build_installer import NAMESPACE, TARGET, render  # noqa: E402


def test_install_yaml_matches_the_chart() -> None:
    assert TARGET.read_text() == render(), "dist/install.yaml is stale: run `make build-installer`"


def test_install_yaml_holds_the_install_pages_objects() -> None:
    docs = [d for d in yaml.safe_load_all(TARGET.read_text()) if d]
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Namespace", NAMESPACE) in names
    for expected in [
        ("Deployment", "crewlet-operator-controller-manager"),
        ("ServiceAccount", "crewlet-operator-controller-manager"),
        ("ValidatingAdmissionPolicy", "crewlet-operator-manager-writes"),
        ("ClusterRole", "crewlet-operator-metrics-reader"),
        ("ClusterRole", "crewlet-operator-crewlet-edit"),
        ("ClusterRole", "crewlet-operator-crewlet-view"),
        ("CustomResourceDefinition", "companies.crewlet.ai"),
        ("CustomResourceDefinition", "engineclasses.crewlet.ai"),
    ]:
        assert expected in names, expected
    namespaced = [d for d in docs if d["kind"] in ("Deployment", "ServiceAccount", "Service")]
    assert all(d["metadata"]["namespace"] == NAMESPACE for d in namespaced)
