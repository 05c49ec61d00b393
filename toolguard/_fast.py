"""The call path's two halves for the MCP proxy's upstream, whose tool runs elsewhere and
answers in a callback, with nothing awaited between a message and what it causes:
:func:`begin_remote` admits a call (:func:`toolguard._path.admit`) and :func:`end_remote`
records what its tool answered (:func:`toolguard._path.record`). The same as
``task.begin`` / ``PendingCall.finish``, kept in the proxy's shape until it uses those.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _execute, _path
from ._path import Begun, Pause
from ._results import ToolResult

if TYPE_CHECKING:
    from ._call import TaskState

Remote = Begun
"""A begun call whose tool runs outside this process: ``args`` to send, ``final`` (a
success goes back unchanged), ``forwarded_key``."""


def begin_remote(task: TaskState, tool: str, raw: Any
                 ) -> Begun | tuple[ToolResult, None] | tuple[None, Pause] | None:
    """Prepare, begin and decide a call that the caller runs itself, elsewhere (as
    ``acall(tool, raw, run=...)`` would), without awaiting anything.

    Returns:
        ``None`` when the store waits on I/O (it must be called off the event loop): use
        ``acall``. Else a :class:`Begun` call to run now, ``(result, None)`` for a call that
        does not run (blocked, invalid, cached, ...), or ``(None, pause)``: the call needs
        an approval or a wait, ``task._run_async(tool, raw, run, None, False, pause)``
        takes it on.

    Raises:
        Halt: the task halted, or halts with this call.
        ToolGuardError: the store failed closed.
    """
    if task.guard._store_blocks:
        return None
    step = _path.admit(task, task.guard._config, tool, raw, True)
    if type(step) is ToolResult:
        return step, None
    if type(step) is Pause:
        return None, step
    begun: Begun = step  # type: ignore[assignment]  # neither of the above
    begun.task = task
    return begun


def end_remote(call: Begun, value: Any, exc: BaseException | None = None) -> ToolResult:
    """Record what the tool of ``call`` did: returned ``value``, or raised ``exc`` (an
    ``Exception``: a tool error, recorded as a failure; anything else, e.g.
    ``asyncio.CancelledError``: an unknown outcome recorded, then ``exc`` re-raised).

    Raises:
        Halt: as for ``acall``. ``exc``, when it is not an ``Exception``.
    """
    owner = call.task
    took = _path.elapsed(call)
    if exc is None:
        return _path.record(owner, call, value, None, took)[0]
    if isinstance(exc, Exception):
        return _path.record(owner, call, None, _execute.failure(call.cfg, exc, took), took)[0]
    _path.interrupted(owner, call, exc)
    raise exc
