"""The benchmarks still run: ``benchmarks/run.py --smoke`` takes every code path with tiny
iteration counts. Nothing here asserts a timing (benchmarks are not timed unit tests); the
real numbers come from a full run (``benchmarks/README.md``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

SECTIONS = {"meta", "targets", "per_call", "growth", "memory", "imports", "redis", "replay"}
PATHS = {"allow", "allow_new", "warn", "cached", "block", "executed"}


def test_benchmark_smoke_run_writes_every_section(tmp_path: Path) -> None:
    out = tmp_path / "smoke.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--smoke", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report.keys() >= SECTIONS
    assert report["meta"]["smoke"] is True
    assert out.with_suffix(".md").read_text(encoding="utf-8").startswith("### Targets")

    guard_rows = [r for r in report["per_call"]
                  if r.get("suite") == "memory" and r.get("kind") == "guard"]
    for mode in ("sync", "async"):
        for size in ("small", "medium", "large"):
            paths = {r["path"] for r in guard_rows if r["mode"] == mode and r["size"] == size}
            first = {"first"} if (mode, size) == ("sync", "small") else set()
            assert paths == PATHS | first, (mode, size)
    sketches = {(r["size"], r["sketch"], r["path"]) for r in report["per_call"]
                if r.get("kind") == "sketch"}
    assert sketches == {(size, sketch, path) for size in ("small", "medium", "large")
                        for sketch in ("min", "book", "full")
                        for path in ("allow", "cached", "block")}
    assert all(r["median_us"] and r["median_us"] > 0 for r in report["per_call"])
    assert {r["metric"] for r in report["targets"]} >= {
        "x_sketch_book", "x_sketch_full", "x_floor", "x_warm", "x python -c pass", "#1000 / #10"}
    assert {c["name"] for c in report["imports"]["cases"]} == {"import toolguard",
                                                              "toolguard --help"}
    assert all(r["status"] in ("PASS", "MISS") for r in report["targets"])
    assert {r["size"] for r in report["per_call"] if r.get("kind") == "hash"} >= {
        "small", "medium", "large"}

    for scenario in report["growth"]["scenarios"].values():
        assert set(scenario["per_call_us"]) == {str(c) for c in report["growth"]["checkpoints"]}
    assert report["memory"]["scenarios"]
    assert all(s["points"][-1]["history"] <= s["max_entries"]
               for s in report["memory"]["scenarios"])

    replayed = report["replay"]
    assert all(row["calls_per_s"] > 0 and row["problems"] == 0 for row in replayed["sets"])
    assert replayed["memory"]["streamed_peak_bytes"] > 0

    redis = report["redis"]
    if os.environ.get("CI") == "true":
        assert "skipped" not in redis, redis.get("skipped")
    if "skipped" not in redis:
        trips = {t["path"]: t["commands_per_call"] for t in redis["round_trips"]}
        assert set(trips) == {"allow", "warn", "cached", "block", "executed"}
        assert redis["throughput"]
        assert {r["path"] for r in redis["per_call"] if r.get("kind") == "guard"} == {
            "allow", "warn", "cached", "block", "executed"}


def test_the_replay_scale_benchmark_smoke_run_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "replay_scale.py"),
                           "--smoke", "--json", str(out)], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["smoke"] is True
    assert {r["format"] for r in result["rows"]} == {"trace", "chat"}
    assert result["targets"]["trace"].keys() >= {"rss_ok", "cpu_ok", "jobs2_ok"}
    trace = next(r for r in result["rows"] if r["format"] == "trace")
    assert trace["jobs2_cpu_vs_1"] > 0 and trace["rss_mb"] > 0
