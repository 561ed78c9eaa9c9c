"""The tracing figures' own arithmetic (bench/tracing.py), on spans as Jaeger's query API gives
them, without a Jaeger: a new company's two reconciles read as one chain by their link."""

from __future__ import annotations

from typing import Any

from bench.tracing import create_stages

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
