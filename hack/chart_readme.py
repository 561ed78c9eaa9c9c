"""Write charts/crewlet-operator/README.md from values.yaml: one row per documented value, with
its default and the ``# --`` comment above it (helm-docs' convention), so the table and the
values never disagree. ``unit/test_chart_readme.py`` fails when the README drifts.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parent.parent / "charts" / "crewlet-operator"
README = CHART / "README.md"
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z][\w.-]*):")
# A documented value left commented out: `# key: value`, a single word after the colon.
COMMENTED_KEY = re.compile(r"^(?P<indent> *)# *(?P<key>[a-z][\w.-]*): *\S*$")
DESCRIPTION = re.compile(r"^# --( |$)")

INTRO = """\
# crewlet-operator Helm chart

Runs the Crewlet operator: the crewlet.ai CRDs (kept on uninstall), the manager Deployment,
its RBAC, and the ValidatingAdmissionPolicy `crewlet-operator-manager-writes` that holds the
manager's ServiceAccount to the objects it writes. No admission webhooks, no cert-manager.

```sh
helm install crewlet-operator oci://ghcr.io/crewlet/charts/crewlet-operator \\
  --version <version> --namespace crewlet-operator-system --create-namespace
```

Object names below are those of a release named `crewlet-operator`. Generated from
`values.yaml` by `hack/chart_readme.py`; edit the comments there, not this table.

## Values

| Value | Default | Why |
|---|---|---|
"""


def documented(lines: list[str]) -> list[tuple[str, str]]:
    """``(dotted key, description)`` for every key with a ``# --`` comment above it."""
    rows: list[tuple[str, str]] = []
    path: list[tuple[int, str]] = []
    pending: list[str] | None = None
    for line in lines:
        stripped = line.strip()
        match = KEY.match(line) or (COMMENTED_KEY.match(line) if pending is not None else None)
        if DESCRIPTION.match(stripped):
            pending = [stripped[4:].strip()]
            continue
        if match:
            indent = len(match["indent"])
            path = [(i, k) for i, k in path if i < indent] + [(indent, match["key"])]
            if pending is not None:
                rows.append((".".join(k for _, k in path), " ".join(pending)))
            pending = None
            continue
        if pending is not None and stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
        elif stripped and not stripped.startswith("#"):
            pending = None
    return rows


def default_of(values: dict[str, Any], dotted: str) -> str:
    node: Any = values
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return "unset"
        node = node[part]
    return f"`{json.dumps(node, separators=(', ', ': '))}`"


def render() -> str:
    """The README's text."""
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    rows = [
        f"| `{key}` | {default_of(values, key)} | {why.replace('|', '/')} |"
        for key, why in documented(text.splitlines())
    ]
    return INTRO + "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    """Write the README, or with ``--check`` exit 1 when it is stale."""
    text = render()
    if "--check" in argv:
        if not README.exists() or README.read_text() != text:
            print(f"{README} is stale: run `python hack/chart_readme.py`", file=sys.stderr)
            return 1
        return 0
    README.write_text(text)
    print(README)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
