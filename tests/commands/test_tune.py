"""``toolguard tune``: thresholds fitted to labelled runs stop no successful run, say how often
a new one would be stopped, and what they stop in the failed runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import toolguard as tg
from tests.conftest import ROOT, SHARED
from toolguard.commands._tune import Observed, fit, leave_one_out, wilson_upper
from toolguard.replay._labelled import LabelledRun, judge, read_index

REALRUNS = SHARED / "data" / "realruns"


def _trace(path: Path, calls: list[tuple[str, dict[str, Any], str]]) -> Path:
    lines: list[dict[str, Any]] = [{"case": path.stem,
                                    "effects": {"read": {"effect": "readonly"}}}]
    lines += [{"tool": t, "args": a, "result": r, "is_error": False} for t, a, r in calls]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _runs(tmp_path: Path) -> Path:
    """Six successful runs that read one file at most twice in a row, and a failed run that
    reads it six times; an index of them."""
    entries = []
    for i in range(6):
        write: dict[str, Any] = {"p": "a", "v": i}
        calls: list[tuple[str, dict[str, Any], str]] = [
            ("read", {"p": "a"}, "x"), ("read", {"p": "a"}, "x"), ("write", write, f"ok {i}"),
        ][: 2 + i % 2]
        _trace(tmp_path / f"ok{i}.jsonl", calls)
        entries.append({"file": f"ok{i}.jsonl", "run": f"ok{i}", "label": "success"})
    _trace(tmp_path / "loop.jsonl", [("read", {"p": "a"}, "x")] * 6)
    entries.append({"file": "loop.jsonl", "run": "loop", "label": "failure"})
    index = tmp_path / "index.jsonl"
    index.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return index


def tune_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "toolguard.cli", "tune", *map(str, args)],
                          capture_output=True, text=True, check=False)


def test_tune_fits_the_tightest_ladder_and_stops_the_loop(tmp_path: Path) -> None:
    out = tmp_path / "tuned.toml"
    done = tune_cli(_runs(tmp_path), "--out", out, "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["successful"], report["successful_stopped"]) == (6, 0)
    assert (report["failed_stopped"], report["calls_saved"]) == (1, 3)
    assert report["stopped"][0]["run"] == "loop"
    policy = tg.load_policy(out, env={})
    assert (policy.ladder.readonly.block_at, policy.ladder.readonly.halt_at) == (3, 4)
    assert policy.budget.max_tool_calls == 3
    check = subprocess.run([sys.executable, "-m", "toolguard.cli", "check", str(out)],
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout


def test_tune_extends_the_base_policy_and_takes_globs(tmp_path: Path) -> None:
    _runs(tmp_path)
    base = tmp_path / "base.toml"
    base.write_text('[tools.read]\neffect = "readonly"\n')
    out = tmp_path / "sub" / "tuned.toml"
    out.parent.mkdir()
    done = tune_cli("--success", tmp_path / "ok*.jsonl", "--failure", tmp_path / "loop.jsonl",
                    "--policy", base, "--out", out)
    assert done.returncode == 0, done.stderr
    assert 'extends = "../base.toml"' in out.read_text()
    assert "stops 1 failed run(s)" in done.stdout
    assert tg.load_policy(out, env={}).tools["read"].effect is tg.Effect.READONLY


@pytest.mark.parametrize(("args", "message"), [
    ((), "give --out FILE"),
    (("--out", "x.toml"), "give an index of labelled runs, or --success"),
    (("--out", "x.toml", "--success", "nothing-here-*.jsonl"), "matches no file"),
    (("--out", "x.toml", "--format", "xml", "--success", "a"), "--format must be"),
])
def test_tune_bad_input_exits_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    done = tune_cli(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def _observed(label: str, calls: int, readonly: int, stagnation: int = 0) -> Observed:
    return Observed(LabelledRun(Path("x"), "r", label), calls, {"readonly": readonly},  # type: ignore[arg-type]
                    {"read": readonly}, stagnation)


def test_fit_and_leave_one_out() -> None:
    runs = [_observed("success", 10, 2), _observed("success", 12, 3),
            _observed("success", 8, 2, stagnation=3), _observed("failure", 40, 9)]
    fitted = fit(runs)
    assert fitted.ladders["readonly"] == (3, 4, 5)
    assert (fitted.stagnation_block_at, fitted.max_tool_calls) == (5, 12)
    assert not any(fitted.stops(r) for r in runs if r.success)
    assert fitted.stops(runs[-1])
    # left out, the run with 12 calls (and the one with count 3, the same run) is stopped,
    # and so is the one with the only stagnation run
    assert leave_one_out(runs) == (2, 3)


def test_wilson_upper_bound() -> None:
    assert wilson_upper(0, 86) == pytest.approx(0.0428, abs=1e-3)
    assert wilson_upper(1, 86) == pytest.approx(0.063, abs=1e-3)
    assert wilson_upper(0, 0) == 1.0


def test_tune_on_the_shared_real_runs_stops_no_successful_run(tmp_path: Path) -> None:
    """The coding-agent runs with the shipped coding-agent policy as the base: the fitted
    policy stops none of the 39 successful runs (checked by replaying them)."""
    out = tmp_path / "coding.toml"
    done = tune_cli(REALRUNS / "index.jsonl", "--select", "policy=coding-agent.toml",
                    "--policy", ROOT / "examples" / "policies" / "coding-agent.toml",
                    "--out", out, "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["successful"], report["successful_stopped"]) == (39, 0)
    judged, problems = judge(read_index(REALRUNS / "index.jsonl",
                                        {"policy": "coding-agent.toml"}),
                             lambda _: tg.load_policy(out, env={}))
    assert problems == []
    assert not any(j.harmed for j in judged)
