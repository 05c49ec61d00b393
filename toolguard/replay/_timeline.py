"""Helpers the readers of event logs share: a run's timeline from its records' timestamps
(:class:`Clock`) and the calls that wait for their results by call id (:class:`Pending`)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from ._model import RecordedCall, Step

__all__ = ["Clock", "Pending", "timestamp_s"]


def timestamp_s(value: Any) -> float | None:
    """An ISO-8601 timestamp (``2026-01-02T19:18:34.422Z``) as POSIX seconds, or ``None`` if
    it is absent or unreadable (a run then replays without a timeline)."""
    if not isinstance(value, str) or not value:
        return None
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


class Clock:
    """Seconds since a run's first timestamp, for ``elapsed_s`` (never negative: records
    written slightly out of order keep the clock where it is)."""

    def __init__(self) -> None:
        self.start: float | None = None

    def elapsed(self, value: Any) -> float | None:
        """``value`` (ISO-8601) as seconds since the first timestamp seen, or ``None``."""
        moment = timestamp_s(value)
        if moment is None:
            return None
        if self.start is None:
            self.start = moment
        return max(0.0, moment - self.start)


class Pending:
    """The calls of one run that wait for their results, by call id: ``add`` appends a call to
    ``steps``; ``answer`` puts a result into the call with that id (once)."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self._waiting: dict[str, int] = {}  # call id -> index in steps

    def add(self, call_id: Any, call: RecordedCall) -> None:
        """Append ``call``, to be answered by ``call_id``."""
        self._waiting[str(call_id)] = len(self.steps)
        self.steps.append(call)

    def answer(self, call_id: Any, result: Any, is_error: bool = False) -> bool:
        """Record the result of the call with ``call_id``; ``False`` if no call waits for it."""
        position = self._waiting.pop(str(call_id), None)
        if position is None:
            return False
        call = self.steps[position]
        assert isinstance(call, RecordedCall)  # only calls are waiting
        self.steps[position] = replace(call, result=result, is_error=is_error)
        return True
