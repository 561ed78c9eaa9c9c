"""Figure: the workqueue's own cost, in the bench's process, with no control plane (issue 49).

10,000 requests over 1,000 keys (twenty namespaces of 50, the controllers' default fairness key
being the namespace) go through ``add`` → ``get`` → ``done`` of one queue, as a controller's
informers and workers would: ten rounds over the keys, each in a shuffled order, at low, normal
or high priority (2 : 7 : 1); once 500 requests wait, each add is followed by one hand-out, and
four keys are held by workers at a time (an add for a held key waits for its ``done``; an add
for a waiting key is deduplicated). The clock is the queue's own fake one, a millisecond a
request, so the order (aging included) is the same on every run and every machine: the digest
of the order the keys came out in is printed beside the time, and a change that keeps the
queue's behaviour keeps it. No metrics (they are reported the same way whatever the order).

The figure is the best of :data:`ROUNDS` rounds, in microseconds a request (the garbage
collector off while a round runs, as :mod:`timeit` does). ``BENCH_SCALE`` does not change it:
a round takes a fraction of a second.
"""

from __future__ import annotations

import gc
import hashlib
import random
import time
from collections import deque
from dataclasses import dataclass

from bench.report import Figure
from crewlet_operator.controller import by_namespace
from crewlet_operator.reconcile import Request
from crewlet_operator.workqueue import (
    HIGH_PRIORITY,
    LOW_PRIORITY,
    NORMAL_PRIORITY,
    FairQueue,
)

REQUESTS = 10_000
KEYS = 1_000
NAMESPACES = 20
PRIORITIES = (LOW_PRIORITY, NORMAL_PRIORITY, HIGH_PRIORITY)
WEIGHTS = (2, 7, 1)
BACKLOG = 500
"""Requests waiting before the workers start taking them."""
IN_FLIGHT = 4
"""Keys held by workers at once (the operator's ``--max-concurrent-reconciles``)."""
STEP = 0.001
"""Seconds the queue's clock moves a request."""
ROUNDS = 7
SEED = 49
TARGET_US = 6.0
TARGET = (
    f"≤ {TARGET_US:.1f} µs a request: 1.1x the 5.5 µs of the first queue it measured "
    "(bench/NOTES.md, 2026-12-06), on that two-core machine"
)


@dataclass(frozen=True)
class Round:
    seconds: float
    handed_out: int
    digest: str


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def workload(seed: int = SEED) -> list[tuple[Request, int]]:
    """The requests in the order they are added, each with its priority."""
    rng = random.Random(seed)
    keys = [Request(f"tenant-{i % NAMESPACES:02d}", f"company-{i:04d}") for i in range(KEYS)]
    requests: list[tuple[Request, int]] = []
    for _ in range(REQUESTS // KEYS):
        order = keys[:]
        rng.shuffle(order)
        requests += zip(order, rng.choices(PRIORITIES, WEIGHTS, k=KEYS), strict=True)
    return requests


async def one_round(requests: list[tuple[Request, int]]) -> Round:
    clock = _Clock()
    out: list[Request] = []  # every hand-out, in order
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        work_queue: FairQueue[Request] = FairQueue("bench", clock=clock, fairness_key=by_namespace)
        held: deque[Request] = deque()
        for request, priority in requests:
            clock.now += STEP
            work_queue.add(request, priority)
            if len(work_queue) > BACKLOG:
                key = await work_queue.get()
                out.append(key)
                held.append(key)
                if len(held) > IN_FLIGHT:
                    work_queue.done(held.popleft())
        while held or len(work_queue):
            while held:
                work_queue.done(held.popleft())
            while len(work_queue):
                clock.now += STEP
                key = await work_queue.get()
                out.append(key)
                work_queue.done(key)
        seconds = time.perf_counter() - started
    finally:
        gc.enable()
    digest = hashlib.blake2b("\n".join(map(str, out)).encode(), digest_size=8).hexdigest()
    return Round(seconds, len(out), digest)


async def queue() -> Figure:
    requests = workload()
    rounds = [await one_round(requests) for _ in range(ROUNDS)]
    best = min(r.seconds for r in rounds)
    us = best / REQUESTS * 1e6
    data = {
        "requests": REQUESTS,
        "keys": KEYS,
        "namespaces": NAMESPACES,
        "handed_out": rounds[0].handed_out,
        "order_digest": rounds[0].digest,
        "us_per_request": round(us, 2),
        "requests_per_s": round(REQUESTS / best),
        "rounds_ms": [round(r.seconds * 1e3, 1) for r in rounds],
    }
    line = (
        f"{us:.1f} µs a request ({REQUESTS / best:,.0f}/s, best of {ROUNDS}); "
        f"{REQUESTS:,} requests over {KEYS:,} keys, {rounds[0].handed_out:,} handed out, "
        f"order {rounds[0].digest}"
    )
    return Figure("queue", line, TARGET, us <= TARGET_US, data)
