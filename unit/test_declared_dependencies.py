"""Every package the shipped code imports is declared, with bounds, by the distribution that
ships the importing module: crewlet_operator's in the library's pyproject.toml (the root), the
daemon's in its own or in the library's (which it depends on). A package installed only because
another one requires it (aiohttp by kubernetes-asyncio, yarl and multidict by aiohttp) is not
declared by that: it can leave with the next release of what brought it."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "pyproject.toml"
DAEMON = ROOT / "reconcilers" / "pyproject.toml"
FIRST_PARTY = {"crewlet_operator", "crewlet_operator_daemon"}
EXTRAS = {"crewlet_operator/envtest/pytest_plugin.py": "test"}
"""Modules a user imports only with an extra installed (the pytest plugin: the test extra),
whose imports that extra may declare instead of the dependencies."""


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(pyproject: Path, extra: str | None = None) -> dict[str, str]:
    """Each requirement of ``pyproject``'s dependencies (or of its ``extra``), by name."""
    project = tomllib.loads(pyproject.read_text())["project"]
    listed = project["optional-dependencies"][extra] if extra else project["dependencies"]
    found = {}
    for requirement in listed:
        name = re.match(r"[A-Za-z0-9._-]+", requirement)
        assert name is not None, requirement
        found[normalized(name.group())] = requirement
    return found


def imported(package: Path) -> dict[str, set[str]]:
    """The top-level modules imported anywhere under ``package`` (absolute imports; in
    functions and ``TYPE_CHECKING`` blocks too), each with the files importing it."""
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.partition(".")[0], set()).add(
                    path.relative_to(ROOT).as_posix()
                )
    return found


def third_party(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    return {
        top: files
        for top, files in modules.items()
        if top not in sys.stdlib_module_names and top not in FIRST_PARTY
    }


def undeclared(
    modules: dict[str, set[str]], declared: Iterable[dict[str, str]], extras: dict[str, str]
) -> list[str]:
    """What ``modules`` imports that no requirement in ``declared`` (or, for a module in
    ``extras``, in its extra's) names, or names without a lower bound."""
    distributions = importlib.metadata.packages_distributions()
    merged: dict[str, str] = {}
    for listing in declared:
        merged.update(listing)
    problems = []
    for top, files in sorted(third_party(modules).items()):
        names = {normalized(d) for d in distributions.get(top, [])}
        if not names:
            problems.append(f"{top} (imported by {sorted(files)}): no installed distribution")
            continue
        for file in sorted(files):
            allowed = dict(merged)
            if file in extras:
                allowed.update(requirements(LIBRARY, extras[file]))
            matches = [allowed[n] for n in names if n in allowed]
            if not matches:
                problems.append(f"{top} ({'/'.join(sorted(names))}) imported by {file}")
            elif not any(re.search(r"(>=|==|~=)", m) for m in matches):
                problems.append(f"{top}: {matches} has no lower bound")
    return problems


def test_the_library_declares_every_package_it_imports() -> None:
    modules = imported(ROOT / "crewlet_operator")
    assert {"aiohttp", "yarl", "multidict", "tenacity"} <= modules.keys()
    assert undeclared(modules, [requirements(LIBRARY)], EXTRAS) == []


def test_the_daemon_declares_every_package_it_imports_or_the_library_does() -> None:
    modules = imported(ROOT / "reconcilers" / "crewlet_operator_daemon")
    assert undeclared(modules, [requirements(DAEMON), requirements(LIBRARY)], {}) == []


def test_a_dependency_the_library_imports_has_both_bounds() -> None:
    """Those named in the card and those only a requirement of another brought in before."""
    library = requirements(LIBRARY)
    for name in ("aiohttp", "yarl", "multidict", "tenacity", "kubernetes-asyncio", "pydantic"):
        assert re.search(r">=[^,]+,<", library[name]), library[name]


@pytest.mark.parametrize("removed", ["aiohttp", "yarl", "multidict", "tenacity"])
def test_a_removed_declaration_is_caught(removed: str) -> None:
    declared = {k: v for k, v in requirements(LIBRARY).items() if k != removed}
    problems = undeclared(imported(ROOT / "crewlet_operator"), [declared], EXTRAS)
    assert problems and all(p.startswith(f"{removed} (") for p in problems), problems


def test_a_library_import_is_not_covered_by_the_daemon() -> None:
    """The daemon's requirements do not count for the library: it is installed without them."""
    modules = {"semver": {"crewlet_operator/x.py"}}
    assert undeclared(modules, [requirements(LIBRARY)], {}) != []
    assert undeclared(modules, [requirements(DAEMON)], {}) == []
