# ruff: noqa: F811  (fixtures are imported, then taken as parameters)
"""Detection that means something, through Guard and Task on both stores: result
normalisation before comparing, the stagnation rule, the cap on endless progress, typed
result digests; each with the legitimate look-alikes it must leave alone."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolguard as tg
from tests.redis_support import (  # noqa: F401
    delete_prefix,
    redis_cluster_store,
    redis_prefix,
    redis_store,
)
from tests.stores.test_store_contract import store  # noqa: F401  (memory and Redis, as in the contract)
from toolguard.engine._core import (
    CallContext,
    decide,
    outcome_kind,
    stagnation_after,
    stagnation_possible,
)
from toolguard.policy._model import LadderOverride, LadderPolicy, ResultPolicy, ToolPolicy
from toolguard.stores import Snapshot, Store
from toolguard.testing import FakeClock, capture_audit
from toolguard.tools._resolve import resolve_tool

D = tg.Decision


def task_for(store: Store, clock: FakeClock, policy: tg.Policy | None = None,
             tools: list[Any] | None = None) -> tg.Task:
    guard = tg.Guard(policy, tools or [], store=store, clock=clock,
                     strict_tools=tools is not None)
    return guard.task(f"t-{next(_ids)}")


_ids = itertools.count()


def replay(task: tg.Task, tool: str, calls: list[tuple[dict[str, Any], Any]],
           is_error: bool = False) -> list[D]:
    out = []
    for args, result in calls:
        try:
            out.append(task._replay_call(tool, args, result, is_error=is_error).decision)
        except tg.Halt:
            out.append(D.HALT)
            break
    return out


READONLY = tg.Policy(tools={"search_files": ToolPolicy(effect=tg.Effect.READONLY),
                            "status": ToolPolicy(effect=tg.Effect.READONLY),
                            "book": ToolPolicy(effect=tg.Effect.MUTATING)})


# -- the stagnation rule -------------------------------------------------------------------
def test_reworded_searches_with_the_same_empty_result_are_warned_then_blocked(
        store: Store, clock: FakeClock) -> None:
    task = task_for(store, clock, READONLY)
    regexes = ["foo.*bar", "foo\\s+bar", "foo bar", "foo_bar", "foo-bar", "fooBar", "f.o"]
    results = [task._replay_call("search_files", {"regex": r}, "Found 0 results.")
               for r in regexes]
    assert [r.decision for r in results] == [D.ALLOW, D.ALLOW, D.ALLOW, D.WARN, D.WARN,
                                              D.BLOCK, D.BLOCK]
    assert results[3].notice is not None
    assert "4 different search_files calls returned the same empty result" in results[3].notice
    assert "change approach" in results[3].notice
    assert str(results[3].content).startswith("Found 0 results.")  # the raw result, then
    assert results[5].is_error and "not executed" in str(results[5].content)
    assert "Change approach" in str(results[5].content)
    assert "5 different search_files calls" in results[5].reason


def test_errors_with_varied_arguments_count_too(store: Store, clock: FakeClock) -> None:
    task = task_for(store, clock, READONLY)
    calls = [({"flight": f"HAT{i:03}"}, "Error: payment method not found") for i in range(6)]
    decided = replay(task, "book", calls, is_error=True)
    assert decided == [D.ALLOW, D.ALLOW, D.ALLOW, D.WARN, D.WARN, D.BLOCK]
    last = task.history[3].result
    assert last.notice is not None and "failed with the same error" in last.notice
    assert "Error: payment method not found" in str(last.content)  # the notice follows it


def test_paging_through_results_is_progress(store: Store, clock: FakeClock) -> None:
    """Look-alike: every page is a different call with a different result."""
    task = task_for(store, clock, READONLY)
    calls = [({"regex": "foo", "page": p}, f"results {10 * p}-{10 * p + 9}: ...")
             for p in range(12)]
    assert set(replay(task, "search_files", calls)) == {D.ALLOW}


def test_a_build_that_finally_passes_is_not_blocked(store: Store, clock: FakeClock) -> None:
    """Look-alike: the same failure under three fixes, then success; each fix is a write."""
    tools = tg.Policy(tools={"run_build": ToolPolicy(effect=tg.Effect.READONLY),
                             "edit": ToolPolicy(effect=tg.Effect.MUTATING)})
    task = task_for(store, clock, tools)
    decided = []
    for i in range(5):
        decided += replay(task, "edit", [({"patch": f"fix {i}"}, f"applied fix {i}")])
        failed = i < 4
        decided += replay(task, "run_build", [({"target": "all", "verbose": i % 2 == 0},
                                               "FAILED: 1 error" if failed else "OK")],
                          is_error=failed)
    assert set(decided) == {D.ALLOW}


def test_a_run_of_other_outcomes_does_not_block(store: Store, clock: FakeClock) -> None:
    task = task_for(store, clock, READONLY)
    calls = [({"regex": f"r{i}"}, "Found 0 results." if i % 2 else "found: a.py")
             for i in range(10)]
    assert set(replay(task, "search_files", calls)) == {D.ALLOW}


def test_a_new_user_turn_ends_the_run(store: Store, clock: FakeClock) -> None:
    task = task_for(store, clock, READONLY)
    replay(task, "search_files", [({"regex": f"r{i}"}, "[]") for i in range(5)])
    task.new_turn()
    assert replay(task, "search_files", [({"regex": "new"}, "[]")]) == [D.ALLOW]


def test_zero_turns_the_rule_off_globally_and_per_tool(store: Store, clock: FakeClock) -> None:
    off = tg.Policy(ladder=LadderPolicy(stagnation_warn_at=0, stagnation_block_at=0),
                    tools=READONLY.tools)
    calls = [({"regex": f"r{i}"}, "[]") for i in range(8)]
    assert set(replay(task_for(store, clock, off), "search_files", calls)) == {D.ALLOW}
    think = tg.Policy(tools={"think": ToolPolicy(effect=tg.Effect.READONLY, ladder=LadderOverride(
        stagnation_warn_at=0, stagnation_block_at=0))})
    thoughts = [({"thought": f"idea {i}"}, "") for i in range(8)]
    assert set(replay(task_for(store, clock, think), "think", thoughts)) == {D.ALLOW}


def test_poll_calls_are_exempt(store: Store, clock: FakeClock) -> None:
    poll = tg.Policy(tools={"read_output": ToolPolicy(effect=tg.Effect.POLL)})
    calls = [({"process": "build", "since": i}, "") for i in range(8)]
    assert set(replay(task_for(store, clock, poll), "read_output", calls)) == {D.ALLOW}


def test_observe_mode_reports_the_stagnation_and_runs(store: Store, clock: FakeClock) -> None:
    observe = READONLY.model_copy(update={"mode": tg.Mode.OBSERVE})
    task = task_for(store, clock, observe)
    results = [task._replay_call("search_files", {"regex": f"r{i}"}, "[]") for i in range(7)]
    assert {r.decision for r in results} == {D.ALLOW}
    assert [r.observed for r in results][3:] == [D.WARN, D.WARN, D.BLOCK, D.BLOCK]


def test_stagnation_is_audited(clock: FakeClock) -> None:
    guard = tg.Guard(READONLY, clock=clock, strict_tools=False)
    with capture_audit(guard) as events:
        task = guard.task("audited")
        for i in range(4):
            task._replay_call("search_files", {"regex": f"r{i}"}, "[]")
    final = [e for e in events if e.transition == "executing->planning"]
    assert final[-1].decision == "warn" and final[-1].reason.startswith("stagnation: 4")


def test_thresholds_come_from_env_and_explain_shows_them(clock: FakeClock) -> None:
    policy = tg.load_policy(None, env={"TOOLGUARD_LADDER__STAGNATION_WARN_AT": "2",
                                       "TOOLGUARD_LADDER__STAGNATION_BLOCK_AT": "3",
                                       "TOOLGUARD_LADDER__MAX_PROGRESS_RESETS": "0"})
    settings = resolve_tool(policy, tg.spec_of(lambda: None))
    assert (settings.stagnation_warn_at, settings.stagnation_block_at,
            settings.max_progress_resets) == (2, 3, 0)
    assert settings.sources["stagnation_warn_at"] == "env TOOLGUARD_LADDER__STAGNATION_WARN_AT"


def test_stagnation_warn_above_block_is_a_policy_error(tmp_path: Any) -> None:
    path = tmp_path / "p.toml"
    path.write_text("[ladder]\nstagnation_warn_at = 5\nstagnation_block_at = 3\n")
    with pytest.raises(tg.PolicyError, match="stagnation_block_at: must be ≥ stagnation_warn_at"):
        tg.load_policy(path, env={})


# -- the pure core -------------------------------------------------------------------------
def _snap(run: int, outcome: str, signature: str) -> Snapshot:
    return Snapshot(halted=None, epoch=0, calls=1, tool_calls=1, consecutive_failures=0,
                    tokens=0, started_at=0.0, count=1, polls=0, record=None, approval=None,
                    claimed=False, stagnation=run, stagnation_outcome=outcome,
                    stagnation_signature=signature)


def _lookup(q: str) -> str:
    return q


SETTINGS = resolve_tool(tg.Policy(), tg.spec_of(tg.readonly(_lookup)))


@pytest.mark.parametrize(("run", "outcome", "last", "expected"), [
    (2, "0x", "t:b", None),          # this call makes 3: below warn_at 4
    (3, "0x", "t:b", 4),             # this call makes 4
    (3, "0x", "t:a", None),          # the same arguments as the last: no growth
    (3, "ry", "t:b", None),          # another outcome: a new run of 1
    (9, "0x", "t:b", 10),
])
def test_stagnation_after(run: int, outcome: str, last: str, expected: int | None) -> None:
    verdict = stagnation_after(SETTINGS, "t:a", _snap(run, outcome, last), "0x")
    if expected is None:
        assert verdict is None
    else:
        assert verdict is not None and verdict.decision is D.WARN
        assert f"{expected} different" in verdict.reason


@settings(max_examples=300, deadline=None)
@given(warn_at=st.integers(0, 6), run=st.integers(0, 8), outcome=st.sampled_from(["", "0x", "ry"]),
       last=st.sampled_from(["", "t:a", "t:b"]), got=st.sampled_from(["0x", "ry", "eX"]))
def test_stagnation_possible_covers_every_warn(warn_at: int, run: int, outcome: str, last: str,
                                               got: str) -> None:
    """Read before a call runs, stagnation_possible is True wherever stagnation_after can
    warn once it ran, whatever its outcome (the MCP proxy answers on arrival only where it
    is False), and it is not always True: a short run cannot reach the rung."""
    tool = resolve_tool(tg.Policy(ladder=LadderPolicy(stagnation_warn_at=warn_at,
                                                      stagnation_block_at=0)),
                        tg.spec_of(tg.readonly(_lookup)))
    snap = _snap(run, outcome, last)
    if stagnation_after(tool, "t:a", snap, got) is not None:
        assert stagnation_possible(tool, "t:a", snap)
    if warn_at == 0 or (warn_at > 1 and run + 1 < warn_at):
        assert not stagnation_possible(tool, "t:a", snap)


def test_decide_blocks_a_long_run_before_running() -> None:
    ctx = CallContext("t", "_lookup", SETTINGS, tg.Effect.READONLY, "h", "t:_lookup:h", None,
                      tg.Policy().budget, 300.0, 0.0)
    blocked = decide(ctx, _snap(5, "eX", "_lookup:g"))  # this call would make 6
    assert blocked.decision is D.BLOCK
    assert "5 different _lookup calls failed with the same error" in blocked.reason
    assert decide(ctx, _snap(4, "eX", "_lookup:g")).decision is D.ALLOW


@pytest.mark.parametrize(("success", "value", "kind"), [
    (True, "", "0"), (True, [], "0"), (True, {}, "0"), (True, None, "0"),
    (True, "Found 0 results.", "0"), (True, "No matches found", "0"), (True, "[]", "0"),
    (True, "found 3", "r"), (True, 0.0, "r"), (False, "Error: x", "e"), (False, "", "e"),
])
def test_outcome_kind(success: bool, value: Any, kind: str) -> None:
    assert outcome_kind(success, value) == kind


@given(st.lists(st.sampled_from(["Found 0 ", "no results", "NO MATCHES", "0 results", "null",
                                 " ", "\u212a", "\u0130", "\u03a3", "x", "\n", "[]", "0"])
                | st.text(max_size=3), max_size=8).map("".join))
@settings(max_examples=500, deadline=None)
def test_an_outcome_kind_reads_what_the_whole_stripped_lowered_text_says(text: str) -> None:
    stripped = text.strip().lower()
    empty = (not stripped or stripped in {"[]", "{}", "null", "none", "0"} or stripped.startswith(
        ("found 0 ", "no results", "no matches", "0 results")))
    assert outcome_kind(True, text) == ("0" if empty else "r")


# -- volatile results: normalised before comparing, raw to the model -------------------------
def test_a_failing_command_whose_error_line_holds_a_time_is_a_repeat(
        store: Store, clock: FakeClock) -> None:
    task = task_for(store, clock, READONLY)
    calls = [({"service": "api"}, f"2026-12-01T10:0{i}:13.{i}21Z ERROR connection refused "
                                  f"(request {i:08x}-aaaa-bbbb-cccc-{i:012x}, took 0.{i}3s)")
             for i in range(6)]
    decided = replay(task, "status", calls)
    assert decided == [D.ALLOW, D.ALLOW, D.WARN, D.BLOCK, D.HALT]
    assert task.history[0].result.content == calls[0][1]  # the model gets it whole


def test_ignore_and_ignore_fields_from_the_policy(store: Store, clock: FakeClock) -> None:
    policy = tg.Policy(tools={"get_job": ToolPolicy(effect=tg.Effect.READONLY, result=ResultPolicy(
        ignore=(r"attempt #\d+",), ignore_fields=("$.meta.request_id", "$..etag")))})
    task = task_for(store, clock, policy)
    calls = [({"job": 7}, {"state": "running", "meta": {"request_id": f"r{i}"},
                           "items": [{"etag": i, "log": f"attempt #{i}"}]}) for i in range(5)]
    assert replay(task, "get_job", calls) == [D.ALLOW, D.ALLOW, D.WARN, D.BLOCK, D.HALT]
    text = [({"job": 8}, f'{{"state": "queued", "meta": {{"request_id": "x{i}"}}}}')
            for i in range(3)]
    assert replay(task_for(store, clock, policy), "get_job", text)[-1] is D.WARN


def test_a_changing_progress_bar_is_progress(store: Store, clock: FakeClock) -> None:
    """Look-alike: polling a build whose progress moves is allowed (within the cap)."""
    task = task_for(store, clock, READONLY)
    calls = [({"service": "build"}, f"[{'#' * i}{'.' * (10 - i)}] {10 * i}% (12.{i}s)")
             for i in range(11)]
    assert set(replay(task, "status", calls)) == {D.ALLOW}


def test_endless_change_without_progress_fields_is_capped(store: Store, clock: FakeClock
                                                         ) -> None:
    """An output that changes on every call, back to back, without any progress field
    moving (a token): after max_progress_resets resets it climbs the ladder (readonly: warn
    3, block 4, halt 5)."""
    task = task_for(store, clock, tg.Policy(ladder=LadderPolicy(max_progress_resets=3),
                                            tools=READONLY.tools))
    calls = [({"service": "x"}, f"token={i}") for i in range(10)]
    assert replay(task, "status", calls) == [D.ALLOW] * 5 + [D.WARN, D.BLOCK, D.HALT]


def test_another_call_in_between_keeps_a_poll_of_moving_output_alive(
        store: Store, clock: FakeClock) -> None:
    task = task_for(store, clock, tg.Policy(ladder=LadderPolicy(max_progress_resets=2),
                                            tools=READONLY.tools))
    decided = []
    for i in range(10):
        decided += replay(task, "status", [({"service": "x"}, f"token={i}")])
        decided += replay(task, "search_files", [({"regex": f"r{i}"}, f"hit {i}")])
    assert set(decided) == {D.ALLOW}


# -- typed result digests --------------------------------------------------------------------
@pytest.mark.parametrize(("first", "second"), [
    (1, "1"), (None, "null"), (True, "true"), ({"a": 1}, '{"a":1}'), ([1], "[1]"),
    (b"x", "x"), (0, False),
])
def test_a_change_of_type_is_progress(store: Store, clock: FakeClock, first: Any,
                                      second: Any) -> None:
    task = task_for(store, clock, READONLY)
    values = [first, second, first, second, first, second]
    assert set(replay(task, "status", [({"k": 1}, v) for v in values])) == {D.ALLOW}


def test_value_digest_is_typed() -> None:
    from toolguard.hashing._canonical import value_digest
    pairs: list[tuple[Any, Any]] = [(1, "1"), (None, "null"), (True, "true"), (1.5, "1.5"),
                                    ([], "[]"), ({}, "{}"), (b"ab", "ab")]
    for a, b in pairs:
        assert value_digest(a) != value_digest(b), (a, b)
    assert value_digest({"b": 1, "a": 2}) == value_digest({"a": 2, "b": 1})

