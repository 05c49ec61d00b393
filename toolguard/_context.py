"""The context variables of a guarded task: the task whose ``with`` block is active (direct
calls of decorated tools go through it) and the idempotency key of the call whose tool is
running (:func:`toolguard.current_idempotency_key`). A leaf module: the decorators read it
without importing the engine, which sets it.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._engine import Task

__all__ = ["CURRENT_KEY", "CURRENT_TASK"]

CURRENT_TASK: contextvars.ContextVar[Task | None] = contextvars.ContextVar(
    "toolguard_task", default=None
)
CURRENT_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "toolguard_idempotency_key", default=None
)
