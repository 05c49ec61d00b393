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
- block, invalid, review: ``CallToolResult(isError=true)`` with the guard's text (a review names
  the idempotency key, approvable with ``toolguard approve KEY`` against a shared Redis store);
- halt: a JSON-RPC error (code :data:`HALT_ERROR_CODE`) whose message says why, and the same for
  every later call of that task (the task is the client session) until a new session starts.

Effects come from the MCP tool annotations (:func:`tool_settings`): ``readOnlyHint: true`` is
readonly, anything else mutating; a mutating tool that may be destructive or act on the outside
world (``destructiveHint`` / ``openWorldHint``, both true when absent, as the MCP spec defines
them) is remembered for the whole task (idempotency scope ``task``). A policy's ``[tools.X]``
overrides them (annotation values count as decorator arguments). Approvals are asked through MCP
elicitation when the client declared that capability (:func:`elicitation_approver`).

The MCP SDK is an optional dependency: ``pip install 'toolguard[mcp]'``.
"""

from __future__ import annotations

import contextvars
import dataclasses
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
        "toolguard.adapters.mcp needs the MCP SDK: pip install 'toolguard[mcp]'") from exc

from toolguard._approval import ApprovalDecision, ApprovalRequest, approve, defer, reject
from toolguard._engine import Guard, Task
from toolguard._errors import Halt, ToolGuardError
from toolguard._results import ToolResult
from toolguard._types import Decision, Effect, IdempotencyScope

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

HALT_ERROR_CODE = -32001
"""JSON-RPC error code of a halt (the implementation-defined server-error range, -32000 to
-32099, of JSON-RPC 2.0 §5.1). ``error.data`` holds ``{"kind", "task_id", "tool", "reason"}``."""

SESSION_HEADER = "mcp-session-id"



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


@dataclasses.dataclass(frozen=True, slots=True)
class ToolEffects:
    """What the annotations of one MCP tool say to the guard.

    Attributes:
        effect: readonly or mutating.
        settings: the settings given to ``guard.register`` (``external``,
            ``idempotency_scope``), as decorator arguments: a policy's ``[tools.X]`` beats them.
        hints: the annotations the server gave, by their MCP names (for ``--explain``).
    """

    effect: Effect
    settings: Mapping[str, Any]
    hints: Mapping[str, bool]


def tool_settings(tool: mt.Tool) -> ToolEffects:
    """The effect and settings an MCP tool's annotations imply.

    ``readOnlyHint: true`` → readonly. Otherwise mutating, and when ``destructiveHint`` or
    ``openWorldHint`` is true (the MCP spec's default for both when absent: a tool with no
    annotations may destroy and act on the outside world) → idempotency scope ``task``: a
    completed call is never repeated in the task, whatever the agent does in between.
    ``openWorldHint`` is toolguard's ``external = true`` (which implies that scope);
    ``destructiveHint`` alone sets the scope.
    ``idempotentHint`` is recorded in ``hints`` only: a repeated identical call is still a
    loop worth stopping.

    Args:
        tool: an entry of ``tools/list``.
    """
    ann = tool.annotations
    return effects_of(None if ann is None else ann.model_dump(by_alias=True, exclude_none=True))


_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


def effects_of(annotations: Mapping[str, Any] | None) -> ToolEffects:
    """:func:`tool_settings` from a tool's ``annotations`` as JSON (camelCase keys, as
    ``tools/list`` sends them; ``None`` when absent). Hints that are not booleans count as
    absent."""
    ann = annotations if isinstance(annotations, Mapping) else {}
    hints = {name: ann[name] for name in _HINTS if isinstance(ann.get(name), bool)}
    read_only = hints.get("readOnlyHint") is True
    destructive = hints.get("destructiveHint", True)
    open_world = hints.get("openWorldHint", True)
    if read_only:
        return ToolEffects(Effect.READONLY, {}, hints)
    settings: dict[str, Any] = {}
    if open_world:
        settings["external"] = True  # toolguard's own name for it: scope task, and says why
    elif destructive:
        settings["idempotency_scope"] = IdempotencyScope.TASK
    return ToolEffects(Effect.MUTATING, settings, hints)


class UpstreamToolError(Exception):
    """The tool ran and answered ``isError: true``: the guard records a failed call, and the
    client gets the tool's own error result back (``result``)."""

    def __init__(self, result: mt.CallToolResult) -> None:
        text = " ".join(c.text for c in result.content if isinstance(c, mt.TextContent))
        super().__init__(text or "the tool reported an error")
        self.result = result


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
        return defer(_review_hint(request.idempotency_key))
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"approve": {
            "type": "boolean", "title": f"Run {request.tool}?",
            "description": "true runs the call once; false refuses it"}},
        "required": ["approve"],
    }
    args = ", ".join(f"{k}={v!r}" for k, v in request.args.items())
    message = (f"toolguard: the agent wants to run {request.tool}({args}). It needs approval "
               f"({request.reason}).")
    try:
        answer = await asker.elicit(message, schema)
    except ElicitationFailed as exc:  # the client refused the request itself
        return defer(f"elicitation failed ({exc}); {_review_hint(request.idempotency_key)}")
    action = answer.get("action")
    content = answer.get("content")
    if action == "accept" and isinstance(content, Mapping) and content.get("approve") is True:
        return approve()
    if action == "accept":
        return reject("the user refused it")
    return reject(f"the user did not approve it ({action})")


def _review_hint(key: str) -> str:
    return f"approve it with `toolguard approve {key}` (needs a shared Redis store)"


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
            if result.get("isError") is True:
                errors["result"] = result
                raise UpstreamToolError(mt.CallToolResult.model_validate(result))
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
        return _to_result(outcome, errors.get("result"))

    async def _learn(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> None:
        # the request's _meta stays: on 2026-07-28 connections it carries the envelope
        meta = {k: v for k, v in (ctx.params or {}).items() if k == "_meta"}
        listed = await call_next(dataclasses.replace(ctx, method="tools/list", params=meta))
        self.register_tools(mt.ListToolsResult.model_validate(listed).tools)


class HaltError(Exception):
    """A halt as the JSON-RPC error the client gets.

    Attributes:
        code: :data:`HALT_ERROR_CODE`. message: says why, and that a new session starts a new
            task. data: ``{"kind", "task_id", "tool", "reason"}``.
    """

    def __init__(self, halt: Halt) -> None:
        self.code = HALT_ERROR_CODE
        self.message = (f"toolguard halted this task: {halt}. The agent must stop here; a new "
                        "session starts a new task.")
        self.data = {"kind": type(halt).__name__, "task_id": halt.task_id, "tool": halt.tool,
                     "reason": str(halt)}
        super().__init__(self.message)

    def error(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` object."""
        return {"code": self.code, "message": self.message, "data": self.data}


def _to_result(outcome: ToolResult,
               tool_error: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """The ``CallToolResult`` (JSON) for the client from the guard's
    :class:`~toolguard.ToolResult`.

    Args:
        outcome: what the guard returned.
        tool_error: the tool's own error result, when it ran and answered ``isError``.
    """
    if outcome.executed and tool_error is not None:
        return _with_notice(tool_error, outcome.notice)
    if isinstance(outcome.value, Mapping) and outcome.decision in (
            Decision.ALLOW, Decision.WARN, Decision.CACHED):
        return _with_notice(outcome.value, outcome.notice)
    text = outcome.content if isinstance(outcome.content, str) else str(outcome.content)
    if outcome.decision is Decision.REVIEW and "toolguard approve" not in text:
        text = f"{text}\n\n[toolguard] {_review_hint(outcome.idempotency_key)}"
    return error_result(text)


def _with_notice(result: Mapping[str, Any], notice: str | None) -> Mapping[str, Any]:
    if not notice:
        return result
    content = result.get("content")
    blocks = list(content) if isinstance(content, list) else []
    return {**result, "content": [*blocks, {"type": "text", "text": f"[toolguard] {notice}"}]}


def error_result(text: str) -> dict[str, Any]:
    """A ``CallToolResult`` (JSON) with ``isError: true`` and one text block."""
    return {"content": [{"type": "text", "text": text}], "isError": True}


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
    from toolguard._policy import Policy
    from toolguard._policy_loader import load_policy, policy_from_env

    if policy is None:
        loaded = policy_from_env()
    elif isinstance(policy, Policy):
        loaded = policy
    else:
        loaded = load_policy(os.fspath(policy))
    # The server's tools are learnt from tools/list, after the guard exists: a policy
    # naming one of them must not fail as "not registered" before that.
    return Guard(loaded, approver=elicitation_approver, audit=audit, strict_tools=False)
