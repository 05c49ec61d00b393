"""``toolguard replay`` on what agent tools really record (``../shared/data/transcripts``: Claude
Code, Codex CLI, SWE-agent, mini-swe-agent, OpenHands, Inspect AI, Langfuse/OTel).

Every file replays (exit 0 or 1) with the calls, batches, user turns and token usage it holds.
The expected figures are counted here a second time, straight from each file's JSON with a
few lines per format that share no code with the readers (``independent_counts``), and both
are pinned in ``EXPECTED``, so a reader that drifts from the file, or a count that drifts from
the table, fails.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import toolguard as tg
from tests.conftest import ROOT, SHARED
from tests.replay_support import replay
from toolguard.replay import (
    RecordedCall,
    Run,
    TokenUsage,
    UserTurn,
    open_file,
    read_runs,
    replay_runs,
)
from toolguard.replay._runner import _grouped

TRANSCRIPTS = SHARED / "data" / "transcripts"
POLICIES = ROOT / "examples" / "policies"
CODEX_12_40 = ("codex-rollout/rollout-2026-02-23T12-40-23-019c8a4c-ed82-79a1-aa28-"
               "7738fc5ab61a.jsonl")

# file -> (format, runs, calls, batches of 2+ calls, user turns, input tokens, output tokens)
EXPECTED: dict[str, tuple[str, int, int, int, int, int, int]] = {
    "claude-code/fasthooks-sample_agent_sidechain.jsonl": ("claude-code", 1, 0, 0, 1, 728, 152),
    "claude-code/fasthooks-sample_main_transcript.jsonl":
        ("claude-code", 1, 10, 2, 7, 231864, 1480),
    CODEX_12_40: ("codex", 1, 104, 23, 5, 7204025, 36075),
    "codex-rollout/rollout-2026-02-23T12-41-04-019c8a4d-8f45-7010-8b5d-7fad920aa6f9.jsonl":
        ("codex", 1, 118, 26, 1, 1751428, 14600),
    "codex-rollout/rollout-2026-02-23T12-47-42-019c8a53-a0dd-7130-bcd7-95445d84846a.jsonl":
        ("codex", 1, 144, 25, 7, 6740973, 36950),
    "inspect-ai/2025-05-12T20-27-36-04-00_browser.json": ("inspect", 1, 4, 0, 1, 15235, 281),
    "inspect-ai/log_message_deduplication.eval": ("inspect", 1, 5, 0, 1, 0, 0),
    "langfuse-export/google-adk-2025-08-28.json": ("langfuse", 1, 1, 0, 0, 67, 9),
    "langfuse-export/langgraph-2025-08-22.json": ("langfuse", 1, 1, 0, 0, 168, 66),
    "langfuse-export/openai-agents-2025-09-30.json": ("langfuse", 1, 1, 0, 0, 140, 44),
    "langfuse-export/pydantic-ai-tools-2025-12-04.json": ("langfuse", 1, 3, 1, 0, 1315, 209),
    "mini-swe-agent/marshmallow-code__marshmallow-1343.traj.json":
        ("mini-swe-agent", 1, 93, 0, 1, 1512528, 13962),
    "openhands/basic.json": ("openhands", 1, 2, 0, 1, 8132, 1312),
    "openhands/basic_interactions.json": ("openhands", 1, 1, 0, 3, 2473, 10),
    "swe-agent/demo-function_calling_replace_from_source-marshmallow-1867.traj":
        ("swe-agent", 1, 13, 0, 0, 0, 0),
    "swe-agent/swe-agent__test-repo-i1.traj": ("swe-agent", 1, 5, 0, 0, 52861, 326),
}


def transcript_files() -> list[str]:
    claimed = (".jsonl", ".json", ".traj", ".eval")
    return sorted(str(p.relative_to(TRANSCRIPTS)) for p in TRANSCRIPTS.rglob("*")
                  if p.is_file() and p.name.endswith(claimed))


def test_every_transcript_file_is_in_the_table() -> None:
    assert transcript_files() == sorted(EXPECTED)


# -- independent counts, straight from the JSON ------------------------------------------------
def lines(path: Path) -> Iterator[dict[str, Any]]:
    for raw in path.read_text().splitlines():
        if raw.strip():
            yield json.loads(raw)


def independent_counts(name: str) -> tuple[int, int, int, int, int]:
    """(calls, batches of 2+ calls, user turns, input tokens, output tokens) of one file."""
    path = TRANSCRIPTS / name
    folder = name.split("/", maxsplit=1)[0]
    if folder == "claude-code":
        return _claude(path)
    if folder == "codex-rollout":
        return _codex(path)
    if folder == "inspect-ai":
        return _inspect(path)
    if folder == "langfuse-export":
        return _langfuse(path)
    if folder == "mini-swe-agent":
        doc = json.loads(path.read_text())
        calls = [len(m.get("tool_calls") or []) for m in doc["messages"]]
        spent = [m["extra"]["response"]["usage"] for m in doc["messages"]
                 if m["role"] == "assistant"]
        return (sum(calls), sum(1 for n in calls if n > 1),
                sum(1 for m in doc["messages"] if m["role"] == "user"),
                sum(u["prompt_tokens"] for u in spent), sum(u["completion_tokens"] for u in spent))
    if folder == "openhands":
        events = json.loads(path.read_text())
        actions = [e for e in events if e.get("action") and e.get("tool_call_metadata")]
        responses = {e["tool_call_metadata"]["model_response"]["id"]:
                     e["tool_call_metadata"]["model_response"]["usage"] for e in actions}
        return (len(actions), 0, sum(1 for e in events
                                   if e.get("source") == "user" and e.get("action") == "message"),
                sum(u["prompt_tokens"] for u in responses.values()),
                sum(u["completion_tokens"] for u in responses.values()))
    doc = json.loads(path.read_text())  # swe-agent
    fc = [tc for m in doc["history"] for tc in (m.get("tool_calls") or [])]
    stats = doc["info"].get("model_stats", {})
    return (len(fc) or len(doc["trajectory"]), 0, 0, stats.get("tokens_sent", 0),
            stats.get("tokens_received", 0))


def _claude(path: Path) -> tuple[int, int, int, int, int]:
    per_message: dict[str, int] = {}
    usage: dict[str, dict[str, int]] = {}
    turns = 0
    for line in lines(path):
        message = line.get("message") or {}
        if line.get("type") == "assistant":
            n = sum(1 for b in message["content"] if b["type"] == "tool_use")
            per_message[message["id"]] = per_message.get(message["id"], 0) + n
            usage[message["id"]] = message["usage"]
        elif line.get("type") == "user":
            content = message["content"]
            own_text = isinstance(content, str) or any(b["type"] != "tool_result"
                                                       for b in content)
            turns += own_text and not line.get("isMeta") and not line.get("isCompactSummary")
    return (sum(per_message.values()), sum(1 for n in per_message.values() if n > 1), turns,
            sum(u["input_tokens"] + u.get("cache_creation_input_tokens", 0)
                + u.get("cache_read_input_tokens", 0) for u in usage.values()),
            sum(u["output_tokens"] for u in usage.values()))


def _codex(path: Path) -> tuple[int, int, int, int, int]:
    kinds = {"function_call", "custom_tool_call", "local_shell_call"}
    calls = batches = run = turns = 0
    total: dict[str, int] = {}
    for line in lines(path):
        payload = line["payload"]
        if line["type"] == "response_item" and payload["type"] in kinds:
            calls += 1
            run += 1
            batches += run == 2
        elif line["type"] == "response_item":
            run = 0  # an output or a message ends the calls of one response
        elif payload.get("type") == "user_message":
            turns += 1
            run = 0
        elif payload.get("type") == "token_count" and payload.get("info"):
            total = payload["info"]["total_token_usage"]
    return calls, batches, turns, total["input_tokens"], total["output_tokens"]


def _inspect(path: Path) -> tuple[int, int, int, int, int]:
    if path.suffix == ".eval":
        with zipfile.ZipFile(path) as archive:
            samples = [json.loads(archive.read(n)) for n in archive.namelist()
                       if n.startswith("samples/")]
    else:
        samples = json.loads(path.read_text())["samples"]
    messages = [m for s in samples for m in s["messages"]]
    calls = [len(m.get("tool_calls") or []) for m in messages if m["role"] == "assistant"]
    spent = [e["output"]["usage"] for s in samples for e in s["events"]
             if e["event"] == "model" and e["output"].get("usage")]
    return (sum(calls), sum(1 for n in calls if n > 1),
            sum(1 for m in messages if m["role"] == "user"),
            sum(u["input_tokens"] for u in spent), sum(u["output_tokens"] for u in spent))


def _langfuse(path: Path) -> tuple[int, int, int, int, int]:
    observations = json.loads(path.read_text())["observations"]
    tools = [o for o in observations if o["type"] == "TOOL"]
    # LangChain's tool runs are plain spans named after the tool the generation asked for
    asked = [tc["function"]["name"] for o in observations if o["type"] == "GENERATION"
             and isinstance(o["output"], dict)
             for tc in (o["output"].get("additional_kwargs") or {}).get("tool_calls", [])]
    spans = [o for o in observations if o["type"] == "SPAN" and o["name"] in asked]
    parents = [o["parentObservationId"] for o in tools]
    generations = [o["usageDetails"] for o in observations if o["type"] == "GENERATION"]
    return (len(tools) + len(spans), sum(1 for p in set(parents) if parents.count(p) > 1), 0,
            sum(u.get("input", 0) for u in generations),
            sum(u.get("output", 0) for u in generations))


# -- what the readers make of each file ---------------------------------------------------------
def read_counts(name: str) -> tuple[str, int, int, int, int, int, int]:
    opened = open_file(TRANSCRIPTS / name)
    runs: list[Run] = list(opened.runs)
    assert opened.problems == [], opened.problems
    steps = [s for r in runs for s in r.steps]
    spent = [s for s in steps if isinstance(s, TokenUsage)]
    batches = sum(1 for r in runs for group in _grouped(r.steps)
                  if isinstance(group, list) and len(group) > 1)
    assert {r.format for r in runs} == {opened.format}
    return (str(opened.format), len(runs), sum(1 for s in steps if isinstance(s, RecordedCall)),
            batches, sum(1 for s in steps if isinstance(s, UserTurn)),
            sum(s.input_tokens for s in spent), sum(s.output_tokens for s in spent))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_file_is_read_with_the_calls_it_holds(name: str) -> None:
    assert independent_counts(name) == EXPECTED[name][2:]
    assert read_counts(name) == EXPECTED[name]


POLICY_OF = {"claude-code": "claude-code", "codex-rollout": "codex", "openhands": "openhands",
             "swe-agent": "swe-agent", "mini-swe-agent": "swe-agent"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_file_replays_with_exit_0_or_1_and_its_calls_in_the_report(name: str) -> None:
    args: list[str | Path] = [TRANSCRIPTS / name, "--format", "json", "--fail-on", "halt"]
    if (policy := POLICY_OF.get(name.split("/", maxsplit=1)[0])) is not None:
        args += ["--policy", POLICIES / f"{policy}.toml"]
    result = replay(*args)
    assert result.exit_code in (0, 1), result.output
    doc = json.loads(result.stdout)
    assert doc["problems"] == []
    assert doc["totals"]["calls"] == EXPECTED[name][2]
    assert {(r["format"], Path(r["file"]).name) for r in doc["runs"]} == {
        (EXPECTED[name][0], Path(name).name)}


def test_the_whole_folder_replays_at_once_every_extension_included() -> None:
    result = replay(TRANSCRIPTS, "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["totals"]["calls"] == sum(e[2] for e in EXPECTED.values())
    assert {Path(r["file"]).relative_to(TRANSCRIPTS).as_posix() for r in doc["runs"]} == set(
        EXPECTED)
    # the Claude Code subagent answered without a tool: a note, not a problem
    assert [n["message"] for n in doc["notes"] if "sidechain" in n["file"]] == [
        "1 run(s), no tool call: the model answered 1 time(s) without calling a tool"]


# -- Codex: a polled process is never answered from the cache ------------------------------------
def codex_report(policy: tg.Policy) -> list[tuple[str, str]]:
    runs, problems = read_runs([TRANSCRIPTS / CODEX_12_40])
    assert problems == []
    [run] = replay_runs(runs, policy).runs
    return [(s.tool or "", str(s.decision)) for s in run.steps]


def test_codex_write_stdin_polls_are_not_answered_from_the_cache() -> None:
    steps = codex_report(tg.load_policy(POLICIES / "codex.toml", env={}))
    polls = [d for tool, d in steps if tool == "write_stdin"]
    assert len(polls) == 9
    assert set(polls) == {"allow"}
    assert len(steps) == 104  # no halt: every call replayed


def test_codex_rollout_with_the_default_policy_caches_the_polls_then_halts() -> None:
    """What the codex policy fixes: with every tool mutating, the second and third poll of
    one running process (calls 18-19) get the cached first answer, and the fourth halts."""
    steps = codex_report(tg.Policy())
    assert steps[17:21] == [("write_stdin", "allow"), ("write_stdin", "cached"),
                            ("write_stdin", "cached"), ("write_stdin", "halt")]


CODEX_12_47 = ("codex-rollout/rollout-2026-02-23T12-47-42-019c8a53-a0dd-7130-bcd7-"
               "95445d84846a.jsonl")


def test_codex_12_47_with_the_default_policy_caches_one_poll_that_had_moved() -> None:
    """The one ``cached`` of rollout 12-47-42 under the default policy (README, replay) is not
    a repeated write: calls 26 and 27 are the same ``write_stdin`` poll of one running
    process, back to back, and the recorded outputs differ (113 and 102 characters), so the
    cached answer would have shown the model stale output. The codex policy makes
    ``write_stdin`` a poll, and nothing is cached."""
    runs, problems = read_runs([TRANSCRIPTS / CODEX_12_47])
    assert problems == []
    calls = runs[0].calls
    first, second = calls[26], calls[27]
    assert (first.tool, second.tool) == ("write_stdin", "write_stdin")
    assert first.args == second.args and first.result != second.result
    [run] = replay_runs(runs, tg.Policy()).runs
    assert [(s.index, s.tool, str(s.decision)) for s in run.steps
            if str(s.decision) != "allow"] == [(27, "write_stdin", "cached")]
    runs, _ = read_runs([TRANSCRIPTS / CODEX_12_47])
    [run] = replay_runs(runs, tg.load_policy(POLICIES / "codex.toml", env={})).runs
    assert {str(s.decision) for s in run.steps} == {"allow"}


INSPECT_DEDUP = "inspect-ai/log_message_deduplication.eval"


def test_inspect_dedup_log_is_a_genuine_repeat_cached_then_halted() -> None:
    """The other stop of the README's transcript paragraph: Inspect's log-deduplication
    fixture, written by a scripted mock model, runs ``bash {"cmd": "ls"}`` five times with the
    same output each time. The default policy (bash mutating) answers calls 1-2 from the cache
    (the very output recorded: not stale) and halts call 3; classified read-only by the shell
    classifier, the same loop is warned, blocked and halted. A genuine repeat either way."""
    runs, problems = read_runs([TRANSCRIPTS / INSPECT_DEDUP])
    assert problems == []
    calls = runs[0].calls
    assert len(calls) == 5
    assert {(c.tool, json.dumps(c.args), str(c.result)) for c in calls} == {
        (calls[0].tool, json.dumps(calls[0].args), str(calls[0].result))}
    [run] = replay_runs(runs, tg.Policy()).runs
    assert [(s.index, str(s.decision)) for s in run.steps] == [
        (0, "allow"), (1, "cached"), (2, "cached"), (3, "halt")]
    runs, _ = read_runs([TRANSCRIPTS / INSPECT_DEDUP])
    shell = tg.load_policy_dict({"tools": {"bash": {"shell": "cmd"}}})
    [run] = replay_runs(runs, shell).runs
    assert [str(s.decision) for s in run.steps] == ["allow", "allow", "warn", "block", "halt"]


@pytest.mark.parametrize("name", [n for n in EXPECTED if n.startswith("codex-rollout/")])
def test_every_codex_rollout_replays_without_a_stop_under_the_codex_policy(name: str) -> None:
    runs, _ = read_runs([TRANSCRIPTS / name])
    report = replay_runs(runs, tg.load_policy(POLICIES / "codex.toml", env={}))
    decisions = {str(s.decision) for r in report.runs for s in r.steps}
    assert decisions <= {"allow", "warn"}, decisions
