"""The release script's pure parts (hack/release.py): the release notes it writes, and how it
signs and verifies. The whole release runs in e2e/test_release_rehearsal.py.

The install page's own command is what the notes must tell users to run:

    helm install crewlet-operator oci://ghcr.io/crewlet/charts/crewlet-operator \\
      --version <version> \\
      --namespace crewlet-operator-system --create-namespace
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from hack import release

ENGINE_DIGEST = "sha256:" + "e" * 64
INSTALL_PAGE_COMMAND = """\
helm install crewlet-operator oci://ghcr.io/crewlet/charts/crewlet-operator \\
  --version <version> \\
  --namespace crewlet-operator-system --create-namespace"""


def published(**changes: Any) -> Any:
    facts: dict[str, Any] = {
        "version": "v0.2.0",
        "kubernetes": "v1.37.2",
        "kind_kubernetes": "v1.37.0",
        "operator_image": "ghcr.io/crewlet/crewlet-operator",
        "image_digest": "sha256:" + "a" * 64,
        "chart_repository": "ghcr.io/crewlet/charts",
        "chart_digest": "sha256:" + "c" * 64,
        "engine_copy": "ghcr.io/crewlet/crewlet-operator/engine",
        "engine_digest": ENGINE_DIGEST,
        "engine_source": "ghcr.io/crewlet/crewlet",
        "engine_revision": "0123456789abcdef0123456789abcdef01234567",
        "signed_by": "--certificate-identity-regexp '^https://github.com/crewlet/' "
        "--certificate-oidc-issuer https://token.actions.githubusercontent.com",
    }
    facts.update(changes)
    return release.Release(**facts)


def test_the_notes_name_the_kubernetes_minor_the_tests_ran_on() -> None:
    notes = release.release_notes(published())
    assert "Kubernetes 1.37, the minor this release's tests ran on" in notes
    assert "a local v1.37.2 control plane" in notes
    assert "a kind cluster running v1.37.0" in notes
    without_kind = release.release_notes(published(kind_kubernetes=None))
    assert "kind" not in without_kind


def test_the_notes_name_the_engine_copied_by_tag_digest_and_commit() -> None:
    notes = release.release_notes(published())
    assert "- `ghcr.io/crewlet/crewlet-operator/engine:v0.2.0`" in notes
    assert f"`ghcr.io/crewlet/crewlet-operator/engine@{ENGINE_DIGEST}`" in notes
    assert "Crewlet commit `0123456789abcdef0123456789abcdef01234567`" in notes
    assert "published as `ghcr.io/crewlet/crewlet`" in notes
    assert "    image: ghcr.io/crewlet/crewlet-operator/engine:v0.2.0\n" in notes


def test_the_notes_list_every_artifact_by_digest() -> None:
    notes = release.release_notes(published())
    for digest in ("a" * 64, "c" * 64, "e" * 64):
        assert f"`sha256:{digest}` |" in notes


def test_the_notes_install_with_the_install_pages_command() -> None:
    notes = release.release_notes(published())
    assert INSTALL_PAGE_COMMAND.replace("<version>", "0.2.0") in notes


def test_the_notes_verify_with_the_signer_named() -> None:
    notes = release.release_notes(published(signed_by="--key release.pub"))
    assert (
        "cosign verify ghcr.io/crewlet/crewlet-operator/engine:v0.2.0 \\\n  --key release.pub"
        in (notes)
    )


def test_a_key_signs_with_no_service_and_verifies_without_the_log(tmp_path: Path) -> None:
    signer = release.Signer(
        key=tmp_path / "k.key", public_key=tmp_path / "k.pub", signing_config=tmp_path / "c.json"
    )
    assert signer.sign_args() == [
        "--key",
        str(tmp_path / "k.key"),
        "--signing-config",
        str(tmp_path / "c.json"),
    ]
    assert signer.verify_args() == ["--key", str(tmp_path / "k.pub"), "--insecure-ignore-tlog=true"]


def test_keyless_signs_as_the_workflow_and_verifies_its_identity() -> None:
    identity = (
        "https://github.com/crewlet/crewlet-operator/.github/workflows/release.yml@refs/tags/v0.2.0"
    )
    signer = release.Signer(identity=identity)
    assert signer.sign_args() == []
    assert signer.verify_args() == [
        "--certificate-identity",
        identity,
        "--certificate-oidc-issuer",
        "https://token.actions.githubusercontent.com",
    ]
    with pytest.raises(release.ReleaseError, match="needs an identity"):
        release.Signer().verify_args()


@pytest.mark.parametrize(
    ("reference", "repository"),
    [
        (
            "127.0.0.1:5000/crewlet/charts/crewlet-operator:0.2.0",
            "127.0.0.1:5000/crewlet/charts/crewlet-operator",
        ),
        ("ghcr.io/crewlet/crewlet@sha256:" + "e" * 64, "ghcr.io/crewlet/crewlet"),
        ("ghcr.io/crewlet/crewlet:main@sha256:" + "e" * 64, "ghcr.io/crewlet/crewlet"),
        ("localhost:5000/x", "localhost:5000/x"),
    ],
)
def test_repository_of(reference: str, repository: str) -> None:
    assert release.repository_of(reference) == repository


@pytest.mark.parametrize(
    ("changes", "refusal"),
    [
        ({"version": "0.2.0"}, "not a release version"),
        ({"version": "v0.2"}, "not a release version"),
        ({"engine_source": "ghcr.io/crewlet/crewlet:main"}, "copied by digest"),
    ],
)
def test_publish_refuses_before_it_runs_anything(
    tmp_path: Path, changes: dict[str, Any], refusal: str
) -> None:
    missing = tmp_path / "no-such-tool"
    tools = release.Tools(missing, missing, missing, missing, tmp_path)
    plan = release.Plan(
        version="v0.2.0",
        kubernetes="v1.37.2",
        kind_kubernetes=None,
        operator_image="ghcr.io/crewlet/crewlet-operator",
        image_digest="sha256:" + "a" * 64,
        chart_repository="ghcr.io/crewlet/charts",
        engine_source=f"ghcr.io/crewlet/crewlet@{ENGINE_DIGEST}",
        engine_copy="ghcr.io/crewlet/crewlet-operator/engine",
        signer=release.Signer(identity="x"),
        engine_signer=release.Signer(identity="y"),
    )
    plan = dataclasses.replace(plan, **changes)
    with pytest.raises(release.ReleaseError, match=refusal):
        release.publish(tools, plan, tmp_path / "out")
    assert not (tmp_path / "out").exists()
