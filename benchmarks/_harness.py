"""Interleaved timing: every variant runs one short batch per round, in a shuffled order.

A noisy machine (two cores, other jobs running tests) moves absolute times by tens of percent
from one second to the next. Ratios survive that only when both sides are measured close in
time, so the harness never runs one variant to completion before the next: each round runs
one batch of every variant (shuffled, so no variant always follows the same neighbour), a
batch lasts a few milliseconds, and a ratio is computed within each round and then reduced
to its median over the rounds.
"""

from __future__ import annotations

import gc
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Variant",
    "calibrate",
    "machine_info",
    "median",
    "quartiles",
    "run_rounds",
]

Runner = Callable[[int], int]
"""Runs ``n`` iterations of one variant and returns the elapsed time in nanoseconds."""


@dataclass(slots=True)
class Variant:
    """One measured thing.

    Attributes:
        name: unique, ``/``-separated (``sync/small/guard/allow/rs``).
        tags: what it is (suite, mode, size, kind, path, schema, store), for grouping and
            for the JSON report.
        run: the runner (see :data:`Runner`).
        batch: iterations per batch, set by :func:`calibrate`.
        samples_us: one per round: the batch's time per iteration, in microseconds.
        payload_bytes: bytes processed per iteration (for throughput), or 0.
    """

    name: str
    tags: dict[str, str]
    run: Runner
    batch: int = 0
    samples_us: list[float] = field(default_factory=list)
    payload_bytes: int = 0


def calibrate(variants: Iterable[Variant], batch_s: float, max_batch: int = 1_000_000) -> None:
    """Set each variant's batch size so that one batch takes about ``batch_s`` seconds."""
    for v in variants:
        v.run(1)  # warm-up: first-call caches, lazy imports
        n = 1
        while True:
            elapsed_s = v.run(n) / 1e9
            if elapsed_s >= batch_s / 4 or n >= max_batch:
                break
            n *= 4
        per_call_s = max(elapsed_s / n, 1e-9)
        v.batch = max(1, min(max_batch, round(batch_s / per_call_s)))


def run_rounds(variants: Sequence[Variant], rounds: int, seed: int = 20_240_601,
               progress: Callable[[int, int], None] | None = None) -> None:
    """Run ``rounds`` rounds; each runs one batch of every variant in a shuffled order."""
    rng = random.Random(seed)
    order = list(variants)
    for r in range(rounds):
        rng.shuffle(order)
        gc.collect()
        for v in order:
            elapsed_ns = v.run(v.batch)
            v.samples_us.append(elapsed_ns / v.batch / 1000.0)
        if progress is not None:
            progress(r + 1, rounds)


def median(values: Sequence[float]) -> float:
    """The median (``nan`` for no values)."""
    return statistics.median(values) if values else float("nan")


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    """The 25th and 75th percentiles (the median twice for fewer than two values)."""
    if len(values) < 2:
        m = median(values)
        return m, m
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on."""
    try:
        load = list(os.getloadavg())
    except OSError:  # pragma: no cover - not on every platform
        load = []
    versions: dict[str, str] = {}
    for module in ("orjson", "xxhash", "cachetools", "jsonschema", "jsonschema_rs", "tenacity",
                   "redis", "pydantic"):
        versions[module] = _version(module)
    return {
        "git": _git(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "loadavg": load,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "versions": versions,
    }


def _version(module: str) -> str:
    from importlib import metadata

    dist = {"jsonschema_rs": "jsonschema-rs"}.get(module, module)
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _git() -> dict[str, Any]:
    """The commit measured, and the package files that differed from it (other engineers
    edit the tree while benchmarks run)."""
    import subprocess

    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                                  timeout=10, check=False)
        except OSError:
            return ""
        return done.stdout

    return {"commit": git("rev-parse", "HEAD").strip(),
            "dirty": git("status", "--short", "--", "toolguard").splitlines()}
