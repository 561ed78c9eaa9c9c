"""``python -m crewlet_operator_daemon.api DIR``: write the crewlet.ai CRDs into DIR.

``make manifests`` runs it with ``manifests/crds``. With ``--check``, write nothing and exit 1
when DIR differs from what the models generate (what CI's drift test checks too).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from crewlet_operator.crd import drift, write
from crewlet_operator_daemon.api.crds import HEADER, all_crds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m crewlet_operator_daemon.api",
        description="Generate the crewlet.ai CustomResourceDefinitions from the pydantic models.",
    )
    parser.add_argument("directory", type=Path, help="where to write them, e.g. manifests/crds")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the files are out of date"
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = drift(args.directory, all_crds(), HEADER)
        for name in stale:
            print(f"{args.directory / name} is out of date: run `make manifests`", file=sys.stderr)
        return 1 if stale else 0
    for path in write(args.directory, all_crds(), HEADER):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
