"""Owner references and finalizers: controllerutil semantics."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from crewlet_operator.objects import finalizers
from crewlet_operator.owners import (
    AlreadyOwnedError,
    add_finalizer,
    controller_reference,
    get_controller_of,
    has_finalizer,
    is_controlled_by,
    owner_key_of,
    remove_finalizer,
    set_controller_reference,
)

FINALIZER = "crewlet.dev/cleanup"


def crew(name: str = "alpha", ns: str | None = "prod", uid: str = "uid-alpha") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": uid}
    if ns is not None:
        meta["namespace"] = ns
    return {"apiVersion": "crewlet.dev/v1", "kind": "Crew", "metadata": meta}


def config_map(ns: str | None = "prod", **meta: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "alpha-config", **meta}
    if ns is not None:
        metadata["namespace"] = ns
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"k": "v"}}


def test_controller_reference() -> None:
    assert controller_reference(crew()) == {
        "apiVersion": "crewlet.dev/v1",
        "kind": "Crew",
        "name": "alpha",
        "uid": "uid-alpha",
        "controller": True,
        "blockOwnerDeletion": True,
    }


@pytest.mark.parametrize("missing", ["uid", "name"])
def test_controller_reference_needs_a_created_owner(missing: str) -> None:
    owner = crew()
    del owner["metadata"][missing]
    with pytest.raises(ValueError, match=missing):
        controller_reference(owner)


def test_controller_reference_needs_kind() -> None:
    owner = crew()
    del owner["kind"]
    with pytest.raises(ValueError, match="kind"):
        controller_reference(owner)


def test_set_controller_reference_returns_a_copy() -> None:
    child = config_map()
    snapshot = copy.deepcopy(child)
    owned = set_controller_reference(crew(), child)
    assert child == snapshot
    assert owned["metadata"]["ownerReferences"] == [controller_reference(crew())]
    owned["data"]["k"] = "changed"
    assert child["data"]["k"] == "v"


def test_set_controller_reference_is_idempotent() -> None:
    once = set_controller_reference(crew(), config_map())
    twice = set_controller_reference(crew(), once)
    assert twice == once


def test_set_controller_reference_keeps_other_owners() -> None:
    other = {"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "uid-s"}
    owned = set_controller_reference(crew(), config_map(ownerReferences=[other]))
    assert owned["metadata"]["ownerReferences"] == [other, controller_reference(crew())]


def test_set_controller_reference_upgrades_a_plain_reference_in_place() -> None:
    plain = {
        "apiVersion": "crewlet.dev/v1beta1",
        "kind": "Crew",
        "name": "alpha",
        "uid": "uid-alpha",
    }
    other = {"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "uid-s"}
    owned = set_controller_reference(crew(), config_map(ownerReferences=[plain, other]))
    assert owned["metadata"]["ownerReferences"] == [controller_reference(crew()), other]


def test_result_does_not_share_owner_references_with_the_input() -> None:
    other = {"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "uid-s"}
    child = config_map(ownerReferences=[other])
    owned = set_controller_reference(crew(), child)
    owned["metadata"]["ownerReferences"][0]["name"] = "changed"
    assert child["metadata"]["ownerReferences"][0]["name"] == "s"


def test_another_controller_raises_already_owned() -> None:
    owned = set_controller_reference(crew("beta", uid="uid-beta"), config_map())
    with pytest.raises(AlreadyOwnedError, match="beta") as caught:
        set_controller_reference(crew(), owned)
    assert isinstance(caught.value, ValueError)
    assert caught.value.controller["uid"] == "uid-beta"
    assert caught.value.object_key == "prod/alpha-config"


def test_recreated_owner_with_the_same_name_is_another_owner() -> None:
    owned = set_controller_reference(crew(uid="old"), config_map())
    with pytest.raises(AlreadyOwnedError):
        set_controller_reference(crew(uid="new"), owned)


def test_cross_namespace_owner_is_refused() -> None:
    with pytest.raises(ValueError, match="cross-namespace") as caught:
        set_controller_reference(crew(ns="prod"), config_map(ns="staging"))
    assert not isinstance(caught.value, AlreadyOwnedError)


def test_namespaced_owner_of_cluster_scoped_object_is_refused() -> None:
    with pytest.raises(ValueError, match="cluster-scoped"):
        set_controller_reference(crew(ns="prod"), config_map(ns=None))


def test_cluster_scoped_owner_may_own_anything() -> None:
    owner = crew(ns=None)
    assert is_controlled_by(set_controller_reference(owner, config_map(ns="prod")), owner)
    assert is_controlled_by(set_controller_reference(owner, config_map(ns=None)), owner)


def test_object_without_metadata_gets_some() -> None:
    owned = set_controller_reference(crew(ns=None), {"kind": "Namespace"})
    assert owned["metadata"]["ownerReferences"][0]["uid"] == "uid-alpha"


def test_get_controller_of_and_is_controlled_by() -> None:
    plain = {"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "uid-s"}
    assert get_controller_of(config_map()) is None
    assert get_controller_of(config_map(ownerReferences=[plain])) is None
    owned = set_controller_reference(crew(), config_map(ownerReferences=[plain]))
    assert get_controller_of(owned) == controller_reference(crew())
    assert is_controlled_by(owned, crew())
    assert not is_controlled_by(owned, crew(uid="other"))
    assert not is_controlled_by(config_map(), crew())
    unsaved = crew()
    del unsaved["metadata"]["uid"]
    assert not is_controlled_by(owned, unsaved)


def test_controller_false_is_not_a_controller() -> None:
    ref = {**controller_reference(crew()), "controller": False}
    assert get_controller_of(config_map(ownerReferences=[ref])) is None


def test_owner_key_of() -> None:
    owned = set_controller_reference(crew(), config_map())
    assert owner_key_of(owned, "crewlet.dev", "Crew") == ("prod", "alpha")
    assert owner_key_of(owned, "crewlet.dev", "Crew", owner_namespaced=False) == (None, "alpha")
    assert owner_key_of(owned, "other.dev", "Crew") is None
    assert owner_key_of(owned, "crewlet.dev", "Team") is None
    assert owner_key_of(owned, "", "Crew") is None
    assert owner_key_of(config_map(), "crewlet.dev", "Crew") is None


def test_owner_key_of_ignores_the_version_and_handles_the_core_group() -> None:
    ref = {**controller_reference(crew()), "apiVersion": "crewlet.dev/v1beta1"}
    assert owner_key_of(config_map(ownerReferences=[ref]), "crewlet.dev", "Crew") == (
        "prod",
        "alpha",
    )
    core = {"apiVersion": "v1", "kind": "Service", "name": "svc", "uid": "u", "controller": True}
    assert owner_key_of(config_map(ownerReferences=[core]), "", "Service") == ("prod", "svc")


def test_owner_key_of_skips_non_controller_owners() -> None:
    plain = {"apiVersion": "crewlet.dev/v1", "kind": "Crew", "name": "alpha", "uid": "u"}
    assert owner_key_of(config_map(ownerReferences=[plain]), "crewlet.dev", "Crew") is None


def test_add_finalizer_is_idempotent_and_copies() -> None:
    obj = config_map()
    added = add_finalizer(obj, FINALIZER)
    assert "finalizers" not in obj["metadata"]
    assert finalizers(added) == [FINALIZER]
    assert add_finalizer(added, FINALIZER) == added
    assert finalizers(add_finalizer(added, "other")) == [FINALIZER, "other"]
    assert has_finalizer(added, FINALIZER)
    assert not has_finalizer(obj, FINALIZER)


def test_remove_finalizer_is_idempotent_and_copies() -> None:
    obj = config_map(finalizers=["first", FINALIZER, "last", FINALIZER])
    removed = remove_finalizer(obj, FINALIZER)
    assert finalizers(removed) == ["first", "last"]
    assert finalizers(obj) == ["first", FINALIZER, "last", FINALIZER]
    assert remove_finalizer(removed, FINALIZER) == removed
    assert not has_finalizer(removed, FINALIZER)


def test_remove_finalizer_from_object_without_any() -> None:
    assert finalizers(remove_finalizer(config_map(), FINALIZER)) == []
