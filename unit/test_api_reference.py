"""The API reference (``make docs``) covers every public name, and builds without a warning.

pdoc reads the docstrings and type hints as they are; these tests hold the library to what a
reader of the reference needs: every name a public module exports is in it, and every class and
function among them says what it is for.
"""

from __future__ import annotations

import importlib
import warnings
from pathlib import Path

import pdoc
import pdoc.doc
import pytest

ROOT = Path(__file__).resolve().parent.parent


def public_modules() -> list[str]:
    """The modules ``make docs`` documents (the Makefile's API_MODULES)."""
    makefile = (ROOT / "Makefile").read_text()
    line = next(ln for ln in makefile.splitlines() if ln.startswith("API_MODULES :="))
    return line.split(":=", 1)[1].split()


PUBLIC_MODULES = public_modules()


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_exported_name_is_documented(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported: list[str] = list(getattr(module, "__all__", ()))
    if module_name.endswith("pytest_plugin"):  # its public names are its fixtures
        exported = ["control_plane", "kube_client", "namespace", "client_for", "envtest_crds"]
    assert exported, module_name
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        documented = pdoc.doc.Module(module)
        undocumented = []
        for name in exported:
            member = documented.get(name)
            assert member is not None, f"{module_name}.{name} is missing from the reference"
            if isinstance(member, pdoc.doc.Class | pdoc.doc.Function) and not member.docstring:
                undocumented.append(name)
    assert undocumented == [], f"{module_name}: no docstring for {undocumented}"


def test_the_reference_builds_without_a_warning(tmp_path: Path) -> None:
    """What ``make docs`` runs (there with ``python -W error``)."""
    pdoc.render.configure(docformat="restructuredtext")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pdoc.pdoc(*PUBLIC_MODULES, output_directory=tmp_path)
    pages = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.html")}
    for module_name in PUBLIC_MODULES:
        assert module_name.replace(".", "/") + ".html" in pages, sorted(pages)
