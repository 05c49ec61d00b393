"""``benchmarks/cluster.py --smoke`` still runs (one node against a 3-master cluster, every
code path, tiny durations). No timing is asserted: the numbers come from a full run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.redis_servers import require_redis_server

pytestmark = pytest.mark.redis


def test_cluster_benchmark_smoke_run(tmp_path: Path) -> None:
    require_redis_server()
    out = tmp_path / "cluster.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "cluster.py"), "--smoke", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["meta"]["smoke"] is True
    assert {(r["deployment"], r["workers"]) for r in report["throughput"]} == {
        (d, w) for d in ("node", "cluster") for w in (1, 2)}
    assert all(r["calls_per_s"] > 0 for r in report["throughput"])
    assert report["target"]["status"] in ("PASS", "MISS")
    assert out.with_suffix(".md").read_text(encoding="utf-8").startswith("| workers |")
