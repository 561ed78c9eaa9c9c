"""The peers' template: rendered from the reconciler, filled in per Company by the rules the
peers implement, and refused when the children hold a per-Company value it cannot express."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from bench.cluster import engine_class_manifest, model_keys_manifest
from bench.peers import placeholders, template

CLASS = "bench-a"
Object = dict[str, Any]


def render() -> template.Renderer:
    return template.renderer(engine_class_manifest(CLASS), model_keys_manifest())


def company(namespace: str, name: str, uid: str) -> Object:
    return template.Sample(namespace, name, uid).company(CLASS)


def test_the_template_fills_in_to_any_companys_children_but_their_hashes() -> None:
    built = template.build(render(), CLASS)
    uid = "3b241101-e2bb-4255-8caf-4136c566a962"
    made = placeholders.instantiate(built, "team-blue", "acme", uid)
    rendered = render()(company("team-blue", "acme", uid))

    assert [c["kind"] for c in made] == [c["kind"] for c in rendered]
    differing = set()
    for index, (child, expected) in enumerate(zip(made, rendered, strict=True)):
        made_leaves, expected_leaves = template.leaves(child), template.leaves(expected)
        assert made_leaves.keys() == expected_leaves.keys()
        differing |= {(index, p) for p, v in made_leaves.items() if v != expected_leaves[p]}
    digests = {
        (index, path)
        for index, child in enumerate(built["children"])
        for path, value in template.leaves(child).items()
        if isinstance(value, str) and built["placeholders"].get(value) == placeholders.DIGEST
    }
    # Only the hashes in annotations differ: the peers put a digest of the same length there.
    assert differing == digests
    assert digests
    assert {p[-2] for _, p in digests} == {"annotations"}


def test_every_per_company_value_is_a_placeholder() -> None:
    built = template.build(render(), CLASS)
    text = json.dumps(built)

    for sample in (template.FIRST, template.SECOND):
        for value in (sample.namespace, sample.name, sample.uid, placeholders.token(sample.uid)):
            assert value not in text
    used = {placeholder for placeholder in built["placeholders"] if placeholder in text}
    assert used == set(built["placeholders"])
    assert sorted(set(built["placeholders"].values())) == sorted(placeholders.MEANINGS)


def test_a_secrets_data_is_the_filled_in_text_base64_encoded() -> None:
    built = template.build(render(), CLASS)
    made = placeholders.instantiate(built, "team-blue", "acme", "uid-1")

    token = next(c for c in made if c["metadata"]["name"] == "acme-api-token")
    (value,) = token["data"].values()
    assert base64.b64decode(value).decode() == placeholders.token("uid-1")
    config = next(c for c in made if c["metadata"]["name"] == "acme-config")
    seats = base64.b64decode(config["data"]["crewlet-seats.yaml"]).decode()
    assert "acme-data-0.acme-data.team-blue.svc" in seats


def test_a_per_company_value_the_rules_cannot_make_is_refused() -> None:
    plain = render()

    def with_reversed_name(company: Object) -> list[Object]:
        children = plain(company)
        children[0]["metadata"]["annotations"] = {"example/eman": company["metadata"]["name"][::-1]}
        return children

    with pytest.raises(template.TemplateError, match="example/eman"):
        template.build(with_reversed_name, CLASS)


def test_differences_ignore_what_the_server_added() -> None:
    desired = {
        "spec": {
            "ports": [{"port": 80}],
            "selector": {"a": "b"},
            "publishNotReadyAddresses": False,
        },
        "data": {},
    }
    live: Object = {
        "spec": {"ports": [{"port": 80, "protocol": "TCP"}], "selector": {"a": "b"}, "x": 1},
        "data": {"k": "v"},
    }

    assert template.differences(desired, live) == []
    live["spec"]["ports"][0]["port"] = 81
    del live["spec"]["selector"]
    assert template.differences(desired, live) == [
        "spec.ports.0.port: 81, not 80",
        "spec.selector.a missing",
    ]


def test_a_companys_seats_replicas_go_where_the_reconciler_puts_them() -> None:
    built = template.build(render(), CLASS)
    uid = "3b241101-e2bb-4255-8caf-4136c566a962"
    made = placeholders.instantiate(built, "team-blue", "acme", uid, seats_replicas=4)
    scaled = company("team-blue", "acme", uid)
    scaled["spec"]["seats"] = {"replicas": 4}
    rendered = render()(scaled)

    [(index, *keys)] = built["seatsReplicas"]
    assert rendered[index]["metadata"]["name"] == "acme-seats"
    assert keys == ["spec", "replicas"]
    assert made[index]["spec"]["replicas"] == rendered[index]["spec"]["replicas"] == 4
    default = placeholders.instantiate(built, "team-blue", "acme", uid)
    assert default[index]["spec"]["replicas"] == 1, "the class default"
    assert built["children"][index]["spec"]["replicas"] == 1, "the template is left as it was"


def test_a_field_the_seats_replicas_change_besides_the_number_is_refused() -> None:
    plain = render()

    def with_replicas_in_a_label(company: Object) -> list[Object]:
        children = plain(company)
        replicas = str((company["spec"].get("seats") or {}).get("replicas", 1))
        children[0]["metadata"]["labels"]["example/seats"] = replicas
        return children

    with pytest.raises(template.TemplateError, match="example/seats"):
        template.build(with_replicas_in_a_label, CLASS)
