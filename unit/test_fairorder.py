"""The fair queue's order on its own (crewlet_operator/fairorder.py): no queue, no clock, no
event loop. Priorities, aging, first come first served among equals, fairness keys taking turns,
the urgent lane, moves up and down, and a model of the whole order under any operations."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crewlet_operator.fairorder import FairOrder

AGING = 0.25


def fair(item: str) -> str:
    """Items are ``<key>/<n>``: the key is the item's fairness key."""
    return item.partition("/")[0]


def order(*, fairness: bool = False) -> FairOrder[str]:
    return FairOrder(
        aging_interval=AGING, urgent_priority=0, fairness_key=fair if fairness else None
    )


def drain(queue: FairOrder[str], now: float = 0.0, step: float = 0.0) -> list[str]:
    out = []
    while queue:
        out.append(queue.pop(now))
        now += step
    return out


def test_higher_priority_first_then_earliest_ready_then_first_pushed() -> None:
    queue = order()
    queue.push("low", -100, 0.0)
    queue.push("normal-late", 0, 2.0)
    queue.push("normal-early", 0, 1.0)
    queue.push("normal-early-too", 0, 1.0)
    queue.push("high", 100, 5.0)
    assert len(queue) == 5
    assert "low" in queue and "other" not in queue
    assert drain(queue) == ["high", "normal-early", "normal-early-too", "normal-late", "low"]
    assert len(queue) == 0


def test_a_waiting_item_ages_one_priority_point_an_interval() -> None:
    """Ready at 0 at priority -100: ahead of a normal item ready after 25 s, not of one
    ready before."""
    queue = order()
    queue.push("old-low", -100, 0.0)
    queue.push("normal-after", 0, 100 * AGING + 0.01)
    queue.push("normal-before", 0, 100 * AGING - 0.01)
    assert drain(queue) == ["normal-before", "old-low", "normal-after"]


def test_a_move_up_or_down_places_the_item_anew() -> None:
    queue = order()
    queue.push("a", 0, 0.0)
    queue.push("b", 0, 1.0)
    queue.push("c", 0, 2.0)
    queue.move("c", 100, 2.0)
    queue.move("a", -100, 0.0)
    assert len(queue) == 3
    assert drain(queue) == ["c", "b", "a"]


def test_fairness_keys_take_turns_and_keep_their_own_order() -> None:
    queue = order(fairness=True)
    for key, n in (("a", 4), ("b", 2), ("c", 3)):
        for i in range(n):
            queue.push(f"{key}/{i}", 0, 0.0)
    assert drain(queue) == ["a/0", "b/0", "c/0", "a/1", "b/1", "c/1", "a/2", "c/2", "a/3"]


def test_a_served_key_counts_as_ready_no_earlier_than_its_service() -> None:
    queue = order(fairness=True)
    queue.push("a/1", 0, 0.0)
    queue.push("a/2", 0, 0.0)
    queue.push("b/1", 0, 1.0)
    assert queue.pop(2.0) == "a/1"  # served at 2: a's next counts as ready at 2, after b's
    assert drain(queue, now=2.0) == ["b/1", "a/2"]


def test_priorities_rule_across_keys() -> None:
    queue = order(fairness=True)
    for i in range(3):
        queue.push(f"busy/{i}", 100, 0.0)
    queue.push("quiet/0", 0, 0.0)
    assert drain(queue) == ["busy/0", "busy/1", "busy/2", "quiet/0"]


def test_the_urgent_lane_holds_the_items_at_urgent_priority_or_above() -> None:
    queue = order(fairness=True)
    queue.push("backlog/0", -100, 0.0)  # aged past anything new, but not urgent
    queue.push("create/0", 0, 1000.0)
    queue.push("change/0", 100, 1000.0)
    queue.push("demoted/0", 0, 0.0)
    queue.move("demoted/0", -1, 0.0)
    assert queue.has_urgent()
    assert queue.pop(1000.0, urgent_only=True) == "change/0"
    assert queue.pop(1000.0, urgent_only=True) == "create/0"
    assert not queue.has_urgent()
    assert len(queue) == 2
    assert drain(queue, now=1000.0) == ["demoted/0", "backlog/0"]


def test_the_lanes_share_the_items_an_urgent_pop_takes_it_from_both() -> None:
    queue = order()
    queue.push("create", 0, 0.0)
    queue.push("backlog", -100, 0.0)
    assert queue.pop(0.0, urgent_only=True) == "create"
    assert drain(queue) == ["backlog"]
    assert not queue.has_urgent()


def test_the_count_of_keys_is_told_when_it_changes() -> None:
    counts: list[int] = []
    queue: FairOrder[str] = FairOrder(
        aging_interval=AGING, urgent_priority=0, fairness_key=fair, on_keys=counts.append
    )
    queue.push("a/0", 0, 0.0)
    queue.push("a/1", 0, 0.0)
    queue.push("b/0", 0, 0.0)
    assert counts == [1, 2]
    drain(queue)
    assert counts == [1, 2, 1, 0]


def test_an_emptied_key_is_dropped_with_its_turn() -> None:
    queue = order(fairness=True)
    queue.push("a/0", 0, 0.0)
    assert queue.pop(5.0) == "a/0"
    queue.push("b/0", 0, 1.0)
    queue.push("a/1", 0, 0.5)  # a new line: a's service at 5 is forgotten
    assert drain(queue) == ["a/1", "b/0"]
    assert queue._lines == {}


def test_stale_entries_do_not_pile_up() -> None:
    """Moving an item leaves its old entries behind; heaps are rebuilt once half stale."""
    queue = order()
    queue.push("anchor", -100, 0.0)
    for i in range(2_000):
        queue.move("anchor", -100 + i % 2, 0.0)
        queue.push(f"item-{i}", 0, 0.0)
        assert queue.pop(0.0) == f"item-{i}"
    [line] = queue._lines.values()
    assert len(line.every.heap) <= 2 * line.size + 65
    assert len(line.urgent.heap) <= 2 * line.size + 65
    assert len(queue._every) <= 2 * len(queue._lines) + 65
    assert drain(queue) == ["anchor"]


# --- the whole order against a model ---------------------------------------------------------


@dataclass
class Model:
    """The order written as plainly as possible: every pop looks at every item."""

    lines: int
    cap: int | None = None
    """At most this many items of a line handed out and not finished."""
    items: dict[int, tuple[int, float, int]] = field(default_factory=dict)  # priority, ready, n
    flight: dict[int, list[int]] = field(default_factory=dict)  # line -> its items handed out
    served: dict[int, tuple[float, int]] = field(default_factory=dict)  # line -> (when, n)
    pushes: int = 0
    pops: int = 0

    def put(self, item: int, priority: int, ready: float) -> None:
        self.items[item] = (priority, ready, self.pushes)
        self.pushes += 1

    def line(self, item: int) -> int:
        return item % self.lines

    def rank(self, item: int) -> tuple[float, float, int]:
        priority, ready, n = self.items[item]
        return (ready - priority * AGING, ready, n)

    def open(self, line: int) -> bool:
        return self.cap is None or len(self.flight.get(line, [])) < self.cap

    def poppable(self, urgent_only: bool) -> list[int]:
        return [
            i
            for i, (p, _, _) in self.items.items()
            if (p >= 0 or not urgent_only) and self.open(self.line(i))
        ]

    def finish(self, line: int) -> int | None:
        """Finish the oldest item of ``line`` handed out, if any: which."""
        held = self.flight.get(line)
        return held.pop(0) if held else None

    def pop(self, now: float, urgent_only: bool) -> int:
        candidates = self.poppable(urgent_only)
        heads: dict[int, int] = {}
        for item in candidates:
            line = self.line(item)
            if line not in heads or self.rank(item) < self.rank(heads[line]):
                heads[line] = item

        def standing(item: int) -> tuple[float, int, float, int]:
            own, ready, n = self.rank(item)
            when, handout = self.served.get(self.line(item), (-math.inf, -1))
            return (own + max(0.0, when - ready), handout, ready, n)

        item = min(heads.values(), key=standing)
        del self.items[item]
        line = self.line(item)
        self.flight.setdefault(line, []).append(item)
        if any(self.line(other) == line for other in self.items):
            self.served[line] = (now, self.pops)
            self.pops += 1
        else:
            self.served.pop(line, None)
        return item


PRIORITIES = st.sampled_from([-100, -1, 0, 7, 100])
Ops = list[tuple[str, int, int]]


def operations(*kinds: str) -> st.SearchStrategy[Ops]:
    """Up to 80 operations of ``kinds``, each on an item from 0 to 7 at one of the priorities."""
    return st.lists(
        st.tuples(st.sampled_from(kinds), st.integers(min_value=0, max_value=7), PRIORITIES),
        max_size=80,
    )


OPS = operations("push", "pop", "pop_urgent", "tick")


@pytest.mark.parametrize("lines", [1, 3])
@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_property_the_order_is_the_models(lines: int, ops: Ops) -> None:
    """Pushes (a new item, or a move of one placed), pops of either lane and time passing:
    every pop takes the model's item, and ``len``, ``in`` and ``has_urgent`` agree."""
    queue: FairOrder[int] = FairOrder(
        aging_interval=AGING,
        urgent_priority=0,
        fairness_key=(lambda item: item % lines) if lines > 1 else None,
    )
    model = Model(lines)
    now = 0.0
    for kind, item, priority in ops:
        if kind == "push":
            if item in queue:
                _, ready, _ = model.items[item]  # a move keeps the ready time, as the queue's
                queue.move(item, priority, ready)
            else:
                ready = now
                queue.push(item, priority, ready)
            model.put(item, priority, ready)
        elif kind == "pop" and model.items:
            assert queue.pop(now) == model.pop(now, urgent_only=False)
        elif kind == "pop_urgent" and any(p >= 0 for p, _, _ in model.items.values()):
            assert queue.has_urgent()
            assert queue.pop(now, urgent_only=True) == model.pop(now, urgent_only=True)
        elif kind == "tick":
            now += item * 3.0
        assert len(queue) == len(model.items)
        assert {i for i in range(8) if i in queue} == set(model.items)
        assert queue.has_urgent() == any(p >= 0 for p, _, _ in model.items.values())
    while model.items:
        assert queue.pop(now) == model.pop(now, urgent_only=False)
    assert not queue


CAPPED_OPS = operations("push", "pop", "pop_urgent", "finish", "tick")


@pytest.mark.parametrize("cap", [1, 2])
@settings(max_examples=300, deadline=None)
@given(ops=CAPPED_OPS)
def test_property_a_key_at_its_limit_waits_in_its_place(cap: int, ops: Ops) -> None:
    """With ``max_in_flight``, the same order over the keys below their limit: a key with that
    many items handed out and not finished takes no turn, in either lane, until one is."""
    lines = 3
    queue: FairOrder[int] = FairOrder(
        aging_interval=AGING,
        urgent_priority=0,
        fairness_key=lambda item: item % lines,
        max_in_flight=cap,
    )
    model = Model(lines, cap)
    now = 0.0
    for kind, item, priority in ops:
        handed_out = {held for line in model.flight.values() for held in line}
        if kind == "push" and item not in queue and item not in handed_out:
            queue.push(item, priority, now)
            model.put(item, priority, now)
        elif kind == "pop" and model.poppable(urgent_only=False):
            assert queue.pop(now) == model.pop(now, urgent_only=False)
        elif kind == "pop_urgent" and model.poppable(urgent_only=True):
            assert queue.pop(now, urgent_only=True) == model.pop(now, urgent_only=True)
        elif kind == "finish":
            line = item % lines
            was_open = model.open(line)
            finished = model.finish(line)
            if finished is not None:
                unparked = queue.finished(finished)
                waiting = any(model.line(i) == line for i in model.items)
                assert unparked == (not was_open and waiting)
        elif kind == "tick":
            now += item * 3.0
        assert len(queue) == len(model.items)
        assert queue.has_ready() == bool(model.poppable(urgent_only=False))
        assert queue.has_urgent() == bool(model.poppable(urgent_only=True))
    for line in range(lines):
        while (finished := model.finish(line)) is not None:
            queue.finished(finished)
    while model.items:
        popped = queue.pop(now)
        assert popped == model.pop(now, urgent_only=False)
        assert model.finish(model.line(popped)) == popped
        queue.finished(popped)
    assert not queue and not queue.has_ready()
