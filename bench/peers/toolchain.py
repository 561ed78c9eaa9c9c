"""Building the peers once, into the binary cache beside the Kubernetes binaries.

``<cache>/bin/peers/`` (the cache is :func:`crewlet_operator.envtest.binaries.cache_dir`'s
parent) holds the controller-runtime operator, built by the local Go toolchain from
``bench/peers/controller-runtime/`` into a directory named after the hash of its sources, and
the kopf operator's virtualenv, named after the hash of its pinned requirements. Each is made
only when missing (the sources changed, or the pins did), under a file lock, so that two bench
runs never build the same thing at once. Nothing is written into the repository.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from crewlet_operator.envtest import binaries

CACHE = binaries.cache_dir().parent / "peers"
CONTROLLER_RUNTIME_SOURCES = Path(__file__).resolve().parent / "controller-runtime"
CONTROLLER_RUNTIME_FILES = ("go.mod", "go.sum", "main.go")
CONTROLLER_RUNTIME_BINARY = "crewlet-peer-controller-runtime"
CONTROLLER_RUNTIME_MODULE = "sigs.k8s.io/controller-runtime"
KOPF_REQUIREMENTS = ("kopf==1.45.2", "kubernetes_asyncio==36.1.0")
"""The newest kopf PyPI serves that runs on Python 3.11, and the newest kubernetes_asyncio."""
KOPF_OPERATOR = Path(__file__).resolve().parent / "kopf_operator.py"


def _hash(parts: list[bytes]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def controller_runtime_version() -> str:
    """The controller-runtime release go.mod requires."""
    for line in (CONTROLLER_RUNTIME_SOURCES / "go.mod").read_text().splitlines():
        words = line.split()
        if CONTROLLER_RUNTIME_MODULE in words:
            return words[words.index(CONTROLLER_RUNTIME_MODULE) + 1]
    raise RuntimeError(f"go.mod does not require {CONTROLLER_RUNTIME_MODULE}")


def controller_runtime_binary() -> Path:
    """The controller-runtime operator, built if its sources changed since the last build."""
    sources = [
        part
        for name in CONTROLLER_RUNTIME_FILES
        for part in (name.encode(), (CONTROLLER_RUNTIME_SOURCES / name).read_bytes())
    ]
    binary = CACHE / f"controller-runtime-{_hash(sources)}" / CONTROLLER_RUNTIME_BINARY
    if binary.is_file():
        return binary
    with _locked():
        if binary.is_file():  # another run built it while this one waited
            return binary
        binary.parent.mkdir(parents=True, exist_ok=True)
        partial = binary.with_name(binary.name + ".partial")
        print(f"bench: building the controller-runtime peer into {binary}", flush=True)
        environment = {
            **os.environ,
            "GOTOOLCHAIN": "local",
            "GOFLAGS": f"{os.environ.get('GOFLAGS', '')} -mod=mod -buildvcs=false".strip(),
        }
        subprocess.run(
            ["go", "build", "-trimpath", "-o", str(partial), "."],
            cwd=CONTROLLER_RUNTIME_SOURCES,
            env=environment,
            check=True,
        )
        partial.replace(binary)
    return binary


def kopf_environment() -> Path:
    """The kopf operator's virtualenv, created if its pinned requirements changed."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    venv = CACHE / f"kopf-{_hash([version.encode(), *(r.encode() for r in KOPF_REQUIREMENTS)])}"
    installed = venv / "installed"
    if installed.is_file():
        return venv
    with _locked():
        if installed.is_file():
            return venv
        shutil.rmtree(venv, ignore_errors=True)  # an interrupted install
        print(f"bench: installing {', '.join(KOPF_REQUIREMENTS)} into {venv}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [venv / "bin" / "python", "-m", "pip", "install", "--quiet", *KOPF_REQUIREMENTS],
            check=True,
        )
        installed.write_text("\n".join(KOPF_REQUIREMENTS) + "\n")
    return venv
