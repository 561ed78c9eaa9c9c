"""Installing CustomResourceDefinitions and waiting until they serve, as envtest's
``CRDInstallOptions`` does: a suite must not race a CRD that is created but not yet served."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from crewlet_operator.envtest.wait import eventually
from crewlet_operator.kube.client import Client
from crewlet_operator.kube.resources import CUSTOM_RESOURCE_DEFINITION


def load_crds(*paths: Path) -> list[dict[str, Any]]:
    """The CRDs in YAML files and directories of YAML files (multi-document files too)."""
    crds: list[dict[str, Any]] = []
    for path in paths:
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        for file in files:
            crds += [d for d in yaml.safe_load_all(file.read_text()) if d]
    return crds


async def install_crds(
    client: Client,
    crds: Iterable[dict[str, Any]],
    timeout: float = 30.0,
    *,
    field_manager: str | None = None,
) -> None:
    """Apply ``crds`` (as ``field_manager``, the client's own by default) and wait until each is
    Established and its kind is served."""
    crds = list(crds)
    for crd in crds:
        await client.apply(CUSTOM_RESOURCE_DEFINITION, crd, field_manager=field_manager)

    async def all_served() -> bool:
        client.forget_discovery()
        for crd in crds:
            got = await client.get(CUSTOM_RESOURCE_DEFINITION, crd["metadata"]["name"])
            conditions = (got.get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
            spec = crd["spec"]
            versions = [v["name"] for v in spec["versions"] if v.get("served", True)]
            for version in versions:
                api_version = f"{spec['group']}/{version}"
                if not await client.is_served(api_version, spec["names"]["kind"]):
                    return False
        return True

    await eventually(all_served, timeout=timeout, message="CRDs Established and served")
