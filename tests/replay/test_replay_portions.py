"""``toolguard replay --jobs N`` on a big trace file: each worker reads the portions it replays
(``toolguard/replay/_portions.py``), and the report is still the one a single process gives:
ids given by position and made unique across files, problems about lines and runs, skipped
lines counted over the whole file, a reader stopping midway, a worker dying on a run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _synthetic import write_trace  # benchmarks/, on pytest's pythonpath

from tests.replay_support import replay
from toolguard.replay import UniqueIds, _portions, _trace, open_file
from toolguard.replay._portions import Portion, portions
from toolguard.replay._records import Outcome
from toolguard.replay._runner import replay_stream

SMALL = 400  # bytes per portion: the files below cut into dozens


def _line(value: dict[str, Any]) -> str:
    return json.dumps(value) + "\n"


def _tricky(path: Path) -> Path:
    """A trace file with every kind of line whose reading depends on what came before."""
    lines = [_line({"tool": "read_file", "args": {"path": "before any header"}, "result": "a"})]
    for n in range(40):
        header: dict[str, Any] = {"source": "no id of its own"}  # named by position
        if n % 5 == 1:
            header = {"run": "twice"}  # the same id again and again: made unique
        elif n % 7 == 2:
            header = {"run": f"r{n}", "tags": ["tool"]}  # "tool" in a header: no cut here
        elif n % 11 == 3:  # invalid effects: a problem naming the run
            header = {"run": "twice", "effects": {"bash": {"effect": "explosive"}}}
        lines.append(_line(header))
        for i in range(n % 4 + 2):
            lines.append(_line({"tool": "bash", "args": {"command": f"ls {i % 2}"},
                                "result": "x" * 60, "elapsed_s": i}))
        if n % 6 == 0:
            lines.append("{not json\n")  # counted over the whole file, noted at the first
        if n % 9 == 0:
            lines.append(_line({"messages": [  # a whole chat run in the middle of a run
                {"role": "user", "content": "hi"},
                {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                 "function": {"name": "grep", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c", "content": "none"}]}))
        if n % 8 == 0:
            lines.append(_line({"usage": {"input_tokens": 10, "output_tokens": 2}}))
            lines.append(_line({"args": {"path": "x"}}))  # a call that lost its tool
            lines.append("[1, 2]\n\n")
            lines.append(_line({"tool": "bash", "args": {"n": 123456789012345678901234}}))
    path.write_text("".join(lines), encoding="utf-8")
    return path


def _both(monkeypatch: pytest.MonkeyPatch, *args: str | Path) -> list[Any]:
    monkeypatch.setattr(_portions, "PORTION_BYTES", SMALL)
    results = [replay(*args, "--format", output, "--jobs", jobs)
               for jobs in ("1", "2") for output in ("json", "table", "jsonl")]
    return [(r.exit_code, r.stdout, r.output) for r in results]


def test_a_tricky_file_read_in_portions_gives_the_report_of_one_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_portions, "PORTION_BYTES", SMALL)
    first = _tricky(tmp_path / "a.jsonl")
    second = tmp_path / "b.jsonl"  # the same run ids again, in another file
    second.write_text(first.read_text(encoding="utf-8"), encoding="utf-8")
    assert len(list(portions(open_file(first), False, UniqueIds()))) > 10
    one_json, one_table, one_lines, two_json, two_table, two_lines = _both(
        monkeypatch, first, second, "-v")
    assert two_json == one_json
    assert two_table == one_table
    assert two_lines == one_lines
    assert {json.loads(line)["run"] for line in one_lines[1].splitlines()} <= {
        run["id"] for run in json.loads(one_json[1])["runs"]}
    document = json.loads(one_json[1])
    ids = [run["id"] for run in document["runs"]]
    assert {"a", "a#2", "twice", "twice#3", "r2", "r2#2", "b", "b#2"} <= set(ids)
    assert len(ids) == len(set(ids))
    assert one_json[0] == 2  # bad lines
    assert "more line(s) like it" in one_json[2]
    assert "run twice#" in one_json[2]  # invalid effects, the run named as made unique


def test_a_reader_that_stops_midway_drops_the_portions_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _tricky(tmp_path / "a.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    midway = next(n for n in range(len(lines) // 2, len(lines)) if '"tool": "bash"' in lines[n])
    steps = _trace._trace_steps

    def breaking(item: Any, line: int) -> Any:
        if line == midway + 1:
            raise RuntimeError("a reader bug")
        return steps(item, line)

    monkeypatch.setattr(_trace, "_trace_steps", breaking)
    one, _, _, two, _, _ = _both(monkeypatch, path)
    assert two == one
    assert "cannot be read as trace: RuntimeError: a reader bug" in one[2]
    assert 0 < json.loads(one[1])["totals"]["runs"] < 30


def _outcomes(path: Path, jobs: int) -> list[Outcome]:
    items = portions(open_file(path), False, UniqueIds())
    return [o for o in replay_stream(items, jobs=jobs) if not isinstance(o, Portion)]


def test_a_run_that_kills_its_worker_is_that_runs_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        kill_worker: Callable[[str], None]) -> None:
    path = write_trace(tmp_path / "runs.jsonl", 3000, calls_per_run=30)
    monkeypatch.setattr(_portions, "PORTION_BYTES", 20_000)
    expected = _outcomes(path, jobs=1)
    kill_worker("run-41")
    got = _outcomes(path, jobs=2)
    assert [r.id for r, _ in got if r] == [r.id for r, _ in expected if r] != []
    errors = {r.id: r.error for r, _ in got if r is not None and r.error is not None}
    assert errors == {"run-41": "the worker process replaying it died"}
    for (mine, _), (theirs, _) in zip(got, expected, strict=True):
        if mine is not None and mine.error is None:
            assert mine == theirs
