"""The capacity figure's own arithmetic (bench/capacity.py), without a server: what a change's
queue wait and convergence are, how a step is judged, and where raising the rate stops."""

from __future__ import annotations

import dataclasses
import math

from bench.capacity import (
    Change,
    Step,
    cumulative,
    evaluate,
    highest_held,
    next_replicas,
    schedule,
)

KEY = ("capacity-0000", "c00001")


def create(sent: float, reacted: float, converged: float) -> Change:
    """A create sent at ``sent``: its first child at ``reacted``, its last child and
    Accepted=True at ``converged``."""
    change = Change(KEY, "create", due=sent, sent=sent, generation=1, version=100)
    change.children = [(101, reacted), (120, converged)]
    change.complete_at = converged
    change.accepted = [(1, converged)]
    return change


def test_a_steps_changes_are_due_at_the_rate_creates_and_updates_in_turn() -> None:
    plan = schedule(4.0, 1.5)
    assert plan == [(0.0, "create"), (0.25, "update"), (0.5, "create"), (0.75, "update"),
                    (1.0, "create"), (1.25, "update")]  # fmt: skip


def test_an_update_always_sets_other_replicas_within_the_class_bounds() -> None:
    current = 1
    for _ in range(30):
        new = next_replicas(current)
        assert new != current
        assert 2 <= new <= 10
        current = new


def test_a_create_reacts_at_its_first_child_or_acceptance() -> None:
    change = create(sent=10.0, reacted=10.2, converged=11.0)
    assert math.isclose(change.queue_wait, 0.2)
    assert math.isclose(change.to_converged, 1.0)

    accepted_first = Change(KEY, "create", due=10.0, sent=10.0, generation=1)
    accepted_first.accepted = [(1, 10.1)]
    accepted_first.children = [(130, 10.5)]
    assert math.isclose(accepted_first.queue_wait, 0.1)
    assert math.isinf(accepted_first.to_converged), "not all children seen"


def test_an_update_reacts_to_its_generation_or_a_child_written_after_it() -> None:
    change = Change(KEY, "update", due=20.0, replicas=3, sent=20.0, generation=2, version=500)
    # Echoes of the create (older resourceVersions, or the old generation) are no reaction.
    change.children = [(450, 20.05)]
    change.accepted = [(1, 20.06)]
    assert math.isinf(change.queue_wait)
    change.children.append((510, 20.4))
    assert math.isclose(change.queue_wait, 0.4)
    change.accepted.append((2, 20.3))
    assert math.isclose(change.queue_wait, 0.3)
    # Converged once the seats take the new replicas, at the new generation's acceptance.
    change.seats = [(2, 20.2)]
    assert math.isinf(change.to_converged)
    change.seats.append((3, 20.9))
    assert math.isclose(change.to_converged, 0.9)


def test_an_unanswered_change_never_reacts() -> None:
    change = Change(KEY, "update", due=5.0, replicas=2, sent=5.0, failed="TransportError: x")
    change.accepted = [(7, 5.5)]
    assert math.isinf(change.queue_wait)
    assert math.isinf(change.to_converged)


def test_a_step_holds_when_both_p99s_are_under_the_slo() -> None:
    changes = [
        create(sent=i / 10, reacted=i / 10 + 0.1, converged=i / 10 + 2.0) for i in range(100)
    ]
    step = evaluate(10.0, changes, skipped=0, companies=600)
    assert step.held
    assert step.broke == ()
    assert math.isclose(step.queue_wait["p99"], 0.1)
    assert math.isclose(step.converged["create_p99"], 2.0)
    assert "update_p99" not in step.converged
    assert math.isclose(step.sent_per_s, 10.0)
    assert step.as_json()["companies"] == 600
    counted = dataclasses.replace(step, writes={"APPLY statefulsets": 150}, reconciles=250.0)
    assert counted.as_json()["writes_per_change"] == 1.5
    assert counted.as_json()["reconciles_per_change"] == 2.5


def test_a_step_breaks_on_either_p99_and_a_change_never_converged_is_later_than_any() -> None:
    fast = [create(sent=i, reacted=i + 0.1, converged=i + 1.0) for i in range(98)]
    waited = [create(sent=98.0, reacted=99.5, converged=100.0)] * 2
    assert evaluate(10.0, fast + waited, 0, 100).broke == ("queue wait",)

    never = create(sent=99.0, reacted=99.1, converged=math.inf)
    never.complete_at = None
    step = evaluate(10.0, [*fast, never, never], 0, 100)
    assert step.broke == ("converged",)
    assert step.unconverged == 2
    assert step.as_json()["converged_s"]["p99"] is None

    # The p99 of 100 is the 99th slowest: one slow change is within it.
    assert evaluate(10.0, [*fast, never, fast[0]], 0, 100).held


def test_a_generator_behind_schedule_or_without_a_company_to_update_breaks_the_step() -> None:
    on_time = [create(sent=i, reacted=i + 0.1, converged=i + 1.0) for i in range(200)]
    late = [create(sent=i + 1.5, reacted=i + 1.6, converged=i + 2.0) for i in range(200, 203)]
    for change, due in zip(late, range(200, 203), strict=True):
        change.due = due
    step = evaluate(10.0, on_time + late, 0, 100)
    assert step.late == 3
    assert step.broke == ("generator",), "3 of 203 sent over a second late"
    assert evaluate(10.0, on_time + late[:2], 0, 100).held, "2 of 202 is within 1%"
    assert evaluate(10.0, on_time, 1, 100).broke == ("generator",)


def step(rate: float, held: bool) -> Step:
    return Step(
        rate=rate,
        changes=1,
        creates=1,
        updates=0,
        skipped=0,
        failed=0,
        late=0,
        sent_per_s=rate,
        queue_wait={"p50": 0.1, "p99": 0.1},
        converged={"p50": 1.0, "p99": 1.0},
        unconverged=0,
        companies=int(rate) * 10,
        broke=() if held else ("converged",),
    )


def test_the_figure_is_the_last_step_held_before_the_first_that_broke() -> None:
    assert highest_held([step(10, True), step(20, True), step(30, False)]) == step(20, True)
    assert highest_held([step(10, False)]) is None
    assert highest_held([]) is None
    assert highest_held([step(10, True), step(20, False), step(30, True)]) == step(10, True)
    assert highest_held([step(10, True), step(20, True)]) == step(20, True), "none broke"


def test_the_cumulative_p99_counts_every_change_so_far_and_a_step_its_own() -> None:
    calm = [create(sent=i, reacted=i + 0.1, converged=i + 1.0) for i in range(100)]
    stormy = [create(sent=i, reacted=i + 0.5, converged=i + 8.0) for i in range(100, 110)]
    assert evaluate(10.0, stormy, 0, 100).converged["p99"] == 8.0
    so_far = cumulative([*calm, *stormy])
    assert math.isclose(so_far["converged"], 8.0), "10 of 110 are slow: beyond the 99th"
    assert math.isclose(cumulative([*calm, *stormy[:1]])["converged"], 1.0), "1 of 101 is not"
    assert math.isclose(cumulative(calm)["queue_wait"], 0.1)
    shown = dataclasses.replace(evaluate(10.0, calm, 0, 100), cumulative=so_far).as_json()
    assert shown["cumulative_p99_s"] == {"queue_wait": 0.5, "converged": 8.0}
