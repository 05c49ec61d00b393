"""``toolguard mcp-proxy``: an MCP server that guards every tool call of another MCP server.

::

    toolguard mcp-proxy [--policy FILE | --env NAME] [--audit FILE.jsonl] [--task-id ID]
                        [--call-timeout SECONDS]
                        [--listen 127.0.0.1:PORT [--session-idle-timeout SECONDS]
                         [--max-sessions N] [--allow-host NAME ...] [--token TOKEN]]
                        [--loop auto|asyncio|uvloop] [--explain] -- <upstream command ...>
    toolguard mcp-proxy ... --upstream-url http://host:port/mcp

The proxy connects to the upstream first (a subprocess over stdio, or streamable HTTP),
initializes it, lists its tools, and then serves MCP itself: on stdio by default, or
streamable HTTP with ``--listen`` (every request needs the bearer token: ``--token``, the
``TOOLGUARD_MCP_TOKEN`` environment variable, else one generated and printed once on stderr;
``Host`` and ``Origin`` must name the listen address; :mod:`toolguard.mcp._http_listener`).
It forwards JSON-RPC frames as they are
(:mod:`toolguard.mcp._link`, :mod:`toolguard.mcp._wire`): only ``initialize``, ``tools/list``
answers and ``tools/call`` are acted on; every ``tools/call`` goes through
:class:`toolguard.adapters.mcp.GuardMiddleware`. Each client session has its own upstream
session: on HTTP, a new ``Mcp-Session-Id`` gets a new upstream session (a new subprocess for a
stdio upstream, as a stdio server serves one client), so the upstream's messages of a session
reach that session's client and no other.

Faults: an upstream that cannot start (or does not answer ``initialize`` within
``--start-timeout``) makes the command exit 1 with the tail of its stderr (redacted, as
everything of the upstream's stderr the proxy shows). A guarded call sent upstream that gets
no answer (the upstream dies or breaks its stream, ``--call-timeout`` passes, or the client
cancels it) has an unknown outcome: recorded as for a tool that raised ``TimeoutError``, so
an identical retry goes to review, never runs blind. Once the upstream is gone, each later
call is an error result naming it and its stderr tail, without consulting the guard (it was
not run, and nothing is recorded). Exit 2 for bad options (a malformed ``--upstream-url``
among them) or an invalid policy, as every ``toolguard`` command.

Added to the ``toolguard`` app by :func:`register`; the ``mcp`` SDK is imported only when the
command runs (``pip install 'agent-toolguard[mcp]'``).
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from toolguard.commands._common import EnvOption, PolicyOption

if TYPE_CHECKING:  # the SDK is an optional extra, rich a CLI's: imported inside the command
    from rich.console import Console
    from rich.table import Table

    from toolguard.adapters.mcp import GuardMiddleware
    from toolguard.engine._engine import Guard

    from ._http_listener import Access
    from ._link import Link

__all__ = ["register"]

BAD_INPUT = 2
UPSTREAM_FAILED = 1
# an HTTP client that neither deletes its session nor sends anything for an hour has gone;
# its upstream session (a subprocess, for a stdio upstream) is ended then
DEFAULT_SESSION_IDLE_TIMEOUT_S = 3600.0
# a guarded tools/call sent upstream waits this long for its answer (its outcome is unknown
# after that): longer than a host's own request timeout usually is (60 s in the TypeScript SDK)
DEFAULT_CALL_TIMEOUT_S = 300.0
DEFAULT_MAX_SESSIONS = 32  # HTTP sessions at once, each with its upstream session (a process)
TOKEN_ENV = "TOOLGUARD_MCP_TOKEN"  # noqa: S105 - the variable's name, not a token
MIN_TOKEN_CHARS = 16


def _stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True, highlight=False, markup=False)




def _fail(message: str, code: int = BAD_INPUT) -> NoReturn:
    from rich.text import Text

    _stderr().print(Text(f"error: {message}", style="bold red"))
    raise typer.Exit(code)


def _load_policy(policy_file: Path | None, env: str | None) -> Any:
    """The policy, as ``toolguard explain`` loads it (exit 2 listing every problem)."""
    from toolguard.commands._common import load_cli_policy

    return load_cli_policy(policy_file, env)


def _build_guard(policy: Any, audit: Path | None) -> Guard:
    from toolguard.adapters.mcp import elicitation_approver
    from toolguard.engine._audit import JsonlSink
    from toolguard.engine._engine import Guard

    sinks = [JsonlSink(audit)] if audit is not None else []
    # The upstream's tools are registered as they are listed: a policy naming one of them
    # must not fail before that as "not registered".
    return Guard(policy, approver=elicitation_approver, audit=sinks, strict_tools=False)


def explain_table(middleware: GuardMiddleware) -> Table:
    """The ``--explain`` table: each upstream tool, its annotations and the settings in force."""
    from rich.table import Table

    from toolguard._types import Effect
    from toolguard.commands._tables import FOLD_MIN_WIDTH

    table = Table(title="toolguard mcp-proxy: tools and effects", title_justify="left")
    table.add_column("tool", no_wrap=True)
    for column in ("effect", "idempotency", "approval", "from", "annotations"):
        table.add_column(column, overflow="fold", min_width=FOLD_MIN_WIDTH)
    for name, effects in middleware.tools.items():
        settings = middleware.guard.settings(name)
        hints = ", ".join(f"{k}={str(v).lower()}" for k, v in effects.hints.items()) or "none"
        source = settings.sources.get("effect", "built-in")
        scope = "-" if settings.effect is Effect.READONLY else str(settings.idempotency_scope)
        table.add_row(name, str(settings.effect), scope,
                      "required" if settings.requires_approval else "no",
                      "annotations" if source == "decorator" else source, hints)
    return table


async def _open_link(command: list[str] | None, url: str | None, middleware: GuardMiddleware,
                     timeout_s: float, call_timeout_s: float) -> Link:
    """Start or reach an upstream session, initialize it, and join it to a new link.

    Raises:
        UpstreamFailed: it could not start, spoke something else than MCP, or did not
            answer in time (with its stderr tail, for a subprocess).
    """
    import asyncio

    from ._link import Link
    from ._ports import UpstreamFailed, handshake
    from ._wire import HttpUpstream, StdioUpstream

    up: StdioUpstream | HttpUpstream = (StdioUpstream(command) if command
                                        else HttpUpstream(str(url)))
    try:
        await up.start()
        init, early = await handshake(up, timeout_s)
    except UpstreamFailed as exc:
        await asyncio.sleep(0.2)  # let a dying process finish writing its stderr
        tail = up.stderr_tail()
        await up.close()
        raise UpstreamFailed(str(exc) + (f"; its stderr ended with:\n{tail}" if tail else "")
                             ) from None
    return Link(up, init, middleware, early, call_timeout_s)


async def _run(command: list[str] | None, url: str | None, policy: Any, audit: Path | None,
               task_id: str | None, listen: Access | None, explain: bool,
               timeout_s: float, idle_timeout_s: float | None, call_timeout_s: float
               ) -> None:
    import asyncio

    from toolguard.adapters.mcp import GuardMiddleware

    from ._ports import UpstreamFailed, UpstreamGone
    from ._wire import HttpListener, serve_http, serve_stdio

    middleware = GuardMiddleware(_build_guard(policy, audit), task_id=task_id)
    link: Link | None = await _open_link(command, url, middleware, timeout_s, call_timeout_s)
    assert link is not None
    try:
        try:
            await link.learn_tools(timeout_s)
        except (asyncio.TimeoutError, UpstreamGone) as exc:
            why = str(exc) or f"no answer within {timeout_s:g} s"
            raise UpstreamFailed(f"the upstream MCP server `{link.up.name}` did not list its "
                                 f"tools ({why})") from None
        if explain:
            from toolguard.commands._tables import print_table, stdout_console

            print_table(stdout_console(), explain_table(middleware))
            return
        # everything built so far (the SDK's types, the policy, the guard) lives as long as
        # the process: out of the collector's sight, a collection costs what the calls
        # allocate, not the ~10^5 start-up objects again (measured: ~6 % of the proxy's CPU)
        gc.freeze()
        if listen is None:
            await serve_stdio(link)
            return
        listener = HttpListener(lambda: _open_link(command, url, middleware, timeout_s,
                                                   call_timeout_s),
                                link, listen, idle_timeout_s)
        link = None  # the listener owns it now
        await serve_http(listener, listen.host, listen.port)
    finally:
        if link is not None:
            await link.close()


def _loop_runner(choice: str) -> Callable[[Coroutine[Any, Any, None]], None]:
    """``asyncio.run`` or ``uvloop.run`` for ``--loop`` (exit 2 for an unknown choice, or
    for ``uvloop`` where it cannot be imported).

    uvloop (libuv's loop and transports in C, the loop uvicorn picks where it is installed)
    runs the proxy's hop in ~23% fewer instructions than asyncio's own loop: 335k against
    433k per stdio call (``benchmarks/mcp_proxy.py --instructions``). The proxy's code is the
    same on both; ``--loop asyncio`` is there for a platform or an upstream where uvloop
    misbehaves.
    """
    if choice not in ("auto", "asyncio", "uvloop"):
        _fail(f"--loop takes auto, asyncio or uvloop (got {choice!r})")
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                _fail("--loop uvloop needs uvloop (Linux and macOS): pip install uvloop")
        else:
            return uvloop.run
    import asyncio

    return asyncio.run


def _parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        _fail(f"--listen takes HOST:PORT, e.g. 127.0.0.1:8765 (got {value!r})")
    return host.strip("[]"), int(port)


def _access(listen: str, token: str | None, max_sessions: int, allow_host: list[str]
            ) -> Access:
    """Who may use ``--listen``; says on stderr what a client needs (a generated token, once)
    and warns of an address beyond loopback."""
    import secrets

    from ._http_listener import Access, is_loopback

    host, port = _parse_listen(listen)
    if token is not None and len(token.strip()) < MIN_TOKEN_CHARS:
        _fail(f"the token (--token or {TOKEN_ENV}) must have at least {MIN_TOKEN_CHARS} "
              "characters")
    if max_sessions < 1:
        _fail("--max-sessions must be >= 1")
    out = _stderr()
    if token is None:
        token = secrets.token_urlsafe(32)
        out.print(f"toolguard mcp-proxy: HTTP clients must send the header "
                  f"`Authorization: Bearer {token}` (generated for this run; set {TOKEN_ENV} "
                  "to choose it)")
    access = Access(host, port, token.strip(), max_sessions, frozenset(allow_host))
    if not is_loopback(host):
        out.print(f"toolguard mcp-proxy: warning: listening on {host}:{port}, beyond "
                  "loopback: anyone who can reach it and has the token can call the "
                  "upstream's tools" + ("" if access.names is not None else
                                        "; any Host name is accepted (name the ones "
                                        "clients use with --allow-host)"))
    return access


def _check_url(value: str) -> None:
    """Exit 2 unless ``value`` is an http(s) URL with a host (a typo is a usage error, not an
    upstream that failed)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError on a port out of range or not a number
    except ValueError:
        ok = False
    if not ok:
        _fail(f"--upstream-url takes an http:// or https:// URL, e.g. "
              f"http://127.0.0.1:8000/mcp (got {value!r})")


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
    token: Annotated[
        str | None, typer.Option("--token", envvar=TOKEN_ENV, show_default=False,
                                 help="With --listen: the bearer token HTTP clients must "
                                 "send (default: one generated and printed on stderr). "
                                 f"Prefer the {TOKEN_ENV} variable: a command line is "
                                 "visible to other users of the machine.")
    ] = None,
    max_sessions: Annotated[
        int, typer.Option("--max-sessions", help="With --listen: HTTP sessions at once, each "
                          "with its own upstream session (a process, for a command).")
    ] = DEFAULT_MAX_SESSIONS,
    allow_host: Annotated[
        list[str] | None, typer.Option("--allow-host", show_default=False,
                                       help="With --listen: one more host name clients may "
                                       "reach the proxy by (Host and Origin headers); "
                                       "repeatable.")
    ] = None,
    call_timeout: Annotated[
        float, typer.Option("--call-timeout", help="Seconds a guarded tools/call waits for "
                            "the upstream's answer; after that its outcome is unknown (an "
                            "identical retry goes to review).")
    ] = DEFAULT_CALL_TIMEOUT_S,
    session_idle_timeout: Annotated[
        float, typer.Option("--session-idle-timeout", help="With --listen: end an HTTP session "
                            "(and its upstream session) after this many seconds without a "
                            "request; 0: never.")
    ] = DEFAULT_SESSION_IDLE_TIMEOUT_S,
    loop: Annotated[
        str, typer.Option("--loop", help="The event loop: auto (uvloop where it is installed, "
                          "as with agent-toolguard[mcp] on Linux and macOS; else asyncio's), "
                          "asyncio or uvloop.", show_default=True)
    ] = "auto",
) -> None:
    """Serve an MCP server's tools through the guard (stdio, or HTTP with --listen)."""
    if bool(upstream_command) == bool(upstream_url):
        _fail("give the upstream as a command after `--` or as --upstream-url, exactly one")
    if policy is not None and env is not None:
        _fail("give --policy FILE or --env, not both")
    if upstream_url is not None:
        _check_url(upstream_url)
    if task_id is not None and not task_id:
        _fail("--task-id must not be empty")
    if start_timeout <= 0:
        _fail("--start-timeout must be > 0")
    if not call_timeout > 0:  # also NaN
        _fail("--call-timeout must be > 0")
    if session_idle_timeout < 0:
        _fail("--session-idle-timeout must be >= 0 (0: never)")
    run = _loop_runner(loop)
    try:
        import mcp  # noqa: F401 - fail early and clearly without the extra
    except ImportError:
        _fail("toolguard mcp-proxy needs the MCP SDK: pip install 'agent-toolguard[mcp]'")
    os.environ.pop(TOKEN_ENV, None)  # read: not for the upstream (nor its tools) to see
    where = (_access(listen, token, max_sessions, allow_host or [])
             if listen is not None else None)
    loaded = _load_policy(policy, env)
    claim_ttl_s = loaded.idempotency.in_progress_ttl_s
    if call_timeout >= claim_ttl_s:  # the claim would lapse under a call still waited for
        _stderr().print(f"toolguard mcp-proxy: warning: --call-timeout {call_timeout:g} s is "
                        f"not below idempotency.in_progress_ttl_s ({claim_ttl_s:g} s): an "
                        "identical call may run beside one still waiting for its answer")
    from ._ports import UpstreamFailed

    try:
        run(_run(upstream_command or None, upstream_url, loaded, audit, task_id, where,
                 explain, start_timeout, session_idle_timeout or None, call_timeout))
    except UpstreamFailed as failed:
        _fail(str(failed), UPSTREAM_FAILED)
    except KeyboardInterrupt:
        sys.exit(130)


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
    """Approve (or --reject) a call waiting in review in a shared store (Redis, or a SQLite
    file), at a terminal.

    A human runs it in a terminal: it shows the waiting call (its tool and arguments in full)
    and asks y/N there; with stdin not a terminal (an agent's shell) it refuses. Only a call
    the guard asked about can be decided, never one in advance. An approval is signed with
    the approval secret (~/.config/toolguard/approval.key, or under XDG_CONFIG_HOME; made on
    first use, readable by its owner only), which the guard checks: run it as the user who
    runs the agent or the proxy. The store is the one the policy and environment select
    (TOOLGUARD_STORE__URL=redis://... or sqlite:///PATH), the same as the guard's. The key
    is where the guard reports the review: the MCP proxy's log, or the denial of a Codex CLI
    or Gemini CLI hook, which names the whole command (TOOLGUARD_STORE__URL=sqlite:///...
    toolguard approve KEY, the hook's state file); Claude Code's hook asks in Claude Code's
    own permission prompt instead."""
    # the docstring is the command's --help, printed as plain text: no reST markup in it
    from toolguard._errors import StoreError
    from toolguard.commands._common import shared_store_guard
    from toolguard.engine._approval import ApprovalRequest, ConsoleApprover
    from toolguard.engine._approval_secret import ApprovalSecretError
    from toolguard.engine._approve import TRUNCATED, _waiting

    if not sys.stdin.isatty():
        _fail("toolguard approve asks a human at a terminal, and its stdin is not one: run "
              "it yourself in a terminal")
    task_id, sep, rest = key.rpartition(":")
    task_id = task_id.rpartition(":")[0] if sep else ""
    if policy is not None and env is not None:
        _fail("give --policy FILE or --env, not both")
    if not task_id or not rest:
        _fail(f"{key!r} is not an idempotency key (TASK:TOOL:HASH, as the review names it)")
    task = shared_store_guard(policy, env).task(task_id)
    try:
        waiting = _waiting(task, key, revoke=refuse)
        if refuse:
            task.reject(key, reason)
        else:
            if TRUNCATED in waiting.args:
                _fail(f"the arguments of this {waiting.tool} call are too large to show in "
                      f"full ({waiting.args[TRUNCATED]:,} bytes): it cannot be approved here")
            request = ApprovalRequest(task_id, waiting.tool, waiting.args, key,
                                      waiting.reason or "requires approval",
                                      waiting.requested_at)
            if ConsoleApprover()(request).verdict != "approve":
                _fail("not approved: the call keeps waiting", 1)
            task.approve(key)
    except (StoreError, ValueError, ApprovalSecretError) as exc:
        _fail(str(exc))
    typer.echo(f"{'rejected' if refuse else 'approved'} {key}")


def register(app: typer.Typer) -> None:
    """Add ``mcp-proxy`` and ``approve`` (decide a review the proxy returned) to the app."""
    app.command("mcp-proxy")(mcp_proxy)
    app.command("approve")(approve)
