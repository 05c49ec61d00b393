"""``toolguard replay`` at scale: calls/s, CPU per call and peak RSS of replaying a large
synthetic set (``_synthetic.py``: a trace JSONL file and a chat-format JSON list of runs), as
ratios to an orjson parse of the same bytes measured in the same run, and the throughput of
``--jobs 2`` against ``--jobs 1``.

Usage::

    python benchmarks/replay_scale.py                       # 100k and 1M calls
    python benchmarks/replay_scale.py --calls 20000 100000  # the sizes to run
    python benchmarks/replay_scale.py --smoke               # tiny: every path runs (CI)
    python benchmarks/replay_scale.py --json out.json

Each replay is the real command (``python -m toolguard.cli replay FILE --format json``, the
report to /dev/null) in a child process; its CPU (user + system, the workers' included) and
peak RSS come from ``wait4``. The floor is ``orjson.loads`` of the same file in a child
process of its own (per line for JSONL, the whole document for the chat list). Targets: peak
RSS for 1M calls at most 150 MB and within 1.2x of 100k; CPU per call at most 12x the parse;
``--jobs 2`` at least 1.7x the throughput of ``--jobs 1`` (meaningful on an otherwise idle
2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _synthetic import write_chat, write_trace

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"rss_mb": 150.0, "rss_growth": 1.2, "cpu_vs_parse": 12.0, "jobs2_speedup": 1.7}


_PARSE: Final = """
import sys, time, orjson
data = open(sys.argv[1], "rb").read()
start = time.process_time()
if sys.argv[1].endswith(".jsonl"):
    for line in data.splitlines():
        orjson.loads(line)
else:
    orjson.loads(data)
print(time.process_time() - start)
"""


def parse_cpu_s(path: Path) -> float:
    """CPU seconds orjson takes to parse ``path`` (per line for ``.jsonl``), in a child
    process: a parse in this one would leave its memory here, and a replay started after
    it inherits this process's peak RSS through fork (Linux keeps ``ru_maxrss`` across
    ``exec``), which would then read as the replay's."""
    out = subprocess.run([sys.executable, "-c", _PARSE, str(path)], check=True,
                         capture_output=True, text=True)
    return float(out.stdout)


def replay(path: Path, jobs: int) -> dict[str, float]:
    """Wall seconds, CPU seconds and peak RSS (MB) of the replay command on ``path``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    start = time.perf_counter()
    with Path(os.devnull).open("wb") as null:
        proc = subprocess.Popen([sys.executable, "-m", "toolguard.cli", "replay", str(path),
                                 "--format", "json", "--jobs", str(jobs), "--quiet"],
                                stdout=null, stderr=subprocess.PIPE, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"replay of {path} exited {proc.returncode}: {err[-2000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "rss_mb": usage.ru_maxrss / 1024}


def measure(calls: int, folder: Path, jobs2: bool) -> list[dict[str, Any]]:
    """Replay ``calls`` calls of each format; the CPU and wall time of a replay of one call
    (the interpreter's start and the imports) are taken off."""
    rows = []
    for kind, write in (("trace", write_trace), ("chat", write_chat)):
        suffix = "jsonl" if kind == "trace" else "json"
        base = replay(write(folder / f"{kind}-1.{suffix}", 1, calls_per_run=1), 1)
        path = write(folder / f"{kind}-{calls}.{suffix}", calls)
        parse = parse_cpu_s(path)
        one = replay(path, 1)
        cpu = max(one["cpu_s"] - base["cpu_s"], 1e-9)
        row: dict[str, Any] = {
            "format": kind, "calls": calls, "mb": round(path.stat().st_size / 1e6, 1),
            "calls_per_s": round(calls / max(one["wall_s"] - base["wall_s"], 1e-9)),
            "cpu_us_per_call": round(1e6 * cpu / calls, 1),
            "parse_us_per_call": round(1e6 * parse / calls, 2),
            "cpu_vs_parse": round(cpu / parse, 1),
            "rss_mb": round(one["rss_mb"], 1),
        }
        if jobs2 and kind == "trace":
            two = replay(path, 2)
            row["jobs2_speedup"] = round((one["wall_s"] - base["wall_s"])
                                         / max(two["wall_s"] - base["wall_s"], 1e-9), 2)
            row["jobs2_rss_mb"] = round(two["rss_mb"], 1)
            # the CPU the workers and the reader spend over one process's: the cost of
            # parallelism itself, which the wall-clock speedup hides on a busy machine
            row["jobs2_cpu_vs_1"] = round((two["cpu_s"] - base["cpu_s"]) / cpu, 2)
        rows.append(row)
        path.unlink()
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| format | calls | MB | calls/s (1 job) | CPU µs/call | orjson µs/call | "
             "CPU vs parse | peak RSS MB | 2 jobs vs 1 |", "|" + "---|" * 9]
    for r in rows:
        lines.append(f"| {r['format']} | {r['calls']:,} | {r['mb']} | {r['calls_per_s']:,} | "
                     f"{r['cpu_us_per_call']} | {r['parse_us_per_call']} | "
                     f"{r['cpu_vs_parse']}x | {r['rss_mb']} | "
                     f"{r.get('jobs2_speedup', '')}{'x' if 'jobs2_speedup' in r else ''} |")
    return "\n".join(lines)


def targets(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Which targets hold for the sizes that ran (the RSS growth: the largest size against
    the smallest)."""
    out: dict[str, Any] = {}
    for kind in ("trace", "chat"):
        mine = sorted((r for r in rows if r["format"] == kind), key=lambda r: r["calls"])
        if not mine:
            continue
        big, small = mine[-1], mine[0]
        out[kind] = {
            "rss_mb": big["rss_mb"], "rss_ok": big["rss_mb"] <= TARGETS["rss_mb"],
            "rss_growth": round(big["rss_mb"] / small["rss_mb"], 2),
            "rss_growth_ok": big["rss_mb"] / small["rss_mb"] <= TARGETS["rss_growth"],
            "cpu_vs_parse": big["cpu_vs_parse"],
            "cpu_ok": big["cpu_vs_parse"] <= TARGETS["cpu_vs_parse"],
        }
        if "jobs2_speedup" in big:
            out[kind]["jobs2_speedup"] = big["jobs2_speedup"]
            out[kind]["jobs2_ok"] = big["jobs2_speedup"] >= TARGETS["jobs2_speedup"]
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--smoke", action="store_true", help="2,000 calls: every path runs")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    sizes = [2000] if args.smoke else sorted(args.calls)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="replay-scale-") as folder:
        for calls in sizes:
            rows += measure(calls, Path(folder), jobs2=True)
    result = {"smoke": args.smoke, "sizes": sizes, "rows": rows, "targets": targets(rows),
              "cpus": os.cpu_count(), "load": os.getloadavg()}
    print(markdown(rows))
    print(json.dumps(result["targets"], indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
