"""``toolguard replay --jobs N``: runs replayed by worker processes give the same report, byte
for byte, as in one process; a run that breaks its worker (an exception in the guard, the
process dying) is that run's error and the other runs still replay; Ctrl-C stops the replay
and prints the report of the runs done so far."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _synthetic import write_trace  # benchmarks/, on pytest's pythonpath

from tests.conftest import ROOT, SHARED
from toolguard.replay import _parallel, open_file, replay_stream
from toolguard.replay._report import to_json_text
from toolguard.replay._runner import ReplayReport

CLI = [sys.executable, "-m", "toolguard.cli", "replay"]


@pytest.mark.usefixtures("shared")
@pytest.mark.parametrize("output", ["json", "jsonl", "table"])
def test_the_command_prints_the_same_report_for_one_job_and_two(output: str) -> None:
    data = SHARED / "data" / "swe-trajectories"
    policy = ROOT / "examples" / "policies" / "coding-agent.toml"
    outputs = [subprocess.run([*CLI, str(data), "--policy", str(policy), "--format", output,
                               "--verbose", "--jobs", jobs],
                              capture_output=True, check=False, timeout=600)
               for jobs in ("1", "2")]
    assert [o.returncode for o in outputs] == [0, 0], outputs[1].stderr[-2000:]
    assert outputs[0].stdout == outputs[1].stdout
    assert outputs[0].stderr == outputs[1].stderr
    if output == "json":
        assert json.loads(outputs[1].stdout)["totals"]["calls"] > 1000


def _report(path: Path, jobs: int) -> ReplayReport:
    report = ReplayReport()
    for result, problem in replay_stream(open_file(path).runs, jobs=jobs):
        assert result is not None
        report.runs.append(result)
        if problem is not None:
            report.problems.append(problem)
    return report


def test_a_run_that_breaks_its_worker_is_that_runs_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        kill_worker: Callable[[str], None]) -> None:
    """``run-3`` raises inside the guard, ``run-7`` kills the worker process replaying it
    (as a crash in native code would): each is its own run's error, every other run's report
    is the one a replay in one process gives."""
    path = write_trace(tmp_path / "runs.jsonl", 2000, calls_per_run=100)
    expected = _report(path, jobs=1)
    kill_worker("run-7")

    def raising(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug in the guard")

    monkeypatch.setattr(_parallel, "BATCH_CALLS", 300)
    task_call = "toolguard.engine._task.TaskBase._replay_call"
    with monkeypatch.context() as patch:
        def only_run_3(self: Any, *args: Any, **kwargs: Any) -> Any:
            if self.task_id.endswith(":run-3"):
                return raising()
            return original(self, *args, **kwargs)

        from toolguard.engine._task import TaskBase
        original = TaskBase._replay_call
        patch.setattr(task_call, only_run_3)
        got = _report(path, jobs=2)
    assert [r.id for r in got.runs] == [r.id for r in expected.runs]
    errors = {r.id: r.error for r in got.runs if r.error is not None}
    assert errors == {"run-3": "RuntimeError: a bug in the guard",
                      "run-7": "the worker process replaying it died"}
    assert [str(p) for p in got.problems] == [
        f"{path}:{line}: run {run}: stopped after 0 call(s) by a guard error: {error}"
        for line, run, error in ((304, "run-3", errors["run-3"]),
                                 (708, "run-7", errors["run-7"]))]
    for mine, theirs in zip(got.runs, expected.runs, strict=True):
        if mine.error is None:
            assert mine == theirs


def test_ctrl_c_stops_the_replay_and_prints_the_runs_done(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "runs.jsonl", 50_000, calls_per_run=100)
    with subprocess.Popen([*CLI, str(path), "--format", "json", "--jobs", "2"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        first = os.read(proc.stdout.fileno(), 64)  # the first run is out (unbuffered)
        time.sleep(0.5)  # the report fills the pipe: Ctrl-C interrupts a blocked write
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err.decode()[-2000:]
    document = json.loads(first + out)
    done = document["totals"]["runs"]
    assert 0 < done < 500
    assert [r["id"] for r in document["runs"]] == [f"run-{i}" for i in range(done)]
    assert b"interrupted: the report covers the" in err
    assert b"Traceback" not in err


def test_the_document_of_a_streamed_replay_is_the_document_of_the_report(
        tmp_path: Path) -> None:
    path = write_trace(tmp_path / "runs.jsonl", 1000, calls_per_run=50)
    done = subprocess.run([*CLI, str(path), "--format", "json", "--jobs", "1"],
                          capture_output=True, text=True, check=True, timeout=300)
    assert done.stdout == to_json_text(_report(path, jobs=1)) + "\n"


@pytest.mark.parametrize("where", ["arguments", "metadata"])
def test_a_run_too_deep_to_pickle_replays_as_with_one_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """Arguments or header metadata nested 900 levels deep are read (the reader falls back
    to the standard library past orjson's 255 levels) but cannot be pickled to a worker or
    back: such a run replays in the reading process, with the outcome ``--jobs 1`` gives,
    not an error."""
    deep = "[" * 900 + '"x"' + "]" * 900
    lines = []
    for n in range(3):
        if where == "metadata":
            lines.append(f'{{"run": "r{n}", "deep": {deep}}}')
            args = '{"command": "ls"}'
        else:
            lines.append(json.dumps({"run": f"r{n}"}))
            args = f'{{"command": "ls", "deep": {deep}}}'
        lines.append(f'{{"tool": "bash", "args": {args}, "result": "ok"}}')
    path = tmp_path / "deep.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setattr(_parallel, "BATCH_CALLS", 1)  # every run goes to a worker

    def outcomes(jobs: int) -> list[tuple[str, str | None, list[str]]]:
        got = []
        for result, problem in replay_stream(open_file(path).runs, jobs=jobs):
            assert result is not None and problem is None
            got.append((result.id, result.error, [str(s.decision) for s in result.steps]))
        return got

    assert outcomes(2) == outcomes(1)
    assert [error for _, error, _ in outcomes(1)] == [None, None, None]
