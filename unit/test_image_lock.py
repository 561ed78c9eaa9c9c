"""The image's Python dependencies are locked with their hashes (requirements/image.txt, written
by `make lock`): the Dockerfile and the release rehearsal install that file with pip's
--require-hashes, so what the image holds is what was locked, byte for byte.

The lock must follow the two distributions: every dependency they declare is pinned at a
version their bounds admit, nothing they do not need is pinned, and every pin names its hashes.
When this fails, run `make lock`."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "image.txt"
FIRST_PARTY = {"crewlet-operator", "crewlet-operator-daemon"}
# The image's platform: what a marker is evaluated against.
IMAGE = {"sys_platform": "linux", "platform_system": "Linux", "python_version": "3.11", "extra": ""}


def pins() -> dict[str, tuple[str, int]]:
    """Each locked distribution's version and how many hashes it names."""
    found: dict[str, tuple[str, int]] = {}
    current = ""
    for line in LOCK.read_text().splitlines():
        pinned = re.match(r"^([A-Za-z0-9._-]+)==(\S+)", line)
        if pinned:
            current = canonicalize_name(pinned.group(1))
            found[current] = (pinned.group(2), 0)
        elif line.strip().startswith("--hash=sha256:"):
            version, hashes = found[current]
            found[current] = (version, hashes + 1)
    return found


def needed(distribution: str) -> dict[str, list[Requirement]]:
    """What ``distribution`` needs on the image's platform, transitively, by name: its
    requirements as the installed distributions declare them, with the extras each names
    (the daemon takes the library's tracing)."""
    seen: dict[str, list[Requirement]] = {}
    todo: list[tuple[str, frozenset[str]]] = [(distribution, frozenset())]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in done:
            continue
        done.add((name, extras))
        for text in importlib.metadata.requires(name) or []:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker is not None and not any(
                marker.evaluate({**IMAGE, "extra": extra}) for extra in ("", *extras)
            ):
                continue
            key = canonicalize_name(requirement.name)
            todo.append((key, frozenset(requirement.extras)))
            seen.setdefault(key, []).append(requirement)
    return seen


def test_every_pin_names_its_hashes() -> None:
    locked = pins()
    assert len(locked) > 10, f"{LOCK} pins too little: {locked}"
    assert {name for name, (_, hashes) in locked.items() if hashes == 0} == set()


def test_the_lock_pins_what_the_daemon_needs_and_nothing_else() -> None:
    wanted = set(needed("crewlet-operator-daemon")) - FIRST_PARTY
    assert set(pins()) == wanted, "requirements/image.txt has drifted: run `make lock`"


def test_every_pin_is_within_the_declared_bounds() -> None:
    locked = pins()
    outside = [
        f"{name}=={locked[name][0]} against {requirement}"
        for name, requirements in needed("crewlet-operator-daemon").items()
        if name not in FIRST_PARTY
        for requirement in requirements
        if not requirement.specifier.contains(locked[name][0], prereleases=True)
    ]
    assert outside == [], "requirements/image.txt has drifted: run `make lock`"
