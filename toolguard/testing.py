"""Test helpers for code that uses toolguard (after structlog's ``testing`` module).

* :class:`FakeClock`: an injectable clock you advance by hand: TTL, budget and approval
  timeout tests never sleep.
* :func:`capture_audit`: a guard's audit events in a list, for assertions.
* :func:`auto_approve` / :func:`auto_reject` / :func:`auto_defer`: approvers that answer
  without a human.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .engine._approval import ApprovalDecision, ApprovalRequest, approve, defer, reject
from .engine._audit import AuditEvent, MemorySink
from .engine._engine import Guard

__all__ = ["FakeClock", "auto_approve", "auto_defer", "auto_reject", "capture_audit"]


class FakeClock:
    """A clock that moves only when told. Call it for the time in seconds.

    Args:
        start: the initial time in seconds. Thread-safe.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (≥ 0)."""
        if seconds < 0:
            raise ValueError("a clock does not go back")
        with self._lock:
            self._now += seconds


@contextmanager
def capture_audit(guard: Guard) -> Iterator[list[AuditEvent]]:
    """Collect the audit events ``guard`` emits inside the ``with`` block."""
    sink = MemorySink()
    previous = guard._sinks
    guard._sinks = (*previous, sink)
    try:
        yield sink.events
    finally:
        guard._sinks = previous


def auto_approve(_: ApprovalRequest) -> ApprovalDecision:
    """An approver that approves everything."""
    return approve()


def auto_reject(_: ApprovalRequest) -> ApprovalDecision:
    """An approver that rejects everything (reason: ``"rejected by test"``)."""
    return reject("rejected by test")


def auto_defer(_: ApprovalRequest) -> ApprovalDecision:
    """An approver that never decides (every such call goes to ``review``)."""
    return defer()
