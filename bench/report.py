"""Figures as JSON and as one readable line each, printed and kept in bench/results/."""

from __future__ import annotations

import datetime
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
MIB = 1024 * 1024


@dataclass
class Figure:
    """One figure: what was measured, its target, and whether the target was met.

    ``met`` is None when the target could not be judged (the figure failed).
    """

    name: str
    line: str
    target: str
    met: bool | None
    data: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"figure": self.name, "target": self.target, "met": self.met, **self.data}

    def readable(self) -> str:
        verdict = {True: "met", False: "MISSED", None: "not judged"}[self.met]
        return f"{self.name:<12} {self.line}  [target {self.target}: {verdict}]"


def failed(name: str, target: str, error: BaseException) -> Figure:
    return Figure(
        name,
        f"FAILED: {type(error).__name__}: {error}",
        target,
        None,
        {"error": f"{type(error).__name__}: {error}"},
    )


class Results:
    """Prints each figure as it comes and rewrites ``bench/results/<timestamp>.json``."""

    def __init__(self, scale: str, run_dir: Path, workloads: bool) -> None:
        self.started = time.monotonic()
        self.header: dict[str, Any] = {
            "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "scale": scale,
            "workloads": workloads,
            "cpus": os.cpu_count(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
            "logs": str(run_dir),
        }
        self.path = run_dir.with_suffix(".json")
        self.figures: list[Figure] = []

    def add(self, figure: Figure) -> None:
        self.figures.append(figure)
        print(json.dumps(figure.as_json(), sort_keys=True), flush=True)
        print(figure.readable(), flush=True)
        self.write()

    def write(self) -> None:
        document = {
            **self.header,
            "duration_s": round(time.monotonic() - self.started, 1),
            "figures": [f.as_json() for f in self.figures],
        }
        self.path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")

    def summary(self) -> str:
        lines = [f.readable() for f in self.figures]
        lines.append(f"results: {self.path} ({time.monotonic() - self.started:.0f} s)")
        return "\n".join(lines)
