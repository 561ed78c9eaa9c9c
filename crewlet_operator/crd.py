"""CustomResourceDefinitions from pydantic models: the library's controller-gen.

A kind is a pydantic model with ``spec`` (and usually ``status``); :func:`crd_for` makes its
apiextensions.k8s.io/v1 CRD, :func:`write` keeps a directory of generated CRD files in step with
the models, and :func:`drift` says which files a test should fail on::

    from crewlet_operator.crd import crd_for, drift, write

    WIDGET_CRD = crd_for(Widget, group="example.com", version="v1", kind="Widget",
                         plural="widgets", scope="Namespaced")
    write(Path("config/crd"), [WIDGET_CRD])          # make manifests
    assert drift(Path("config/crd"), [WIDGET_CRD]) == []   # a unit test

Models
------

One model a kind, the same one the controller reads objects through
(``TenantSpec.model_validate(tenant["spec"])``), so the schema and the code cannot disagree::

    class TenantSpec(BaseModel):
        "What a tenant is given."  # the description kubectl explain shows

        model_config = ConfigDict(extra="forbid")  # the controller refuses what it would drop

        quota: dict[str, str] = Field(default_factory=dict, description="The ResourceQuota.")
        admins: list[str] = Field(default_factory=list, description="Users bound to admin.")


    class TenantStatus(BaseModel):
        namespace: str | None = None
        conditions: list[ConditionDict] = Field(default_factory=list,
                                                json_schema_extra=list_map("type"))


    class Tenant(BaseModel):
        "A team's share of the cluster."

        api_version: str | None = Field(default=None, alias="apiVersion")
        kind: str | None = None
        metadata: dict[str, Any] = Field(default_factory=dict)
        spec: TenantSpec = Field(default_factory=TenantSpec)
        status: TenantStatus | None = None

- A field the CRD does not know is pruned by the API server when a user writes it (kubectl
  says so, since the API server warns by default; :class:`~crewlet_operator.Client` logs the
  warning), and refused only when the write asks for ``fieldValidation=Strict`` (``kubectl
  --validate=strict``, ``Client.with_field_validation("Strict")``). ``extra="forbid"`` is for
  the controller's side: an object stored before the model changed fails to parse, loudly.
- The top-level model has ``apiVersion``, ``kind`` and ``metadata`` (any types: the generator
  writes Kubernetes' own schema for them) beside ``spec`` and ``status``; ``status`` gets no
  default (the API server never invents a status).
- Fields are named on the wire by their aliases: for camelCase, give each field an ``alias``
  or the model an ``alias_generator`` (with ``populate_by_name=True`` to build them in
  Python by the snake_case name).
- A field's ``description``, else its model's docstring, becomes the schema's description.
- A required field (no default) is ``required``; an optional one (``X | None = None``) is
  simply left out, and ``null`` is refused.
- ``dict[str, str]`` is a map of strings; ``dict[str, Any]`` is free-form
  (``x-kubernetes-preserve-unknown-fields``), for Kubernetes types passed through as they are
  (affinity, resources). :data:`LabelSelector` and :data:`ConditionDict` carry Kubernetes' own
  schemas for a ``metav1.LabelSelector`` and a ``metav1.Condition``.

Constraints
-----------

pydantic's constraints become the schema's, checked by the API server before anything is
stored: ``Field(min_length=, max_length=, pattern=)`` on strings (``minLength``,
``maxLength``, ``pattern``), ``Field(ge=, le=)`` on numbers (``minimum``, ``maximum``),
``Field(gt=, lt=)`` (``minimum`` with ``exclusiveMinimum: true``, OpenAPI v3.0's spelling,
which the API server reads), ``Field(min_length=, max_length=)`` on lists (``minItems``,
``maxItems``), and ``Literal`` values (``enum``). A list is ``atomic`` (replaced whole by a
server-side apply) unless :func:`list_map` makes it a map merged by its keys.

CEL rules
---------

What one field's constraints cannot say (two fields that go together, a rule on the name) is a
CEL rule, the kubebuilder ``XValidation`` marker's counterpart: :func:`validations` carries
rules made by :func:`cel` (a rule and the message it refuses with; ``field_path`` names the
field the refusal points at) into a field's or a model's ``json_schema_extra``, and
:func:`on_create` makes a rule checked on create only. ``self`` is the value where the rule
sits; :func:`cel_string` quotes a Python string (a pattern) for a rule::

    class EnvValue(BaseModel):
        model_config = ConfigDict(json_schema_extra=validations(
            cel("has(self.value) != has(self.secretRef)",
                "an env entry sets exactly one of value and secretRef")))

        name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=128)
        value: str | None = None
        secret_ref: SecretKeyRef | None = Field(default=None, alias="secretRef")

    class Company(BaseModel):                  # a rule on the name sits at the root
        model_config = ConfigDict(json_schema_extra=validations(
            on_create("size(self.metadata.name) <= 46", "a Company's name is at most 46")))

Rules a field and its model both carry are all kept. Keep what the reconcile needs in a
pydantic validator too when objects stored before a rule existed must still be read.

Printer columns
---------------

``crd_for(printer_columns=[...])`` lists the columns ``kubectl get`` shows, each a dict as the
CRD spells it (``name``, ``type``, ``jsonPath``, and ``priority: 1`` for a column shown only by
``-o wide``). :func:`condition_column` shows one field of one condition (``Ready`` and its
``reason``, say), and a kind that lists its own columns adds :data:`AGE_COLUMN` to keep the
Age::

    printer_columns=[condition_column("Ready", "Ready"),
                     condition_column("Reason", "Ready", "reason"),
                     AGE_COLUMN,
                     {"name": "Namespace", "type": "string", "jsonPath": ".status.namespace"}]

Versions
--------

:func:`crd_for` makes one version, served and stored, with the status subresource
(``status=False`` leaves it out: a status write then changes the generation). There is no
conversion between versions and no conversion webhook: serve one version, and for a new one
write a new model and move the stored objects yourself. ``short_names`` and ``categories``
(``kubectl get all``, say) name the kind for kubectl.

Files
-----

:func:`write` writes ``<group>_<plural>.yaml`` (controller-gen's names) and removes the stale
files of the same groups; a command of the project's (``python -m my_controller.api
config/crd``, say) calls it, and a unit test asserts ``drift(...) == []`` so that a model
changed without its file fails. :func:`render` is one CRD's text.

How the schema is made
----------------------

The schema is pydantic's JSON schema in *validation* mode, made structural:

- validation mode, because a CRD schema gates what clients *send*, and what the API server
  stores is what the controller later parses with ``model_validate``: the two must agree on
  the input, not on what ``model_dump`` would print (the modes differ on serializers,
  computed fields and validators that accept other input types);
- every ``$ref`` is inlined (a referenced model's docstring becomes the description when the
  field has none of its own) and ``X | None`` becomes plain ``X``: an optional field is simply
  not ``required``, and ``null`` is not accepted;
- no ``title``; ``const`` becomes a one-value ``enum``; ``dict[str, str]`` keeps its
  ``additionalProperties``, and a free-form ``dict[str, Any]`` (Kubernetes types passed through,
  such as affinity or resources) is ``x-kubernetes-preserve-unknown-fields``;
- static defaults are carried over so the API server fills them in, and a nested model whose
  pydantic default is the model itself (``default_factory=Storage``) defaults to that model's
  own defaults (``{size: 12Gi}``), when it has any;
- every list has an ``x-kubernetes-list-type``: ``atomic`` unless the model says ``map``
  (:func:`list_map`).

Anything that cannot be made structural (a union of two types, say) raises
:class:`SchemaError` rather than producing a CRD the API server would refuse.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, WithJsonSchema
from pydantic.json_schema import GenerateJsonSchema, NoDefault
from pydantic_core import core_schema

from crewlet_operator.conditions import MAX_MESSAGE_LENGTH, MAX_REASON_LENGTH, MAX_TYPE_LENGTH

# Re-exported: defined with every other error of the library, importable from here as before.
from crewlet_operator.errors import SchemaError as SchemaError  # noqa: PLC0414

Scope = Literal["Namespaced", "Cluster"]
"""A CRD's ``spec.scope``: its objects live in a namespace, or in the cluster."""

__all__ = [
    "AGE_COLUMN",
    "CONDITION_SCHEMA",
    "DEFAULT_HEADER",
    "LABEL_KEY_MESSAGE",
    "LABEL_KEY_PATTERN",
    "LABEL_SELECTOR_SCHEMA",
    "LABEL_VALUE_SCHEMA",
    "ConditionDict",
    "JsonSchema",
    "LabelSelector",
    "SchemaError",
    "Scope",
    "apply_defaults",
    "cel",
    "cel_string",
    "condition_column",
    "crd_for",
    "drift",
    "file_name",
    "list_map",
    "on_create",
    "openapi_schema",
    "render",
    "validations",
    "write",
]

DEFAULT_HEADER = """\
# Generated from pydantic models by crewlet_operator.crd. Do not edit: change the models and
# regenerate.
"""
"""The comment :func:`write` puts at the top of each generated file."""

JsonSchema = dict[str, Any]
"""A piece of (OpenAPI v3) JSON schema."""


def cel_string(text: str) -> str:
    """``text`` as a CEL string literal (single-quoted, backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cel(rule: str, message: str, *, field_path: str | None = None) -> JsonSchema:
    """One ``x-kubernetes-validations`` entry: a CEL ``rule``, the ``message`` it refuses with."""
    entry: JsonSchema = {"rule": rule, "message": message}
    if field_path is not None:
        entry["fieldPath"] = field_path
    return entry


def on_create(rule: str, message: str) -> JsonSchema:
    """A CEL ``rule`` checked when the object is created only.

    For rules on what cannot change (``metadata.name``) at the schema's root, where the API
    server does not ratchet: checked on every write, a rule added later would refuse even the
    status writes that tell the owner of an older object what is wrong with it.
    """
    return {"rule": f"oldSelf.hasValue() || ({rule})", "message": message, "optionalOldSelf": True}


def validations(*rules: JsonSchema) -> JsonSchema:
    """``json_schema_extra`` carrying CEL rules into the generated CRD schema."""
    return {"x-kubernetes-validations": list(rules)}


def list_map(*keys: str) -> JsonSchema:
    """``json_schema_extra`` for a list that is a map keyed by ``keys`` (server-side apply merges
    its items by key, and the API server refuses two items with the same key)."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$"
)
"""A label key: ``[prefix/]name``, the prefix a DNS subdomain, the name at most 63 characters."""
LABEL_KEY_MESSAGE = (
    "a label key is [prefix/]name: the name at most 63 letters, digits, '-', '_' or '.', "
    "starting and ending with a letter or digit; the prefix a DNS subdomain"
)
"""What a CEL rule on label keys refuses with: :data:`LABEL_KEY_PATTERN` in words."""
LABEL_VALUE_SCHEMA: JsonSchema = {
    "type": "string",
    "maxLength": 63,
    "pattern": r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$",
    "description": "A label value: empty, or letters, digits, '-', '_' and '.' between two "
    "letters or digits.",
}
"""The schema of a label value: at most 63 characters, as Kubernetes allows."""

LABEL_SELECTOR_SCHEMA: JsonSchema = {
    "type": "object",
    "description": (
        "A label selector (metav1.LabelSelector): the requirements are ANDed; an empty selector "
        "selects everything."
    ),
    "x-kubernetes-map-type": "atomic",
    "properties": {
        "matchLabels": {
            "type": "object",
            "maxProperties": 64,
            "additionalProperties": LABEL_VALUE_SCHEMA,
            "description": "Labels that must all be present with these values.",
            "x-kubernetes-validations": [
                cel(
                    "self.all(key, size(key) <= 317 && "
                    f"key.matches({cel_string(LABEL_KEY_PATTERN)}))",
                    LABEL_KEY_MESSAGE,
                )
            ],
        },
        "matchExpressions": {
            "type": "array",
            "description": "Requirements on labels, all of which must hold.",
            "x-kubernetes-list-type": "atomic",
            "items": {
                "type": "object",
                "description": "A requirement on one label.",
                "required": ["key", "operator"],
                "properties": {
                    "key": {
                        "type": "string",
                        "maxLength": 317,
                        "pattern": LABEL_KEY_PATTERN,
                        "description": "The label key.",
                    },
                    "operator": {
                        "type": "string",
                        "enum": ["In", "NotIn", "Exists", "DoesNotExist"],
                        "description": "How the key relates to the values.",
                    },
                    "values": {
                        "type": "array",
                        "maxItems": 64,
                        "items": LABEL_VALUE_SCHEMA,
                        "x-kubernetes-list-type": "atomic",
                        "description": (
                            "The values, for In and NotIn (at least one); empty for Exists "
                            "and DoesNotExist."
                        ),
                    },
                },
                "x-kubernetes-validations": [
                    cel(
                        "self.operator in ['In', 'NotIn'] "
                        "? (has(self.values) && size(self.values) > 0) "
                        ": (!has(self.values) || size(self.values) == 0)",
                        "a label selector expression with operator In or NotIn needs values; "
                        "one with Exists or DoesNotExist takes none",
                    )
                ],
            },
        },
    },
}
"""The schema of a metav1.LabelSelector, as controller-gen writes it (:data:`LabelSelector`)."""

LabelSelector = Annotated[dict[str, Any], WithJsonSchema(LABEL_SELECTOR_SCHEMA)]
"""A metav1.LabelSelector as a plain dict, with its Kubernetes schema in the CRD."""

CONDITION_SCHEMA: JsonSchema = {
    "type": "object",
    "description": "One aspect of the object's state (metav1.Condition).",
    "required": ["type", "status", "lastTransitionTime", "reason", "message"],
    "properties": {
        "type": {
            "type": "string",
            "maxLength": MAX_TYPE_LENGTH,
            "pattern": (
                r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
            ),
            "description": "The condition's type, e.g. Ready.",
        },
        "status": {
            "type": "string",
            "enum": ["True", "False", "Unknown"],
            "description": "True, False or Unknown.",
        },
        "observedGeneration": {
            "type": "integer",
            "format": "int64",
            "minimum": 0,
            "description": "The metadata.generation the condition was set for.",
        },
        "lastTransitionTime": {
            "type": "string",
            "format": "date-time",
            "description": "When the status last changed.",
        },
        "reason": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_REASON_LENGTH,
            "pattern": r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
            "description": "Why, in CamelCase, e.g. ClassNotFound.",
        },
        "message": {
            "type": "string",
            "maxLength": MAX_MESSAGE_LENGTH,
            "description": "Why, for humans.",
        },
    },
}
"""The schema of one ``status.conditions`` entry, as controller-gen writes metav1.Condition's."""

ConditionDict = Annotated[dict[str, Any], WithJsonSchema(CONDITION_SCHEMA)]
"""A metav1.Condition as a plain dict (see :mod:`crewlet_operator.conditions`)."""


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
    else:
        _exclusive_bounds(node)
    return node


def _exclusive_bounds(node: JsonSchema) -> None:
    """``gt``/``lt`` in OpenAPI v3.0's spelling, which the API server reads: pydantic writes
    JSON Schema's newer one, a number (``exclusiveMinimum: 0``), which the API server refuses."""
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        value = node.get(exclusive)
        if isinstance(value, int | float) and not isinstance(value, bool):
            node[bound] = value
            node[exclusive] = True


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
    group: str,
    version: str,
    kind: str,
    plural: str,
    scope: Scope,
    singular: str | None = None,
    short_names: Sequence[str] = (),
    categories: Sequence[str] = (),
    printer_columns: Sequence[JsonSchema] = (),
    status: bool = True,
    selectable_fields: Sequence[str] = (),
) -> JsonSchema:
    """An apiextensions.k8s.io/v1 CRD for ``model``: one version, served and stored, with the
    status subresource unless ``status`` is False (then a status write changes the generation
    and needs the whole object), printer columns for ``kubectl get``, and
    ``selectable_fields``, the JSON paths a field selector may name (``.spec.owner``: a list
    or a watch with ``fieldSelector=spec.owner=team-a``, served since Kubernetes 1.32; at most
    8, each a string, integer or boolean field; an object without it has the empty value)."""
    names: JsonSchema = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": singular or kind.lower(),
    }
    if short_names:
        names["shortNames"] = list(short_names)
    if categories:
        names["categories"] = list(categories)
    served: JsonSchema = {
        "name": version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": openapi_schema(model)},
    }
    if status:
        served["subresources"] = {"status": {}}
    if printer_columns:
        served["additionalPrinterColumns"] = [dict(c) for c in printer_columns]
    if selectable_fields:
        served["selectableFields"] = [{"jsonPath": path} for path in selectable_fields]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "names": names, "scope": scope, "versions": [served]},
    }


def condition_column(name: str, condition_type: str, field: str = "status") -> JsonSchema:
    """A printer column showing one field (``status``, ``reason``) of one condition."""
    path = f'.status.conditions[?(@.type=="{condition_type}")].{field}'
    return {"name": name, "type": "string", "jsonPath": path}


AGE_COLUMN: JsonSchema = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
"""The Age column every ``kubectl get`` shows, for a kind that lists its own columns."""


def file_name(crd: JsonSchema) -> str:
    """``<group>_<plural>.yaml``, as controller-gen names a CRD's file."""
    return f"{crd['spec']['group']}_{crd['spec']['names']['plural']}.yaml"


def render(crd: JsonSchema, header: str = DEFAULT_HEADER) -> str:
    """The CRD as YAML, after ``header``; keys sorted, so the text is stable."""
    body = yaml.safe_dump(
        crd, sort_keys=True, default_flow_style=False, allow_unicode=True, width=1 << 16
    )
    return f"{header}---\n{body}"


def _files(crds: Sequence[JsonSchema], header: str) -> dict[str, str]:
    return {file_name(crd): render(crd, header) for crd in crds}


def _generated(directory: Path, crds: Sequence[JsonSchema]) -> set[str]:
    """Files in ``directory`` of the groups of ``crds``: those :func:`write` owns."""
    groups = {crd["spec"]["group"] for crd in crds}
    return {p.name for g in groups for p in directory.glob(f"{g}_*.yaml")}


def write(directory: Path, crds: Sequence[JsonSchema], header: str = DEFAULT_HEADER) -> list[Path]:
    """Write ``crds`` into ``directory`` (``<group>_<plural>.yaml``, as controller-gen names
    them) and remove the stale files of their groups; return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    wanted = _files(crds, header)
    for stale in _generated(directory, crds) - set(wanted):
        (directory / stale).unlink()
    written = []
    for name, text in wanted.items():
        path = directory / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        written.append(path)
    return written


def drift(directory: Path, crds: Sequence[JsonSchema], header: str = DEFAULT_HEADER) -> list[str]:
    """File names in ``directory`` that differ from what :func:`write` would write (or are
    missing, or stale): what a test fails on."""
    wanted = _files(crds, header)
    differing = [
        name
        for name, text in wanted.items()
        if not (directory / name).is_file() or (directory / name).read_text() != text
    ]
    return sorted(differing + sorted(_generated(directory, crds) - set(wanted)))
