"""Status conditions: metav1.Condition semantics."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from crewlet_operator.conditions import (
    MAX_MESSAGE_LENGTH,
    condition,
    find_condition,
    format_time,
    is_condition_false,
    is_condition_status,
    is_condition_true,
    remove_condition,
    set_condition,
    validate_condition,
)

T0 = datetime(2025, 1, 31, 12, 0, 0, 123456, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)
T2 = T0 + timedelta(hours=1)


def test_new_condition_is_appended_with_transition_time_now() -> None:
    result = set_condition([], condition("Ready", False, "Provisioning", "waiting"), now=T0)
    assert result == [
        {
            "type": "Ready",
            "status": "False",
            "lastTransitionTime": "2025-01-31T12:00:00Z",
            "reason": "Provisioning",
            "message": "waiting",
        }
    ]


def test_none_conditions_is_an_empty_list() -> None:
    assert len(set_condition(None, condition("Ready", True, "Ok"), now=T0)) == 1


def test_default_now_is_the_current_utc_time() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    [cond] = set_condition([], condition("Ready", True, "Ok"))
    stamp = datetime.strptime(cond["lastTransitionTime"], "%Y-%m-%dT%H:%M:%S%z")
    assert before <= stamp <= datetime.now(UTC)


def test_same_status_keeps_transition_time_but_updates_the_rest() -> None:
    first = set_condition(
        [], condition("Ready", False, "Provisioning", "1 of 3", observed_generation=1), now=T0
    )
    second = set_condition(
        first, condition("Ready", False, "Scaling", "2 of 3", observed_generation=2), now=T1
    )
    assert second == [
        {
            "type": "Ready",
            "status": "False",
            "observedGeneration": 2,
            "lastTransitionTime": "2025-01-31T12:00:00Z",
            "reason": "Scaling",
            "message": "2 of 3",
        }
    ]


def test_status_flip_moves_transition_time() -> None:
    first = set_condition([], condition("Ready", False, "Provisioning"), now=T0)
    second = set_condition(first, condition("Ready", True, "Available"), now=T1)
    third = set_condition(second, condition("Ready", True, "Available", "still"), now=T2)
    assert first[0]["lastTransitionTime"] == "2025-01-31T12:00:00Z"
    assert second[0]["lastTransitionTime"] == "2025-01-31T12:05:00Z"
    assert third[0]["lastTransitionTime"] == "2025-01-31T12:05:00Z"
    assert third[0]["message"] == "still"


def test_flip_to_unknown_moves_transition_time() -> None:
    first = set_condition([], condition("Ready", True, "Available"), now=T0)
    second = set_condition(first, condition("Ready", "Unknown", "Lost"), now=T1)
    assert second[0]["status"] == "Unknown"
    assert second[0]["lastTransitionTime"] == format_time(T1)


def test_explicit_transition_time_is_used_on_flip_and_ignored_otherwise() -> None:
    given = {**condition("Ready", True, "Ok"), "lastTransitionTime": T2}
    fresh = set_condition([], given, now=T0)
    assert fresh[0]["lastTransitionTime"] == format_time(T2)
    same = set_condition(fresh, {**given, "lastTransitionTime": "2030-01-01T00:00:00Z"}, now=T0)
    assert same[0]["lastTransitionTime"] == format_time(T2)


def test_re_asserting_the_same_condition_changes_nothing() -> None:
    first = set_condition([], condition("Ready", True, "Ok", observed_generation=4), now=T0)
    again = set_condition(first, condition("Ready", True, "Ok", observed_generation=4), now=T2)
    assert again == first


def test_missing_observed_generation_clears_it_like_the_go_zero_value() -> None:
    first = set_condition([], condition("Ready", True, "Ok", observed_generation=4), now=T0)
    second = set_condition(first, condition("Ready", True, "Ok"), now=T1)
    assert "observedGeneration" not in second[0]


def test_order_is_preserved_and_new_types_are_appended() -> None:
    conditions: list[dict[str, Any]] = []
    for ctype in ("Available", "Progressing", "Degraded"):
        conditions = set_condition(conditions, condition(ctype, False, "Init"), now=T0)
    conditions = set_condition(conditions, condition("Progressing", True, "Rolling"), now=T1)
    conditions = set_condition(conditions, condition("Ready", True, "Ok"), now=T1)
    assert [c["type"] for c in conditions] == ["Available", "Progressing", "Degraded", "Ready"]
    assert conditions[1]["status"] == "True"


def test_input_is_not_mutated() -> None:
    original = set_condition([], condition("Ready", False, "Init"), now=T0)
    snapshot = copy.deepcopy(original)
    result = set_condition(original, condition("Ready", True, "Ok"), now=T1)
    assert original == snapshot
    assert result[0] is not original[0]


def test_unknown_fields_of_other_conditions_survive() -> None:
    other = {"type": "Custom", "status": "True", "reason": "X", "message": "", "extra": 1}
    result = set_condition([other], condition("Ready", True, "Ok"), now=T0)
    assert result[0] == other


@pytest.mark.parametrize(
    "reason",
    ["Available", "A", "Scaling_Up", "Reason:Detail", "Foo,Bar", "Has9Digits", "x_"],
)
def test_valid_reasons(reason: str) -> None:
    assert condition("Ready", True, reason)["reason"] == reason


@pytest.mark.parametrize(
    "reason",
    [
        "",
        "9Lives",
        "_Leading",
        "Trailing:",
        "Trailing,",
        "has space",
        "dash-ed",
        "dot.ted",
        "R" * 1025,
    ],
)
def test_invalid_reasons_are_rejected(reason: str) -> None:
    with pytest.raises(ValueError, match="reason"):
        condition("Ready", True, reason)
    with pytest.raises(ValueError, match="reason"):
        set_condition([], {"type": "Ready", "status": "True", "reason": reason, "message": ""})


def test_reason_at_the_length_limit_is_accepted() -> None:
    assert condition("Ready", True, "R" * 1024)["reason"] == "R" * 1024


@pytest.mark.parametrize("status", ["true", "Yes", "", None, True])
def test_invalid_status_is_rejected(status: Any) -> None:
    with pytest.raises(ValueError, match="status"):
        validate_condition({"type": "Ready", "status": status, "reason": "Ok"})


@pytest.mark.parametrize("ctype", ["", "has space", "-Ready", "Ready-", "UPPER.example.com/Ready"])
def test_invalid_type_is_rejected(ctype: str) -> None:
    with pytest.raises(ValueError, match="type"):
        condition(ctype, True, "Ok")


@pytest.mark.parametrize("ctype", ["Ready", "crewlet.dev/Synced", "pod-ready", "a.b_c"])
def test_valid_types(ctype: str) -> None:
    assert condition(ctype, True, "Ok")["type"] == ctype


@pytest.mark.parametrize("generation", [-1, "3", 1.5, True])
def test_invalid_observed_generation_is_rejected(generation: Any) -> None:
    cond = {"type": "Ready", "status": "True", "reason": "Ok", "observedGeneration": generation}
    with pytest.raises(ValueError, match="observedGeneration"):
        validate_condition(cond)


def test_long_message_is_truncated() -> None:
    [cond] = set_condition([], condition("Ready", False, "Failed", "x" * 40000), now=T0)
    assert len(cond["message"]) == MAX_MESSAGE_LENGTH == 32768


def test_message_at_the_limit_is_kept_whole() -> None:
    assert len(condition("Ready", False, "Failed", "é" * 32768)["message"]) == 32768


def test_non_string_message_is_rejected() -> None:
    with pytest.raises(ValueError, match="message"):
        validate_condition({"type": "Ready", "status": "True", "reason": "Ok", "message": 3})


def test_missing_message_becomes_empty() -> None:
    assert validate_condition({"type": "Ready", "status": "True", "reason": "Ok"})["message"] == ""


def test_condition_accepts_bool_and_string_status() -> None:
    assert condition("Ready", True, "Ok")["status"] == "True"
    assert condition("Ready", False, "Ok")["status"] == "False"
    assert condition("Ready", "Unknown", "Ok")["status"] == "Unknown"


def test_format_time_is_utc_seconds_with_z() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert format_time(datetime(2025, 1, 31, 14, 0, 59, 999999, tzinfo=plus_two)) == (
        "2025-01-31T12:00:59Z"
    )
    assert format_time(datetime(2025, 1, 31, 12, 0, 0)) == "2025-01-31T12:00:00Z"


def test_find_and_status_queries() -> None:
    conditions = set_condition([], condition("Ready", True, "Ok"), now=T0)
    conditions = set_condition(conditions, condition("Degraded", False, "Fine"), now=T0)
    found = find_condition(conditions, "Ready")
    assert found is not None
    assert found["reason"] == "Ok"
    assert find_condition(conditions, "Missing") is None
    assert find_condition(None, "Ready") is None
    assert is_condition_true(conditions, "Ready")
    assert not is_condition_true(conditions, "Degraded")
    assert is_condition_false(conditions, "Degraded")
    assert not is_condition_false(conditions, "Missing")
    assert not is_condition_true(conditions, "Missing")
    assert not is_condition_status(conditions, "Missing", "Unknown")
    assert is_condition_status(conditions, "Ready", "True")


def test_find_condition_returns_a_copy() -> None:
    conditions = set_condition([], condition("Ready", True, "Ok"), now=T0)
    found = find_condition(conditions, "Ready")
    assert found is not None
    found["status"] = "False"
    assert conditions[0]["status"] == "True"


def test_remove_condition() -> None:
    conditions: list[dict[str, Any]] = []
    for ctype in ("A", "B", "C"):
        conditions = set_condition(conditions, condition(ctype, True, "Ok"), now=T0)
    removed = remove_condition(conditions, "B")
    assert [c["type"] for c in removed] == ["A", "C"]
    assert len(conditions) == 3
    assert remove_condition(removed, "Missing") == removed
    assert remove_condition(None, "A") == []
