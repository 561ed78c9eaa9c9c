"""Event predicates: controller-runtime pkg/predicate semantics."""

from __future__ import annotations

from typing import Any

import pytest

from crewlet_operator.predicate import (
    AnnotationChanged,
    GenerationChanged,
    LabelChanged,
    LabelSelectorPredicate,
    Predicate,
    ResourceVersionChanged,
    and_,
    filter_object,
    label_selector_matches,
    new_predicate_funcs,
    not_,
    or_,
    validate_label_selector,
)


def obj(
    generation: int | None = 1,
    rv: str = "1",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "a", "namespace": "prod", "resourceVersion": rv}
    if generation is not None:
        meta["generation"] = generation
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "status": status or {}}


def all_events(p: Predicate, old: dict[str, Any], new: dict[str, Any]) -> tuple[bool, ...]:
    return p.create(new), p.update(old, new), p.delete(new), p.generic(new)


ALWAYS = new_predicate_funcs()
NEVER = new_predicate_funcs(lambda o: False, lambda o, n: False, lambda o: False, lambda o: False)


def test_generation_changed() -> None:
    p = GenerationChanged()
    assert p.update(obj(generation=1), obj(generation=2, rv="2"))
    assert not p.update(obj(generation=1), obj(generation=1, rv="2", status={"ready": True}))
    assert not p.update(obj(generation=1), obj(generation=1, rv="2", labels={"a": "b"}))
    # Kinds without a generation never pass an update.
    assert not p.update(obj(generation=None), obj(generation=None, rv="2"))
    assert p.create(obj()) and p.delete(obj()) and p.generic(obj())


def test_resource_version_changed() -> None:
    p = ResourceVersionChanged()
    assert p.update(obj(rv="1"), obj(rv="2"))
    assert not p.update(obj(rv="1"), obj(rv="1"))  # a resync
    assert p.create(obj()) and p.delete(obj()) and p.generic(obj())


def test_label_changed() -> None:
    p = LabelChanged()
    assert p.update(obj(labels={"a": "1"}), obj(labels={"a": "2"}))
    assert p.update(obj(labels=None), obj(labels={"a": "1"}))
    assert p.update(obj(labels={"a": "1"}), obj(labels={}))
    assert not p.update(obj(labels={"a": "1"}), obj(generation=2, labels={"a": "1"}))
    assert not p.update(obj(labels=None), obj(labels={}))
    assert p.create(obj()) and p.delete(obj()) and p.generic(obj())


def test_annotation_changed() -> None:
    p = AnnotationChanged()
    assert p.update(obj(annotations={"a": "1"}), obj(annotations={"a": "2"}))
    assert p.update(obj(), obj(annotations={"a": "1"}))
    assert not p.update(obj(annotations={"a": "1"}), obj(generation=5, annotations={"a": "1"}))
    assert not p.update(obj(labels={"x": "1"}), obj(labels={"x": "2"}))
    assert p.create(obj()) and p.delete(obj()) and p.generic(obj())


def test_new_predicate_funcs_defaults_to_pass() -> None:
    assert all_events(ALWAYS, obj(), obj())
    assert all_events(ALWAYS, obj(), obj()) == (True, True, True, True)
    no_deletes = new_predicate_funcs(delete=lambda o: False)
    assert all_events(no_deletes, obj(), obj()) == (True, True, False, True)


def test_new_predicate_funcs_passes_the_right_arguments() -> None:
    seen: list[tuple[str, ...]] = []

    def record(event: str, *objs: dict[str, Any]) -> bool:
        seen.append((event, *(o["metadata"]["resourceVersion"] for o in objs)))
        return True

    p = new_predicate_funcs(
        create=lambda o: record("create", o),
        update=lambda o, n: record("update", o, n),
        delete=lambda o: record("delete", o),
        generic=lambda o: record("generic", o),
    )
    assert all_events(p, obj(rv="old"), obj(rv="new")) == (True, True, True, True)
    assert seen == [
        ("create", "new"),
        ("update", "old", "new"),
        ("delete", "new"),
        ("generic", "new"),
    ]


def test_filter_object_judges_the_new_object_on_update() -> None:
    p = filter_object(lambda o: o["metadata"]["resourceVersion"] == "2")
    assert all_events(p, obj(rv="1"), obj(rv="2")) == (True, True, True, True)
    assert all_events(p, obj(rv="2"), obj(rv="1")) == (False, False, False, False)


def test_predicates_satisfy_the_protocol() -> None:
    for p in (
        GenerationChanged(),
        ResourceVersionChanged(),
        LabelChanged(),
        AnnotationChanged(),
        LabelSelectorPredicate({}),
        ALWAYS,
        and_(),
        or_(),
        not_(ALWAYS),
    ):
        assert isinstance(p, Predicate)


def test_and() -> None:
    assert all_events(and_(ALWAYS, ALWAYS), obj(), obj()) == (True,) * 4
    assert all_events(and_(ALWAYS, NEVER), obj(), obj()) == (False,) * 4
    assert all_events(and_(), obj(), obj()) == (True,) * 4
    p = and_(GenerationChanged(), LabelChanged())
    assert p.update(obj(generation=1, labels={"a": "1"}), obj(generation=2, labels={"a": "2"}))
    assert not p.update(obj(generation=1, labels={"a": "1"}), obj(generation=2, labels={"a": "1"}))


def test_or() -> None:
    assert all_events(or_(NEVER, ALWAYS), obj(), obj()) == (True,) * 4
    assert all_events(or_(NEVER, NEVER), obj(), obj()) == (False,) * 4
    assert all_events(or_(), obj(), obj()) == (False,) * 4
    p = or_(GenerationChanged(), LabelChanged())
    assert p.update(obj(generation=1), obj(generation=2))
    assert p.update(obj(labels={"a": "1"}), obj(labels={"a": "2"}))
    assert not p.update(obj(rv="1"), obj(rv="2", status={"ready": True}))


def test_not() -> None:
    assert all_events(not_(ALWAYS), obj(), obj()) == (False,) * 4
    assert all_events(not_(NEVER), obj(), obj()) == (True,) * 4
    p = not_(GenerationChanged())
    assert p.update(obj(generation=1), obj(generation=1))
    assert not p.update(obj(generation=1), obj(generation=2))


def test_and_short_circuits() -> None:
    def explode(_: dict[str, Any]) -> bool:
        raise AssertionError("evaluated")

    assert not and_(NEVER, new_predicate_funcs(create=explode)).create(obj())
    assert or_(ALWAYS, new_predicate_funcs(create=explode)).create(obj())


def test_combinators_nest() -> None:
    spec_or_labels_not_paused = and_(
        or_(GenerationChanged(), LabelChanged()),
        not_(LabelSelectorPredicate({"matchLabels": {"paused": "true"}})),
    )
    old = obj(generation=1)
    assert spec_or_labels_not_paused.update(old, obj(generation=2))
    assert not spec_or_labels_not_paused.update(old, obj(generation=2, labels={"paused": "true"}))
    assert not spec_or_labels_not_paused.update(old, obj(generation=1))


LABELS = {"app": "web", "tier": "frontend", "env": "prod"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({}, True),
        ({"matchLabels": {}}, True),
        ({"matchLabels": {"app": "web"}}, True),
        ({"matchLabels": {"app": "web", "env": "prod"}}, True),
        ({"matchLabels": {"app": "db"}}, False),
        ({"matchLabels": {"missing": "x"}}, False),
        ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "qa"]}]}, True),
        ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["qa"]}]}, False),
        ({"matchExpressions": [{"key": "gone", "operator": "In", "values": ["x"]}]}, False),
        ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["qa"]}]}, True),
        ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]}, False),
        ({"matchExpressions": [{"key": "gone", "operator": "NotIn", "values": ["x"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "gone", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "gone", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist", "values": []}]}, False),
        (
            {
                "matchLabels": {"app": "web"},
                "matchExpressions": [
                    {"key": "tier", "operator": "Exists"},
                    {"key": "env", "operator": "In", "values": ["prod"]},
                ],
            },
            True,
        ),
        (
            {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "env", "operator": "In", "values": ["qa"]}],
            },
            False,
        ),
        (
            {
                "matchLabels": {"app": "db"},
                "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}],
            },
            False,
        ),
    ],
)
def test_label_selector_matches(selector: dict[str, Any], expected: bool) -> None:
    assert label_selector_matches(selector, LABELS) is expected
    p = LabelSelectorPredicate(selector)
    assert all_events(p, obj(), obj(labels=LABELS)) == (expected,) * 4


def test_none_selector_matches_nothing() -> None:
    assert not label_selector_matches(None, LABELS)
    assert not label_selector_matches(None, {})


def test_label_selector_predicate_judges_the_new_object_on_update() -> None:
    p = LabelSelectorPredicate({"matchLabels": {"app": "web"}})
    assert p.update(obj(labels={}), obj(labels={"app": "web"}))
    assert not p.update(obj(labels={"app": "web"}), obj(labels={}))
    assert not p.create(obj())


@pytest.mark.parametrize(
    "selector",
    [
        {"matchLabels": {"kubernetes.io/metadata.name": "tenant-a", "a": ""}},
        {"matchLabels": {"team.example.com/Tier_1.x": "A-1_b.c", "a" * 63: "v" * 63}},
        {"matchExpressions": [{"key": "crewlet.ai/tenant", "operator": "In", "values": ["x"]}]},
    ],
)
def test_label_keys_and_values_at_their_limits_are_valid(selector: dict[str, Any]) -> None:
    validate_label_selector(selector)


@pytest.mark.parametrize(
    ("selector", "error"),
    [
        ({"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["x"]}]}, "operator"),
        ({"matchExpressions": [{"key": "a", "operator": "in", "values": ["x"]}]}, "operator"),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "needs at least one value"),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": []}]}, "at least one"),
        ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}, "no values"),
        (
            {"matchExpressions": [{"key": "a", "operator": "DoesNotExist", "values": ["x"]}]},
            "no values",
        ),
        ({"matchExpressions": [{"operator": "Exists"}]}, "without a key"),
        ({"matchLabels": {"a": 1}}, "must be a string"),
        ({"matchLabels": {"bad key!": "x"}}, "not a label key"),
        ({"matchLabels": {"a/b/c": "x"}}, "not a label key"),
        ({"matchLabels": {"/a": "x"}}, "not a label key"),
        ({"matchLabels": {"Example.com/a": "x"}}, "not a label key"),
        ({"matchLabels": {"a" * 64: "x"}}, "not a label key"),
        ({"matchLabels": {"a": "bad value!"}}, "not a label value"),
        ({"matchLabels": {"a": "v" * 64}}, "not a label value"),
        ({"matchExpressions": [{"key": "-a", "operator": "Exists"}]}, "not a label key"),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["x y"]}]}, "label value"),
    ],
)
def test_invalid_selectors_are_rejected(selector: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        validate_label_selector(selector)
    with pytest.raises(ValueError, match=error):
        LabelSelectorPredicate(selector)
    with pytest.raises(ValueError, match=error):
        label_selector_matches(selector, LABELS)
