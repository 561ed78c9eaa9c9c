"""Every panel of the chart's Grafana dashboard shows data from a live operator, asked of a
real Prometheus that scrapes it as the chart's ServiceMonitor does (hack/dashboard_picture.py,
which `make dashboard-picture` runs to draw docs/images/dashboard.png).

e2e/test_operator.py checks that each query names a metric the operator exports; this checks
that each query, labels, functions and all, answers with series."""

from __future__ import annotations

from pathlib import Path

import pytest

from hack import dashboard_picture

pytestmark = pytest.mark.release
"""Release-grade: ``make test-release`` runs it, ``make test`` leaves it out."""


@pytest.mark.timeout(900)
def test_every_panel_of_the_dashboard_shows_data(tmp_path: Path) -> None:
    picture = tmp_path / "dashboard.png"
    # 60 s of tenants at work: the rate() panels need two scrapes, the refusals one company.
    dashboard_picture.watch(60, picture)
    assert picture.stat().st_size > 50_000
