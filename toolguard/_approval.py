"""Human approval for irreversible tools (DESIGN.md §2, layer 3).

A tool marked ``@requires_approval`` (or ``requires_approval = true`` in the policy) never runs
without an approval. The guard first looks for a stored decision for the call's idempotency
key (``task.approve(key)`` pre-approves one), and otherwise asks its *approver*: any sync or
async callable taking an :class:`ApprovalRequest` and returning an :class:`ApprovalDecision`.
Nothing the model sends can approve a call: the key is computed by the guard from the task id,
the tool and the canonical arguments, and an ``approved: true`` argument only changes the key.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Literal

import orjson

__all__ = [
    "ApprovalDecision",
    "ApprovalRequest",
    "Approver",
    "ConsoleApprover",
    "approve",
    "defer",
    "deny_all",
    "reject",
]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What a reviewer sees.

    Attributes:
        task_id: the task. tool: the tool name. args: the arguments (redacted).
        idempotency_key: the key to approve (``task.approve(key)``).
        reason: why approval is needed (``"requires approval"``, or the unknown outcome of
            an earlier identical call).
        requested_at: clock time of the first request, in seconds.
    """

    task_id: str
    tool: str
    args: Mapping[str, Any]
    idempotency_key: str
    reason: str
    requested_at: float


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    """A reviewer's answer: ``approve``, ``reject`` (with a reason shown to the model) or
    ``defer`` (no decision yet: the call goes to ``review`` and can be retried later)."""

    verdict: Literal["approve", "reject", "defer"]
    reason: str = field(default="")


def approve() -> ApprovalDecision:
    """Approve the call."""
    return ApprovalDecision("approve")


def reject(reason: str = "rejected by the reviewer") -> ApprovalDecision:
    """Reject the call; ``reason`` reaches the model in the blocked result."""
    return ApprovalDecision("reject", reason)


def defer(reason: str = "waiting for a human decision") -> ApprovalDecision:
    """No decision yet: the call is listed in ``task.pending_approvals``."""
    return ApprovalDecision("defer", reason)


Approver = Callable[[ApprovalRequest], "ApprovalDecision | Awaitable[ApprovalDecision]"]


def deny_all(request: ApprovalRequest) -> ApprovalDecision:
    """The default approver: rejects every call that needs approval (pre-approvals made with
    ``task.approve(key)`` still pass, since they are looked up before the approver is asked)."""
    return reject(f"{request.reason}; no approver is configured, so it was not executed")


class ConsoleApprover:
    """Asks on a terminal: shows the tool and its (redacted) arguments, reads ``y``/``N``.

    Args:
        stdin / stdout: streams to use (default ``sys.stdin`` / ``sys.stderr``).

    Anything but ``y`` or ``yes`` rejects; end of input rejects.
    """

    def __init__(self, stdin: IO[str] | None = None, stdout: IO[str] | None = None) -> None:
        self._in = stdin
        self._out = stdout

    def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        out = self._out or sys.stderr
        stdin = self._in or sys.stdin
        args = orjson.dumps(dict(request.args), option=orjson.OPT_INDENT_2, default=repr).decode()
        out.write(f"\n[toolguard] {request.tool} needs approval ({request.reason})\n{args}\n"
                  "Run it? [y/N] ")
        out.flush()
        answer = stdin.readline()
        if answer.strip().lower() in {"y", "yes"}:
            return approve()
        return reject("rejected at the console")
