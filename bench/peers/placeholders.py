"""The peers' template language: what a placeholder stands for, and how a peer fills them in.

Standard library only: the kopf operator imports it from its own virtualenv. The Go operator
(``controller-runtime/main.go``) implements the same rules; the figure checks that what each
peer applied is what :func:`instantiate` makes of the template.

A template (written by :mod:`bench.peers.template`) is JSON::

    {"engineClass": ..., "placeholders": {"@@NAME@@": "name", ...},
     "seatsReplicas": [[4, "spec", "replicas"]],
     "children": [{"apiVersion": "v1", "kind": "Secret", ...}, ...]}

The rules, for a Company with namespace, name and uid:

- every placeholder is replaced wherever it occurs in a string value of an object; it stands for
  the Company's ``namespace``, ``name`` or ``uid``, for its ``token`` (the first 43 hex digits
  of the SHA-256 of the uid: fixed per Company, as long as the operator's random one), or for a
  ``digest`` (the SHA-256, in hex, of ``<uid>/<placeholder>``: a per-Company value of the
  length of the operator's hashes of what it rendered, which the peers do not re-implement);
- the values of a Secret's ``data`` are text in the template (so that placeholders can occur
  in them); they are base64-encoded after the replacement;
- when the Company sets ``spec.seats.replicas``, that number goes where each of
  ``seatsReplicas`` points (a child's index, then the keys down to the field), in place of the
  class default the template holds (the peers do not clamp it to the class's bounds: the bench
  sets none outside them).
"""

from __future__ import annotations

import base64
import copy
import hashlib
from typing import Any

Object = dict[str, Any]

NAMESPACE = "namespace"
NAME = "name"
UID = "uid"
TOKEN = "token"
DIGEST = "digest"
MEANINGS = (NAMESPACE, NAME, UID, TOKEN, DIGEST)
"""What a placeholder may stand for."""
TOKEN_LENGTH = 43
"""The length of the operator's token (``secrets.token_urlsafe(32)``)."""


def token(uid: str) -> str:
    """The Company's API token as the peers write it."""
    return hashlib.sha256(uid.encode()).hexdigest()[:TOKEN_LENGTH]


def digest(uid: str, placeholder: str) -> str:
    """What a ``digest`` placeholder becomes for the Company with ``uid``."""
    return hashlib.sha256(f"{uid}/{placeholder}".encode()).hexdigest()


def values(placeholders: dict[str, str], namespace: str, name: str, uid: str) -> dict[str, str]:
    """Each placeholder's value for one Company."""
    plain = {NAMESPACE: namespace, NAME: name, UID: uid, TOKEN: token(uid)}
    return {
        placeholder: digest(uid, placeholder) if meaning == DIGEST else plain[meaning]
        for placeholder, meaning in placeholders.items()
    }


def substitute(value: Any, replacements: dict[str, str]) -> Any:
    """``value`` with every placeholder replaced in its strings (a copy; keys are kept)."""
    if isinstance(value, str):
        for placeholder, replacement in replacements.items():
            value = value.replace(placeholder, replacement)
        return value
    if isinstance(value, dict):
        return {key: substitute(item, replacements) for key, item in value.items()}
    if isinstance(value, list):
        return [substitute(item, replacements) for item in value]
    return copy.copy(value)


def encode_secret_data(obj: Object) -> Object:
    """A Secret as the API server takes it: its text ``data`` values base64-encoded."""
    if obj.get("kind") != "Secret" or not obj.get("data"):
        return obj
    data = {key: base64.b64encode(text.encode()).decode() for key, text in obj["data"].items()}
    return {**obj, "data": data}


def instantiate(
    template: Object, namespace: str, name: str, uid: str, seats_replicas: int | None = None
) -> list[Object]:
    """The children for one Company (``seats_replicas``: its ``spec.seats.replicas``), in apply
    order."""
    replacements = values(template["placeholders"], namespace, name, uid)
    children = [substitute(child, replacements) for child in template["children"]]
    if seats_replicas is not None:
        for index, *keys, last in template["seatsReplicas"]:
            parent = children[index]
            for key in keys:
                parent = parent[key]
            parent[last] = seats_replicas
    return [encode_secret_data(child) for child in children]
