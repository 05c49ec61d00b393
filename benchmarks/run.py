"""Benchmarks of the guard's per-call cost, measured interleaved so ratios hold on a noisy
machine. See ``benchmarks/README.md`` for what each number means.

Usage::

    python benchmarks/run.py                    # full run (a few minutes), writes
                                                # benchmarks/results/latest.json and .md
    python benchmarks/run.py --smoke --json /tmp/smoke.json   # every code path, seconds
    python benchmarks/run.py --no-redis         # skip the Redis section
    python benchmarks/run.py --profile          # cProfile of the allow path, then exit

Exit status: 0 on success (MISSed targets are reported, not failed); 2 when Redis is
unreachable while ``CI=true`` (CI must not silently skip it).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from _args import args_for
from _cases import block_variants, guard_variant, main_variants
from _growth import growth, memory
from _harness import calibrate, machine_info, run_rounds
from _imports import imports
from _replay_bench import replay_markdown, replay_section
from _report import evaluate_targets, markdown, summarise

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "latest.json"


@dataclass(frozen=True, slots=True)
class Settings:
    """How much to measure. ``batch_s``: seconds per batch; ``rounds``: interleaved rounds."""

    rounds: int
    batch_s: float
    checkpoints: tuple[int, ...]
    growth_rounds: int
    growth_window: int
    memory_calls: int
    memory_marks: tuple[int, ...]
    redis_rounds: int
    redis_batch_s: float
    trip_calls: int
    workers: tuple[int, ...]
    throughput_s: float
    throughput_reps: int
    import_rounds: int


FULL = Settings(rounds=21, batch_s=0.004, checkpoints=(10, 1_000, 100_000), growth_rounds=15,
                growth_window=20, memory_calls=100_000,
                memory_marks=(1_000, 10_000, 50_000, 100_000), redis_rounds=15,
                redis_batch_s=0.015, trip_calls=50, workers=(1, 4, 16), throughput_s=0.8,
                throughput_reps=3, import_rounds=15)
SMOKE = Settings(rounds=2, batch_s=0.0002, checkpoints=(10, 100, 1_000), growth_rounds=2,
                 growth_window=4, memory_calls=1_200, memory_marks=(600, 1_200),
                 redis_rounds=2, redis_batch_s=0.001, trip_calls=3, workers=(1, 4),
                 throughput_s=0.05, throughput_reps=1, import_rounds=1)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _progress(label: str) -> Any:
    start = time.perf_counter()

    def report(done: int, total: int) -> None:
        if done == total or done % 5 == 0:
            _say(f"  {label}: round {done}/{total} ({time.perf_counter() - start:.0f} s)")
    return report


def _redis_section(settings: Settings, loop: asyncio.AbstractEventLoop) -> dict[str, Any]:
    try:
        import _redis_bench as rb
    except ImportError as exc:
        return {"skipped": f"redis-py is not installed ({exc})"}
    url = rb.redis_url()
    reason = rb.unreachable(url)
    if reason is not None:
        return {"skipped": reason}
    prefix = f"tgbench:{uuid.uuid4().hex}"
    try:
        _say(f"redis: per-call latency ({url}, key prefix {prefix})")
        variants = rb.variants(url, prefix, loop)
        calibrate(variants, settings.redis_batch_s)
        run_rounds(variants, settings.redis_rounds, progress=_progress("redis"))
        _say("redis: round trips")
        trips = rb.round_trips(url, prefix, settings.trip_calls)
        _say("redis: throughput")
        tp = rb.throughput(url, prefix, settings.workers, settings.throughput_s,
                           settings.throughput_reps)
        tp += rb.throughput(None, prefix, settings.workers, settings.throughput_s,
                            settings.throughput_reps)
    finally:
        deleted = rb.cleanup(url, prefix)
    return {"url": url, "key_prefix": prefix, "keys_deleted": deleted,
            "rounds": settings.redis_rounds, "per_call": summarise(variants),
            "round_trips": trips, "throughput": tp}


def profile(calls: int = 100_000) -> None:
    """Print the top functions of a cProfile of the sync allow path (small and medium)."""
    loop = asyncio.new_event_loop()
    for size in ("small", "medium"):
        for schema in ("rs", "off"):
            variant = guard_variant(size, "allow", schema, "sync", loop)
            profiler = cProfile.Profile()
            profiler.enable()
            variant.run(calls)
            profiler.disable()
            print(f"\n=== {size} arguments, allow, schema {schema}: {calls} calls "
                  f"({len(orjson.dumps(args_for(size)))} B) ===")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(18)
    loop.close()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON,
                        help=f"where to write the JSON report (default {DEFAULT_JSON}); "
                             "the Markdown summary goes beside it (.md)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny iteration counts: checks every code path still runs")
    parser.add_argument("--no-redis", action="store_true", help="skip the Redis section")
    parser.add_argument("--profile", action="store_true",
                        help="print a cProfile of the allow path and exit")
    opts = parser.parse_args(argv)
    if opts.profile:
        profile(2_000 if opts.smoke else 100_000)
        return 0
    settings = SMOKE if opts.smoke else FULL
    if os.environ.get("CI") == "true" and not opts.no_redis:
        import _redis_bench

        reason = _redis_bench.unreachable(_redis_bench.redis_url())
        if reason is not None:  # fail before the long part, not after it
            _say(f"{reason}; CI=true requires Redis (set TOOLGUARD_BENCH_REDIS_URL)")
            return 2
    started = time.perf_counter()
    loop = asyncio.new_event_loop()
    info = machine_info()

    _say("per-call variants: building and calibrating")
    variants = main_variants(loop) + block_variants()
    calibrate(variants, settings.batch_s)
    _say(f"per-call variants: {len(variants)} variants x {settings.rounds} rounds")
    run_rounds(variants, settings.rounds, progress=_progress("per-call"))
    rows = summarise(variants)

    _say("growth: per-call time at " + ", ".join(f"#{c:,}" for c in settings.checkpoints))
    grown = growth(settings.checkpoints, settings.growth_rounds, settings.growth_window)
    _say(f"memory: tracemalloc after {settings.memory_calls:,} calls")
    held = memory(settings.memory_calls, settings.memory_marks)

    _say(f"start-up: {settings.import_rounds} interleaved rounds of fresh interpreters")
    started_up = imports(settings.import_rounds)

    if opts.no_redis:
        redis: dict[str, Any] = {"skipped": "--no-redis"}
    else:
        redis = _redis_section(settings, loop)
    loop.close()
    if "skipped" in redis:
        _say(f"redis: skipped: {redis['skipped']}")

    _say("replay: recorded calls read and replayed per second")
    replayed = replay_section(opts.smoke)

    targets = evaluate_targets(rows, redis.get("round_trips"), grown, started_up)
    info["loadavg_end"] = list(os.getloadavg())
    report: dict[str, Any] = {
        "meta": {**info, "smoke": opts.smoke, "rounds": settings.rounds,
                 "batch_ms": settings.batch_s * 1000,
                 "command": "python benchmarks/run.py" + (" --smoke" if opts.smoke else "")
                 + (" --no-redis" if opts.no_redis else ""),
                 "duration_s": round(time.perf_counter() - started, 1)},
        "targets": targets,
        "per_call": rows,
        "growth": grown,
        "memory": held,
        "imports": started_up,
        "redis": redis,
        "replay": replayed,
    }
    opts.json.parent.mkdir(parents=True, exist_ok=True)
    opts.json.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    summary = markdown(report) + "\n" + replay_markdown(replayed)
    opts.json.with_suffix(".md").write_text(summary, encoding="utf-8")
    print(summary)
    passed = sum(t["status"] == "PASS" for t in targets)
    _say(f"wrote {opts.json} ({passed}/{len(targets)} targets PASS, "
         f"{report['meta']['duration_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
