"""The repository stands alone: no test, script or build step reaches outside it."""

from __future__ import annotations

import re
import subprocess
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
    return [
        ROOT / name for name in listed.split("\0") if name.endswith(CHECKED) and ROOT / name != this
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
