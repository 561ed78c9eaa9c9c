"""Orphaned etcd data: a control plane killed before its ``stop()`` leaves etcd's data on
/dev/shm; the next one to start removes it (and only it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from crewlet_operator.envtest.controlplane import ETCD_DATA_PREFIX, sweep_orphaned_etcd_data


def _gone_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_only_the_data_of_processes_that_are_gone_is_removed(tmp_path: Path) -> None:
    orphan = tmp_path / f"{ETCD_DATA_PREFIX}{_gone_pid()}-abc"
    mine = tmp_path / f"{ETCD_DATA_PREFIX}{os.getpid()}-def"
    unknown = tmp_path / f"{ETCD_DATA_PREFIX}k3x9q"  # named before the owner was in the name
    other = tmp_path / "someone-elses-123-dir"
    for directory in (orphan, mine, unknown, other):
        (directory / "member").mkdir(parents=True)
    assert sweep_orphaned_etcd_data(tmp_path) == [orphan]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in (mine, unknown, other)
    )
