"""Guard the tools of an MCP server: middleware for servers written with the official ``mcp`` SDK.

One line guards a server's own tools in-process::

    from mcp.server.mcpserver import MCPServer
    from toolguard.adapters.mcp import guard_server

    server = MCPServer("notes")
    ...                                   # @server.tool() as usual
    guard_server(server, policy="policies/prod.toml")

Every ``tools/call`` then goes through the guard (``task.acall(name, arguments, run=<the
server's own handler>)``); ``toolguard mcp-proxy`` runs the same guard
(:meth:`GuardMiddleware.guard_json`) on the raw JSON-RPC frames it forwards. What the client
sees:

- allow: the tool's own ``CallToolResult``; warn and cached: the same with the guard's notice
  appended as one more text block (cached: the stored result, not run again);
- block, invalid, review: ``CallToolResult(isError=true)`` with the guard's text. A review
  tells the model to wait, never how to approve: the key and the ``toolguard approve KEY``
  command go to the log (the proxy's stderr) for a human, who approves at a terminal;
- halt: a JSON-RPC error (code :data:`HALT_ERROR_CODE`) whose message says why, and the same for
  every later call of that task (the task is the client session) until a new session starts.

Effects come from the MCP tool annotations (:func:`tool_settings`): ``readOnlyHint: true`` is
readonly, anything else mutating; a mutating tool that may be destructive or act on the outside
world (``destructiveHint`` / ``openWorldHint``, both true when absent, as the MCP spec defines
them) is remembered for the whole task (idempotency scope ``task``). A policy's ``[tools.X]``
overrides them (annotation values count as decorator arguments). Approvals are asked through MCP
elicitation when the client declared that capability (:func:`elicitation_approver`).

The MCP SDK is an optional dependency: ``pip install 'agent-toolguard[mcp]'``.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
import logging
import os
import secrets
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

try:
    import mcp.types as mt
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.shared.exceptions import MCPError
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "toolguard.adapters.mcp needs the MCP SDK: pip install 'agent-toolguard[mcp]'") from exc

from toolguard._errors import Halt, ToolGuardError
from toolguard.engine._approval import ApprovalDecision, ApprovalRequest, approve, defer, reject
from toolguard.engine._engine import Guard, Task
from toolguard.engine._pending import PendingCall, abegin, begin_nowait
from toolguard.mcp._results import (
    HALT_ERROR_CODE,
    HaltError,
    ToolEffects,
    UpstreamToolError,
    effects_of,
    error_result,
    report_of,
    review_hint,
    to_result,
    tool_failure,
    tool_settings,
)

__all__ = [
    "HALT_ERROR_CODE",
    "Asker",
    "ElicitationFailed",
    "GuardMiddleware",
    "HaltError",
    "ToolEffects",
    "UpstreamToolError",
    "effects_of",
    "elicitation_approver",
    "error_result",
    "guard_server",
    "tool_settings",
]

SESSION_HEADER = "mcp-session-id"

log = logging.getLogger("toolguard")



class ElicitationFailed(Exception):
    """The client refused the elicitation request itself (a JSON-RPC error)."""


class Asker(Protocol):
    """Who can put an approval question to the human at the client of one ``tools/call``.

    ``toolguard mcp-proxy`` implements it on its raw JSON-RPC link, :class:`GuardMiddleware`
    on the SDK's request context.
    """

    @property
    def can_elicit(self) -> bool:
        """The client declared the elicitation capability (and there is a request to
        relate the question to)."""
        ...

    async def elicit(self, message: str, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        """Ask with a form elicitation; return the ``ElicitResult`` as JSON (``action``,
        ``content``).

        Raises:
            ElicitationFailed: the client answered with a JSON-RPC error.
        """
        ...


_ASKER: contextvars.ContextVar[Asker | None] = contextvars.ContextVar(
    "toolguard_mcp_asker", default=None)


class _HasMiddleware(Protocol):
    @property
    def middleware(self) -> list[Any]: ...


class _SdkAsker:
    """:class:`Asker` over the SDK's server request context."""

    def __init__(self, ctx: ServerRequestContext[Any, Any]) -> None:
        self._ctx = ctx

    @property
    def can_elicit(self) -> bool:
        session = getattr(self._ctx, "session", None)
        caps = getattr(session, "client_capabilities", None)
        return (caps is not None and caps.elicitation is not None
                and self._ctx.request_id is not None)

    async def elicit(self, message: str, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        try:
            answer = await self._ctx.session.elicit_form(
                message, dict(schema), related_request_id=self._ctx.request_id)
        except MCPError as exc:
            raise ElicitationFailed(exc.message) from None
        return answer.model_dump(by_alias=True, mode="json", exclude_none=True)


def _approval_message(request: ApprovalRequest) -> str:
    """What the human is asked: the tool, its arguments in full as one line of ASCII JSON
    (keys quoted; newlines and other control or invisible characters escaped, so that
    neither a key nor a value the model chose can pose as the message's own text or push
    the real values out of view), and why it needs approval."""
    args = json.dumps(request.args, ensure_ascii=True, sort_keys=True, default=repr)
    return (f"toolguard: the agent wants to run {request.tool} with arguments {args}. It "
            f"needs approval ({request.reason}).")


async def elicitation_approver(request: ApprovalRequest) -> ApprovalDecision:
    """An approver that asks the human at the MCP client (form elicitation: approve or not).

    Used for calls that need approval (``requires_approval``, or an identical earlier call
    whose outcome is unknown). Accepting with ``approve: true`` approves; accepting with
    ``false``, declining or cancelling rejects. When the client did not declare the
    elicitation capability (or this runs outside an MCP request), the decision is deferred:
    the call comes back as a review naming its idempotency key.

    Args:
        request: what to show (tool, redacted arguments, key, reason).
    """
    asker = _ASKER.get()
    if asker is None or not asker.can_elicit:
        log.warning(review_hint(request.tool, request.idempotency_key))
        return defer("waiting for a human decision outside this conversation")
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"approve": {
            "type": "boolean", "title": f"Run {request.tool}?",
            "description": "true runs the call once; false refuses it"}},
        "required": ["approve"],
    }
    try:
        answer = await asker.elicit(_approval_message(request), schema)
    except ElicitationFailed as exc:  # the client refused the request itself
        log.warning(review_hint(request.tool, request.idempotency_key))
        return defer(f"the client could not ask its user ({exc}); waiting for a human "
                     "decision outside this conversation")
    action = answer.get("action")
    content = answer.get("content")
    if action == "accept" and isinstance(content, Mapping) and content.get("approve") is True:
        return approve()
    if action == "accept":
        return reject("the user refused it")
    return reject(f"the user did not approve it ({action})")


class GuardMiddleware:
    """``ServerMiddleware`` that sends every ``tools/call`` through a :class:`toolguard.Guard`.

    Append it to ``MCPServer.middleware`` or the low-level ``Server.middleware`` (or use
    :func:`guard_server`). It learns the server's tools from ``tools/list`` (asking for the list
    itself before the first call if the client never did) and registers each new name with
    ``guard.register(name, effect=..., args_schema=<inputSchema>, description=...,
    **annotation settings)``. ``toolguard mcp-proxy`` uses the same object on raw JSON-RPC
    (:meth:`guard_json`).

    Args:
        guard: the guard; build it with ``approver=elicitation_approver`` to ask the user.
        task_id: one task for every session; default one task per client session (the
            ``Mcp-Session-Id`` header on streamable HTTP, else one per middleware: a stdio
            server serves one connection).

    Thread-safe and asyncio-safe: sessions may call concurrently.
    """

    def __init__(self, guard: Guard, *, task_id: str | None = None) -> None:
        self.guard = guard
        self._task_id = task_id
        self._default_task = f"mcp-{secrets.token_hex(6)}"
        self._known: dict[str, ToolEffects] = {}
        self._tasks: dict[str, Task] = {}
        self._lock = threading.Lock()

    @property
    def tools(self) -> Mapping[str, ToolEffects]:
        """The tools registered so far and what their annotations said."""
        return dict(self._known)

    def knows(self, name: str) -> bool:
        """``name`` was registered from a ``tools/list`` answer."""
        return name in self._known

    def register_tools(self, tools: Sequence[mt.Tool | Mapping[str, Any]]) -> None:
        """Register the tools of a ``tools/list`` answer that the guard does not know yet.

        Args:
            tools: ``mt.Tool`` objects, or the answer's ``tools`` entries as JSON (entries
                without a string ``name`` are skipped).
        """
        with self._lock:
            for tool in tools:
                schema: Any
                description: Any
                if isinstance(tool, mt.Tool):
                    name, schema, description = tool.name, tool.input_schema, tool.description
                    effects = tool_settings(tool)
                elif isinstance(tool, Mapping) and isinstance(tool.get("name"), str):
                    name, schema = tool["name"], tool.get("inputSchema")
                    description, effects = tool.get("description"), effects_of(
                        tool.get("annotations"))
                else:
                    continue
                if name in self._known:
                    continue
                self.guard.register(
                    name, effect=effects.effect,
                    args_schema=dict(schema) if isinstance(schema, Mapping) else {
                        "type": "object"},
                    description=description if isinstance(description, str) else "",
                    **effects.settings)
                self._known[name] = effects

    def task_for(self, ctx: ServerRequestContext[Any, Any]) -> Task:
        """The guard task of the session ``ctx`` belongs to."""
        return self.task_of(_session_id(ctx))

    def task_of(self, session_id: str | None) -> Task:
        """The guard task of a client session: ``task_id`` if given, else the session's own
        (``session_id``, e.g. its ``Mcp-Session-Id``; ``None``: this middleware's one
        default task)."""
        task_id = self._task_id or session_id or self._default_task
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None:
                task = self._tasks[task_id] = self.guard.task(task_id)
            return task

    async def __call__(self, ctx: ServerRequestContext[Any, Any],
                       call_next: CallNext) -> HandlerResult:
        """Pass every message on; guard ``tools/call``; learn tools from ``tools/list``."""
        if ctx.method == "tools/list":
            listed = await call_next(ctx)
            self.register_tools(mt.ListToolsResult.model_validate(listed).tools)
            return listed
        if ctx.method != "tools/call":
            return await call_next(ctx)
        params = dict(ctx.params or {})
        name = params.get("name")
        if not isinstance(name, str):
            return await call_next(ctx)  # the SDK answers an invalid request itself
        if name not in self._known:
            await self._learn(ctx, call_next)
        return await self.guarded_call(ctx, name, params.get("arguments"),
                                       lambda args: call_next(dataclasses.replace(
                                           ctx, params={**params, "arguments": args})))

    async def guarded_call(self, ctx: ServerRequestContext[Any, Any], name: str, arguments: Any,
                           forward: Callable[[dict[str, Any]], Awaitable[HandlerResult]],
                           ) -> mt.CallToolResult:
        """One ``tools/call`` through the guard: ``forward(validated arguments)`` runs it.

        Returns:
            The result for the client (see the module docstring).

        Raises:
            MCPError: the task halted (code :data:`HALT_ERROR_CODE`).
        """
        async def run(args: dict[str, Any]) -> Mapping[str, Any]:
            raw = await forward(args)
            if isinstance(raw, mt.CallToolResult):
                return raw.model_dump(by_alias=True, mode="json", exclude_none=True)
            if isinstance(raw, Mapping):
                return raw
            return mt.CallToolResult.model_validate(raw).model_dump(
                by_alias=True, mode="json", exclude_none=True)

        try:
            result = await self.guard_json(self.task_for(ctx), name, arguments, run,
                                           _SdkAsker(ctx))
        except HaltError as halt:
            raise MCPError(halt.code, halt.message, data=halt.data) from None
        return mt.CallToolResult.model_validate(result)

    async def guard_json(self, task: Task, name: str, arguments: Any,
                         run: Callable[[dict[str, Any]], Awaitable[Mapping[str, Any]]],
                         asker: Asker | None = None) -> Mapping[str, Any]:
        """One ``tools/call`` through the guard, on JSON: ``run(validated arguments)`` returns
        the tool's ``CallToolResult`` as JSON (camelCase keys, as on the wire).

        Returns:
            The ``CallToolResult`` for the client, as JSON. When the tool ran and the guard
            adds nothing (allow without a notice), it is the very object ``run`` returned,
            so a proxy can send the upstream's bytes on untouched.

        Raises:
            HaltError: the task halted (its JSON-RPC error: :data:`HALT_ERROR_CODE`).
        """
        errors: dict[str, Mapping[str, Any]] = {}

        async def guarded_run(args: dict[str, Any]) -> Mapping[str, Any]:
            result = await run(args)
            failure = tool_failure(result)
            if failure is not None:
                errors["result"] = result
                raise failure
            return result

        token = _ASKER.set(asker)
        try:
            outcome = await task.acall(name, arguments, run=guarded_run)
        except Halt as halt:
            raise HaltError(halt) from None
        except ToolGuardError as exc:  # the store failed closed, or an identical call runs on
            return error_result(f"toolguard: {exc}")
        finally:
            _ASKER.reset(token)
        return to_result(outcome, errors.get("result"))

    # -- the two halves, for a caller that sends the call on itself (the MCP proxy) --------
    def begin_json(self, task: Task, name: str, arguments: Any) -> tuple[str, Any]:
        """The guard's first half of a ``tools/call`` whose tool runs elsewhere,
        synchronously, for a caller told of the tool's answer in a callback (the MCP
        proxy): no task, no coroutine, nothing awaited (:func:`toolguard.engine._pending.
        begin_nowait`, the first half of :meth:`toolguard.Task.begin`).

        Returns:
            ``("run", pending)``: a :class:`toolguard.PendingCall` to send on now
            (``pending.args``; ``pending.final``: a success goes back unchanged, so it may
            be passed on before :meth:`end_json` records it);
            ``("done", result)``: the call does not run, ``result`` is the client's
            ``CallToolResult`` (JSON);
            ``("pipeline", start)``: the call needs what only the pipeline does (an
            approval, a wait): ``await abegin_json(..., start=start)``;
            ``("acall", None)``: this path does not apply (an audit sink, a Redis store, a
            mode other than enforce); nothing was counted: ``await abegin_json(...)``.

        Raises:
            HaltError: as for :meth:`guard_json`.
        """
        try:
            front = begin_nowait(task, name, arguments)
        except Halt as halt:
            raise HaltError(halt) from None
        except ToolGuardError as exc:  # the store failed closed
            return "done", error_result(f"toolguard: {exc}")
        if front is None:
            return "acall", None
        if isinstance(front, PendingCall):
            if front.result is not None:
                return "done", to_result(front.result)
            return "run", front
        return "pipeline", front

    async def abegin_json(self, task: Task, name: str, arguments: Any,
                          asker: Asker | None = None, *, start: Any = None
                          ) -> PendingCall | Mapping[str, Any]:
        """:meth:`begin_json` under asyncio (:meth:`toolguard.Task.abegin`: approvals asked
        through ``asker``, waits awaited, a store that waits on I/O called from a worker
        thread); ``start``: what ``("pipeline", start)`` of :meth:`begin_json` handed over.

        Returns:
            A :class:`toolguard.PendingCall` to send on now, or the client's
            ``CallToolResult`` (JSON) of a call that does not run.

        Raises:
            HaltError: as for :meth:`guard_json`.
        """
        token = _ASKER.set(asker)
        try:
            pending = await abegin(task, name, arguments, None, False, start)
        except Halt as halt:
            raise HaltError(halt) from None
        except ToolGuardError as exc:  # the store failed closed, or an identical call runs on
            return error_result(f"toolguard: {exc}")
        finally:
            _ASKER.reset(token)
        if pending.result is not None:
            return to_result(pending.result)
        return pending

    def end_json(self, pending: PendingCall, result: Any, exc: BaseException | None = None
                 ) -> Mapping[str, Any]:
        """The guard's second half of a call :meth:`begin_json` or :meth:`abegin_json`
        began: record what the tool answered (``result``: its ``CallToolResult`` as JSON;
        ``isError``: a failed call) or why it did not (``exc``: an
        :class:`~toolguard.OutcomeUnknown` or anything not an ``Exception``, e.g. a
        cancellation, is an unknown outcome, the latter re-raised once recorded; another
        ``Exception``, a failed call).

        Returns:
            The ``CallToolResult`` for the client, as :meth:`guard_json` returns it (the
            very ``result`` object when the guard adds nothing).

        Raises:
            HaltError: as for :meth:`guard_json`.
        """
        tool_error, failure, unknown = report_of(result, exc)
        try:
            if unknown is not None:
                outcome = pending.unknown(unknown)
            elif failure is not None:
                outcome = pending.fail(failure)
            else:
                outcome = pending.finish(result)
        except Halt as halt:
            raise HaltError(halt) from None
        except ToolGuardError as error:  # the store failed closed
            return error_result(f"toolguard: {error}")
        if exc is not None and not isinstance(exc, Exception):
            raise exc
        return to_result(outcome, tool_error)

    async def aend_json(self, pending: PendingCall, result: Any,
                        exc: BaseException | None = None) -> Mapping[str, Any]:
        """:meth:`end_json` under asyncio (a store that waits on I/O is called from a worker
        thread)."""
        tool_error, failure, unknown = report_of(result, exc)
        try:
            if unknown is not None:
                outcome = await pending.aunknown(unknown)
            elif failure is not None:
                outcome = await pending.afail(failure)
            else:
                outcome = await pending.afinish(result)
        except Halt as halt:
            raise HaltError(halt) from None
        except ToolGuardError as error:  # the store failed closed
            return error_result(f"toolguard: {error}")
        if exc is not None and not isinstance(exc, Exception):
            raise exc
        return to_result(outcome, tool_error)

    async def _learn(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> None:
        # the request's _meta stays: on 2026-07-28 connections it carries the envelope
        meta = {k: v for k, v in (ctx.params or {}).items() if k == "_meta"}
        listed = await call_next(dataclasses.replace(ctx, method="tools/list", params=meta))
        self.register_tools(mt.ListToolsResult.model_validate(listed).tools)


def _session_id(ctx: ServerRequestContext[Any, Any]) -> str | None:
    headers = getattr(ctx.request, "headers", None)
    if headers is None:
        return None
    value = headers.get(SESSION_HEADER)
    return value if isinstance(value, str) and value else None


def guard_server(server: _HasMiddleware, guard: Guard | None = None, *,
                 policy: Any = None, task_id: str | None = None,
                 audit: Sequence[Callable[..., Any]] = ()) -> GuardMiddleware:
    """Guard an MCP server's tools in-process: one line after building the server.

    Args:
        server: an ``mcp.server.mcpserver.MCPServer`` or a low-level ``mcp.server.Server``
            (anything with a ``middleware`` list).
        guard: a ready guard; default one built from ``policy`` with
            :func:`elicitation_approver`.
        policy: a :class:`toolguard.Policy` or a policy file's path; default the one the
            environment selects (``TOOLGUARD_POLICY`` / ``TOOLGUARD_ENV``), as
            :meth:`toolguard.Guard.from_env`.
        task_id: one task for every session (default: one per client session).
        audit: audit sinks for a guard built here.

    Returns:
        The middleware (already appended to ``server.middleware``).

    Raises:
        PolicyError: the policy is invalid.
    """
    if guard is None:
        guard = _build_guard(policy, audit)
    middleware = GuardMiddleware(guard, task_id=task_id)
    server.middleware.append(middleware)
    return middleware


def _build_guard(policy: Any, audit: Sequence[Callable[..., Any]]) -> Guard:
    from toolguard.policy._loader import load_policy, policy_from_env
    from toolguard.policy._model import Policy

    if policy is None:
        loaded = policy_from_env()
    elif isinstance(policy, Policy):
        loaded = policy
    else:
        loaded = load_policy(os.fspath(policy))
    # The server's tools are learnt from tools/list, after the guard exists: a policy
    # naming one of them must not fail as "not registered" before that.
    return Guard(loaded, approver=elicitation_approver, audit=audit, strict_tools=False)
