"""An EngineClass's status: its ReferencesResolved condition and its companies count, decided."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from crewlet_operator import find_condition
from crewlet_operator_daemon.api.conditions import REFERENCES_RESOLVED
from crewlet_operator_daemon.engineclass import COUNT_INTERVAL, class_status

Object = dict[str, Any]

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(hours=1)
KEYS = ("platform", "model-keys")
TELEMETRY = ("platform", "telemetry")
SECRETS: dict[tuple[str, str], Object | None] = {
    KEYS: {"metadata": {"name": "model-keys"}, "data": {"anthropic": "c2stYW50"}},
    TELEMETRY: {"metadata": {"name": "telemetry"}, "data": {"headers": "eC1rZXk9dg=="}},
}


def ref(name: str, key: str) -> Object:
    return {"namespace": "platform", "name": name, "key": key}


def make_class(status: Object | None = None) -> Object:
    engine_class: Object = {
        "apiVersion": "crewlet.ai/v1alpha1",
        "kind": "EngineClass",
        "metadata": {"name": "standard", "generation": 4},
        "spec": {
            "engine": {"image": "ghcr.io/crewlet/crewlet-operator/engine:v0.2.0"},
            "modelKeys": [
                {
                    "name": "ANTHROPIC_API_KEY",
                    "secretRef": {
                        "namespace": "platform",
                        "name": "model-keys",
                        "key": "anthropic",
                    },
                }
            ],
            "telemetry": {
                "endpoint": "http://otel-collector.observability:4318",
                "headers": ref("telemetry", "headers"),
            },
        },
    }
    if status is not None:
        engine_class["status"] = status
    return engine_class


def resolved(status: Object | None) -> Object:
    assert status is not None
    found = find_condition(status["conditions"], REFERENCES_RESOLVED)
    assert found is not None
    return dict(found)


def written(engine_class: Object) -> Object:
    """The class as it reads once the status decided for it (three companies) is written."""
    decision = class_status(
        engine_class, SECRETS, set(), companies=3, last_written=None, monotonic_now=100.0, now=NOW
    )
    assert decision.status is not None
    return {**engine_class, "status": decision.status}


def test_every_key_present_is_resolved_and_counts_the_companies() -> None:
    decision = class_status(
        make_class(), SECRETS, set(), companies=3, last_written=None, monotonic_now=100.0, now=NOW
    )
    assert decision.requeue_after is None
    assert decision.status is not None
    assert decision.status["companies"] == 3
    condition = resolved(decision.status)
    assert (condition["status"], condition["reason"]) == ("True", "Resolved")
    assert condition["observedGeneration"] == 4
    assert condition["lastTransitionTime"] == "2026-01-01T12:00:00Z"


@pytest.mark.parametrize(
    ("secrets", "missing"),
    [
        ({KEYS: None, TELEMETRY: SECRETS[TELEMETRY]}, "platform/model-keys[anthropic]"),
        (
            {KEYS: {"metadata": {"name": "model-keys"}, "data": {}}, TELEMETRY: None},
            "platform/model-keys[anthropic], platform/telemetry[headers]",
        ),
    ],
    ids=["no-secret", "no-key"],
)
def test_a_missing_secret_or_key_is_secret_not_found(
    secrets: dict[tuple[str, str], Object | None], missing: str
) -> None:
    decision = class_status(
        make_class(), secrets, set(), companies=0, last_written=None, monotonic_now=100.0, now=NOW
    )
    condition = resolved(decision.status)
    assert (condition["status"], condition["reason"]) == ("False", "SecretNotFound")
    assert condition["message"] == f"missing Secret keys: {missing}"


def test_an_unreadable_secret_is_reported_before_a_missing_one() -> None:
    decision = class_status(
        make_class(),
        {KEYS: None},
        {TELEMETRY},
        companies=0,
        last_written=None,
        monotonic_now=100.0,
        now=NOW,
    )
    condition = resolved(decision.status)
    assert (condition["status"], condition["reason"]) == ("False", "SecretUnreadable")
    assert condition["message"] == "the operator may not read Secrets: platform/telemetry[headers]"


def test_an_unchanged_status_is_not_written() -> None:
    engine_class = written(make_class())
    decision = class_status(
        engine_class, SECRETS, set(), companies=3, last_written=100.0, monotonic_now=100.2
    )
    assert decision == (None, None)


def test_a_count_change_within_the_interval_waits_for_the_rest_of_it() -> None:
    engine_class = written(make_class())
    decision = class_status(
        engine_class, SECRETS, set(), companies=4, last_written=100.0, monotonic_now=100.25
    )
    assert decision.status is None
    assert decision.requeue_after == pytest.approx(COUNT_INTERVAL - 0.25)


def test_a_count_change_after_the_interval_is_written() -> None:
    engine_class = written(make_class())
    decision = class_status(
        engine_class,
        SECRETS,
        set(),
        companies=4,
        last_written=100.0,
        monotonic_now=100.0 + COUNT_INTERVAL,
        now=LATER,
    )
    assert decision.requeue_after is None
    assert decision.status is not None
    assert decision.status["companies"] == 4
    assert decision.status["conditions"] == engine_class["status"]["conditions"]


def test_a_count_change_of_a_class_never_written_is_written() -> None:
    engine_class = written(make_class())
    decision = class_status(
        engine_class, SECRETS, set(), companies=4, last_written=None, monotonic_now=0.0
    )
    assert decision.status is not None
    assert decision.status["companies"] == 4


def test_a_condition_change_is_written_at_once_even_within_the_interval() -> None:
    engine_class = written(make_class())
    decision = class_status(
        engine_class,
        {KEYS: None, TELEMETRY: SECRETS[TELEMETRY]},
        set(),
        companies=4,
        last_written=100.0,
        monotonic_now=100.1,
        now=LATER,
    )
    assert decision.requeue_after is None
    condition = resolved(decision.status)
    assert (condition["reason"], condition["lastTransitionTime"]) == (
        "SecretNotFound",
        "2026-01-01T13:00:00Z",
    )
    assert decision.status is not None and decision.status["companies"] == 4


def test_a_new_generation_is_written_even_with_the_same_verdict() -> None:
    engine_class = written(make_class())
    edited = copy.deepcopy(engine_class)
    edited["metadata"]["generation"] = 5
    decision = class_status(
        edited, SECRETS, set(), companies=3, last_written=100.0, monotonic_now=100.1, now=LATER
    )
    condition = resolved(decision.status)
    assert condition["observedGeneration"] == 5
    assert condition["lastTransitionTime"] == "2026-01-01T12:00:00Z"  # no flip, no new time


def test_a_class_with_no_status_and_no_companies_is_written() -> None:
    decision = class_status(
        make_class(status={}),
        SECRETS,
        set(),
        companies=0,
        last_written=None,
        monotonic_now=100.0,
        now=NOW,
    )
    assert decision.status is not None
    assert decision.status["companies"] == 0
