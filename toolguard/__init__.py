"""toolguard: deterministic code between an LLM agent and its tools.

Stops loops (the warn → block → halt ladder over canonical argument hashes), duplicate writes
(a TTL idempotency cache of completed mutating calls) and overspending (hard per-task budgets),
and holds irreversible tools for human approval. The documentation site (``docs/``) gives a tour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._errors import (
    ApprovalTimedOut,
    BudgetExceeded,
    CallInProgress,
    CanonicalizationError,
    Halt,
    PolicyError,
    PolicyProblem,
    RepeatedToolCalls,
    StoreError,
    ToolBlocked,
    ToolGuardError,
)
from ._results import ToolResult, Usage
from ._types import Decision, Effect, IdempotencyScope, Mode
from .engine._approval import (
    ApprovalDecision,
    ApprovalRequest,
    Approver,
    ConsoleApprover,
    approve,
    defer,
    deny_all,
    reject,
)
from .engine._audit import AuditEvent, JsonlSink, LoggingSink, MemorySink
from .engine._engine import CallRecord, Guard, Task, current_idempotency_key
from .engine._pending import PendingCall
from .hashing._canonical import CANONICAL_VERSION, args_hash, canonical_args
from .tools._decorators import NOT_GIVEN, ToolSpec, mutating, readonly, requires_approval, spec_of
from .tools._resolve import ToolSettings

if TYPE_CHECKING:
    from .policy._loader import load_policy, load_policy_dict, policy_from_env
    from .policy._model import Policy

__version__ = "0.2.0"

__all__ = [
    "CANONICAL_VERSION",
    "NOT_GIVEN",
    "ApprovalDecision",
    "ApprovalRequest",
    "ApprovalTimedOut",
    "Approver",
    "AuditEvent",
    "BudgetExceeded",
    "CallInProgress",
    "CallRecord",
    "CanonicalizationError",
    "ConsoleApprover",
    "Decision",
    "Effect",
    "Guard",
    "Halt",
    "IdempotencyScope",
    "JsonlSink",
    "LoggingSink",
    "MemorySink",
    "Mode",
    "PendingCall",
    "Policy",
    "PolicyError",
    "PolicyProblem",
    "RepeatedToolCalls",
    "StoreError",
    "Task",
    "ToolBlocked",
    "ToolGuardError",
    "ToolResult",
    "ToolSettings",
    "ToolSpec",
    "Usage",
    "approve",
    "args_hash",
    "canonical_args",
    "current_idempotency_key",
    "defer",
    "deny_all",
    "load_policy",
    "load_policy_dict",
    "mutating",
    "policy_from_env",
    "readonly",
    "reject",
    "requires_approval",
    "spec_of",
]

_LAZY = {
    "Policy": ".policy._model",
    "load_policy": ".policy._loader",
    "load_policy_dict": ".policy._loader",
    "policy_from_env": ".policy._loader",
}


def __getattr__(name: str) -> Any:
    # pydantic (the Policy model), the policy loader (jsonschema, tomllib) and the settings
    # reader (pydantic-settings) load on first use only: ``import toolguard`` stays light.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
