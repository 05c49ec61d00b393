"""Every shared recording whose call count is known is read with exactly that count: what the
harness ran, no call invented and none lost.

* ``../shared/data/realruns``: every run of ``index.jsonl`` against its ``calls_native``
  (counted from the native file with the harness's own rules) and read by its ``format``;
* ``../shared/data/swe-trajectories``: the ``calls`` column of its README's table;
* ``../shared/data/transcripts``: the counts their ``SOURCE.txt`` files state.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SHARED
from toolguard.replay import Run, read_runs

REALRUNS = SHARED / "data" / "realruns"
SWE = SHARED / "data" / "swe-trajectories"
TRANSCRIPTS = SHARED / "data" / "transcripts"


@cache
def index() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (REALRUNS / "index.jsonl").read_text().splitlines()
            if line.strip()]


@cache
def runs_of(path: Path) -> dict[str, Run]:
    runs, problems = read_runs([path])
    assert problems == []
    return {r.id: r for r in runs}


def _files() -> list[str]:
    by_file: dict[str, None] = {}
    for entry in index():
        by_file.setdefault(entry["file"], None)
    return list(by_file)


@pytest.mark.parametrize("file", _files())
def test_every_real_run_is_read_with_its_native_call_count(file: str) -> None:
    runs = runs_of(REALRUNS / file)
    entries = [e for e in index() if e["file"] == file]
    got = {str(e["run"]): len(runs[str(e["run"])].calls) if str(e["run"]) in runs else None
           for e in entries}
    assert got == {str(e["run"]): e["calls_native"] for e in entries}
    # read by the reader the index names (the chat reader names its runs by dialect)
    formats = {runs[str(e["run"])].format for e in entries}
    assert formats <= ({"openai", "anthropic"} if entries[0]["format"] == "chat"
                       else {entries[0]["format"]})


def test_the_real_runs_total_what_their_readme_says() -> None:
    totals: dict[str, int] = defaultdict(int)
    for entry in index():
        totals[entry["harness"].split(" ")[0]] += entry["calls_native"]
    assert sum(totals.values()) == 2922
    assert len(index()) == 143


def test_a_mini_swe_agent_1_message_with_several_blocks_runs_nothing() -> None:
    """mini-swe-agent 1.x runs a message's ```bash block only when it holds exactly one; with
    several the harness answers with a format error. django__django-14155 has five such
    messages (22 blocks found by a regex, 17 commands run)."""
    run = runs_of(REALRUNS / "mini-swe-agent-gemini-3-pro" / "django__django-14155.traj.json")
    calls = run["django__django-14155"].calls
    assert len(calls) == 17
    assert not any("EXACTLY ONE action" in str(c.result) for c in calls)


def _swe_table() -> dict[str, int]:
    rows = re.findall(r"^\| `([^`]+\.jsonl)` \|(?:[^|]*\|){3} (\d+) \|",
                      (SWE / "README.md").read_text(), re.MULTILINE)
    return {name: int(calls) for name, calls in rows}


def test_every_swe_trajectory_is_read_with_the_count_its_readme_gives() -> None:
    table = _swe_table()
    assert len(table) == 58
    got = {}
    for name in table:
        [run] = runs_of(SWE / name).values()
        got[name] = len(run.calls)
    assert got == table


@pytest.mark.parametrize(("path", "calls"), [
    ("inspect-ai/2025-05-12T20-27-36-04-00_browser.json", 4),
    ("inspect-ai/log_message_deduplication.eval", 5),
])
def test_transcripts_are_read_with_the_count_their_source_states(path: str, calls: int) -> None:
    assert sum(len(r.calls) for r in runs_of(TRANSCRIPTS / path).values()) == calls


def _mini(tmp_path: Path, action_regex: str | None, *replies: str) -> Path:
    agent = {} if action_regex is None else {"action_regex": action_regex}
    messages: list[dict[str, str]] = [{"role": "system", "content": "s"},
                                      {"role": "user", "content": "task"}]
    for reply in replies:
        messages += [{"role": "assistant", "content": reply},
                     {"role": "user", "content": "output"}]
    path = tmp_path / "run.traj.json"
    path.write_text(json.dumps({"info": {"config": {"agent": agent}}, "messages": messages,
                                "trajectory_format": "mini-swe-agent-1"}))
    return path


def test_a_mini_swe_agent_1_run_is_read_with_its_own_action_regex(tmp_path: Path) -> None:
    one, two = "```sh\nls\n```", "```bash\npwd\n```\n```bash\nid\n```"
    [run] = runs_of(_mini(tmp_path, r"```sh\s*\n(.*?)\n```", one, two, one)).values()
    assert [c.arguments for c in run.calls] == [{"command": "ls"}] * 2
    (tmp_path / "default").mkdir()
    runs, problems = read_runs([_mini(tmp_path / "default", None, one, two,
                                      "```bash\nls\n```")])
    # the default regex: no bash block, then two (a format error), then one that ran
    assert problems == [] and [c.arguments for c in runs[0].calls] == [{"command": "ls"}]
    runs, problems = read_runs([_mini(tmp_path, "(unclosed", one)])
    assert runs == [] and "action_regex does not compile" in str(problems[0])
