"""Engine versions: which images the operator can order, and the high-water mark it keeps.

The engine migrates its data forward only, so once a company has run a version, an older one
must never start on its volume (DowngradeRefused). An image is ordered by its tag when the tag is
a semantic version, whether or not a digest follows it (``engine:v0.2.0@sha256:...``, the way a
release is pinned): the tag is what says which release it is. An image with no such tag (a bare
digest, ``main``, a commit) says nothing about which Crewlet commit is newer, so it is reported as
``Unordered`` and is not protected.

The mark is kept twice: in the Company's ``status.highestEngineVersion`` and as an annotation on
the data claim, which outlives the Company (its retention policy is Retain), so a Company recreated
over the same volume still refuses an older engine. The running data StatefulSet's image counts
too: it is what was last applied.
"""

from __future__ import annotations

import functools
from typing import Literal

import semver

from crewlet_operator import STATEFUL_SET
from crewlet_operator import KubeObject as Object
from crewlet_operator.objects import name as object_name
from crewlet_operator_daemon import engine, naming
from crewlet_operator_daemon.naming import DATA
from crewlet_operator_daemon.plan import Observed

CLAIM_ANNOTATION = "crewlet.ai/highest-engine-version"
"""Annotation on the data claim: the highest engine version the volume has been opened by."""
STATUS_FIELD = "highestEngineVersion"
"""The Company's status field that holds the mark."""

Protection = Literal["Ordered", "Unordered"]
ORDERED: Protection = "Ordered"
UNORDERED: Protection = "Unordered"


@functools.lru_cache(maxsize=1024)
def parse_version(text: str | None) -> semver.Version | None:
    """Parse ``1.2.3``, ``v1.2.3`` or ``v1.2.3-rc.1+build``; anything else is None.

    Used for image tags, status fields and annotations alike, so junk written by hand into an
    annotation is ignored instead of failing every reconcile. Cached (versions are immutable):
    a reconcile parses a dozen, the same few in every company: 7% of its profile uncached.
    """
    if not text:
        return None
    candidate = text[1:] if text.startswith("v") else text
    try:
        return semver.Version.parse(candidate)
    except (ValueError, TypeError):
        return None


def image_tag(image: str) -> str | None:
    """The tag of ``image``, or None when it has none (a bare digest has none).

    A reference is ``name[:tag][@digest]`` (distribution/reference's grammar): the digest, if
    any, is dropped first, so ``engine:v0.2.0@sha256:...`` has the tag ``v0.2.0``. A registry
    port (``registry:5000/crewlet``) is not a tag: only the last path segment is read.
    """
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    return last.split(":", 1)[1] or None


def image_version(image: str) -> semver.Version | None:
    """The semantic version ``image`` is tagged with (a digest beside it or not), or None for a
    bare digest, ``main`` or a commit."""
    return parse_version(image_tag(image))


def protection(image: str) -> Protection:
    """``Ordered`` when the image's tag is a semantic version, else ``Unordered``."""
    return ORDERED if image_version(image) is not None else UNORDERED


def highest(*versions: semver.Version | None) -> semver.Version | None:
    """The highest of ``versions`` (semantic-version precedence; build metadata is ignored)."""
    known = [v for v in versions if v is not None]
    return max(known) if known else None


def is_downgrade(candidate: semver.Version | None, high_water: semver.Version | None) -> bool:
    """Whether running ``candidate`` would take a volume below ``high_water``.

    An unordered image (None) is never a downgrade: the operator cannot tell (and says so).
    """
    return candidate is not None and high_water is not None and candidate < high_water


def format_version(version: semver.Version | None) -> str | None:
    """The canonical text of ``version`` (no leading ``v``), as status and annotations hold it."""
    return None if version is None else str(version)


def unordered_note(image: str) -> str | None:
    """What the Accepted message says of an image the operator cannot order, else None."""
    if protection(image) == ORDERED:
        return None
    return (
        "the image is named by a digest, main or a commit, not a semantic version, so the "
        "operator cannot order it and DowngradeRefused does not protect this company: never "
        "point its class at an older engine than it has run"
    )


def running_image(statefulset: Object | None) -> str | None:
    """The engine container's image in an observed StatefulSet (None without one)."""
    containers = (((statefulset or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in containers.get("containers") or ():
        if container.get("name") == engine.CONTAINER:
            image = container.get("image")
            return image if isinstance(image, str) else None
    return None


def data_statefulset(company: Object, observed: Observed) -> Object | None:
    """The company's data StatefulSet as observed: the engine that last opened its volume."""
    return observed.children.get(
        (STATEFUL_SET.kind, naming.statefulset(object_name(company), DATA))
    )


def high_water(company: Object, observed: Observed) -> semver.Version | None:
    """The highest version this company's data has run: status, claim, data StatefulSet.

    The claim outlives the Company, and the StatefulSet is what was last applied, so either still
    protects a company whose status was lost.
    """
    status = company.get("status") or {}
    claim = observed.data_claim or {}
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    return highest(
        parse_version(status.get(STATUS_FIELD)),
        parse_version(annotations.get(CLAIM_ANNOTATION)),
        image_version(running_image(data_statefulset(company, observed)) or ""),
    )


def claim_annotations(observed: Observed, high: semver.Version | None) -> dict[str, str]:
    """Raise the data claim's high-water annotation to ``high`` when it is lower or missing."""
    if observed.data_claim is None or high is None:
        return {}
    annotations = (observed.data_claim.get("metadata") or {}).get("annotations") or {}
    current = parse_version(annotations.get(CLAIM_ANNOTATION))
    if current is not None and current >= high:
        return {}
    return {CLAIM_ANNOTATION: str(high)}
