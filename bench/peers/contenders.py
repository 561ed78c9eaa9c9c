"""The three contenders of the ``peers`` figure, each a separate process started as its users
start it, with what the figure needs to follow it: how many Company reconciles the process has
completed, and its memory and CPU.

- ``crewlet-operator``: ``python -m crewlet_operator_daemon.cli``, exactly as the other figures run
  it (:class:`bench.daemon.Daemon`); its reconciles from ``controller_runtime_reconcile_total``.
- ``controller-runtime``: ``controller-runtime/main.go``, leader election on, the same number
  of workers as ours; its reconciles from the same metric, which controller-runtime serves.
- ``kopf``: ``kopf run --standalone --all-namespaces kopf_operator.py``; kopf serves no metrics,
  so its reconciles are the "Handler 'reconcile' succeeded." lines it logs (at INFO, its
  default), counted as the log grows.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.cluster import PLATFORM, ROOT
from bench.daemon import WORKERS, Daemon, Memory, cpu_seconds, process_memory, scrape, total
from bench.peers import toolchain
from crewlet_operator.envtest.controlplane import free_port
from crewlet_operator.envtest.process import ManagedProcess
from crewlet_operator_daemon.plan import MANAGER_NAME

RECONCILES = "controller_runtime_reconcile_total"
KOPF_HANDLED = b"Handler 'reconcile' succeeded."


class Contender(ABC):
    """An operator the figure starts, follows and stops, as often as it needs."""

    name: str
    """How the figure names it."""
    field_manager: str
    from_template = True
    """Whether it applies the template's children (the peers), rather than rendering its own."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.process: ManagedProcess | None = None
        self.started_at = 0.0
        self._starts = 0

    @abstractmethod
    def _new_process(self, name: str) -> ManagedProcess:
        """A process (not started yet) logging to ``<log_dir>/<name>.log``."""

    @abstractmethod
    async def handled(self) -> float:
        """Company reconciles the running process has completed."""

    @abstractmethod
    def settings(self) -> dict[str, Any]:
        """What the figure reports about how the contender runs."""

    def start(self) -> None:
        """Start a new process."""
        self._starts += 1
        self.process = self._new_process(f"peer-{self.name}-{self._starts:02d}")
        self.started_at = time.monotonic()
        self.process.start()

    @property
    def pid(self) -> int:
        """The running process's id."""
        pid = self.process.pid if self.process is not None else None
        assert pid is not None, f"{self.name} is not running"
        return pid

    def check_alive(self) -> None:
        """Raise if the process has exited."""
        if self.process is None or not self.process.running():
            tail = self.process.log_tail() if self.process is not None else "never started"
            raise RuntimeError(f"{self.name} exited; {tail}")

    def memory(self) -> Memory:
        """The running process's RSS now and at its highest."""
        return process_memory(self.pid)

    def cpu(self) -> float:
        """CPU seconds the process has used."""
        return cpu_seconds(self.pid)

    async def stop(self) -> None:
        """SIGTERM (a graceful stop: each releases what it holds), SIGKILL after 45 s."""
        if self.process is not None:
            await asyncio.to_thread(self.process.stop, 45.0)
            self.process = None


class Crewlet(Contender):
    """The Python operator, run by :class:`bench.daemon.Daemon` as in every figure."""

    name = "crewlet-operator"
    field_manager = MANAGER_NAME
    from_template = False

    def __init__(self, log_dir: Path, new_daemon: Callable[[str], Daemon]) -> None:
        super().__init__(log_dir)
        self._new_daemon = new_daemon
        self._daemon: Daemon | None = None

    def _new_process(self, name: str) -> ManagedProcess:
        self._daemon = self._new_daemon("peer")
        return self._daemon.process

    async def handled(self) -> float:
        assert self._daemon is not None
        self.check_alive()
        return await self._daemon.reconciles()

    def settings(self) -> dict[str, Any]:
        return {"workers": WORKERS, "leader_election": True, "field_manager": self.field_manager}


class ControllerRuntime(Contender):
    """``controller-runtime/main.go``, built into the binary cache."""

    name = "controller-runtime"
    field_manager = "crewlet-peer-controller-runtime"

    def __init__(self, log_dir: Path, kubeconfig: Path, template: Path, binary: Path) -> None:
        super().__init__(log_dir)
        self._kubeconfig = kubeconfig
        self._template = template
        self._binary = binary
        self._metrics_port = 0

    def _new_process(self, name: str) -> ManagedProcess:
        self._metrics_port = free_port()
        command = [
            str(self._binary),
            f"--template={self._template}",
            f"--metrics-bind-address=127.0.0.1:{self._metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{free_port()}",
            "--leader-elect",
            f"--leader-election-namespace={PLATFORM}",
            f"--max-concurrent-reconciles={WORKERS}",
        ]
        return ManagedProcess(name, command, self.log_dir, {"KUBECONFIG": str(self._kubeconfig)})

    async def handled(self) -> float:
        self.check_alive()
        return total(await scrape(self._metrics_port), RECONCILES, {"controller": "company"})

    def settings(self) -> dict[str, Any]:
        return {
            "version": toolchain.controller_runtime_version(),
            "workers": WORKERS,
            "leader_election": True,
            "field_manager": self.field_manager,
        }


class Kopf(Contender):
    """``kopf_operator.py`` in its own virtualenv."""

    name = "kopf"
    field_manager = "crewlet-peer-kopf"

    def __init__(self, log_dir: Path, kubeconfig: Path, template: Path, venv: Path) -> None:
        super().__init__(log_dir)
        self._environment = {
            "KUBECONFIG": str(kubeconfig),
            "CREWLET_PEER_TEMPLATE": str(template),
            "PYTHONPATH": str(ROOT),
        }
        self._venv = venv
        self._log_read = 0
        self._handled = 0

    def _new_process(self, name: str) -> ManagedProcess:
        self._log_read = self._handled = 0
        command = [
            str(self._venv / "bin" / "kopf"),
            "run",
            "--standalone",
            "--all-namespaces",
            str(toolchain.KOPF_OPERATOR),
        ]
        return ManagedProcess(name, command, self.log_dir, self._environment)

    async def handled(self) -> float:
        self.check_alive()
        assert self.process is not None
        text = await asyncio.to_thread(_read_from, self.process.log_path, self._log_read)
        complete = text.rfind(b"\n") + 1  # a line still being written is read next time
        self._handled += text[:complete].count(KOPF_HANDLED)
        self._log_read += complete
        return self._handled

    def settings(self) -> dict[str, Any]:
        return {
            "version": toolchain.KOPF_REQUIREMENTS[0].partition("==")[2],
            "workers": "one per Company (kopf's default: no limit)",
            "leader_election": False,
            "field_manager": self.field_manager,
        }


def _read_from(path: Path, offset: int) -> bytes:
    with open(path, "rb") as log:
        log.seek(offset)
        return log.read()
