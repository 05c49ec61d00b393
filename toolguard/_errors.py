"""The exception tree. Every error toolguard raises derives from :class:`ToolGuardError`::

    ToolGuardError
    ├── PolicyError (ValueError)          a policy file or setting is invalid; lists every problem
    ├── CanonicalizationError (TypeError) an argument has no canonical form; names its path
    ├── ToolBlocked                       a direct call that did not run (block/review/invalid)
    ├── CallInProgress                    an identical call is still running after the wait timeout
    ├── StoreError                        the state store failed and the policy fails closed
    └── Halt                              the turn must end; the task stays halted until resume()
        ├── RepeatedToolCalls             the ladder reached ``halt_at``
        ├── BudgetExceeded                a hard quota (calls, tokens, time, failures) exceeded
        └── ApprovalTimedOut              approval pending past ``approval.timeout_s``

Why :class:`Halt` is a :class:`ToolGuardError` and so an ``Exception``: agent frameworks often
catch ``Exception`` around a tool and feed the message back to the model. That is survivable
here because a halted task *stays* halted: every later call of that task raises the same
:class:`Halt` again without running anything, until the host calls ``task.resume()``. Catch
:class:`Halt` at the turn boundary of your agent loop; nothing the model does can lift it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._results import ToolResult

__all__ = [
    "ApprovalTimedOut",
    "BudgetExceeded",
    "CallInProgress",
    "CanonicalizationError",
    "Halt",
    "PolicyError",
    "PolicyProblem",
    "RepeatedToolCalls",
    "StoreError",
    "ToolBlocked",
    "ToolGuardError",
]


class ToolGuardError(Exception):
    """Root of every toolguard error. An unexpected exception inside the guard itself (a bug)
    is re-raised as a bare ``ToolGuardError`` chained to the original."""


@dataclass(frozen=True)
class PolicyProblem:
    """One problem in a policy.

    Attributes:
        source: the file path, ``"env TOOLGUARD_..."`` for an environment variable, or
            ``"<dict>"``.
        path: dotted key path, e.g. ``"tools.send_email.ladder.block_at"`` (``""`` for the root).
        message: what was expected, e.g. ``"must be ≥ warn_at (3)"``.
        line: 1-based line in ``source`` where it can be recovered, else ``None``.
        column: 1-based column (TOML syntax errors), else ``None``.
    """

    source: str
    path: str
    message: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = self.source
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        if not self.path:  # the file (or variable) as a whole: it is named already
            return f"{where}: {self.message}"
        return f"{where}: {self.path}: {self.message}"


class PolicyError(ToolGuardError, ValueError):
    """A policy is invalid. ``problems`` lists every problem found, not just the first."""

    def __init__(self, problems: list[PolicyProblem] | tuple[PolicyProblem, ...]) -> None:
        self.problems: tuple[PolicyProblem, ...] = tuple(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"invalid policy ({len(self.problems)} problem(s)):\n{lines}")


class CanonicalizationError(ToolGuardError, TypeError):
    """An argument value has no canonical form (NaN, an arbitrary object, a non-string key).

    Attributes:
        path: where in the arguments, e.g. ``"args.items[2].price"``.
    """

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")


class ToolBlocked(ToolGuardError):
    """A *direct* call (the decorated function called inside a task) was not executed.

    Dispatch through ``task.call`` returns the same information as a :class:`ToolResult`
    instead of raising. ``result`` is that result (decision ``block``, ``review`` or
    ``invalid``).
    """

    def __init__(self, result: ToolResult) -> None:
        self.result = result
        super().__init__(f"{result.tool}: {result.decision}: {result.reason}")


class CallInProgress(ToolGuardError):
    """An identical mutating call is still running and did not finish within the wait timeout
    (``idempotency.wait_timeout_s`` seconds)."""

    def __init__(self, tool: str, idempotency_key: str, waited_s: float, hint: str = "") -> None:
        self.tool = tool
        self.idempotency_key = idempotency_key
        self.waited_s = waited_s
        super().__init__(
            f"{tool}: an identical call ({idempotency_key}) is still in progress "
            f"after {waited_s:.1f} s{f' ({hint})' if hint else ''}"
        )


class StoreError(ToolGuardError):
    """The state store (e.g. Redis) failed or timed out and ``store.on_error`` is
    ``fail_closed``: the call was not executed."""


class Halt(ToolGuardError):
    """The current turn must end. The task stays halted (every later call raises this again)
    until ``task.resume()``; ``task.history`` keeps everything so the user can continue.

    Attributes:
        task_id: the task.
        tool: the tool whose call halted the task.
        args: that call's arguments, redacted per ``audit.redact``.
        args_hash: the canonical arguments hash (hex).
        count: the call's repeat count (1 for a first call).
        reason: a one-line human-readable reason.
        tool_messages: raised by ``task.run_tool_calls``: the closing tool-result messages
            of that model message (one per call, the halted ones included), to append to
            the transcript so a resumed run stays valid; else empty.

    A halt survives frameworks that catch ``Exception`` (see the module docstring): the
    task stays halted, so a swallowed halt cannot be talked around by the model; every
    later call raises it again and runs nothing. The adapters (``toolguard.adapters``)
    re-raise it through each framework's own "abort the run" path.
    """

    def __init__(
        self,
        reason: str,
        *,
        task_id: str,
        tool: str,
        args: Mapping[str, Any] | None = None,
        args_hash: str = "",
        count: int = 0,
    ) -> None:
        self.reason = reason
        self.task_id = task_id
        self.tool = tool
        self.arguments: dict[str, Any] = dict(args or {})
        self.args_hash = args_hash
        self.count = count
        self.tool_messages: list[dict[str, Any]] = []
        where = f" at {tool}({_short(self.arguments)})" if tool else ""  # no tool: tokens
        super().__init__(f"task {task_id!r} halted{where}: {reason}")

    # ``BaseException.args`` is the message tuple; here ``args`` is the call's redacted
    # arguments, as the API promises. The C-level tuple still drives str() and repr().
    @property  # type: ignore[override]
    def args(self) -> dict[str, Any]:
        """The halted call's arguments, redacted (also as ``arguments``)."""
        return self.arguments

    @args.setter
    def args(self, value: Any) -> None:  # BaseException.__init__ assigns it
        pass

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.__dict__.copy(), str(self)))


class RepeatedToolCalls(Halt):
    """The same call (tool + canonical arguments) was repeated ``halt_at`` times without
    progress (DESIGN.md §1, the ``RepeatedToolCalls`` outcome)."""


class BudgetExceeded(Halt):
    """A hard per-task quota was exceeded (DESIGN.md §2, layer 1).

    Attributes:
        budget: which one: ``"max_tool_calls"``, ``"max_tokens"``, ``"timeout_s"``,
            ``"max_calls"`` (per tool), ``"max_polls"``, ``"max_consecutive_failures"`` or
            ``"max_cost_usd"`` (the task's or, with ``tool`` set, that tool's).
        limit: the configured limit (calls, tokens, seconds or US dollars).
        usage: the usage that exceeded it, in the same unit.
    """

    def __init__(
        self,
        reason: str,
        *,
        budget: str,
        limit: float,
        usage: float,
        task_id: str,
        tool: str,
        args: Mapping[str, Any] | None = None,
        args_hash: str = "",
        count: int = 0,
    ) -> None:
        self.budget = budget
        self.limit = limit
        self.usage = usage
        super().__init__(
            reason, task_id=task_id, tool=tool, args=args, args_hash=args_hash, count=count
        )


class ApprovalTimedOut(Halt):
    """A call waited for a human approval longer than ``approval.timeout_s``: the task fails
    (DESIGN.md §2: NeedsReview → Failed on timeout)."""


def _rebuild(cls: type[Halt], state: dict[str, Any], message: str) -> Halt:
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    exc.__dict__.update(state)
    return exc


def _short(args: Mapping[str, Any], limit: int = 120) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in args.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"
