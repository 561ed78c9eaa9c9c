"""Spotting fields an apply would remove, from the manager's own managedFields entry."""

from __future__ import annotations

from typing import Any

import pytest

from crewlet_operator.fieldset import (
    keep_managed_fields_of,
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
