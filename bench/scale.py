"""How big the run is: ``BENCH_SCALE=full`` (the default: the sizes the targets name) or
``BENCH_SCALE=small`` (a quick run on the same code paths; its figures are not the targets')."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Scale:
    name: str
    convergence: tuple[int, ...]
    """Burst sizes; the convergence target is judged at the largest."""
    memory: tuple[int, int]
    """Companies (children included) at which the operator's memory is read."""
    resync: int
    """Companies a resync runs over when no convergence figure ran before it."""
    load_rate: float
    """Background Companies created per second while the latency probes run."""
    load_seconds: float
    probes: int
    failover_burst: int
    fairness_burst: int
    """The fairness figure's burst, in busy tenants' namespaces, ten to a namespace."""
    fairness_probes: int
    """Its probes, in a quiet namespace of their own."""
    startup: int
    """The start-up figure's world, which the sharding figure starts its rings over too."""
    sharding_burst: int
    """New Companies created in one burst while three sharded replicas run."""
    peers: int
    """The peers figure's burst, and the size of each contender's world at its restart."""
    peers_large: int
    """Each contender's world at its second restart, with ``BENCH_PEERS_LARGE=1``."""
    capacity_seed: int
    """Companies each contender of the capacity figure converges before its first step."""
    capacity_rates: tuple[float, ...]
    """The capacity figure's steps: changes a second, raised until one breaks the SLO."""
    capacity_step_seconds: float
    timeout: float
    """Seconds any one wait may take before the figure fails."""


FULL = Scale(
    name="full",
    convergence=(100, 1000),
    memory=(1000, 10000),
    resync=1000,
    load_rate=100.0,
    load_seconds=30.0,
    probes=30,
    failover_burst=200,
    fairness_burst=400,
    fairness_probes=30,
    startup=10000,
    sharding_burst=300,
    peers=1000,
    peers_large=10000,
    capacity_seed=500,
    capacity_rates=(5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 100.0, 150.0),
    capacity_step_seconds=20.0,
    timeout=900.0,
)
SMALL = Scale(
    name="small",
    convergence=(50, 200),
    memory=(200, 500),
    resync=200,
    load_rate=20.0,
    load_seconds=10.0,
    probes=10,
    failover_burst=50,
    fairness_burst=400,
    fairness_probes=10,
    startup=500,
    sharding_burst=50,
    peers=200,
    peers_large=500,
    capacity_seed=50,
    capacity_rates=(5.0, 10.0, 20.0, 40.0, 80.0),
    capacity_step_seconds=8.0,
    timeout=300.0,
)
SCALES = {s.name: s for s in (FULL, SMALL)}


def from_environment() -> Scale:
    """``BENCH_SCALE`` (full or small)."""
    name = os.environ.get("BENCH_SCALE", "full") or "full"
    if name not in SCALES:
        raise SystemExit(f"BENCH_SCALE={name!r}: expected one of {', '.join(SCALES)}")
    return SCALES[name]
