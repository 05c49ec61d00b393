"""The pure decision core on synthetic contexts and snapshots, without the engine."""

from __future__ import annotations

import pytest

import toolguard as tg
from toolguard._types import RecordState
from toolguard.engine._core import CallContext, decide
from toolguard.policy._model import BudgetPolicy, LadderOverride, ToolPolicy
from toolguard.stores import ApprovalRecord, ApprovalState, IdempotencyRecord, Snapshot
from toolguard.tools._decorators import recorded_tool
from toolguard.tools._resolve import resolve_tool

D = tg.Decision


def ctx(effect: tg.Effect = tg.Effect.READONLY, *, policy: tg.Policy | None = None,
        invalid: str | None = None, now: float = 100.0, tool: str = "t") -> CallContext:
    policy = policy or tg.Policy()
    settings = resolve_tool(policy, recorded_tool(tool))
    return CallContext(task_id="task", tool=tool, settings=settings, effect=effect,
                       args_hash="h", idempotency_key=f"task:{tool}:h", invalid=invalid,
                       budget=policy.budget, approval_timeout_s=policy.approval.timeout_s,
                       now=now, denied=settings.deny)


SNAP = Snapshot(halted=None, epoch=0, calls=1, tool_calls=1, consecutive_failures=0, tokens=0,
                started_at=0.0, count=1, polls=0, record=None, approval=None, claimed=False)


@pytest.mark.parametrize(
    ("effect", "expected"),
    [
        (tg.Effect.READONLY, [D.ALLOW, D.ALLOW, D.WARN, D.BLOCK, D.HALT]),
        (tg.Effect.MUTATING, [D.ALLOW, D.WARN, D.BLOCK, D.HALT, D.HALT]),
    ],
)
def test_ladder_default_thresholds(effect: tg.Effect, expected: list[tg.Decision]) -> None:
    got = [decide(ctx(effect), SNAP._replace(count=n)).decision for n in range(1, 6)]
    assert got == expected


def test_warn_notice_names_tool_and_count() -> None:
    v = decide(ctx(tg.Effect.READONLY, tool="grep"), SNAP._replace(count=3))
    assert v.decision is D.WARN
    assert v.notice is not None and "grep" in v.notice and "3 times" in v.notice


def test_halt_is_repeated_tool_calls() -> None:
    v = decide(ctx(tg.Effect.MUTATING), SNAP._replace(count=4))
    assert v.halt is tg.RepeatedToolCalls


def test_poll_is_exempt_from_ladder_but_limited_by_max_polls() -> None:
    policy = tg.Policy(default_max_polls=3)
    assert decide(ctx(tg.Effect.POLL, policy=policy),
                  SNAP._replace(count=50, polls=3)).decision is D.ALLOW
    v = decide(ctx(tg.Effect.POLL, policy=policy), SNAP._replace(polls=4))
    assert v.decision is D.HALT and v.halt is tg.BudgetExceeded and v.budget == "max_polls"


def test_per_tool_ladder_override_merges_with_effect_defaults() -> None:
    policy = tg.Policy(tools={"t": ToolPolicy(ladder=LadderOverride(block_at=2, warn_at=2))})
    assert decide(ctx(tg.Effect.MUTATING, policy=policy),
                  SNAP._replace(count=2)).decision is D.BLOCK
    assert decide(ctx(tg.Effect.MUTATING, policy=policy),
                  SNAP._replace(count=4)).decision is D.HALT


@pytest.mark.parametrize(
    ("budget", "snap_update", "name"),
    [
        (BudgetPolicy(max_tool_calls=5), {"calls": 6}, "max_tool_calls"),
        (BudgetPolicy(max_tokens=100), {"tokens": 101}, "max_tokens"),
        (BudgetPolicy(timeout_s=10), {"started_at": 89.0}, "timeout_s"),
        (BudgetPolicy(max_consecutive_failures=3), {"consecutive_failures": 3},
         "max_consecutive_failures"),
    ],
)
def test_budgets_halt_with_budget_exceeded(budget: BudgetPolicy, snap_update: dict[str, float],
                                           name: str) -> None:
    policy = tg.Policy(budget=budget)
    v = decide(ctx(policy=policy), SNAP._replace(**snap_update))  # type: ignore[arg-type]
    assert v.decision is D.HALT and v.halt is tg.BudgetExceeded and v.budget == name
    assert v.usage > v.limit or name == "max_consecutive_failures"


def test_budget_at_limit_is_still_allowed() -> None:
    policy = tg.Policy(budget=BudgetPolicy(max_tool_calls=5, timeout_s=10))
    assert decide(ctx(policy=policy), SNAP._replace(calls=5, started_at=90.0)).decision is D.ALLOW


def test_per_tool_max_calls() -> None:
    policy = tg.Policy(tools={"t": ToolPolicy(max_calls=2)})
    v = decide(ctx(policy=policy), SNAP._replace(tool_calls=3))
    assert v.budget == "max_calls"


def test_halted_task_halts_again_with_the_same_kind() -> None:
    v = decide(ctx(), SNAP._replace(halted={"kind": "BudgetExceeded", "reason": "x"}))
    assert v.decision is D.HALT and v.halt is tg.BudgetExceeded


def test_halt_rung_beats_cached() -> None:
    record = IdempotencyRecord(RecordState.COMPLETED, 0, 0.0, "done")
    assert decide(ctx(tg.Effect.MUTATING),
                  SNAP._replace(count=3, record=record)).decision is D.CACHED
    assert decide(ctx(tg.Effect.MUTATING),
                  SNAP._replace(count=4, record=record)).decision is D.HALT


def test_in_progress_record_means_wait() -> None:
    record = IdempotencyRecord(RecordState.IN_PROGRESS, 0, 0.0)
    v = decide(ctx(tg.Effect.MUTATING), SNAP._replace(record=record))
    assert v.wait


def test_own_claim_is_not_a_hit() -> None:
    record = IdempotencyRecord(RecordState.IN_PROGRESS, 0, 0.0)
    assert decide(ctx(tg.Effect.MUTATING),
                  SNAP._replace(record=None, claimed=True)).decision is D.ALLOW
    assert record.state is RecordState.IN_PROGRESS


def test_unknown_outcome_goes_to_review_then_runs_when_approved() -> None:
    record = IdempotencyRecord(RecordState.UNKNOWN, 0, 0.0)
    v = decide(ctx(tg.Effect.MUTATING), SNAP._replace(count=2, record=record))
    assert v.decision is D.REVIEW and v.ask_approval
    approved = ApprovalRecord(ApprovalState.APPROVED, 0.0)
    v = decide(ctx(tg.Effect.MUTATING), SNAP._replace(count=2, record=record, approval=approved))
    assert v.decision is D.ALLOW


def test_unknown_outcome_with_forwarded_key_retries() -> None:
    policy = tg.Policy(tools={"t": ToolPolicy(forwards_idempotency_key=True)})
    record = IdempotencyRecord(RecordState.UNKNOWN, 0, 0.0)
    v = decide(ctx(tg.Effect.MUTATING, policy=policy), SNAP._replace(count=2, record=record))
    assert v.decision is D.WARN


def test_approval_pending_times_out() -> None:
    policy = tg.Policy(tools={"t": ToolPolicy(requires_approval=True)})
    pending = ApprovalRecord(ApprovalState.PENDING, requested_at=0.0)
    v = decide(ctx(policy=policy, now=301.0), SNAP._replace(approval=pending))
    assert v.halt is tg.ApprovalTimedOut
    v = decide(ctx(policy=policy, now=299.0), SNAP._replace(approval=pending))
    assert v.decision is D.REVIEW


def test_rejected_approval_blocks_with_reason() -> None:
    policy = tg.Policy(tools={"t": ToolPolicy(requires_approval=True)})
    rejected = ApprovalRecord(ApprovalState.REJECTED, 0.0, "too expensive")
    v = decide(ctx(policy=policy), SNAP._replace(approval=rejected))
    assert v.decision is D.BLOCK and "too expensive" in v.reason


def test_invalid_beats_approval_and_deny_beats_invalid() -> None:
    policy = tg.Policy(tools={"t": ToolPolicy(requires_approval=True)})
    assert decide(ctx(policy=policy, invalid="bad"), SNAP).decision is D.INVALID
    deny = tg.Policy(default_effect="deny")
    assert decide(ctx(policy=deny, invalid="bad"), SNAP).decision is D.BLOCK


def test_decide_is_pure() -> None:
    c, s = ctx(tg.Effect.MUTATING), SNAP._replace(count=2)
    assert decide(c, s) == decide(c, s)
