"""Real MCP processes for the proxy tests: the example upstream server, the proxy, a client.

Every process started here is bounded in time and stopped by its own pid when the test ends.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import mcp.types as mt
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.session import (
    ElicitationFnT,
    ListRootsFnT,
    MessageHandlerFnT,
    SamplingFnT,
)
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from toolguard.adapters.mcp import HALT_ERROR_CODE

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_SERVER = ROOT / "examples" / "mcp" / "server.py"
TEST_TIMEOUT_S = 60.0  # one test's whole conversation; a hang fails instead of blocking CI
# the bearer token of every proxy these helpers start with --listen (TOOLGUARD_MCP_TOKEN), and
# the header the HTTP clients here send with it
TEST_TOKEN = "toolguard-test-token-0123456789"
AUTH = {"authorization": f"Bearer {TEST_TOKEN}"}


def upstream_command(count_file: Path, *extra: str) -> list[str]:
    """The example server's command line (stdio), counting executions in ``count_file``."""
    return [sys.executable, str(EXAMPLE_SERVER), "--count-file", str(count_file), *extra]


def proxy_command(*options: str, upstream: Sequence[str] = ()) -> list[str]:
    """``toolguard mcp-proxy OPTIONS -- UPSTREAM`` as this interpreter runs it."""
    command = [sys.executable, "-m", "toolguard.cli", "mcp-proxy", *options]
    return [*command, "--", *upstream] if upstream else command


def counts(count_file: Path) -> dict[str, int]:
    """Executions per tool, as the upstream counted them itself."""
    return json.loads(count_file.read_text()) if count_file.exists() else {}


def audit_events(path: Path) -> list[dict[str, Any]]:
    """The audit events the proxy wrote (JSONL)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@asynccontextmanager
async def stdio_session(command: Sequence[str], *, errlog: Any = None,
                        elicitation: ElicitationFnT | None = None,
                        env: dict[str, str] | None = None,
                        messages: MessageHandlerFnT | None = None,
                        sampling: SamplingFnT | None = None,
                        roots: ListRootsFnT | None = None,
                        ) -> AsyncIterator[ClientSession]:
    """A real ``ClientSession`` over stdio to ``command`` (the proxy), initialized; the
    process gets this environment plus ``env``."""
    params = StdioServerParameters(command=command[0], args=list(command[1:]),
                                   env={**os.environ, **(env or {})})
    async with stdio_client(params, errlog=errlog or sys.stderr) as (read, write), \
            ClientSession(read, write, elicitation_callback=elicitation,
                          sampling_callback=sampling, list_roots_callback=roots,
                          message_handler=messages) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def http_session(url: str, *, elicitation: ElicitationFnT | None = None,
                       sampling: SamplingFnT | None = None,
                       roots: ListRootsFnT | None = None,
                       ) -> AsyncIterator[ClientSession]:
    """A real ``ClientSession`` over streamable HTTP to ``url``, initialized (sending the
    proxies' :data:`TEST_TOKEN`)."""
    async with create_mcp_http_client(headers=AUTH) as http, \
            streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write, elicitation_callback=elicitation,
                          sampling_callback=sampling, list_roots_callback=roots) as session:
        await session.initialize()
        yield session


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def running(command: Sequence[str], port: int, log: Path, timeout_s: float = 30.0,
            stop_timeout_s: float = 10.0) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``command`` (an HTTP server; a proxy's token is :data:`TEST_TOKEN`), wait until
    ``port`` accepts, stop it by pid after (SIGTERM; SIGKILL when it is still running
    ``stop_timeout_s`` later)."""
    env = {**os.environ, "TOOLGUARD_MCP_TOKEN": TEST_TOKEN}
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                   env=env)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{command} exited {process.returncode}: "
                                   f"{log.read_text(errors='replace')}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{command} did not listen on {port} in {timeout_s} s")
            time.sleep(0.05)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=stop_timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextmanager
def http_proxy(tmp: Path, count_file: Path, *options: str,
               stdio_upstream: bool = False) -> Iterator[str]:
    """A proxy listening on streamable HTTP (a subprocess) in front of the example server:
    an HTTP upstream subprocess of its own, or (``stdio_upstream``) one the proxy starts per
    session. Yields the proxy's URL."""
    proxy_port = free_port()
    listen = ("--listen", f"127.0.0.1:{proxy_port}", *options)
    if stdio_upstream:
        with running(proxy_command(*listen, upstream=upstream_command(count_file)),
                     proxy_port, tmp / "proxy.log"):
            yield f"http://127.0.0.1:{proxy_port}/mcp"
        return
    up_port = free_port()
    upstream = upstream_command(count_file, "--http", f"127.0.0.1:{up_port}")
    proxy = proxy_command("--upstream-url", f"http://127.0.0.1:{up_port}/mcp", *listen)
    with running(upstream, up_port, tmp / "upstream.log"), \
            running(proxy, proxy_port, tmp / "proxy.log"):
        yield f"http://127.0.0.1:{proxy_port}/mcp"


def label(result: mt.CallToolResult) -> str:
    """What the guard did, as the client sees it: allow, warn, cached, block, invalid, review
    or error (the tool itself failed)."""
    texts = [c.text for c in result.content if isinstance(c, mt.TextContent)]
    notice = next((t for t in texts if t.startswith("[toolguard] ")), None)
    if not result.is_error:
        if notice is None:
            return "allow"
        return "cached" if "NOT executed again" in notice else "warn"
    joined = "\n".join(texts)
    for word, name in (("Blocked", "block"), ("toolguard approve", "review"),
                       ("argument", "invalid")):
        if word in joined:
            return name
    return "error"


async def call(session: ClientSession, tool: str, args: dict[str, Any]) -> str:
    """One tool call: its label, or ``halt`` for the guard's JSON-RPC halt error."""
    try:
        result = await session.call_tool(tool, args)
    except MCPError as exc:
        if exc.code == HALT_ERROR_CODE:
            return "halt"
        raise
    return label(result)


async def scripted_loop(session: ClientSession) -> tuple[list[str], list[str]]:
    """The issue's loop: an identical write 3 times, then an identical read 6 times."""
    writes = [await call(session, "write_note", {"title": "log", "body": "x"}) for _ in range(3)]
    reads = [await call(session, "read_note", {"title": "todo"}) for _ in range(6)]
    return writes, reads


EXPECTED_WRITES = ["allow", "cached", "cached"]
EXPECTED_READS = ["allow", "allow", "warn", "block", "halt", "halt"]


async def scripted_http_upstream(port: int, tool: str, on_call: Callable[[Any, Any], Awaitable[Any]]
                                 ) -> Any:
    """A streamable-HTTP MCP server (aiohttp) on 127.0.0.1:``port`` with one tool, ``tool``,
    whose ``tools/call`` requests ``on_call(request, message)`` answers (an aiohttp
    response: an HTTP error, a cut stream, what a faulty server or gateway sends). Returns
    its ``AppRunner``: ``await runner.cleanup()`` stops it."""
    from aiohttp import web

    async def mcp(request: web.Request) -> web.StreamResponse:
        if request.method != "POST":
            return web.Response(status=405 if request.method == "GET" else 200)
        message = await request.json()
        method, rid = message.get("method"), message.get("id")
        if rid is None or method is None:
            return web.Response(status=202)
        if method == "tools/call":
            answer: web.StreamResponse = await on_call(request, message)
            return answer
        result: dict[str, Any] = {"tools": [{"name": tool, "inputSchema": {"type": "object"}}]}
        if method == "initialize":
            result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                      "serverInfo": {"name": "scripted", "version": "1"}}
        return web.json_response({"jsonrpc": "2.0", "id": rid, "result": result},
                                 headers={"mcp-session-id": "s1"})

    app = web.Application()
    app.router.add_route("*", "/mcp", mcp)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner
