"""`python -m crewlet_operator.envtest bins`: what it asks of the machine, and its idempotence.

No test here builds anything: a cache that needs a Go build is a fresh temporary one, where the
command must stop before building; the kubectl-and-helm path runs on the real cache, which
`make unit` fills first (`make tools`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from crewlet_operator.envtest import binaries
from crewlet_operator.envtest.install import MINIMUM_GO, parse_go_version, staging_modules


def bins(*args: str, path: Path, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the command with ``path`` as the whole PATH (and ``cache`` as CREWLET_CACHE)."""
    environment = {**os.environ, "PATH": str(path)}
    if cache is not None:
        environment["CREWLET_CACHE"] = str(cache)
    return subprocess.run(
        [sys.executable, "-m", "crewlet_operator.envtest", "bins", *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
        check=False,
    )


def no_go(tmp_path: Path) -> Path:
    """A PATH directory that holds no `go`."""
    directory = tmp_path / "path-without-go"
    directory.mkdir()
    return directory


def test_bins_without_go_exits_2_with_one_line_naming_go_and_prebuilt_binaries(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    result = bins(path=no_go(tmp_path), cache=cache)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    message = lines[0]
    assert "Traceback" not in message
    assert "no `go` is on PATH" in message
    assert f"Go {MINIMUM_GO[0]}.{MINIMUM_GO[1]} or newer" in message
    assert "https://go.dev/dl/" in message
    assert "CREWLET_ENVTEST_ASSETS or KUBEBUILDER_ASSETS" in message
    # It stopped before building: the fresh cache holds nothing.
    assert [p for p in cache.rglob("*") if p.is_file()] == []


def test_bins_with_a_go_older_than_the_minimum_exits_2_naming_its_version(tmp_path: Path) -> None:
    path = no_go(tmp_path)
    old_go = path / "go"
    old_go.write_text("#!/bin/sh\necho go1.25.4\n")
    old_go.chmod(0o755)
    result = bins(path=path, cache=tmp_path / "cache")
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "`go` on PATH is go1.25.4" in result.stderr


def test_tools_only_needs_no_go_and_a_second_run_builds_nothing(tmp_path: Path) -> None:
    path = no_go(tmp_path)
    first = bins("--tools-only", path=path)
    assert first.returncode == 0, first.stdout + first.stderr
    second = bins("--tools-only", path=path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert second.stdout.splitlines() == [
        f"bins: kubectl and helm present in {binaries.cache_dir()}; nothing built"
    ]
    for tool in binaries.TOOL_BINARIES:
        assert os.access(binaries.cache_dir() / tool, os.X_OK)


def test_go_versions_are_read_from_go_env_goversion() -> None:
    assert parse_go_version("go1.26.8\n") == (1, 26)
    assert parse_go_version("go1.27rc1") == (1, 27)
    assert parse_go_version("devel go1.28-4f1e2a3 Tue Jan 6 2026") == (1, 28)
    assert parse_go_version("") is None


def test_only_the_modules_kubernetes_takes_from_its_staging_directory_are_replaced() -> None:
    go_mod = """module k8s.io/kubernetes

go 1.26.0

require (
\tgithub.com/spf13/cobra v1.10.0
\tk8s.io/api v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tk8s.io/kube-openapi => k8s.io/kube-openapi v0.0.0-20260101000000-abcdef
)
"""
    assert staging_modules(go_mod) == ["k8s.io/api", "k8s.io/client-go"]
