"""The store contract: every back-end passes these tests unchanged (``store`` is parametrized
over :class:`MemoryStore`, :class:`SQLiteStore` on a real file, and :class:`RedisStore`).

Time is a :class:`FakeClock`: the memory and SQLite stores read it, and every request carries
``now=clock()``, which is what the Redis store compares record expiry against. Differential
property tests at the end run random operation histories through Redis and SQLite beside
memory and require identical answers (``test_matches_memory``).
"""


from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.redis_support import (  # noqa: F401
    REDIS_URL,
    delete_prefix,
    redis_cluster_store,
    redis_prefix,
    redis_store,
)
from toolguard._types import RecordState
from toolguard.stores import (
    ApprovalRecord,
    ApprovalState,
    BeginRequest,
    FinishRequest,
    MemoryStore,
    RetryRequest,
    Snapshot,
    Store,
)
from toolguard.stores.sqlite import SQLiteStore
from toolguard.testing import FakeClock

TASK = "task-1"
KEY = f"{TASK}:pay:s1"


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis),
                        pytest.param("redis-cluster", marks=pytest.mark.redis)])
def store(request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        yield MemoryStore(clock=clock)
    elif request.param == "sqlite":
        sqlite = SQLiteStore(tmp_path / "state.db", clock=clock)
        yield sqlite
        sqlite.close()
    elif request.param == "redis":
        yield request.getfixturevalue("redis_store")
    else:
        yield request.getfixturevalue("redis_cluster_store")


def begin(store: Store, clock: FakeClock, sig: str = "s1", *, tool: str = "pay",
          key: str = "", claim: bool = False, task_scope: bool = False, count: bool = True,
          poll: bool = False, claim_ttl_s: float = 30.0, task: str = TASK,
          call_id: str = "", ttl_s: float = 0.0) -> Snapshot:
    return store.begin(task, BeginRequest(
        tool=tool, signature=sig, idempotency_key=key, claim=claim, task_scope=task_scope,
        count=count, poll=poll, now=clock(), claim_ttl_s=claim_ttl_s, call_id=call_id,
        ttl_s=ttl_s))


def finish(store: Store, clock: FakeClock, sig: str = "s1", *, tool: str = "pay",
           key: str = "", executed: bool = True, success: bool = True, unknown: bool = False,
           mutating: bool = True, digest: str = "d1", store_result: bool = False,
           content: Any = None, release: bool = False, ttl_s: float = 3600.0,
           halt: dict[str, Any] | None = None, call_id: str = "", task: str = TASK,
           outcome: str = "", max_progress_resets: int = 0, transient: bool = False,
           progress: str = "") -> None:
    store.finish(task, FinishRequest(
        tool=tool, signature=sig, idempotency_key=key, executed=executed, success=success,
        unknown=unknown, mutating=mutating, result_digest=digest, store_result=store_result,
        content=content, release=release, ttl_s=ttl_s, now=clock(), halt=halt,
        call_id=call_id, outcome=outcome, max_progress_resets=max_progress_resets,
        transient=transient, progress=progress))


def test_is_a_store(store: Store) -> None:
    assert isinstance(store, Store)


# -- the stagnation rule's run and the cap on progress resets ---------------------------------
def _search(store: Store, clock: FakeClock, sig: str, outcome: str = "0empty",
            digest: str = "d-empty", tool: str = "search") -> Snapshot:
    """One executed read-only call: begin, then finish with ``outcome``."""
    snap = begin(store, clock, sig, tool=tool)
    finish(store, clock, sig, tool=tool, mutating=False, digest=digest, outcome=outcome)
    return snap


def test_stagnation_run_grows_under_other_arguments(store: Store, clock: FakeClock) -> None:
    runs = [_search(store, clock, f"search:q{i}") for i in range(4)]
    assert [(s.stagnation, s.stagnation_outcome) for s in runs] == [
        (0, ""), (1, "0empty"), (2, "0empty"), (3, "0empty")]
    assert runs[-1].stagnation_signature == "search:q0\nsearch:q1\nsearch:q2"
    assert begin(store, clock, "search:q9", tool="search").stagnation == 4
    assert begin(store, clock, "other:x", tool="other").stagnation == 0  # per tool


def test_a_transient_failure_is_no_repeat_and_counts_in_a_row(store: Store,
                                                               clock: FakeClock) -> None:
    for expected in range(3):
        snap = begin(store, clock, "read:o1", tool="read")
        assert (snap.count, snap.transient) == (1, expected)
        finish(store, clock, "read:o1", tool="read", success=False, mutating=False, digest="",
               transient=True)
    snap = begin(store, clock, "read:o1", tool="read")
    finish(store, clock, "read:o1", tool="read", mutating=False, digest="order")
    snap = begin(store, clock, "read:o1", tool="read")
    assert (snap.count, snap.transient) == (2, 0)  # the success ended the streak
    finish(store, clock, "read:o1", tool="read", success=False, mutating=False, digest="")
    assert begin(store, clock, "read:o1", tool="read").count == 3  # other failures repeat


def test_new_progress_fields_restart_the_count_without_the_cap(store: Store,
                                                               clock: FakeClock) -> None:
    """Each output change restarts the count; back to back, only max_progress_resets times,
    unless the change moved progress fields to values the signature never had."""
    for i in range(6):
        snap = begin(store, clock, "poll:j", tool="poll")
        assert snap.count == min(i + 1, 2), i  # each change took the count back to 1
        finish(store, clock, "poll:j", tool="poll", mutating=False, digest=f"d{i}",
               progress=f"p{i}", max_progress_resets=2)
    for i in range(4):  # the output changes, its progress fields go back to earlier values
        snap = begin(store, clock, "poll:j", tool="poll")
        finish(store, clock, "poll:j", tool="poll", mutating=False, digest=f"e{i}",
               progress=f"p{i % 2}", max_progress_resets=2)
    assert begin(store, clock, "poll:j", tool="poll").count == 4  # two resets, then climbs


def test_stagnation_a_cycle_neither_grows_nor_breaks_it(store: Store, clock: FakeClock) -> None:
    """An A/B alternation (and any cycle of up to four calls) is the repeat ladder's to judge:
    two different calls, however often they alternate."""
    for name in ("search:a", "search:b", "search:a", "search:b", "search:a"):
        _search(store, clock, name)
    snap = begin(store, clock, "search:b", tool="search")
    assert (snap.stagnation, snap.stagnation_signature) == (2, "search:a\nsearch:b")
    assert snap.count == 3  # the ladder counts the repeats


def test_stagnation_same_arguments_neither_grow_nor_break_it(store: Store,
                                                            clock: FakeClock) -> None:
    _search(store, clock, "search:a")
    _search(store, clock, "search:b")
    _search(store, clock, "search:b")  # the repeat ladder's business
    assert begin(store, clock, "search:c", tool="search").stagnation == 2


def test_stagnation_restarts_at_another_outcome(store: Store, clock: FakeClock) -> None:
    for i in range(3):
        _search(store, clock, f"search:q{i}")
    _search(store, clock, "search:q3", outcome="rfound", digest="d-found")
    snap = begin(store, clock, "search:q4", tool="search")
    assert (snap.stagnation, snap.stagnation_outcome) == (1, "rfound")


def test_stagnation_restarts_at_progress(store: Store, clock: FakeClock) -> None:
    for i in range(3):
        _search(store, clock, f"search:q{i}")
    begin(store, clock, "write:a", tool="write")
    finish(store, clock, "write:a", tool="write", digest="w1")  # a write: progress
    assert begin(store, clock, "search:q3", tool="search").stagnation == 0
    store.new_turn(TASK)
    assert begin(store, clock, "search:q4", tool="search").stagnation == 0


def test_a_call_the_rule_does_not_count_leaves_the_run(store: Store, clock: FakeClock) -> None:
    for i in range(2):
        _search(store, clock, f"search:q{i}")
    _search(store, clock, "search:poll", outcome="")  # a poll, an unknown outcome
    assert begin(store, clock, "search:q5", tool="search").stagnation == 2


def test_errors_form_runs_too(store: Store, clock: FakeClock) -> None:
    for i in range(3):
        begin(store, clock, f"book:{i}", tool="book")
        finish(store, clock, f"book:{i}", tool="book", success=False, digest="",
               outcome="eSameError")
    snap = begin(store, clock, "book:9", tool="book")
    assert (snap.stagnation, snap.stagnation_outcome) == (3, "eSameError")


def _poll_changing(store: Store, clock: FakeClock, n: int, cap: int, sig: str = "date:x"
                   ) -> list[int]:
    counts = []
    for i in range(n):
        counts.append(begin(store, clock, sig, tool="date").count)
        finish(store, clock, sig, tool="date", mutating=False, digest=f"out{i}",
               max_progress_resets=cap)
    return counts


def test_progress_resets_are_capped_back_to_back(store: Store, clock: FakeClock) -> None:
    # an output that changes every time restarts the count only max_progress_resets times
    assert _poll_changing(store, clock, 7, cap=3) == [1, 2, 2, 2, 2, 3, 4]


def test_no_cap_keeps_every_reset(store: Store, clock: FakeClock) -> None:
    assert _poll_changing(store, clock, 6, cap=0) == [1, 2, 2, 2, 2, 2]


def test_another_call_in_between_restarts_the_resets(store: Store, clock: FakeClock) -> None:
    counts = []
    for i in range(8):
        if i % 2:
            begin(store, clock, "other:y", tool="other")  # the agent did something else
        counts.append(begin(store, clock, "date:x", tool="date").count)
        finish(store, clock, "date:x", tool="date", mutating=False, digest=f"out{i}",
               max_progress_resets=2)
    assert max(counts) == 2


# -- counting ---------------------------------------------------------------------------
def test_first_call_snapshot(store: Store, clock: FakeClock) -> None:
    snap = begin(store, clock)
    assert snap == Snapshot(halted=None, epoch=0, calls=1, tool_calls=1,
                            consecutive_failures=0, tokens=0, started_at=clock(), count=1,
                            polls=0, record=None, approval=None, claimed=False)


def test_repeats_count_per_signature_and_tool(store: Store, clock: FakeClock) -> None:
    assert [begin(store, clock).count for _ in range(3)] == [1, 2, 3]
    other = begin(store, clock, "s2")
    assert (other.count, other.calls, other.tool_calls) == (1, 4, 4)
    grep = begin(store, clock, "s1", tool="grep")  # same signature text, other tool
    assert (grep.count, grep.calls, grep.tool_calls) == (4, 5, 1)


def test_uncounted_begin_reads_without_counting(store: Store, clock: FakeClock) -> None:
    snap = begin(store, clock, count=False)
    assert (snap.count, snap.calls, snap.tool_calls) == (1, 0, 0)
    begin(store, clock)
    begin(store, clock)
    snap = begin(store, clock, count=False)
    assert (snap.count, snap.calls, snap.tool_calls) == (2, 2, 2)
    assert store.usage(TASK).per_tool == {"pay": 2}


def test_polls_count_separately(store: Store, clock: FakeClock) -> None:
    snaps = [begin(store, clock, poll=True) for _ in range(3)]
    assert [(s.count, s.polls) for s in snaps] == [(1, 1), (1, 2), (1, 3)]
    assert snaps[-1].calls == 3
    assert (begin(store, clock).count, begin(store, clock).polls) == (1, 3)


def test_started_at_is_the_first_begin(store: Store, clock: FakeClock) -> None:
    start = clock()
    begin(store, clock)
    clock.advance(42.5)
    assert begin(store, clock).started_at == start


def test_tasks_are_isolated(store: Store, clock: FakeClock) -> None:
    begin(store, clock, key=KEY, claim=True)
    begin(store, clock)
    store.set_halted(TASK, {"kind": "Halt", "reason": "x"})
    other = begin(store, clock, key="task-2:pay:s1", claim=True, task="task-2")
    assert (other.count, other.calls, other.halted, other.claimed) == (1, 1, None, True)
    assert store.get_record("task-2", KEY, clock()) is None


# -- progress ---------------------------------------------------------------------------
def test_progress_a_new_mutating_result_moves_the_epoch(store: Store, clock: FakeClock) -> None:
    begin(store, clock, "s2")
    begin(store, clock, "s2")
    begin(store, clock)
    assert begin(store, clock).count == 2
    finish(store, clock, digest="d1")
    assert store.usage(TASK).epoch == 1
    assert begin(store, clock).count == 2  # the progressing call was the first of epoch 1
    assert begin(store, clock, "s2").count == 1  # every other count restarted
    finish(store, clock, digest="d1")  # the same (signature, result) again: no progress
    assert store.usage(TASK).epoch == 1
    assert begin(store, clock).count == 3


def test_progress_a_needs_a_mutating_success(store: Store, clock: FakeClock) -> None:
    begin(store, clock)
    finish(store, clock, mutating=False, digest="d1")
    finish(store, clock, success=False, digest="d2")
    finish(store, clock, digest="")
    finish(store, clock, executed=False, digest="d3")
    assert store.usage(TASK).epoch == 0
    assert begin(store, clock).count == 2


def test_progress_b_a_changed_result_restarts_the_count(store: Store, clock: FakeClock) -> None:
    for _ in range(3):
        begin(store, clock)
    finish(store, clock, mutating=False, digest="d1")  # first result: nothing to compare
    assert begin(store, clock).count == 4
    finish(store, clock, mutating=False, digest="d1")
    assert begin(store, clock).count == 5
    finish(store, clock, mutating=False, digest="d2")
    assert begin(store, clock).count == 2
    assert store.usage(TASK).epoch == 0


def test_last_result_survives_a_new_epoch(store: Store, clock: FakeClock) -> None:
    begin(store, clock)
    finish(store, clock, mutating=False, digest="d1")
    store.new_turn(TASK)
    begin(store, clock)
    assert begin(store, clock).count == 2
    finish(store, clock, mutating=False, digest="d2")  # differs from the previous epoch's
    assert begin(store, clock).count == 2


def test_new_turn_restarts_counts(store: Store, clock: FakeClock) -> None:
    begin(store, clock)
    begin(store, clock, poll=True)
    assert begin(store, clock).count == 2
    store.new_turn(TASK)
    snap = begin(store, clock)
    assert (snap.epoch, snap.count, snap.polls, snap.calls) == (1, 1, 0, 4)
    store.new_turn("fresh-task")
    assert store.usage("fresh-task").epoch == 1


def test_consecutive_failures_per_tool(store: Store, clock: FakeClock) -> None:
    finish(store, clock, success=False, digest="")
    finish(store, clock, success=False, digest="")
    finish(store, clock, tool="grep", success=False, digest="")
    finish(store, clock, executed=False, success=False, digest="")  # not executed: no change
    assert begin(store, clock).consecutive_failures == 2
    assert begin(store, clock, tool="grep").consecutive_failures == 1
    finish(store, clock, digest="d1")
    assert begin(store, clock).consecutive_failures == 0


# -- idempotency records ----------------------------------------------------------------
def test_claim_is_exclusive(store: Store, clock: FakeClock) -> None:
    first = begin(store, clock, key=KEY, claim=True)
    assert (first.claimed, first.record) == (True, None)
    second = begin(store, clock, key=KEY, claim=True)
    assert second.claimed is False
    assert second.record is not None
    assert (second.record.state, second.record.epoch, second.record.created_at,
            second.record.content, second.record.call_id) == (
        RecordState.IN_PROGRESS, 0, clock(), None, "")
    assert store.get_record(TASK, KEY, clock()) == second.record


def test_concurrent_claims_one_winner(store: Store, clock: FakeClock) -> None:
    n = 8
    barrier = threading.Barrier(n)
    snaps: list[Snapshot] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait(timeout=10)
        snap = begin(store, clock, key=KEY, claim=True)
        with lock:
            snaps.append(snap)

    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert sum(s.claimed for s in snaps) == 1
    # the others are duplicates of a call running right now: the same call, not repeats
    assert [s.count for s in snaps] == [1] * n
    assert sorted(s.calls for s in snaps) == list(range(1, n + 1))  # budgets count them all


def test_a_duplicate_of_a_running_call_is_not_a_repeat(store: Store, clock: FakeClock) -> None:
    assert begin(store, clock, key=KEY, claim=True).claimed
    duplicate = begin(store, clock, key=KEY, claim=True)
    assert (duplicate.claimed, duplicate.count, duplicate.calls) == (False, 1, 2)
    finish(store, clock, key=KEY, success=False, release=True)  # the running call failed
    retry = begin(store, clock, key=KEY, claim=True)  # a sequential retry is a repeat
    assert (retry.claimed, retry.count) == (True, 2)


def test_claim_expires_after_claim_ttl(store: Store, clock: FakeClock) -> None:
    """``ttl_s`` 0 (a caller that keeps no records): the claim lapses at its TTL."""
    begin(store, clock, key=KEY, claim=True, claim_ttl_s=5.0)
    clock.advance(4.5)
    assert begin(store, clock, key=KEY, claim=True).claimed is False
    clock.advance(0.5)
    assert store.get_record(TASK, KEY, clock()) is None
    assert begin(store, clock, key=KEY, claim=True, claim_ttl_s=5.0).claimed is True


def test_a_claim_never_finished_becomes_an_unknown_outcome(store: Store, clock: FakeClock
                                                            ) -> None:
    """Claimed and never finished within its TTL: the call may have happened, so the key
    reads as unknown (for the idempotency TTL), never as free for a second run."""
    def claim(call_id: str = "t#2") -> Snapshot:
        return begin(store, clock, key=KEY, claim=True, claim_ttl_s=5.0, ttl_s=60.0,
                     call_id=call_id)

    start = clock()
    assert claim("t#1").claimed
    clock.advance(4.5)
    running = claim()
    assert not running.claimed and running.record is not None
    assert (running.record.state, running.count) == (RecordState.IN_PROGRESS, 1)
    clock.advance(0.5)
    record = store.get_record(TASK, KEY, clock())
    assert record is not None
    assert (record.state, record.epoch, record.created_at, record.content, record.call_id) == (
        RecordState.UNKNOWN, 0, start + 5.0, None, "t#1")
    for _ in range(2):  # every identical call finds it, even the claim's own call id
        for call_id in ("t#2", "t#1"):
            retry = claim(call_id)
            assert not retry.claimed and retry.record == record
    assert claim().count == 6  # not a duplicate of a running call: a repeat
    finish(store, clock, "s2", key=f"{TASK}:pay:s2", store_result=True, content=1)  # a write
    store.new_turn(TASK)
    clock.advance(59.5)  # kept for the idempotency TTL, from the end of the claim's
    assert claim().record == record
    clock.advance(0.5)
    assert store.get_record(TASK, KEY, clock()) is None
    assert claim().claimed


def test_an_approved_retry_takes_the_claim_of_an_unknown_outcome(store: Store,
                                                                 clock: FakeClock) -> None:
    """retry_unknown: the unknown outcome of the expected call becomes the retry's claim and
    the approval is spent, once; any other record is left alone."""
    used = ApprovalRecord(ApprovalState.USED, clock(), tool="pay", args_hash="h")

    def retry(origin: str, call_id: str) -> bool:
        return store.retry_unknown(TASK, RetryRequest(KEY, origin, call_id, used, clock(),
                                                      5.0, 60.0))

    assert not retry("t#1", "t#2")  # no record
    assert begin(store, clock, key=KEY, claim=True, claim_ttl_s=5.0, ttl_s=60.0,
                 call_id="t#1").claimed
    assert not retry("t#1", "t#2")  # still running
    clock.advance(5.0)  # its claim's TTL passed: unknown
    assert not retry("t#0", "t#2")  # another call's unknown outcome
    assert retry("t#1", "t#2")
    assert store.approvals(TASK)[KEY] == used
    assert not retry("t#1", "t#3")  # taken: the other retry waits
    running = begin(store, clock, key=KEY, claim=True, claim_ttl_s=5.0, ttl_s=60.0,
                    call_id="t#3")
    assert running.record is not None and not running.claimed
    assert (running.record.state, running.record.call_id) == (RecordState.IN_PROGRESS, "t#2")
    clock.advance(5.0)  # the retry never reported: unknown again, its own
    record = store.get_record(TASK, KEY, clock())
    assert record is not None
    assert (record.state, record.call_id) == (RecordState.UNKNOWN, "t#2")
    assert retry("t#2", "t#4")
    finish(store, clock, key=KEY, store_result=True, content="paid", call_id="t#4")
    assert not retry("t#2", "t#5")  # completed


def test_a_claim_past_its_ttl_may_still_report(store: Store, clock: FakeClock) -> None:
    """The claim's own call reports late: its result completes the record; a release (it
    failed, it never ran) drops it; another call's release leaves it unknown."""
    assert begin(store, clock, key=KEY, claim=True, claim_ttl_s=5.0, ttl_s=60.0,
                 call_id="t#1").claimed
    clock.advance(6.0)
    finish(store, clock, key=KEY, success=False, release=True, call_id="t#2", digest="")
    record = store.get_record(TASK, KEY, clock())
    assert record is not None and record.state is RecordState.UNKNOWN
    finish(store, clock, key=KEY, success=False, release=True, call_id="t#1", digest="")
    assert store.get_record(TASK, KEY, clock()) is None
    assert begin(store, clock, key=KEY, claim=True, claim_ttl_s=5.0, ttl_s=60.0,
                 call_id="t#3").claimed
    clock.advance(6.0)
    finish(store, clock, key=KEY, store_result=True, content="paid", call_id="t#3")
    record = store.get_record(TASK, KEY, clock())
    assert record is not None
    assert (record.state, record.content, record.call_id) == (
        RecordState.COMPLETED, "paid", "t#3")


def test_completed_record(store: Store, clock: FakeClock) -> None:
    content = {"id": 7, "ok": True, "items": [1, 2.5, None, "x", {"nested": []}], "none": None}
    begin(store, clock, key=KEY, claim=True)
    clock.advance(1.0)
    finish(store, clock, key=KEY, store_result=True, content=content, release=True,
           call_id="task-1#1")
    record = store.get_record(TASK, KEY, clock())
    assert record is not None
    assert (record.state, record.epoch, record.created_at, record.content, record.call_id) == (
        RecordState.COMPLETED, 1, clock(), content, "task-1#1")  # epoch after the progress
    snap = begin(store, clock, key=KEY, claim=True)
    assert (snap.record, snap.claimed) == (record, False)


@pytest.mark.parametrize("content", ["text", "", 0, -3, 2**62, 1.25, True, False, None, [],
                                     {}, ["a", [1, {"b": None}]], {"k": {"v": [1.5, "é"]}}])
def test_record_content_round_trips(store: Store, clock: FakeClock, content: Any) -> None:
    finish(store, clock, key=KEY, store_result=True, content=content)
    record = store.get_record(TASK, KEY, clock())
    assert record is not None
    assert record.content == content
    assert type(record.content) is type(content)


def test_completed_record_expires_after_ttl(store: Store, clock: FakeClock) -> None:
    finish(store, clock, key=KEY, store_result=True, content="done", ttl_s=10.0)
    clock.advance(9.5)
    assert begin(store, clock, key=KEY, claim=True).record is not None
    clock.advance(0.5)
    assert store.get_record(TASK, KEY, clock()) is None
    assert begin(store, clock, key=KEY, claim=True).claimed is True


def test_until_change_record_lapses_at_progress(store: Store, clock: FakeClock) -> None:
    finish(store, clock, key=KEY, store_result=True, content="done")
    assert store.usage(TASK).epoch == 1
    store.new_turn(TASK)
    assert begin(store, clock, key=KEY).record is None
    kept = begin(store, clock, key=KEY, task_scope=True).record  # scope "task" survives
    assert kept is not None
    assert kept.content == "done"
    # get_record does not apply the epoch rule: the lapsed record is still stored ...
    assert store.get_record(TASK, KEY, clock()) == kept
    # ... until a claim replaces it.
    assert begin(store, clock, key=KEY, claim=True).claimed is True
    record = store.get_record(TASK, KEY, clock())
    assert record is not None
    assert (record.state, record.epoch) == (RecordState.IN_PROGRESS, 2)


def test_until_change_record_lapses_at_any_other_write(store: Store, clock: FakeClock) -> None:
    """Restoring a backup repeats an earlier output: no progress for the ladder (the epoch
    stays), but the remembered edit must run again on the restored file."""
    finish(store, clock, "restore", digest="ok")  # first restore: progress, epoch 1
    finish(store, clock, key=KEY, store_result=True, content="edited")  # the edit
    epoch = store.usage(TASK).epoch
    assert begin(store, clock, key=KEY).record is not None  # remembered
    finish(store, clock, "restore", digest="ok")  # the same restore, the same output
    assert store.usage(TASK).epoch == epoch  # not progress ...
    assert begin(store, clock, key=KEY).record is None  # ... but the edit's record lapsed
    assert begin(store, clock, key=KEY, task_scope=True).record is not None
    finish(store, clock, "read", digest="x", mutating=False)  # reads change nothing
    finish(store, clock, key=KEY, store_result=True, content="edited again")
    finish(store, clock, "read", digest="x", mutating=False)
    assert begin(store, clock, key=KEY).record is not None


def test_a_call_that_waited_takes_the_record_a_later_write_lapsed(store: Store,
                                                                  clock: FakeClock) -> None:
    """Concurrent duplicates are one call: a call that waited on an identical call in
    progress re-enters uncounted and takes its completed record, even when an unrelated write
    finished in between (else the charge runs twice)."""
    assert begin(store, clock, key=KEY, claim=True).claimed  # the first charge runs
    waiting = begin(store, clock, key=KEY, claim=True).record
    assert waiting is not None and waiting.state is RecordState.IN_PROGRESS
    finish(store, clock, key=KEY, store_result=True, content="charged")
    finish(store, clock, "log", key=f"{TASK}:log:s", digest="logged")  # a write meanwhile
    again = begin(store, clock, key=KEY, claim=True, count=False)  # the waiter re-enters
    assert again.record is not None and again.record.content == "charged"
    assert not again.claimed
    fresh = begin(store, clock, key=KEY, claim=True)  # a new call after the write: lapsed
    assert fresh.claimed


def test_a_retried_begin_recognises_its_own_claim(store: Store, clock: FakeClock) -> None:
    """Redis ran a begin whose reply was lost; redis-py sends it again. The claim is the
    call's own (same call id), so it must not wait on itself; another call still waits."""
    def claim(call_id: str) -> Snapshot:
        return store.begin(TASK, BeginRequest(
            tool="pay", signature="s1", idempotency_key=KEY, claim=True, task_scope=False,
            count=True, poll=False, now=clock(), claim_ttl_s=30.0, call_id=call_id))

    assert claim("t#1@aa").claimed
    again = claim("t#1@aa")
    assert again.claimed and again.record is None
    other = claim("t#1@bb")  # the same number from another task handle
    assert not other.claimed and other.record is not None
    assert other.record.state is RecordState.IN_PROGRESS


def test_in_progress_and_unknown_records_survive_progress(store: Store, clock: FakeClock
                                                          ) -> None:
    begin(store, clock, key=KEY, claim=True)
    finish(store, clock, "s2", key=f"{TASK}:pay:s2", unknown=True, success=False, digest="",
           call_id="task-1#2")
    store.new_turn(TASK)
    claim = begin(store, clock, key=KEY, claim=True)
    assert claim.record is not None
    assert (claim.record.state, claim.claimed) == (RecordState.IN_PROGRESS, False)
    unknown = begin(store, clock, "s2", key=f"{TASK}:pay:s2", claim=True)
    assert unknown.record is not None
    assert (unknown.record.state, unknown.record.epoch, unknown.record.content,
            unknown.record.call_id, unknown.claimed) == (
        RecordState.UNKNOWN, 0, None, "task-1#2", False)


def test_store_result_beats_unknown_beats_release(store: Store, clock: FakeClock) -> None:
    begin(store, clock, key=KEY, claim=True)
    finish(store, clock, key=KEY, store_result=True, unknown=True, release=True, content=1)
    record = store.get_record(TASK, KEY, clock())
    assert record is not None
    assert record.state is RecordState.COMPLETED
    finish(store, clock, key=KEY, unknown=True, release=True, digest="")
    record = store.get_record(TASK, KEY, clock())
    assert record is not None
    assert record.state is RecordState.UNKNOWN


def test_release_drops_only_a_claim(store: Store, clock: FakeClock) -> None:
    begin(store, clock, key=KEY, claim=True)
    finish(store, clock, key=KEY, executed=False, release=True, digest="")
    assert store.get_record(TASK, KEY, clock()) is None
    assert begin(store, clock, key=KEY, claim=True).claimed is True
    finish(store, clock, key=KEY, store_result=True, content="done")
    finish(store, clock, key=KEY, executed=False, release=True, digest="")
    record = store.get_record(TASK, KEY, clock())
    assert record is not None
    assert record.state is RecordState.COMPLETED


def test_release_drops_only_its_own_claim(store: Store, clock: FakeClock) -> None:
    """A call whose claim expired under it must not drop the claim an identical call took
    since: the third identical call would run alongside the second."""
    first = store.begin(TASK, BeginRequest("pay", "s1", KEY, True, False, True, False,
                                           clock(), 10.0, "t#1"))
    assert first.claimed
    clock.advance(11)  # the first call is still running; its claim expired
    second = store.begin(TASK, BeginRequest("pay", "s1", KEY, True, False, True, False,
                                            clock(), 10.0, "t#2"))
    assert second.claimed
    finish(store, clock, key=KEY, success=False, release=True, call_id="t#1")  # first fails
    third = begin(store, clock, key=KEY, claim=True)
    assert not third.claimed  # the second call's claim stands
    finish(store, clock, key=KEY, success=False, release=True, call_id="t#2")
    assert begin(store, clock, key=KEY, claim=True).claimed


def test_no_key_no_record(store: Store, clock: FakeClock) -> None:
    snap = begin(store, clock, key="", claim=True)
    assert (snap.claimed, snap.record, snap.approval) == (False, None, None)
    finish(store, clock, key="", store_result=True, content="x")
    assert store.get_record(TASK, "", clock()) is None


# -- halt, usage, approvals, clearing ---------------------------------------------------
def test_halted_flag(store: Store, clock: FakeClock) -> None:
    halt = {"kind": "RepeatedToolCalls", "reason": "looped", "tool": "pay", "count": 4}
    finish(store, clock, executed=False, digest="", halt=halt)
    assert begin(store, clock).halted == halt
    assert store.usage(TASK).halted == halt
    finish(store, clock, digest="d1")  # halt=None leaves the flag alone
    assert store.usage(TASK).halted == halt
    store.set_halted(TASK, None)
    assert begin(store, clock).halted is None
    store.set_halted(TASK, {"kind": "BudgetExceeded", "reason": "tokens"})
    assert store.usage(TASK).halted == {"kind": "BudgetExceeded", "reason": "tokens"}


def test_usage(store: Store, clock: FakeClock) -> None:
    assert store.usage("never-seen").started_at is None
    assert store.usage("never-seen").tool_calls == 0
    start = clock()
    assert store.add_usage(TASK, 100, 20, clock()) == 120
    clock.advance(3.0)
    assert store.add_usage(TASK, 5, 0, clock()) == 125
    begin(store, clock)
    begin(store, clock, tool="grep")
    begin(store, clock, tool="grep", poll=True)
    begin(store, clock, count=False, tool="view")
    finish(store, clock, digest="d1")
    usage = store.usage(TASK)
    assert (usage.tool_calls, usage.per_tool, usage.input_tokens, usage.output_tokens,
            usage.started_at, usage.epoch, usage.halted) == (
        3, {"pay": 1, "grep": 2}, 105, 20, start, 1, None)
    assert begin(store, clock).tokens == 125


def test_cost_adds_exactly_per_task_and_per_tool(store: Store, clock: FakeClock) -> None:
    start = clock()
    assert store.usage(TASK).cost_nusd == 0
    assert store.add_cost(TASK, 7_500_000, 0, "", clock()) == (7_500_000, 0)
    clock.advance(1.0)
    assert store.add_cost(TASK, 1, 0, "summarize", clock()) == (7_500_001, 1)
    assert store.add_cost(TASK, 2**40, 0, "summarize", clock()) == (
        7_500_001 + 2**40, 1 + 2**40)
    assert store.add_cost(TASK, 0, 120, "web", clock()) == (7_500_001 + 2**40, 0)
    usage = store.usage(TASK)
    assert (usage.cost_nusd, usage.cost_per_tool, usage.unpriced_tokens, usage.started_at,
            usage.per_tool) == (7_500_001 + 2**40, {"summarize": 1 + 2**40, "web": 0}, 120,
                                start, {})
    store.clear_task(TASK)
    assert store.usage(TASK).cost_nusd == 0
    assert store.usage(TASK).cost_per_tool == {}


def test_approvals(store: Store, clock: FakeClock) -> None:
    pending = ApprovalRecord(ApprovalState.PENDING, clock(), "needs a human", "pay",
                             {"amount": 12.5, "to": "acme", "meta": {"ids": [1, 2]}})
    store.set_approval(TASK, KEY, pending, 3600.0)
    store.set_approval(TASK, f"{TASK}:pay:s9", ApprovalRecord(ApprovalState.REJECTED, 0.0,
                                                              "no"), 3600.0)
    assert store.pending_approvals(TASK) == {KEY: pending}
    assert begin(store, clock, key=KEY).approval == pending
    assert begin(store, clock, key="").approval is None
    approved = ApprovalRecord(ApprovalState.APPROVED, pending.requested_at, "", "pay",
                              pending.args)
    store.set_approval(TASK, KEY, approved, 3600.0)
    assert store.pending_approvals(TASK) == {}
    assert begin(store, clock, key=KEY, claim=True).approval == approved
    assert store.pending_approvals("task-2") == {}
    assert store.approvals(TASK) == {KEY: approved, f"{TASK}:pay:s9": ApprovalRecord(
        ApprovalState.REJECTED, 0.0, "no")}
    signed = ApprovalRecord(ApprovalState.APPROVED, 0.0, "", "pay", {"a": 1}, "h", "p" * 64)
    store.set_approval(TASK, KEY, signed, 3600.0)
    assert store.approvals(TASK)[KEY] == signed == begin(store, clock, key=KEY).approval


def test_clear_task(store: Store, clock: FakeClock) -> None:
    for task in (TASK, "task-2"):
        begin(store, clock, key=f"{task}:pay:s1", claim=True, task=task)
        finish(store, clock, "s2", key=f"{task}:pay:s2", store_result=True, content="x",
               task=task)
        store.add_usage(task, 1, 1, clock())
        store.set_approval(task, f"{task}:pay:s3", ApprovalRecord(ApprovalState.PENDING, 0.0),
                           60.0)
        store.set_halted(task, {"kind": "Halt"})
    store.clear_task(TASK)
    usage = store.usage(TASK)
    assert (usage.tool_calls, usage.input_tokens, usage.epoch, usage.halted,
            usage.started_at) == (0, 0, 0, None, None)
    assert store.get_record(TASK, f"{TASK}:pay:s1", clock()) is None
    assert store.get_record(TASK, f"{TASK}:pay:s2", clock()) is None
    assert store.pending_approvals(TASK) == {}
    assert begin(store, clock).count == 1
    assert store.usage("task-2").halted == {"kind": "Halt"}
    assert store.get_record("task-2", "task-2:pay:s2", clock()) is not None
    store.clear_task("never-seen")


def test_memory_records_are_bounded_least_recently_used_first(clock: FakeClock) -> None:
    # the in-memory store's own bound (Redis expires keys by TTL only)
    store = MemoryStore(max_entries=3, clock=clock)
    keys = [f"{TASK}:pay:s{i}" for i in range(4)]
    for key in keys[:3]:
        finish(store, clock, key=key, store_result=True, content=key)
    assert store.get_record(TASK, keys[0], clock()) is not None  # s0 is now the most recent
    finish(store, clock, key=keys[3], store_result=True, content=keys[3])
    assert [store.get_record(TASK, k, clock()) is not None for k in keys] == [
        True, False, True, True]
    clock.advance(3600.0)  # the TTL (finish's ttl_s): a record read at its expiry is gone
    assert all(store.get_record(TASK, k, clock()) is None for k in keys)


# -- differential: Redis answers exactly as memory on random histories -------------------
_SIGS = st.sampled_from(["s1", "s2"])
_MOSTLY = st.sampled_from([True, True, True, False])
_OPS = st.one_of(
    st.tuples(st.just("begin"), _SIGS, _MOSTLY, st.booleans(), st.booleans(), _MOSTLY,
              st.booleans(), st.sampled_from([0.0, 7.5])),
    st.tuples(st.just("finish"), _SIGS, _MOSTLY, _MOSTLY, st.booleans(),
              st.sampled_from(["", "d1", "d2", "d3"]),
              st.sampled_from(["store", "unknown", "release", "none"])),
    st.tuples(st.just("advance"), st.sampled_from([0.5, 2.5, 5.0, 10.0])),
    st.tuples(st.just("new_turn")),
    st.tuples(st.just("halt"), st.booleans()),
    st.tuples(st.just("usage"), st.integers(0, 50)),
    st.tuples(st.just("judged"), _SIGS, st.booleans(), st.sampled_from(["", "d1", "d2"]),
              st.sampled_from(["", "0a", "eb"]), st.sampled_from([0, 1, 2]), st.booleans(),
              st.sampled_from(["", "p1", "p2"])),
)


def _apply(store: Store, clock: FakeClock, op: tuple[Any, ...]) -> Any:
    name = op[0]
    if name == "begin":
        _, sig, keyed, claim, scope, count, poll, ttl_s = op
        return begin(store, clock, sig, key=f"{TASK}:pay:{sig}" if keyed else "", claim=claim,
                     task_scope=scope, count=count, poll=poll, claim_ttl_s=10.0,
                     call_id=sig, ttl_s=ttl_s)
    if name == "finish":
        _, sig, executed, success, mutating, digest, outcome = op
        finish(store, clock, sig, key=f"{TASK}:pay:{sig}", executed=executed, success=success,
               mutating=mutating, digest=digest, store_result=outcome == "store",
               unknown=outcome == "unknown", release=outcome == "release", content=[sig],
               ttl_s=10.0, call_id=sig)
        return [store.get_record(TASK, f"{TASK}:pay:{s}", clock()) for s in ("s1", "s2")]
    if name == "judged":  # stagnation outcomes, progress resets, transient failures
        _, sig, success, digest, outcome, cap, transient, progress = op
        finish(store, clock, sig, mutating=False, success=success, digest=digest,
               outcome=outcome, max_progress_resets=cap, transient=transient and not success,
               progress=progress)
        return None
    if name == "advance":
        clock.advance(op[1])
        return None
    if name == "new_turn":
        store.new_turn(TASK)
        return None
    if name == "halt":
        store.set_halted(TASK, {"kind": "Halt"} if op[1] else None)
        return None
    return store.add_usage(TASK, op[1], 1, clock()), store.usage(TASK)


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def other(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[FakeClock], Any]:
    """Makes a back-end to run beside memory on a clock of its own: SQLite on a file, or
    Redis (each Hypothesis example makes one, clears its task and closes it)."""
    if request.param == "sqlite":
        return lambda clock: SQLiteStore(tmp_path / "state.db", clock=clock)
    from toolguard.stores.redis import RedisStore

    prefix = request.getfixturevalue("redis_prefix")
    return lambda clock: RedisStore(url=REDIS_URL, key_prefix=prefix, timeout_s=5.0)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_OPS, min_size=5, max_size=30))
def test_matches_memory(other: Callable[[FakeClock], Any], ops: list[tuple[Any, ...]]) -> None:
    clock, memory_clock = FakeClock(1_000_000.0), FakeClock(1_000_000.0)
    store, memory = other(clock), MemoryStore(clock=memory_clock)
    try:
        for op in ops:
            assert _apply(store, clock, op) == _apply(memory, memory_clock, op), op
    finally:
        store.clear_task(TASK)
        store.close()
