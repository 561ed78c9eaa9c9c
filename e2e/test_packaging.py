"""The two distributions, each installed by pip into a fresh virtualenv, as their users install
them.

- ``crewlet-operator`` (the repository's root): the library alone, its built wheel installed with
  its ``test`` extra. A platform team gets no ``crewlet_operator_daemon`` package and none of the
  operator's own dependencies, and the examples' envtest suite (the Tenant controller) runs from
  a copy of examples/ with nothing but that install: ``crewlet_operator`` is the wheel's, in the
  virtualenv, not the checkout's.
- ``crewlet-operator-daemon`` (reconcilers/): the operator on the library; its
  ``crewlet-operator-daemon`` command runs and its data files (the engine's schema) are installed.

The sources are copied first, so that pip's in-tree build writes nothing into the checkout.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.release
"""Release-grade: ``make test-release`` runs it, ``make test`` leaves it out."""

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "crewlet_operator", "reconcilers")
PIP_TIMEOUT = 900


def run(*argv: str | Path, cwd: Path | None = None, timeout: float = PIP_TIMEOUT) -> str:
    """Run a command; fail with its output if it fails; return its stdout."""
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
    )
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The working tree's sources of both distributions (not its caches or virtualenv)."""
    copy = tmp_path_factory.mktemp("sources")
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=ignore)
        else:
            shutil.copy2(source, copy / name)
    return copy


def virtualenv(directory: Path) -> Path:
    """A fresh virtualenv; its python."""
    run(sys.executable, "-m", "venv", directory)
    return directory / "bin" / "python"


def importable(python: Path, module: str) -> bool:
    done = subprocess.run(
        [str(python), "-c", f"import {module}"], capture_output=True, text=True, check=False
    )
    return done.returncode == 0


@pytest.fixture(scope="module")
def library_only(sources: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The library's wheel, alone, with its test extra, as a platform team installs it."""
    wheels = tmp_path_factory.mktemp("wheels")
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", wheels, sources)
    (wheel,) = wheels.glob("crewlet_operator-*.whl")
    python = virtualenv(tmp_path_factory.mktemp("library-venv"))
    run(python, "-m", "pip", "install", "--quiet", f"{wheel}[test]")
    return python


def test_the_library_installs_without_the_operator(library_only: Path) -> None:
    installed = run(library_only, "-m", "pip", "list", "--format=freeze")
    names = {line.split("==")[0].lower() for line in installed.splitlines()}
    assert "crewlet-operator" in names
    assert "crewlet-operator-daemon" not in names
    # The operator's own dependencies stay out: the engine's schema validator, semver.
    assert not {"jsonschema-rs", "jsonschema_rs", "semver"} & names, names
    assert importable(library_only, "crewlet_operator")
    assert importable(library_only, "crewlet_operator.envtest.pytest_plugin")
    assert not importable(library_only, "crewlet_operator_daemon")


def test_the_examples_suite_runs_on_the_library_wheel_alone(
    library_only: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A copy of examples/, outside the checkout, run with the library's virtualenv."""
    examples = tmp_path / "examples"
    shutil.copytree(
        ROOT / "examples", examples, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache")
    )
    # What the suite imports, from where it runs: the wheel's copy, in the virtualenv.
    where = "import crewlet_operator; print(crewlet_operator.__file__)"
    imported = Path(run(library_only, "-c", where, cwd=examples).strip()).resolve()
    assert imported.is_relative_to(library_only.parent.parent.resolve()), imported
    assert not imported.is_relative_to(ROOT), imported
    out = run(library_only, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=examples)
    summary = out.strip().splitlines()[-1]
    with capsys.disabled():
        print(f"\nexamples/ on the library's wheel alone: {summary}")
    passed = re.search(r"(\d+) passed", summary)
    assert passed is not None and int(passed.group(1)) > 0, summary
    assert "failed" not in summary and "skipped" not in summary and "error" not in summary


def test_the_daemon_installs_on_the_library(
    sources: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    python = virtualenv(tmp_path_factory.mktemp("daemon-venv"))
    # One command, so that pip takes the library it depends on from the same sources.
    run(python, "-m", "pip", "install", "--quiet", sources, sources / "reconcilers")
    command = python.parent / "crewlet-operator-daemon"
    assert "--leader-elect" in run(command, "--help", timeout=60)
    schema = run(
        python,
        "-c",
        "from crewlet_operator_daemon import engine; print(engine.schema()['$schema'])",
        timeout=60,
    )
    assert schema.strip() == "https://json-schema.org/draft/2020-12/schema"
    assert importable(python, "crewlet_operator_daemon.api.crds")
