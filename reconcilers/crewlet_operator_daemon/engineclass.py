"""An EngineClass's status, decided: whether its Secret references resolve, and its companies.

A pure function, as the Company's reconcile is: the controller reads the referenced Secrets and
counts the class's companies, calls :func:`class_status`, and writes what it returns.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime
from typing import NamedTuple

from crewlet_operator import KubeObject as Object
from crewlet_operator import condition, set_condition
from crewlet_operator.objects import generation as object_generation
from crewlet_operator_daemon.api.conditions import (
    REFERENCES_RESOLVED,
    SECRET_NOT_FOUND,
    SECRET_UNREADABLE,
)
from crewlet_operator_daemon.references import secret_refs

COUNT_INTERVAL = 1.0
"""Seconds between two writes of a class's status that change only its companies count: a
burst of creates would otherwise write it about once per company (a fourteenth of a burst's
writes, measured), and the count is a figure for people, not for controllers."""

SecretRef = tuple[str, str]
"""A Secret's ``(namespace, name)``."""


class ClassStatus(NamedTuple):
    """What to do with a class's status: write ``status``, or look again after a while."""

    status: Object | None
    """The status to write, or None when nothing is to be written now."""
    requeue_after: float | None
    """Seconds until the count alone may be written, when it is held back."""


def class_status(
    engine_class: Object,
    secrets: Mapping[SecretRef, Object | None],
    unreadable: Collection[SecretRef],
    *,
    companies: int,
    last_written: float | None,
    monotonic_now: float,
    now: datetime | None = None,
) -> ClassStatus:
    """Decide the status of ``engine_class``; pure, no I/O.

    ``secrets`` maps each referenced Secret to it, or to None when it does not exist;
    ``unreadable`` holds those the operator may not read. ``companies`` is how many Companies
    name the class. ``last_written`` is when its status was last written (monotonic seconds,
    None if never), ``monotonic_now`` the same clock now: a change of the count alone is
    written at most once per :data:`COUNT_INTERVAL`, a change of the condition at once.
    ``now`` stamps the condition when it flips (default: the current time).
    """
    old = engine_class.get("status") or {}
    resolved = _references_resolved(engine_class, secrets, unreadable)
    status: Object = {
        "companies": companies,
        "conditions": set_condition(old.get("conditions") or [], resolved, now),
    }
    if status["conditions"] == old.get("conditions"):
        if companies == old.get("companies", 0):
            return ClassStatus(None, None)
        if last_written is not None and monotonic_now < last_written + COUNT_INTERVAL:
            return ClassStatus(None, last_written + COUNT_INTERVAL - monotonic_now)
    return ClassStatus(status, None)


def _references_resolved(
    engine_class: Object,
    secrets: Mapping[SecretRef, Object | None],
    unreadable: Collection[SecretRef],
) -> Object:
    """``ReferencesResolved``: unreadable Secrets first (nothing else can be told of them), then
    missing Secrets or keys, each named ``namespace/name[key]``."""
    missing: list[str] = []
    denied: list[str] = []
    for ref in secret_refs(engine_class):
        where = f"{ref.namespace}/{ref.name}[{ref.key}]"
        if (ref.namespace, ref.name) in unreadable:
            denied.append(where)
            continue
        secret = secrets.get((ref.namespace, ref.name))
        if secret is None or ref.key not in (secret.get("data") or {}):
            missing.append(where)
    generation = object_generation(engine_class)
    if denied:
        return dict(
            condition(
                REFERENCES_RESOLVED,
                False,
                SECRET_UNREADABLE,
                "the operator may not read Secrets: " + ", ".join(denied),
                observed_generation=generation,
            )
        )
    if missing:
        return dict(
            condition(
                REFERENCES_RESOLVED,
                False,
                SECRET_NOT_FOUND,
                "missing Secret keys: " + ", ".join(missing),
                observed_generation=generation,
            )
        )
    return dict(
        condition(
            REFERENCES_RESOLVED,
            True,
            "Resolved",
            "every referenced Secret key exists",
            observed_generation=generation,
        )
    )
