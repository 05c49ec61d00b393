"""toolguard: deterministic code between an LLM agent and its tools.

Stops loops (the warn → block → halt ladder over canonical argument hashes), duplicate writes
(a TTL idempotency cache of completed mutating calls) and overspending (hard per-task budgets),
and holds irreversible tools for human approval. See the README for a tour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._approval import ApprovalDecision
from ._approval import ApprovalRequest
from ._approval import Approver
from ._approval import ConsoleApprover
from ._approval import approve
from ._approval import defer
from ._approval import deny_all
from ._approval import reject
from ._audit import AuditEvent
from ._audit import JsonlSink
from ._audit import LoggingSink
from ._audit import MemorySink
from ._canonical import CANONICAL_VERSION
from ._canonical import args_hash
from ._canonical import canonical_args
from ._decorators import NOT_GIVEN
from ._decorators import ToolSpec
from ._decorators import mutating
from ._decorators import readonly
from ._decorators import requires_approval
from ._decorators import spec_of
from ._engine import CallRecord
from ._engine import Guard
from ._engine import Task
from ._engine import current_idempotency_key
from ._errors import ApprovalTimedOut
from ._errors import BudgetExceeded
from ._errors import CallInProgress
from ._errors import CanonicalizationError
from ._errors import Halt
from ._errors import PolicyError
from ._errors import PolicyProblem
from ._errors import RepeatedToolCalls
from ._errors import StoreError
from ._errors import ToolBlocked
from ._errors import ToolGuardError
from ._policy import Policy
from ._resolve import ToolSettings
from ._results import ToolResult
from ._results import Usage
from ._types import Decision
from ._types import Effect
from ._types import IdempotencyScope
from ._types import Mode

if TYPE_CHECKING:
    from ._policy_loader import load_policy
    from ._policy_loader import load_policy_dict
    from ._settings import policy_from_env

__version__ = "0.1.0"

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
    "load_policy": "._policy_loader",
    "load_policy_dict": "._policy_loader",
    "policy_from_env": "._settings",
}


def __getattr__(name: str) -> Any:
    # The policy loader pulls in jsonschema and tomllib; load it on first use only.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
