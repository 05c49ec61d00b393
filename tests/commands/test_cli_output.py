"""The CLI as a person and a pipe see it: tables sized to the terminal, one record per row on
a terminal too narrow for them, plain columns when stdout is piped; ``replay --only-flagged``;
``explain`` on a tool the policy does not declare."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from rich.console import Console

import toolguard as tg
from tests.conftest import ROOT
from toolguard.replay import ReplayReport, read_runs, replay_runs
from toolguard.replay._report import render_table

TRACES = ROOT / "examples" / "traces"
BOX = set("│┃━─┏┗╇┡")


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("TOOLGUARD_") or k == "TOOLGUARD_SHARED"}
    return subprocess.run([sys.executable, "-m", "toolguard.cli", *args], capture_output=True,
                          text=True, timeout=120, check=False, env={**clean, **(env or {})})


def _report() -> ReplayReport:
    runs, problems = read_runs([TRACES])
    assert problems == []
    return replay_runs(runs, tg.load_policy("default", env={}))



def test_piped_output_is_plain_columns_one_line_per_row() -> None:
    done = _cli("replay", str(TRACES), "-v")
    assert done.returncode == 0, done.stderr
    assert not BOX & set(done.stdout)
    assert "\x1b[" not in done.stdout  # no colour either
    halted = [line for line in done.stdout.splitlines() if line.startswith("grep-loop ")]
    assert len(halted) == 4  # its row, then its three steps that were not an allow
    assert halted[0].endswith(
        "step 5: grep was called 5 times with the same arguments without progress")
    assert all(line == line.rstrip() for line in done.stdout.splitlines())


def test_a_terminal_gets_a_table_at_its_width() -> None:
    console = Console(force_terminal=True, width=150, record=True)
    render_table(_report(), console)
    text = console.export_text()
    assert BOX & set(text)
    assert max(len(line) for line in text.splitlines()) <= 150


def test_a_terminal_too_narrow_for_the_table_gets_one_record_per_run() -> None:
    console = Console(force_terminal=True, width=50, record=True)
    render_table(_report(), console)
    text = console.export_text()
    assert not BOX & set(text)
    assert "run: grep-loop\n" in text and "halted: step 5: grep was called 5 times" in text
    assert max(len(line) for line in text.splitlines()) <= 50


def test_only_flagged_lists_the_runs_with_anything_but_allow() -> None:
    every = _cli("replay", str(TRACES), "--format", "json")
    runs = json.loads(every.stdout)["runs"]
    flagged_ids = {run["id"] for run in runs
                   if any(run["summary"][d] for d in
                          ("warn", "cached", "block", "review", "invalid", "halt"))}
    done = _cli("replay", str(TRACES), "--only-flagged")
    assert done.returncode == 0, done.stderr
    rows = [line.split()[0] for line in done.stdout.splitlines()[2:]
            if line and not line.startswith(("total", " "))][:-2]
    assert set(rows) == flagged_ids and 0 < len(flagged_ids) < len(runs)
    assert f"{len(runs) - len(flagged_ids)} run" in done.stdout
    assert "not listed (--only-flagged)" in done.stdout
    assert f"total ({len(runs)} runs)" in done.stdout  # the totals still count every run


def test_explain_names_an_undeclared_tool_and_the_default_effect_that_decides_it() -> None:
    done = _cli("explain", "prod", "--tool", "wire_money")
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("wire_money is not declared in the policy")
    assert 'default_effect = "deny"' in first and "prod.toml" in first
    effect = next(line for line in done.stdout.splitlines() if line.startswith("effect "))
    assert 'default_effect = "deny"' in effect
    declared = _cli("explain", "coding-agent", "--tool", "bash")
    assert "not declared" not in declared.stdout

