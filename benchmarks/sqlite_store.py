"""The SQLite store's cost per call beside the memory and Redis stores, in one run.

Two measures of the same calls (``_cases.py``'s small arguments, the default guard):

* **Wall clock**: ``allow`` (a read-only call: one ``begin``) and ``executed`` (a mutating
  call with new arguments: ``begin`` and ``finish``, one transaction each) on a
  :class:`MemoryStore`, a :class:`SQLiteStore` on a file in a temporary directory, and a
  :class:`RedisStore` (``TOOLGUARD_BENCH_REDIS_URL``, else ``TOOLGUARD_TEST_REDIS_URL``,
  else ``redis://127.0.0.1:6379/15``; keys under a fresh prefix, deleted at the end),
  interleaved in shuffled rounds (``_harness.run_rounds``); each ratio is taken within a
  round, then its median.
* **Instructions** under callgrind (``callgrind.py``'s method: two fresh interpreters making
  ``n`` and ``3n`` calls, the difference per call): everything the calling process executes,
  SQLite's C library included; not the Redis server's work nor the kernel's (so Redis's
  figure is the client's share of a round trip, and wall clock is the fair comparison).

Run::

    python benchmarks/sqlite_store.py [--rounds 15] [--json benchmarks/results/sqlite_store.json]
    python benchmarks/sqlite_store.py --no-callgrind     # wall clock only
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _cases import guard_variant, make_task, prime  # noqa: E402
from _harness import Variant, calibrate, median, run_rounds  # noqa: E402

from toolguard.stores import Store  # noqa: E402
from toolguard.stores.sqlite import SQLiteStore  # noqa: E402

STORES = ("memory", "sqlite", "redis")
PATHS = ("allow", "executed")


def _store(kind: str, where: Path, prefix: str) -> Store | None:
    """A store of ``kind`` (None: the guard's own memory store)."""
    if kind == "memory":
        return None
    if kind == "sqlite":
        return SQLiteStore(where / "state.db")
    import _redis_bench as rb

    from toolguard.stores.redis import RedisStore

    return RedisStore(url=rb.redis_url(), key_prefix=prefix)


def wall_clock(rounds: int, batch_s: float, where: Path, prefix: str) -> dict[str, Any]:
    """Median µs per call of each (store, path), and the within-round ratios of SQLite to
    memory and to Redis."""
    loop = asyncio.new_event_loop()
    variants: dict[tuple[str, str], Variant] = {}
    for kind in STORES:
        for path in PATHS:
            store = _store(kind, where, prefix)
            variants[kind, path] = guard_variant("small", path, "rs", "sync", loop,
                                                 store=store, suite=kind)
    calibrate(variants.values(), batch_s)
    run_rounds(list(variants.values()), rounds)
    out: dict[str, Any] = {"us_per_call": {f"{k}/{p}": median(v.samples_us)
                                           for (k, p), v in variants.items()}}
    for path in PATHS:
        sqlite = variants["sqlite", path].samples_us
        for other in ("memory", "redis"):
            ratios = [s / o for s, o in zip(sqlite, variants[other, path].samples_us,
                                            strict=True)]
            out[f"sqlite/{other}/{path}"] = median(ratios)
    return out


def _child(kind: str, path: str, n: int, where: str, prefix: str) -> None:
    task, name = make_task("small", path, "rs", store=_store(kind, Path(where), prefix))
    prime(task, name, "small", path, None)
    from _args import args_for
    from _cases import Fresh

    fresh = Fresh("small")
    batch = fresh.take(n + 20) if path == "executed" else [args_for("small")] * (n + 20)
    for args in batch[:20]:
        task.call(name, args)
    for args in batch[20:]:
        task.call(name, args)


def instructions(where: Path, prefix: str, paths: tuple[str, ...] = PATHS, factor: int = 3,
                 jobs: int = 2) -> dict[str, Any]:
    """Instructions per call of each (store, path) under callgrind, and SQLite's ratios
    (``jobs`` interpreters under callgrind at a time)."""
    import callgrind

    def total(job: tuple[str, str, int]) -> int:
        kind, path, n = job
        return callgrind.instructions_of(
            [str(Path(__file__).resolve()), "--child", kind, path, str(n), str(where),
             prefix])

    calls = 200
    runs = [(kind, path, n) for kind in STORES for path in paths
            for n in (calls, calls * factor)]
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        totals = dict(zip(runs, pool.map(total, runs), strict=True))
    per_call = {f"{kind}/{path}": (totals[kind, path, calls * factor]
                                   - totals[kind, path, calls]) / ((factor - 1) * calls)
                for kind in STORES for path in paths}
    out: dict[str, Any] = {"instructions_per_call": per_call}
    for path in paths:
        for other in ("memory", "redis"):
            out[f"sqlite/{other}/{path}"] = per_call[f"sqlite/{path}"] / per_call[f"{other}/{path}"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch-s", type=float, default=0.02)
    parser.add_argument("--no-callgrind", action="store_true")
    parser.add_argument("--callgrind-paths", default=",".join(PATHS),
                        help="paths measured under callgrind (comma-separated)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.child:
        kind, path, n, where, prefix = ns.child
        _child(kind, path, int(n), where, prefix)
        return 0
    import _redis_bench as rb

    reason = rb.unreachable(rb.redis_url())
    if reason:
        print(f"needs Redis: {reason}", file=sys.stderr)
        return 2
    prefix = f"tgbench:{uuid.uuid4().hex[:12]}"
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            report["wall_clock"] = wall_clock(ns.rounds, ns.batch_s, Path(tmp), prefix)
            if not ns.no_callgrind:
                report["callgrind"] = instructions(
                    Path(tmp), prefix, tuple(ns.callgrind_paths.split(",")))
        finally:
            rb.cleanup(rb.redis_url(), prefix)
    for section, values in report.items():
        for key, value in values.items():
            if isinstance(value, dict):
                for name, figure in value.items():
                    print(f"{section:10} {key:22} {name:18} {figure:>12,.2f}")
            else:
                print(f"{section:10} ratio {key:34} {value:>8.2f}x")
    if ns.json:
        ns.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
