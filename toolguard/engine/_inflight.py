"""Calls of a tool running right now, for ``budget.max_consecutive_failures``.

Failures are counted as calls finish, so without this every call started before the first
failure came back still ran: 32 concurrent calls of a failing tool all ran under a budget of 6.
A call in flight may fail too, so the budget counts it: at most
``max_consecutive_failures - consecutive_failures`` calls of one tool run at once in a task;
a call beyond that is blocked (not halted: the model may try again once they finish).

Per process and per :class:`~toolguard.Guard`: several workers sharing a task in Redis
each keep their own count (the store's counts still halt the task at the limit).
"""

from __future__ import annotations

import threading

__all__ = ["InFlight"]


class InFlight:
    """Counts of calls running now, by ``(task_id, tool)``. Thread-safe."""

    __slots__ = ("_counts", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}

    def enter(self, key: tuple[str, str], room: int) -> int:
        """Count one more call of ``key`` if fewer than ``room`` are running; return how many
        were running, or -1 (counted) if one more fitted."""
        lock = self._lock
        lock.acquire()  # acquire and release: half the instructions of `with` (every call)
        try:
            running = self._counts.get(key, 0)
            if running >= room:
                return running
            self._counts[key] = running + 1
            return -1
        finally:
            lock.release()

    def leave(self, key: tuple[str, str]) -> None:
        """One call of ``key`` ended."""
        lock = self._lock
        lock.acquire()
        try:
            running = self._counts.get(key, 0) - 1
            if running > 0:
                self._counts[key] = running
            else:
                self._counts.pop(key, None)
        finally:
            lock.release()
