"""The Quickstart's runnable blocks, run as a reader runs them, so that the page cannot rot.

``docs/quickstart.md`` marks the blocks that can run here (the local control plane path; the kind
path needs Docker) with an HTML comment right before a fenced ``sh`` block:

- ``<!-- run -->``: run it, in page order; it must exit 0 (``set -euo pipefail``).
- ``<!-- run: background, until "Ready." -->``: start it and keep it running (``make run``) until
  a line of its output starts with the quoted text; the blocks after it run against it; at the
  end it is stopped as Ctrl-C stops it, with SIGINT to its process group.

Every marked block is run verbatim. Consecutive foreground blocks share one subshell (one
``bash`` process), so an ``export`` in one holds in the next, as in the reader's terminal.

"A fresh state" is a checkout without ``.run``: the test runs the page in a temporary directory
that links every top-level entry of this checkout except ``.run``, so ``make run`` creates its own
``.run`` (control plane, kubeconfig, operator log) there, and a ``make run`` of the developer's own
in this checkout is neither disturbed nor reused.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

pytestmark = pytest.mark.release
"""Release-grade: ``make test-release`` runs it, ``make test`` leaves it out."""

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "docs" / "quickstart.md"

MARKED_BLOCK = re.compile(
    r"<!--\s*run(?P<options>:[^>]*?)?\s*-->\s*\n```sh\n(?P<body>.*?)^```\s*$",
    re.DOTALL | re.MULTILINE,
)
BACKGROUND = re.compile(r'^:\s*background,\s*until\s+"(?P<until>[^"]+)"$')

BACKGROUND_READY_TIMEOUT = 300.0
"""Seconds ``make run`` may take to print its line (binaries cached: about 30 s)."""
FOREGROUND_TIMEOUT = 300.0
STOP_TIMEOUT = 60.0
# Entries of the checkout a fresh clone would not have, or that belong to this checkout's runs.
NOT_LINKED = {".run", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache"}


@dataclass(frozen=True)
class Block:
    """One marked block of the page."""

    body: str
    until: str | None = None
    """For a background block: the start of the line that says it is ready."""

    @property
    def background(self) -> bool:
        return self.until is not None


def marked_blocks(markdown: str) -> list[Block]:
    """The page's marked blocks, in order.

    Raises:
        ValueError: a ``run`` comment whose options are not understood.
    """
    blocks = []
    for match in MARKED_BLOCK.finditer(markdown):
        options = (match.group("options") or "").strip()
        until = None
        if options:
            parsed = BACKGROUND.match(options)
            if parsed is None:
                raise ValueError(f"unknown run options {options!r} in {QUICKSTART}")
            until = parsed.group("until")
        blocks.append(Block(match.group("body"), until))
    return blocks


@dataclass
class Output:
    """Lines read from a background process by a thread (so its pipe never fills)."""

    lines: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    changed: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)

    def read(self, stream: IO[str]) -> None:
        for line in stream:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()

    def wait_for(self, prefix: str, proc: subprocess.Popen[str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                if any(line.startswith(prefix) for line in self.lines):
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0 or proc.poll() is not None:
                    return False
                self.changed.wait(min(remaining, 1.0))

    def text(self) -> str:
        with self.lock:
            return "".join(self.lines)


def fresh_checkout(directory: Path) -> Path:
    """A directory that looks like this checkout, without its ``.run``.

    Everything is a link into this checkout, except ``pyproject.toml``: ``make`` reinstalls the
    virtualenv when that file is newer than ``.venv/.installed``, and the linked ``.venv`` is this
    checkout's, which this very test runs in (an editable install pointing into a temporary
    directory would break it for everyone). So the copy is dated no later than the stamp: the
    virtualenv counts as installed, as it is.
    """
    directory.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in NOT_LINKED | {"pyproject.toml"}:
            (directory / entry.name).symlink_to(entry)
    pyproject = directory / "pyproject.toml"
    shutil.copyfile(ROOT / "pyproject.toml", pyproject)
    stamp = ROOT / ".venv" / ".installed"
    if stamp.exists():
        when = min(stamp.stat().st_mtime_ns, (ROOT / "pyproject.toml").stat().st_mtime_ns)
        os.utime(pyproject, ns=(when - 1_000_000_000, when - 1_000_000_000))
    return directory


def reader_environment() -> dict[str, str]:
    """The reader's shell: this environment, without a kubeconfig or a run directory of ours."""
    env = dict(os.environ)
    for name in ("KUBECONFIG", "RUN_DIR", "MAKEFLAGS", "MAKELEVEL"):
        env.pop(name, None)
    return env


def shell(body: str) -> list[str]:
    return ["bash", "-euo", "pipefail", "-c", body]


def run_foreground(blocks: list[Block], cwd: Path, env: dict[str, str]) -> str:
    """Run consecutive foreground blocks in one subshell; return its output."""
    script = "\n".join(block.body for block in blocks)
    result = subprocess.run(
        shell(script),
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=FOREGROUND_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, (
        f"a Quickstart block failed (exit {result.returncode}):\n{script}\n--- output ---\n"
        f"{result.stdout}"
    )
    return result.stdout


def stop(proc: subprocess.Popen[str], output: Output) -> None:
    """Ctrl-C: SIGINT to the process group; everything in it must be gone within a minute."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        raise AssertionError("Ctrl-C did not stop `make run`:\n" + output.text()) from None
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("processes of `make run` outlived Ctrl-C:\n" + output.text())


def test_the_page_marks_a_short_local_path() -> None:
    blocks = marked_blocks(QUICKSTART.read_text())
    backgrounds = [b for b in blocks if b.background]
    assert len(backgrounds) == 1, "the local path has exactly one background block (make run)"
    assert backgrounds[0].body.strip() == "make run"
    assert blocks.index(backgrounds[0]) < len(blocks) - 1, "blocks must follow make run"


@pytest.mark.timeout(BACKGROUND_READY_TIMEOUT + 2 * FOREGROUND_TIMEOUT + 2 * STOP_TIMEOUT)
def test_quickstart_local_control_plane(tmp_path: Path) -> None:
    blocks = marked_blocks(QUICKSTART.read_text())
    checkout = fresh_checkout(tmp_path / "checkout")
    env = reader_environment()
    started = time.monotonic()
    outputs: list[str] = []
    pending: list[Block] = []
    running: tuple[subprocess.Popen[str], Output] | None = None
    try:
        for block in blocks:
            if not block.background:
                pending.append(block)
                continue
            assert running is None, "one background block at a time"
            if pending:
                outputs.append(run_foreground(pending, checkout, env))
                pending = []
            proc = subprocess.Popen(
                shell(block.body),
                cwd=checkout,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,  # its own process group, as a terminal's job is
            )
            output = Output()
            assert proc.stdout is not None
            threading.Thread(target=output.read, args=(proc.stdout,), daemon=True).start()
            running = (proc, output)
            assert block.until is not None
            if not output.wait_for(block.until, proc, BACKGROUND_READY_TIMEOUT):
                raise AssertionError(
                    f"`{block.body.strip()}` did not print a line starting {block.until!r}:\n"
                    + output.text()
                )
            # What the page tells the reader about it holds: it prints the kubeconfig to use.
            kubeconfig = checkout / ".run" / "envtest" / "kubeconfig"
            assert f"export KUBECONFIG={kubeconfig}" in output.text()
        if pending:
            outputs.append(run_foreground(pending, checkout, env))
    finally:
        if running is not None:
            stop(*running)
    elapsed = time.monotonic() - started
    text = "".join(outputs)
    assert "company.crewlet.ai/acme" in text, text
    assert "statefulset.apps/acme-data" in text, text
    assert "Accepted=True Accepted" in text, text
    assert "company.crewlet.ai/acme condition met" in text, text
    print(f"quickstart: {len(blocks)} blocks ran in {elapsed:.0f} s")
