"""Event bodies, names, truncation and series, and the recorder against a fake client."""

from __future__ import annotations

import asyncio
import re
import socket
from typing import Any

import pytest
from fakes import FakeClock
from structlog.testing import capture_logs

from crewlet_operator import metrics
from crewlet_operator.errors import ForbiddenError, NotFoundError
from crewlet_operator.events import (
    MAX_IN_FLIGHT,
    NOTE_LIMIT,
    EventRecorder,
    SeriesTracker,
    build_event,
    event_name,
    micro_time,
    object_reference,
    truncate_note,
)
from crewlet_operator.kube.resources import Resource

JAN_1_2026 = 1_767_225_600.0

CONFIG_MAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {
        "name": "settings",
        "namespace": "team-a",
        "uid": "cm-uid",
        "resourceVersion": "42",
        "labels": {"ignored": "yes"},
    },
    "data": {"k": "v"},
}
NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "node-1", "uid": "node-uid", "resourceVersion": "7"},
}
NAME = re.compile(r"^(?P<stem>[a-z0-9.-]+)\.(?P<suffix>[0-9a-f]{16})$")


def test_event_about_a_namespaced_object() -> None:
    event = build_event(
        CONFIG_MAP,
        "Warning",
        "InvalidSettings",
        "Validate",
        "key k is not allowed",
        controller="crewlet.ai/operator",
        instance="crewlet.ai/operator-pod-1",
        event_time=JAN_1_2026 + 0.25,
        name="settings.0123456789abcdef",
    )
    assert event == {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "settings.0123456789abcdef", "namespace": "team-a"},
        "eventTime": "2026-01-01T00:00:00.250000Z",
        "reportingController": "crewlet.ai/operator",
        "reportingInstance": "crewlet.ai/operator-pod-1",
        "action": "Validate",
        "reason": "InvalidSettings",
        "type": "Warning",
        "note": "key k is not allowed",
        "regarding": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "settings",
            "namespace": "team-a",
            "uid": "cm-uid",
            "resourceVersion": "42",
        },
    }


def test_event_about_a_cluster_scoped_object_lives_in_default() -> None:
    event = build_event(
        NODE,
        "Normal",
        "Drained",
        "Drain",
        "all pods evicted",
        controller="c",
        instance="i",
        event_time=JAN_1_2026,
    )
    assert event["metadata"]["namespace"] == "default"
    assert event["regarding"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "node-1",
        "uid": "node-uid",
        "resourceVersion": "7",
    }
    match = NAME.match(event["metadata"]["name"])
    assert match is not None and match["stem"] == "node-1"
    assert "series" not in event and "related" not in event


def test_related_object_and_series_are_included_when_given() -> None:
    event = build_event(
        CONFIG_MAP,
        "Normal",
        "Mounted",
        "Reconcile",
        "mounted",
        controller="c",
        instance="i",
        event_time=JAN_1_2026,
        related=NODE,
        series=(3, JAN_1_2026 + 61.5),
    )
    assert event["related"]["name"] == "node-1"
    assert event["series"] == {"count": 3, "lastObservedTime": "2026-01-01T00:01:01.500000Z"}
    assert event["eventTime"] == "2026-01-01T00:00:00.000000Z"


def test_note_is_truncated_to_the_api_limit() -> None:
    event = build_event(
        CONFIG_MAP,
        "Normal",
        "R",
        "A",
        "x" * 5000,
        controller="c",
        instance="i",
        event_time=JAN_1_2026,
    )
    assert event["note"] == "x" * NOTE_LIMIT


def test_truncation_counts_bytes_and_never_splits_a_character() -> None:
    assert truncate_note("short") == "short"
    assert truncate_note("é" * 600) == "é" * 512  # 2 bytes each: exactly 1024 bytes
    cut = truncate_note("a" * 1023 + "é")
    assert cut == "a" * 1023
    assert len(truncate_note("🙂" * 300).encode()) == 1024


def test_event_names() -> None:
    first, second = event_name("settings"), event_name("settings")
    assert NAME.match(first) and first.startswith("settings.")
    assert first != second  # random suffixes

    rbac = NAME.match(event_name("system:controller:Attach-Detach"))
    assert rbac is not None and rbac["stem"] == "system-controller-attach-detach"

    long = event_name("a" * 250 + "-b")
    assert len(long) == 253
    assert NAME.match(long)

    edge = NAME.match(event_name("a" * 235 + "-x"))  # the cut lands on the dash: dropped
    assert edge is not None and edge["stem"] == "a" * 235

    assert event_name("").startswith("event.")


def test_micro_time_is_utc_with_microseconds() -> None:
    assert micro_time(0.5) == "1970-01-01T00:00:00.500000Z"
    assert micro_time(JAN_1_2026 + 3723.000001) == "2026-01-01T01:02:03.000001Z"


def test_object_reference_leaves_out_what_the_object_lacks() -> None:
    assert object_reference({"kind": "Thing", "metadata": {"name": "t"}}) == {
        "kind": "Thing",
        "name": "t",
    }


# -- series decisions --------------------------------------------------------------------------


def test_a_repeat_within_five_minutes_of_the_last_joins_the_series() -> None:
    clock = FakeClock(JAN_1_2026)
    tracker = SeriesTracker(clock=clock)
    key = ("uid", "Failed", "boom")
    first = tracker.observe(key, "obj")
    assert (first.count, first.first_observed) == (1, JAN_1_2026)
    clock.advance(299.9)
    second = tracker.observe(key, "obj")
    assert second.name == first.name
    assert (second.count, second.first_observed, second.last_observed) == (
        2,
        JAN_1_2026,
        JAN_1_2026 + 299.9,
    )
    # The window slides from the last occurrence, not the first.
    clock.advance(299.9)
    assert tracker.observe(key, "obj").count == 3


def test_a_repeat_five_minutes_after_the_last_starts_a_new_event() -> None:
    clock = FakeClock(JAN_1_2026)
    tracker = SeriesTracker(clock=clock)
    key = ("uid", "Failed", "boom")
    first_name = tracker.observe(key, "obj").name
    clock.advance(300)
    fresh = tracker.observe(key, "obj")
    assert fresh.count == 1
    assert fresh.name != first_name
    assert fresh.first_observed == JAN_1_2026 + 300


def test_different_reason_note_or_object_are_different_series() -> None:
    tracker = SeriesTracker(clock=FakeClock(JAN_1_2026))
    keys = [("a", "R", "n"), ("a", "R", "other note"), ("a", "Other", "n"), ("b", "R", "n")]
    assert [tracker.observe(k, "obj").count for k in keys] == [1, 1, 1, 1]
    assert len(tracker) == 4


def test_expired_and_excess_series_are_forgotten() -> None:
    clock = FakeClock(JAN_1_2026)
    tracker = SeriesTracker(clock=clock, max_entries=2)
    tracker.observe(("a", "R", "n"), "a")
    tracker.observe(("b", "R", "n"), "b")
    tracker.observe(("c", "R", "n"), "c")
    assert len(tracker) == 2
    assert tracker.observe(("a", "R", "n"), "a").count == 1  # "a" was dropped
    clock.advance(300)
    tracker.observe(("d", "R", "n"), "d")
    assert len(tracker) == 1  # everything older than the window is gone


# -- the recorder ------------------------------------------------------------------------------


class FakeEvents:
    """Stores Events like the API server would; writes are slow enough to overlap."""

    def __init__(self) -> None:
        self.stored: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.fail_creates = 0
        self.open = asyncio.Event()  # a create waits for it: the API server is slow
        self.open.set()
        self.in_flight = self.most_in_flight = 0

    async def create(self, resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        assert resource.kind == "Event"
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.01)
            await self.open.wait()
        finally:
            self.in_flight -= 1
        self.calls.append(("create", obj["metadata"]["name"]))
        if self.fail_creates:
            self.fail_creates -= 1
            raise ForbiddenError(403, {"message": "no"}, method="POST", path="/events")
        self.stored[obj["metadata"]["namespace"], obj["metadata"]["name"]] = obj
        return obj

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
    ) -> dict[str, Any]:
        assert (resource.kind, patch_type) == ("Event", "merge")
        self.calls.append(("patch", name))
        key = (namespace or "", name)
        if key not in self.stored:
            raise NotFoundError(404, {}, method="PATCH", path=name)
        self.stored[key] = {**self.stored[key], **patch}
        return self.stored[key]


def recorder() -> tuple[EventRecorder, FakeEvents, FakeClock]:
    client, clock = FakeEvents(), FakeClock(JAN_1_2026)
    return EventRecorder(client, "crewlet-operator", clock=clock), client, clock


async def test_record_creates_an_event_in_the_background() -> None:
    rec, client, _ = recorder()
    rec.record(CONFIG_MAP, "Normal", "Synced", "Reconcile", "all good")
    assert client.calls == []  # nothing written yet: record() does not wait
    await rec.flush()
    ((_, event),) = client.stored.items()
    assert event["reason"] == "Synced"
    assert event["reportingController"] == "crewlet-operator"
    assert event["reportingInstance"] == f"crewlet-operator-{socket.gethostname()}"
    assert event["eventTime"] == "2026-01-01T00:00:00.000000Z"


def test_default_instance_is_cut_to_128_characters() -> None:
    rec = EventRecorder(FakeEvents(), "c" * 200)
    assert rec.instance == "c" * 128
    assert EventRecorder(FakeEvents(), "c", "pod-7").instance == "pod-7"


async def test_repeats_patch_the_series_of_one_event_after_its_create() -> None:
    rec, client, clock = recorder()
    for _ in range(3):
        rec.record(CONFIG_MAP, "Warning", "Failed", "Reconcile", "boom")
        clock.advance(10)
    await rec.flush()
    ((_, event),) = client.stored.items()
    name = event["metadata"]["name"]
    assert client.calls == [("create", name), ("patch", name), ("patch", name)]
    assert event["series"] == {"count": 3, "lastObservedTime": "2026-01-01T00:00:20.000000Z"}


async def test_a_repeat_after_the_window_is_a_new_event() -> None:
    rec, client, clock = recorder()
    rec.record(CONFIG_MAP, "Warning", "Failed", "Reconcile", "boom")
    clock.advance(300)
    rec.record(CONFIG_MAP, "Warning", "Failed", "Reconcile", "boom")
    await rec.flush()
    assert [call for call, _ in client.calls] == ["create", "create"]
    assert len(client.stored) == 2


async def test_a_vanished_event_is_created_again_with_its_series() -> None:
    rec, client, _ = recorder()
    rec.record(CONFIG_MAP, "Warning", "Failed", "Reconcile", "boom")
    await rec.flush()
    client.stored.clear()  # expired on the server
    rec.record(CONFIG_MAP, "Warning", "Failed", "Reconcile", "boom")
    await rec.flush()
    ((_, event),) = client.stored.items()
    assert [call for call, _ in client.calls] == ["create", "patch", "create"]
    assert event["series"]["count"] == 2


async def test_failures_are_logged_at_debug_and_never_raised() -> None:
    rec, client, _ = recorder()
    client.fail_creates = 1
    with capture_logs() as logs:
        rec.record(CONFIG_MAP, "Warning", "Failed", "Reconcile", "boom")
        await rec.flush()
    assert client.stored == {}
    assert [(e["log_level"], e["event"]) for e in logs] == [("debug", "could not write an event")]


def test_record_outside_an_event_loop_does_not_raise() -> None:
    rec, client, _ = recorder()
    with capture_logs() as logs:
        rec.record(CONFIG_MAP, "Normal", "Synced", "Reconcile", "fine")
    assert client.calls == []
    assert logs[0]["log_level"] == "debug"


async def test_flush_with_nothing_pending_returns() -> None:
    rec, _, _ = recorder()
    await asyncio.wait_for(rec.flush(), 1)


def _regarding(client: FakeEvents) -> list[str]:
    return sorted(e["regarding"]["name"] for e in client.stored.values())


def _config_map(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "uid": name}}


async def test_at_most_max_in_flight_events_are_written_at_once() -> None:
    # client-go writes Events one at a time; unbounded, a slow API server held a connection
    # for each, and the status writes they announced queued for one.
    rec, client, _ = recorder()
    client.open.clear()
    for i in range(3 * MAX_IN_FLIGHT):
        rec.record(_config_map(f"cm-{i}"), "Normal", "Synced", "Reconcile", "fine")
    await asyncio.sleep(0.05)
    assert client.in_flight == MAX_IN_FLIGHT
    client.open.set()
    await rec.flush()
    assert client.most_in_flight == MAX_IN_FLIGHT
    assert len(client.stored) == 3 * MAX_IN_FLIGHT


async def test_writes_share_the_write_slots_they_are_given() -> None:
    # The operator hands its children's apply slots: narrowed while verdicts wait, the Events
    # give way with the applies.
    client = FakeEvents()
    shared = asyncio.Semaphore(2)
    rec = EventRecorder(client, "crewlet-operator", write_slots=shared)
    client.open.clear()
    for i in range(MAX_IN_FLIGHT):
        rec.record(_config_map(f"cm-{i}"), "Normal", "Synced", "Reconcile", "fine")
    await asyncio.sleep(0.05)
    assert client.in_flight == 2
    client.open.set()
    await rec.flush()
    assert client.most_in_flight == 2
    assert len(client.stored) == MAX_IN_FLIGHT


async def test_events_beyond_max_queued_are_dropped_and_counted() -> None:
    client = FakeEvents()
    rec = EventRecorder(client, "unit-drops", max_in_flight=1, max_queued=2)

    def dropped() -> float | None:
        return metrics.REGISTRY.get_sample_value(
            "crewlet_operator_events_dropped_total", {"controller": "unit-drops"}
        )

    assert dropped() == 0
    client.open.clear()
    with capture_logs() as logs:
        for i in range(5):
            rec.record(_config_map(f"cm-{i}"), "Normal", "Synced", "Reconcile", "fine")
    client.open.set()
    await rec.flush()
    assert _regarding(client) == ["cm-0", "cm-1"]  # the first two waited
    assert dropped() == 3
    assert [e["event"] for e in logs] == ["dropped an event: too many waiting to be written"] * 3


async def test_an_event_recorded_after_a_flush_is_written() -> None:
    rec, client, _ = recorder()
    rec.record(_config_map("first"), "Normal", "Synced", "Reconcile", "fine")
    await rec.flush()
    rec.record(_config_map("second"), "Normal", "Synced", "Reconcile", "fine")
    await rec.flush()
    assert _regarding(client) == ["first", "second"]


def test_a_recorder_needs_room_for_one_event() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        EventRecorder(FakeEvents(), "c", max_in_flight=0)
