"""``make dashboard-picture``: docs/images/dashboard.png, the chart's Grafana dashboard as its
queries answer on a live operator.

A real Prometheus (built from the Go module promtool comes from, pinned in hack/go-tools.txt)
scrapes a real operator on the local control plane, over HTTPS with a ServiceAccount's token as
the chart's ServiceMonitor does, while companies come, change, are refused and go. Then every
panel's query, with the dashboard's ``$namespace`` and ``$job`` filled in, is asked of Prometheus
over the run, and drawn by matplotlib in the dashboard's own grid. It is not Grafana's rendering
(Grafana is not built here), but every line and number on it is the dashboard's query answered.

``watch(duration, picture)`` is what e2e/test_dashboard.py runs, to hold that every panel shows
data; it raises :class:`NoData` naming the panels that show none.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import yaml

from crewlet_operator import Client
from crewlet_operator.envtest import USER_FIELD_MANAGER, ControlPlane
from crewlet_operator.envtest.crds import install_crds, load_crds
from crewlet_operator.envtest.process import free_port
from crewlet_operator.kube import resources as r
from crewlet_operator_daemon.api.v1alpha1 import COMPANY, ENGINE_CLASS
from hack.demo import operator_argv
from hack.release import go_tool

matplotlib.use("Agg")  # no display: a file
import matplotlib.pyplot as plt  # after the backend is chosen

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "charts" / "crewlet-operator" / "dashboards" / "crewlet-operator.json"
PICTURE = ROOT / "docs" / "images" / "dashboard.png"
# The labels the chart's ServiceMonitor gives the operator's series: its namespace, and the job
# named after the metrics Service.
NAMESPACE = "crewlet-operator-system"
JOB = "crewlet-operator-controller-manager-metrics-service"
SCRAPE_SECONDS = 2
TENANTS = ("tenant-a", "tenant-b", "tenant-c")


class NoData(Exception):
    """Panels whose queries Prometheus answered with no series."""


@dataclass(frozen=True)
class Panel:
    title: str
    kind: str
    grid: dict[str, int]
    unit: str
    queries: list[tuple[str, str]]
    """Each target's query, with ``$namespace`` and ``$job`` filled in, and its legend."""


def panels() -> list[Panel]:
    board = json.loads(DASHBOARD.read_text())
    found = []
    for panel in board["panels"]:
        queries = [
            (
                t["expr"].replace("$namespace", NAMESPACE).replace("$job", JOB),
                t.get("legendFormat", ""),
            )
            for t in panel.get("targets", [])
        ]
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "none")
        found.append(Panel(panel["title"], panel["type"], panel["gridPos"], unit, queries))
    return found


@contextmanager
def operator(plane: ControlPlane, log: Path, metrics: int, health: int) -> Iterator[None]:
    """The operator, as ``make run`` starts it, its metrics on ``metrics``."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            operator_argv(plane, metrics=metrics, health=health),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


@contextmanager
def prometheus(work: Path, target: str, token: str) -> Iterator[str]:
    """Prometheus scraping ``target`` every 2 s, as the ServiceMonitor would: its URL."""
    (work / "token").write_text(token)
    config = {
        "global": {"scrape_interval": f"{SCRAPE_SECONDS}s"},
        "scrape_configs": [
            {
                "job_name": JOB,
                "scheme": "https",
                "tls_config": {"insecure_skip_verify": True},  # the operator's own certificate
                "authorization": {"credentials_file": str(work / "token")},
                "static_configs": [{"targets": [target], "labels": {"namespace": NAMESPACE}}],
            }
        ],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    address = f"127.0.0.1:{free_port()}"
    argv = [
        str(go_tool("prometheus")), f"--config.file={work / 'prometheus.yml'}",
        f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address={address}",
    ]  # fmt: skip
    with (work / "prometheus.log").open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield f"http://{address}"
    finally:
        proc.terminate()
        proc.wait(30)


def ask(url: str, path: str, **params: str) -> Any:
    query = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{url}{path}?{query}", timeout=30) as answer:
        body = json.loads(answer.read())
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus refused {params}: {body}")
    return body["data"]


async def scraper_token(plane: ControlPlane, client: Client) -> str:
    """A ServiceAccount's token that may get /metrics, as the chart's metrics-scraper role."""
    await client.apply(
        r.SERVICE_ACCOUNT, {"metadata": {"name": "prometheus", "namespace": "default"}}
    )
    await client.apply(
        r.CLUSTER_ROLE,
        {
            "metadata": {"name": "metrics-scraper"},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        },
    )
    await client.apply(
        r.CLUSTER_ROLE_BINDING,
        {
            "metadata": {"name": "metrics-scraper"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "metrics-scraper",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "default"}],
        },
    )
    return plane.request_token("default", "prometheus")


def company(namespace: str, name: str, class_name: str, seats: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "crewlet.ai/v1alpha1",
        "kind": "Company",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"className": class_name, "seats": {"replicas": seats}},
    }


async def tenants_at_work(client: Client, duration: float) -> None:
    """Companies come, change their seats, are refused (a class that does not exist) and go,
    for ``duration`` seconds."""
    for namespace in TENANTS:
        await client.apply(r.NAMESPACE, {"metadata": {"name": namespace}})
    for i in range(12):
        await client.apply(COMPANY, company(TENANTS[i % 3], f"company-{i}", "standard"))
    for i in range(2):
        await client.apply(COMPANY, company(TENANTS[i], f"typo-{i}", "standrad"))
    end = time.monotonic() + duration
    round_ = 0
    while time.monotonic() < end:
        round_ += 1
        for i in range(0, 12, 3):
            seats = 1 + (round_ + i) % 3
            await client.apply(COMPANY, company(TENANTS[i % 3], f"company-{i}", "standard", seats))
        if round_ == 6:
            for i in (9, 10, 11):
                await client.delete(COMPANY, f"company-{i}", TENANTS[i % 3])
        await asyncio.sleep(5)


def legend(metric: dict[str, str], fmt: str) -> str:
    if fmt:
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt)
    shown = {k: v for k, v in metric.items() if k not in ("namespace", "job", "instance")}
    return ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) or "value"


def formatted(value: float, unit: str) -> str:
    if unit == "s":
        for size, name in ((86400, "d"), (3600, "h"), (60, "min"), (1, "s")):
            if abs(value) >= size:
                return f"{value / size:.1f} {name}"
        return f"{value * 1000:.0f} ms"
    return f"{value:g}"


def answers(
    url: str, panel: Panel, start: float, end: float
) -> list[tuple[str, list[float], list[float]]]:
    found = []
    for expr, fmt in panel.queries:
        data = ask(
            url, "/api/v1/query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step="5"
        )
        for series in data["result"]:
            times = [float(t) - start for t, _ in series["values"]]
            values = [float(v) for _, v in series["values"]]
            found.append((legend(series["metric"], fmt), times, values))
    return found


def draw(url: str, start: float, end: float, picture: Path) -> list[str]:
    """The dashboard's picture; the titles of the panels that show no data."""
    shown = panels()
    rows = max(p.grid["y"] + p.grid["h"] for p in shown)
    plt.style.use("dark_background")
    # Each grid unit as Grafana lays it out: 24 columns, rows of 30 pixels.
    figure = plt.figure(figsize=(24 * 0.8, rows * 0.4 + 0.6), dpi=80)
    top = 1 - 0.6 / (rows * 0.4 + 0.6)  # room for the title
    empty = []
    for panel in shown:
        g = panel.grid
        left, width = g["x"] / 24, g["w"] / 24
        height = g["h"] / rows * top
        bottom = top - (g["y"] + g["h"]) / rows * top
        # Inside the cell: room for the y ticks on the left, the title above, the x ticks below.
        axes = figure.add_axes((left + 0.035, bottom + 0.012, width - 0.05, height - 0.032))
        axes.set_title(panel.title, loc="left", fontsize=11)
        series = answers(url, panel, start, end)
        if not series:
            empty.append(panel.title)
            axes.text(0.5, 0.5, "No data", ha="center", va="center", transform=axes.transAxes)
            axes.set_axis_off()
        elif panel.kind == "stat":
            text = "\n".join(
                (f"{name}: " if len(series) > 1 else "") + formatted(values[-1], panel.unit)
                for name, _, values in series
            )
            size = 22 if len(series) == 1 else 15
            axes.text(0.5, 0.5, text, ha="center", va="center", fontsize=size, color="#73bf69",
                      transform=axes.transAxes)  # fmt: skip
            axes.set_axis_off()
        else:
            for name, times, values in series:
                axes.plot(times, values, label=name, linewidth=1.4)
            axes.tick_params(labelsize=8)
            if panel.unit not in ("none", ""):
                axes.set_ylabel(panel.unit, fontsize=8)
            axes.legend(fontsize=7, loc="upper left", ncols=2, framealpha=0.3)
            axes.grid(alpha=0.2)
    figure.suptitle(
        "crewlet-operator: the chart's dashboard on a live operator (x: seconds into the run)",
        fontsize=13,
    )
    picture.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(picture, bbox_inches="tight")
    plt.close(figure)
    return empty


def watch(duration: float, picture: Path) -> None:
    """Run the operator and Prometheus for ``duration`` seconds of tenants at work, and draw
    the dashboard into ``picture``. Raises :class:`NoData` if a panel shows nothing."""
    work = Path(tempfile.mkdtemp(prefix="dashboard-"))
    metrics, health = free_port(), free_port()
    with ControlPlane(work / "envtest", workloads=True) as plane:

        async def prepare() -> str:
            async with Client(plane.admin_config(), field_manager=USER_FIELD_MANAGER) as client:
                await install_crds(client, load_crds(ROOT / "manifests" / "crds"))
                sample = yaml.safe_load((ROOT / "manifests/samples/engineclass.yaml").read_text())
                await client.apply(ENGINE_CLASS, sample)
                return await scraper_token(plane, client)

        token = asyncio.run(prepare())
        with (
            operator(plane, work / "operator.log", metrics, health),
            prometheus(work, f"127.0.0.1:{metrics}", token) as url,
        ):
            start = time.time()

            wait_up(url, 120)

            async def run() -> None:
                async with Client(plane.admin_config(), field_manager=USER_FIELD_MANAGER) as client:
                    await tenants_at_work(client, duration)

            asyncio.run(run())
            empty = draw(url, start, time.time(), picture)
    if empty:
        raise NoData(f"panels with no data: {empty} (the run's files: {work})")


def wait_up(url: str, timeout: float) -> None:
    """Until Prometheus has scraped the operator once, successfully."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = ask(url, "/api/v1/query", query=f'up{{job="{JOB}"}}')
            if any(s["value"][1] == "1" for s in data["result"]):
                return
        except OSError:
            pass  # not listening yet
        time.sleep(1)
    raise NoData(f"Prometheus did not scrape the operator within {timeout:.0f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=240, help="seconds of tenants at work")
    parser.add_argument("--out", type=Path, default=PICTURE)
    args = parser.parse_args(argv)
    try:
        watch(args.duration, args.out)
    except NoData as empty:
        print(f"dashboard-picture: {empty}", file=sys.stderr)
        return 1
    print(f"dashboard-picture: wrote {os.path.relpath(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
