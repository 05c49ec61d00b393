"""Who may use ``toolguard mcp-proxy --listen``: the bearer token (given, or generated and
printed once), ``Host`` and ``Origin`` against the exact listen address and port (DNS
rebinding), the cap on sessions and so on upstream processes, a body that trickles in, a
``tools/call`` notification, the warning for an address beyond loopback. The real proxy (a
subprocess) with raw HTTP requests, and the listener's rules under hypothesis."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.mcp.test_mcp_unknown_outcomes import pay_upstream, payments
from tests.mcp.test_mcp_wire import ACCEPT, INIT
from tests.mcp_support import (
    AUTH,
    TEST_TIMEOUT_S,
    TEST_TOKEN,
    free_port,
    proxy_command,
    running,
)
from toolguard.mcp._http_listener import Access

MAX_SESSIONS = 3


def _children(pid: int) -> int:
    """Processes ``pid`` started that still run (its upstream processes)."""
    done = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True,
                          check=False)
    return len(done.stdout.split())


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[tuple[str, int, subprocess.Popen[bytes], Path]]:
    """A proxy on 127.0.0.1 with a stdio upstream (a process per session), at most
    ``MAX_SESSIONS`` sessions; its URL, port, process and payment log."""
    tmp = tmp_path_factory.mktemp("listen")
    log, port = tmp / "payments.log", free_port()
    policy = tmp / "policy.toml"
    policy.write_text("[tools.refund]\nrequires_approval = true\n")
    command = proxy_command("--listen", f"127.0.0.1:{port}", "--max-sessions",
                            str(MAX_SESSIONS), "--policy", str(policy),
                            upstream=pay_upstream(log, "--run-notifications"))
    with running(command, port, tmp / "proxy.log") as process:
        yield f"http://127.0.0.1:{port}/mcp", port, process, log


async def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TEST_TIMEOUT_S)
                                     ) as http, http.post(url, data=body, headers=headers
                                                          ) as response:
        raw = await response.read()
        sid = response.headers.get("mcp-session-id")
        return response.status, (sid, raw)


async def _delete(url: str, sid: str) -> None:
    async with aiohttp.ClientSession() as http, http.delete(
            url, headers={**AUTH, "mcp-session-id": sid}) as response:
        assert response.status == 200


async def test_without_the_token_nothing_is_served_and_no_upstream_starts(
        proxy: tuple[str, int, subprocess.Popen[bytes], Path]) -> None:
    """Regression: any initialize POST without credentials opened a session with its own
    upstream process."""
    url, _, process, _ = proxy
    before = _children(process.pid)
    for headers in ({}, {"authorization": "Bearer wrong-token-wrong-token"},
                    {"authorization": f"Basic {TEST_TOKEN}"},
                    {"authorization": TEST_TOKEN}):
        for _ in range(5):
            status, _ = await _post(url, INIT, {**ACCEPT, **headers})
            assert status == 401
    assert _children(process.pid) == before


async def test_sessions_and_upstream_processes_are_capped(
        proxy: tuple[str, int, subprocess.Popen[bytes], Path]) -> None:
    """Regression: 40 initialize POSTs made 40 upstream processes."""
    url, _, process, _ = proxy
    opened: list[str] = []
    refused = 0
    try:
        for _ in range(MAX_SESSIONS + 4):
            status, (sid, raw) = await _post(url, INIT, {**ACCEPT, **AUTH})
            if status == 200:
                opened.append(sid)
            else:
                assert status == 503 and b"too many sessions" in raw
                refused += 1
        assert len(opened) == MAX_SESSIONS and refused == 4
        assert _children(process.pid) <= MAX_SESSIONS
    finally:
        for sid in opened:
            await _delete(url, sid)
    status, (sid, _) = await _post(url, INIT, {**ACCEPT, **AUTH})  # room again
    assert status == 200
    await _delete(url, sid)


@pytest.mark.parametrize(("host", "origin", "served"), [
    ("127.0.0.1:{port}", None, True),
    ("localhost:{port}", "http://localhost:{port}", True),
    ("127.0.0.1:{port}", "http://127.0.0.1:{port}", True),
    ("127.0.0.1:{port}", "http://localhost:1", False),  # another port of localhost
    ("127.0.0.1:{port}", "http://127.0.0.1:8888", False),
    ("127.0.0.1:{port}", "http://evil.example", False),
    ("127.0.0.1:{port}", "null", False),
    ("attacker.example", None, False),  # a rebound name
    ("attacker.example:{port}", None, False),
    ("127.0.0.1:1", None, False),
    ("127.0.0.1", None, False),  # port 80
])
async def test_host_and_origin_must_name_the_listen_address_and_port(
        proxy: tuple[str, int, subprocess.Popen[bytes], Path], host: str,
        origin: str | None, served: bool) -> None:
    """Regression: Origin was checked by host name only (any port of localhost passed) and
    Host not at all, so a page on a rebound name reached the proxy."""
    url, port, _, _ = proxy
    headers = {**ACCEPT, **AUTH, "host": host.format(port=port)}
    if origin is not None:
        headers["origin"] = origin.format(port=port)
    status, (sid, _) = await _post(url, INIT, headers)
    assert status == (200 if served else 403)
    if sid:
        await _delete(url, sid)


async def test_a_tools_call_notification_is_a_400_and_never_runs(
        proxy: tuple[str, int, subprocess.Popen[bytes], Path]) -> None:
    url, _, _, log = proxy
    status, (sid, _) = await _post(url, INIT, {**ACCEPT, **AUTH})
    assert status == 200
    try:
        note = orjson.dumps({"jsonrpc": "2.0", "method": "tools/call",
                             "params": {"name": "refund", "arguments": {"order": "A-2"}}})
        status, (_, raw) = await _post(url, note, {**ACCEPT, **AUTH, "mcp-session-id": sid})
        assert status == 400 and orjson.loads(raw)["error"]["code"] == -32600
        ping = b'{"jsonrpc":"2.0","id":9,"method":"ping"}'
        status, _ = await _post(url, ping, {**ACCEPT, **AUTH, "mcp-session-id": sid})
        assert status == 200  # the upstream has read everything before it
    finally:
        await _delete(url, sid)
    assert payments(log) == []


def test_a_generated_token_is_printed_once_and_hidden_from_the_upstream(
        tmp_path: Path) -> None:
    """Without TOOLGUARD_MCP_TOKEN the proxy makes a token and prints it once; a given one is
    removed from the environment before the upstream starts (its tools must not read it)."""
    port, env_file = free_port(), tmp_path / "upstream.env"
    upstream = ["sh", "-c", f'env > "{env_file}"; exec "$0" "$@"',
                *pay_upstream(tmp_path / "payments.log")]
    command = proxy_command("--listen", f"127.0.0.1:{port}", upstream=upstream)
    env = {k: v for k, v in os.environ.items() if k != "TOOLGUARD_MCP_TOKEN"}
    with (tmp_path / "proxy.log").open("wb") as out:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                   env=env)
    try:
        log = tmp_path / "proxy.log"
        for _ in range(600):
            if "Authorization: Bearer" in log.read_text():
                break
            assert process.poll() is None, log.read_text()
            time.sleep(0.05)
        tokens = re.findall(r"Authorization: Bearer (\S+?)`", log.read_text())
        assert len(tokens) == 1 and len(tokens[0]) >= 32
        url = f"http://127.0.0.1:{port}/mcp"
        for _ in range(600):
            try:
                status, _ = asyncio.run(_post(url, INIT, {
                    **ACCEPT, "authorization": f"Bearer {tokens[0]}"}))
                break
            except aiohttp.ClientConnectionError:
                time.sleep(0.05)
        assert status == 200
        assert "TOOLGUARD_MCP_TOKEN" not in env_file.read_text()
    finally:
        process.terminate()
        process.wait(10)
    assert (tmp_path / "proxy.log").read_text().count(tokens[0]) == 1


def test_a_given_token_never_reaches_the_upstream(tmp_path: Path) -> None:
    port, env_file = free_port(), tmp_path / "upstream.env"
    upstream = ["sh", "-c", f'env > "{env_file}"; exec "$0" "$@"',
                *pay_upstream(tmp_path / "payments.log")]
    with running(proxy_command("--listen", f"127.0.0.1:{port}", upstream=upstream), port,
                 tmp_path / "proxy.log"):
        status, _ = asyncio.run(_post(f"http://127.0.0.1:{port}/mcp", INIT, {**ACCEPT, **AUTH}))
    assert status == 200
    assert TEST_TOKEN not in env_file.read_text()
    assert TEST_TOKEN not in (tmp_path / "proxy.log").read_text()


@pytest.mark.parametrize(("listen", "warned"), [("127.0.0.1", False), ("0.0.0.0", True)])
def test_binding_beyond_loopback_is_warned_about(listen: str, warned: bool) -> None:
    done = subprocess.run(
        proxy_command("--listen", f"{listen}:{free_port()}", "--token", TEST_TOKEN,
                      "--explain", upstream=pay_upstream(Path("unused.log"))),
        capture_output=True, text=True, timeout=TEST_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
    assert ("beyond loopback" in done.stderr) is warned
    assert ("any Host name is accepted" in done.stderr) is warned


@pytest.mark.parametrize(("args", "message"), [
    (["--token", "short"], "at least 16 characters"),
    (["--max-sessions", "0"], "--max-sessions must be >= 1"),
])
def test_bad_listen_options_exit_2(args: list[str], message: str) -> None:
    done = subprocess.run(proxy_command("--listen", "127.0.0.1:1", *args, upstream=["x"]),
                          capture_output=True, text=True, timeout=TEST_TIMEOUT_S, check=False)
    assert done.returncode == 2 and message in done.stderr


async def test_a_body_trickling_in_is_cut_after_the_total_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: a byte every few seconds kept a POST's handler forever (only a pause
    over 30 s ended it)."""
    from aiohttp import web

    from toolguard.mcp import _http_listener as listener_module

    async def no_link() -> Any:
        raise AssertionError("no session is opened")

    monkeypatch.setattr(listener_module, "BODY_IDLE_S", 0.5)
    monkeypatch.setattr(listener_module, "BODY_TOTAL_S", 1.0)
    port = free_port()
    listener = listener_module.HttpListener(no_link, None, Access("127.0.0.1", port,
                                                                  TEST_TOKEN, 4))
    runner = web.ServerRunner(web.Server(listener.handle, handler_cancellation=True))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer %s\r\n"
                     b"Content-Length: 1000\r\n\r\n" % (port, TEST_TOKEN.encode()))
        started = asyncio.get_running_loop().time()

        async def trickle() -> None:
            for _ in range(100):
                writer.write(b" ")
                await writer.drain()
                await asyncio.sleep(0.1)

        dripping = asyncio.ensure_future(trickle())
        line = await asyncio.wait_for(reader.readline(), TEST_TIMEOUT_S)
        took = asyncio.get_running_loop().time() - started
        dripping.cancel()
        writer.close()
        assert line.split()[1] == b"408", line
        assert 0.9 <= took < 5
    finally:
        await listener.close()
        await runner.cleanup()


# -- the rules, for all inputs ----------------------------------------------------------------
_NAMES = st.sampled_from(["127.0.0.1", "localhost", "LOCALHOST", "[::1]", "::1", "10.0.0.5",
                          "127.0.0.1.evil.example", "localhost.", "evil.example", "0.0.0.0",
                          "127.0.0.2", "[::ffff:127.0.0.1]", "box.lan", "BOX.lan", ""])
_PORTS = st.sampled_from([None, 80, 443, 8765, 8766, 0, 65535, 99999])
_ACCESS = [Access("127.0.0.1", 8765, TEST_TOKEN, 4), Access("::1", 8765, TEST_TOKEN, 4),
           Access("10.0.0.5", 8765, TEST_TOKEN, 4),
           Access("0.0.0.0", 8765, TEST_TOKEN, 4, frozenset({"box.lan"}))]


def _spelled(name: str, port: int | None) -> str:
    if ":" in name and not name.startswith("["):
        name = f"[{name}]"
    return name if port is None else f"{name}:{port}"


@settings(max_examples=400, deadline=None)
@given(access=st.sampled_from(_ACCESS), name=_NAMES, port=_PORTS,
       origin=st.none() | st.tuples(st.sampled_from(["http", "https", "file", ""]), _NAMES,
                                    _PORTS),
       token=st.sampled_from([f"Bearer {TEST_TOKEN}", f"bearer  {TEST_TOKEN} ", TEST_TOKEN,
                              f"Bearer {TEST_TOKEN}x", "Bearer ", "Bearer \udcff", None]))
def test_a_request_is_served_only_by_the_listen_address_port_and_token(
        access: Access, name: str, port: int | None,
        origin: tuple[str, str, int | None] | None, token: str | None) -> None:
    names = access.names
    assert names is not None

    def ours(host: str, at: int | None, default: int) -> bool:
        return (host.lower().strip("[]") in names and (at or default) == access.port
                and host != "")

    served = ours(name, port, 80) and (origin is None or (
        origin[0] in ("http", "https") and ours(origin[1], origin[2],
                                                443 if origin[0] == "https" else 80)))
    served = served and token is not None and token.strip().lower().startswith("bearer ") \
        and token.split()[-1] == TEST_TOKEN
    spelled_origin = None if origin is None else f"{origin[0]}://{_spelled(*origin[1:])}"
    assert (access.refusal(_spelled(name, port), spelled_origin, token) is None) is served
