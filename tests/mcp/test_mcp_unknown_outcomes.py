"""A guarded call that ``toolguard mcp-proxy`` sent upstream and that gets no answer has an
unknown outcome, as for a tool that raised ``TimeoutError``: the upstream dies mid-call, does not
answer within ``--call-timeout``, sends a frame over the limit, or the client cancels the call.
The identical retry goes to review; the upstream never runs it a second time. The payment
upstream (``tests/mcp_pay_upstream.py``, a real subprocess) takes each payment before it
answers, as a real gateway does."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toolguard as tg
from tests.mcp_support import (
    TEST_TIMEOUT_S,
    free_port,
    proxy_command,
    running,
    scripted_http_upstream,
)
from toolguard.adapters.mcp import GuardMiddleware
from toolguard.mcp._link import Link
from toolguard.mcp._proxy import _build_guard, _open_link

from .test_mcp_wire import ACCEPT, _http, _open

PAY_UPSTREAM = Path(__file__).parents[1].joinpath("mcp_pay_upstream.py")
SECRETS = ("S3CRETPW", "sk-live-STDERR4242abcd")
UNKNOWN = "the outcome is unknown"
REVIEW = "without a known outcome"  # the guard's reason for the retry's review


def pay_upstream(log: Path, *options: str) -> list[str]:
    return [sys.executable, str(PAY_UPSTREAM), "--log", str(log), *options]


def payments(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def call(rid: Any, tool: str, order: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": tool, "arguments": {"order": order}}}


def text_of(answer: dict[str, Any]) -> str:
    return " ".join(block.get("text", "") for block in answer["result"]["content"])


# -- the proxy on stdio, with raw JSON-RPC ----------------------------------------------------
class _Stdio:
    """The proxy as a subprocess, spoken to in raw JSON-RPC lines (initialized)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.seen: list[dict[str, Any]] = []

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(orjson.dumps(message) + b"\n")

    async def answer(self, rid: Any) -> dict[str, Any]:
        """The next answer (a message without a method) with id ``rid``; the others read on
        the way are kept in ``seen``."""
        assert self.process.stdout is not None
        while True:
            line = await asyncio.wait_for(self.process.stdout.readline(), TEST_TIMEOUT_S)
            assert line, "the proxy closed its stdout"
            message: dict[str, Any] = orjson.loads(line)
            self.seen.append(message)
            if "method" not in message and message.get("id") == rid:
                return message


@asynccontextmanager
async def stdio_proxy(tmp: Path, upstream: list[str], *options: str) -> AsyncIterator[_Stdio]:
    with (tmp / "proxy.err").open("wb") as err:
        process = await asyncio.create_subprocess_exec(
            *proxy_command(*options, upstream=upstream), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=err)
    proxy = _Stdio(process)
    try:
        proxy.send({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}})
        await proxy.answer("init")
        proxy.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        yield proxy
    finally:
        if process.returncode is None:
            process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except asyncio.TimeoutError:
            process.kill()
            await process.wait()


async def test_a_call_the_client_cancels_after_it_was_sent_is_not_run_again(
        tmp_path: Path) -> None:
    """Regression: the cancelled payment was recorded as failed, and its identical retry paid
    a second time (the upstream had taken it: a cancellation is advisory in MCP)."""
    log = tmp_path / "payments.log"
    async with stdio_proxy(tmp_path, pay_upstream(log, "--delay", "1.0")) as proxy:
        proxy.send(call(1, "pay", "C-1"))
        await asyncio.sleep(0.4)  # the upstream took it and is answering slowly
        proxy.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": 1, "reason": "the user pressed stop"}})
        await asyncio.sleep(1.2)  # the upstream's late answer is dropped
        proxy.send(call(2, "pay", "C-1"))
        retry = await proxy.answer(2)
        proxy.send(call(3, "pay", "C-1"))
        again = await proxy.answer(3)
    assert retry["result"]["isError"] is True and REVIEW in text_of(retry)
    assert again["result"]["isError"] is True
    assert [m for m in proxy.seen if m.get("id") == 1] == []  # a cancelled call: no answer
    assert payments(log) == ["paid C-1"]


async def test_an_upstream_that_never_answers_times_out_as_an_unknown_outcome(
        tmp_path: Path) -> None:
    """Regression: a call the upstream never answered waited forever, and its identical
    retry waited behind it (the call stayed in progress)."""
    log = tmp_path / "payments.log"
    async with stdio_proxy(tmp_path, pay_upstream(log, "--delay", "60"),
                           "--call-timeout", "0.5") as proxy:
        started = asyncio.get_running_loop().time()
        proxy.send(call(1, "pay", "T-1"))
        first = await proxy.answer(1)
        took = asyncio.get_running_loop().time() - started
        proxy.send(call(2, "pay", "T-1"))
        retry = await proxy.answer(2)
    assert first["result"]["isError"] is True and UNKNOWN in text_of(first)
    assert "did not answer within 0.5 s" in text_of(first)
    assert 0.5 <= took < 10
    assert retry["result"]["isError"] is True and REVIEW in text_of(retry)
    assert payments(log) == ["paid T-1"]


def test_call_timeout_must_be_positive() -> None:
    for value in ("0", "-1", "nan"):
        done = subprocess.run(proxy_command("--call-timeout", value, upstream=["x"]),
                              capture_output=True, text=True, timeout=TEST_TIMEOUT_S,
                              check=False)
        assert done.returncode == 2 and "--call-timeout must be > 0" in done.stderr, value


def test_a_call_timeout_the_claim_would_not_outlive_is_warned_about(tmp_path: Path) -> None:
    """A call still waited for must keep its claim: past ``in_progress_ttl_s`` an identical
    call would run beside it."""
    for timeout, warned in (("700", True), ("300", False)):
        done = subprocess.run(
            proxy_command("--call-timeout", timeout, "--explain",
                          upstream=pay_upstream(tmp_path / "payments.log")),
            capture_output=True, text=True, timeout=TEST_TIMEOUT_S, check=False)
        assert done.returncode == 0, done.stderr
        assert ("in_progress_ttl_s (600 s)" in done.stderr) is warned


async def test_a_tools_call_notification_is_refused_not_forwarded(tmp_path: Path) -> None:
    """Regression: a tools/call without an id went to the upstream byte for byte, unguarded;
    one that runs such a call executed a refund the policy gates behind approval."""
    log, policy = tmp_path / "payments.log", tmp_path / "policy.toml"
    policy.write_text("[tools.refund]\nrequires_approval = true\n")
    note: dict[str, Any] = {"jsonrpc": "2.0", "method": "tools/call",
                              "params": {"name": "refund", "arguments": {"order": "A-2"}}}
    shapes: list[Any] = [  # alone, with _meta, with a name the guard does not know, in a batch
        note, {**note, "params": {**note["params"], "_meta": {"progressToken": "p"}}},
        {**note, "params": {"name": "pay", "arguments": {"order": "A-3"}}},
        [note, {"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": "p", "progress": 1}}]]
    async with stdio_proxy(tmp_path, pay_upstream(log, "--run-notifications"),
                           "--policy", str(policy)) as proxy:
        refusals = []
        for shape in shapes:
            assert proxy.process.stdin is not None
            proxy.process.stdin.write(orjson.dumps(shape) + b"\n")
            refusals.append(await proxy.answer(None))
        proxy.send({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        await proxy.answer(1)  # the upstream has read everything sent before
    for refused in refusals:
        assert refused["error"]["code"] == -32600
        assert "without an id" in refused["error"]["message"]
    assert payments(log) == []


# -- the link in-process: a frame over the limit, and the property over every ending ---------
class _Client:
    """A link's client port: every final answer, by id."""

    def __init__(self) -> None:
        self.finals: dict[Any, dict[str, Any]] = {}
        self.arrived = asyncio.Event()

    def send(self, raw: bytes, stream: Any, final: bool) -> None:
        if final:
            message = orjson.loads(raw)
            self.finals[message.get("id")] = message
            self.arrived.set()

    def end(self, stream: Any) -> None:
        """Nothing to close."""

    async def answer(self, rid: Any, timeout_s: float = TEST_TIMEOUT_S) -> dict[str, Any]:
        async def arrived() -> dict[str, Any]:
            while rid not in self.finals:
                self.arrived.clear()
                await self.arrived.wait()
            return self.finals[rid]

        return await asyncio.wait_for(arrived(), timeout_s)


def _middleware(tmp: Path, audit: bool, policy: tg.Policy | None = None) -> GuardMiddleware:
    """One guard for every link (as the proxy's, one task); ``audit``: with an audit sink,
    which takes the guard's task path instead of the link's callbacks."""
    guard = _build_guard(policy or tg.Policy(), tmp / "audit.jsonl" if audit else None)
    return GuardMiddleware(guard, task_id="shop")


async def _link(middleware: GuardMiddleware, upstream: list[str], call_timeout_s: float
                ) -> tuple[Link, _Client]:
    link = await _open_link(upstream, None, middleware, TEST_TIMEOUT_S, call_timeout_s)
    client = _Client()
    link.attach(client)
    await link.learn_tools(TEST_TIMEOUT_S)
    return link, client


def _close_sinks(middleware: GuardMiddleware) -> None:
    for sink in middleware.guard._sinks:  # the proxy's process ends instead
        if isinstance(sink, tg.JsonlSink):
            sink.close()


def _send(link: Link, message: dict[str, Any]) -> None:
    link.from_client(orjson.dumps(message), message)


async def _retry(middleware: GuardMiddleware, log: Path, order: str) -> dict[str, Any]:
    """The identical payment from a new upstream session of the same task: its answer."""
    link, client = await _link(middleware, pay_upstream(log), TEST_TIMEOUT_S)
    try:
        _send(link, call(2, "pay", order))
        return await client.answer(2)
    finally:
        await link.close()


@pytest.mark.parametrize("audit", [False, True], ids=["callbacks", "task"])
async def test_a_frame_over_the_limit_is_an_unknown_outcome(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, audit: bool) -> None:
    for module in ("mcp._frames", "mcp._wire"):  # the limit, and the text that names it
        monkeypatch.setattr(f"toolguard.{module}.MAX_FRAME_BYTES", 64 * 1024)
    log = tmp_path / "payments.log"
    middleware = _middleware(tmp_path, audit)
    try:
        link, client = await _link(middleware, pay_upstream(log, "--answer-bytes", "300000"),
                                   TEST_TIMEOUT_S)
        try:
            _send(link, call(1, "pay", "F-1"))
            first = await client.answer(1)
        finally:
            await link.close()
        retry = await _retry(middleware, log, "F-1")
    finally:
        _close_sinks(middleware)
    assert UNKNOWN in text_of(first) and "over 65536 bytes" in text_of(first)
    assert REVIEW in text_of(retry)
    assert payments(log) == ["paid F-1"]


async def test_each_call_times_out_at_its_own_deadline(tmp_path: Path) -> None:
    """Calls sent 0.2 s apart to an upstream that never answers time out each
    ``call_timeout_s`` after it was sent (one timer serves them all), as unknown outcomes;
    an answered call never does."""
    log = tmp_path / "payments.log"
    loop = asyncio.get_running_loop()
    link, client = await _link(_middleware(tmp_path, False), pay_upstream(log, "--delay", "60"),
                               0.6)
    try:
        sent: dict[int, float] = {}
        for rid in (1, 2, 3):
            sent[rid] = loop.time()
            _send(link, call(rid, "pay", f"S-{rid}"))
            await asyncio.sleep(0.2)
        waited = {}
        for rid in (1, 2, 3):
            answer = await client.answer(rid)
            waited[rid] = loop.time() - sent[rid]
            assert UNKNOWN in text_of(answer) and "within 0.6 s" in text_of(answer)
    finally:
        await link.close()
    assert all(0.55 <= took < 3.0 for took in waited.values()), waited
    assert link._deadlines == {}


async def test_the_stderr_tail_of_a_dead_upstream_is_redacted(tmp_path: Path) -> None:
    log = tmp_path / "payments.log"
    middleware = _middleware(tmp_path, False)
    link, client = await _link(middleware, pay_upstream(log, "--die"), TEST_TIMEOUT_S)
    try:
        _send(link, call(1, "pay", "D-1"))
        first = await client.answer(1)
        await asyncio.sleep(0.2)
        _send(link, call(2, "pay", "D-2"))  # after: refused at once, naming the upstream
        later = await client.answer(2)
    finally:
        await link.close()
    assert UNKNOWN in text_of(first) and "went away" in text_of(first)
    assert "is gone" in text_of(later) and "[REDACTED]" in text_of(later)
    for secret in SECRETS:
        assert secret not in text_of(first) and secret not in text_of(later)
    assert payments(log) == ["paid D-1"]


async def _flaky_http_upstream(port: int, log: Path, failure: str) -> Any:
    """A streamable-HTTP MCP server whose ``pay`` takes the payment, then answers HTTP 502 as
    a gateway whose server died (``failure="502"``), or an event stream that ends before
    the answer (``"cut"``)."""
    from aiohttp import web

    async def pay(request: web.Request, message: Any) -> web.StreamResponse:
        with log.open("a") as out:
            out.write(f"paid {message['params']['arguments']['order']}\n")
        if failure == "502":
            return web.Response(status=502, text="bad gateway")
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b": working\n\n")
        await response.write_eof()
        return response

    return await scripted_http_upstream(port, "pay", pay)


@pytest.mark.parametrize("failure", ["502", "cut"])
async def test_an_http_upstream_failing_after_the_call_is_an_unknown_outcome(
        tmp_path: Path, failure: str) -> None:
    """A gateway's 5xx, or an answer stream that ends before the answer, may come after the
    tool ran: an unknown outcome at once (not a known failure, not a wait for the
    timeout)."""
    log, port = tmp_path / "payments.log", free_port()
    runner = await _flaky_http_upstream(port, log, failure)
    middleware = _middleware(tmp_path, False)
    answers = []
    try:
        for rid in (1, 2):
            link = await _open_link(None, f"http://127.0.0.1:{port}/mcp", middleware,
                                    TEST_TIMEOUT_S, TEST_TIMEOUT_S)
            client = _Client()
            link.attach(client)
            try:
                await link.learn_tools(TEST_TIMEOUT_S)
                _send(link, call(rid, "pay", "H-1"))
                answers.append(await client.answer(rid, 10.0))
            finally:
                await link.close()
    finally:
        await runner.cleanup()
    first, retry = answers
    assert UNKNOWN in text_of(first)
    assert REVIEW in text_of(retry)
    assert payments(log) == ["paid H-1"]


@pytest.mark.parametrize("audit", [False, True], ids=["callbacks", "task"])
async def test_a_tool_that_forwards_its_key_is_retried_with_the_same_key(
        tmp_path: Path, audit: bool) -> None:
    """``forwards_idempotency_key``: the proxy sends the key in ``_meta``, and the retry of a
    call whose outcome is unknown runs with the same key (the upstream deduplicates on it)
    instead of going to review; a call with other arguments gets another key."""
    log = tmp_path / "payments.log"
    policy = tg.load_policy_dict({"tools": {"pay": {"forwards_idempotency_key": True}}})
    middleware = _middleware(tmp_path, audit, policy)
    try:
        link, _ = await _link(middleware, pay_upstream(log, "--delay", "0.6"),
                                   TEST_TIMEOUT_S)
        try:
            _send(link, call(1, "pay", "K-1"))
            await asyncio.sleep(0.3)
            _send(link, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": 1}})
        finally:
            await link.close()
        retry = await _retry(middleware, log, "K-1")
        other = await _retry(middleware, log, "K-2")
    finally:
        _close_sinks(middleware)
    assert text_of(retry).startswith("paid K-1") and text_of(other) == "paid K-2"
    first, again, second = payments(log)
    assert first.startswith("paid K-1 key=shop:pay:") and again == first
    assert second.startswith("paid K-2 key=") and second.split("key=")[1] != first.split(
        "key=")[1]


ENDINGS = ("kill", "cancel", "timeout")


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ending=st.sampled_from(ENDINGS), at_s=st.floats(0.0, 0.5), audit=st.booleans())
async def test_whatever_ends_a_call_and_whenever_its_retry_never_runs_it_twice(
        tmp_path_factory: pytest.TempPathFactory, ending: str, at_s: float,
        audit: bool) -> None:
    """A payment the upstream takes and answers 0.25 s later; at ``at_s`` after it is sent,
    the upstream is killed, the client cancels it, or the call times out. The identical retry,
    from a new upstream session of the same task, is the stored result (the answer came
    first) or a review (its outcome is unknown): the payment is taken at most once."""
    tmp = tmp_path_factory.mktemp("ending")
    log = tmp / "payments.log"
    middleware = _middleware(tmp, audit)
    try:
        timeout_s = max(at_s, 0.01) if ending == "timeout" else TEST_TIMEOUT_S
        link, client = await _link(middleware, pay_upstream(log, "--delay", "0.25"), timeout_s)
        try:
            _send(link, call(1, "pay", "P-1"))
            await asyncio.sleep(at_s)
            if ending == "kill":
                transport = getattr(link.up, "_transport", None)
                assert transport is not None
                os.kill(transport.get_pid(), signal.SIGKILL)
            elif ending == "cancel":
                _send(link, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                             "params": {"requestId": 1}})
            first = (await client.answer(1, 5.0) if ending != "cancel" or 1 in client.finals
                     else None)
        finally:
            await link.close()
        retry = await _retry(middleware, log, "P-1")
    finally:
        _close_sinks(middleware)
    taken = payments(log)
    assert taken in ([], ["paid P-1"])
    if first is not None and not first["result"].get("isError"):  # the answer came first
        assert "already completed" in text_of(retry) or "NOT executed again" in text_of(retry)
    else:
        assert retry["result"]["isError"] is True and REVIEW in text_of(retry)


# -- the proxy on HTTP: the retry comes from a new session of the same task -------------------
async def test_an_upstream_dying_mid_call_is_an_unknown_outcome_across_sessions(
        tmp_path: Path) -> None:
    """Regression: the upstream took the payment and died; the proxy answered "the call was
    not run" with the upstream's stderr (a password and an API key) unredacted, recorded
    nothing, and the client's retry in a new session of the same task paid again."""
    log, port = tmp_path / "payments.log", free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    command = proxy_command("--listen", f"127.0.0.1:{port}", "--task-id", "shop-1",
                            upstream=pay_upstream(log, "--die"))
    answers: list[dict[str, Any]] = []
    with running(command, port, tmp_path / "proxy.log"):
        async with _http() as http:
            for rid in (1, 2):  # each in a new session (a new upstream process)
                sid = await _open(http, url)
                async with http.post(url, data=orjson.dumps(call(rid, "pay", "A-1")),
                                     headers={**ACCEPT, "mcp-session-id": sid}) as response:
                    answers.append(await response.json())
    first, retry = answers
    assert UNKNOWN in text_of(first) and "went away" in text_of(first)
    assert "was not run" not in text_of(first)
    assert REVIEW in text_of(retry)
    everything = (tmp_path / "proxy.log").read_text() + text_of(first) + text_of(retry)
    for secret in SECRETS:
        assert secret not in everything
    assert payments(log) == ["paid A-1"]
