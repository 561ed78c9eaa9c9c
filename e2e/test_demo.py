"""`make run` (hack/demo.py) brings a sample company to Ready on a fresh control plane."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.release
"""Release-grade: ``make test-release`` runs it, ``make test`` leaves it out."""

DEMO = Path(__file__).parent.parent / "hack" / "demo.py"


def test_make_run_shows_a_ready_company_and_stops_cleanly(tmp_path: Path) -> None:
    env = {**os.environ, "RUN_DIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, str(DEMO)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("Ready."):
                break
        else:
            raise AssertionError("demo ended before the company was Ready:\n" + "".join(lines))
        table = "".join(lines)
        # `kubectl get engineclasses,companies -A`: the sample company, Ready=True.
        company_row = next(line for line in lines if "company.crewlet.ai/acme" in line)
        assert company_row.split()[4] == "True", table
        assert "engineclass.crewlet.ai/standard" in table
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
