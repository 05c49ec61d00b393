"""A hostile or clumsy client of ``toolguard mcp-proxy`` (the real proxy, a subprocess, in
front of the example upstream): each thing an upstream would never answer, or that would
leave a POST waiting for an answer sent elsewhere, gets a clear status or JSON-RPC error at
once, and the session goes on serving."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from tests.mcp.test_mcp_raw import _exchange
from tests.mcp.test_mcp_wire import ACCEPT, INIT, _http, _open, _read_note
from tests.mcp_support import (
    TEST_TIMEOUT_S,
    TEST_TOKEN,
    free_port,
    proxy_command,
    running,
    scripted_http_upstream,
    upstream_command,
)
from tests.mcp_support import http_proxy as start_http_proxy
from toolguard.mcp._frames import MAX_FRAME_BYTES

ANSWER_S = 10.0  # an answer the proxy owes at once; a hang fails here, not at the test timeout


@pytest.fixture(scope="module", params=["http", "stdio"])
def proxy_url(request: pytest.FixtureRequest,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The proxy on HTTP, in front of an HTTP upstream or a stdio one (per session)."""
    tmp = tmp_path_factory.mktemp("hostile")
    with start_http_proxy(tmp, tmp / "counts.json",
                          stdio_upstream=request.param == "stdio") as url:
        yield url


def _request(rid: object, method: str, params: object) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})


@pytest.mark.parametrize("params", [[1], "x", 5])
async def test_params_that_are_no_object_are_refused_not_left_unanswered(
        proxy_url: str, params: object) -> None:
    """An upstream answers a request whose params are no object with an error of id null
    (or nothing), which names no request: the proxy refuses it itself."""
    async with _http() as http:
        sid = await _open(http, proxy_url)
        for rid, method in ((50, "tools/call"), (51, "ping")):
            async with http.post(proxy_url, data=_request(rid, method, params),
                                 headers={**ACCEPT, "mcp-session-id": sid},
                                 timeout=ANSWER_S) as response:
                assert response.status == 200
                answer = await response.json()
                assert answer["id"] == rid and answer["error"]["code"] == -32602
        status, _ = await _read_note(http, proxy_url, sid, 52)
        assert status == 200


@pytest.mark.parametrize("rid", [True, False, None, 1.5, {"a": 1}])
async def test_request_ids_that_are_no_string_or_integer_are_a_400(
        proxy_url: str, rid: object) -> None:
    async with _http() as http:
        sid = await _open(http, proxy_url)
        async with http.post(proxy_url, data=_request(rid, "ping", {}),
                             headers={**ACCEPT, "mcp-session-id": sid},
                             timeout=ANSWER_S) as response:
            assert response.status == 400
            assert (await response.json())["error"]["code"] == -32600
        status, _ = await _read_note(http, proxy_url, sid, 1)  # 1 == True: no clash with it
        assert status == 200


async def test_stdio_refuses_a_true_id_and_object_less_params(tmp_path: Path) -> None:
    command = proxy_command(upstream=upstream_command(tmp_path / "counts.json"))
    lines = [INIT, _request(True, "ping", {}), _request(7, "tools/call", [1]),
             _request(8, "ping", {})]
    with anyio.fail_after(TEST_TIMEOUT_S):
        answers = [orjson.loads(a) for a in await _exchange(command, lines, 4)]
    by_id = {a["id"]: a for a in answers}
    assert by_id[None]["error"]["code"] == -32600
    assert by_id[7]["error"]["code"] == -32602
    assert by_id[8]["result"] == {} and "result" in by_id[1]


def _slow(rid: object) -> bytes:
    return _request(rid, "tools/call", {"name": "count_slowly", "arguments": {"steps": 6}})


async def test_an_id_in_flight_reused_by_another_post_is_a_409_and_the_first_is_answered(
        proxy_url: str) -> None:
    """Each POST waits on its requests' ids: a second POST reusing one while it is in flight
    took the first's stream, which then waited forever (past a DELETE too)."""
    async with _http() as http:
        sid = await _open(http, proxy_url)
        session = {**ACCEPT, "mcp-session-id": sid}

        async def post(body: bytes, delay: float) -> tuple[int, dict[str, object]]:
            await asyncio.sleep(delay)
            async with http.post(proxy_url, data=body, headers=session,
                                 timeout=ANSWER_S) as response:
                raw = await response.read()
                data = raw.rpartition(b"data: ")[2] if raw.startswith(b"event") else raw
                return response.status, orjson.loads(data)

        (first, answer), (second, refusal) = await asyncio.gather(
            post(_slow(60), 0), post(_slow(60), 0.1))
        assert first == 200 and answer["id"] == 60 and "result" in answer
        assert second == 409 and refusal["id"] == 60
        status, batch = await post(orjson.dumps([orjson.loads(_slow(61))] * 2), 0)
        assert status == 409 and batch["id"] == 61
        status, _ = await _read_note(http, proxy_url, sid, 61)  # the batch was not run
        assert status == 200


async def _refusing_upstream(port: int) -> Any:
    """A streamable-HTTP MCP server that answers ``tools/call`` with HTTP 429 and a JSON
    body that is no answer to it (as a rate-limiting gateway does)."""
    from aiohttp import web

    async def refuse(request: web.Request, message: Any) -> web.StreamResponse:
        return web.json_response({"jsonrpc": "2.0", "id": None, "error": {
            "code": -32000, "message": "slow down"}}, status=429)

    return await scripted_http_upstream(port, "t", refuse)


async def test_an_http_error_status_from_the_upstream_answers_the_call(tmp_path: Path) -> None:
    """An upstream's HTTP 4xx with a JSON body whose id is null (or that is no JSON-RPC)
    answered nothing: the call waited forever. It is now the call's error, with the body's
    message."""
    up_port, port = free_port(), free_port()
    runner = await _refusing_upstream(up_port)
    command = proxy_command("--upstream-url", f"http://127.0.0.1:{up_port}/mcp",
                            "--listen", f"127.0.0.1:{port}")
    try:
        with ExitStack() as stack:  # started in a thread: this loop serves the upstream
            await anyio.to_thread.run_sync(stack.enter_context,
                                           running(command, port, tmp_path / "proxy.log"))
            url = f"http://127.0.0.1:{port}/mcp"
            async with _http() as http:
                sid = await _open(http, url)
                async with http.post(url, data=_request(3, "tools/call", {"name": "t"}),
                                     headers={**ACCEPT, "mcp-session-id": sid},
                                     timeout=ANSWER_S) as response:
                    answer = await response.json()
            assert answer["id"] == 3
            text = answer["result"]["content"][0]["text"]
            assert answer["result"]["isError"] and "HTTP 429" in text and "slow down" in text
            await anyio.to_thread.run_sync(stack.close)
    finally:
        await runner.cleanup()


async def test_a_body_that_never_finishes_is_a_408_and_an_oversized_one_a_413(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The listener in-process (no session may be opened): a slowloris POST held
    its handler forever; a Content-Length over the frame limit is refused before reading; a
    client leaving mid-body is no traceback."""
    from aiohttp import web

    from toolguard.mcp import _http_listener as listener_module

    async def no_link() -> Any:
        raise AssertionError("no session is opened")

    monkeypatch.setattr(listener_module, "BODY_IDLE_S", 0.3, raising=False)
    port = free_port()
    listener = listener_module.HttpListener(no_link, None, listener_module.Access(
        "127.0.0.1", port, TEST_TOKEN, 4))
    runner = web.ServerRunner(web.Server(listener.handle, handler_cancellation=True))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    head = (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer %s\r\n" % (port, TEST_TOKEN.encode()))
    bad_init = orjson.dumps({**orjson.loads(INIT), "id": True})  # refused before a session
    try:
        for request, status in ((head + b"Content-Length: 100\r\n\r\n{\"jsonrpc\"", b"408"),
                                (head + b"Content-Length: %d\r\n\r\n" % len(bad_init)
                                 + bad_init, b"400"),
                                (head + b"Content-Length: %d\r\n\r\n{" % (MAX_FRAME_BYTES + 1),
                                 b"413")):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            line = await asyncio.wait_for(reader.readline(), ANSWER_S)
            assert line.split()[1] == status, line
            writer.close()
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head + b"Content-Length: 100\r\n\r\n{")
        await writer.drain()
        writer.transport.abort()
        await asyncio.sleep(0.5)
        assert not [r for r in caplog.records if r.exc_info], caplog.text
    finally:
        await listener.close()
        await runner.cleanup()


async def test_malformed_http_is_a_400_and_one_line_in_the_log_not_a_traceback(
        tmp_path: Path) -> None:
    with start_http_proxy(tmp_path, tmp_path / "counts.json") as url:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        head = b"POST /mcp HTTP/1.1\r\nHost: x\r\n"
        for request in (head + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n",
                        head + b"X: " + b"a" * 10000 + b"\r\n\r\n"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            line = await asyncio.wait_for(reader.readline(), ANSWER_S)
            assert line.split()[1] == b"400", line
            writer.close()
        async with _http() as http:
            await _open(http, url)  # still serving
    log = (tmp_path / "proxy.log").read_text()
    assert "Traceback" not in log
    assert log.count("refused a malformed HTTP request (HTTP 400)") == 2, log


async def test_a_post_in_flight_when_its_session_is_deleted_gets_an_error(
        proxy_url: str) -> None:
    async with _http() as http:
        sid = await _open(http, proxy_url)
        session = {**ACCEPT, "mcp-session-id": sid}

        async def delete() -> int:
            await asyncio.sleep(0.2)
            async with http.delete(proxy_url, headers=session) as response:
                return response.status

        async def post() -> tuple[int, bytes]:
            async with http.post(proxy_url, data=_slow(70), headers=session,
                                 timeout=ANSWER_S) as response:
                return response.status, await response.read()

        (status, raw), deleted = await asyncio.gather(post(), delete())
        assert deleted == 200 and status == 200
        answer = orjson.loads(raw.rpartition(b"data: ")[2] if raw.startswith(b"event") else raw)
        assert answer["id"] == 70 and "session ended" in answer["error"]["message"]


@pytest.mark.parametrize("origin", ["http://[::1", "http://evil.example", "null"])
async def test_an_origin_not_of_this_host_is_a_403_however_malformed(
        proxy_url: str, origin: str) -> None:
    async with _http() as http, http.post(proxy_url, data=INIT, timeout=ANSWER_S, headers={
            **ACCEPT, "origin": origin}) as response:
        assert response.status == 403
