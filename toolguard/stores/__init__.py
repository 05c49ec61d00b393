"""State stores: where per-task guard state lives.

:class:`MemoryStore` (default, per process), :class:`SQLiteStore` (a file shared by the
processes of one machine; standard library) and :class:`RedisStore` (extra
``agent-toolguard[redis]``, shared by workers anywhere) implement the :class:`Store` protocol
and pass one contract test suite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._base import (
    ApprovalRecord,
    ApprovalState,
    BeginRequest,
    FinishRequest,
    IdempotencyRecord,
    RetryRequest,
    Snapshot,
    Store,
    TaskUsage,
)
from .memory import MemoryStore

if TYPE_CHECKING:
    from .redis import RedisStore
    from .sqlite import SQLiteStore

__all__ = [
    "ApprovalRecord",
    "ApprovalState",
    "BeginRequest",
    "FinishRequest",
    "IdempotencyRecord",
    "MemoryStore",
    "RedisStore",
    "RetryRequest",
    "SQLiteStore",
    "Snapshot",
    "Store",
    "TaskUsage",
]


def __getattr__(name: str) -> Any:
    # RedisStore imports redis-py, an optional extra, and SQLiteStore sqlite3: load each
    # only when asked for.
    if name == "RedisStore":
        from .redis import RedisStore

        return RedisStore
    if name == "SQLiteStore":
        from .sqlite import SQLiteStore

        return SQLiteStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
