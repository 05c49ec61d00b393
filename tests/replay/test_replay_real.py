"""``toolguard replay`` on real recorded runs, with the shipped example policies: the figures
the README quotes.

* tau-bench airline (200 gpt-4o runs, OpenAI messages) with ``examples/policies/airline.toml``
  and the real tool schemas: which runs the guard would warn, cache, block or halt, and the
  false-positive check on the 84 runs that reached reward 1.0 (nothing but ``allow``).
* 58 real coding-agent runs (``swe-trajectories``, one ``bash`` tool) with
  ``examples/policies/coding-agent.toml``: exactly two runs are blocked or halted, each a
  genuine loop; every other run has no block and no halt.
* The same two policies still satisfy every ``must`` property of ``../shared/cases``.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

import toolguard as tg
from tests.conftest import ROOT, SHARED
from toolguard.replay import ReplayReport, read_runs, read_tool_definitions, replay_runs
from toolguard.shell._classifier import classify_command
from toolguard.testing import FakeClock
from toolguard.tools._schema import ArgsValidator

TAU = SHARED / "data" / "tau-bench"
SWE = SHARED / "data" / "swe-trajectories"
AIRLINE = ROOT / "examples" / "policies" / "airline.toml"
CODING = ROOT / "examples" / "policies" / "coding-agent.toml"


@cache
def tau_report() -> ReplayReport:
    runs, problems = read_runs([TAU / "gpt-4o-airline.json"])
    assert problems == []
    tools = read_tool_definitions(TAU / "airline-tools.json")
    return replay_runs(runs, tg.load_policy(AIRLINE, env={}), tools=tools)


@cache
def swe_report() -> ReplayReport:
    runs, problems = read_runs([SWE])
    assert problems == []
    return replay_runs(runs, tg.load_policy(CODING, env={}))


def ids(report: ReplayReport, decision: tg.Decision) -> set[str]:
    return {r.id for r in report.runs_with(decision)}


def non_allow(report: ReplayReport, run_id: str) -> list[tuple[int, str]]:
    [run] = [r for r in report.runs if r.id == run_id]
    return [(s.index, str(s.decision)) for s in run.steps if s.decision is not tg.Decision.ALLOW]


# -- tau-bench airline -------------------------------------------------------------------------
def test_tau_bench_dataset() -> None:
    report = tau_report()
    totals = report.totals()
    assert (totals["runs"], totals["calls"], totals["replayed"]) == (200, 1164, 1164)
    assert sum(1 for r in report.runs if r.meta["reward"] == 1.0) == 84


def test_every_recorded_tau_bench_call_is_valid_against_the_real_schemas() -> None:
    schemas = {t["function"]["name"]: t["function"]["parameters"]
               for t in json.loads((TAU / "airline-tools.json").read_text())}
    validators = {name: ArgsValidator(schema) for name, schema in schemas.items()}
    runs, _ = read_runs([TAU / "gpt-4o-airline.json"])
    calls = [c for r in runs for c in r.calls]
    assert len(calls) == 1164
    for c in calls:
        assert c.raw_args is not None
        assert validators[c.tool].validate(json.loads(c.raw_args)) is None, c
    assert ids(tau_report(), tg.Decision.INVALID) == set()


# Runs that repeat a booking change with the same arguments and the same error.
TAU_BLOCKED = {"8-1", "9-2", "11-2"}
# get_reservation_details(X) then cancel_reservation(X) with the same arguments: two calls, not
# a repeat (these runs were warned while the ladder counted by the arguments hash alone).
TAU_CROSS_TOOL = {"28-0", "28-1", "29-3"}


def test_tau_bench_figures() -> None:
    report = tau_report()
    assert ids(report, tg.Decision.WARN) == TAU_BLOCKED
    assert not TAU_CROSS_TOOL & ids(report, tg.Decision.WARN)
    assert ids(report, tg.Decision.CACHED) == set()
    assert ids(report, tg.Decision.BLOCK) == TAU_BLOCKED
    assert ids(report, tg.Decision.REVIEW) == set()
    assert ids(report, tg.Decision.HALT) == {"9-2"}
    # 8-1: the same failing book_reservation three times (warn, block), then a transfer.
    assert non_allow(report, "8-1") == [(11, "warn"), (13, "block")]
    # 11-2: the same failing booking three times; it succeeds after the amounts are fixed.
    assert non_allow(report, "11-2") == [(5, "warn"), (8, "block")]
    # 9-2: the same failing booking four times, with an identical "think" in between.
    assert non_allow(report, "9-2") == [(18, "warn"), (20, "block"), (21, "warn"), (22, "halt")]
    assert all(r.meta["reward"] == 0.0 for r in report.runs_with(tg.Decision.WARN))


def test_tau_bench_runs_that_reached_reward_1_are_left_alone() -> None:
    successful = [r for r in tau_report().runs if r.meta["reward"] == 1.0]
    assert len(successful) == 84
    for run in successful:
        assert [s for s in run.steps if s.decision is not tg.Decision.ALLOW] == [], run.id


def test_two_tools_with_the_same_arguments_are_not_a_repeat() -> None:
    task = tg.Guard(clock=FakeClock(0), strict_tools=False).task("probe")
    task._replay_call("lookup", {"id": 1}, "found")
    assert task._replay_call("cancel", {"id": 1}, "cancelled").count == 1


# -- swe-trajectories ----------------------------------------------------------------------
def swe_run_id(file_stem: str) -> str:
    [run] = [r for r in swe_report().runs if Path(r.file).stem == file_stem]
    return run.id


def test_swe_dataset() -> None:
    report = swe_report()
    assert (len(report.runs), report.totals()["calls"]) == (58, 4471)
    runs, _ = read_runs([SWE])
    repeats = 0
    for run in runs:
        seen = Counter(c.args["command"] for c in run.calls if c.args)
        repeats += sum(n - 1 for n in seen.values())
    assert repeats == 419


def test_swe_only_two_genuine_loops_are_blocked_or_halted() -> None:
    report = swe_report()
    stopped = {Path(r.file).stem for r in report.runs
               if r.reached(tg.Decision.BLOCK) or r.halted}
    assert stopped == {"swe-agent-03", "mini-swe-agent-31"}
    totals = report.totals()
    assert totals["runs_with"] == {"warn": 4, "cached": 2, "block": 1, "review": 0,
                                   "invalid": 0, "halt": 2}


def test_swe_read_only_commands_are_never_answered_from_the_cache() -> None:
    """Regression: with bash mutating unless a regex said otherwise, a re-run of the same test
    (django-15738, step 104) was answered from the idempotency cache. The shell classifier
    reads it as read-only; the only cached answers left are duplicate writes."""
    report = swe_report()
    runs, _ = read_runs([SWE])
    commands = {Path(r.file).stem: [str((c.args or {}).get("command")) for c in r.calls]
                for r in runs}
    cached = [(Path(r.file).stem, s.index)
              for r in report.runs for s in r.steps if s.decision is tg.Decision.CACHED]
    assert cached == [("mini-swe-agent-16", 25), ("mini-swe-agent-31", 58),
                      ("mini-swe-agent-31", 60)]
    for stem, i in cached:  # a backup copied twice; the same patch file written again
        assert classify_command(commands[stem][i]) is tg.Effect.MUTATING
    [django] = [r for r in report.runs if Path(r.file).stem == "mini-swe-agent-32"]
    command = commands["mini-swe-agent-32"][104]
    assert "pytest" in command and classify_command(command) is tg.Effect.READONLY
    assert django.steps[104].executed


def test_swe_a_write_after_restoring_a_backup_runs_again() -> None:
    """Regression: restoring a file from a backup repeats an earlier output, so it is no
    progress for the ladder; the identical edit after it was answered from the idempotency
    cache and never re-applied to the restored file. Any successful write now lapses the
    until_change records of other calls."""
    report = swe_report()
    [pydicom] = [r for r in report.runs if Path(r.file).stem == "mini-swe-agent-10"]
    step = pydicom.steps[92]
    assert "import struct" in str(step.args) and step.executed


def test_swe_agent_03_submits_the_same_wrong_flag_four_times() -> None:
    report = swe_report()
    run_id = swe_run_id("swe-agent-03")
    assert non_allow(report, run_id) == [(10, "warn"), (11, "block"), (12, "halt")]
    runs, _ = read_runs([SWE / "swe-agent-03.jsonl"])
    loop = runs[0].calls[9:13]
    assert {c.args["command"] for c in loop if c.args} == {
        "submit flag{People always make the best exploits.}\n"}
    assert {c.result for c in loop} == {"Wrong flag!"}


def test_mini_swe_agent_31_writes_the_same_patch_file_four_times() -> None:
    report = swe_report()
    run_id = swe_run_id("mini-swe-agent-31")
    assert non_allow(report, run_id) == [(58, "cached"), (60, "cached"), (61, "halt")]
    runs, _ = read_runs([SWE / "mini-swe-agent-31.jsonl"])
    calls = runs[0].calls
    commands = [c.args["command"] for c in calls if c.args]
    assert commands[57] == commands[58] == commands[60] == commands[61]
    assert commands[57].startswith("cat > fix.patch << 'EOF'")
    assert commands[59] == "sed -n '250,270p' django/urls/resolvers.py"  # a read: no change
    assert {c.result for c in calls[57:62] if c is not calls[59]} == {""}


# -- the shipped policies still catch the loops in ../shared/cases ------------------------------
CASES = sorted((SHARED / "cases").glob("*.jsonl"))


@pytest.mark.parametrize("policy_file", [CODING, AIRLINE], ids=["coding-agent", "airline"])
def test_shipped_policies_satisfy_every_case(policy_file: Path) -> None:
    runs, problems = read_runs(CASES)
    assert problems == []
    assert len(runs) >= 13
    report = replay_runs(runs, tg.load_policy(policy_file, env={}))
    for run, result in zip(runs, report.runs, strict=True):
        must = run.meta["must"]
        decided = [s.decision for s in result.steps]

        def executed(i: int, decided: list[tg.Decision] = decided) -> bool:
            return i < len(decided) and decided[i].executed

        assert all(executed(i) for i in must.get("run", [])), (run.id, decided)
        assert not any(executed(i) for i in must.get("not_run", [])), (run.id, decided)
        if "stopped_by" in must:
            assert not all(executed(i) for i in range(must["stopped_by"] + 1)), run.id
        if "halted_by" in must:
            assert result.halted_at is not None, run.id
            assert result.halted_at <= must["halted_by"], run.id
