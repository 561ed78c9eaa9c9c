"""The release, as one script for the release workflow and for its rehearsal here.

``publish`` is what .github/workflows/release.yml runs once CI has passed and the operator's image
is pushed: it signs the image and attaches its SBOM, packages the chart, pushes it to an OCI
registry with ``helm push`` and signs it, verifies the engine CI tested and copies it under the
release's version, signs the copy, renders install.yaml and writes the release notes. In the
workflow it signs keyless (Sigstore, the workflow's OIDC identity).

``rehearse`` (``make release-rehearsal``) runs the same ``publish`` on this machine, with no
Docker engine and no network but the package registries:

- a registry on loopback (go-containerregistry's ``crane registry serve``);
- a cosign key pair made for the run, in place of keyless signing;
- the operator's image built daemonless: a Debian base made by debootstrap (cached), and a layer
  of the locked Python dependencies and this checkout's wheels, appended with ``crane``;
- a stand-in for Crewlet's ``main`` (one small layer, a revision label), signed with a second key;

and then installs the chart the way the install page says, ``helm install crewlet-operator
oci://.../crewlet-operator --version ...``, on the local control plane, after verifying its
signature; waits for the manager's Deployment to be Ready; runs the image's own entrypoint
against the control plane until its /readyz answers; and pushes a tampered chart under the same
version, which verification refuses. What it did is written to ``summary.json`` in its directory.

The Go tools (crane, cosign, syft) are pinned in hack/go-tools.txt and built once by
hack/go-tool.sh; helm is the project's (``make tools``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import yaml

from crewlet_operator.envtest import ControlPlane
from crewlet_operator.envtest.binaries import KUBERNETES_VERSION, find
from crewlet_operator.envtest.process import free_port

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "crewlet-operator"
LOCK = ROOT / "requirements" / "image.txt"
CACHE = Path(os.environ.get("CREWLET_CACHE", Path.home() / ".cache" / "crewlet-operator"))
RELEASE = "crewlet-operator"
NAMESPACE = "crewlet-operator-system"
MANAGER = "crewlet-operator-controller-manager"
REVISION_LABEL = "org.opencontainers.image.revision"
OIDC_ISSUER = "https://token.actions.githubusercontent.com"
CREWLET_IDENTITY = (
    "https://github.com/crewlet/crewlet/.github/workflows/main-image.yml@refs/heads/main"
)
# The base of the rehearsal's image: the Debian release and Python of the Dockerfile's
# python:3.11-slim (bookworm, Python 3.11).
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"


class ReleaseError(Exception):
    """A step of the release failed; the message says which and why."""


def run(
    argv: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    what: str | None = None,
) -> str:
    """Run a command and give its stdout; a failure raises :class:`ReleaseError` with its
    output."""
    args = [str(a) for a in argv]
    done = subprocess.run(
        args,
        env=None if env is None else {**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ReleaseError(
            f"{what or ' '.join(args[:3])} failed (exit {done.returncode}):\n"
            f"{done.stdout[-4000:]}{done.stderr[-4000:]}"
        )
    return done.stdout


def go_tool(name: str) -> Path:
    """A Go tool of hack/go-tools.txt, built once into the cache."""
    return Path(run(["bash", ROOT / "hack" / "go-tool.sh", name], what=f"building {name}").strip())


def built_go_tool(name: str) -> Path:
    """A Go tool of hack/go-tools.txt where hack/go-tool.sh builds it, not built here: for the
    tests, whose make target builds it first.

    :raises FileNotFoundError: It is not built; the message names the make target that does.
    """
    cache = Path(os.environ.get("CREWLET_CACHE", Path.home() / ".cache" / "crewlet-operator"))
    found = Path(os.environ.get("CREWLET_TOOLS_DIR", cache / "bin" / "tools")) / name
    if not found.is_file():
        raise FileNotFoundError(f"{name} is missing at {found}: build it with `make {name}`")
    return found


@dataclass(frozen=True)
class Signer:
    """Who signs, or whose signature a verification accepts: a cosign key pair (the rehearsal)
    or a keyless Sigstore identity (the release workflow's own, or Crewlet's for its engine)."""

    key: Path | None = None
    public_key: Path | None = None
    signing_config: Path | None = None
    """With ``key``: a Sigstore signing config naming no service, since a key made for a run
    has no transparency log or timestamp authority to go to (none is reachable here)."""
    identity: str | None = None
    issuer: str = OIDC_ISSUER

    def sign_args(self) -> list[str]:
        if self.key is None:
            return []  # keyless: the workflow's OIDC token
        return ["--key", str(self.key), "--signing-config", str(self.signing_config)]

    def verify_args(self) -> list[str]:
        if self.public_key is not None:
            return ["--key", str(self.public_key), "--insecure-ignore-tlog=true"]
        if self.identity is None:
            raise ReleaseError("a keyless verification needs an identity")
        return ["--certificate-identity", self.identity, "--certificate-oidc-issuer", self.issuer]


@dataclass(frozen=True)
class Tools:
    """The binaries and the environment every step runs them in."""

    helm: Path
    crane: Path
    cosign: Path
    syft: Path
    home: Path | None
    """A home of the run's own for helm, cosign and the registries' credentials (the
    rehearsal); None keeps the caller's (the workflow's logins)."""
    plain_http: bool = False

    @classmethod
    def build(cls, home: Path | None, plain_http: bool = False) -> Tools:
        return cls(
            find("helm"),
            go_tool("crane"),
            go_tool("cosign"),
            go_tool("syft"),
            home,
            plain_http,
        )

    @property
    def env(self) -> dict[str, str]:
        if self.home is None:
            return {}
        env = {
            "HELM_CACHE_HOME": str(self.home / "helm" / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "helm" / "config"),
            "HELM_DATA_HOME": str(self.home / "helm" / "data"),
            "TUF_ROOT": str(self.home / "sigstore"),
            "DOCKER_CONFIG": str(self.home / "docker"),
            # The run's keys have no password: they live as long as the run.
            "COSIGN_PASSWORD": "",
        }
        if self.plain_http:
            env["SYFT_REGISTRY_INSECURE_USE_HTTP"] = "true"
        return env

    def crane_run(self, *args: str | Path) -> str:
        insecure = ["--insecure"] if self.plain_http else []
        return run([self.crane, *args, *insecure], env=self.env, what=f"crane {args[0]}")

    def cosign_run(self, *args: str | Path) -> str:
        http = ["--allow-http-registry", "--allow-insecure-registry"] if self.plain_http else []
        return run([self.cosign, *args, *http], env=self.env, what=f"cosign {args[0]}")

    def helm_run(self, *args: str | Path) -> str:
        return run([self.helm, *args], env=self.env, what=f"helm {args[0]}")


def repository_of(reference: str) -> str:
    """``host/path`` of ``host/path:tag``, ``host/path@digest`` or ``host/path:tag@digest``."""
    name = reference.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def digest(tools: Tools, reference: str) -> str:
    return tools.crane_run("digest", reference).strip()


def sign(tools: Tools, signer: Signer, reference: str) -> None:
    """Sign ``reference`` (a digest reference: a tag could move between push and sign)."""
    if "@sha256:" not in reference:
        raise ReleaseError(f"sign by digest, not {reference}")
    tools.cosign_run("sign", "--yes", *signer.sign_args(), reference)


def verify(tools: Tools, signer: Signer, reference: str) -> str:
    """Verify ``reference``'s signature by ``signer``; give the digest that was verified."""
    resolved = f"{repository_of(reference)}@{digest(tools, reference)}"
    try:
        tools.cosign_run("verify", *signer.verify_args(), resolved)
    except ReleaseError as failed:
        raise ReleaseError(f"{reference} ({resolved}) does not verify:\n{failed}") from None
    return resolved.rsplit("@", 1)[1]


def attach_sbom(tools: Tools, signer: Signer, image: str, out: Path) -> Path:
    """The image's SBOM (SPDX JSON, by syft: the Debian packages and every Python
    distribution in it), attached to the image as a signed attestation, and verified. For an
    index of platforms, syft reads this machine's platform (the release runs on linux/amd64)."""
    sbom = out / "sbom.spdx.json"
    run(
        [tools.syft, "scan", f"registry:{image}", "--quiet", "-o", f"spdx-json={sbom}"],
        env=tools.env,
        what="syft scan",
    )
    tools.cosign_run(
        "attest",
        "--yes",
        *signer.sign_args(),
        "--type",
        "spdxjson",
        "--predicate",
        sbom,
        image,
    )
    tools.cosign_run("verify-attestation", *signer.verify_args(), "--type", "spdxjson", image)
    return sbom


def sbom_packages(sbom: Path) -> dict[str, str]:
    """The SBOM's packages by name, with their versions."""
    doc = json.loads(sbom.read_text())
    return {p["name"]: p.get("versionInfo", "") for p in doc.get("packages", [])}


def package_chart(tools: Tools, version: str, out: Path, chart: Path = CHART) -> Path:
    """The chart as ``crewlet-operator-X.Y.Z.tgz``: version X.Y.Z, appVersion vX.Y.Z."""
    tools.helm_run(
        "package", chart, "--version", version.removeprefix("v"), "--app-version", version,
        "--destination", out,
    )  # fmt: skip
    return out / f"{RELEASE}-{version.removeprefix('v')}.tgz"


def push_chart(tools: Tools, package: Path, repository: str) -> str:
    """``helm push`` the package to ``oci://repository``; give the digest it pushed."""
    http = ["--plain-http"] if tools.plain_http else []
    run(
        [tools.helm, "push", package, f"oci://{repository}", *http], env=tools.env, what="helm push"
    )
    # helm prints "Digest: sha256:..." (to stderr in helm 4, stdout in helm 3): the registry is
    # asked instead of parsing either.
    version = package.name.removeprefix(f"{RELEASE}-").removesuffix(".tgz")
    return digest(tools, f"{repository}/{RELEASE}:{version}")


def copy_engine(tools: Tools, source: str, target: str) -> str:
    """Copy the engine ``source`` (by digest) to ``target`` (a tag) as it is, index and all,
    so the copy keeps the digest that was tested. A tag is never moved to another digest."""
    wanted = source.rsplit("@", 1)[1]
    try:
        existing: str | None = digest(tools, target)
    except ReleaseError:
        existing = None  # not copied yet
    if existing is not None and existing != wanted:
        raise ReleaseError(
            f"{target} already names {existing}, not the engine these tests ran ({wanted}); "
            "a tag is never moved"
        )
    tools.crane_run("copy", source, target)
    copied = digest(tools, target)
    if copied != wanted:
        raise ReleaseError(f"the copy has digest {copied}, not {wanted}")
    return copied


def engine_revision(tools: Tools, image: str) -> str:
    """The Crewlet commit an engine image was built from: its revision label (linux/amd64's,
    for an index of platforms)."""
    config = json.loads(tools.crane_run("config", image, "--platform", "linux/amd64"))
    revision = ((config.get("config") or {}).get("Labels") or {}).get(REVISION_LABEL, "")
    if not revision:
        raise ReleaseError(f"{image} has no {REVISION_LABEL} label")
    return str(revision)


def install_yaml(tools: Tools, package: Path, version: str, kubernetes: str, out: Path) -> Path:
    """The chart rendered with its default values behind its Namespace, as
    hack/build_installer.py renders dist/install.yaml, for the release's Kubernetes."""
    rendered = tools.helm_run(
        "template", RELEASE, package, "--namespace", NAMESPACE, "--kube-version", kubernetes
    )
    header = (
        f"# crewlet-operator {version}: the chart rendered with its default values.\n"
        "---\napiVersion: v1\nkind: Namespace\nmetadata:\n"
        f"  name: {NAMESPACE}\n  labels:\n    app.kubernetes.io/name: crewlet-operator\n"
        "    pod-security.kubernetes.io/enforce: restricted\n"
    )
    path = out / "install.yaml"
    path.write_text(header + rendered)
    return path


@dataclass(frozen=True)
class Facts:
    """What a release is, and where it goes: what it starts from and what its notes name."""

    version: str
    kubernetes: str
    """The Kubernetes version the e2e suite's control plane ran (envtest)."""
    kind_kubernetes: str | None
    """The Kubernetes version of the kind cluster the operator and its engine ran on, if any."""
    operator_image: str
    """The operator's image repository, pushed at ``image_digest`` before publishing."""
    image_digest: str
    chart_repository: str
    engine_copy: str


@dataclass(frozen=True)
class Plan(Facts):
    """What :func:`publish` is asked to do."""

    engine_source: str
    """Crewlet's engine CI tested, by digest."""
    signer: Signer
    engine_signer: Signer


@dataclass(frozen=True)
class Release(Facts):
    """What a release published: the facts its notes are written from."""

    chart_digest: str
    engine_digest: str
    engine_source: str
    """The engine's repository, as Crewlet publishes it."""
    engine_revision: str
    signed_by: str
    """How to check the signatures: the cosign flags that name the signer."""

    @property
    def minor(self) -> str:
        return ".".join(self.kubernetes.removeprefix("v").split(".")[:2])


def release_notes(release: Release) -> str:
    """The GitHub release's notes: the Kubernetes minor the tests ran on, the engine by tag,
    digest and Crewlet commit, every artifact by digest, and how to verify and install."""
    r = release
    chart_version = r.version.removeprefix("v")
    ran_on = f"the e2e suite on a local {r.kubernetes} control plane"
    if r.kind_kubernetes is not None:
        ran_on += (
            f", and the operator with its engine on a kind cluster running {r.kind_kubernetes}"
        )
    return f"""## Supported Kubernetes

Kubernetes {r.minor}, the minor this release's tests ran on: {ran_on}.

## Engine

Run the engine this release was tested against:

- `{r.engine_copy}:{r.version}`
- digest `{r.engine_digest}` (`{r.engine_copy}@{r.engine_digest}`)
- built from Crewlet commit `{r.engine_revision}`, published as `{r.engine_source}`; copied
  unchanged and signed by this release.

```yaml
spec:
  engine:
    image: {r.engine_copy}:{r.version}
```

## Artifacts

| What | Reference | Digest |
|---|---|---|
| Operator image | `{r.operator_image}:{r.version}` | `{r.image_digest}` |
| Helm chart | `oci://{r.chart_repository}/{RELEASE}` {chart_version} | `{r.chart_digest}` |
| Engine | `{r.engine_copy}:{r.version}` | `{r.engine_digest}` |

Each is signed with cosign, and the operator image carries its SBOM (SPDX) as a signed
attestation. Verify, for example:

```sh
cosign verify {r.engine_copy}:{r.version} \\
  {r.signed_by}
```

Install:

```sh
helm install {RELEASE} oci://{r.chart_repository}/{RELEASE} \\
  --version {chart_version} \\
  --namespace {NAMESPACE} --create-namespace
```
"""


def publish(tools: Tools, plan: Plan, out: Path) -> Release:
    """Sign the image and attach its SBOM, push and sign the chart, verify and copy the
    engine, and write install.yaml and the notes into ``out``."""
    if not plan.version.startswith("v") or plan.version.count(".") != 2:
        raise ReleaseError(f"not a release version: {plan.version}")
    if "@sha256:" not in plan.engine_source:
        raise ReleaseError(f"the engine is copied by digest, not {plan.engine_source}")
    out.mkdir(parents=True, exist_ok=True)
    image = f"{plan.operator_image}@{plan.image_digest}"
    sign(tools, plan.signer, image)
    verify(tools, plan.signer, image)
    attach_sbom(tools, plan.signer, image, out)

    package = package_chart(tools, plan.version, out)
    chart_digest = push_chart(tools, package, plan.chart_repository)
    chart = f"{plan.chart_repository}/{RELEASE}@{chart_digest}"
    sign(tools, plan.signer, chart)
    verify(
        tools, plan.signer, f"{plan.chart_repository}/{RELEASE}:{plan.version.removeprefix('v')}"
    )

    verify(tools, plan.engine_signer, plan.engine_source)
    engine_digest = copy_engine(tools, plan.engine_source, f"{plan.engine_copy}:{plan.version}")
    sign(tools, plan.signer, f"{plan.engine_copy}@{engine_digest}")

    install_yaml(tools, package, plan.version, plan.kind_kubernetes or plan.kubernetes, out)
    release = Release(
        **{f.name: getattr(plan, f.name) for f in fields(Facts)},
        chart_digest=chart_digest,
        engine_digest=engine_digest,
        engine_source=repository_of(plan.engine_source),
        engine_revision=engine_revision(tools, plan.engine_source),
        signed_by=" ".join(plan.signer.verify_args()),
    )
    (out / "notes.md").write_text(release_notes(release))
    return release


# -- the rehearsal ---------------------------------------------------------------------------


def as_root() -> list[str]:
    """How to run a command as root: directly, or through sudo without a password (a CI
    runner's user). debootstrap and chroot need root; nothing else here does."""
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], check=False).returncode == 0:
        return ["sudo", "-n"]
    raise ReleaseError(
        "the rehearsal needs root, or sudo without a password, for debootstrap and chroot (the "
        "image's base and its entrypoint's run): run make test-release as root, or where sudo "
        "asks no password, as a CI runner's user does; make test needs neither"
    )


def debootstrap() -> str:
    """debootstrap, installed from Debian's packages the first time it is wanted."""
    found = shutil.which("debootstrap", path=f"{os.environ.get('PATH', '')}:/usr/sbin")
    if found is not None:
        return found
    install = [*as_root(), "apt-get", "install", "-y", "-q", "debootstrap"]
    try:
        run(install, what="apt-get install debootstrap")
    except ReleaseError:  # a machine whose package lists were never fetched
        run([*as_root(), "apt-get", "update", "-q"], what="apt-get update")
        run(install, what="apt-get install debootstrap")
    return "/usr/sbin/debootstrap"


def base_rootfs() -> Path:
    """Debian with Python 3 (bookworm, minbase), as a layer's tarball, made once by debootstrap
    into the cache (a minute, then cached)."""
    layer = CACHE / "image" / f"{DEBIAN_SUITE}-python3.tar"
    if layer.is_file():
        return layer
    layer.parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="rootfs-", dir=layer.parent)) / "root"
    partial = layer.with_suffix(".partial")
    try:
        make: list[str | Path] = [
            debootstrap(),
            "--variant=minbase",
            "--include=python3",
            DEBIAN_SUITE,
            root,
        ]
        run([*as_root(), *make, DEBIAN_MIRROR], what="debootstrap")
        # The packages' archives and lists: not the image's, and a third of its size.
        clean = "rm -f var/cache/apt/archives/*.deb var/lib/apt/lists/*_Packages*"
        run([*as_root(), "sh", "-c", f"cd {root} && {clean}"], what="clean the base")
        tar: list[str | Path] = ["tar", "-C", root, "--numeric-owner", "-cf", partial, "."]
        run([*as_root(), *tar], what="tar the base")
        run([*as_root(), "chown", f"{os.getuid()}:{os.getgid()}", partial], what="chown the base")
        partial.rename(layer)
    finally:
        run([*as_root(), "rm", "-rf", root.parent], what="remove the base's tree")
    return layer


def app_layer(work: Path) -> Path:
    """The operator: the locked dependencies (hashes required) and this checkout's two wheels,
    under /usr/local, with the console script the Dockerfile's pip would write."""
    root = work / "app"
    site = root / SITE_PACKAGES
    wheels = work / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    run(
        [*pip, "wheel", "--no-deps", "--wheel-dir", wheels, ROOT, ROOT / "reconcilers"],
        what="pip wheel",
    )
    # This machine's Python and glibc are the image's (3.11, bookworm's 2.36): the wheels pip
    # picks here are the ones the image's Python loads.
    install: list[str | Path] = [
        *pip,
        "install",
        "--no-compile",
        "--only-binary=:all:",
        "--target",
        site,
    ]
    run([*install, "--require-hashes", "-r", LOCK], what="pip install the lock")
    run([*install, "--no-deps", *sorted(wheels.glob("*.whl"))], what="pip install the wheels")
    shutil.rmtree(site / "bin", ignore_errors=True)
    script = root / "usr" / "local" / "bin" / "crewlet-operator-daemon"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(
        "#!/usr/bin/python3\nimport sys\nfrom crewlet_operator_daemon.cli import main\n"
        "sys.exit(main())\n"
    )
    script.chmod(0o755)
    layer = work / "app.tar"
    with tarfile.open(layer, "w") as tar:
        for path in sorted(root.rglob("*")):
            info = tar.gettarinfo(str(path), str(path.relative_to(root)))
            info.uid = info.gid = 0
            info.mtime = 0  # the same checkout and lock give the same layer
            info.uname = info.gname = "root"
            if path.is_file() and not path.is_symlink():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return layer


def build_image(tools: Tools, repository: str, version: str, work: Path) -> str:
    """The operator's image without a container engine, as the Dockerfile's: the base, then
    the operator's layer, its entrypoint, user and environment. Gives its digest."""
    work.mkdir(parents=True, exist_ok=True)
    staged = f"{repository}:staged"
    tools.crane_run(
        "append", "--oci-empty-base", "-f", base_rootfs(), "-f", app_layer(work), "-t", staged
    )
    tools.crane_run(
        "mutate", staged, "-t", f"{repository}:{version}",
        "--entrypoint", "crewlet-operator-daemon", "--user", "65532:65532",
        "--env", "PYTHONDONTWRITEBYTECODE=1", "--env", "PYTHONUNBUFFERED=1",
        "--label", f"org.opencontainers.image.version={version}",
    )  # fmt: skip
    return digest(tools, f"{repository}:{version}")


def engine_stand_in(tools: Tools, repository: str, revision: str, work: Path) -> str:
    """A stand-in for Crewlet's main: one small layer and the revision label. Gives its
    digest reference."""
    work.mkdir(parents=True, exist_ok=True)
    layer = work / "engine.tar"
    with tarfile.open(layer, "w") as tar:
        data = f"a stand-in for Crewlet's engine at {revision}\n".encode()
        info = tarfile.TarInfo("crewlet-engine.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    tools.crane_run("append", "--oci-empty-base", "-f", layer, "-t", f"{repository}:staged")
    tools.crane_run(
        "mutate", f"{repository}:staged", "-t", f"{repository}:main",
        "--label", f"{REVISION_LABEL}={revision}",
    )  # fmt: skip
    return f"{repository}@{digest(tools, f'{repository}:main')}"


def wait_for(url: str, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise ReleaseError(f"{what} did not answer 200 at {url} within {timeout:.0f} s")
        time.sleep(0.2)


@contextlib.contextmanager
def registry(tools: Tools, log: Path) -> Iterator[str]:
    """An OCI registry on loopback, in memory, for the run: its host:port."""
    host = f"127.0.0.1:{free_port()}"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [tools.crane, "registry", "serve", "--address", host], stdout=out, stderr=out
        )
    try:
        wait_for(f"http://{host}/v2/", 30, "the registry")
        yield host
    finally:
        proc.terminate()
        proc.wait(10)


NO_SERVICES = {
    "mediaType": "application/vnd.dev.sigstore.signingconfig.v0.2+json",
    "caUrls": [],
    "oidcUrls": [],
    "rekorTlogUrls": [],
    "tsaUrls": [],
    "rekorTlogConfig": {"selector": "ANY"},
    "tsaConfig": {"selector": "ANY"},
}


def key_pair(tools: Tools, prefix: Path) -> Signer:
    """A cosign key pair made for the run (its password empty: it lives as long as the run)."""
    run(
        [tools.cosign, "generate-key-pair", "--output-key-prefix", prefix],
        env=tools.env,
        what="cosign generate-key-pair",
    )
    config = prefix.with_suffix(".signing-config.json")
    config.write_text(json.dumps(NO_SERVICES))
    return Signer(
        key=prefix.with_suffix(".key"),
        public_key=prefix.with_suffix(".pub"),
        signing_config=config,
    )


def tamper(tools: Tools, package: Path, work: Path) -> Path:
    """The chart package with one value changed (the image's repository), under the same name
    and version: what someone with push access to the registry could put in its place."""
    unpacked = work / "tampered"
    shutil.rmtree(unpacked, ignore_errors=True)
    unpacked.mkdir(parents=True)
    with tarfile.open(package) as tar:
        tar.extractall(unpacked, filter="data")
    values = unpacked / RELEASE / "values.yaml"
    ours = "repository: ghcr.io/crewlet/crewlet-operator"
    values.write_text(values.read_text().replace(ours, "repository: attacker.example/x", 1))
    return package_chart(
        tools,
        package.name.removeprefix(f"{RELEASE}-").removesuffix(".tgz"),
        work,
        unpacked / RELEASE,
    )


def kubectl(kubeconfig: Path, *args: str) -> str:
    return run([find("kubectl"), "--kubeconfig", kubeconfig, *args], what=f"kubectl {args[0]}")


def wait_ready(kubeconfig: Path, timeout: float) -> dict[str, object]:
    """The manager's Deployment once its rollout is done: every replica Ready."""
    deployment = f"deployment/{MANAGER}"
    rollout = ["-n", NAMESPACE, "rollout", "status", deployment, f"--timeout={timeout:.0f}s"]
    kubectl(kubeconfig, *rollout)
    return dict(json.loads(kubectl(kubeconfig, "-n", NAMESPACE, "get", deployment, "-o", "json")))


def run_image(tools: Tools, image: str, kubeconfig: Path, work: Path, timeout: float = 120) -> None:
    """The image's own filesystem and entrypoint, run with chroot against the control plane
    (kwok's pods run no container) until the operator's /readyz answers 200."""
    rootfs = work / "rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    rootfs.mkdir(parents=True)
    exported = work / "image.tar"
    run(
        [tools.crane, "export", image, exported, *(["--insecure"] if tools.plain_http else [])],
        what="crane export",
    )
    run(["tar", "-C", rootfs, "-xf", exported], what="unpack the image")
    config = json.loads(tools.crane_run("config", image))["config"]
    uid, gid = (int(n) for n in config["User"].split(":"))
    shutil.copy(kubeconfig, rootfs / "kubeconfig")
    # 0600 and the image's user's, as a pod's mounted Secret would be.
    run([*as_root(), "chown", f"{uid}:{gid}", rootfs / "kubeconfig"], what="chown the kubeconfig")
    port = free_port()
    argv = [*config["Entrypoint"], "--kubeconfig", "/kubeconfig", "--metrics-bind-address", "0",
            "--health-probe-bind-address", f"127.0.0.1:{port}", "--leader-elect=false"]  # fmt: skip
    chroot = shutil.which("chroot", path=f"{os.environ.get('PATH', '')}:/usr/sbin") or "chroot"
    with (work / "operator.log").open("w") as log:
        proc = subprocess.Popen(
            [*as_root(), chroot, f"--userspec={uid}:{gid}", rootfs, *argv],
            stdout=log,
            stderr=log,
            env={
                # What a container runtime sets for a user the image's /etc/passwd lacks.
                "HOME": "/",
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                **dict(e.split("=", 1) for e in config["Env"]),
            },
        )
    try:
        wait_for(f"http://127.0.0.1:{port}/readyz", timeout, "the image's operator")
    except ReleaseError:
        said = (work / "operator.log").read_text()[-4000:]
        raise ReleaseError(f"the image's operator was not Ready; its log:\n{said}") from None
    finally:
        proc.terminate()
        proc.wait(30)


def rehearse(out: Path) -> dict[str, object]:
    """The release, start to end, on this machine (see the module's docstring). It needs root
    for the image's base (debootstrap, chroot), and says so before anything else."""
    as_root()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    tools = Tools.build(out / "home", plain_http=True)
    version = "v" + yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    summary: dict[str, object] = {"version": version}
    with registry(tools, out / "registry.log") as host:
        signer = key_pair(tools, out / "release")
        crewlet = key_pair(tools, out / "crewlet")
        engine = engine_stand_in(
            tools,
            f"{host}/crewlet/crewlet",
            "0123456789abcdef0123456789abcdef01234567",
            out / "engine",
        )
        sign(tools, crewlet, engine)
        summary["engine_source_digest"] = engine.rsplit("@", 1)[1]
        operator = f"{host}/crewlet/crewlet-operator"
        image_digest = build_image(tools, operator, version, out / "image")
        plan = Plan(
            version=version,
            kubernetes=KUBERNETES_VERSION,
            kind_kubernetes=None,
            operator_image=operator,
            image_digest=image_digest,
            chart_repository=f"{host}/crewlet/charts",
            engine_source=engine,
            engine_copy=f"{host}/crewlet/crewlet-operator/engine",
            signer=signer,
            engine_signer=crewlet,
        )
        release = publish(tools, plan, out / "release")
        summary["release"] = asdict(release)
        summary["sbom_packages"] = len(sbom_packages(out / "release" / "sbom.spdx.json"))
        # main moves on; a re-run of the release must not move its engine's tag with it.
        moved = engine_stand_in(tools, f"{host}/crewlet/crewlet", "f" * 40, out / "engine-next")
        try:
            copy_engine(tools, moved, f"{plan.engine_copy}:{version}")
        except ReleaseError as refused:
            summary["engine_tag_kept"] = str(refused)
        else:
            raise ReleaseError("a re-run moved the engine's release tag to another image")

        chart = f"oci://{plan.chart_repository}/{RELEASE}"
        chart_version = version.removeprefix("v")
        with ControlPlane(workloads=True) as plane:
            # The install page's command, after the check its release notes ask for.
            verify(tools, signer, f"{plan.chart_repository}/{RELEASE}:{chart_version}")
            tools.helm_run(
                "install", RELEASE, chart, "--version", chart_version, "--plain-http",
                "--namespace", NAMESPACE, "--create-namespace",
                "--set", f"image.repository={operator}", "--set", f"image.digest={image_digest}",
                "--kubeconfig", plane.kubeconfig,
            )  # fmt: skip
            deployment = wait_ready(plane.kubeconfig, 300)
            containers = deployment["spec"]["template"]["spec"]["containers"]  # type: ignore[index]
            summary["installed_image"] = containers[0]["image"]
            run_image(tools, f"{operator}@{image_digest}", plane.kubeconfig, out / "run")
            summary["image_ran_ready"] = True

        tampered = tamper(tools, out / "release" / f"{RELEASE}-{chart_version}.tgz", out / "tamper")
        tampered_digest = push_chart(tools, tampered, plan.chart_repository)
        try:
            verify(tools, signer, f"{plan.chart_repository}/{RELEASE}:{chart_version}")
        except ReleaseError as refused:
            summary["tampered"] = {
                "digest": tampered_digest,
                "refused": str(refused).splitlines()[0],
            }
        else:
            raise ReleaseError(f"a tampered chart ({tampered_digest}) verified")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rehearsal = commands.add_parser("rehearse", help="the release end to end on this machine")
    rehearsal.add_argument("--out", type=Path, default=ROOT / ".run" / "release-rehearsal")
    release = commands.add_parser("publish", help="the release workflow's publish, keyless")
    release.add_argument("--version", required=True)
    release.add_argument("--kind-kubernetes", help="the kind cluster's version, if one ran")
    release.add_argument("--operator-image", required=True)
    release.add_argument("--image-digest", required=True)
    release.add_argument("--chart-repository", required=True, help="host/path, no oci://")
    release.add_argument("--engine-source", required=True, help="Crewlet's engine, by digest")
    release.add_argument("--engine-copy", required=True)
    release.add_argument("--identity", required=True, help="this workflow's signing identity")
    release.add_argument("--out", type=Path, default=ROOT / "dist" / "release")
    args = parser.parse_args(argv)
    try:
        if args.command == "rehearse":
            summary = rehearse(args.out)
            print(json.dumps(summary, indent=2))
            return 0
        tools = Tools.build(None)
        plan = Plan(
            version=args.version,
            # The release's tests ran on the e2e suite's control plane: envtest's version.
            kubernetes=KUBERNETES_VERSION,
            kind_kubernetes=args.kind_kubernetes,
            operator_image=args.operator_image,
            image_digest=args.image_digest,
            chart_repository=args.chart_repository,
            engine_source=args.engine_source,
            engine_copy=args.engine_copy,
            signer=Signer(identity=args.identity),
            engine_signer=Signer(identity=CREWLET_IDENTITY),
        )
        print(release_notes(publish(tools, plan, args.out)))
        return 0
    except ReleaseError as failed:
        print(f"release: {failed}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
