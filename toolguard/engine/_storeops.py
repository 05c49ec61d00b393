"""The store's failure policy, for every stage that calls the store: ``fail_closed``
(default) raises :class:`~toolguard.StoreError`, so nothing runs unguarded; ``fail_open``
goes on with a permissive answer and a warning audit event."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from toolguard._errors import StoreError, ToolGuardError
from toolguard._types import ALLOW

from . import _events
from ._call import T, _Config, _Prepared

if TYPE_CHECKING:
    from ._call import TaskState

log = logging.getLogger("toolguard")


def store_op(task: TaskState, cfg: _Config, p: _Prepared, op: Callable[[], T],
              fallback: Callable[[], T] | None = None) -> T:
    """Run a store operation. When the store fails: ``fail_closed`` (default) raises
    :class:`StoreError`, so nothing runs unguarded; ``fail_open`` returns ``fallback()``
    (a permissive answer) with a warning audit event. Operations without a fallback
    always fail closed. (``begin`` and ``finish``, on every call, inline this with
    :meth:`_store_failed` instead of paying for two closures.)"""
    try:
        return op()
    except Exception as exc:  # noqa: BLE001 - _store_failed re-raises or falls back
        store_failed(task, cfg, p, exc, fallback=fallback is not None)
    assert fallback is not None  # _store_failed raised otherwise
    return fallback()


def store_failed(task: TaskState, cfg: _Config, p: _Prepared, exc: Exception, *,
                  fallback: bool, transition: str = "validating->executing") -> None:
    """Handle a failed store operation: re-raise a guard error; otherwise raise
    :class:`StoreError` (chained) unless the operation has a ``fallback`` and the policy
    fails open, in which case log, emit a warning audit event and return (the caller
    then uses its permissive answer)."""
    if isinstance(exc, ToolGuardError) and not isinstance(exc, StoreError):
        raise exc
    error = exc if isinstance(exc, StoreError) else StoreError(
        f"state store failed for {p.entry.spec.name}: {type(exc).__name__}: {exc}")
    on_error = getattr(task.guard._store, "on_error", None) or cfg.policy.store.on_error
    if not fallback or on_error != "fail_open":
        if error is exc:
            raise exc
        raise error from exc
    if error.restart is not None:  # lost state: this call runs unguarded, later ones do not
        error.restart()
    reason = f"state store unavailable, running unguarded (store.on_error = fail_open): {error}"
    log.warning("toolguard: %s", reason)
    _events.event(task, transition, p.entry.spec.name, ALLOW, reason, p, cfg)
