"""The tracing figures' own arithmetic (bench/tracing.py), on spans as Jaeger's query API gives
them, without a Jaeger: a new company's two reconciles read as one chain by their link, and a
quiet tenant's verdict cut into stages that sum to its create -> Accepted."""

from __future__ import annotations

from typing import Any

import pytest

from bench.tracing import _stages, create_stages

Span = dict[str, Any]


def span(span_id: str, name: str, start: float, seconds: float, **refs: str) -> Span:
    """A span as Jaeger's JSON has it: times in microseconds, references by kind."""
    return {
        "spanID": span_id,
        "operationName": name,
        "startTime": int(start * 1e6),
        "duration": int(seconds * 1e6),
        "references": [{"refType": kind, "spanID": parent} for kind, parent in refs.items()],
    }


def test_a_create_is_its_verdict_then_its_childrens_turn_then_their_work() -> None:
    verdict = span("v", "reconcile company", 100.0, 0.25)
    children = span("c", "reconcile company", 100.3, 2.5, FOLLOWS_FROM="v")
    other = span("o", "reconcile company", 101.0, 0.1)  # an update: linked to nothing
    spans = [
        verdict,
        span("vq", "queued", 100.0, 0.05, CHILD_OF="v"),
        children,
        span("cq", "queued", 100.3, 2.0, CHILD_OF="c"),
        other,
        span("oq", "queued", 101.0, 0.01, CHILD_OF="o"),
    ]
    roots = {s["spanID"]: s for s in (verdict, children, other)}
    stages = create_stages(spans, roots)
    assert stages == {
        "verdict reconcile": [0.25],
        "children's turn": [2.0],
        "children's work": [0.5],
        "event to children written": [2.8],
    }


def test_a_link_to_a_reconcile_outside_the_window_is_no_chain() -> None:
    children = span("c", "reconcile company", 100.3, 2.5, FOLLOWS_FROM="gone")
    spans = [children, span("cq", "queued", 100.3, 2.0, CHILD_OF="c")]
    assert all(not values for values in create_stages(spans, {"c": children}).values())


def _verdict(status_ends: float) -> list[Span]:
    """A probe's verdict reconcile from 100.1: queued 0.1 s, its status write from 100.3."""
    return [
        span("r", "reconcile company", 100.1, status_ends - 100.1),
        span("q", "queued", 100.1, 0.1, CHILD_OF="r"),
        span("s", "PATCH companies/status", 100.3, status_ends - 100.3, CHILD_OF="r"),
    ]


@pytest.mark.parametrize(
    ("status_ends", "accepted", "status", "seen"),
    [
        (100.4, 100.45, 0.1, 0.05),  # the bench's watch sees the verdict after the answer
        (100.5, 100.4, 0.1, 0.0),  # ... or before the operator has read it: no negative stage
    ],
)
def test_a_probes_stages_sum_to_its_create_to_accepted_none_negative(
    status_ends: float, accepted: float, status: float, seen: float
) -> None:
    stages = _stages(_verdict(status_ends), sent=100.0, accepted=accepted)
    assert stages["event"] == pytest.approx(0.1)
    assert stages["queued"] == pytest.approx(0.1)
    assert stages["work"] == pytest.approx(0.1)
    assert stages["status"] == pytest.approx(status)
    assert stages["seen"] == pytest.approx(seen)
    parts = sum(stages[k] for k in ("event", "queued", "work", "status", "seen"))
    assert parts == pytest.approx(stages["total"])
