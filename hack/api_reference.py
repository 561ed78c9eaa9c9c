"""The reference site (``make docs``): pdoc over the library's public modules, from its docstrings.

``make docs`` runs it with the python of a virtualenv into which the built wheel was installed,
with ``--installed``: the site is then what a pip user's copy of the library says, and the run
fails if ``crewlet_operator`` was imported from anywhere else (a checkout on ``sys.path``).

pdoc reads a variable's docstring from the source of the module it documents, so a constant the
package's face re-exports (``CONFIG_MAP``, ``LOW_PRIORITY``) would appear there without the
sentence written under it where it is defined: :func:`fill_variable_docstrings` carries it over.
unit/test_api_reference.py builds the same site and holds every public name to a docstring.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

import pdoc
import pdoc.doc
import pdoc.doc_ast
import pdoc.render

PACKAGE = "crewlet_operator"


def api_modules(makefile: Path) -> list[str]:
    """The modules the reference documents: the Makefile's ``API_MODULES``, whose value runs
    over lines that end with a backslash."""
    lines = iter(makefile.read_text().splitlines())
    value = next(line for line in lines if line.startswith("API_MODULES :="))
    value = value.split(":=", 1)[1]
    while value.endswith("\\"):
        value = value[:-1] + " " + next(lines)
    return value.split()


def defined_docstring(name: str, value: object) -> str:
    """The docstring written under ``name`` in the library module that defines ``value``."""
    for module_name, module in sorted(sys.modules.items()):
        if module_name.split(".")[0] != PACKAGE or getattr(module, name, None) is not value:
            continue
        docstring = pdoc.doc_ast.walk_tree(module).var_docstrings.get(name, "")
        if docstring:
            return docstring
    return ""


def fill_variable_docstrings(module: pdoc.doc.Module) -> None:
    """Give each variable of ``module`` that has no docstring of its own the one written where
    its value is defined."""
    for member in module.members.values():
        if isinstance(member, pdoc.doc.Variable) and not member.docstring:
            member.docstring = defined_docstring(member.name, getattr(module.obj, member.name))


def documented(modules: Sequence[str]) -> list[pdoc.doc.Module]:
    """The modules as pdoc documents them, variables' docstrings filled in (pdoc caches them by
    name, so :func:`build` renders these)."""
    pdoc.render.configure(docformat="restructuredtext")
    found = [pdoc.doc.Module.from_name(name) for name in modules]
    for module in found:
        fill_variable_docstrings(module)
    return found


def build(modules: Sequence[str], output: Path) -> None:
    """Render the site for ``modules`` into ``output`` (``index.html`` and a page a module)."""
    documented(modules)
    pdoc.pdoc(*modules, output_directory=output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path, help="the site's directory")
    parser.add_argument("modules", nargs="+", help="the modules to document")
    parser.add_argument(
        "--installed",
        action="store_true",
        help=f"fail unless {PACKAGE} is imported from this python's environment (the wheel)",
    )
    args = parser.parse_args()
    if args.installed:
        origin = Path(str(importlib.import_module(PACKAGE).__file__)).resolve()
        if not origin.is_relative_to(Path(sys.prefix).resolve()):
            sys.exit(f"{PACKAGE} was imported from {origin}, not from {sys.prefix}")
    build(args.modules, args.output)
    print(f"{args.output / 'index.html'}: {', '.join(args.modules)}")


if __name__ == "__main__":
    main()
