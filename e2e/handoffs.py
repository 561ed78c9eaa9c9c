"""The audit-log proof that a sharded controller never lets two replicas write one object: the
writer of each primary object (and of what it owns) changes only at a handoff."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any

Object = dict[str, Any]


def moment(stamp: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def handoff_violations(
    events: list[Object],
    replicas: Mapping[str, str],
    departures: dict[str, datetime.datetime],
    *,
    object_of: Callable[[Object], str | None],
    primary: str,
    sharder: str,
) -> list[str]:
    """Where an object's writer changed other than through a handoff (empty: none).

    ``events`` are the API server's audit events, ``replicas`` the user agents of the replicas
    (writes by anyone else are the test's own), each with its member Lease's name,
    ``departures`` when each replica that left was killed or told to stop (after it, it may be
    gone without a handoff). ``object_of`` names the
    primary object an audited write is about (None: none), ``primary`` is the primary kind's
    plural, ``sharder`` the field manager of the sharder's label writes.

    A writer may follow another only if the previous writer's last write was its
    acknowledgement of a drain (a patch of the primary object itself, which labels it for the
    member the drain names); or if it had left before the next one's first write, and the
    sharder labelled the object, or wrote its will (a patch of its member Lease), in between."""
    wills = [
        (event["objectRef"].get("name"), moment(event["stageTimestamp"]))
        for event in events
        if event.get("verb") == "patch"
        and event["objectRef"].get("resource") == "leases"
        and f"fieldManager={sharder}" in str(event.get("requestURI"))
        and 200 <= int((event.get("responseStatus") or {}).get("code") or 0) < 300
    ]
    by_object: dict[str, list[Object]] = {}
    for event in events:
        key = object_of(event)
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        if key is not None and 200 <= code < 300 and event.get("verb") not in ("get", "list"):
            by_object.setdefault(key, []).append(event)
    violations = []
    for key, writes in by_object.items():
        writer: str | None = None
        last: Object | None = None
        labelled_since = False
        for event in writes:
            agent = event.get("userAgent")
            if f"fieldManager={sharder}" in str(event.get("requestURI")):
                labelled_since = True
                continue
            if agent not in replicas:
                continue
            if writer is not None and agent != writer:
                assert last is not None
                acknowledged = _acknowledgement(last, primary)
                left = departures.get(writer)
                at = moment(event["stageTimestamp"])
                dead = left is not None and at > left
                willed = any(
                    lease == replicas[writer] and left is not None and left < will <= at
                    for lease, will in wills
                )
                if not (acknowledged or dead) or not (labelled_since or willed):
                    violations.append(
                        f"{key}: {writer} then {agent} at {event['stageTimestamp']} "
                        f"(acknowledged={acknowledged}, dead={dead}, relabelled={labelled_since},"
                        f" willed={willed})"
                    )
            # The next writer must come after a label write that follows this one (an
            # acknowledgement is one: it labels the object for the next writer).
            labelled_since = _acknowledgement(event, primary)
            writer, last = agent, event
    return violations


def _acknowledgement(event: Object, primary: str) -> bool:
    """Whether a replica's audited write is its acknowledgement of a drain: a patch of the
    primary object itself (a replica writes nothing else of it)."""
    return (
        event.get("verb") == "patch"
        and event["objectRef"].get("resource") == primary
        and not event["objectRef"].get("subresource")
    )
