"""What :class:`~toolguard.stores.RedisStore` keeps when a reply is lost (see its module
docstring, "Three faults"): the claims whose ``begin`` reply was lost, to take over on the
retry, and the outcomes Redis did not take, written before the task's next operation. Plain
functions on the store's tables (it passes them with its lock), called only on those faults.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final

from toolguard._errors import StoreError

from ._base import FinishRequest

_MAX_TASKS: Final = 65_536  # tasks one store remembers a generation (and pending writes) of
_MAX_UNRECORDED: Final = 64  # outcomes kept per task while Redis does not take them


def _remember_claim(orphans: dict[tuple[str, str], bytes], lock: threading.Lock, task_id: str,
                    key: str, orphan: bytes, tail: bytes) -> None:
    """A claiming begin failed: the script may have run and claimed ``key``; remember the
    claim (``tail``, after up to three earlier lost ones in ``orphan``) as this store's."""
    with lock:  # this begin's claim, or an earlier lost one's
        orphans[(task_id, key)] = b"\n".join(
            [*orphan.split(b"\n")[-3:], tail] if orphan else [tail])
        if len(orphans) > _MAX_TASKS:
            del orphans[next(iter(orphans))]


def _keep_outcome(unrecorded: dict[str, list[FinishRequest]], lock: threading.Lock,
                  task_id: str, req: FinishRequest) -> None:
    """Redis did not take ``req``: keep it (the last ``_MAX_UNRECORDED`` per task)."""
    with lock:
        pending = unrecorded.setdefault(task_id, [])
        pending.append(req)
        del pending[:-_MAX_UNRECORDED]
        if len(unrecorded) > _MAX_TASKS:
            del unrecorded[next(iter(unrecorded))]


def _write_unrecorded(unrecorded: dict[str, list[FinishRequest]], lock: threading.Lock,
                      task_id: str, finish: Callable[[str, FinishRequest], None]) -> None:
    """Write the outcomes Redis did not take with ``finish``, oldest first (before anything
    else about the task, so an identical retry finds the completed record, not a stale claim).

    Raises:
        StoreError: a write failed; it and the ones after it stay kept.
    """
    with lock:
        pending = unrecorded.pop(task_id, None)
    while pending:
        try:
            finish(task_id, pending[0])
        except StoreError:
            with lock:
                pending += unrecorded.pop(task_id, [])
                unrecorded[task_id] = pending
            raise
        pending.pop(0)
