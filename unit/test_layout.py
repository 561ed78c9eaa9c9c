"""The repository stands alone: no test, script or build step reaches outside it."""

from __future__ import annotations

import ast
import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A path into the shared workspace the repository was written from, however it is spelt.
OUTSIDE = re.compile(r"(/work/shared|\.\./shared|/work/\.library)")
CHECKED = (".py", ".sh", ".yml", ".yaml", ".toml", ".cfg", ".mk", "Makefile", "Dockerfile")


def tracked_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    this = Path(__file__).resolve()  # it spells the pattern out
    # A file deleted in the working tree but not yet in the index is not read.
    return [
        ROOT / name
        for name in listed.split("\0")
        if name.endswith(CHECKED) and ROOT / name != this and (ROOT / name).exists()
    ]


def test_nothing_reads_a_path_outside_the_repository() -> None:
    files = tracked_files()
    assert any(f.name == "Makefile" for f in files)
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert offenders == []


# -- the library knows nothing about Crewlet -------------------------------------------------------

LIBRARY = ROOT / "crewlet_operator"
OPERATOR = ROOT / "reconcilers"
OPERATOR_GROUP = "crewlet.ai"
LIBRARY_MODULES_THE_OPERATOR_MAY_IMPORT = {
    # The CRD generator (the library's controller-gen) is a module of its own, not re-exported:
    # only a build step needs pydantic's JSON-schema machinery.
    "crewlet_operator.crd",
}


def imported_modules(path: Path) -> list[str]:
    """Every module ``path`` imports, by its full dotted name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


def test_the_library_never_imports_the_operator() -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in sorted(LIBRARY.rglob("*.py"))
        for module in imported_modules(path)
        if module == "reconcilers" or module.startswith("reconcilers.")
    ]
    assert offenders == []


def test_the_library_never_names_the_operators_group() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted(LIBRARY.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if OPERATOR_GROUP in line
    ]
    assert offenders == []


def test_the_operator_uses_the_librarys_public_face() -> None:
    """``from crewlet_operator import ...``, plus the short allow-list above: what a platform
    team's controller may rely on is what the operator relies on."""
    offenders = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in sorted(OPERATOR.rglob("*.py"))
        for module in imported_modules(path)
        if module.startswith("crewlet_operator.")
        and module not in LIBRARY_MODULES_THE_OPERATOR_MAY_IMPORT
    ]
    assert offenders == []


# -- two distributions, one version --------------------------------------------------------------


def test_the_daemon_depends_on_the_library_at_its_own_version() -> None:
    """daemon/pyproject.toml pins the library it was tested with: the same version."""
    library = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    daemon = tomllib.loads((ROOT / "daemon" / "pyproject.toml").read_text())["project"]
    assert daemon["version"] == library["version"]
    assert f"{library['name']}=={library['version']}" in daemon["dependencies"]
    # The operator's own dependencies are the daemon's, not the library's.
    assert not any(d.startswith(("jsonschema-rs", "semver")) for d in library["dependencies"])
