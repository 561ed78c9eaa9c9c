"""Write the Kubernetes-typed part of charts/crewlet-operator/values.schema.json from Kubernetes'
own OpenAPI v3.

The values that become Kubernetes fields (affinity, topology spread, probes, security contexts,
tolerations, resources, image pull secrets, node selector, NetworkPolicy peers) are typed with the
schemas of the Kubernetes version the chart runs on, under ``$defs``: the definitions named below
and every definition they reference, from the OpenAPI v3 documents of the k8s.io/kubernetes Go
module (the API server serves the same under ``/openapi/v3/``), converted for helm's JSON Schema
(draft 2020-12) validator:

- a reference ``#/components/schemas/X`` becomes ``#/$defs/X``;
- every object with properties gets ``additionalProperties: false``, so that a misspelt field
  fails ``helm install`` naming its path, as the API server's strict field validation would;
- a ``oneOf`` of bare types becomes one ``type`` list (IntOrString: integer or string; Quantity:
  string or number);
- the ``x-kubernetes-*`` extensions, which are not JSON Schema, are dropped;
- so are the enums (and the "Possible enum values" the API server appends to a description):
  the module's documents have none, the API server adds them, and an enum would refuse the empty
  string the API server takes as the default (a toleration's ``effect: ""`` means every effect).
  A wrong value is refused by the API server at install; what the schema is for is the misspelt
  field, which the API server would drop without a word.

The rest of values.schema.json (the chart's own values) is written by hand and kept as it is.

Usage::

    python hack/chart_schema.py    # needs Go, to find the k8s.io/kubernetes module

e2e/test_chart.py fails when ``$defs`` differ from what the running kube-apiserver serves,
converted by :func:`definitions`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from crewlet_operator.envtest.binaries import KUBERNETES_VERSION

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "charts" / "crewlet-operator" / "values.schema.json"
MODULE = f"k8s.io/kubernetes@{KUBERNETES_VERSION}"
# The OpenAPI v3 documents, by the path the API server serves each at under /openapi/v3/, and the
# file the module holds it in.
DOCUMENTS = {
    "api/v1": "api__v1_openapi.json",
    "apis/networking.k8s.io/v1": "apis__networking.k8s.io__v1_openapi.json",
}
DEFINITIONS = (
    "io.k8s.api.core.v1.Affinity",
    "io.k8s.api.core.v1.EnvVar",
    "io.k8s.api.core.v1.LocalObjectReference",
    "io.k8s.api.core.v1.PodSecurityContext",
    "io.k8s.api.core.v1.Probe",
    "io.k8s.api.core.v1.ResourceRequirements",
    "io.k8s.api.core.v1.SecurityContext",
    "io.k8s.api.core.v1.Toleration",
    "io.k8s.api.core.v1.TopologySpreadConstraint",
    "io.k8s.api.networking.v1.NetworkPolicyPeer",
    "io.k8s.apimachinery.pkg.api.resource.Quantity",
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
)
# Fields with no definition of their own, each written as the definition "<owner>.<field>".
FIELDS = {"io.k8s.api.core.v1.PodSpec": ("nodeSelector",)}
REF_PREFIX = "#/components/schemas/"
ENUM_VALUES = "\n\nPossible enum values:"


def module_dir() -> Path:
    """Where the Go module cache holds k8s.io/kubernetes (downloading it if need be)."""
    with tempfile.TemporaryDirectory() as scratch:
        result = subprocess.run(
            ["go", "mod", "download", "-json", MODULE],
            cwd=scratch,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "GOFLAGS": "-mod=mod"},
        )
    return Path(json.loads(result.stdout)["Dir"])


def load_documents() -> dict[str, Any]:
    """The module's OpenAPI v3 documents, by the path the API server serves each at."""
    spec = module_dir() / "api" / "openapi-spec" / "v3"
    return {path: json.loads((spec / name).read_text()) for path, name in DOCUMENTS.items()}


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value.removeprefix(REF_PREFIX)
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def convert(node: Any) -> Any:
    """One OpenAPI v3 schema as a JSON Schema (draft 2020-12) for helm, keys sorted."""
    if isinstance(node, list):
        return [convert(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key in sorted(node):
        value = node[key]
        if key.startswith("x-kubernetes-") or key == "enum":
            continue
        if key == "$ref":
            out[key] = "#/$defs/" + value.removeprefix(REF_PREFIX)
        elif key == "properties":
            out[key] = {name: convert(value[name]) for name in sorted(value)}
        elif key in ("items", "additionalProperties", "allOf", "oneOf", "anyOf"):
            out[key] = convert(value)
        elif key == "description":
            out[key] = value.split(ENUM_VALUES)[0]
        else:
            out[key] = value
    # The OpenAPI wraps a described reference in allOf; draft 2020-12 takes $ref beside
    # description.
    if len(out.get("allOf", [])) == 1 and set(out["allOf"][0]) == {"$ref"}:
        out["$ref"] = out.pop("allOf")[0]["$ref"]
    choices = out.get("oneOf", [])
    if choices and all(set(choice) == {"type"} for choice in choices):
        del out["oneOf"]
        out.pop("format", None)  # int-or-string: the type list says it
        out["type"] = [choice["type"] for choice in choices]
    if "properties" in out:
        out["additionalProperties"] = False
    return dict(sorted(out.items()))


def definitions(documents: Mapping[str, Any]) -> dict[str, Any]:
    """``$defs``: :data:`DEFINITIONS` and :data:`FIELDS`, and every definition they reference,
    converted, from OpenAPI v3 ``documents`` (by the path the API server serves each at)."""
    missing = set(DOCUMENTS) - set(documents)
    if missing:
        raise ValueError(f"OpenAPI documents missing: {sorted(missing)}")

    def schema_of(name: str) -> Any:
        found = [
            doc["components"]["schemas"][name]
            for doc in (documents[path] for path in DOCUMENTS)
            if name in doc["components"]["schemas"]
        ]
        if not found:
            raise KeyError(f"{name} is in none of the OpenAPI documents")
        if any(schema != found[0] for schema in found):
            raise ValueError(f"{name} differs between the OpenAPI documents")
        return found[0]

    roots: dict[str, Any] = {name: schema_of(name) for name in DEFINITIONS}
    for owner, fields in FIELDS.items():
        for field in fields:
            roots[f"{owner}.{field}"] = schema_of(owner)["properties"][field]
    todo = [ref for schema in roots.values() for ref in _refs(schema)]
    while todo:
        name = todo.pop()
        if name not in roots:
            roots[name] = schema_of(name)
            todo.extend(_refs(roots[name]))
    return {name: convert(roots[name]) for name in sorted(roots)}


def render(defs: Mapping[str, Any], schema: Path = SCHEMA) -> str:
    """values.schema.json with ``$defs`` replaced (last), the hand-written part kept."""
    values_schema = json.loads(schema.read_text())
    values_schema.pop("$defs", None)
    values_schema["$defs"] = dict(defs)
    return json.dumps(values_schema, indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    SCHEMA.write_text(render(definitions(load_documents())))
    print(f"wrote {SCHEMA.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
