"""A Company's status: its conditions (Accepted, Ready, Suspended) and its status fields.

``Accepted`` says whether the company runs as asked (and, when it does not, why and what to do);
``Ready`` whether its data pod serves; ``Suspended`` whether ``spec.suspend`` scaled it to zero.
The fields beside them say what runs: the engine image, its version, the highest version the
company's data has run and whether that image can be ordered at all.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import semver

from crewlet_operator import STATEFUL_SET, condition, find_condition, set_condition
from crewlet_operator import KubeObject as Object
from crewlet_operator.objects import generation as object_generation
from crewlet_operator.objects import name as object_name
from crewlet_operator_daemon import naming, versions
from crewlet_operator_daemon.api.conditions import ACCEPTED, READY, SUSPENDED
from crewlet_operator_daemon.children import Desired
from crewlet_operator_daemon.inputs import Inputs, Refused
from crewlet_operator_daemon.naming import DATA
from crewlet_operator_daemon.plan import Plan

# Reasons more than one condition gives.
_NOT_ACCEPTED = "NotAccepted"
_SUSPENDED_REASON = "Suspended"

Condition = dict[str, Any]
"""A condition as the status holds it (``metav1.Condition``)."""


def accepted_conditions(
    ctx: Inputs, desired: Desired, plan: Plan, now: datetime | None
) -> list[Condition]:
    """The conditions of a company that runs as asked, ``plan`` being what this reconcile
    writes; ``now`` stamps the conditions that flip (default: the current time)."""
    generation = object_generation(ctx.raw)
    suspended = ctx.company.spec.suspend
    data_name = naming.statefulset(ctx.name, DATA)
    applying = any(
        a.resource == STATEFUL_SET and object_name(a.object) == data_name for a in plan.applies
    )
    notes = [f"EngineClass {ctx.class_name} runs {desired.image}", *desired.notes]
    unordered = versions.unordered_note(desired.image)
    if unordered is not None:
        notes.append(unordered)
    return _set_all(
        (ctx.raw.get("status") or {}).get("conditions"),
        [
            condition(ACCEPTED, True, "Accepted", "; ".join(notes), observed_generation=generation),
            _ready(
                ctx.child(STATEFUL_SET, data_name),
                applying=applying,
                suspended=suspended,
                refused=False,
                generation=generation,
            ),
            _suspended(suspended, accepted=True, generation=generation),
        ],
        now,
    )


def refused_conditions(
    company: Object, data_statefulset: Object | None, refusal: Refused, now: datetime | None
) -> list[Condition]:
    """The conditions of a refused company, whose data StatefulSet is left as it is."""
    generation = object_generation(company)
    suspend = bool((company.get("spec") or {}).get("suspend"))
    return _set_all(
        (company.get("status") or {}).get("conditions"),
        [
            condition(
                ACCEPTED, False, refusal.reason, refusal.message, observed_generation=generation
            ),
            _ready(
                data_statefulset,
                applying=False,
                suspended=False,
                refused=True,
                generation=generation,
            ),
            _suspended(suspend, accepted=False, generation=generation),
        ],
        now,
    )


def _suspended(suspend: bool, *, accepted: bool, generation: int | None) -> Condition:
    """Suspended only when accepted: a refused company is left exactly as it is."""
    if not suspend:
        return dict(condition(SUSPENDED, False, "NotSuspended", "", observed_generation=generation))
    if accepted:
        return dict(
            condition(
                SUSPENDED,
                True,
                _SUSPENDED_REASON,
                "spec.suspend is set: every engine pod is scaled to zero; the data volume is kept",
                observed_generation=generation,
            )
        )
    return dict(
        condition(
            SUSPENDED,
            False,
            _NOT_ACCEPTED,
            "spec.suspend is set, but nothing is scaled while the company is not accepted "
            "(see the Accepted condition)",
            observed_generation=generation,
        )
    )


def _ready(
    sts: Object | None,
    *,
    applying: bool,
    suspended: bool,
    refused: bool,
    generation: int | None,
) -> Condition:
    """Ready when the data StatefulSet, as last applied, has a ready pod."""
    if suspended:
        return dict(
            condition(
                READY,
                False,
                _SUSPENDED_REASON,
                "the company is suspended",
                observed_generation=generation,
            )
        )
    if sts is None and refused:
        return dict(
            condition(
                READY,
                False,
                _NOT_ACCEPTED,
                "the company is not accepted (see the Accepted condition)",
                observed_generation=generation,
            )
        )
    status = (sts or {}).get("status") or {}
    current = sts is not None and (status.get("observedGeneration") or 0) >= (
        object_generation(sts) or 0
    )
    if applying or not current:
        # One message whether the StatefulSet is being created or changed: the reconcile that
        # applies it and the one that next finds it, not yet rolled out, decide the same status.
        return dict(
            condition(
                READY,
                False,
                "Progressing",
                "the data StatefulSet is rolling out",
                observed_generation=generation,
            )
        )
    if (status.get("readyReplicas") or 0) < 1:
        return dict(
            condition(
                READY,
                False,
                "DataNotReady",
                "the data pod is not ready yet (it answers /ready 503 while it "
                "starts, and until the company's first revision is applied)",
                observed_generation=generation,
            )
        )
    return dict(
        condition(READY, True, "DataReady", "the data pod is ready", observed_generation=generation)
    )


def _set_all(old: list[Condition] | None, new: list[Any], now: datetime | None) -> list[Condition]:
    conditions = list(old or [])
    for entry in new:
        conditions = set_condition(conditions, entry, now)
    return conditions


def status_change(
    company: Object,
    conditions: list[Condition],
    image: str | None,
    high: semver.Version | None,
) -> Object | None:
    """The desired status, or None when the observed one already says the same.

    Unknown fields are left out, which a server-side apply of the status takes as "no longer
    set" for a field this manager set before.
    """
    status: Object = {
        "observedGeneration": object_generation(company),
        "conditions": conditions,
        "engineImage": image,
        "engineVersion": versions.format_version(versions.image_version(image or "")),
        versions.STATUS_FIELD: versions.format_version(high),
        "versionProtection": versions.protection(image) if image else None,
    }
    known_new = {k: v for k, v in status.items() if v is not None}
    old = company.get("status") or {}
    known_old = {k: old[k] for k in status if old.get(k) is not None}
    return None if known_old == known_new else known_new


VERDICT_FIELDS = ("status", "reason", "message")
"""What a verdict is: not when it was decided, nor for which generation (a spec change that
leaves the company accepted as before is no news)."""


def verdict(status: Object | None) -> Condition | None:
    """The company's verdict in ``status``: its ``Accepted`` condition's status, reason and
    message, or None before the first."""
    for cond in (status or {}).get("conditions") or []:
        if cond.get("type") == ACCEPTED:
            return {k: cond.get(k) for k in VERDICT_FIELDS}
    return None


def current_verdict(company: Object) -> Condition | None:
    """The company's stored verdict (:func:`verdict`) when it was decided for the company's
    current generation, else None (none yet, or its spec changed since)."""
    status = company.get("status")
    accepted = find_condition((status or {}).get("conditions"), ACCEPTED)
    if accepted is None or accepted.get("observedGeneration") != object_generation(company):
        return None
    return verdict(status)
