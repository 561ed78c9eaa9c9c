"""Example controller: each Widget gets a ConfigMap with its ``spec.data`` over its namespace's
defaults (ConfigMaps labelled ``example.crewlet.ai/defaults=true``). Public API only.

Its CRD is generated from the model below (``python widgets.py crds`` writes
``example.crewlet.ai_widgets.yaml``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from crewlet_operator import (
    CONFIG_MAP,
    Manager,
    Request,
    Resource,
    condition,
    controller_reference,
    set_condition,
)
from crewlet_operator.crd import ConditionDict, crd_for, list_map, write
from crewlet_operator.objects import name, namespace

WIDGET = Resource("example.crewlet.ai", "v1", "Widget", "widgets")
DEFAULTS = {"matchLabels": {"example.crewlet.ai/defaults": "true"}}


class WidgetSpec(BaseModel):
    """What to render."""

    data: dict[str, str] = Field(
        default_factory=dict, description="Keys over the namespace's defaults."
    )


class WidgetStatus(BaseModel):
    """What the controller observed."""

    conditions: list[ConditionDict] = Field(
        default_factory=list, json_schema_extra=list_map("type")
    )


class Widget(BaseModel):
    """Data rendered into a ConfigMap beside it."""

    api_version: str | None = Field(default=None, alias="apiVersion")
    kind: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: WidgetSpec = Field(default_factory=WidgetSpec)
    status: WidgetStatus | None = None


def widget_crd() -> dict[str, Any]:
    """The Widget CRD, from the model."""
    return crd_for(
        Widget,
        group=WIDGET.group,
        version=WIDGET.version,
        kind=WIDGET.kind,
        plural=WIDGET.plural,
        scope="Namespaced",
    )


def setup(manager: Manager) -> None:
    """Register the widget controller with ``manager``."""
    client, cache = manager.client, manager.cache

    def widgets_of_namespace(config_map: dict[str, Any]) -> list[Request]:
        labels = config_map["metadata"].get("labels") or {}
        if labels.get("example.crewlet.ai/defaults") != "true":
            return []
        ns = namespace(config_map)
        return [Request(ns, name(w)) for w in cache.list(WIDGET, ns)]

    async def reconcile(request: Request) -> None:
        widget = cache.get(WIDGET, request.name, request.namespace)
        if widget is None:
            return  # deleted: garbage collection removes its ConfigMap
        data: dict[str, str] = {}
        for defaults in cache.list(CONFIG_MAP, request.namespace, labels=DEFAULTS):
            data.update(defaults.get("data") or {})
        data.update(widget.get("spec", {}).get("data") or {})
        desired = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"{request.name}-rendered",
                "namespace": request.namespace,
                "labels": {"example.crewlet.ai/widget": request.name},
                "ownerReferences": [controller_reference(widget)],
            },
            "data": data,
        }
        observed = cache.get(CONFIG_MAP, f"{request.name}-rendered", request.namespace)
        await client.apply_if_changed(CONFIG_MAP, desired, observed)

        status = widget.get("status") or {}
        ready = condition(
            "Ready",
            True,
            "Rendered",
            f"{len(data)} keys rendered",
            observed_generation=widget["metadata"]["generation"],
        )
        conditions = set_condition(status.get("conditions") or [], ready)
        if conditions != status.get("conditions"):
            await client.apply_status(
                WIDGET,
                {
                    "apiVersion": WIDGET.api_version,
                    "kind": WIDGET.kind,
                    "metadata": {"name": request.name, "namespace": request.namespace},
                    "status": {"conditions": conditions},
                },
            )

    (
        manager.controller("widget")
        .for_(WIDGET)
        .owns(CONFIG_MAP)
        .watches(CONFIG_MAP, widgets_of_namespace)
        .complete(reconcile)
    )


if __name__ == "__main__":
    if sys.argv[1:] != ["crds"]:
        sys.exit("usage: python examples/widgets.py crds")
    for path in write(Path(__file__).resolve().parent, [widget_crd()]):
        print(path)
