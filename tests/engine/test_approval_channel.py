"""Nothing the model can read or run approves a call: the review it reads does not say how,
``toolguard approve`` wants a human at a terminal and a call that is waiting, and an approval
in a shared store counts only with the proof only the approval secret can give."""

# ruff: noqa: F811  (the redis_prefix fixture is imported, then taken as a parameter)
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp.types as mt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolguard as tg
from tests.mcp_support import approve_at_a_terminal, proxy_command, stdio_session
from tests.redis_support import REDIS_URL, redis_prefix  # noqa: F401 - a fixture
from toolguard.engine._approval_secret import ApprovalSecretError, secret_path
from toolguard.stores._base import ApprovalRecord, ApprovalState
from toolguard.testing import auto_defer

D = tg.Decision
POLICY = ('strict_tools = false\n[tools.refund]\nrequires_approval = true\n'
          '[tools.run]\nshell = "command"\neffect = "mutating"\n')
TIMEOUT_S = 60


def text(result: mt.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, mt.TextContent)
    return block.text


def refunds(log: Path) -> list[str]:
    return log.read_text().split("\n")[:-1] if log.exists() else []


async def test_the_model_cannot_approve_its_own_review(tmp_path: Path, shared: Path,
                                                       redis_prefix: str) -> None:
    """Regression: the review told the model ``toolguard approve KEY``, its shell tool behind
    the same proxy inherited the store URL, ran the command and the refund ran."""
    log, policy = tmp_path / "log", tmp_path / "policy.toml"
    policy.write_text(POLICY)
    env = {"REPRO_LOG": str(log), "TOOLGUARD_STORE__URL": REDIS_URL,
           "TOOLGUARD_STORE__KEY_PREFIX": redis_prefix}
    command = proxy_command("--policy", str(policy), "--task-id", "shop-1",
                            upstream=[sys.executable, str(shared / "repro/turn3/mcp_upstream.py")])
    key = f"shop-1:refund:{tg.args_hash({'order': 'A-1'})}"
    with anyio.fail_after(TIMEOUT_S), (tmp_path / "stderr").open("w") as errlog:
        async with stdio_session(command, env=env, errlog=errlog) as session:
            review = text(await session.call_tool("refund", {"order": "A-1"}))
            assert "waiting for a human" in review
            assert "toolguard approve" not in review
            assert key.rsplit(":", maxsplit=1)[-1] not in review
            # the model's shell: the proxy's command, and the store reached by hand
            shell = (f"env | grep -c TOOLGUARD_ ; {sys.executable} -m toolguard.cli approve "
                     f"{key}; TOOLGUARD_STORE__URL={REDIS_URL} TOOLGUARD_STORE__KEY_PREFIX="
                     f"{redis_prefix} {sys.executable} -m toolguard.cli approve {key}")
            ran = text(await session.call_tool("run", {"command": shell}))
            assert ran.startswith("0\n")  # no TOOLGUARD_ variable reached the shell
            assert ran.count("stdin is not one") == 2 and "approved" not in ran
            from toolguard.stores.redis import RedisStore

            store = RedisStore(url=REDIS_URL, key_prefix=redis_prefix)
            waiting = store.pending_approvals("shop-1")[key]
            forged = ApprovalRecord(ApprovalState.APPROVED, waiting.requested_at, "",
                                    waiting.tool, waiting.args, waiting.args_hash)
            store.set_approval("shop-1", key, forged, 60.0)  # written without the secret
            again = text(await session.call_tool("refund", {"order": "A-1"}))
            assert "waiting for a human" in again and refunds(log) == []
            # a human, at a terminal, as the same user as the proxy
            code, out = await anyio.to_thread.run_sync(
                approve_at_a_terminal, key, "y", {**os.environ, **env})
            assert code == 0 and f"approved {key}" in out and '"order": "A-1"' in out, out
            assert text(await session.call_tool("refund", {"order": "A-1"})) == "refunded A-1"
            store.close()
    assert refunds(log) == ["refunded A-1"]
    assert f"toolguard approve {key}" in (tmp_path / "stderr").read_text()  # for the human


def test_approve_needs_a_terminal_and_a_waiting_call(tmp_path: Path,
                                                     redis_prefix: str) -> None:
    env = {**os.environ, "TOOLGUARD_STORE__URL": REDIS_URL,
           "TOOLGUARD_STORE__KEY_PREFIX": redis_prefix}
    key = f"t:refund:{tg.args_hash({'order': 'A-1'})}"
    piped = subprocess.run([sys.executable, "-m", "toolguard.cli", "approve", key],
                           input="y\n", capture_output=True, text=True, env=env,
                           timeout=TIMEOUT_S, check=False)
    assert piped.returncode == 2 and "stdin is not one" in piped.stderr
    code, out = approve_at_a_terminal(key, "y", env)  # a terminal, but nothing waits
    assert code == 2 and "no call is waiting" in out


@pytest.fixture
def refunds_on_redis(redis_prefix: str) -> Iterator[tuple[tg.Task, list[str]]]:
    """A task whose ``refund`` needs approval, on the test Redis; the orders it refunded."""
    from toolguard.stores.redis import RedisStore

    ran: list[str] = []

    @tg.requires_approval
    def refund(order: str) -> str:
        ran.append(order)
        return "refunded"

    store = RedisStore(url=REDIS_URL, key_prefix=redis_prefix)
    yield tg.Guard(tools=[refund], store=store, approver=auto_defer).task("t"), ran
    store.close()


def test_answering_no_at_the_terminal_leaves_the_call_waiting(
        refunds_on_redis: tuple[tg.Task, list[str]], redis_prefix: str) -> None:
    task, ran = refunds_on_redis
    key = task.call("refund", {"order": "A-1"}).idempotency_key
    env = {**os.environ, "TOOLGUARD_STORE__URL": REDIS_URL,
           "TOOLGUARD_STORE__KEY_PREFIX": redis_prefix}
    code, out = approve_at_a_terminal(key, "n", env)
    assert code == 1 and "keeps waiting" in out
    assert list(task.pending_approvals) == [key]
    assert task.call("refund", {"order": "A-1"}).decision is D.REVIEW and ran == []
    code, out = approve_at_a_terminal(key, "y", env)
    assert code == 0, out
    assert task.call("refund", {"order": "A-1"}).decision is D.ALLOW and ran == ["A-1"]


def test_a_forged_approval_in_a_shared_store_is_ignored(
        refunds_on_redis: tuple[tg.Task, list[str]]) -> None:
    task, ran = refunds_on_redis
    first = task.call("refund", {"order": "A-1"})
    waiting = task.pending_approvals[first.idempotency_key]
    task.guard.store.set_approval("t", first.idempotency_key, ApprovalRecord(  # made up
        ApprovalState.APPROVED, waiting.requested_at, "", "refund", waiting.args,
        waiting.args_hash, "0" * 64), 60.0)
    assert task.call("refund", {"order": "A-1"}).decision is D.REVIEW and ran == []
    task.approve(first.idempotency_key)  # the host's own approval: signed
    assert task.call("refund", {"order": "A-1"}).decision is D.ALLOW and ran == ["A-1"]


def test_arguments_rewritten_in_the_store_void_the_approval_of_what_was_shown(
        refunds_on_redis: tuple[tg.Task, list[str]], redis_prefix: str) -> None:
    """Regression: whoever could write the store rewrote a waiting refund's arguments, the
    reviewer approved the small amount shown at the terminal, and the large one ran."""
    task, ran = refunds_on_redis
    key = task.call("refund", {"order": "A-9999999"}).idempotency_key
    waiting = task.pending_approvals[key]
    task.guard.store.set_approval("t", key, ApprovalRecord(  # what the reviewer will see
        ApprovalState.PENDING, waiting.requested_at, "", "refund", {"order": "A-1"},
        waiting.args_hash), 60.0)
    env = {**os.environ, "TOOLGUARD_STORE__URL": REDIS_URL,
           "TOOLGUARD_STORE__KEY_PREFIX": redis_prefix}
    code, out = approve_at_a_terminal(key, "y", env)
    assert code == 0 and "A-1" in out and "A-9999999" not in out, out
    assert task.call("refund", {"order": "A-9999999"}).decision is D.REVIEW and ran == []
    # the call asked afresh: the record shows its own arguments again, and they can be approved
    assert task.pending_approvals[key].args == {"order": "A-9999999"}
    task.approve(key)
    assert task.call("refund", {"order": "A-9999999"}).decision is D.ALLOW
    assert ran == ["A-9999999"]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=8), st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(max_size=4), inner, max_size=3), max_leaves=8), max_size=4))
def test_the_shown_hash_survives_a_store_round_trip(args: dict[str, Any]) -> None:
    """An approval signed on arguments read back from a store (JSON) holds for the call's
    own arguments: the hash the proof covers is the same on both sides."""
    from toolguard.engine._approve import shown_hash

    assert shown_hash(json.loads(json.dumps(args))) == shown_hash(args) != ""


def test_the_approval_secret_must_be_private(
        refunds_on_redis: tuple[tg.Task, list[str]]) -> None:
    from toolguard.engine import _approve

    task, ran = refunds_on_redis
    path = secret_path()
    key = task.call("refund", {"order": "A-1"}).idempotency_key
    _approve._SECRETS.clear()
    task.approve(key)  # made on first use, owner only
    assert path.stat().st_mode & 0o777 == 0o600
    path.chmod(0o644)
    _approve._SECRETS.clear()
    try:
        with pytest.raises(ApprovalSecretError, match="may be read by others"):
            task.call("refund", {"order": "A-1"})  # the approval cannot be checked
        assert ran == []
    finally:
        path.chmod(0o600)
        _approve._SECRETS.clear()


def test_only_a_waiting_call_can_be_approved() -> None:
    @tg.requires_approval
    def refund(order: str) -> str:
        return "refunded"

    task = tg.Guard(tools=[refund], approver=auto_defer).task("t")
    made_up = f"t:refund:{tg.args_hash({'order': 'A-1'})}"
    with pytest.raises(ValueError, match="no call is waiting"):
        task.approve(made_up)  # no approval in advance
    assert task.call("refund", {"order": "A-1"}).decision is D.REVIEW
    task.approve(made_up)  # now it waits
    assert task.call("refund", {"order": "A-1"}).decision is D.ALLOW
    with pytest.raises(ValueError, match="no call is waiting"):
        task.approve(made_up)  # spent: the next call asks afresh


def test_an_approval_record_keeps_bounded_argument_bytes() -> None:
    """Regression: each waiting call kept its arguments in full (300 x 1 MB pinned 303 MB)."""
    from toolguard.engine._approve import MAX_KEPT_ARGS_BYTES, TRUNCATED

    seen: list[dict[str, Any]] = []

    @tg.requires_approval
    def upload(name: str, body: str) -> str:
        return "uploaded"

    def reviewer(request: tg.ApprovalRequest) -> tg.ApprovalDecision:
        seen.append(dict(request.args))
        return tg.defer()

    task = tg.Guard(tools=[upload], approver=reviewer).task("t")
    body = "x" * 900_000
    for i in range(30):
        assert task.call("upload", {"name": f"f{i}", "body": body}).decision is D.REVIEW
    assert all(s["body"] == body for s in seen)  # the approver gets them in full
    kept = task.pending_approvals
    assert len(kept) == 30
    for record in kept.values():
        assert record.args[TRUNCATED] > 900_000
        assert len(str(record.args)) < MAX_KEPT_ARGS_BYTES // 8
    small = task.call("upload", {"name": "s", "body": "hi"})
    assert task.pending_approvals[small.idempotency_key].args == {"name": "s", "body": "hi"}
