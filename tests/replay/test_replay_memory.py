"""``toolguard replay`` streams: memory holds the run at hand, not the report, whatever the
number of runs. A generated file of 200,000 calls replays in a process whose address space is
limited (``RLIMIT_AS``) below what holding every run's report takes; a big JSON list of runs
is read one run at a time with the same report as read whole."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _synthetic import write_chat, write_trace  # benchmarks/, on pytest's pythonpath

from toolguard.replay import _chat, open_file, replay_runs
from toolguard.replay._model import Source
from toolguard.replay._report import to_json_text

LIMIT_MB = 200  # holding every run's report of 200k calls takes about 500 MB
_LIMITED = """
import resource, sys
limit = int(sys.argv[1]) << 20
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
sys.argv = ["toolguard", *sys.argv[2:]]
from toolguard.cli import main
main()
"""


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS bounds memory on Linux")
def test_200k_calls_replay_in_bounded_memory(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "runs.jsonl", 200_000, short=True)
    out = tmp_path / "report"
    with out.open("wb") as handle:
        done = subprocess.run([sys.executable, "-c", _LIMITED, str(LIMIT_MB), "replay",
                               str(path), "--format", "json", "--jobs", "2"],
                              stdout=handle, stderr=subprocess.PIPE, check=False,
                              timeout=1200)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    totals = json.loads(out.read_bytes())["totals"]
    assert (totals["runs"], totals["calls"], totals["replayed"]) == (2000, 200_000, 200_000)


def test_a_big_list_of_runs_is_read_run_by_run_with_the_same_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_chat(tmp_path / "runs.json", 3000, calls_per_run=50)
    whole = to_json_text(replay_runs(open_file(path).runs))
    read: list[str] = []
    streamed_runs = _chat._streamed_runs

    def streamed(source: Source) -> object:
        read.append(source.file)
        return streamed_runs(source)

    monkeypatch.setattr(_chat, "STREAM_BYTES", 1000)
    monkeypatch.setattr(_chat, "_streamed_runs", streamed)
    assert to_json_text(replay_runs(open_file(path).runs)) == whole
    assert read == [str(path)]
    assert json.loads(whole)["totals"]["calls"] == 3000


def test_a_big_list_of_runs_broken_midway_replays_the_runs_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_chat(tmp_path / "runs.json", 1000, calls_per_run=100)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] + b"}}}")
    monkeypatch.setattr(_chat, "STREAM_BYTES", 1000)
    opened = open_file(path)
    report = replay_runs(opened.runs)
    assert 0 < len(report.runs) < 10
    [problem] = opened.problems
    assert problem.message.startswith("not valid JSON (chat): ")
    assert problem.message.endswith("the runs before it still replay")
