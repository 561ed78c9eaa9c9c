"""A controller's own writes: their echoes dropped, held while in flight, and read back."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from crewlet_operator.errors import ConflictError
from crewlet_operator.writes import OwnStatusWrites, OwnWrites, Write


def wrote(echoes: OwnWrites, obj: dict[str, Any]) -> None:
    """``obj`` written, as the API server returned it, with no event while it was in flight."""
    with echoes.writing(obj) as write:
        write.done(obj)


def company(rv: str, status: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "acme", "namespace": "t", "resourceVersion": rv, "generation": 1}
        | meta,
        "spec": {"className": "standard"},
    }
    if status is not None:
        obj["status"] = status
    return obj


def test_own_status_writes_drops_only_the_echo_of_what_was_written() -> None:
    echoes = OwnStatusWrites()
    mine = {"conditions": [{"type": "Accepted", "status": "True"}], "observedGeneration": 1}
    echoes.wrote("t/acme", mine)
    assert not echoes.update(company("1"), company("2", mine))  # our own write, echoed
    assert echoes.update(company("2", mine), company("3", {}))  # someone wiped it
    assert echoes.update(company("2", mine), company("3", {"observedGeneration": 1}))
    assert echoes.update(company("1", mine), company("2", mine, generation=2))  # spec changed
    assert echoes.update(company("1", mine), company("2", mine, labels={"a": "b"}))
    assert echoes.update(company("2", mine), company("2", mine))  # a resync replay
    other = {**company("1"), "metadata": {**company("1")["metadata"], "name": "other"}}
    assert echoes.update(other, {**other, "status": mine})  # nothing written to that one


def test_own_status_writes_forgets_a_deleted_object() -> None:
    echoes = OwnStatusWrites()
    echoes.wrote("t/acme", {"observedGeneration": 1})
    assert echoes.delete(company("2")) and echoes.create(company("3"))
    assert echoes.update(company("3"), company("4", {"observedGeneration": 1}))


def child(resource_version: str, uid: str = "u-1") -> dict[str, Any]:
    return {"metadata": {"name": "acme-data", "uid": uid, "resourceVersion": resource_version}}


def test_own_writes_drops_only_the_echo_of_each_write() -> None:
    echoes = OwnWrites()
    wrote(echoes, child("5"))
    assert not echoes.create(child("5"))  # the create, echoed
    assert echoes.update(child("5"), child("6"))  # then someone else's change
    wrote(echoes, child("7"))
    assert echoes.update(child("6"), child("8"))  # a change after ours: ours was superseded
    assert echoes.update(child("8"), child("7"))  # the entry went with the first event
    wrote(echoes, child("9"))
    assert echoes.update(child("9"), child("9"))  # a resync replay passes, and keeps the entry
    assert not echoes.update(child("8"), child("9"))
    wrote(echoes, child("3", uid="u-2"))
    assert echoes.create(child("3"))  # another object with that resourceVersion


def test_own_writes_forgets_deleted_objects_and_the_oldest_beyond_its_limit() -> None:
    echoes = OwnWrites(remember=2)
    wrote(echoes, child("5"))
    assert echoes.delete(child("5"))
    assert echoes.create(child("5"))
    for n in range(3):
        wrote(echoes, child("1", uid=f"u-{n}"))
    assert echoes.create(child("1", uid="u-0"))  # forgotten: the oldest of three
    assert not echoes.create(child("1", uid="u-2"))


def written(resource_version: str, name: str = "acme-data", uid: str = "u-1") -> dict[str, Any]:
    """A StatefulSet in namespace ``acme`` as an apply returns it."""
    meta = {"name": name, "namespace": "acme", "uid": uid, "resourceVersion": resource_version}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta}


def test_own_writes_reads_the_controllers_writes_until_the_cache_holds_them() -> None:
    echoes = OwnWrites()
    wrote(echoes, written("7"))
    assert echoes.newest("StatefulSet", [], "acme") == [written("7")]  # not cached yet
    assert echoes.newest("StatefulSet", [], "other") == []
    assert echoes.newest("Service", [], "acme") == []
    older, other = written("5"), written("3", name="acme-seats", uid="u-2")
    assert echoes.newest("StatefulSet", [older, other], "acme") == [written("7"), other]
    assert echoes.newest("StatefulSet", [written("8")], "acme") == [written("8")]
    assert echoes.newest("StatefulSet", [], "acme") == []  # forgotten: the cache went past it


def test_own_writes_forgets_a_write_once_its_echo_or_a_delete_passed() -> None:
    echoes = OwnWrites()
    wrote(echoes, written("7"))
    assert echoes.update(written("5"), written("6"))  # an older change, still before ours
    assert echoes.newest("StatefulSet", [], "acme") == [written("7")]
    assert not echoes.update(written("6"), written("7"))  # the echo
    assert echoes.newest("StatefulSet", [], "acme") == []
    wrote(echoes, written("9"))
    assert echoes.delete(written("9"))
    assert echoes.newest("StatefulSet", [], "acme") == []


def test_own_writes_keeps_the_newest_object_of_a_name_and_believes_the_cache_otherwise() -> None:
    echoes = OwnWrites()
    wrote(echoes, written("7"))
    wrote(echoes, written("9", uid="u-3"))  # deleted and created again
    assert echoes.newest("StatefulSet", [], "acme") == [written("9", uid="u-3")]
    assert echoes.delete(written("7"))  # the old object's delete leaves the new one
    assert echoes.newest("StatefulSet", [], "acme") == [written("9", uid="u-3")]
    wrote(echoes, written("opaque", name="acme-seats", uid="u-4"))
    cached = written("2", name="acme-seats", uid="u-4")
    assert echoes.newest("StatefulSet", [cached], "acme") == [cached, written("9", uid="u-3")]


def test_own_writes_holds_events_of_an_object_being_written_until_its_answer() -> None:
    echoes = OwnWrites()
    with echoes.writing(written("?")) as write:
        assert not echoes.create(written("7"))  # the echo beat the answer: held
        write.done(written("7"))
    assert write.reconcile_again is False  # and it was the echo: nothing to do
    assert echoes.newest("StatefulSet", [], "acme") == []  # the cache holds it already
    assert echoes.update(written("7"), written("8"))  # later changes pass again
    with echoes.writing(written("?")) as write:
        assert not echoes.update(written("8"), written("9"))  # held...
        write.done(written("10"))
    assert write.reconcile_again is False  # ...and applied over by the write
    assert echoes.newest("StatefulSet", [], "acme") == [written("10")]
    assert not echoes.update(written("9"), written("10"))  # the write's echo, after it


def test_own_writes_asks_for_another_look_when_a_held_change_came_after_the_write() -> None:
    echoes = OwnWrites()
    with echoes.writing(written("?")) as write:
        assert not echoes.update(written("7"), written("8"))
        assert not echoes.update(written("8"), written("9"))  # someone changed it after the write
        write.done(written("8"))
    assert write.reconcile_again is True
    with echoes.writing(written("?")) as write:
        pass  # no answer: the write failed
    assert write.reconcile_again is False  # failed, and nothing came meanwhile
    write = echoes.writing(written("?"))
    with pytest.raises(ConflictError):
        refused_while_changed(echoes, write)
    assert write.reconcile_again is True
    assert echoes.update(written("11"), written("12"))  # no longer held


def refused_while_changed(echoes: OwnWrites, write: Write) -> None:
    """A write during which the object changed, and which the API server then refused."""
    with write:
        assert not echoes.update(written("9"), written("11"))
        raise ConflictError(409)


def test_a_write_cancelled_in_flight_holds_nothing_after_it() -> None:
    echoes = OwnWrites()
    with pytest.raises(asyncio.CancelledError), echoes.writing(written("?")):
        raise asyncio.CancelledError
    assert echoes.update(written("7"), written("8"))
