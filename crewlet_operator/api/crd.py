"""CustomResourceDefinitions generated from the pydantic models in :mod:`.v1alpha1`.

``python -m crewlet_operator.api DIR`` (``make manifests``) writes them to ``manifests/crds``; a
unit test fails when the committed files differ from what this module generates.

The schema is pydantic's JSON schema in *validation* mode, made structural:

- validation mode, because a CRD schema gates what clients *send*, and what the API server
  stores is what the reconcilers later parse with ``model_validate``: the two must agree on
  the input, not on what ``model_dump`` would print (the modes differ on serializers,
  computed fields and validators that accept other input types);
- every ``$ref`` is inlined (a referenced model's docstring becomes the description when the
  field has none of its own) and ``X | None`` becomes plain ``X``: an optional field is simply
  not ``required``, and ``null`` is not accepted;
- no ``title``; ``const`` becomes a one-value ``enum``; ``dict[str, str]`` keeps its
  ``additionalProperties``, and a free-form ``dict[str, Any]`` (Kubernetes types the operator
  passes through, such as affinity or resources) is ``x-kubernetes-preserve-unknown-fields``;
- static defaults are carried over so the API server fills them in, and a nested model whose
  pydantic default is the model itself (``default_factory=Storage``) defaults to that model's
  own defaults (``{size: 12Gi}``), when it has any;
- every list has an ``x-kubernetes-list-type``: ``atomic`` unless the model says ``map``.

Anything that cannot be made structural (a union of two types, say) raises
:class:`SchemaError` rather than producing a CRD the API server would refuse.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, NoDefault
from pydantic_core import core_schema

from crewlet_operator.api import v1alpha1
from crewlet_operator.api.v1alpha1 import GROUP, VERSION, JsonSchema

Scope = Literal["Namespaced", "Cluster"]

CATEGORIES = ("crewlet",)
"""``kubectl get crewlet`` lists every kind of the group."""

HEADER = """\
# Generated from crewlet_operator/api/v1alpha1.py by `python -m crewlet_operator.api`.
# Do not edit: change the pydantic models and run `make manifests`, which regenerates it.
"""

_ROOT_PROPERTIES: dict[str, JsonSchema] = {
    "apiVersion": {
        "type": "string",
        "description": (
            "APIVersion defines the versioned schema of this representation of an object. "
            "Servers should convert recognized schemas to the latest internal value, and may "
            "reject unrecognized values. More info: "
            "https://git.k8s.io/community/contributors/devel/sig-architecture/"
            "api-conventions.md#resources"
        ),
    },
    "kind": {
        "type": "string",
        "description": (
            "Kind is a string value representing the REST resource this object represents. "
            "Servers may infer this from the endpoint the client submits requests to. Cannot "
            "be updated. In CamelCase. More info: "
            "https://git.k8s.io/community/contributors/devel/sig-architecture/"
            "api-conventions.md#types-kinds"
        ),
    },
    # The API server validates metadata itself and refuses a CRD that says anything more about
    # it (a description included) than restrictions on name and generateName.
    "metadata": {"type": "object"},
}

_VALIDATIONS = "x-kubernetes-validations"
_PRESERVE = "x-kubernetes-preserve-unknown-fields"
_SCALARS = frozenset({"string", "integer", "number", "boolean"})
_UNSUPPORTED = ("oneOf", "allOf", "not", "discriminator", "patternProperties", "prefixItems")


class SchemaError(ValueError):
    """A model's JSON schema cannot be expressed as a structural CRD schema."""


class _CrdJsonSchema(GenerateJsonSchema):
    """pydantic's generator, with ``default_factory=SomeModel`` marked ``default: {}``.

    pydantic omits defaults made by factories; a factory that is a model class makes the model
    with its own defaults, which :func:`_object` then writes out (``{size: 12Gi}``), or drops
    when there are none. Other factories (``list``, ``dict``) stay without a default: the API
    server would only write empty values into every object. A ``None`` default is dropped too:
    an optional field is simply left out.
    """

    def get_default_value(self, schema: core_schema.WithDefaultSchema) -> Any:
        factory = schema.get("default_factory")
        if isinstance(factory, type) and issubclass(factory, BaseModel):
            return {}
        default = super().get_default_value(schema)
        return NoDefault if default is None else default


def openapi_schema(model: type[BaseModel]) -> JsonSchema:
    """The structural ``openAPIV3Schema`` of a top-level kind (a model with ``spec``)."""
    raw = model.model_json_schema(by_alias=True, mode="validation", schema_generator=_CrdJsonSchema)
    definitions: dict[str, JsonSchema] = raw.pop("$defs", {})
    root = _structural(raw, definitions, model.__name__)
    properties: dict[str, JsonSchema] = root["properties"]
    for name, schema in _ROOT_PROPERTIES.items():
        if name in properties:
            properties[name] = copy.deepcopy(schema)
    if "status" in properties:
        # Create drops the status of a kind with a status subresource, and a default here would
        # reappear on every read: the operator writes status, the API server never invents it.
        properties["status"].pop("default", None)
    return root


def _merge(base: JsonSchema, over: JsonSchema) -> JsonSchema:
    """``over``'s keys win (a field's description over its model's docstring), except CEL rules,
    which both keep."""
    merged = {**base, **over}
    rules = [*base.get(_VALIDATIONS, []), *over.get(_VALIDATIONS, [])]
    if rules:
        merged[_VALIDATIONS] = rules
    return merged


def _structural(node: JsonSchema, definitions: dict[str, JsonSchema], where: str) -> JsonSchema:
    node = dict(node)
    node.pop("title", None)
    if "$ref" in node:
        name = node.pop("$ref").removeprefix("#/$defs/")
        if name not in definitions:
            raise SchemaError(f"{where}: unresolvable $ref to {name}")
        return _structural(_merge(copy.deepcopy(definitions[name]), node), definitions, where)
    if "anyOf" in node:
        branches = [b for b in node.pop("anyOf") if b.get("type") != "null"]
        if len(branches) != 1:
            raise SchemaError(
                f"{where}: a union of {len(branches)} types is not structural; "
                "use one type (optional fields are fine)"
            )
        return _structural(_merge(branches[0], node), definitions, where)
    for keyword in _UNSUPPORTED:
        if keyword in node:
            raise SchemaError(f"{where}: {keyword} is not structural")
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "default" in node and node["default"] is None:
        del node["default"]
    kind = node.get("type")
    if kind == "object":
        _object(node, definitions, where)
    elif kind == "array":
        if "items" not in node:
            raise SchemaError(f"{where}: a list needs a type for its items")
        node["items"] = _structural(node["items"], definitions, f"{where}[]")
        node.setdefault("x-kubernetes-list-type", "atomic")
    elif kind not in _SCALARS:
        raise SchemaError(f"{where}: no structural type for {node!r}")
    return node


def _object(node: JsonSchema, definitions: dict[str, JsonSchema], where: str) -> None:
    extra = node.pop("additionalProperties", None)
    properties = node.get("properties")
    if properties is not None:
        if extra not in (None, False):
            raise SchemaError(f"{where}: both properties and additionalProperties")
        node["properties"] = {
            key: _structural(value, definitions, f"{where}.{key}")
            for key, value in properties.items()
        }
    elif isinstance(extra, dict):
        node["additionalProperties"] = _structural(extra, definitions, f"{where}.*")
    elif not node.get(_PRESERVE):
        node[_PRESERVE] = True  # dict[str, Any]: a Kubernetes type passed through as it is
    if node.get("default") == {}:
        # A model's own defaults, written out: the API server validates a default as it stands
        # (CEL rules included) before it would fill in the defaults inside it.
        node["default"] = apply_defaults(node, {})
        if not node["default"]:
            del node["default"]  # nothing to write


def apply_defaults(schema: JsonSchema, value: Any) -> Any:
    """``value`` with the schema's defaults filled in, as the API server's structural defaulting
    does: a missing property with a default gets it, then defaults apply inside it."""
    if isinstance(value, dict) and schema.get("type") == "object":
        result = dict(value)
        properties: dict[str, JsonSchema] = schema.get("properties", {})
        for key, prop in properties.items():
            if key not in result and "default" in prop:
                result[key] = copy.deepcopy(prop["default"])
        for key, item in result.items():
            if key in properties:
                result[key] = apply_defaults(properties[key], item)
            elif isinstance(schema.get("additionalProperties"), dict):
                result[key] = apply_defaults(schema["additionalProperties"], item)
        return result
    if isinstance(value, list) and schema.get("type") == "array":
        return [apply_defaults(schema["items"], item) for item in value]
    return value


def crd_for(
    model: type[BaseModel],
    *,
    plural: str,
    singular: str,
    kind: str,
    scope: Scope,
    short_names: Sequence[str],
    printer_columns: Sequence[JsonSchema],
    categories: Sequence[str] = CATEGORIES,
) -> JsonSchema:
    """An apiextensions.k8s.io/v1 CRD for ``model`` in group crewlet.ai, version v1alpha1
    (served and stored), with the status subresource."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
                "shortNames": list(short_names),
                "categories": list(categories),
            },
            "scope": scope,
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema(model)},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [dict(c) for c in printer_columns],
                }
            ],
        },
    }


def _condition(field: str, condition_type: str) -> str:
    return f'.status.conditions[?(@.type=="{condition_type}")].{field}'


_AGE: JsonSchema = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def company_crd() -> JsonSchema:
    """The Company CRD (namespaced; short name ``cco``)."""
    return crd_for(
        v1alpha1.Company,
        plural="companies",
        singular="company",
        kind="Company",
        scope="Namespaced",
        short_names=["cco"],
        printer_columns=[
            {"name": "Class", "type": "string", "jsonPath": ".spec.className"},
            {"name": "Engine", "type": "string", "jsonPath": ".status.engineVersion"},
            {"name": "Ready", "type": "string", "jsonPath": _condition("status", "Ready")},
            {"name": "Reason", "type": "string", "jsonPath": _condition("reason", "Ready")},
            _AGE,
            {
                "name": "Accepted",
                "type": "string",
                "jsonPath": _condition("reason", "Accepted"),
                "priority": 1,
            },
            {"name": "Suspend", "type": "boolean", "jsonPath": ".spec.suspend", "priority": 1},
            {"name": "Image", "type": "string", "jsonPath": ".status.engineImage", "priority": 1},
        ],
    )


def engine_class_crd() -> JsonSchema:
    """The EngineClass CRD (cluster-scoped; short name ``ec``)."""
    return crd_for(
        v1alpha1.EngineClass,
        plural="engineclasses",
        singular="engineclass",
        kind="EngineClass",
        scope="Cluster",
        short_names=["ec"],
        printer_columns=[
            {"name": "Image", "type": "string", "jsonPath": ".spec.engine.image"},
            {"name": "Companies", "type": "integer", "jsonPath": ".status.companies"},
            _AGE,
            {
                "name": "References",
                "type": "string",
                "jsonPath": _condition("status", "ReferencesResolved"),
                "priority": 1,
            },
        ],
    )


def all_crds() -> list[JsonSchema]:
    """Every CRD of the crewlet.ai group, by name."""
    return [company_crd(), engine_class_crd()]


def file_name(crd: JsonSchema) -> str:
    """``crewlet.ai_companies.yaml``: group and plural, as controller-gen names them."""
    return f"{crd['spec']['group']}_{crd['spec']['names']['plural']}.yaml"


def render(crd: JsonSchema) -> str:
    """The CRD as YAML, with the generated-file header; keys sorted, so the text is stable."""
    body = yaml.safe_dump(
        crd, sort_keys=True, default_flow_style=False, allow_unicode=True, width=1 << 16
    )
    return f"{HEADER}---\n{body}"


def manifests() -> dict[str, str]:
    """File name to text, for every CRD."""
    return {file_name(crd): render(crd) for crd in all_crds()}


def write(directory: Path) -> list[Path]:
    """Write every CRD into ``directory`` and remove stale generated ones; return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    wanted = manifests()
    for stale in directory.glob(f"{GROUP}_*.yaml"):
        if stale.name not in wanted:
            stale.unlink()
    written = []
    for name, text in wanted.items():
        path = directory / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        written.append(path)
    return written


def drift(directory: Path) -> list[str]:
    """File names in ``directory`` that differ from what the models generate (or are missing,
    or stale)."""
    wanted = manifests()
    differing = [
        name
        for name, text in wanted.items()
        if not (directory / name).is_file() or (directory / name).read_text() != text
    ]
    stale = [p.name for p in directory.glob(f"{GROUP}_*.yaml") if p.name not in wanted]
    return sorted(differing + stale)
