"""The pre-commit hooks run exactly what `make lint` runs, with the virtualenv's tools.

Both files are parsed: the Makefile's lint recipe (its variables expanded) and the hooks of
.pre-commit-config.yaml. A command added to either alone fails here.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
MAKEFILE = ROOT / "Makefile"
CONFIG = ROOT / ".pre-commit-config.yaml"
VARIABLE = re.compile(r"\$\((\w+)\)")


def make_variables(makefile: str) -> dict[str, str]:
    """The Makefile's simple assignments (NAME ?= value, NAME := value, NAME = value)."""
    found = re.findall(r"^(\w+)\s*(?:\?=|:=|=)\s*(.*?)\s*$", makefile, re.MULTILINE)
    return dict(found)


def expand(text: str, variables: dict[str, str]) -> str:
    while match := VARIABLE.search(text):
        text = text[: match.start()] + variables[match.group(1)] + text[match.end() :]
    return text


def recipe(makefile: str, target: str) -> list[str]:
    """The target's commands, variables expanded, in order."""
    lines = makefile.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"^{target}:", line))
    commands = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        commands.append(expand(line.strip().lstrip("@-"), make_variables(makefile)))
    return commands


def hooks() -> list[dict[str, Any]]:
    config = yaml.safe_load(CONFIG.read_text())
    return [hook for repo in config["repos"] for hook in repo["hooks"]]


def test_the_lint_target_is_read() -> None:
    commands = recipe(MAKEFILE.read_text(), "lint")
    assert ".venv/bin/ruff check ." in commands
    assert len(commands) >= 4


def test_the_hooks_are_the_lint_targets_commands() -> None:
    lint = recipe(MAKEFILE.read_text(), "lint")
    entries = [" ".join(shlex.split(hook["entry"]) + hook.get("args", [])) for hook in hooks()]
    assert entries == lint, "the pre-commit hooks and `make lint` run different commands"


def test_every_hook_is_local_and_uses_the_repositorys_tools() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    assert [repo["repo"] for repo in config["repos"]] == ["local"]
    for hook in hooks():
        # The whole repository, as `make lint` checks it; tools of the virtualenv (pyproject.toml's
        # versions) or the repository's own scripts, never an environment pre-commit builds.
        assert hook["language"] == "system", hook["id"]
        assert hook["pass_filenames"] is False, hook["id"]
        program = shlex.split(hook["entry"])[0]
        assert program.startswith(".venv/bin/") or program == "bash", hook["id"]
