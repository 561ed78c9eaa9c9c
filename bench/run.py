"""``python -m bench [FIGURE ...] [--profile]``: start a local control plane, run the operator
as a separate process, and print the figures of DESIGN.md ("Figures we hold ourselves to").

Figures, in the order they are printed: convergence, resync, memory, latency, failover,
startup (all of them unless some are named). ``BENCH_SCALE=small`` runs smaller sizes.
Results go to ``bench/results/<timestamp>.json``; logs (operator, control plane, cProfile
output with ``--profile``) to ``bench/results/<timestamp>/``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

from bench.convergence import TARGET as CONVERGENCE_TARGET
from bench.convergence import convergence
from bench.failover import failover
from bench.latency import latency
from bench.report import RESULTS, Figure, Results, failed
from bench.restarts import memory, resync, startup
from bench.scale import from_environment
from bench.session import Session

FigureFunc = Callable[[Session], Awaitable[Figure]]

FIGURES: dict[str, tuple[FigureFunc, str]] = {
    "convergence": (convergence, CONVERGENCE_TARGET),
    "resync": (resync, "0 mutating requests"),
    "memory": (memory, "10,000 companies in <= 256 MiB (peak)"),
    "latency": (latency, "p99 < 1 s at 100 creates/s"),
    "failover": (failover, "< 3 s graceful, < 17 s crash"),
    "startup": (startup, "first pass < 60 s with 10,000"),
}
RUN_ORDER = ("convergence", "resync", "failover", "latency", "startup", "memory")
"""Each figure builds on the world the previous ones left: failover runs before the latency
load and the growth to 10,000 make every replica's start-up long; memory reuses the passes
made by then."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "figures", nargs="*", choices=[*FIGURES, []], metavar="FIGURE", help=", ".join(FIGURES)
    )
    parser.add_argument(
        "--profile", action="store_true", help="run every operator process under cProfile"
    )
    return parser.parse_args(argv)


async def run(names: Sequence[str], profile: bool) -> int:
    scale = from_environment()
    run_dir = RESULTS / time.strftime("%Y%m%dT%H%M%S")
    run_dir.mkdir(parents=True)
    results = Results(scale.name, run_dir)
    session = Session(scale, run_dir, profile)
    chosen = [n for n in RUN_ORDER if n in names]
    print(f"bench: {', '.join(chosen)} at scale {scale.name}; logs in {run_dir}", flush=True)
    try:
        await session.start()
        for name in chosen:
            func, target = FIGURES[name]
            try:
                results.add(await func(session))
            except Exception as error:  # one figure failing must not hide the others
                results.add(failed(name, target, error))
    finally:
        await session.close()
        results.write()
    order = list(FIGURES)
    results.figures.sort(key=lambda f: order.index(f.name))
    results.write()
    print(results.summary(), flush=True)
    return 0 if all(f.met is not None for f in results.figures) else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return asyncio.run(run(args.figures or list(FIGURES), args.profile))
