"""toolguard: deterministic code between an LLM agent and its tools.

Stops loops (the warn → block → halt ladder over canonical argument hashes), duplicate writes
(a TTL idempotency cache of completed mutating calls) and overspending (hard per-task budgets),
and holds irreversible tools for human approval. The documentation site (``docs/``) gives a tour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._approval import (
    ApprovalDecision,
    ApprovalRequest,
    Approver,
    ConsoleApprover,
    approve,
    defer,
    deny_all,
    reject,
)
from ._audit import AuditEvent, JsonlSink, LoggingSink, MemorySink
from ._canonical import CANONICAL_VERSION, args_hash, canonical_args
from ._decorators import NOT_GIVEN, ToolSpec, mutating, readonly, requires_approval, spec_of
from ._engine import CallRecord, Guard, Task, current_idempotency_key
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
from ._pending import PendingCall
from ._resolve import ToolSettings
from ._results import ToolResult, Usage
from ._types import Decision, Effect, IdempotencyScope, Mode

if TYPE_CHECKING:
    from ._policy import Policy
    from ._policy_loader import load_policy, load_policy_dict, policy_from_env

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
    "Policy": "._policy",
    "load_policy": "._policy_loader",
    "load_policy_dict": "._policy_loader",
    "policy_from_env": "._policy_loader",
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
