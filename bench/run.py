"""``python -m bench [FIGURE ...] [--profile]``: start a local control plane, run the operator
as a separate process, and print the figures (each one's target: bench/README.md).

Figures, in the order they are printed: convergence, resync, memory, latency, fairness,
failover, startup (all of them unless some are named), and peers, capacity, sharding, tracing
and quiet (only when named). The queue figure, also only when named, needs no control plane: it
runs first, in this process, and alone it starts none.
``BENCH_SCALE=small`` runs smaller sizes; ``BENCH_WORKLOADS=1`` runs the control plane with
workloads (pods for every StatefulSet, as ``make run`` has them). Results go to
``bench/results/<timestamp>.json``; logs (operator, control plane, cProfile output with
``--profile``) to ``bench/results/<timestamp>/``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import time
from collections.abc import Awaitable, Callable, Sequence

from bench import (
    capacity,
    convergence,
    failover,
    fairness,
    latency,
    queue,
    restarts,
    sharding,
    tracing,
)
from bench.cluster import WORKLOADS
from bench.peers import figure as peers
from bench.report import RESULTS, Figure, Results, failed
from bench.scale import from_environment
from bench.session import Session

FigureFunc = Callable[[Session], Awaitable[Figure]]
LocalFunc = Callable[[], Awaitable[Figure]]

FIGURES: dict[str, tuple[FigureFunc, str]] = {
    "convergence": (convergence.convergence, convergence.TARGET),
    "resync": (restarts.resync, restarts.RESYNC_TARGET),
    "memory": (restarts.memory, restarts.MEMORY_TARGET),
    "latency": (latency.latency, latency.TARGET),
    "fairness": (fairness.fairness, fairness.TARGET),
    "failover": (failover.failover, failover.TARGET),
    "startup": (restarts.startup, restarts.STARTUP_TARGET),
    "peers": (peers.peers, peers.TARGET),
    "capacity": (capacity.capacity, capacity.TARGET),
    "sharding": (sharding.sharding, sharding.TARGET),
    "tracing": (tracing.tracing, tracing.TARGET),
    "quiet": (tracing.quiet_tenant, tracing.QUIET_TARGET),
}
LOCAL: dict[str, tuple[LocalFunc, str]] = {
    "queue": (queue.queue, queue.TARGET),
}
"""Figures measured in the bench's own process, with no control plane: they run before it
starts, on a quiet machine, and only when named."""
RUN_ORDER = (
    "peers",
    "capacity",
    "quiet",
    "failover",
    "convergence",
    "resync",
    "latency",
    "fairness",
    "startup",
    "memory",
    "tracing",
    "sharding",
)
"""Each figure builds on the world the previous ones left. Peers and capacity run first, as
they need an empty world (and leave it empty); quiet next, as issue 51's test was made on a
fresh cluster; failover next, while every replica starts in seconds; resync restarts the
operator the convergence figure left; memory reads what the operator processes measured on the
way to 10,000 Companies; tracing after it, as it restarts the operator with and without
tracing; sharding last, as it leaves every child labelled for a member of its rings (an
unsharded operator would apply each again)."""
DEFAULT = tuple(
    name for name in FIGURES if name not in ("peers", "capacity", "sharding", "tracing", "quiet")
)
"""What runs unless figures are named: not peers, which builds two more operators (Go and a
kopf virtualenv, from the network the first time) and adds minutes to the run, nor capacity,
which needs the Go one too, nor sharding, whose rings apply every child of the 10,000 again
(twice) and take longer than the rest of the run, nor tracing and quiet, which add 6,000 and
410 Companies and a Jaeger."""
NAMES = (*FIGURES, *LOCAL)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "figures", nargs="*", metavar="FIGURE", help=", ".join(NAMES) + "; all: every one"
    )
    parser.add_argument(
        "--profile", action="store_true", help="run every operator process under cProfile"
    )
    args = parser.parse_args(argv)
    if "all" in args.figures:
        args.figures = list(NAMES)
    unknown = sorted(set(args.figures) - set(NAMES))
    if unknown:
        parser.error(f"unknown figure {', '.join(unknown)}; choose from {', '.join(NAMES)}")
    return args


async def run(names: Sequence[str], profile: bool) -> int:
    scale = from_environment()
    run_dir = RESULTS / time.strftime("%Y%m%dT%H%M%S")
    run_dir.mkdir(parents=True)
    workloads = os.environ.get(WORKLOADS) == "1"
    results = Results(scale.name, run_dir, workloads)
    session = Session(scale, run_dir, profile, workloads)
    local = [n for n in LOCAL if n in names]
    chosen = [n for n in RUN_ORDER if n in names]
    print(
        f"bench: {', '.join(local + chosen)} at scale {scale.name}; logs in {run_dir}", flush=True
    )
    try:
        for name in local:
            measure, target = LOCAL[name]
            results.add(await _timed(name, target, measure))
        if chosen:
            await session.start()
        for name in chosen:
            func, target = FIGURES[name]
            results.add(await _timed(name, target, functools.partial(func, session)))
    finally:
        if chosen:
            await session.close()
        results.write()
    order = list(NAMES)
    results.figures.sort(key=lambda f: order.index(f.name))
    results.write()
    print(results.summary(), flush=True)
    return 0 if all(f.met is not None for f in results.figures) else 1


async def _timed(name: str, target: str, measure: LocalFunc) -> Figure:
    started = time.monotonic()
    try:
        figure = await measure()
    except Exception as error:  # one figure failing must not hide the others
        figure = failed(name, target, error)
    figure.data["duration_s"] = round(time.monotonic() - started, 1)
    return figure


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return asyncio.run(run(args.figures or list(DEFAULT), args.profile))
