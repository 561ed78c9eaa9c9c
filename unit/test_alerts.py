"""The chart's alerts (``prometheusRule.enabled``), each tested with ``promtool test rules``: it
fires on the series that should fire it, at the time its ``for`` says, with its labels and text,
and not on one that should not (unit/alerts/crewlet-operator-alerts-test.yaml).

promtool is built from the Go module proxy by ``make promtool`` (part of ``make unit``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from crewlet_operator.envtest import binaries
from hack.release import built_go_tool

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "crewlet-operator"
TESTS = ROOT / "unit" / "alerts" / "crewlet-operator-alerts-test.yaml"
ALERTS = {
    "CrewletOperatorNoLeader",
    "CrewletOperatorReconcileErrors",
    "CrewletOperatorCompaniesNotReady",
    "CrewletOperatorQueueGrowing",
    "CrewletOperatorInformerStale",
    "CrewletOperatorMetricsCertificateExpiring",
}
"""The issue's list: no leader, reconcile errors, companies not Ready for long, a queue that
grows, a stale informer, the metrics endpoint's certificate expiry."""


def promtool() -> Path:
    try:
        return built_go_tool("promtool")
    except FileNotFoundError as missing:
        pytest.fail(str(missing))


def rules() -> dict[str, Any]:
    """The PrometheusRule's spec as `helm template` renders it with prometheusRule.enabled."""
    rendered = subprocess.run(
        [
            str(binaries.find("helm")),
            "template",
            "crewlet-operator",
            str(CHART),
            "--namespace",
            "crewlet-operator-system",
            "--set",
            "prometheusRule.enabled=true",
            "--show-only",
            "templates/prometheusrule.yaml",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
    ).stdout
    rule = yaml.safe_load(rendered)
    assert rule["kind"] == "PrometheusRule"
    return dict(rule["spec"])


def test_every_alert_the_issue_asks_for_is_there_and_tested() -> None:
    alerts = {r["alert"] for group in rules()["groups"] for r in group["rules"]}
    assert alerts == ALERTS
    tested = {
        case["alertname"]
        for test in yaml.safe_load(TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
    }
    assert tested == ALERTS


def test_each_alert_fires_when_it_should_and_only_then(tmp_path: Path) -> None:
    (tmp_path / "crewlet-operator-alerts.yaml").write_text(yaml.safe_dump(rules()))
    shutil.copy(TESTS, tmp_path / TESTS.name)
    result = subprocess.run(
        [str(promtool()), "test", "rules", TESTS.name],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
