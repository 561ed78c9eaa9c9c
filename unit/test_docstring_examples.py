"""The examples in the library's docstrings hold (issue 48: "two docstring examples do not run
(ManagerOptions without name, Manager(client) without options) and one describes a
field-manager default that no longer exists").

Every literal block (``::``) of Python in the public modules' docstrings (every module and every
public name's) compiles, top-level ``await`` and ``async with`` included; and every call in it of
one of the library's public classes or functions binds to that callable's signature: a required
argument left out, or a keyword it does not take, fails here. What the examples do against an
API server, the guides' suites (``examples/``, e2e) run for real.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import crewlet_operator
from hack.api_reference import api_modules

ROOT = Path(__file__).resolve().parent.parent
MODULES = api_modules(ROOT / "Makefile")
"""The library's public modules, as the reference site is built from them (Makefile)."""


def public_names() -> dict[str, Any]:
    """The library's public names: the package's face, then what the other public modules
    export (an example imports a name the face does not re-export from its module)."""
    names: dict[str, Any] = {
        name: getattr(crewlet_operator, name) for name in crewlet_operator.__all__
    }
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ()):
            names.setdefault(name, getattr(module, name))
    return names


PUBLIC = public_names()


def docstrings() -> Iterator[tuple[str, str]]:
    """(where, docstring) of every public module, and of its public names and their members."""
    seen: set[int] = set()
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        names = getattr(module, "__all__", None) or [
            n for n in vars(module) if not n.startswith("_")
        ]
        todo: list[tuple[str, Any]] = [(module_name, module)]
        todo += [(f"{module_name}.{n}", getattr(module, n)) for n in names if hasattr(module, n)]
        for where, obj in todo:
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if obj.__doc__:
                yield where, obj.__doc__
            if inspect.isclass(obj):
                for member_name, member in vars(obj).items():
                    doc = getattr(member, "__doc__", None)
                    if not member_name.startswith("_") and doc and id(member) not in seen:
                        seen.add(id(member))
                        yield f"{where}.{member_name}", doc


def literal_blocks(doc: str) -> Iterator[str]:
    """The indented blocks that follow a line ending with ``::``."""
    lines = inspect.cleandoc(doc).splitlines()
    for i, line in enumerate(lines):
        if not line.rstrip().endswith("::"):
            continue
        indent = len(line) - len(line.lstrip())
        block = []
        for following in lines[i + 1 :]:
            if following.strip() and len(following) - len(following.lstrip()) <= indent:
                break
            block.append(following)
        text = textwrap.dedent("\n".join(block)).strip("\n")
        if text:
            yield text


def python_examples() -> list[tuple[str, str]]:
    """(where, code) of every literal block that parses as Python: the rest are ini, YAML or
    shell, which the reference shows as they are."""
    found = []
    for where, doc in docstrings():
        for block in literal_blocks(doc):
            try:
                ast.parse(block)
            except SyntaxError:
                if not _pythonish(block):
                    continue
            found.append((where, block))
    return found


def _pythonish(block: str) -> bool:
    """Whether a block that does not parse still means to be Python (so its error shows)."""
    return bool(re.search(r"^(from \w|import \w|async def |def |await |async with )", block, re.M))


EXAMPLES = python_examples()


def test_there_are_examples_to_check() -> None:
    assert len(EXAMPLES) >= 10, EXAMPLES


@pytest.mark.parametrize(("where", "code"), EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_an_example_compiles_and_calls_the_library_as_it_is(where: str, code: str) -> None:
    tree = compile(code, where, "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    problems = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        target = PUBLIC.get(node.func.id)
        if target is None or not callable(target):
            continue
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords
        ):
            continue  # *args or **kwargs: nothing to bind
        try:
            signature = inspect.signature(target)
        except (TypeError, ValueError):
            continue
        try:
            signature.bind(*node.args, **{k.arg: k.value for k in node.keywords if k.arg})
        except TypeError as refused:
            problems.append(f"line {node.lineno}: {ast.unparse(node)}: {refused}")
    assert problems == [], f"{where}:\n{code}"
