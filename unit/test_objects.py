"""The object helpers every module shares: keys, MicroTime, resourceVersions."""

from __future__ import annotations

import datetime
import time

import pytest

from crewlet_operator import events
from crewlet_operator.objects import (
    micro_time,
    namespaced_key,
    object_key,
    resource_version_at_most,
    resource_version_before,
)
from crewlet_operator.reconcile import Request


def test_a_key_is_namespace_slash_name_or_the_name_alone() -> None:
    assert namespaced_key("prod", "web") == "prod/web"
    assert namespaced_key(None, "node-1") == "node-1"
    assert namespaced_key("", "node-1") == "node-1"


def test_objects_and_requests_are_keyed_alike() -> None:
    pod = {"metadata": {"name": "web", "namespace": "prod"}}
    node = {"metadata": {"name": "node-1"}}
    assert object_key(pod) == str(Request("prod", "web")) == "prod/web"
    assert object_key(node) == str(Request(None, "node-1")) == "node-1"


def test_micro_time_defaults_to_now() -> None:
    before = time.time()
    stamp = micro_time()
    after = time.time()
    assert stamp.endswith("Z")
    moment = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
    # Whole microseconds: the written moment is never more than 1 µs off the clock's.
    assert before - 1e-6 <= moment <= after + 1e-6


def test_events_writes_the_same_micro_time() -> None:
    assert events.micro_time is micro_time
    assert micro_time(0.5) == "1970-01-01T00:00:00.500000Z"


@pytest.mark.parametrize(
    ("version", "bound", "at_most"),
    [
        ("9", "10", True),
        ("10", "10", True),
        ("11", "10", False),
        ("100", "99", False),
        ("0", "0", True),
        ("07", "9", False),  # not the decimal form KEP-5504 compares
        ("9", "abc", False),
        ("", "9", False),
        (None, "9", False),
        ("9", None, False),
        ("٣", "9", False),  # a digit, but not an ASCII one
    ],
)
def test_resource_versions_compare_as_decimals_and_anything_else_as_unknown(
    version: str | None, bound: str | None, at_most: bool
) -> None:
    assert resource_version_at_most(version, bound) is at_most


@pytest.mark.parametrize(
    ("version", "other", "before"),
    [
        ("9", "10", True),
        ("10", "10", False),
        ("11", "10", False),
        ("99", "100", True),
        ("07", "9", False),  # not the decimal form KEP-5504 compares
        ("9", "abc", False),
        (None, "9", False),
        ("9", None, False),
    ],
)
def test_resource_versions_before_is_the_same_order_strict(
    version: str | None, other: str | None, before: bool
) -> None:
    assert resource_version_before(version, other) is before
