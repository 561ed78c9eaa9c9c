"""Engine versions: which images can be ordered, and in what order."""

from __future__ import annotations

from typing import Any

import pytest
import semver

from crewlet_operator_daemon import versions
from crewlet_operator_daemon.plan import Observed

Object = dict[str, Any]


def v(text: str) -> semver.Version:
    parsed = versions.parse_version(text)
    assert parsed is not None, text
    return parsed


@pytest.mark.parametrize(
    ("lower", "higher"),
    [
        ("v0.2.0", "v0.10.0"),
        ("0.9.9", "0.10.0"),
        ("v0.2.0-rc.1", "v0.2.0"),
        ("v0.2.0-alpha", "v0.2.0-beta"),
        ("v0.2.0-rc.2", "v0.2.0-rc.10"),
        ("v1.9.0", "v2.0.0-rc.1"),
        ("v0.2.0", "0.2.1"),
    ],
)
def test_semantic_ordering(lower: str, higher: str) -> None:
    assert v(lower) < v(higher)
    assert versions.is_downgrade(v(lower), v(higher))
    assert not versions.is_downgrade(v(higher), v(lower))
    assert versions.highest(v(lower), None, v(higher)) == v(higher)


def test_build_metadata_does_not_order() -> None:
    assert not versions.is_downgrade(v("1.0.0+build.1"), v("1.0.0+build.2"))


def test_a_leading_v_is_accepted_and_dropped_when_formatted() -> None:
    assert v("v0.2.0") == v("0.2.0")
    assert versions.format_version(v("v0.2.0")) == "0.2.0"
    assert versions.format_version(None) is None


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("ghcr.io/crewlet/crewlet-operator/engine:v0.2.0", "0.2.0"),
        ("ghcr.io/crewlet/crewlet:1.4.0-rc.1", "1.4.0-rc.1"),
        ("registry:5000/crewlet:v2.0.0", "2.0.0"),
        ("crewlet:v0.10.0", "0.10.0"),
        # Pinned by digest, as RELEASING.md advises: still ordered by its tag.
        ("ghcr.io/crewlet/crewlet-operator/engine:v0.2.0@sha256:" + "1" * 64, "0.2.0"),
        ("registry:5000/crewlet:v0.3.0@sha256:" + "a" * 64, "0.3.0"),
    ],
)
def test_semantic_version_tags_are_ordered(image: str, expected: str) -> None:
    assert versions.format_version(versions.image_version(image)) == expected
    assert versions.protection(image) == "Ordered"


@pytest.mark.parametrize(
    "image",
    [
        "ghcr.io/crewlet/crewlet:main",
        "ghcr.io/crewlet/crewlet@sha256:" + "0" * 64,
        "registry.example.com/crewlet:main@sha256:" + "1" * 64,
        "registry.example.com/crewlet:4e6414dc",
        "registry.example.com/crewlet:199b205ad571ef53c2b1c52d9cc7726ec0dc461f",
        "registry.example.com/crewlet:1234567",
        "ghcr.io/crewlet/crewlet:latest",
        "ghcr.io/crewlet/crewlet",
        "registry:5000/crewlet",
        "crewlet:v1.2",
        "crewlet:",
    ],
)
def test_digests_main_and_commits_are_unordered(image: str) -> None:
    assert versions.image_version(image) is None
    assert versions.protection(image) == "Unordered"


def test_an_unordered_image_is_never_a_downgrade() -> None:
    assert not versions.is_downgrade(None, v("9.9.9"))
    assert not versions.is_downgrade(v("0.1.0"), None)


@pytest.mark.parametrize("junk", [None, "", "garbage", "v", "1.2", "vv1.2.3"])
def test_junk_in_annotations_is_ignored(junk: str | None) -> None:
    assert versions.parse_version(junk) is None


def test_highest_of_nothing_is_none() -> None:
    assert versions.highest() is None
    assert versions.highest(None, None) is None


# --- The high-water mark -------------------------------------------------------------------


def company(highest: str | None = None) -> Object:
    status = {} if highest is None else {"highestEngineVersion": highest}
    return {"metadata": {"name": "acme", "namespace": "tenant-a"}, "status": status}


def claim(annotation: str | None = None) -> Object:
    annotations = {} if annotation is None else {versions.CLAIM_ANNOTATION: annotation}
    return {"metadata": {"name": "data-acme-data-0", "annotations": annotations}}


def data_statefulset(image: str, name: str = "acme-data") -> Object:
    return {
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "initContainers": [{"name": "engine-init", "image": "busybox:1.0.0"}],
                    "containers": [
                        {"name": "sidecar", "image": "proxy:v9.0.0"},
                        {"name": "engine", "image": image},
                    ],
                }
            }
        },
    }


def running(statefulset: Object) -> Observed:
    return Observed(children={("StatefulSet", statefulset["metadata"]["name"]): statefulset})


def test_the_running_image_is_the_engine_containers() -> None:
    assert versions.running_image(data_statefulset("engine:v0.3.0")) == "engine:v0.3.0"
    assert versions.running_image(None) is None
    assert versions.running_image({"spec": {"template": {"spec": {}}}}) is None


@pytest.mark.parametrize(
    ("status", "annotation", "image", "expected"),
    [
        ("0.4.0", "0.3.0", "engine:v0.2.0", "0.4.0"),
        ("0.2.0", "v0.5.0", "engine:v0.3.0", "0.5.0"),
        ("0.2.0", None, "engine:v0.6.0", "0.6.0"),
        (None, "junk", "engine@sha256:" + "a" * 64, None),
    ],
    ids=["status", "claim", "statefulset", "nothing-ordered"],
)
def test_the_high_water_mark_is_the_highest_of_status_claim_and_running_image(
    status: str | None, annotation: str | None, image: str, expected: str | None
) -> None:
    observed = Observed(
        children=running(data_statefulset(image)).children, data_claim=claim(annotation)
    )
    high = versions.high_water(company(status), observed)
    assert versions.format_version(high) == expected


def test_another_companys_statefulset_does_not_count() -> None:
    observed = running(data_statefulset("engine:v9.0.0", name="other-data"))
    assert versions.high_water(company("0.2.0"), observed) == v("0.2.0")


@pytest.mark.parametrize(
    ("annotation", "high", "expected"),
    [
        (None, "0.3.0", {versions.CLAIM_ANNOTATION: "0.3.0"}),
        ("0.2.0", "0.3.0", {versions.CLAIM_ANNOTATION: "0.3.0"}),
        ("junk", "0.3.0", {versions.CLAIM_ANNOTATION: "0.3.0"}),
        ("0.3.0", "0.3.0", {}),
        ("0.4.0", "0.3.0", {}),
    ],
)
def test_the_claim_annotation_is_only_ever_raised(
    annotation: str | None, high: str, expected: dict[str, str]
) -> None:
    observed = Observed(data_claim=claim(annotation))
    assert versions.claim_annotations(observed, v(high)) == expected


def test_no_claim_or_no_mark_annotates_nothing() -> None:
    assert versions.claim_annotations(Observed(), v("0.3.0")) == {}
    assert versions.claim_annotations(Observed(data_claim=claim()), None) == {}
