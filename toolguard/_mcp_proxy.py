"""``toolguard mcp-proxy``: an MCP server that guards every tool call of another MCP server.

::

    toolguard mcp-proxy [--policy FILE | --env NAME] [--audit FILE.jsonl] [--task-id ID]
                        [--listen 127.0.0.1:PORT] [--explain] -- <upstream command ...>
    toolguard mcp-proxy ... --upstream-url http://host:port/mcp

The proxy connects to the upstream first (a subprocess over stdio, or streamable HTTP), copies
its identity and capabilities, and then serves MCP itself: on stdio by default, or streamable
HTTP with ``--listen``. Tools, resources, prompts and completions are forwarded as they are;
upstream notifications (logging, list changes, resource updates) and the upstream's own
requests to the client (elicitation, sampling, roots) are relayed to the client; progress of a
tool call is relayed to that call, and a client's cancellation cancels the upstream request.
Every ``tools/call`` goes through :class:`toolguard.adapters.mcp.GuardMiddleware`.

Faults: an upstream that cannot start (or does not answer ``initialize`` within
``--start-timeout``) makes the command exit 1 with the tail of its stderr; an upstream that
dies mid-session makes each later call an error result naming it and its stderr tail, without
consulting the guard (nothing is recorded as executed). Exit 2 for bad options or an invalid
policy, as every ``toolguard`` command.

Added to the ``toolguard`` app by :func:`register`; the ``mcp`` SDK is imported only when the
command runs (``pip install 'toolguard[mcp]'``).
"""

from __future__ import annotations

import contextlib
import shlex
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

if TYPE_CHECKING:  # the SDK is an optional extra, rich a CLI's: imported inside the command
    import mcp.types as mt
    from mcp import ClientSession
    from mcp.client.session import ClientRequestContext
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.server.lowlevel import Server
    from mcp.server.session import ServerSession
    from rich.console import Console
    from rich.table import Table

    from ._engine import Guard
    from .adapters.mcp import GuardMiddleware

__all__ = ["register"]

BAD_INPUT = 2
UPSTREAM_FAILED = 1
_STDERR_TAIL_LINES = 12


def _stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True, highlight=False, markup=False)


PolicyOption = Annotated[Path | None, typer.Option("--policy", help="A policy file (TOML).")]
EnvOption = Annotated[
    str | None, typer.Option("--env", help="Load <TOOLGUARD_POLICY_DIR or policies>/ENV.toml.")]


def _fail(message: str, code: int = BAD_INPUT) -> NoReturn:
    from rich.text import Text

    _stderr().print(Text(f"error: {message}", style="bold red"))
    raise typer.Exit(code)


class UpstreamFailed(Exception):
    """The upstream server could not start or answer ``initialize``."""


class Upstream:
    """The connection to the guarded server, and what the proxy knows about its health.

    Args:
        command: the upstream command line (stdio), or ``None``.
        url: the upstream's streamable-HTTP endpoint, or ``None``.
        start_timeout_s: seconds to wait for the upstream's ``initialize`` answer.
    """

    def __init__(self, command: list[str] | None, url: str | None,
                 start_timeout_s: float) -> None:
        self.command = command
        self.url = url
        self.start_timeout_s = start_timeout_s
        self.session: ClientSession | None = None
        self.gone: str | None = None  # why the upstream is gone, once it is
        self._errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed in connect's exit
        self.downstream: ServerSession | None = None  # the client session last heard from
        self.calling: ServerRequestContext[Any, Any] | None = None  # the tools/call in flight

    @property
    def name(self) -> str:
        """How messages name the upstream: its command line or URL."""
        return shlex.join(self.command) if self.command else str(self.url)

    def stderr_tail(self) -> str:
        """The last lines the upstream wrote to stderr (stdio upstreams)."""
        self._errlog.flush()
        self._errlog.seek(0)
        lines = self._errlog.read().splitlines()[-_STDERR_TAIL_LINES:]
        self._errlog.seek(0, 2)
        return "\n".join(lines)

    def describe_gone(self) -> str:
        """The error text every call gets once the upstream is gone."""
        tail = self.stderr_tail()
        return (f"the upstream MCP server `{self.name}` is gone ({self.gone}); the call was not "
                f"run." + (f" Its stderr ended with:\n{tail}" if tail else ""))

    @contextlib.asynccontextmanager
    async def connect(self) -> AsyncIterator[mt.InitializeResult]:
        """Start or reach the upstream, initialize the session, yield its ``initialize`` result.

        Raises:
            UpstreamFailed: it could not start, or did not answer in time.
        """
        import anyio
        from mcp import ClientSession, StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client

        async with contextlib.AsyncExitStack() as stack:
            stack.callback(self._errlog.close)
            try:
                if self.command:
                    params = StdioServerParameters(command=self.command[0], args=self.command[1:],
                                                   env=dict(_environ()))
                    read, write = await stack.enter_async_context(
                        stdio_client(params, errlog=self._errlog))
                else:
                    read, write = await stack.enter_async_context(
                        streamable_http_client(str(self.url)))
                session = await stack.enter_async_context(ClientSession(
                    _Watched(read, self._closed), write,
                    elicitation_callback=self._relay_elicitation,
                    sampling_callback=self._relay_sampling,
                    list_roots_callback=self._relay_roots,
                    message_handler=self._relay_notification,
                ))
                with anyio.fail_after(self.start_timeout_s):
                    result = await session.initialize()
            except Exception as exc:  # noqa: BLE001 - spawn (OSError), connection closed
                # (MCPError), TimeoutError, or an HTTP transport error of any kind
                raise UpstreamFailed(self._start_problem(exc)) from None
            self.session = session
            yield result

    def _start_problem(self, exc: BaseException) -> str:
        import time

        time.sleep(0.2)  # let a dying process finish writing its stderr
        what = (f"did not answer initialize within {self.start_timeout_s:g} s"
                if isinstance(exc, TimeoutError)
                else f"could not start or connect ({type(exc).__name__}: {exc})")
        tail = self.stderr_tail()
        return (f"the upstream MCP server `{self.name}` {what}"
                + (f"; its stderr ended with:\n{tail}" if tail else ""))

    def _closed(self) -> None:
        if self.gone is None:
            self.gone = "its connection closed"

    # -- relaying the upstream's messages to the client ---------------------------------
    async def _relay_notification(self, message: Any) -> None:
        import mcp.types as mt

        if isinstance(message, Exception):
            return
        if isinstance(message, mt.ProgressNotification) or self.downstream is None:
            return  # progress rides the call it belongs to (progress_callback)
        with contextlib.suppress(Exception):  # a client that went away misses a notification
            await self.downstream.send_notification(message)

    async def _ask_client(self, request: Any, result_type: Any) -> Any:
        import mcp.types as mt
        from mcp.shared.exceptions import MCPError
        from mcp.shared.message import ServerMessageMetadata

        ctx = self.calling
        session = ctx.session if ctx is not None else self.downstream
        if session is None:
            return mt.ErrorData(code=mt.INVALID_REQUEST, message="no client is connected")
        related = ctx.request_id if ctx is not None else None
        try:
            return await session.send_request(
                request, result_type, metadata=ServerMessageMetadata(related_request_id=related))
        except MCPError as exc:
            return exc.error

    async def _relay_elicitation(self, context: ClientRequestContext,
                                 params: mt.ElicitRequestParams) -> Any:
        import mcp.types as mt

        return await self._ask_client(mt.ElicitRequest(params=params), mt.ElicitResult)

    async def _relay_sampling(self, context: ClientRequestContext,
                              params: mt.CreateMessageRequestParams) -> Any:
        import mcp.types as mt

        return await self._ask_client(mt.CreateMessageRequest(params=params),
                                      mt.CreateMessageResult)

    async def _relay_roots(self, context: ClientRequestContext) -> Any:
        import mcp.types as mt

        return await self._ask_client(mt.ListRootsRequest(), mt.ListRootsResult)


class _Watched:
    """The upstream's read stream, telling the proxy when it ends (the upstream is gone)."""

    def __init__(self, stream: Any, on_end: Callable[[], None]) -> None:
        self._stream = stream
        self._on_end = on_end

    async def receive(self) -> Any:
        import anyio

        try:
            return await self._stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._stream.aclose()

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> Any:
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _Watched:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def build_server(upstream: Upstream, init: mt.InitializeResult,
                 guard_middleware: GuardMiddleware) -> Server[Any]:
    """The proxy's MCP server: forwards everything, with the guard on ``tools/call``."""
    from mcp.server.lowlevel import Server

    caps = init.capabilities
    assert upstream.session is not None
    up = upstream.session

    async def list_tools(ctx: Any, params: mt.PaginatedRequestParams | None
                         ) -> mt.ListToolsResult:
        return await up.list_tools(params=params)

    async def call_tool(ctx: ServerRequestContext[Any, Any], params: mt.CallToolRequestParams
                        ) -> mt.CallToolResult:
        async def relay(progress: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(progress, total, message)

        return await up.call_tool(params.name, params.arguments, progress_callback=relay)

    async def list_resources(ctx: Any, params: mt.PaginatedRequestParams | None
                             ) -> mt.ListResourcesResult:
        return await up.list_resources(params=params)

    async def list_templates(ctx: Any, params: mt.PaginatedRequestParams | None
                             ) -> mt.ListResourceTemplatesResult:
        return await up.list_resource_templates(params=params)

    async def read_resource(ctx: Any, params: mt.ReadResourceRequestParams) -> Any:
        return await up.read_resource(str(params.uri))

    async def subscribe(ctx: Any, params: mt.SubscribeRequestParams) -> mt.EmptyResult:
        return await up.subscribe_resource(str(params.uri))

    async def unsubscribe(ctx: Any, params: mt.UnsubscribeRequestParams) -> mt.EmptyResult:
        return await up.unsubscribe_resource(str(params.uri))

    async def list_prompts(ctx: Any, params: mt.PaginatedRequestParams | None
                           ) -> mt.ListPromptsResult:
        return await up.list_prompts(params=params)

    async def get_prompt(ctx: Any, params: mt.GetPromptRequestParams) -> Any:
        return await up.get_prompt(params.name, params.arguments)

    async def complete(ctx: Any, params: mt.CompleteRequestParams) -> mt.CompleteResult:
        argument = params.argument.model_dump(by_alias=True, exclude_none=True)
        context = params.context.arguments if params.context else None
        return await up.complete(params.ref, argument, context)

    handlers: dict[str, Any] = {}
    if caps.tools is not None:
        handlers.update(on_list_tools=list_tools, on_call_tool=call_tool)
    if caps.resources is not None:
        handlers.update(on_list_resources=list_resources, on_read_resource=read_resource,
                        on_list_resource_templates=list_templates)
        if caps.resources.subscribe:
            handlers.update(on_subscribe_resource=subscribe, on_unsubscribe_resource=unsubscribe)
    if caps.prompts is not None:
        handlers.update(on_list_prompts=list_prompts, on_get_prompt=get_prompt)
    if caps.completions is not None:
        handlers.update(on_completion=complete)
    info = init.server_info
    server: Server[Any] = Server(info.name, version=info.version,
                                 title=f"{info.title or info.name} (guarded by toolguard)",
                                 instructions=init.instructions, **handlers)
    server.middleware.extend([_health(upstream), guard_middleware])
    return server


def _health(upstream: Upstream) -> Callable[..., Any]:
    """The outer middleware: remembers the client for relays, and answers every tool call
    itself once the upstream is gone (before the guard, so nothing is recorded)."""
    import mcp.types as mt
    from mcp.shared.exceptions import MCPError

    async def health(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        upstream.downstream = ctx.session
        if ctx.method != "tools/call":
            return await call_next(ctx)
        if upstream.gone is not None:
            return mt.CallToolResult(content=[mt.TextContent(
                type="text", text=upstream.describe_gone())], is_error=True)
        upstream.calling = ctx
        try:
            return await call_next(ctx)
        except MCPError as exc:
            if exc.code == mt.CONNECTION_CLOSED:
                upstream._closed()
            raise
        finally:
            upstream.calling = None

    return health


def _environ() -> dict[str, str]:
    import os

    return dict(os.environ)


def _load_policy(policy_file: Path | None, env: str | None) -> Any:
    """The policy, as ``toolguard explain`` loads it (exit 2 listing every problem)."""
    from ._cli_common import load_cli_policy

    return load_cli_policy(policy_file, env)


def _build_guard(policy: Any, audit: Path | None) -> Guard:
    from ._audit import JsonlSink
    from ._engine import Guard
    from .adapters.mcp import elicitation_approver

    sinks = [JsonlSink(audit)] if audit is not None else []
    # The upstream's tools are registered as they are listed: a policy naming one of them
    # must not fail before that as "not registered".
    return Guard(policy, approver=elicitation_approver, audit=sinks, strict_tools=False)


def explain_table(middleware: GuardMiddleware) -> Table:
    """The ``--explain`` table: each upstream tool, its annotations and the settings in force."""
    from rich.table import Table

    from ._types import Effect

    table = Table(title="toolguard mcp-proxy: tools and effects", title_justify="left")
    table.add_column("tool", no_wrap=True)
    for column in ("effect", "idempotency", "approval", "from", "annotations"):
        table.add_column(column, overflow="fold")
    for name, effects in middleware.tools.items():
        settings = middleware.guard.settings(name)
        hints = ", ".join(f"{k}={str(v).lower()}" for k, v in effects.hints.items()) or "none"
        source = settings.sources.get("effect", "built-in")
        scope = "-" if settings.effect is Effect.READONLY else str(settings.idempotency_scope)
        table.add_row(name, str(settings.effect), scope,
                      "required" if settings.requires_approval else "no",
                      "annotations" if source == "decorator" else source, hints)
    return table


async def _run(upstream: Upstream, policy: Any, audit: Path | None, task_id: str | None,
               listen: tuple[str, int] | None, explain: bool) -> None:
    from rich.console import Console

    from .adapters.mcp import GuardMiddleware

    async with upstream.connect() as init:
        assert upstream.session is not None
        middleware = GuardMiddleware(_build_guard(policy, audit), task_id=task_id)
        listed = await upstream.session.list_tools()
        middleware.register_tools(listed.tools)
        if explain:
            Console(soft_wrap=True, highlight=False, markup=False).print(explain_table(middleware))
            return
        server = build_server(upstream, init, middleware)
        if listen is None:
            from mcp.server.stdio import stdio_server

            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
        else:
            await _serve_http(server, *listen)


async def _serve_http(server: Server[Any], host: str, port: int) -> None:
    import uvicorn

    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()


def _parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        _fail(f"--listen takes HOST:PORT, e.g. 127.0.0.1:8765 (got {value!r})")
    return host.strip("[]"), int(port)


def mcp_proxy(
    upstream_command: Annotated[
        list[str] | None,
        typer.Argument(help="The upstream server's command, after `--`.", show_default=False),
    ] = None,
    upstream_url: Annotated[
        str | None, typer.Option("--upstream-url", help="A streamable-HTTP upstream's URL.")
    ] = None,
    policy: PolicyOption = None,
    env: EnvOption = None,
    audit: Annotated[
        Path | None, typer.Option("--audit", help="Append audit events to this JSONL file.")
    ] = None,
    task_id: Annotated[
        str | None, typer.Option("--task-id", help="One task id for every client session.")
    ] = None,
    listen: Annotated[
        str | None, typer.Option("--listen", help="Serve streamable HTTP on HOST:PORT "
                                 "(default: serve on stdio).")
    ] = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="Print the upstream's tools and their effects, "
                           "then exit.")
    ] = False,
    start_timeout: Annotated[
        float, typer.Option("--start-timeout", help="Seconds to wait for the upstream to "
                            "answer initialize.")
    ] = 30.0,
) -> None:
    """Serve an MCP server's tools through the guard (stdio, or HTTP with --listen)."""
    if bool(upstream_command) == bool(upstream_url):
        _fail("give the upstream as a command after `--` or as --upstream-url, exactly one")
    if policy is not None and env is not None:
        _fail("give --policy FILE or --env, not both")
    if task_id is not None and not task_id:
        _fail("--task-id must not be empty")
    if start_timeout <= 0:
        _fail("--start-timeout must be > 0")
    try:
        import anyio
        import mcp  # noqa: F401 - fail early and clearly without the extra
    except ImportError:
        _fail("toolguard mcp-proxy needs the MCP SDK: pip install 'toolguard[mcp]'")
    where = _parse_listen(listen) if listen is not None else None
    loaded = _load_policy(policy, env)
    upstream = Upstream(upstream_command or None, upstream_url, start_timeout)
    try:
        anyio.run(_run, upstream, loaded, audit, task_id, where, explain)
    except Exception as exc:  # the SDK's task groups wrap it in exception groups
        failed = _find(exc, UpstreamFailed)
        if failed is None:
            raise
        _fail(str(failed), UPSTREAM_FAILED)
    except KeyboardInterrupt:
        sys.exit(130)


def _find(exc: BaseException, kind: type[UpstreamFailed]) -> UpstreamFailed | None:
    """``exc`` itself or the first ``kind`` inside its (nested) exception groups."""
    if isinstance(exc, kind):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _find(inner, kind)
        if found is not None:
            return found
    return None


def approve(
    key: Annotated[str, typer.Argument(help="The idempotency key a review result names.",
                                       show_default=False)],
    refuse: Annotated[
        bool, typer.Option("--reject", help="Reject the call instead of approving it.")
    ] = False,
    reason: Annotated[
        str, typer.Option("--reason", help="With --reject: the reason shown to the model.")
    ] = "rejected by the reviewer",
    policy: PolicyOption = None,
    env: EnvOption = None,
) -> None:
    """Approve (or --reject) a call waiting in review, in a shared (Redis) store.

    The store is the one the policy and environment select (``TOOLGUARD_STORE__URL``), the same
    as the proxy's: the call's next identical attempt then runs once (or is blocked)."""
    from ._engine import Guard
    from ._errors import StoreError
    from .stores import MemoryStore

    if policy is not None and env is not None:
        _fail("give --policy FILE or --env, not both")
    task_id, sep, rest = key.rpartition(":")
    task_id = task_id.rpartition(":")[0] if sep else ""
    if not task_id or not rest:
        _fail(f"{key!r} is not an idempotency key (TASK:TOOL:HASH, as a review result names it)")
    guard = Guard(_load_policy(policy, env), strict_tools=False)
    if isinstance(guard.store, MemoryStore):
        _fail("no shared store is configured, so no proxy can see this approval: set "
              "TOOLGUARD_STORE__URL=redis://... (the proxy's store) or [store] in --policy")
    task = guard.task(task_id)
    try:
        waiting = key in task.pending_approvals
        if refuse:
            task.reject(key, reason)
        else:
            task.approve(key)
    except (StoreError, ValueError) as exc:
        _fail(str(exc))
    verdict = "rejected" if refuse else "approved"
    note = "" if waiting else " (no call was waiting with this key: this decides its next one)"
    typer.echo(f"{verdict} {key}{note}")


def register(app: typer.Typer) -> None:
    """Add ``mcp-proxy`` and ``approve`` (decide a review the proxy returned) to the app."""
    app.command("mcp-proxy")(mcp_proxy)
    app.command("approve")(approve)
