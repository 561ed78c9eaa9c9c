"""The reference site (``make docs``) covers every public name, holds the guides, and builds
without a warning.

pdoc reads the docstrings and type hints as they are; these tests hold the library to what a
reader of the reference needs: every name a public module exports is in it with a sentence of
its own (classes, functions, constants and type aliases, and each public method), and the
guides a user looks for are the docstrings of the modules they describe. The site is built by
hack/api_reference.py, as ``make docs`` builds it (there from the installed wheel).
"""

from __future__ import annotations

import importlib
import warnings
from pathlib import Path

import pdoc.doc
import pytest

from hack.api_reference import api_modules, build, documented

ROOT = Path(__file__).resolve().parent.parent


# Each guide: the module whose docstring it is, and the sections it must have.
GUIDES = {
    "crewlet_operator.kube.client": ["Lifecycle", "What the calls return", "Errors"],
    "crewlet_operator.manager": ["Lifecycle"],
    "crewlet_operator.crd": ["Models", "Constraints", "CEL rules", "Printer columns", "Versions"],
    "crewlet_operator.testing": ["run_manager", "pytest_plugin"],
}


PUBLIC_MODULES = api_modules(ROOT / "Makefile")
"""The modules ``make docs`` documents (the Makefile's API_MODULES)."""


def undocumented_names(module: pdoc.doc.Module, exported: list[str]) -> list[str]:
    """Those of the exported names, and of their classes' public methods, with no docstring."""
    missing = []
    for name in exported:
        member = module.get(name)
        assert member is not None, f"{module.modulename}.{name} is missing from the reference"
        if not member.docstring.strip():
            missing.append(name)
        if isinstance(member, pdoc.doc.Class):
            missing += [
                f"{name}.{method.name}"
                for method in member.members.values()
                if isinstance(method, pdoc.doc.Function)
                and not method.name.startswith("_")
                and not method.docstring.strip()
            ]
    return missing


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_exported_name_is_documented(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported: list[str] = list(getattr(module, "__all__", ()))
    if module_name.endswith("pytest_plugin"):  # its public names are its fixtures
        exported = ["control_plane", "kube_client", "namespace", "client_for", "envtest_crds"]
    assert exported, module_name
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (reference,) = documented([module_name])
        missing = undocumented_names(reference, exported)
    assert missing == [], f"{module_name}: no docstring for {missing}"


@pytest.mark.parametrize(("module_name", "sections"), GUIDES.items())
def test_each_guide_is_a_documented_modules_docstring(
    module_name: str, sections: list[str]
) -> None:
    assert module_name in PUBLIC_MODULES
    docstring = importlib.import_module(module_name).__doc__ or ""
    absent = [section for section in sections if section not in docstring]
    assert absent == [], f"{module_name}'s guide lacks {absent}"


def test_the_package_docstring_links_every_guide() -> None:
    index = importlib.import_module("crewlet_operator").__doc__ or ""
    assert [g for g in GUIDES if f":mod:`{g}`" not in index] == []


def test_the_reference_builds_without_a_warning(tmp_path: Path) -> None:
    """What ``make docs`` runs (there with ``python -W error``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build(PUBLIC_MODULES, tmp_path)
    pages = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.html")}
    for module_name in PUBLIC_MODULES:
        assert module_name.replace(".", "/") + ".html" in pages, sorted(pages)
    assert "index.html" in pages
