"""Child processes that never outlive the test run.

Each binary runs in its own session (so a signal reaches its whole process group) and with the
Linux parent-death signal set to SIGKILL, so that even a ``kill -9`` of the Python process that
started it takes it down: no etcd or kube-apiserver is left holding ports after an interrupted
run. Orderly stops send SIGTERM to the group, wait, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tenacity import RetryCallState, Retrying, retry_if_result, wait_fixed

from crewlet_operator.errors import ProcessFailedError

_PR_SET_PDEATHSIG = 1

START_ATTEMPTS = 3
"""Starts of a serving process on fresh ports before its failure is raised: a port is free when
it is picked, and another process can take it before the binary binds it."""
PORT_TAKEN = "address already in use"
"""What a process's log says when another process bound its port first (Go's and Python's
``bind`` errors alike)."""


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs: it exists and is not a zombie (dead, not yet reaped by
    its parent). Another user's process counts as running."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return stat.read_text().split(")")[-1].split()[0] != "Z"
    return False  # gone between the two looks


class ManagedProcess:
    """One binary of the control plane: started, probed until ready, stopped."""

    def __init__(
        self,
        name: str,
        args: Sequence[str],
        log_dir: Path,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.args = list(args)
        self.environment = dict(environment or {})
        """Variables set on top of this process's own environment."""
        self.log_path = log_dir / f"{name}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The process id while running."""
        return self._proc.pid if self._proc else None

    def start(self) -> None:
        """Start the binary; output goes to ``<log_dir>/<name>.log``."""
        with open(self.log_path, "ab") as log:
            # The parent-death signal belongs to the thread that forks; Popen forks from the
            # calling thread, so start control planes from a thread that outlives them.
            self._proc = subprocess.Popen(
                self.args,
                env={**os.environ, **self.environment},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - needed for the death signal
            )

    def running(self) -> bool:
        """Whether the process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def wait_ready(self, probe: Callable[[], bool], timeout: float, interval: float = 0.1) -> None:
        """Poll ``probe`` until it answers True; fail fast if the process exits."""
        deadline = time.monotonic() + timeout

        def ready() -> bool:
            if not self.running():  # raised, not retried: the process is gone
                raise ProcessFailedError(f"{self.name} exited early; {self.log_tail()}")
            with contextlib.suppress(Exception):
                return bool(probe())
            return False

        def not_ready(state: RetryCallState) -> None:
            raise ProcessFailedError(
                f"{self.name} not ready after {timeout:.0f}s; {self.log_tail()}"
            )

        # A probe every ``interval`` until one answers True, up to the deadline.
        waiting = Retrying(
            retry=retry_if_result(lambda answer: not answer),
            wait=wait_fixed(interval),
            stop=lambda state: time.monotonic() > deadline,
            retry_error_callback=not_ready,
        )
        waiting(ready)

    def wait(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for the process to exit (``subprocess.TimeoutExpired``
        when it has not); its exit code."""
        if self._proc is None:
            raise ProcessFailedError(f"{self.name} is not started")
        return self._proc.wait(timeout)

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the process group (SIGSTOP and SIGCONT simulate a silent server)."""
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, sig)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the process group, then SIGKILL it after ``timeout`` seconds."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        # Reap anything left in the group (a binary's own children).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL the process group at once (a crash, for fault tests)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the process's log, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return f"no log at {self.log_path}"
        return f"last lines of {self.log_path}:\n" + "\n".join(text)


class StopSignals:
    """SIGINT and SIGTERM, noted from now on and waited for with :meth:`wait`.

    A handler only lets the signal's number reach a pipe (``signal.set_wakeup_fd``), which
    :meth:`wait` reads: setting a ``threading.Event`` from a handler instead deadlocks when the
    signal lands while the main thread holds the Event's lock inside its own ``wait``. A signal
    that came before :meth:`wait` makes it return at once. Main thread only.
    """

    def __init__(self) -> None:
        self._read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: None)

    def wait(self) -> None:
        """Block until SIGINT or SIGTERM has arrived."""
        os.read(self._read, 1)


def free_port() -> int:
    """A port free on 127.0.0.1 right now (the start is retried if another process takes it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ProcessOnFreePorts:
    """A process serving on ``ports`` ports, each free when it starts (``command`` builds its
    arguments from them), such as an operator's metrics and probe ports.

    A port is free when it is picked, and another process can bind it before this one does:
    :meth:`check` then starts it again on fresh ones, as :class:`~.controlplane.ControlPlane`
    starts its own binaries, up to :data:`START_ATTEMPTS` starts in all.
    """

    def __init__(
        self,
        name: str,
        command: Callable[[tuple[int, ...]], Sequence[str]],
        ports: int,
        log_dir: Path,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self._command = command
        self._port_count = ports
        self._log_dir = log_dir
        self._environment = dict(environment or {})
        self.starts = 0
        self.ports: tuple[int, ...] = ()
        """The ports it runs on (or will, until it is started)."""
        self.process = self._on_fresh_ports()

    def _on_fresh_ports(self) -> ManagedProcess:
        self.ports = tuple(free_port() for _ in range(self._port_count))
        return ManagedProcess(
            self.name, self._command(self.ports), self._log_dir, self._environment
        )

    def start(self) -> None:
        """Start the process on the ports picked last (fresh ones after the first start)."""
        if self.starts:
            self.process = self._on_fresh_ports()
        self.starts += 1
        self.process.start()

    def check(self) -> bool:
        """Whether the process runs. One that exited because a port was taken is started again
        on fresh ones (and is not running yet: False); any other exit, or the last start's,
        raises :class:`ProcessFailedError` with its log's tail."""
        if self.process.running():
            return True
        tail = self.process.log_tail(40)  # a traceback's length: the bind error may be early
        if PORT_TAKEN in tail and self.starts < START_ATTEMPTS:
            self.start()
            return False
        raise ProcessFailedError(f"{self.name} exited; {tail}")


class ManagerProcess(ProcessOnFreePorts):
    """A manager's daemon as a process, such as an operator built on this library under test:
    ``command`` and then its metrics and health probe ports, each free when it starts, as
    ``--metrics-bind-address`` and ``--health-probe-bind-address`` (controller-runtime's
    flags, which the operator's command line keeps) on 127.0.0.1."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        log_dir: Path,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            name,
            lambda ports: [
                *command,
                f"--metrics-bind-address=127.0.0.1:{ports[0]}",
                f"--health-probe-bind-address=127.0.0.1:{ports[1]}",
            ],
            2,
            log_dir,
            environment,
        )

    @property
    def metrics_port(self) -> int:
        return self.ports[0]

    @property
    def health_port(self) -> int:
        return self.ports[1]
