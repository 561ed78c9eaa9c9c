"""The chart's README documents every value, from values.yaml, and stays in step with it."""

from __future__ import annotations

from typing import Any

import yaml

from hack.chart_readme import CHART, README, documented, render


def leaves(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict) and node:
        return [p for k, v in node.items() for p in leaves(v, f"{prefix}{k}.")]
    return [prefix.rstrip(".")]


def test_readme_matches_values_yaml() -> None:
    assert README.read_text() == render(), "stale: run `python hack/chart_readme.py`"


def test_every_value_has_a_default_and_a_why() -> None:
    text = (CHART / "values.yaml").read_text()
    keys = {key for key, why in documented(text.splitlines()) if why}
    undocumented = [
        leaf
        for leaf in leaves(yaml.safe_load(text))
        if not any(leaf == k or leaf.startswith(k + ".") for k in keys)
    ]
    assert undocumented == []
