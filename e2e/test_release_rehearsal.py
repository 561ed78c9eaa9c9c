"""`make release-rehearsal` (hack/release.py rehearse): the release, end to end, on this machine.

A registry on loopback; the operator's image built without a container engine and signed, with
its SBOM attested; the chart pushed with `helm push` and signed; the engine verified, copied and
signed; and then the install page's own command,

    helm install crewlet-operator oci://ghcr.io/crewlet/charts/crewlet-operator \\
      --version <version> \\
      --namespace crewlet-operator-system --create-namespace

against that registry on the real control plane, with the operator Ready; a tampered chart
refused by verification. The release workflow runs the same script's ``publish``.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name

from crewlet_operator.envtest.binaries import KUBERNETES_VERSION

pytestmark = pytest.mark.release
"""Release-grade: ``make test-release`` runs it, ``make test`` leaves it out."""

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "image.txt"


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("release-rehearsal")
    done = subprocess.run(
        ["make", "-C", str(ROOT), "release-rehearsal", f"REHEARSAL_DIR={out}"],
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert done.returncode == 0, f"make release-rehearsal failed:\n{done.stdout}\n{done.stderr}"
    return out, json.loads((out / "summary.json").read_text())


@pytest.mark.timeout(1800)
def test_the_chart_installs_from_the_registry_and_the_operator_is_ready(
    rehearsal: tuple[Path, dict[str, Any]],
) -> None:
    _, summary = rehearsal
    release = summary["release"]
    # The Deployment helm installed runs the image the release built and signed, by digest.
    assert summary["installed_image"] == f"{release['operator_image']}@{release['image_digest']}"
    # And that image's own entrypoint, run from its filesystem, answered /readyz.
    assert summary["image_ran_ready"] is True


@pytest.mark.timeout(1800)
def test_a_tampered_chart_is_refused(rehearsal: tuple[Path, dict[str, Any]]) -> None:
    _, summary = rehearsal
    tampered = summary["tampered"]
    assert tampered["digest"] != summary["release"]["chart_digest"]
    assert "does not verify" in tampered["refused"]


@pytest.mark.timeout(1800)
def test_a_rerun_never_moves_the_engines_release_tag(
    rehearsal: tuple[Path, dict[str, Any]],
) -> None:
    _, summary = rehearsal
    assert "a tag is never moved" in summary["engine_tag_kept"]
    assert summary["release"]["engine_digest"] in summary["engine_tag_kept"]


@pytest.mark.timeout(1800)
def test_the_notes_name_the_kubernetes_minor_and_the_engine_copied(
    rehearsal: tuple[Path, dict[str, Any]],
) -> None:
    out, summary = rehearsal
    release = summary["release"]
    notes = (out / "release" / "notes.md").read_text()
    minor = ".".join(KUBERNETES_VERSION.removeprefix("v").split(".")[:2])
    assert f"Kubernetes {minor}, the minor this release's tests ran on" in notes
    # The copy is the engine as it was verified: the stand-in's digest, unchanged.
    assert release["engine_digest"] == summary["engine_source_digest"]
    assert f"`{release['engine_copy']}@{release['engine_digest']}`" in notes
    assert f"Crewlet commit `{release['engine_revision']}`" in notes
    assert f"`{release['chart_digest']}`" in notes
    assert f"--version {release['version'].removeprefix('v')}" in notes
    install = (out / "release" / "install.yaml").read_text()
    assert "kind: Deployment" in install


@pytest.mark.timeout(1800)
def test_the_sbom_lists_every_locked_dependency_at_its_version(
    rehearsal: tuple[Path, dict[str, Any]],
) -> None:
    out, _ = rehearsal
    sbom = json.loads((out / "release" / "sbom.spdx.json").read_text())
    listed = {(canonicalize_name(p["name"]), p.get("versionInfo", "")) for p in sbom["packages"]}
    locked = {
        (canonicalize_name(m.group(1)), m.group(2))
        for m in re.finditer(r"^([A-Za-z0-9._-]+)==(\S+)", LOCK.read_text(), re.MULTILINE)
    }
    assert locked - listed == set()
    names = {name for name, _ in listed}
    # The two distributions, and the Debian package of the interpreter they run on.
    assert {"crewlet-operator", "crewlet-operator-daemon", "python3"} <= names
