"""The HTTP stacks the MCP proxy could listen and call upstream with, measured alone: CPU per
request of the process under test, the other side fixed (why aiohttp).

::

    python benchmarks/mcp_http_stacks.py            # 3,000 requests per variant, twice
    python benchmarks/mcp_http_stacks.py --smoke    # every variant, a few requests (CI)

Listeners (a subprocess each, its CPU read from /proc; the client is aiohttp's): aiohttp's
low-level ``web.Server`` (the proxy's), uvicorn (h11) with a bare ASGI callable, uvicorn with
Starlette (the proxy's first version). Upstream clients (this process's CPU; the server is
aiohttp's): aiohttp's ``ClientSession`` and httpx2's ``AsyncClient`` (the first version, with
its ``EventSource`` for an SSE answer), each on a JSON and on an SSE answer. The request is
one JSON-RPC ``tools/call`` POST, the answer the 140 bytes of ``read_note``'s result, as the
MCP headers of a session come and go.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.mcp_support import free_port  # noqa: E402

ANSWER = (b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"buy milk"}],'
          b'"structuredContent":{"result":"buy milk"},"isError":false}}')
SSE = b"event: message\r\ndata: " + ANSWER + b"\r\n\r\n"
BODY = (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_note",'
        b'"arguments":{"title":"todo"}}}')
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json",
           "mcp-session-id": "0" * 32, "mcp-protocol-version": "2025-11-25"}
LISTENERS = ("aiohttp", "uvicorn-bare", "uvicorn-starlette")
CLIENTS = ("aiohttp", "httpx2")


def serve(kind: str, port: int) -> None:
    """Run listener ``kind`` on 127.0.0.1:``port`` until killed (an ``x-sse`` header asks
    for the answer as SSE)."""
    if kind == "aiohttp":
        from aiohttp import web

        async def handle(request: web.BaseRequest) -> web.StreamResponse:
            await request.read()
            if request.headers.get("x-sse"):
                response = web.StreamResponse()
                response.content_type = "text/event-stream"
                await response.prepare(request)
                await response.write(SSE)
                await response.write_eof()
                return response
            return web.Response(body=ANSWER, content_type="application/json",
                                headers={"mcp-session-id": "0" * 32})

        async def main() -> None:
            runner = web.ServerRunner(web.Server(handle, access_log=None,
                                                 handler_cancellation=True))
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            await asyncio.Event().wait()

        asyncio.run(main())
        return
    import uvicorn

    async def bare(scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"mcp-session-id", b"0" * 32)]})
        await send({"type": "http.response.body", "body": ANSWER})

    app: Any = bare
    if kind == "uvicorn-starlette":
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import Response
        from starlette.routing import Route

        async def endpoint(request: Request) -> Response:
            await request.body()
            return Response(ANSWER, media_type="application/json",
                            headers={"mcp-session-id": "0" * 32})

        app = Starlette(routes=[Route("/mcp", endpoint, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off",
                http="h11", access_log=False)


async def aiohttp_client(url: str, n: int, sse: bool) -> None:
    """``n`` POSTs with aiohttp, reading each answer whole."""
    import aiohttp

    headers = {**HEADERS, "x-sse": "1"} if sse else HEADERS
    async with aiohttp.ClientSession() as session:
        for _ in range(n):
            async with session.post(url, data=BODY, headers=headers) as response:
                await response.read()


async def httpx2_client(url: str, n: int, sse: bool) -> None:
    """``n`` POSTs with httpx2, an SSE answer read with its ``EventSource``."""
    import httpx2

    headers = {**HEADERS, "x-sse": "1"} if sse else HEADERS
    async with httpx2.AsyncClient() as client:
        for _ in range(n):
            async with client.stream("POST", url, content=BODY, headers=headers) as response:
                if sse:
                    async for _event in httpx2.EventSource(response, max_event_size=None):
                        pass
                else:
                    await response.aread()


Client = Callable[[str, int, bool], Coroutine[Any, Any, None]]
CLIENT_FUNCTIONS: dict[str, Client] = {"aiohttp": aiohttp_client, "httpx2": httpx2_client}


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start(kind: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, __file__, "--serve", kind, str(port)])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return process, f"http://127.0.0.1:{port}/mcp"
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"the {kind} listener did not listen on {port}")


def listener_us(kind: str, requests: int) -> float:
    """CPU µs per request of listener ``kind`` (aiohttp's client calling it)."""
    process, url = _start(kind)
    try:
        asyncio.run(aiohttp_client(url, max(requests // 10, 1), False))
        before = _cpu_seconds(process.pid)
        asyncio.run(aiohttp_client(url, requests, False))
        return (_cpu_seconds(process.pid) - before) / requests * 1e6
    finally:
        process.terminate()
        process.wait(timeout=10)


def client_us(name: str, sse: bool, requests: int) -> float:
    """CPU µs per request of client ``name`` (against aiohttp's listener)."""
    process, url = _start("aiohttp")
    client = CLIENT_FUNCTIONS[name]
    try:
        asyncio.run(client(url, max(requests // 10, 1), sse))
        before = time.process_time()
        asyncio.run(client(url, requests, sse))
        return (time.process_time() - before) / requests * 1e6
    finally:
        process.terminate()
        process.wait(timeout=10)


def main() -> None:
    """Parse the options, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="a few requests: every variant")
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return
    requests, repeat = (20, 1) if args.smoke else (args.requests, args.repeat)
    print(f"CPU per request ({requests} requests, {repeat} runs; load average "
          f"{os.getloadavg()[0]:.1f}; /proc ticks are 10 ms, so a few requests say nothing):")
    for kind in LISTENERS:
        runs = " / ".join(f"{listener_us(kind, requests):.0f}" for _ in range(repeat))
        print(f"  listener {kind:18s} {runs} us")
    for name in CLIENTS:
        for sse in (False, True):
            runs = " / ".join(f"{client_us(name, sse, requests):.0f}" for _ in range(repeat))
            print(f"  client   {name:8s} {'SSE ' if sse else 'JSON'}     {runs} us")


if __name__ == "__main__":
    main()
