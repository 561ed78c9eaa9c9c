"""A process on free ports starts again on fresh ones when another process bound one first
(``ProcessOnFreePorts``: the e2e and bench operators), and fails on any other exit."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crewlet_operator.envtest import ProcessFailedError, process
from crewlet_operator.envtest.process import START_ATTEMPTS, ManagedProcess, ProcessOnFreePorts

# Binds each port given as an argument, as the operator binds its metrics and probe ports
# (asyncio's message for a taken one: "... address already in use"), then serves until stopped.
SERVER = """
import asyncio, sys

async def main():
    for port in sys.argv[1:]:
        await asyncio.start_server(lambda r, w: None, "127.0.0.1", int(port))
    print("serving", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


@pytest.fixture
def taken() -> Iterator[int]:
    """A port another process holds."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def _server(ports: tuple[int, ...]) -> list[str]:
    return [sys.executable, "-c", SERVER, *map(str, ports)]


def _checked_until_running(served: ProcessOnFreePorts) -> None:
    """Check the process until it serves on every port (or check() raises)."""
    deadline = time.monotonic() + 30
    while not (served.check() and "serving" in served.process.log_path.read_text()):
        assert time.monotonic() < deadline, served.process.log_tail()
        time.sleep(0.05)


def test_a_process_whose_port_was_taken_starts_again_on_fresh_ones(
    tmp_path: Path, taken: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    picks = iter([taken])
    real = process.free_port
    monkeypatch.setattr(process, "free_port", lambda: next(picks, None) or real())
    served = ProcessOnFreePorts("server", _server, 2, tmp_path)
    assert served.ports[0] == taken
    served.start()
    try:
        _checked_until_running(served)
        assert served.starts == 2
        assert taken not in served.ports
        assert "address already in use" in served.process.log_path.read_text()
    finally:
        served.process.stop()


def test_a_port_taken_at_every_start_fails_after_the_last_start(
    tmp_path: Path, taken: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process, "free_port", lambda: taken)
    served = ProcessOnFreePorts("server", _server, 1, tmp_path)
    served.start()
    with pytest.raises(ProcessFailedError, match="address already in use"):
        _checked_until_running(served)
    assert served.starts == START_ATTEMPTS


def test_any_other_exit_fails_at_once(tmp_path: Path) -> None:
    served = ProcessOnFreePorts(
        "crash", lambda ports: [sys.executable, "-c", "raise SystemExit('no config')"], 1, tmp_path
    )
    served.start()
    with pytest.raises(ProcessFailedError, match=r"(?s)crash exited;.*no config"):
        _checked_until_running(served)
    assert served.starts == 1


def test_a_managed_process_is_waited_for_its_exit_code(tmp_path: Path) -> None:
    """``wait`` gives the exit code (the e2e tests check a replica stopped cleanly), and raises
    ``TimeoutExpired`` while the process still runs."""
    exiting = ManagedProcess("exiting", [sys.executable, "-c", "raise SystemExit(3)"], tmp_path)
    with pytest.raises(ProcessFailedError, match="not started"):
        exiting.wait(1)
    exiting.start()
    assert exiting.wait(30) == 3
    sleeping = ManagedProcess(
        "sleeping", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path
    )
    sleeping.start()
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            sleeping.wait(0.2)
    finally:
        sleeping.stop()
