"""The template the peers apply: one Company's children, as the Python operator renders them,
with every per-Company value replaced by a placeholder (:mod:`bench.peers.placeholders`).

Generated when the figure runs, never committed, so it cannot drift from the reconciler: two
Companies of the same EngineClass are rendered by
:func:`crewlet_operator_daemon.company.desired_children` exactly as :mod:`bench.floor` renders them
(the same cluster facts and model-key Secret; the token from the peers' own rule). The first one's
namespace, name, uid and token become placeholders; then the template is filled in for the second
one, and every value that still differs is a value derived from the others (the hashes of the
rendered config and Secrets, in annotations) and becomes a ``digest`` placeholder. Anything else
that differs, and anything filling the template in does not reproduce, is a :class:`TemplateError`:
a per-Company value the peers do not know. Last, the first one is rendered again with
``spec.seats.replicas`` set (:data:`SEATS_REPLICAS_PROBE`): the fields that take that number are
where the peers put a Company's own (``seatsReplicas``), and any other field it changes, hashes
aside, is a :class:`TemplateError` too.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cluster import MODEL_KEYS, PLATFORM
from bench.floor import FACTS
from bench.peers import placeholders
from crewlet_operator_daemon.api.v1alpha1 import COMPANY
from crewlet_operator_daemon.company import desired_children
from crewlet_operator_daemon.plan import Observed

Object = dict[str, Any]
LeafPath = tuple[str | int, ...]
Renderer = Callable[[Object], list[Object]]
"""A Company (as stored) to its children, in apply order."""

_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
_KNOWN = {
    "@@NAMESPACE@@": placeholders.NAMESPACE,
    "@@NAME@@": placeholders.NAME,
    "@@UID@@": placeholders.UID,
    "@@TOKEN@@": placeholders.TOKEN,
}


class TemplateError(RuntimeError):
    """The children hold a per-Company value the template cannot express."""


@dataclass(frozen=True)
class Sample:
    """A Company the template is made from; its values occur nowhere else in the children
    (letters no hex digest holds, names that are no part of one another)."""

    namespace: str
    name: str
    uid: str

    def company(self, class_name: str, seats_replicas: int | None = None) -> Object:
        """The Company as the API server would hold it (``spec.seats.replicas`` if given)."""
        spec: Object = {"className": class_name}
        if seats_replicas is not None:
            spec["seats"] = {"replicas": seats_replicas}
        return {
            "apiVersion": COMPANY.api_version,
            "kind": COMPANY.kind,
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "uid": self.uid,
                "generation": 1,
            },
            "spec": spec,
        }

    def replacements(self) -> dict[str, str]:
        """Each value of this Company to its placeholder."""
        meanings = {
            placeholders.NAMESPACE: self.namespace,
            placeholders.NAME: self.name,
            placeholders.UID: self.uid,
            placeholders.TOKEN: placeholders.token(self.uid),
        }
        return {meanings[meaning]: placeholder for placeholder, meaning in _KNOWN.items()}


FIRST = Sample(namespace="tplnamespace", name="tplcompany", uid="tpluid-first")
SECOND = Sample(namespace="other-space", name="othername", uid="otheruid-second")
SEATS_REPLICAS_PROBE = 7
"""A ``spec.seats.replicas`` within the class's default bounds, and not their default."""


def renderer(engine_class: Object, model_keys: Object) -> Renderer:
    """The children of a Company of ``engine_class``, as :func:`bench.floor.render` renders
    them, with the peers' token."""

    def render(company: Object) -> list[Object]:
        uid = company["metadata"]["uid"]
        applies = desired_children(
            company,
            engine_class,
            Observed(secrets={(PLATFORM, MODEL_KEYS): model_keys}),
            FACTS,
            token_factory=lambda: placeholders.token(uid),
        )
        return [apply.object for apply in applies]

    return render


def build(render: Renderer, class_name: str) -> Object:
    """The template for Companies of ``class_name`` (see the module's docstring)."""
    first = [_as_text(child) for child in render(FIRST.company(class_name))]
    second = [_as_text(child) for child in render(SECOND.company(class_name))]
    if len(first) != len(second):
        raise TemplateError(f"{len(first)} children for one company, {len(second)} for another")
    found = FIRST.replacements()
    children = [placeholders.substitute(child, found) for child in first]
    digests: dict[str, str] = {}
    fill = placeholders.values(_KNOWN, SECOND.namespace, SECOND.name, SECOND.uid)
    for index, (child, expected) in enumerate(zip(children, second, strict=True)):
        expected_leaves = leaves(expected)
        for path, value in leaves(child).items():
            if path not in expected_leaves:
                raise TemplateError(f"child {index} {_name(path)}: only one company has it")
            if placeholders.substitute(value, fill) == expected_leaves[path]:
                continue
            original = at(first[index], path)
            if not (_is_digest(original) and _is_digest(expected_leaves[path])):
                raise TemplateError(
                    f"child {index} {_name(path)}: {original!r} for one company, "
                    f"{expected_leaves[path]!r} for another"
                )
            _set(child, path, digests.setdefault(original, f"@@DIGEST-{len(digests) + 1}@@"))
        if set(expected_leaves) - set(leaves(child)):
            raise TemplateError(f"child {index}: the other company's has more fields")
    scaled = render(FIRST.company(class_name, SEATS_REPLICAS_PROBE))
    template = {
        "engineClass": class_name,
        "placeholders": {**_KNOWN, **dict.fromkeys(digests.values(), placeholders.DIGEST)},
        "seatsReplicas": _seats_replicas(first, [_as_text(child) for child in scaled]),
        "children": children,
    }
    for sample in (FIRST, SECOND):
        _check(template, sample, render(sample.company(class_name)))
    _check(template, FIRST, scaled, SEATS_REPLICAS_PROBE)
    return template


def _seats_replicas(first: list[Object], scaled: list[Object]) -> list[list[str | int]]:
    """Where ``spec.seats.replicas`` goes: the fields of ``first``'s children that hold
    :data:`SEATS_REPLICAS_PROBE` in ``scaled`` (the same company with it set), as a child's
    index and the keys down to the field."""
    found: list[list[str | int]] = []
    for index, (child, other) in enumerate(zip(first, scaled, strict=True)):
        child_leaves, other_leaves = leaves(child), leaves(other)
        if child_leaves.keys() != other_leaves.keys():
            raise TemplateError(f"child {index}: spec.seats.replicas changes its fields")
        for path, value in child_leaves.items():
            changed = other_leaves[path]
            if changed == value or (_is_digest(value) and _is_digest(changed)):
                continue
            if changed != SEATS_REPLICAS_PROBE or not all(isinstance(k, str) for k in path):
                raise TemplateError(
                    f"child {index} {_name(path)}: spec.seats.replicas makes it {changed!r}"
                )
            found.append([index, *path])
    if not found:
        raise TemplateError("spec.seats.replicas changes no child")
    return found


def write(render: Renderer, class_name: str, path: Path) -> Path:
    """Build the template and write it to ``path`` (as JSON); return ``path``."""
    path.write_text(json.dumps(build(render, class_name), indent=1, sort_keys=True) + "\n")
    return path


def load(path: Path) -> Object:
    """A template :func:`write` wrote."""
    loaded: Object = json.loads(path.read_text())
    return loaded


def differences(desired: Object, live: Object) -> list[str]:
    """Where ``live`` (an object as the API server returns it) lacks a field of ``desired`` or
    holds another value; fields the server added are no difference, nor a zero value it leaves
    out (``false``, ``0`` and ``""`` of an ``omitempty`` field)."""
    found = []
    for path, value in leaves(desired).items():
        try:
            actual = at(live, path)
        except (KeyError, IndexError, TypeError):
            if value not in (False, 0, ""):
                found.append(f"{_name(path)} missing")
            continue
        if value not in ({}, []) and actual != value:
            found.append(f"{_name(path)}: {actual!r}, not {value!r}")
    return found


def _check(
    template: Object, sample: Sample, rendered: list[Object], seats_replicas: int | None = None
) -> None:
    """Filling the template in for ``sample`` gives its children, digests aside."""
    made = placeholders.instantiate(
        template, sample.namespace, sample.name, sample.uid, seats_replicas
    )
    for index, (child, expected) in enumerate(zip(made, rendered, strict=True)):
        made_leaves, expected_leaves = leaves(child), leaves(expected)
        if made_leaves.keys() != expected_leaves.keys():
            raise TemplateError(f"child {index} of {sample.name}: other fields")
        for path, value in made_leaves.items():
            if value != expected_leaves[path] and not _is_digest_placeholder(
                template, at(template["children"][index], path)
            ):
                raise TemplateError(f"child {index} of {sample.name} {_name(path)}: {value!r}")


def _as_text(child: Object) -> Object:
    """A child with its Secret ``data`` decoded (the template's form)."""
    if child.get("kind") != "Secret" or not child.get("data"):
        return child
    data = {key: base64.b64decode(value).decode() for key, value in child["data"].items()}
    return {**child, "data": data}


def leaves(value: Any, path: LeafPath = ()) -> dict[LeafPath, Any]:
    """Every scalar (and empty collection) of ``value`` by its path of keys and indexes."""
    if isinstance(value, dict) and value:
        return {p: v for key, item in value.items() for p, v in leaves(item, (*path, key)).items()}
    if isinstance(value, list) and value:
        return {p: v for i, item in enumerate(value) for p, v in leaves(item, (*path, i)).items()}
    return {path: value}


def at(value: Any, path: LeafPath) -> Any:
    """What ``path`` leads to in ``value``."""
    for step in path:
        value = value[step]
    return value


def _set(value: Any, path: LeafPath, leaf: Any) -> None:
    at(value, path[:-1])[path[-1]] = leaf


def _is_digest_placeholder(template: Object, value: Any) -> bool:
    meaning = template["placeholders"].get(value) if isinstance(value, str) else None
    return meaning == placeholders.DIGEST


def _is_digest(value: Any) -> bool:
    return isinstance(value, str) and _HEX_DIGEST.fullmatch(value) is not None


def _name(path: LeafPath) -> str:
    return ".".join(str(step) for step in path)
