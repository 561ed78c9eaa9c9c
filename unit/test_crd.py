"""The crewlet.ai CRDs: generated from the pydantic models, structural, committed as generated."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import BaseModel, Field, ValidationError

from crewlet_operator.crd import (
    SchemaError,
    apply_defaults,
    cel_string,
    crd_for,
    drift,
    file_name,
    openapi_schema,
    render,
    write,
)
from crewlet_operator_daemon.api import v1alpha1
from crewlet_operator_daemon.api.__main__ import main
from crewlet_operator_daemon.api.crds import HEADER, all_crds
from crewlet_operator_daemon.api.v1alpha1 import Company, EngineClass
from crewlet_operator_daemon.controller import CLAIMANTS_OPTIONS

MANIFESTS = Path(__file__).resolve().parent.parent / "manifests" / "crds"
CRDS = {crd["spec"]["names"]["kind"]: crd for crd in all_crds()}
FORBIDDEN_KEYWORDS = {"$ref", "$defs", "anyOf", "oneOf", "allOf", "not", "title", "const"}

ENGINE_CLASS_EXAMPLE: dict[str, Any] = {
    "apiVersion": "crewlet.ai/v1alpha1",
    "kind": "EngineClass",
    "metadata": {"name": "standard"},
    "spec": {
        "engine": {
            "image": "ghcr.io/crewlet/crewlet-operator/engine:v0.2.0",
            "imagePullPolicy": "IfNotPresent",
            "imagePullSecrets": [{"name": "ghcr"}],
        },
        "allowedNamespaces": {
            "matchLabels": {"crewlet.ai/tenant": "true"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["paid"]}],
        },
        "storage": {"storageClassName": "fast", "size": "9Gi"},
        "files": {
            "s3": {
                "bucket": "companies",
                "region": "auto",
                "endpoint": "https://r2.example.com",
                "prefix": "prod/",
                "pathStyle": True,
                "credentials": {
                    "accessKeyId": {"namespace": "platform", "name": "s3", "key": "id"},
                    "secretAccessKey": {"namespace": "platform", "name": "s3", "key": "secret"},
                },
            }
        },
        "modelKeys": [
            {
                "name": "ANTHROPIC_API_KEY",
                "secretRef": {"namespace": "platform", "name": "models", "key": "anthropic"},
            }
        ],
        "telemetry": {
            "endpoint": "https://otel.example.com",
            "protocol": "http/protobuf",
            "headers": {"namespace": "platform", "name": "otel", "key": "headers"},
        },
        "env": [
            {"name": "LOG_LEVEL", "value": "info"},
            {"name": "TOKEN", "secretRef": {"namespace": "platform", "name": "env", "key": "t"}},
        ],
        "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}},
        "scheduling": {
            "nodeSelector": {"pool": "engines"},
            "tolerations": [{"key": "engines", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {}},
            "priorityClassName": "engines",
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}
            ],
        },
        "resources": {
            "data": {"requests": {"cpu": "500m", "memory": "1Gi"}},
            "seats": {"limits": {"memory": "2Gi"}},
        },
        "seats": {"replicas": 2, "minReplicas": 1, "maxReplicas": 5},
        "networkPolicy": {
            "apiPeers": [{"namespaceSelector": {"matchLabels": {"name": "gateways"}}}]
        },
        "exposure": {
            "gateway": {"parentRefs": [{"name": "public", "namespace": "gateways"}]},
            "ingress": {"className": "nginx", "tlsSecretName": "hooks-tls"},
        },
    },
    "status": {
        "companies": 3,
        "conditions": [
            {
                "type": "ReferencesResolved",
                "status": "True",
                "reason": "Resolved",
                "message": "every referenced Secret key exists",
                "lastTransitionTime": "2025-01-31T12:00:00Z",
                "observedGeneration": 1,
            }
        ],
    },
}

COMPANY_EXAMPLE: dict[str, Any] = {
    "apiVersion": "crewlet.ai/v1alpha1",
    "kind": "Company",
    "metadata": {"name": "acme", "namespace": "tenant-a"},
    "spec": {
        "className": "standard",
        "suspend": False,
        "webhookHostname": "hooks.acme.example.com",
        "seats": {"replicas": 3},
    },
    "status": {
        "observedGeneration": 2,
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "Provisioning",
                "message": "waiting for the data pod",
                "lastTransitionTime": "2025-01-31T12:00:00Z",
            }
        ],
        "engineImage": "ghcr.io/crewlet/crewlet-operator/engine:v0.2.0",
        "engineVersion": "0.2.0",
        "highestEngineVersion": "0.2.0",
        "versionProtection": "Ordered",
    },
}


def schema_of(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """The schema node at a dotted path; ``[]`` steps into a list's items."""
    node = schema
    for step in path.split("."):
        node = node["items"] if step == "[]" else node["properties"][step]
    return node


# -- drift --------------------------------------------------------------------------------------


def manifests() -> dict[str, str]:
    return {file_name(crd): render(crd, HEADER) for crd in all_crds()}


def test_committed_crds_are_what_the_models_generate() -> None:
    generated = manifests()
    committed = {p.name: p.read_text() for p in sorted(MANIFESTS.glob("crewlet.ai_*.yaml"))}
    assert sorted(committed) == sorted(generated), (
        "manifests/crds holds other CRD files than the models generate: run `make manifests`"
    )
    for name, text in generated.items():
        diff = "".join(
            difflib.unified_diff(
                committed[name].splitlines(keepends=True),
                text.splitlines(keepends=True),
                f"committed/{name}",
                f"generated/{name}",
            )
        )
        assert not diff, f"manifests/crds/{name} is out of date: run `make manifests`\n{diff}"


def test_files_are_headed_yaml_with_one_crd_each() -> None:
    for name, text in manifests().items():
        assert text.startswith(HEADER)
        assert "make manifests" in HEADER
        (crd,) = list(yaml.safe_load_all(text))
        assert name == f"crewlet.ai_{crd['spec']['names']['plural']}.yaml"
        assert crd == CRDS[crd["spec"]["names"]["kind"]]


def test_main_writes_checks_and_removes_stale_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "crewlet.ai_oldkinds.yaml").write_text("stale")
    (tmp_path / "unrelated.yaml").write_text("kept")
    assert main([str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "crewlet.ai_companies.yaml",
        "crewlet.ai_engineclasses.yaml",
        "unrelated.yaml",
    ]
    assert main([str(tmp_path), "--check"]) == 0
    (tmp_path / "crewlet.ai_companies.yaml").write_text("edited by hand")
    assert main([str(tmp_path), "--check"]) == 1
    assert "run `make manifests`" in capsys.readouterr().err


# -- structure ----------------------------------------------------------------------------------


def walk(node: dict[str, Any], path: str, problems: list[str]) -> None:
    """Collect every way ``node`` falls short of a structural schema that reads well."""
    if forbidden := FORBIDDEN_KEYWORDS & set(node):
        problems.append(f"{path}: {sorted(forbidden)}")
    if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        problems.append(f"{path}: no type")
    if node.get("default", 0) is None:
        problems.append(f"{path}: default null")
    for rule in node.get("x-kubernetes-validations", []):
        if not rule.get("rule") or not rule.get("message"):
            problems.append(f"{path}: a CEL rule without a rule or a message: {rule}")
    kind = node.get("type")
    if kind == "object":
        properties = node.get("properties", {})
        if properties and "additionalProperties" in node:
            problems.append(f"{path}: properties and additionalProperties")
        if missing := set(node.get("required", [])) - set(properties):
            problems.append(f"{path}: required but not a property: {sorted(missing)}")
        for name, prop in properties.items():
            if not prop.get("description") and f"{path}.{name}" != ".metadata":
                problems.append(f"{path}.{name}: no description")
            walk(prop, f"{path}.{name}", problems)
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.*", problems)
    elif kind == "array":
        list_type = node.get("x-kubernetes-list-type")
        if list_type not in ("atomic", "set", "map"):
            problems.append(f"{path}: list type {list_type!r}")
        if list_type == "map":
            keys = node.get("x-kubernetes-list-map-keys") or []
            if not keys or not set(keys) <= set(node["items"].get("required", [])):
                problems.append(f"{path}: map keys {keys} are not required in its items")
        walk(node["items"], f"{path}[]", problems)


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_schema_is_structural_and_described(kind: str) -> None:
    problems: list[str] = []
    walk(schema_of(kind), "", problems)
    assert problems == []


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_root_leaves_metadata_to_the_api_server(kind: str) -> None:
    root = schema_of(kind)
    assert root["type"] == "object"
    assert root["required"] == ["spec"]
    assert root["properties"]["metadata"] == {"type": "object"}
    assert root["properties"]["apiVersion"]["type"] == "string"
    assert "enum" not in root["properties"]["kind"]
    assert "default" not in root["properties"]["status"]


def test_free_form_kubernetes_types_keep_unknown_fields() -> None:
    spec = at(schema_of("EngineClass"), "spec")
    for path in (
        "scheduling.affinity",
        "scheduling.tolerations.[]",
        "scheduling.topologySpreadConstraints.[]",
        "networkPolicy.apiPeers.[]",
        "exposure.gateway.parentRefs.[]",
        "resources.data",
        "resources.seats",
    ):
        node = at(spec, path)
        assert node["type"] == "object", path
        assert node["x-kubernetes-preserve-unknown-fields"] is True, path
    for path in ("scheduling.nodeSelector", "serviceAccount.annotations"):
        assert at(spec, path)["additionalProperties"] == {"type": "string"}, path
    assert "x-kubernetes-preserve-unknown-fields" not in at(spec, "allowedNamespaces")


def test_optional_fields_are_plain_types_with_enums_and_lists_keyed() -> None:
    engine_class, company = schema_of("EngineClass"), schema_of("Company")
    assert at(engine_class, "spec.engine.imagePullPolicy") == {
        "type": "string",
        "enum": ["Always", "IfNotPresent", "Never"],
        "description": "Pull policy of the engine containers.",
    }
    assert at(company, "status.versionProtection")["enum"] == ["Ordered", "Unordered"]
    assert at(engine_class, "spec.files.s3")["required"] == ["bucket", "region"]
    keyed = {
        "spec.env": "name",
        "spec.modelKeys": "name",
        "spec.engine.imagePullSecrets": "name",
        "status.conditions": "type",
    }
    for path, key in keyed.items():
        node = at(engine_class, path)
        assert node["x-kubernetes-list-type"] == "map", path
        assert node["x-kubernetes-list-map-keys"] == [key], path
    assert at(company, "status.conditions")["x-kubernetes-list-map-keys"] == ["type"]
    assert at(engine_class, "spec.scheduling.tolerations")["x-kubernetes-list-type"] == "atomic"


def test_defaults_are_the_models_defaults() -> None:
    engine_class, company = schema_of("EngineClass"), schema_of("Company")
    assert at(engine_class, "spec.storage.size")["default"] == v1alpha1.MIN_STORAGE == "12Gi"
    assert at(engine_class, "spec.storage")["default"] == {"size": "12Gi"}
    assert at(engine_class, "spec.seats")["default"] == {
        "replicas": 1,
        "minReplicas": 0,
        "maxReplicas": 10,
    }
    assert "default" not in at(engine_class, "spec.files")  # nothing inside to default
    assert at(company, "spec.suspend")["default"] is False
    assert at(engine_class, "status.companies")["default"] == 0

    # What the API server stores for a minimal object reads back as pydantic's own defaults.
    for model, kind, minimal in (
        (EngineClass, "EngineClass", {"spec": {"engine": {"image": "x:1"}}}),
        (Company, "Company", {"spec": {"className": "standard"}}),
    ):
        stored = apply_defaults(schema_of(kind), minimal)
        assert model.model_validate(stored) == model.model_validate(minimal)
    stored = apply_defaults(engine_class, {"spec": {"engine": {"image": "x:1"}, "seats": {}}})
    assert stored["spec"]["seats"] == {"replicas": 1, "minReplicas": 0, "maxReplicas": 10}


def rules_at(node: dict[str, Any]) -> dict[str, str]:
    return {r["rule"]: r["message"] for r in node.get("x-kubernetes-validations", [])}


def test_cel_rules_sit_where_they_check() -> None:
    engine_class, company = schema_of("EngineClass"), schema_of("Company")
    storage = rules_at(at(engine_class, "spec"))
    assert len(storage) == 2
    assert any("quantity('12Gi')" in rule for rule in storage)
    assert any("quantity('9Gi')" in rule for rule in storage)
    assert all("at least" in message for message in storage.values())
    assert rules_at(at(engine_class, "spec.storage")) == {
        "isQuantity(self.size)": "spec.storage.size must be a Kubernetes quantity, e.g. 12Gi"
    }
    assert list(rules_at(at(engine_class, "spec.engine"))) == [
        f"self.image.matches({cel_string(v1alpha1.IMAGE_PATTERN)})"
    ]
    assert list(rules_at(at(engine_class, "spec.seats"))) == [
        "self.minReplicas <= self.replicas && self.replicas <= self.maxReplicas"
    ]
    assert list(rules_at(at(engine_class, "spec.env.[]"))) == [
        "has(self.value) != has(self.secretRef)"
    ]
    assert "x-kubernetes-validations" not in at(engine_class, "spec.exposure")  # both allowed
    # Checked on create only (a rule at the root is not ratcheted: checked on every write, it
    # would refuse the status writes of a Company stored before it).
    root = company["x-kubernetes-validations"]
    assert all(
        r["optionalOldSelf"] and r["rule"].startswith("oldSelf.hasValue() || ") for r in root
    )
    rules = {r["rule"] for r in root}
    assert (
        f"oldSelf.hasValue() || (size(self.metadata.name) <= {v1alpha1.MAX_COMPANY_NAME_LENGTH})"
        in rules
    )
    assert (
        "oldSelf.hasValue() || (self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$'))"
        in rules
    )
    assert "x-kubernetes-validations" not in at(company, "spec.className")  # may change


@pytest.mark.parametrize(
    ("image", "valid"),
    [
        ("ghcr.io/crewlet/crewlet:main", True),
        ("crewlet", True),
        ("localhost:5000/team/engine:v1.2.3", True),
        ("[::1]:5000/engine", True),
        ("ghcr.io/crewlet/crewlet@sha256:" + "a" * 64, True),
        ("ghcr.io/crewlet/crewlet:v0.2.0@sha256:" + "0" * 64, True),
        ("Ghcr.io//X/Y:a:b", False),
        ("ghcr.io/Crewlet/crewlet", False),
        ("ghcr.io/crewlet/crewlet:", False),
        ("ghcr.io/crewlet/crewlet:main\n", False),
        ("ghcr.io/crewlet crewlet", False),
        ("ghcr.io/crewlet/crewlet@sha256:abc", False),
    ],
)
def test_image_references_follow_the_registries_grammar(image: str, valid: bool) -> None:
    engine = {"image": image}
    if valid:
        assert v1alpha1.Engine.model_validate(engine).image == image
    else:
        with pytest.raises(ValidationError, match="not an image reference"):
            v1alpha1.Engine.model_validate(engine)


def test_company_name_bound_fits_every_child() -> None:
    longest = "a" * v1alpha1.MAX_COMPANY_NAME_LENGTH
    revision_hash = "4294967295"  # the largest 32-bit hash, as the StatefulSet controller prints
    assert len(f"{longest}-seats-{revision_hash}") == 63  # the controller-revision-hash label
    assert len(f"{longest}-data-{revision_hash}") <= 63
    assert len(f"{longest}-seats-99") <= 63  # pod names are also the pods' hostnames
    assert len(longest) <= 63  # the crewlet.ai/company label
    assert len(f"data-{longest}-data-0") <= 253


@pytest.mark.parametrize(
    ("kind", "scope", "short_names", "columns"),
    [
        (
            "Company",
            "Namespaced",
            ["cco"],
            {
                "Class": ".spec.className",
                "Engine": ".status.engineVersion",
                "Ready": '.status.conditions[?(@.type=="Ready")].status',
                "Reason": '.status.conditions[?(@.type=="Ready")].reason',
                "Age": ".metadata.creationTimestamp",
            },
        ),
        (
            "EngineClass",
            "Cluster",
            ["ec"],
            {
                "Image": ".spec.engine.image",
                "Companies": ".status.companies",
                "Age": ".metadata.creationTimestamp",
            },
        ),
    ],
)
def test_names_scope_columns_and_status_subresource(
    kind: str, scope: str, short_names: list[str], columns: dict[str, str]
) -> None:
    crd = CRDS[kind]
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"{spec['names']['plural']}.crewlet.ai"
    assert spec["group"] == "crewlet.ai"
    assert spec["scope"] == scope
    assert spec["names"]["shortNames"] == short_names
    assert spec["names"]["categories"] == ["crewlet"]
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    default_columns = {
        c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"] if "priority" not in c
    }
    assert default_columns == columns
    resource = v1alpha1.COMPANY if kind == "Company" else v1alpha1.ENGINE_CLASS
    assert (resource.group, resource.version, resource.kind) == ("crewlet.ai", "v1alpha1", kind)
    assert resource.plural == spec["names"]["plural"]
    assert resource.namespaced == (scope == "Namespaced")


def test_the_claimants_field_selector_names_a_selectable_string_field() -> None:
    """A sharded replica lists the companies that ask for a webhook hostname by a field
    selector; the API server refuses one on a custom resource's field its CRD does not make
    selectable."""
    (company,) = CRDS["Company"]["spec"]["versions"]
    (engine_class,) = CRDS["EngineClass"]["spec"]["versions"]
    selector = CLAIMANTS_OPTIONS.scope.field_selector
    assert selector is not None and selector.endswith("!=")
    path = "." + selector.removesuffix("!=")
    assert company["selectableFields"] == [{"jsonPath": path}]
    assert "selectableFields" not in engine_class
    spec = company["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec[path.rsplit(".", 1)[1]]["type"] == "string"


def test_generator_writes_selectable_fields_only_when_asked() -> None:
    class Thing(BaseModel):
        owner: str = ""

    def thing(**kwargs: Any) -> dict[str, Any]:
        crd = crd_for(
            Thing,
            group="example.com",
            version="v1",
            kind="Thing",
            plural="things",
            scope="Namespaced",
            **kwargs,
        )
        (version,) = crd["spec"]["versions"]
        return dict(version)

    assert "selectableFields" not in thing()
    assert thing(selectable_fields=[".owner"])["selectableFields"] == [{"jsonPath": ".owner"}]


# -- round trip ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "example"), [(EngineClass, ENGINE_CLASS_EXAMPLE), (Company, COMPANY_EXAMPLE)]
)
def test_examples_validate_with_the_models_and_the_crd_schema(
    model: type[BaseModel], example: dict[str, Any]
) -> None:
    parsed = model.model_validate(example)
    assert parsed.model_dump(by_alias=True, exclude_unset=True) == example
    schema = schema_of(example["kind"])
    jsonschema.Draft7Validator(schema).validate(example)
    jsonschema.Draft7Validator(schema).validate(apply_defaults(schema, example))


def test_crd_schema_refuses_what_the_models_refuse() -> None:
    validator = jsonschema.Draft7Validator(schema_of("EngineClass"))
    bad_policy = {"spec": {"engine": {"image": "x:1", "imagePullPolicy": "Sometimes"}}}
    bad_env_name = {"spec": {"engine": {"image": "x:1"}, "env": [{"name": "1X", "value": "v"}]}}
    too_many_seats = {"spec": {"engine": {"image": "x:1"}, "seats": {"maxReplicas": 101}}}
    cases: list[dict[str, Any]] = [bad_policy, bad_env_name, too_many_seats, {"spec": {}}]
    for bad in cases:
        assert not validator.is_valid(bad), bad
        with pytest.raises(ValueError, match="validation error"):
            EngineClass.model_validate(bad)


# -- the generator on its own -------------------------------------------------------------------


class _Inner(BaseModel):
    """An inner thing."""

    count: int = Field(default=2, description="How many.")


class _Spec(BaseModel):
    """A spec."""

    inner: _Inner = Field(default_factory=_Inner, description="Defaulted from inside.")
    maybe: _Inner | None = Field(default=None, description="Optional, no default.")
    free: dict[str, Any] = Field(default_factory=dict, description="Anything.")
    names: list[str] = Field(default_factory=list, description="Names.")


class _Kind(BaseModel):
    """A kind."""

    spec: _Spec


class _Union(BaseModel):
    """Not structural."""

    spec: int | str = Field(description="Either.")


def test_generator_inlines_refs_and_defaults_nested_models() -> None:
    schema = openapi_schema(_Kind)
    spec = schema["properties"]["spec"]
    assert spec["description"] == "A spec."
    assert spec["properties"]["inner"] == {
        "type": "object",
        "description": "Defaulted from inside.",
        "default": {"count": 2},
        "properties": {"count": {"type": "integer", "default": 2, "description": "How many."}},
    }
    assert "default" not in spec["properties"]["maybe"]
    assert spec["properties"]["maybe"]["type"] == "object"
    assert spec["properties"]["free"]["x-kubernetes-preserve-unknown-fields"] is True
    assert spec["properties"]["names"]["x-kubernetes-list-type"] == "atomic"
    crd = crd_for(
        _Kind, group="example.com", version="v1", kind="Kind", plural="kinds", scope="Cluster"
    )
    assert crd["metadata"]["name"] == "kinds.example.com"
    assert crd["spec"]["names"] == {
        "kind": "Kind",
        "listKind": "KindList",
        "plural": "kinds",
        "singular": "kind",
    }
    [version] = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    assert version["subresources"] == {"status": {}}
    assert "additionalPrinterColumns" not in version
    assert (
        "subresources"
        not in crd_for(
            _Kind,
            group="example.com",
            version="v1",
            kind="Kind",
            plural="kinds",
            scope="Cluster",
            status=False,
        )["spec"]["versions"][0]
    )


def test_write_and_drift_keep_a_directory_of_one_groups_crds(tmp_path: Path) -> None:
    """The library's generator for any group: files named as controller-gen names them, stale
    files of the group removed, other files left alone, drift reported by name."""
    kind = crd_for(
        _Kind, group="example.com", version="v1", kind="Kind", plural="kinds", scope="Cluster"
    )
    (tmp_path / "example.com_gone.yaml").write_text("stale")
    (tmp_path / "other.io_things.yaml").write_text("someone else's")
    assert drift(tmp_path, [kind]) == ["example.com_gone.yaml", "example.com_kinds.yaml"]
    assert [p.name for p in write(tmp_path, [kind])] == ["example.com_kinds.yaml"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "example.com_kinds.yaml",
        "other.io_things.yaml",
    ]
    assert drift(tmp_path, [kind]) == []
    assert yaml.safe_load((tmp_path / "example.com_kinds.yaml").read_text()) == kind


def test_generator_refuses_a_union_instead_of_emitting_a_non_structural_schema() -> None:
    with pytest.raises(SchemaError, match="union of 2 types"):
        openapi_schema(_Union)


class _Dial(BaseModel):
    turn: float = Field(gt=0, lt=10)
    notch: int = Field(ge=1, le=5)


def test_exclusive_bounds_are_written_as_the_api_server_reads_them() -> None:
    """pydantic writes ``gt``/``lt`` as JSON Schema's numbers; OpenAPI v3.0, which the API server
    reads, has a bound and a flag."""
    properties = openapi_schema(_Dial)["properties"]
    assert properties["turn"] == {
        "type": "number",
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": 10,
        "exclusiveMaximum": True,
    }
    assert properties["notch"] == {"type": "integer", "minimum": 1, "maximum": 5}
