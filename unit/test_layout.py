"""The repository stands alone: no test, script or build step reaches outside it; and its
layers hold where import-linter (``.importlinter``, ``make lint``) cannot look."""

from __future__ import annotations

import ast
import configparser
import importlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

from hack.api_reference import api_modules

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
OPERATOR = ROOT / "reconcilers" / "crewlet_operator_daemon"
OPERATOR_GROUP = "crewlet.ai"


def library_public_modules() -> dict[str, set[str]]:
    """The library's public modules, those its reference documents (the Makefile's
    API_MODULES: the package's face, the CRD generator, and the modules that hold what the face
    does not re-export), each to the names it exports (its ``__all__``)."""
    return {
        module: set(getattr(importlib.import_module(module), "__all__", ()))
        for module in api_modules(ROOT / "Makefile")
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
        if module == "crewlet_operator_daemon" or module.startswith("crewlet_operator_daemon.")
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


def unpublished_imports(source: str, public: dict[str, set[str]]) -> list[str]:
    """What ``source`` takes from the library that is not public: a module the reference does
    not document (``crewlet_operator._tasks``, ``crewlet_operator.sharding.ring``), or a name
    its module does not export."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
            found += [m for m in modules if m.startswith("crewlet_operator.") and m not in public]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module = node.module
            if module != "crewlet_operator" and not module.startswith("crewlet_operator."):
                continue
            if module not in public:
                found.append(module)
                continue
            found += [
                f"{module}.{alias.name}" for alias in node.names if alias.name not in public[module]
            ]
    return found


def test_the_operator_uses_the_librarys_public_modules() -> None:
    """``from crewlet_operator import ...`` (the face), or a name another public module exports
    (``from crewlet_operator.objects import name``): what a platform team's controller may rely
    on is what the operator relies on."""
    public = library_public_modules()
    offenders = [
        f"{path.relative_to(ROOT)} imports {what}"
        for path in sorted(OPERATOR.rglob("*.py"))
        for what in unpublished_imports(path.read_text(), public)
    ]
    assert offenders == []


def test_the_operators_rule_refuses_what_is_not_public() -> None:
    """The rule above can fail: a private module, a module the reference does not document, and
    a name a public module does not export are each refused; the face and a public module's
    exported names pass."""
    public = library_public_modules()
    assert "crewlet_operator._tasks" not in public
    assert "precedence" not in public["crewlet_operator.leader"]
    refused = (
        "from crewlet_operator._tasks import cancel_and_wait\n"
        "import crewlet_operator.sharding.ring\n"
        "from crewlet_operator.leader import precedence\n"
        "from crewlet_operator import namespaced_key\n"
    )
    assert unpublished_imports(refused, public) == [
        "crewlet_operator._tasks",
        "crewlet_operator.sharding.ring",
        "crewlet_operator.leader.precedence",
        "crewlet_operator.namespaced_key",
    ]
    allowed = (
        "from crewlet_operator import Manager, Request\n"
        "from crewlet_operator.objects import name, namespaced_key\n"
        "from crewlet_operator.crd import crd_for\n"
        "from crewlet_operator_daemon import naming\n"
    )
    assert unpublished_imports(allowed, public) == []


# -- the operator's decisions do no I/O ------------------------------------------------------------

# The operator's modules that talk to the API server, run on the event loop or read files:
# every other module of the operator (but its API) decides, and is pure.
OPERATOR_IO = {
    "crewlet_operator_daemon.admission",
    "crewlet_operator_daemon.census",
    "crewlet_operator_daemon.checkpoint",
    "crewlet_operator_daemon.class_controller",
    "crewlet_operator_daemon.cli",
    "crewlet_operator_daemon.controller",
    "crewlet_operator_daemon.slots",
    "crewlet_operator_daemon.writer",
}
# What a decision may not reach: the event loop and the HTTP client under the library's client,
# cache, controller and manager.
IO_STACK = ("asyncio", "aiohttp")


def decision_modules() -> set[str]:
    """The decision modules as .importlinter lists them (its contract forbids them the event
    loop by direct import)."""
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    listed = config["importlinter:contract:decisions-do-no-io"]["source_modules"]
    return set(listed.split())


def library_faces() -> dict[str, str]:
    """Each name the package's face exports, to the module it comes from."""
    faces = {}
    for node in ast.parse((LIBRARY / "__init__.py").read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module:
            faces.update({alias.asname or alias.name: node.module for alias in node.names})
    return faces


def test_every_operator_module_does_io_or_decides() -> None:
    """A new module is sorted into one or the other, so that the checks below reach it."""
    modules = {
        f"crewlet_operator_daemon.{path.stem if path.is_file() else path.name}"
        for path in OPERATOR.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").exists()
    }
    assert decision_modules() == modules - OPERATOR_IO - {"crewlet_operator_daemon.api"}


def test_the_decisions_take_nothing_that_does_io_from_the_library() -> None:
    """No client, manager, cache or event loop: a decision takes from the library only names
    whose module reaches neither asyncio nor aiohttp. import-linter cannot tell: the operator
    takes most names from the package's face, which imports the whole library."""
    graph = grimp.build_graph("crewlet_operator", include_external_packages=True)
    io = set().union(*(graph.find_downstream_modules(module) for module in IO_STACK))
    faces = library_faces()
    offenders = []
    for module in sorted(decision_modules()):
        path = OPERATOR.parent / (module.replace(".", "/") + ".py")
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0):
                continue
            for alias in node.names:
                source = faces.get(alias.name) if node.module == "crewlet_operator" else node.module
                if source in io:
                    offenders.append(f"{module} takes {alias.name} from {source}")
    assert offenders == []


def test_importing_the_api_loads_no_validator() -> None:
    """The API models (``make manifests``, the CRD tests) load no JSON Schema validator: the
    engine imports jsonschema_rs when it first validates. import-linter sees only the import
    lines, not what importing the package ``crewlet_operator_daemon`` (the models' parent) loads."""
    probe = (
        "import sys, crewlet_operator_daemon.api.conditions, crewlet_operator_daemon.api.crds, "
        "crewlet_operator_daemon.api.v1alpha1;"
        "print('jsonschema_rs' in sys.modules)"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "False"


# -- two distributions, one version --------------------------------------------------------------


def test_the_daemon_depends_on_the_library_at_its_own_version() -> None:
    """reconcilers/pyproject.toml pins the library it was tested with: the same
    version."""
    library = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    daemon = tomllib.loads((ROOT / "reconcilers" / "pyproject.toml").read_text())["project"]
    assert daemon["version"] == library["version"]
    # With its tracing extra: the daemon reads OpenTelemetry's environment.
    wanted = f"{library['name']}[tracing]=={library['version']}"
    assert wanted in daemon["dependencies"]
    # The operator's own dependencies are the daemon's, not the library's.
    assert not any(d.startswith(("jsonschema-rs", "semver")) for d in library["dependencies"])


# -- the design card's top level -----------------------------------------------------------------

CARD = {
    "pyproject.toml": "the library's distribution, crewlet-operator",
    "crewlet_operator": "the library's package",
    "reconcilers": "the operator's distribution, with its package inside",
    "manifests": "the generated CRDs",
    "charts": "the Helm chart",
    "e2e": "tests against a real control plane",
    "unit": "tests without an API server",
    "Dockerfile": "the operator's image",
    "Makefile": "every target",
}
"""The top-level names of the user's design card, and what each holds."""


def test_the_top_level_keeps_the_design_cards_names() -> None:
    """Each name exists and holds what the card says: the library's distribution at the root
    with its package, the operator's distribution under reconcilers/ with its package inside,
    the generated CRDs in manifests/crds, the chart, both test suites, the image and make."""
    assert {name for name in CARD if not (ROOT / name).exists()} == set()
    library = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert library["name"] == "crewlet-operator"
    assert (ROOT / "crewlet_operator" / "__init__.py").is_file()
    daemon = tomllib.loads((ROOT / "reconcilers" / "pyproject.toml").read_text())["project"]
    assert daemon["name"] == "crewlet-operator-daemon"
    assert daemon["scripts"] == {"crewlet-operator-daemon": "crewlet_operator_daemon.cli:main"}
    assert OPERATOR == ROOT / "reconcilers" / "crewlet_operator_daemon"
    assert (OPERATOR / "cli.py").is_file() and (OPERATOR / "api" / "v1alpha1.py").is_file()
    assert sorted(p.name for p in (ROOT / "manifests" / "crds").glob("*.yaml")) == [
        "crewlet.ai_companies.yaml",
        "crewlet.ai_engineclasses.yaml",
    ]
    assert (ROOT / "charts" / "crewlet-operator" / "Chart.yaml").is_file()
    assert any((ROOT / "e2e").glob("test_*.py")) and any((ROOT / "unit").glob("test_*.py"))
    assert "reconcilers" in (ROOT / "Dockerfile").read_text()
    assert "\ntest:" in (ROOT / "Makefile").read_text()
