"""A sync tool run in a worker thread under ``acall``, and what happens when the caller stops
waiting for it.

A thread cannot be stopped. When the awaiting ``acall`` is cancelled
(``asyncio.wait_for(task.acall(...), 0.5)``), the cancellation must return at once, yet what
the tool really did must still be recorded, or an identical retry runs blind (or a claim is
left behind). :class:`Handoff` wraps the tool's function: the caller either takes the result
when the tool ends in time, or :meth:`Handoff.detach` leaves a callback that the worker
thread itself runs with the result when the tool ends. Exactly one of the two happens.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Handoff"]

Settled = Callable[[Any, BaseException | None, float], None]


class Handoff:
    """One run of a sync function in a worker thread (thread-safe; used once).

    ``run`` is what the thread executes; ``detach(then)`` asks for ``then(value, exc,
    duration_s)`` to be called in that thread when the function ends (``exc`` is what it
    raised, or None), and returns False if it has already ended (the caller then reads
    :attr:`value`, :attr:`exc` and :attr:`duration_s` itself).
    """

    __slots__ = ("_done", "_lock", "_start", "_then", "duration_s", "exc", "value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._then: Settled | None = None
        self._start = time.perf_counter()
        self.value: Any = None
        self.exc: BaseException | None = None
        self.duration_s = 0.0

    def run(self, func: Callable[..., Any], args: Mapping[str, Any]) -> Any:
        """Call ``func(**args)`` (in the worker thread); return or raise what it does."""
        try:
            value = func(**args)
        except BaseException as exc:
            self._settle(None, exc)
            raise
        self._settle(value, None)
        return value

    def _settle(self, value: Any, exc: BaseException | None) -> None:
        with self._lock:
            self.value, self.exc, self._done = value, exc, True
            self.duration_s = time.perf_counter() - self._start
            then = self._then
        if then is not None:
            then(value, exc, self.duration_s)

    def detach(self, then: Settled) -> bool:
        """Leave ``then`` to be called when the function ends; False if it already has."""
        with self._lock:
            if self._done:
                return False
            self._then = then
            return True
