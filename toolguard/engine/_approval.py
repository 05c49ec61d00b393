"""Human approval for irreversible tools (DESIGN.md §2, layer 3).

A tool marked ``@requires_approval`` (or ``requires_approval = true`` in the policy) never runs
without an approval. The guard first looks for a stored decision for the call's idempotency
key (``task.approve(key)`` decides a call that waits in review; none can be approved in
advance), and otherwise asks its *approver*: any sync or async callable taking an
:class:`ApprovalRequest` and returning an :class:`ApprovalDecision`. Nothing the model sends
can approve a call: the key is computed by the guard from the task id, the tool and the
canonical arguments, and an ``approved: true`` argument only changes the key; in a shared
store an approval also needs the proof only the approval secret gives
(:mod:`toolguard.engine._approval_secret`).

An approval binds to the exact values the tool will receive (:func:`exact_hash`), not to the
loop-detection signature: with ``normalize``, ``case`` or ``ignore`` options, two calls share
a key, but a call whose raw values differ from the ones the reviewer saw (another path
spelling, an extra sentence in an ignored ``memo``) is asked about afresh. The reviewer gets
the arguments in full; redaction is for audit events and logs.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Literal

import orjson

from toolguard._errors import CanonicalizationError
from toolguard.hashing._canonical import args_hash

__all__ = [
    "ApprovalDecision",
    "ApprovalRequest",
    "Approver",
    "ConsoleApprover",
    "approve",
    "defer",
    "deny_all",
    "exact_hash",
    "reject",
]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What a reviewer sees.

    Attributes:
        task_id: the task. tool: the tool name. args: the arguments, in full (not
            redacted, not truncated: the reviewer approves exactly what will run).
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


def exact_hash(args: Mapping[str, Any], signature: str) -> str:
    """The canonical hash of exactly ``args`` (the bound values the tool receives, no
    argument options applied); ``signature`` (the call's options-applied hash) if they have
    no canonical form of their own."""
    try:
        return args_hash(args)
    except CanonicalizationError:
        return signature


Approver = Callable[[ApprovalRequest], "ApprovalDecision | Awaitable[ApprovalDecision]"]


def deny_all(request: ApprovalRequest) -> ApprovalDecision:
    """The default approver: rejects every call that needs approval (the host may still
    approve one it rejected with ``task.approve(key)``: a stored decision is looked up before
    the approver is asked)."""
    return reject(f"{request.reason}; no approver is configured, so it was not executed")


class ConsoleApprover:
    """Asks on a terminal: shows the tool and its arguments in full, reads ``y``/``N``.

    Args:
        stdin: the stream answers are read from (default ``sys.stdin``).
        stdout: the stream questions are written to (default ``sys.stderr``).
        page_lines: lines shown per page; a longer request pauses (Enter shows more, ``q``
            rejects), so nothing is cut and nothing scrolls past unread.
        width: characters per line; a longer line (a long string value) is wrapped, not cut.

    Anything but ``y`` or ``yes`` rejects; end of input rejects.
    """

    def __init__(self, stdin: IO[str] | None = None, stdout: IO[str] | None = None, *,
                 page_lines: int = 40, width: int = 100) -> None:
        self._in = stdin
        self._out = stdout
        self._page = max(1, page_lines)
        self._width = max(20, width)

    def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        out = self._out or sys.stderr
        stdin = self._in or sys.stdin
        text = orjson.dumps(dict(request.args), option=orjson.OPT_INDENT_2,
                            default=repr).decode()
        lines = [f"[toolguard] {request.tool} needs approval ({request.reason})"]
        for line in text.splitlines():
            lines += [line[i:i + self._width] for i in range(0, max(len(line), 1), self._width)]
        out.write("\n")
        for start in range(0, len(lines), self._page):
            out.write("\n".join(lines[start:start + self._page]) + "\n")
            if start + self._page < len(lines):
                out.write(f"-- more ({start + self._page}/{len(lines)} lines): Enter, "
                          "or q to reject --")
                out.flush()
                more = stdin.readline()
                if not more or more.strip().lower() == "q":
                    return reject("rejected at the console (not read to the end)")
        out.write("Run it? [y/N] ")
        out.flush()
        answer = stdin.readline()
        if answer.strip().lower() in {"y", "yes"}:
            return approve()
        return reject("rejected at the console")
