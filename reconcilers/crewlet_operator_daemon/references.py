"""Which Secrets an EngineClass references (model keys, telemetry headers, env values, S3 keys)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from crewlet_operator_daemon.api.v1alpha1 import EngineClassSpec, SecretKeyRef
from crewlet_operator_daemon.inputs import class_content


def secret_refs(engine_class: dict[str, Any]) -> list[SecretKeyRef]:
    """Every Secret key the class references, in a stable order; none for a class the model
    cannot parse (stored before the CRD tightened), which the reconcile reports as invalid."""
    try:
        spec = EngineClassSpec.model_validate(engine_class.get("spec") or {})
    except ValidationError:
        return []
    refs = [k.secret_ref for k in spec.model_keys]
    refs += [e.secret_ref for e in spec.env if e.secret_ref is not None]
    if spec.telemetry.headers is not None:
        refs.append(spec.telemetry.headers)
    s3 = spec.files.s3
    if s3 is not None and s3.credentials is not None:
        refs += [s3.credentials.access_key_id, s3.credentials.secret_access_key]
    return refs


def referenced_secrets(engine_class: dict[str, Any]) -> frozenset[tuple[str, str]]:
    """``(namespace, name)`` of every Secret the class references, read once per content
    (:func:`crewlet_operator_daemon.inputs.class_content`): every reconcile of a company asks."""
    content = class_content(engine_class)
    if content.referenced is None:
        content.referenced = frozenset((r.namespace, r.name) for r in secret_refs(engine_class))
    return content.referenced
