"""Detection that tells a loop from what looks like one: a transient failure retried, a job
whose progress fields move, and a cycle of calls (memory and Redis stores)."""

from __future__ import annotations

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
from tests.stores import test_store_contract
from toolguard._outcomes import is_transient
from toolguard.hashing._normalize import progress_marks
from toolguard.policy._model import LadderOverride, LadderPolicy, ResultPolicy, ToolPolicy
from toolguard.stores import Store
from toolguard.testing import FakeClock

from .test_detection import READONLY, replay, task_for

store = test_store_contract.store  # the fixture: memory and Redis, as in the contract

D = tg.Decision
FLAKY = "Error: 503 Service Unavailable"
ORDER = '{"order_id": "#W1", "status": "delivered"}'


# -- transient failures ------------------------------------------------------------------------
@pytest.mark.parametrize(("content", "transient"), [
    (FLAKY, True), ("HTTP 429 Too Many Requests", True), ("status code: 502", True),
    ("Request timed out after 30 s", True), ("the service is temporarily unavailable", True),
    ("rate limit exceeded, try again later", True),
    ({"error": {"message": "busy", "retryable": True}}, True),
    ('{"error": "quota", "retryable": false, "status": 503}', False),
    ("Error: order not found", False), ("line 503: SyntaxError", False),
    ("FAILED test_x.py - assert 500 == 503", False), (None, False),
])
def test_what_is_transient(content: Any, transient: bool) -> None:
    assert is_transient(content, None) is transient


_TRANSIENT_PIECES = st.sampled_from([
    "http", "HTTP", "status", "Status_Code", "status code", "code", "error", " ", "  ", ":",
    "=", "/", "\t", "\x0b", "\x1c", "\n", "429", "503", "5000", "x", "_", "too many requests",
    "Internal Server Error", "bad gateway", "gateway timeout", "gateway time-out", "rate-limit",
    "ratelimit", "timed out", "time-out", "timeout", "deadline exceeded",
    "connection refused", "try again later", "please retry", "overloaded"])


@given(st.lists(st.one_of(_TRANSIENT_PIECES, st.text(st.characters(max_codepoint=127),
                                                     max_size=6)), max_size=30).map("".join))
@settings(max_examples=500, deadline=None)
def test_an_ascii_error_text_is_transient_on_either_engine_alike(text: str) -> None:
    """ASCII error text from a few dozen characters on is searched by RE2: it finds what
    Python's re finds (spaces such as ``\\x0b`` and ``\\x1c`` included)."""
    from toolguard._outcomes import _transient_regex

    python, re2 = _transient_regex()
    assert re2(text) is (python.search(text) is not None)


def test_exceptions_that_are_transient() -> None:
    class Throttled(Exception):
        status_code = 429

    class Quota(Exception):
        retryable = False

    assert is_transient("x", TimeoutError("slow"))
    assert is_transient("x", ConnectionResetError())
    assert is_transient("x", Throttled())
    assert not is_transient("Error: 503 Service Unavailable", Quota())
    assert not is_transient("x", ValueError("bad date"))


def test_a_flaky_read_retried_is_not_a_loop(store: Store, clock: FakeClock) -> None:
    """tau-bench retail's flaky get_order_details: 503 on some calls, whose description says
    to retry. Each retry runs (with a notice to back off) and none counts as a repeat."""
    task = task_for(store, clock, tg.Policy(tools={
        "get_order_details": ToolPolicy(effect=tg.Effect.READONLY)}))
    args = {"order_id": "#W1"}
    decided = []
    for result in (FLAKY, FLAKY, ORDER, FLAKY, ORDER):
        decided.append(task._replay_call("get_order_details", args, result,
                                         is_error=result is FLAKY))
    assert [r.decision for r in decided] == [D.ALLOW, D.WARN, D.WARN, D.ALLOW, D.WARN]
    assert "back off" in str(decided[1].content) and decided[1].is_error
    assert decided[2].reason == "retry 2 of 3 after a transient error"
    # the order read twice (calls 3 and 5): the ladder sees a second read, not a fifth
    assert decided[4].count == 2 and decided[4].reason == "retry 1 of 3 after a transient error"


def test_transient_retries_have_their_own_budget(store: Store, clock: FakeClock) -> None:
    task = task_for(store, clock, tg.Policy(ladder=LadderPolicy(transient_retries=2),
                                            tools=READONLY.tools))
    decided = replay(task, "status", [({"k": 1}, FLAKY)] * 9, is_error=True)
    # three failures in a row (the first and two retries), then blocked: the blocked
    # attempts are repeats again (readonly ladder: block 4, halt 5)
    assert decided == [D.ALLOW, D.WARN, D.WARN] + [D.BLOCK] * 4 + [D.HALT]


def test_other_failures_keep_the_ladder(store: Store, clock: FakeClock) -> None:
    task = task_for(store, clock, READONLY)
    decided = replay(task, "status", [({"k": 1}, "Error: no such order")] * 5, is_error=True)
    assert decided == [D.ALLOW, D.ALLOW, D.WARN, D.BLOCK, D.HALT]


def test_zero_transient_retries_and_a_tools_own_patterns(store: Store, clock: FakeClock
                                                         ) -> None:
    off = task_for(store, clock, tg.Policy(tools={"status": ToolPolicy(
        effect=tg.Effect.READONLY, ladder=LadderOverride(transient_retries=0))}))
    assert replay(off, "status", [({"k": 1}, FLAKY)] * 3, is_error=True) == [
        D.ALLOW, D.ALLOW, D.WARN]
    own = task_for(store, clock, tg.Policy(tools={"status": ToolPolicy(
        effect=tg.Effect.READONLY, result=ResultPolicy(transient=[r"(?i)warming up"]))}))
    assert replay(own, "status", [({"k": 1}, "Error: index warming up")] * 3,
                  is_error=True) == [D.ALLOW, D.WARN, D.WARN]


def test_a_retried_write_after_a_transient_failure_runs_it_is_never_cached(
        store: Store, clock: FakeClock) -> None:
    """A write that failed transiently left no record: its retry runs (and is the one that
    is remembered), and the retry after it is answered from the cache as any repeat."""
    task = task_for(store, clock, tg.Policy(tools={"pay": ToolPolicy(
        effect=tg.Effect.MUTATING)}))
    ran: list[int] = []

    @tg.mutating
    def pay(amount: int) -> str:
        ran.append(amount)
        if len(ran) == 1:
            raise ConnectionResetError("connection reset by peer")
        return "paid"

    task.guard.register(pay)
    first = task.call("pay", {"amount": 5})
    second = task.call("pay", {"amount": 5})
    third = task.call("pay", {"amount": 5})
    assert (first.is_error, second.decision, third.decision) == (True, D.WARN, D.CACHED)
    assert ran == [5, 5]


def test_a_transient_failure_does_not_grow_a_stagnation_run(store: Store, clock: FakeClock
                                                            ) -> None:
    task = task_for(store, clock, READONLY)
    calls = [({"q": i}, FLAKY) for i in range(8)]
    assert set(replay(task, "search_files", calls, is_error=True)) == {D.ALLOW}


# -- explicit progress ---------------------------------------------------------------------------
@pytest.mark.parametrize("output", [
    lambda i: f"Downloading… {i}% done",
    lambda i: f"{i}/40 files copied",
    lambda i: f"step {i} of 40",
    lambda i: {"job": "j1", "progress": i, "updatedAt": "2024-05-01T12:00:00Z"},
    lambda i: f"processed: {i * 10} records",
])
def test_a_poll_whose_progress_moves_runs_without_a_cap(store: Store, clock: FakeClock,
                                                        output: Any) -> None:
    """Forty back-to-back calls whose progress fields move every time: all allowed, well
    past max_progress_resets (10)."""
    task = task_for(store, clock, READONLY)
    assert set(replay(task, "status", [({"job": "j1"}, output(i)) for i in range(40)])) == {
        D.ALLOW}


def test_a_status_that_changes_is_progress_an_oscillation_is_bounded(
        store: Store, clock: FakeClock) -> None:
    task = task_for(store, clock, tg.Policy(ladder=LadderPolicy(max_progress_resets=3),
                                            tools=READONLY.tools))
    moving = ["queued", "provisioning", "building", "testing", "publishing", "done"]
    assert set(replay(task, "status", [({"job": 1}, {"status": s}) for s in moving])) == {
        D.ALLOW}
    flapping = [{"status": "running" if i % 2 else "pending"} for i in range(12)]
    decided = replay(task, "status", [({"job": 2}, s) for s in flapping])
    assert decided[-1] is D.HALT


def test_an_output_whose_only_change_is_the_clock_stays_bounded(store: Store, clock: FakeClock
                                                                ) -> None:
    task = task_for(store, clock, READONLY)
    calls = [({"job": 1}, f"state: running (checked 2024-05-01T12:00:{i:02d}Z, request "
                          f"{i:08x}-1234-5678-9abc-def012345678)") for i in range(8)]
    assert replay(task, "status", calls)[-1] is D.HALT


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 100), min_size=1, max_size=6), st.text(max_size=30))
def test_progress_marks_follow_the_numbers(values: list[int], noise: str) -> None:
    """Marks of a text differ exactly when its percentages differ (whatever the prose)."""
    text = " ".join(f"{v}%" for v in values)
    clean = "".join(c for c in noise if not c.isdigit() and c not in "%/")
    assert progress_marks(f"{clean} {text}") == tuple(f"{v}%" for v in values)


# -- cycles ----------------------------------------------------------------------------------
def test_an_alternation_of_two_argument_sets_is_a_cycle_not_stagnation(
        store: Store, clock: FakeClock) -> None:
    """search(a), search(b), search(a), ... with the same empty result: two different calls
    repeated, which the repeat ladder stops (warn 3, block 4), never "five different calls"."""
    task = task_for(store, clock, READONLY)
    results = [task._replay_call("search_files", {"q": "ab"[i % 2]}, "[]") for i in range(7)]
    assert [r.decision for r in results] == [D.ALLOW] * 4 + [D.WARN, D.WARN, D.BLOCK]
    assert not any("different" in r.reason for r in results)


@pytest.mark.parametrize("period", [2, 3, 4])
def test_a_cycle_of_calls_without_progress_climbs_the_ladder(store: Store, clock: FakeClock,
                                                             period: int) -> None:
    """A B (C D) A B ... of read-only tools with the same outcomes: each round is a repeat
    of the cycle, so the third round warns, the fourth blocks and the fifth halts."""
    task = task_for(store, clock, tg.Policy(tools={
        f"t{k}": ToolPolicy(effect=tg.Effect.READONLY) for k in range(period)}))
    decided: list[D] = []
    for _ in range(5):
        for k in range(period):
            decided += replay(task, f"t{k}", [({"x": k}, f"same {k}")])
    rounds = [decided[i:i + period] for i in range(0, len(decided), period)]
    assert rounds[:4] == [[D.ALLOW] * period, [D.ALLOW] * period, [D.WARN] * period,
                          [D.BLOCK] * period]
    assert rounds[4][0] is D.HALT


def test_a_cycle_whose_outputs_flip_is_bounded(store: Store, clock: FakeClock) -> None:
    """A B A B where A's output flips between two values each round: the flips are not
    progress fields, so the change stays bounded by max_progress_resets even with B in
    between."""
    task = task_for(store, clock, tg.Policy(ladder=LadderPolicy(max_progress_resets=3),
                                            tools=READONLY.tools))
    decided: list[D] = []
    for i in range(30):
        decided += replay(task, "status", [({"k": 1}, "green" if i % 2 else "amber")])
        decided += replay(task, "search_files", [({"q": 1}, "same")])
        if decided[-1] is D.HALT:
            break
    assert D.HALT in decided
