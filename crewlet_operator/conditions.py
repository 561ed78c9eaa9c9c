"""Status conditions with the semantics of ``metav1.Condition``.

Conditions live in ``status.conditions`` as a list of plain dicts, one per ``type``. The helpers
here mirror ``k8s.io/apimachinery/pkg/api/meta/conditions.go`` and never mutate their input::

    >>> conditions = set_condition([], condition("Ready", False, "Provisioning", "waiting"))
    >>> conditions = set_condition(conditions, condition("Ready", True, "Available"))
    >>> is_condition_true(conditions, "Ready")
    True

``lastTransitionTime`` moves only when a condition appears or its ``status`` flips, so a reconcile
that re-asserts the same status writes the same dict and :func:`~crewlet_operator.diff.needs_apply`
sees nothing to do. Every write path validates the condition the way the API server's schema for
``metav1.Condition`` would, so a bad ``reason`` fails in the reconciler, not as a 422.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = [
    "Condition",
    "condition",
    "find_condition",
    "format_time",
    "is_condition_false",
    "is_condition_status",
    "is_condition_true",
    "remove_condition",
    "set_condition",
    "validate_condition",
]

ConditionStatus = Literal["True", "False", "Unknown"]

MAX_MESSAGE_LENGTH = 32768
"""``message`` is truncated to this many characters (the schema's ``maxLength``)."""

MAX_REASON_LENGTH = 1024
MAX_TYPE_LENGTH = 316

_REASON_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
# A qualified name: an optional DNS-subdomain prefix and a "/", then the name proper.
_TYPE_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
_STATUSES: frozenset[str] = frozenset({"True", "False", "Unknown"})


class Condition(TypedDict):
    """One entry of ``status.conditions``, exactly as it is serialised."""

    type: str
    status: ConditionStatus
    observedGeneration: NotRequired[int]
    lastTransitionTime: NotRequired[str]
    """RFC 3339 in UTC with seconds precision, e.g. ``"2025-01-31T12:00:00Z"``."""
    reason: str
    message: str


def format_time(moment: datetime) -> str:
    """Format ``moment`` as ``metav1.Time`` does: RFC 3339, UTC, whole seconds, ``"Z"``.

    A naive datetime is taken to be in UTC already.
    """
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(
    type: str,
    status: bool | ConditionStatus,
    reason: str,
    message: str = "",
    *,
    observed_generation: int | None = None,
) -> Condition:
    """Build a validated condition without a ``lastTransitionTime`` (:func:`set_condition` adds it).

    ``status`` may be a ``bool`` for the common ``"True"``/``"False"`` case. Typically
    ``observed_generation`` is the reconciled object's ``metadata.generation``.
    """
    if isinstance(status, bool):
        status = "True" if status else "False"
    new: Condition = {"type": type, "status": status, "reason": reason, "message": message}
    if observed_generation is not None:
        new["observedGeneration"] = observed_generation
    return validate_condition(new)


def validate_condition(cond: Mapping[str, Any]) -> Condition:
    """Check ``cond`` against the ``metav1.Condition`` schema and return a normalised copy.

    ``message`` is truncated to :data:`MAX_MESSAGE_LENGTH` characters; everything else that the
    API server would reject raises :class:`ValueError`.
    """
    ctype = cond.get("type")
    if not isinstance(ctype, str) or len(ctype) > MAX_TYPE_LENGTH or not _TYPE_RE.match(ctype):
        raise ValueError(f"condition type {ctype!r} is not a qualified name like 'Ready'")
    status = cond.get("status")
    if status not in _STATUSES:
        raise ValueError(f"condition {ctype}: status {status!r} is not True, False or Unknown")
    reason = cond.get("reason")
    if (
        not isinstance(reason, str)
        or len(reason) > MAX_REASON_LENGTH
        or not _REASON_RE.match(reason)
    ):
        raise ValueError(
            f"condition {ctype}: reason {reason!r} must be a non-empty CamelCase identifier "
            f"(letters, digits, '_', ',' and ':'; starting with a letter) of at most "
            f"{MAX_REASON_LENGTH} characters"
        )
    message = cond.get("message") or ""
    if not isinstance(message, str):
        raise ValueError(f"condition {ctype}: message must be a string, not {message!r}")
    result: Condition = {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message[:MAX_MESSAGE_LENGTH],
    }
    generation = cond.get("observedGeneration")
    if generation is not None:
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
            raise ValueError(
                f"condition {ctype}: observedGeneration must be a non-negative integer, "
                f"not {generation!r}"
            )
        result["observedGeneration"] = generation
    transition = cond.get("lastTransitionTime")
    if isinstance(transition, datetime):
        result["lastTransitionTime"] = format_time(transition)
    elif transition:
        result["lastTransitionTime"] = str(transition)
    return result


def find_condition(
    conditions: Sequence[Mapping[str, Any]] | None, type: str
) -> dict[str, Any] | None:
    """Return a copy of the condition of the given ``type``, or ``None``."""
    for cond in conditions or ():
        if cond.get("type") == type:
            return dict(cond)
    return None


def is_condition_true(conditions: Sequence[Mapping[str, Any]] | None, type: str) -> bool:
    """Whether the condition ``type`` is present with status ``"True"``."""
    return is_condition_status(conditions, type, "True")


def is_condition_false(conditions: Sequence[Mapping[str, Any]] | None, type: str) -> bool:
    """Whether the condition ``type`` is present with status ``"False"``."""
    return is_condition_status(conditions, type, "False")


def is_condition_status(
    conditions: Sequence[Mapping[str, Any]] | None, type: str, status: ConditionStatus
) -> bool:
    """Whether the condition ``type`` is present with the given ``status``.

    A missing condition matches no status, ``"Unknown"`` included.
    """
    found = find_condition(conditions, type)
    return found is not None and found.get("status") == status


def set_condition(
    conditions: Sequence[Mapping[str, Any]] | None,
    new: Mapping[str, Any],
    now: datetime | None = None,
) -> list[dict[str, Any]]:
    """Return ``conditions`` with ``new`` set, as ``meta.SetStatusCondition`` does.

    - A new ``type`` is appended, stamped with ``new["lastTransitionTime"]`` if given, else
      ``now`` (default: the current time).
    - An existing ``type`` stays at its position. Its ``lastTransitionTime`` changes only when
      ``status`` flips; ``reason``, ``message`` and ``observedGeneration`` are taken from ``new``
      (a ``new`` without ``observedGeneration`` clears it, as the Go zero value does).

    The input list and its dicts are not mutated. To know whether anything changed, compare the
    result with the input: ``set_condition(old, c) != old``.

    Raises:
        ValueError: ``new`` is not a valid ``metav1.Condition`` (see :func:`validate_condition`).
    """
    cond: dict[str, Any] = dict(validate_condition(new))
    stamp = cond.pop("lastTransitionTime", None) or format_time(now or datetime.now(UTC))
    result: list[dict[str, Any]] = []
    found = False
    for existing in conditions or ():
        if existing.get("type") != cond["type"]:
            result.append(dict(existing))
            continue
        found = True
        previous = existing.get("lastTransitionTime")
        kept = previous if existing.get("status") == cond["status"] and previous else stamp
        result.append(_ordered(cond, kept))
    if not found:
        result.append(_ordered(cond, stamp))
    return result


def remove_condition(
    conditions: Sequence[Mapping[str, Any]] | None, type: str
) -> list[dict[str, Any]]:
    """Return ``conditions`` without the condition ``type`` (unchanged if it is absent)."""
    return [dict(c) for c in conditions or () if c.get("type") != type]


def _ordered(cond: Mapping[str, Any], transition: str) -> dict[str, Any]:
    # Field order as the API server serialises it, so dumped statuses read naturally.
    keys = ("type", "status", "observedGeneration", "lastTransitionTime", "reason", "message")
    full = {**cond, "lastTransitionTime": transition}
    return {k: full[k] for k in keys if k in full}
