"""The e2e suite's own CRDs, written beside the envtest binaries (``make bins`` runs this after
``python -m crewlet_operator.envtest bins``); tests find them with ``binaries.find(name)``.

- ``gateway-api-crds.yaml``: the Gateway API's standard channel (GatewayClass, Gateway,
  HTTPRoute, ReferenceGrant), for the tests of the webhook route;
- ``prometheus-operator-crds.yaml``: prometheus-operator's ServiceMonitor and PrometheusRule
  CRDs, for the tests of the chart's ServiceMonitor and alerts (their real schemas, not a
  stand-in that accepts anything).

Both come from their Go modules in the Go module cache, never copied into the repository. Each
file opens with a comment naming its sources, so a run finds it current without asking Go and
says "nothing written".
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from crewlet_operator.envtest import GoUnavailableError, InstallError, binaries, go_module_dir


@dataclass(frozen=True)
class Bundle:
    """One file of CRDs taken from a Go module."""

    name: str
    module: str
    version: str
    files: tuple[str, ...]

    def header(self) -> str:
        """The file's opening: a document separator and a comment naming its sources."""
        return f"---\n# {self.name} from {self.module}@{self.version}: {', '.join(self.files)}\n"


GATEWAY_API = Bundle(
    "gateway-api-crds.yaml",
    "sigs.k8s.io/gateway-api",
    "v1.6.3",
    tuple(
        f"config/crd/standard/gateway.networking.k8s.io_{kind}.yaml"
        for kind in ("gatewayclasses", "gateways", "httproutes", "referencegrants")
    ),
)
PROMETHEUS_OPERATOR = Bundle(
    "prometheus-operator-crds.yaml",
    "github.com/prometheus-operator/prometheus-operator",
    "v0.94.0",
    tuple(
        f"example/prometheus-operator-crd/monitoring.coreos.com_{kind}.yaml"
        for kind in ("servicemonitors", "prometheusrules")
    ),
)
BUNDLES = (GATEWAY_API, PROMETHEUS_OPERATOR)


def write(bundle: Bundle, directory: Path) -> bool:
    """Write ``bundle`` into ``directory`` unless it is there already; whether it was written."""
    target = directory / bundle.name
    header = bundle.header()
    if target.is_file() and target.read_text().startswith(header):
        return False
    source = go_module_dir(bundle.module, bundle.version)
    documents = [(source / file).read_text().removeprefix("---\n") for file in bundle.files]
    partial = target.with_name(f".{target.name}.partial")
    partial.write_text(header + "---\n".join(d.rstrip("\n") + "\n" for d in documents))
    partial.chmod(0o644)  # the module cache's files are read-only
    os.replace(partial, target)
    return True


def main() -> int:
    """Write what is missing or out of date; the exit code (2 when Go is needed and missing)."""
    directory = binaries.cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    try:
        written = [bundle.name for bundle in BUNDLES if write(bundle, directory)]
    except GoUnavailableError as error:
        print(f"test-assets: {error}", file=sys.stderr)
        return 2
    except InstallError as error:
        print(f"test-assets: {error}", file=sys.stderr)
        return 1
    if written:
        print(f"test-assets: wrote {' '.join(written)} into {directory}")
    else:
        names = " and ".join(bundle.name for bundle in BUNDLES)
        print(f"test-assets: {names} present in {directory}; nothing written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
