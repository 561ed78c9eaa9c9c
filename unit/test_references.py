"""No text in the repository cites a file the repository does not hold.

Read: every Markdown file, the Makefile and the shell scripts whole, and the comments and
docstrings of every Python file (a string in code is data, such as a path built at run time).
A reference is a path that starts with one of the repository's top-level folders
(``docs/scaling.md``, ``bench/NOTES.md``, ``.github/workflows/``), a bare Markdown file name
(``NOTES.md``), or a Markdown link's relative target. It resolves from the repository's root or
from the citing file's folder (a bare name: wherever the repository holds it), to a file or a
folder that git tracks (or would track: a new file not yet added counts). A path git ignores
(``bench/results/``, ``build/``) is something a command writes, not a file to hold; a path with
a placeholder (``bench/results/<timestamp>.json``) or a glob is a pattern, not a reference.
"""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import tokenize
from functools import cache
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parent.parent
# What the repository holds is what git tracks (the suite runs from a checkout, as
# unit/test_layout.py does: outside one, git's error says so).
# This module cites made-up files on purpose (its own examples, below): it is not scanned.
SELF = PurePosixPath(Path(__file__).resolve().relative_to(ROOT).as_posix())
READ_WHOLE = re.compile(r"(\.md|\.sh|^Makefile)$")
# Before a reference: not a path's or a URL's character (…/crewlet/charts/crewlet-operator).
BEFORE = r"(?<![\w./~@$\\-])"
# After one: not a regular expression's escape (release\.yml) nor a placeholder's <.
AFTER = r"(?![\\<{*])"
BARE_MARKDOWN = re.compile(BEFORE + r"([\w-]+\.md)(?![\w.-])" + AFTER)
# A Markdown link's target: relative ones are references too (../docs/scaling.md#anchor).
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?(?:\s+\"[^\"]*\")?\)")
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:")


@cache
def repository() -> tuple[frozenset[str], frozenset[str]]:
    """The files git tracks or would track, and every folder that holds one."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    files = frozenset(name for name in listed if name and (ROOT / name).is_file())
    folders = {str(parent) for name in files for parent in PurePosixPath(name).parents}
    return files, frozenset(folders - {"."})


@cache
def path_reference() -> re.Pattern[str]:
    """A path that begins with one of the repository's top-level folders."""
    _, folders = repository()
    tops = sorted((f for f in folders if "/" not in f), key=len, reverse=True)
    alternatives = "|".join(re.escape(top) for top in tops)
    return re.compile(BEFORE + rf"((?:{alternatives})/[\w./-]*+)" + AFTER)


def ignored(paths: list[str]) -> set[str]:
    """Those of the paths that git ignores."""
    if not paths:
        return set()
    answer = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        check=False,
        cwd=ROOT,
        input="\n".join(paths),
        capture_output=True,
        text=True,
    )
    assert answer.returncode in (0, 1), answer.stderr  # 1: none is ignored
    return set(answer.stdout.split())


def readable_text(path: str, text: str) -> list[tuple[int, str]]:
    """(line number, text) of what a reader reads as prose or commands."""
    if READ_WHOLE.search(path):
        return list(enumerate(text.splitlines(), 1))
    if not path.endswith(".py"):
        return []
    lines: list[tuple[int, str]] = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            lines.append((token.start[0], token.string))
    for node in ast.walk(ast.parse(text)):  # docstrings, and strings standing as statements
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            first = node.lineno
            lines += [(first + i, line) for i, line in enumerate(node.value.value.splitlines())]
    return lines


def references(path: str, text: str) -> list[tuple[int, str]]:
    """(line number, reference) for each file or folder the text cites."""
    found: dict[tuple[int, str], None] = {}  # in order, once each
    patterns = [path_reference(), BARE_MARKDOWN] + ([LINK] if path.endswith(".md") else [])
    for number, line in readable_text(path, text):
        for regex in patterns:
            for match in regex.finditer(line):
                reference = match.group(1).rstrip(".,:;")
                if reference and not SCHEME.match(reference):
                    found[number, reference] = None
    return list(found)


def resolves(reference: str, citing: str) -> str | None:
    """The repository path the reference names, or None if the repository holds none."""
    files, folders = repository()
    for base in (PurePosixPath("."), PurePosixPath(citing).parent):
        candidate = os.path.normpath(base / reference.rstrip("/"))
        if candidate in files or candidate in folders:
            return candidate
    if "/" not in reference:  # a bare name: the reader finds it wherever it is held
        return next((f for f in sorted(files) if PurePosixPath(f).name == reference), None)
    return None


def dangling(path: str, text: str) -> list[str]:
    """Every reference of the text that resolves to nothing held, as "path:line: reference"."""
    unresolved = [(n, r) for n, r in references(path, text) if resolves(r, path) is None]
    outputs = ignored([r for _, r in unresolved])
    return [f"{path}:{n}: {r}" for n, r in unresolved if r not in outputs]


def scanned() -> list[str]:
    files, _ = repository()
    return sorted(
        name
        for name in files
        if PurePosixPath(name) != SELF and (READ_WHOLE.search(name) or name.endswith(".py"))
    )


def test_the_scan_reads_the_documents_and_the_code() -> None:
    names = scanned()
    assert {"README.md", "Makefile", "bench/README.md", "bench/run.py"} <= set(names)
    assert len(names) > 150


def test_no_text_cites_a_file_the_repository_does_not_hold() -> None:
    problems = [line for name in scanned() for line in dangling(name, (ROOT / name).read_text())]
    assert problems == [], "references to files the repository does not hold:\n" + "\n".join(
        problems
    )


# --- the check itself: it finds what is made up, and only that --------------------------------


def test_a_made_up_markdown_name_is_found() -> None:
    text = "# Bench\n\nThe targets DESIGN.md holds us to.\n"
    assert dangling("bench/README.md", text) == ["bench/README.md:3: DESIGN.md"]


def test_a_made_up_path_is_found_in_markdown_and_in_python_comments() -> None:
    markdown = "See [the notes](docs/lab-notebook.md) and bench/figures.py.\n"
    assert dangling("README.md", markdown) == [
        "README.md:1: docs/lab-notebook.md",
        "README.md:1: bench/figures.py",
    ]
    python = '"""Targets: docs/targets.md."""\n\nX = 1  # measured in bench/NOTES2.md\n'
    assert dangling("bench/x.py", python) == [
        "bench/x.py:3: bench/NOTES2.md",
        "bench/x.py:1: docs/targets.md",
    ]


def test_held_paths_urls_code_and_outputs_pass() -> None:
    markdown = (
        "[NOTES.md](NOTES.md), README.md, docs/scaling.md, `.github/workflows/`,\n"
        "reconcilers/crewlet_operator_daemon/cli.py, manifests/samples/,\n"
        "https://example.com/docs/nowhere.md, oci://ghcr.io/crewlet/charts/crewlet-operator,\n"
        "bench/results/<timestamp>.json, build/api, `release\\.yml` in a regex: .github/x\\.yml\n"
    )
    assert dangling("bench/README.md", markdown) == []
    python = 'PATH = "docs/nowhere.md"  # a string in code is data\n'
    assert dangling("unit/x.py", python) == []


@pytest.mark.parametrize(
    ("reference", "citing", "path"),
    [
        ("NOTES.md", "bench/README.md", "bench/NOTES.md"),
        ("docs/scaling.md", "bench/README.md", "docs/scaling.md"),
        ("../docs/scaling.md", "bench/README.md", "docs/scaling.md"),
        ("charts/crewlet-operator/", "README.md", "charts/crewlet-operator"),
    ],
)
def test_a_reference_resolves_from_the_root_or_the_citing_folder(
    reference: str, citing: str, path: str
) -> None:
    assert resolves(reference, citing) == path
