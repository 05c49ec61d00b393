"""The public surface is small and deliberate: pin it, and check decorators keep signatures."""

from __future__ import annotations

import inspect

import toolguard as tg
import toolguard.stores


def test_public_names_are_pinned() -> None:
    # isort-style order (constants, classes, functions), as ruff's RUF022 keeps it
    def order(n: str) -> tuple[int, str]:
        return (0 if n.isupper() else 1 if n[0].isupper() else 2, n)

    assert tg.__all__ == sorted(tg.__all__, key=order)
    assert set(tg.__all__) == {
        "CANONICAL_VERSION", "NOT_GIVEN", "ApprovalDecision", "ApprovalRequest",
        "ApprovalTimedOut", "Approver", "AuditEvent", "BudgetExceeded", "CallInProgress",
        "CallRecord", "CanonicalizationError", "ConsoleApprover", "Decision", "Effect", "Guard",
        "Halt", "IdempotencyScope", "JsonlSink", "LoggingSink", "MemorySink", "Mode", "Policy",
        "PendingCall", "PolicyError", "PolicyProblem", "RepeatedToolCalls", "StoreError", "Task",
        "ToolBlocked", "ToolGuardError", "ToolResult", "ToolSettings", "ToolSpec", "Usage",
        "approve", "args_hash", "canonical_args", "current_idempotency_key", "defer",
        "deny_all", "load_policy", "load_policy_dict", "mutating", "policy_from_env",
        "readonly", "reject", "requires_approval", "spec_of",
    }
    for name in tg.__all__:
        assert getattr(tg, name) is not None
    assert sorted(toolguard.stores.__all__) == toolguard.stores.__all__


def test_exception_tree() -> None:
    for cls in (tg.PolicyError, tg.CanonicalizationError, tg.ToolBlocked, tg.CallInProgress,
                tg.StoreError, tg.Halt):
        assert issubclass(cls, tg.ToolGuardError)
    for halt in (tg.RepeatedToolCalls, tg.BudgetExceeded, tg.ApprovalTimedOut):
        assert issubclass(halt, tg.Halt)
    assert issubclass(tg.PolicyError, ValueError)
    assert issubclass(tg.CanonicalizationError, TypeError)


def test_decorators_keep_signature_and_behaviour() -> None:
    def plain(path: str, content: str = "") -> str:
        """Write a file."""
        return path + content

    for deco in (tg.readonly, tg.mutating, tg.requires_approval,
                 tg.mutating(name="fs.write", idempotency_scope="task")):
        wrapped = deco(plain)
        assert inspect.signature(wrapped) == inspect.signature(plain)
        assert wrapped.__doc__ == plain.__doc__ and wrapped("a", content="b") == "ab"


def test_specs() -> None:
    @tg.mutating(name="fs.write", idempotency_scope="task", idempotency_ttl_s=60)
    def write(path: str) -> None: ...

    spec = tg.spec_of(write)
    assert (spec.name, spec.effect, spec.idempotency_scope) == (
        "fs.write", tg.Effect.MUTATING, tg.IdempotencyScope.TASK)
    assert spec.given() == {"effect": tg.Effect.MUTATING, "idempotency_scope": "task",
                            "idempotency_ttl_s": 60}

    @tg.requires_approval
    def pay() -> None: ...

    assert tg.spec_of(pay).requires_approval and tg.spec_of(pay).idempotency_scope == "task"

    @tg.readonly(poll=True)
    def wait() -> None: ...

    assert tg.spec_of(wait).effect is tg.Effect.POLL

    def bare() -> None: ...

    assert tg.spec_of(bare).effect is tg.NOT_GIVEN


def test_double_marking_is_an_error() -> None:
    import pytest

    @tg.readonly
    def f() -> None: ...

    with pytest.raises(TypeError, match="already marked"):
        tg.mutating(f)


def test_results_from_the_hot_path_are_ordinary_frozen_tool_results() -> None:
    import dataclasses
    import pickle

    import pytest

    @tg.readonly
    def read(path: str) -> str:
        return f"read {path}"

    guard = tg.Guard(tools=[read])
    result = guard.task("t").call("read", {"path": "a"})
    assert type(result) is tg.ToolResult
    assert isinstance(result, tg.ToolResult)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.content = "changed"  # type: ignore[misc]
    fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
    assert result == tg.ToolResult(**fields)
    assert hash(result) == hash(tg.ToolResult(**fields))
    assert pickle.loads(pickle.dumps(result)) == result
    assert dataclasses.replace(result, reason="x").reason == "x"
    assert result.content == "read a" and result.decision is tg.Decision.ALLOW
