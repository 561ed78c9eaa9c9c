"""dist/install.yaml is the chart rendered with default values, and stays so."""

from __future__ import annotations

from pathlib import Path

import yaml

from hack.build_installer import NAMESPACE, TARGET, render

ROOT = Path(__file__).resolve().parent.parent


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


def _prerequisites(target: str) -> list[str]:
    makefile = (ROOT / "Makefile").read_text()
    line = next(ln for ln in makefile.splitlines() if ln.startswith(f"{target}:"))
    return line.split(":", 1)[1].split("##", 1)[0].split()


def test_the_chart_targets_need_only_helm_and_kubectl_not_the_kubernetes_build() -> None:
    """`make tools` fetches helm and kubectl alone (seconds); rendering or deploying the chart
    never waits for the tens-of-minutes build of the Kubernetes binaries."""
    for target in ("helm-deploy", "build-installer", "unit"):
        needs = _prerequisites(target)
        assert "tools" in needs and "bins" not in needs, (target, needs)
    assert _prerequisites("tools") == ["venv"]  # no Go, no Kubernetes build
