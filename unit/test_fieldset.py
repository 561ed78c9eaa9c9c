"""Spotting fields an apply would remove, from the manager's own managedFields entry."""

from __future__ import annotations

from typing import Any, cast

import pytest

from crewlet_operator.diff import needs_apply
from crewlet_operator.fieldset import (
    _as_applied,
    _compile,
    _Plan,
    _prune,
    _pruner,
    apply_would_change,
    keep_managed_fields_of,
    keep_owned_fields_of,
    owned_fields,
    would_remove_owned_fields,
)

OWNED = {
    "f:metadata": {"f:labels": {"f:app": {}}},
    "f:data": {"f:a": {}, "f:b": {}},
    "f:spec": {
        "f:template": {
            "f:spec": {
                "f:containers": {
                    'k:{"name":"web"}': {
                        ".": {},
                        "f:image": {},
                        "f:env": {'k:{"name":"X"}': {".": {}}},
                    },
                }
            }
        },
        "f:finalizers": {'v:"keep"': {}},
    },
}


def desired(**changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "x", "labels": {"app": "web"}},
        "data": {"a": "1", "b": "2"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "web", "image": "i", "env": [{"name": "X", "value": "1"}]}
                    ]
                }
            },
            "finalizers": ["keep"],
        },
    }
    obj.update(changes)
    return obj


def test_nothing_removed_when_desired_still_has_every_owned_field() -> None:
    assert not would_remove_owned_fields(desired(), OWNED)


@pytest.mark.parametrize(
    "change",
    [
        {"data": {"a": "1"}},  # a map key dropped
        {"metadata": {"name": "x"}},  # a label dropped
        {
            "spec": {
                "template": {"spec": {"containers": [{"name": "api", "image": "i"}]}},
                "finalizers": ["keep"],
            }
        },  # a keyed list item dropped
        {
            "spec": {
                "template": {"spec": {"containers": [{"name": "web", "image": "i"}]}},
                "finalizers": ["keep"],
            }
        },  # a nested keyed item dropped
        {
            "spec": {
                "template": {
                    "spec": {"containers": [{"name": "web", "image": "i", "env": [{"name": "X"}]}]}
                },
                "finalizers": [],
            }
        },  # set
    ],
)
def test_removed_field_is_spotted(change: dict[str, Any]) -> None:
    assert would_remove_owned_fields(desired(**change), OWNED)


def test_owned_fields_reads_only_the_managers_apply_entry() -> None:
    observed = {
        "metadata": {
            "managedFields": [
                {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:data": {}}},
                {"manager": "me", "operation": "Apply", "fieldsV1": {"f:data": {"f:a": {}}}},
                {
                    "manager": "me",
                    "operation": "Apply",
                    "subresource": "status",
                    "fieldsV1": {"f:status": {}},
                },
            ]
        }
    }
    assert owned_fields(observed, "me") == {"f:data": {"f:a": {}}}
    assert owned_fields(observed, "me", "status") == {"f:status": {}}
    assert owned_fields(observed, "other") == {}


def test_cache_transform_keeps_only_the_managers_apply_entries() -> None:
    obj = {
        "metadata": {
            "name": "x",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "k": "v"},
            "managedFields": [
                {"manager": "kubectl", "operation": "Update"},
                {"manager": "me", "operation": "Apply", "fieldsV1": {}},
            ],
        }
    }
    trimmed = keep_managed_fields_of("me")(obj)
    assert trimmed["metadata"]["managedFields"] == [
        {"manager": "me", "operation": "Apply", "fieldsV1": {}}
    ]
    assert trimmed["metadata"]["annotations"] == {"k": "v"}
    assert len(obj["metadata"]["managedFields"]) == 2  # the input is not mutated
    assert "managedFields" not in keep_managed_fields_of("nobody")(obj)["metadata"]


def test_cache_transform_returns_an_object_with_nothing_to_drop_itself() -> None:
    # So an informer may keep the JSON the object came as (Informer._listed_one).
    applied = {"manager": "me", "operation": "Apply", "fieldsV1": {}}
    obj = {"metadata": {"name": "x", "annotations": {"k": "v"}, "managedFields": [applied]}}
    assert keep_managed_fields_of("me")(obj) is obj
    assert keep_managed_fields_of("me")({"metadata": {"name": "y"}}) == {"metadata": {"name": "y"}}
    assert keep_managed_fields_of("other")(obj) is not obj


def stateful_set() -> dict[str, Any]:
    """A StatefulSet as the API server returns it: ours, defaulted, and another manager's."""
    mine = {
        "f:metadata": {"f:labels": {"f:app": {}}},
        "f:spec": {
            "f:replicas": {},
            "f:template": {
                "f:spec": {
                    "f:containers": {
                        'k:{"name":"engine"}': {".": {}, "f:name": {}, "f:image": {}},
                        'k:{"name":"sidecar"}': {".": {}, "f:name": {}, "f:args": {}},
                    },
                    "f:nodeSelector": {},
                }
            },
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": "acme-data",
            "namespace": "t",
            "uid": "u1",
            "resourceVersion": "7",
            "generation": 2,
            "labels": {"app": "acme", "team": "theirs"},
            "ownerReferences": [{"uid": "c1"}],
            "selfLink": "/apis/apps/v1/x",
            "managedFields": [
                {"manager": "me", "operation": "Apply", "fieldsV1": mine},
                {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}},
            ],
        },
        "spec": {
            "replicas": 1,
            "revisionHistoryLimit": 10,
            "podManagementPolicy": "OrderedReady",
            "template": {
                "spec": {
                    "containers": [
                        {"name": "sidecar", "args": ["a", "b"], "imagePullPolicy": "Always"},
                        {"name": "theirs", "image": "x"},
                        {"name": "engine", "image": "e:1", "terminationMessagePath": "/dev/t"},
                    ],
                    "nodeSelector": {"pool": "a", "zone": "b"},
                    "dnsPolicy": "ClusterFirst",
                }
            },
        },
        "status": {"replicas": 1, "readyReplicas": 1},
    }


def test_owned_fields_transform_keeps_what_the_manager_applied_identity_and_status() -> None:
    kept = keep_owned_fields_of("me")(stateful_set())
    assert kept["spec"] == {
        "replicas": 1,
        "template": {
            "spec": {
                "containers": [  # in the object's order; the other manager's container gone
                    {"name": "sidecar", "args": ["a", "b"]},
                    {"name": "engine", "image": "e:1"},
                ],
                "nodeSelector": {"pool": "a", "zone": "b"},  # owned whole (atomic)
            }
        },
    }
    assert kept["status"] == {"replicas": 1, "readyReplicas": 1}
    assert kept["metadata"]["labels"] == {"app": "acme", "team": "theirs"}
    assert [e["manager"] for e in kept["metadata"]["managedFields"]] == ["me"]
    assert "selfLink" not in kept["metadata"]
    assert (kept["apiVersion"], kept["kind"], kept["metadata"]["uid"]) == (
        "apps/v1",
        "StatefulSet",
        "u1",
    )


@pytest.mark.parametrize(
    "desired_spec",
    [
        {"replicas": 1},
        {"replicas": 2},
        {"replicas": 1, "template": {"spec": {"containers": [{"name": "engine", "image": "e:2"}]}}},
        {"replicas": 1, "template": {"spec": {"dnsPolicy": "ClusterFirst"}}},
        {
            "replicas": 1,
            "template": {
                "spec": {
                    "containers": [
                        {"name": "sidecar", "args": ["a", "b"]},
                        {"name": "engine", "image": "e:1"},
                    ],
                    "nodeSelector": {"pool": "a", "zone": "b"},
                }
            },
        },
    ],
)
def test_owned_fields_transform_gives_the_same_apply_answer(desired_spec: dict[str, Any]) -> None:
    full = stateful_set()
    desired = {"metadata": {"name": "acme-data", "labels": {"app": "acme"}}, "spec": desired_spec}
    expected = apply_would_change(desired, keep_managed_fields_of("me")(full), "me")
    assert apply_would_change(desired, keep_owned_fields_of("me")(full), "me") == expected


def test_an_object_the_manager_never_applied_keeps_identity_and_status_only() -> None:
    obj = stateful_set()
    obj["metadata"]["managedFields"] = []
    kept = keep_owned_fields_of("me")(obj)
    assert set(kept) == {"apiVersion", "kind", "metadata", "status"}


def _slow(desired: dict[str, Any], observed: dict[str, Any], manager: str) -> bool:
    """apply_would_change without its fast path: the semantic walks alone."""
    return needs_apply(desired, observed) or would_remove_owned_fields(
        desired, owned_fields(observed, manager)
    )


@pytest.mark.parametrize(
    "desired_spec",
    [
        {"replicas": 1, "template": {"spec": {"containers": [{"name": "engine", "image": "e:1"}]}}},
        {
            "replicas": 1,
            "template": {
                "spec": {
                    "containers": [
                        {"name": "sidecar", "args": ["a", "b"]},
                        {"name": "engine", "image": "e:1"},
                    ],
                    "nodeSelector": {"pool": "a", "zone": "b"},
                }
            },
        },
        {"replicas": 2},
        {"replicas": 1},
    ],
)
@pytest.mark.parametrize("labels", [{"app": "acme"}, {"app": "acme", "team": "theirs"}, None])
def test_the_fast_path_answers_as_the_semantic_walks_do(
    desired_spec: dict[str, Any], labels: dict[str, str] | None
) -> None:
    """A trimmed converged object compares as applied without a walk; every other case falls
    through to the walks, so the answer never differs from theirs, trimmed cache or not."""
    meta: dict[str, Any] = {"name": "acme-data"}
    if labels is not None:
        meta["labels"] = labels
    desired = {"metadata": meta, "spec": desired_spec}
    for observed in (
        keep_owned_fields_of("me")(stateful_set()),
        keep_managed_fields_of("me")(stateful_set()),
    ):
        assert apply_would_change(desired, observed, "me") == _slow(desired, observed, "me")


def test_a_converged_trimmed_object_takes_the_fast_path() -> None:
    """The object exactly as the manager applied it (the cache's trimmed copy) is no change,
    and dropping one of its fields is one, though every other field still matches."""
    trimmed = keep_owned_fields_of("me")(stateful_set())
    as_applied = {k: v for k, v in trimmed.items() if k != "status"}
    as_applied["metadata"] = {
        key: trimmed["metadata"][key] for key in ("name", "labels", "ownerReferences")
    }
    assert _as_applied(as_applied, trimmed)
    assert not apply_would_change(as_applied, trimmed, "me")
    fewer = {**as_applied, "spec": {k: v for k, v in as_applied["spec"].items() if k != "replicas"}}
    assert apply_would_change(fewer, trimmed, "me")
    assert _slow(fewer, trimmed, "me")


def test_list_items_are_found_by_whichever_keys_the_manager_owns_them_by() -> None:
    """Containers by name, their ports by port and protocol, a set of strings by value: each
    item the manager owns is kept, in the object's order, and no other."""
    pod_spec = {
        "containers": [
            {
                "name": "engine",
                "image": "e:1",
                "imagePullPolicy": "IfNotPresent",  # a default, owned by nobody
                "ports": [
                    {"containerPort": 80, "protocol": "UDP", "name": "theirs"},
                    {"containerPort": 80, "protocol": "TCP", "name": "http"},
                ],
            },
            {"name": "theirs", "image": "t:1"},
        ],
        "finalizers": ["x", "mine"],
    }
    owned = {
        "f:spec": {
            "f:containers": {
                'k:{"name":"engine"}': {
                    ".": {},
                    "f:name": {},
                    "f:image": {},
                    "f:ports": {
                        'k:{"containerPort":80,"protocol":"TCP"}': {
                            ".": {},
                            "f:containerPort": {},
                            "f:protocol": {},
                            "f:name": {},
                        }
                    },
                }
            },
            "f:finalizers": {'v:"mine"': {}},
        }
    }
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "managedFields": [
                {"manager": "me", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": owned}
            ],
        },
        "spec": pod_spec,
    }
    kept = keep_owned_fields_of("me")(obj)
    assert kept["spec"] == {
        "containers": [
            {
                "name": "engine",
                "image": "e:1",
                "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}],
            }
        ],
        "finalizers": ["mine"],
    }


def _subtrees(value: Any) -> list[Any]:
    found = [value]
    children = value.values() if isinstance(value, dict) else value
    if isinstance(value, (dict, list)):
        for child in children:
            found += _subtrees(child)
    return found


def _plans(plan: _Plan) -> list[_Plan]:
    found = [plan]
    below = [s for _, s in plan.fields] + [s for _, keyed in plan.keyed for s in keyed.values()]
    for sub in below:
        if sub is not None:
            found += _plans(sub)
    return found


class _Labels(dict[str, Any]):
    """A mapping of another type than the API server's JSON decodes to."""


def test_a_compiled_pruner_answers_as_the_interpreter_for_every_value_and_plan() -> None:
    """The sync prunes every child with a pruner compiled from its field set: for each node of
    a field set with map fields, keyed list items (one key and two), set items and items owned
    whole, and for every value of an object, of the right shape or not (a list where a map is
    owned, a key of no hashable value, a mapping of another type, a scalar), it keeps exactly
    what the interpreter keeps."""
    owned = {
        **OWNED,
        "f:spec": {
            **cast(dict[str, Any], OWNED["f:spec"]),
            "f:ports": {
                'k:{"port":80,"protocol":"TCP"}': {".": {}, "f:port": {}},
                'k:{"port":{"x":1},"protocol":"UDP"}': {".": {}},
            },
            "f:selector": {"f:app": {}},
        },
    }
    obj = desired()
    obj["spec"]["ports"] = [
        {"port": 80, "protocol": "TCP", "name": "http"},
        {"port": {"x": 1}, "protocol": "UDP"},
        {"port": 81, "protocol": "TCP"},
        "stray",
    ]
    obj["spec"]["selector"] = _Labels(app="web", other="x")
    obj["spec"]["finalizers"] = ["keep", "drop", {"keep": 1}]
    obj["data"] = ["not", "a", "map"]
    values = _subtrees(obj)
    compared = 0
    for plan in _plans(_compile(owned)):
        prune = _pruner(plan)
        for value in values:
            assert prune(value) == _prune(value, plan)
            compared += 1
    assert compared > 200
