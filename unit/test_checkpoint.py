"""The restart checkpoint the leader leaves in its Lease (reconcilers.checkpoint): what it says,
and what a next process of another version, or a garbled one, makes of it."""

from __future__ import annotations

from typing import Any

import pytest

from reconcilers.checkpoint import ANNOTATION, Checkpoint, code_version
from reconcilers.plan import ClusterFacts

CHECKPOINT = Checkpoint(
    version="v1",
    kinds={"StatefulSet.apps": ("120", 2**64 - 1), "Company.crewlet.ai": ("118", 2570)},
    secrets={"platform/keys": "40", "platform/gone": None},
    unsettled=frozenset({"tenant-a/busy"}),
)


def versioned(version: str | None) -> dict[str, Any]:
    return {"metadata": {"name": "x", "resourceVersion": version}}


def test_a_checkpoint_reads_back_as_written_by_the_same_version() -> None:
    annotations = CHECKPOINT.annotation()
    assert list(annotations) == [ANNOTATION]
    assert Checkpoint.found({"other": "x", **annotations}, "v1") == CHECKPOINT


@pytest.mark.parametrize(
    "annotations",
    [
        {},
        CHECKPOINT.annotation() | {ANNOTATION: CHECKPOINT.annotation()[ANNOTATION] + "}"},
        {ANNOTATION: '{"version": "v1"}'},
        {ANNOTATION: '{"version": "v1", "kinds": [], "secrets": {}, "unsettled": []}'},
        {ANNOTATION: "[]"},
    ],
    ids=["none", "not-json", "incomplete", "kinds-not-a-map", "not-a-map"],
)
def test_a_missing_or_garbled_checkpoint_is_none(annotations: dict[str, str]) -> None:
    assert Checkpoint.found(annotations, "v1") is None


def test_another_versions_checkpoint_is_ignored() -> None:
    assert Checkpoint.found(CHECKPOINT.annotation(), "v2") is None


def test_versions_no_newer_than_their_kinds_mark_are_unchanged() -> None:
    kind = "StatefulSet.apps"
    assert CHECKPOINT.unchanged(kind, ["119", "120"])
    assert not CHECKPOINT.unchanged(kind, ["119", "121"])
    assert not CHECKPOINT.unchanged(kind, [None])
    assert not CHECKPOINT.unchanged("Service", ["1"]), "a kind with no mark"
    assert CHECKPOINT.unchanged(kind, [])


def test_a_secret_is_unchanged_only_if_it_exists_no_newer_than_recorded() -> None:
    assert CHECKPOINT.secret_unchanged("platform/keys", versioned("40"))
    assert not CHECKPOINT.secret_unchanged("platform/keys", versioned("41"))
    assert not CHECKPOINT.secret_unchanged("platform/keys", None), "deleted since"
    assert not CHECKPOINT.secret_unchanged("platform/gone", versioned("30")), "created since"
    assert not CHECKPOINT.secret_unchanged("platform/other", versioned("1")), "not watched then"


def test_the_version_is_the_code_and_the_cluster_facts() -> None:
    ingress = ClusterFacts(gateway_api=False, operator_namespace="system")
    gateway = ClusterFacts(gateway_api=True, operator_namespace="system")
    assert code_version(ingress) == code_version(ingress)
    assert code_version(ingress) != code_version(gateway)
