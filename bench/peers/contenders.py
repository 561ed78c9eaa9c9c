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
from crewlet_operator.envtest.process import ManagedProcess, free_port
from crewlet_operator_daemon.plan import MANAGER_NAME

RECONCILES = "controller_runtime_reconcile_total"
KOPF_HANDLED = b"Handler 'reconcile' succeeded."


class Contender(ABC):
    """An operator the figure starts, follows and stops, as often as it needs: one process, or
    the replicas of a ring, each a process of its own."""

    name: str
    """How the figure names it."""
    field_manager: str
    from_template = True
    """Whether it applies the template's children (the peers), rather than rendering its own."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.processes: list[ManagedProcess] = []
        self.started_at = 0.0
        self._starts = 0

    @abstractmethod
    def _new_processes(self, name: str) -> list[ManagedProcess]:
        """Its processes (not started yet), each logging to ``<log_dir>/<name>...log``."""

    @abstractmethod
    async def handled(self) -> float:
        """Company reconciles the running processes have completed."""

    @abstractmethod
    def settings(self) -> dict[str, Any]:
        """What the figure reports about how the contender runs."""

    def start(self) -> None:
        """Start new processes."""
        self._starts += 1
        self.processes = self._new_processes(f"peer-{self.name}-{self._starts:02d}")
        self.started_at = time.monotonic()
        for process in self.processes:
            process.start()

    @property
    def pids(self) -> list[int]:
        """The running processes' ids."""
        pids = [pid for process in self.processes if (pid := process.pid) is not None]
        assert pids and len(pids) == len(self.processes), f"{self.name} is not running"
        return pids

    def check_alive(self) -> None:
        """Raise if a process has exited."""
        if not self.processes:
            raise RuntimeError(f"{self.name} exited; never started")
        for process in self.processes:
            if not process.running():
                raise RuntimeError(f"{self.name} exited; {process.log_tail()}")

    def memory(self) -> Memory:
        """The RSS of its processes now and at their highest, added up."""
        each = [process_memory(pid) for pid in self.pids]
        return Memory(rss=sum(m.rss for m in each), peak=sum(m.peak for m in each))

    def cpu(self) -> float:
        """CPU seconds its processes have used."""
        return sum(cpu_seconds(pid) for pid in self.pids)

    async def stop(self) -> None:
        """SIGTERM to every process at once (a graceful stop: each releases what it holds),
        SIGKILL after 45 s."""
        await asyncio.gather(*(asyncio.to_thread(process.stop, 45.0) for process in self.processes))
        self.processes = []


class Crewlet(Contender):
    """The Python operator, run by :class:`bench.daemon.Daemon` as in every figure: one
    replica, or with ``replicas`` > 1 a ring of them with ``--sharding``, every one active
    (docs/scaling.md)."""

    field_manager = MANAGER_NAME
    from_template = False

    def __init__(
        self, log_dir: Path, new_daemon: Callable[[str, bool], Daemon], replicas: int = 1
    ) -> None:
        super().__init__(log_dir)
        self.name = "crewlet-operator" if replicas == 1 else f"crewlet-operator-ring-of-{replicas}"
        self.replicas = replicas
        self._new_daemon = new_daemon
        self._daemons: list[Daemon] = []

    def _new_processes(self, name: str) -> list[ManagedProcess]:
        sharded = self.replicas > 1
        self._daemons = [self._new_daemon("peer", sharded) for _ in range(self.replicas)]
        return [daemon.process for daemon in self._daemons]

    async def handled(self) -> float:
        self.check_alive()
        return sum([await daemon.reconciles() for daemon in self._daemons])

    def settings(self) -> dict[str, Any]:
        return {
            "workers": WORKERS,
            "replicas": self.replicas,
            "sharding": self.replicas > 1,
            "leader_election": True,
            "field_manager": self.field_manager,
        }


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

    def _new_processes(self, name: str) -> list[ManagedProcess]:
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
        return [ManagedProcess(name, command, self.log_dir, {"KUBECONFIG": str(self._kubeconfig)})]

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

    def _new_processes(self, name: str) -> list[ManagedProcess]:
        self._log_read = self._handled = 0
        command = [
            str(self._venv / "bin" / "kopf"),
            "run",
            "--standalone",
            "--all-namespaces",
            str(toolchain.KOPF_OPERATOR),
        ]
        return [ManagedProcess(name, command, self.log_dir, self._environment)]

    async def handled(self) -> float:
        self.check_alive()
        text = await asyncio.to_thread(_read_from, self.processes[0].log_path, self._log_read)
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
