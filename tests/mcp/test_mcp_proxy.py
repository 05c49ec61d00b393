"""``toolguard mcp-proxy`` end to end: the real proxy, the real MCP client and the real example
upstream server, each a subprocess (stdio and streamable HTTP on 127.0.0.1)."""
# ruff: noqa: F811  (the redis_prefix fixture is imported, then taken as a parameter)

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import mcp.types as mt
import pytest
from mcp.client.session import ClientRequestContext, ElicitationFnT

import toolguard as tg
from tests.mcp_support import (
    EXAMPLE_SERVER,
    EXPECTED_READS,
    EXPECTED_WRITES,
    ROOT,
    TEST_TIMEOUT_S,
    approve_at_a_terminal,
    audit_events,
    call,
    counts,
    http_session,
    label,
    proxy_command,
    scripted_loop,
    stdio_session,
    upstream_command,
)
from tests.mcp_support import (
    http_proxy as start_http_proxy,
)
from tests.redis_support import REDIS_URL, redis_prefix  # noqa: F401 - a fixture

APPROVAL_POLICY = """\
[tools.delete_note]
requires_approval = true
"""


@pytest.mark.parametrize("loop", ["auto", "asyncio"])  # auto: uvloop, installed with the extra
async def test_stdio_scripted_loop_guards_and_passes_everything_through(
        tmp_path: Path, loop: str) -> None:
    count_file, audit = tmp_path / "counts.json", tmp_path / "audit.jsonl"
    command = proxy_command("--audit", str(audit), "--loop", loop,
                            upstream=upstream_command(count_file))
    updated: list[str] = []

    async def messages(message: object) -> None:
        if isinstance(message, mt.ResourceUpdatedNotification):
            updated.append(str(message.params.uri))

    with anyio.fail_after(TEST_TIMEOUT_S):
        async with stdio_session(command, messages=messages) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            # names, schemas and annotations pass through untouched
            assert set(tools) == {"read_note", "write_note", "delete_note", "count_slowly",
                                  "ask_client", "big_note"}
            assert tools["read_note"].annotations is not None
            assert tools["read_note"].annotations.read_only_hint is True
            assert tools["write_note"].input_schema["required"] == ["title", "body"]

            seen: list[float] = []

            async def on_progress(progress: float, total: float | None,
                                  message: str | None) -> None:
                seen.append(progress)

            slow = await session.call_tool("count_slowly", {"steps": 3},
                                           progress_callback=on_progress)
            assert label(slow) == "allow" and seen == [1.0, 2.0, 3.0]  # progress relayed

            prompt = await session.get_prompt("summarize", {"title": "todo"})
            assert isinstance(prompt, mt.GetPromptResult)
            assert "todo" in str(prompt.messages[0].content)

            writes, reads = await scripted_loop(session)
            assert writes == EXPECTED_WRITES
            assert reads == EXPECTED_READS

            # the resource passes through, and reads the upstream's own count
            resource = await session.read_resource("notes://executions")
            assert isinstance(resource, mt.ReadResourceResult)
            text = resource.contents[0]
            assert isinstance(text, mt.TextResourceContents)
            assert '"write_note": 1' in text.text
            # the upstream's notification (sent once, by the one execution) was relayed
            assert updated == ["notes://executions"]
    # one upstream execution of the write; the read ran for allow, allow, warn only
    assert counts(count_file) == {"count_slowly": 1, "write_note": 1, "read_note": 3}
    decisions = [e["decision"] for e in audit_events(audit)
                 if e["tool"] == "read_note" and e["transition"].endswith("->executing")]
    assert len(decisions) == 3


@dataclass
class HttpProxy:
    """A proxy listening on streamable HTTP in front of an HTTP upstream (both subprocesses)."""

    url: str
    count_file: Path


@pytest.fixture(scope="module")
def http_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpProxy]:
    tmp = tmp_path_factory.mktemp("http-proxy")
    count_file, policy = tmp / "counts.json", tmp / "policy.toml"
    policy.write_text(APPROVAL_POLICY)
    with start_http_proxy(tmp, count_file, "--policy", str(policy)) as url:
        yield HttpProxy(url, count_file)


async def test_streamable_http_scripted_loop_one_task_per_session(http_proxy: HttpProxy) -> None:
    before = counts(http_proxy.count_file)
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with http_session(http_proxy.url) as session:
            writes, reads = await scripted_loop(session)
            assert writes == EXPECTED_WRITES
            assert reads == EXPECTED_READS
        # a new session (a new Mcp-Session-Id) is a new task: the halt does not follow it
        async with http_session(http_proxy.url) as session:
            assert await call(session, "read_note", {"title": "todo"}) == "allow"
    assert _delta(before, counts(http_proxy.count_file)) == {"write_note": 1, "read_note": 4}


def _answering(approve: bool, asked: list[str]) -> ElicitationFnT:
    async def elicit(context: ClientRequestContext,
                     params: mt.ElicitRequestParams) -> mt.ElicitResult:
        asked.append(params.message)
        return mt.ElicitResult(action="accept", content={"approve": approve})
    return elicit


async def test_elicitation_approves_and_rejects(http_proxy: HttpProxy) -> None:
    asked: list[str] = []
    before = counts(http_proxy.count_file)
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with http_session(http_proxy.url, elicitation=_answering(False, asked)) as session:
            result = await session.call_tool("delete_note", {"title": "todo"})
            assert result.is_error and "refused" in str(result.content[0])
        assert _delta(before, counts(http_proxy.count_file)) == {}
        async with http_session(http_proxy.url, elicitation=_answering(True, asked)) as session:
            result = await session.call_tool("delete_note", {"title": "todo"})
            assert label(result) == "allow", result
    assert _delta(before, counts(http_proxy.count_file)) == {"delete_note": 1}
    assert len(asked) == 2 and 'delete_note with arguments {"title": "todo"}' in asked[0]


async def test_without_elicitation_a_call_needing_approval_is_a_review(
        http_proxy: HttpProxy) -> None:
    before = counts(http_proxy.count_file)
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with http_session(http_proxy.url) as session:
            result = await session.call_tool("delete_note", {"title": "todo"})
    assert label(result) == "review"
    assert "toolguard approve" not in str(result.content[0])  # the model is not told how
    assert _delta(before, counts(http_proxy.count_file)) == {}


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


async def test_review_approved_with_toolguard_approve_and_a_task_shared_on_redis(
        tmp_path: Path, redis_prefix: str) -> None:
    count_file, policy = tmp_path / "counts.json", tmp_path / "policy.toml"
    policy.write_text(APPROVAL_POLICY)
    env = {"TOOLGUARD_STORE__URL": REDIS_URL, "TOOLGUARD_STORE__KEY_PREFIX": redis_prefix}
    command = proxy_command("--policy", str(policy), "--task-id", "shared-task",
                            upstream=upstream_command(count_file))
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with stdio_session(command, env=env) as session:
            review = await session.call_tool("delete_note", {"title": "todo"})
            assert label(review) == "review"
            key = f"shared-task:delete_note:{tg.args_hash({'title': 'todo'})}"
            code, out = await anyio.to_thread.run_sync(
                approve_at_a_terminal, key, "y", {**os.environ, **env})
            assert code == 0 and f"approved {key}" in out, out
            assert await call(session, "delete_note", {"title": "todo"}) == "allow"
            assert await call(session, "delete_note", {"title": "todo"}) == "cached"
        # another proxy process on the same store and task id shares the state
        async with stdio_session(command, env=env) as session:
            assert await call(session, "delete_note", {"title": "todo"}) == "cached"
    assert counts(count_file) == {"delete_note": 1}


def test_loop_auto_is_uvloop_where_it_imports_and_asyncio_elsewhere(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    import typer
    import uvloop

    from toolguard.mcp._proxy import _loop_runner

    assert _loop_runner("auto") is uvloop.run
    assert _loop_runner("uvloop") is uvloop.run
    assert _loop_runner("asyncio") is asyncio.run
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as where it has no wheel (Windows)
    assert _loop_runner("auto") is asyncio.run
    with pytest.raises(typer.Exit) as refused:
        _loop_runner("uvloop")
    assert refused.value.exit_code == 2


def test_approve_needs_a_shared_store_and_a_key() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGUARD_")}
    code, out = approve_at_a_terminal("mcp-1:delete_note:" + "0" * 32, "y", env)
    assert code == 2 and "TOOLGUARD_STORE__URL" in out
    code, out = approve_at_a_terminal("nonsense", "y", env)
    assert code == 2 and "not an idempotency key" in out


@pytest.mark.parametrize("loop", ["auto", "asyncio"])
def test_stdin_and_stdout_may_be_regular_files(tmp_path: Path, loop: str) -> None:
    """Regression: under uvloop (``--loop auto``) a stdout redirected to a file aborted the
    process (libuv's pipe transport takes no regular file; exit 134)."""
    requests, answers = tmp_path / "requests.jsonl", tmp_path / "answers.jsonl"
    requests.write_text(json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "file", "version": "1"}}}) + "\n")
    with requests.open("rb") as stdin, answers.open("wb") as stdout:
        done = subprocess.run(proxy_command("--loop", loop, upstream=upstream_command(
            tmp_path / "counts.json")), stdin=stdin, stdout=stdout, stderr=subprocess.PIPE,
            timeout=TEST_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    answer = json.loads(answers.read_text().splitlines()[0])
    assert answer["id"] == 1 and "(guarded by toolguard)" in answer["result"]["serverInfo"]["title"]


def test_upstream_that_cannot_start_exits_non_zero_with_its_stderr(tmp_path: Path) -> None:
    command = proxy_command(upstream=upstream_command(tmp_path / "c.json", "--fail-start"))
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=TEST_TIMEOUT_S, check=False)
    assert done.returncode == 1
    assert "cannot open the notes database" in done.stderr  # the upstream's own stderr tail
    assert "could not start" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("explain", [[], ["--explain"]])
def test_unreachable_upstream_url_fails_in_one_line(explain: list[str]) -> None:
    url = "http://127.0.0.1:1/mcp"  # nothing listens on port 1
    done = subprocess.run(proxy_command(*explain, "--upstream-url", url),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=TEST_TIMEOUT_S, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0, done.stderr  # one line, no traceback
    assert url in done.stderr and "ConnectError" in done.stderr


def test_unwritable_audit_file_is_a_usage_error(tmp_path: Path) -> None:
    audit = tmp_path / "no" / "such" / "dir" / "a.jsonl"
    done = subprocess.run(proxy_command("--audit", str(audit), "--explain",
                                        upstream=upstream_command(tmp_path / "c.json")),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=TEST_TIMEOUT_S, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0, done.stderr  # one line, no traceback
    assert str(audit) in done.stderr and "No such file" in done.stderr


def test_upstream_slower_than_start_timeout_fails_clearly(tmp_path: Path) -> None:
    command = proxy_command("--start-timeout", "0.5",
                            upstream=upstream_command(tmp_path / "c.json", "--start-delay", "20"))
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=TEST_TIMEOUT_S, check=False)
    assert done.returncode == 1
    assert "did not answer initialize within 0.5 s" in done.stderr


async def test_upstream_dying_mid_session_gives_error_results_and_records_nothing(
        tmp_path: Path) -> None:
    count_file, audit, pid_file = (tmp_path / "counts.json", tmp_path / "audit.jsonl",
                                   tmp_path / "upstream.pid")
    command = proxy_command("--audit", str(audit),
                            upstream=upstream_command(count_file, "--pid-file", str(pid_file)))
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with stdio_session(command) as session:
            assert await call(session, "write_note", {"title": "a", "body": "b"}) == "allow"
            before = audit_events(audit)
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
            await anyio.sleep(0.5)  # the proxy sees its stdout close
            for _ in range(2):
                result = await session.call_tool("write_note", {"title": "c", "body": "d"})
                assert result.is_error
                text = str(result.content[0])
                assert "is gone" in text and "server.py" in text  # names the upstream
            assert audit_events(audit) == before  # nothing recorded, executed or not
    assert counts(count_file) == {"write_note": 1}


async def test_slow_upstream_malformed_arguments_and_unknown_tool(tmp_path: Path) -> None:
    count_file = tmp_path / "counts.json"
    # an upstream that takes 1.5 s to start is waited for (the client's initialize waits too)
    command = proxy_command(upstream=upstream_command(count_file, "--start-delay", "1.5"))
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with stdio_session(command) as session:
            wrong_type = await session.call_tool("read_note", {"title": 5})
            missing = await session.call_tool("write_note", {"title": "a"})
            unknown = await session.call_tool("no_such_tool", {"x": 1})
            # a cancelled call (5 s of work) returns control at once; the session goes on
            started = anyio.current_time()
            with anyio.move_on_after(0.5):
                await session.call_tool("count_slowly", {"steps": 100})
            assert await call(session, "read_note", {"title": "todo"}) == "allow"  # still serving
            assert anyio.current_time() - started < 4.0
    assert label(wrong_type) == "invalid" and "title" in str(wrong_type.content[0])
    assert label(missing) == "invalid" and "body" in str(missing.content[0])
    assert unknown.is_error and "no_such_tool" in str(unknown.content[0])
    # none of the bad calls reached the tool
    assert counts(count_file) == {"read_note": 1, "count_slowly": 1}


def test_explain_prints_effects_from_annotations_and_policy(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools.read_note]\neffect = "mutating"\n')
    command = proxy_command("--explain", "--policy", str(policy),
                            upstream=upstream_command(tmp_path / "c.json"))
    wide = {**os.environ, "COLUMNS": "1000"}  # a long tmp path must not wrap in its cell
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=TEST_TIMEOUT_S, check=False, env=wide)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[2:] if line.strip()}
    cells = re.split(r"\s{2,}", rows["read_note"].strip())  # piped: plain columns
    assert cells[1] == "mutating" and cells[4].startswith(str(tmp_path))  # the policy wins
    assert "annotations" in rows["write_note"]
    assert "readonly" in rows["count_slowly"]
    assert "until_change" in rows["write_note"]
    assert "task" in rows["delete_note"]  # destructiveHint


@pytest.mark.parametrize(("args", "message"), [
    ([], "exactly one"),
    (["--upstream-url", "http://127.0.0.1:9/mcp", "--", "x"], "exactly one"),
    (["--listen", "nowhere", "--", "x"], "HOST:PORT"),
    (["--policy", "a.toml", "--env", "dev", "--", "x"], "not both"),
    # a malformed upstream URL is the user's typo, not an upstream that failed
    (["--upstream-url", "notaurl"], "'notaurl'"),
    (["--explain", "--upstream-url", "notaurl"], "http:// or https://"),
    (["--upstream-url", "ftp://127.0.0.1/mcp"], "'ftp://127.0.0.1/mcp'"),
    (["--upstream-url", "http://127.0.0.1:99999/mcp"], "http:// or https://"),
    (["--upstream-url", "http:///mcp"], "http:// or https://"),
    (["--loop", "trio", "--", "x"], "auto, asyncio or uvloop (got 'trio')"),
])
def test_bad_options_exit_2(args: list[str], message: str) -> None:
    done = subprocess.run(proxy_command(*args), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=TEST_TIMEOUT_S, check=False)
    assert done.returncode == 2 and message in done.stderr


def test_demo_prints_the_scripted_loop() -> None:
    done = subprocess.run([sys.executable, str(EXAMPLE_SERVER.with_name("demo.py"))],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=TEST_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line[:1] not in (" ", "")]
    assert [line[35:].split()[0] for line in lines[:9]] == [
        "ok", "ok", "ok", "ok", "ok", "ok", "error", "HALT", "HALT"]
    assert lines[-1] == 'upstream executions: {"write_note": 1, "read_note": 3}'


def test_overhead_benchmark_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "mcp.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mcp_proxy.py"), "--smoke",
                           "--json", str(out)], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=TEST_TIMEOUT_S * 2, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    for transport in ("stdio", "http"):
        figures = report[transport]
        assert set(figures["median_us"]) == {"direct", "proxy_guard_off", "proxy_guarded"}
        assert all(v > 0 for v in figures["median_us"].values())
        assert figures["status"] in ("PASS", "MISS")  # a timing is reported, never asserted
        paired = figures["paired"]
        assert set(paired["mean_us"]) == {"direct", "proxy_guard_off", "proxy_guarded"}
        assert paired["iterations"] > 0 and paired["x_direct"] > 0
        lo, mid, hi = paired["x_direct_blocks"]
        assert lo <= mid <= hi and figures["status"] == paired["status"]
    assert report["middleware_us"] > 0 and len(report["load_average"]["before"]) == 3


def test_wakeup_benchmark_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "wakeup.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mcp_wakeup.py"),
                           "--smoke", "--json", str(out)], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=TEST_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    guard = report["guard"]
    assert guard["hot_median_us"] > 0 and guard["after_idle_median_us"] > 0
    assert guard["x_cold"] == guard["after_idle_median_us"] / guard["hot_median_us"]
    assert set(report["ping_pong_us"]) == {"free", "same_cpu"}
    assert all(v is None or v > 0 for v in report["ping_pong_us"].values())
