"""The RBAC command line.

``python -m crewlet_operator.rbac MODULE:FUNCTION [OUT] [--name NAME]``
    Import ``MODULE``, call ``FUNCTION`` (no arguments; a coroutine function is awaited) for the
    manager with its controllers added, not started, and write what it needs as YAML to ``OUT``
    (standard output without it, or with ``-``): a ClusterRole ``NAME``, and with leader election
    a Role ``NAME-leader-election`` (:func:`crewlet_operator.rbac.manifests`).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import sys
from pathlib import Path
from typing import cast

import yaml

from crewlet_operator.rbac import RulesHost, manifests


def load(target: str) -> RulesHost:
    """The manager ``MODULE:FUNCTION`` returns."""
    module_name, _, function_name = target.partition(":")
    if not module_name or not function_name:
        raise ValueError(f"expected MODULE:FUNCTION, got {target!r}")
    manager = getattr(importlib.import_module(module_name), function_name)()
    if inspect.iscoroutine(manager):
        manager = asyncio.run(manager)
    return cast(RulesHost, manager)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m crewlet_operator.rbac",
        description="Write the ClusterRole (and the Lease's Role) a manager's controllers need.",
    )
    parser.add_argument("target", metavar="MODULE:FUNCTION", help="returns the manager")
    parser.add_argument("out", nargs="?", default="-", help="the YAML file (default: stdout)")
    parser.add_argument("--name", default="manager-role", help="the ClusterRole's name")
    args = parser.parse_args(argv)
    text = yaml.safe_dump_all(manifests(load(args.target), args.name), sort_keys=False)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
