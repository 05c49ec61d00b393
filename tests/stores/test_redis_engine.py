"""RedisStore through a real :class:`toolguard.Guard`: same decisions as memory, round trips
per call, several processes serving one task, and faults (connections killed, Redis down,
Redis hanging, Redis unreachable).

Needs a real Redis (see ``redis_support``); faults go through a local TCP proxy, so the
shared server is never paused or restarted.
"""
# ruff: noqa: F811  (the redis_prefix fixture is imported, then taken as a parameter)

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import toolguard as tg
from tests.process_support import (
    budget_worker,
    check_budget,
    check_crashed_claim_is_unknown,
    check_same_call,
    run_processes,
    same_call_worker,
)
from tests.redis_support import (  # noqa: F401
    REDIS_URL,
    FaultProxy,
    delete_cluster_prefix,
    missing_extra,
    redis_prefix,
    require_cluster,
    require_redis,
    write_and_lookup,
)
from toolguard.policy._model import (
    LadderPolicy,
    LadderThresholds,
    StorePolicy,
)
from toolguard.stores import ApprovalRecord, BeginRequest, FinishRequest, MemoryStore, Store
from toolguard.testing import FakeClock, auto_approve, capture_audit

try:
    import redis

    from toolguard.stores.redis import RedisStore
except ImportError as exc:
    missing_extra(exc)

pytestmark = pytest.mark.redis

Tool = Callable[..., Any]


def _store(prefix: str, **kwargs: Any) -> RedisStore:
    kwargs.setdefault("timeout_s", 5.0)
    return RedisStore(url=kwargs.pop("url", REDIS_URL), key_prefix=prefix, **kwargs)


# -- same decisions as the memory store -------------------------------------------------
def _scenario(store: Store) -> list[str]:
    @tg.readonly
    def lookup(q: str) -> str:
        return f"nothing for {q}"

    @tg.mutating
    def write(path: str, text: str = "") -> dict[str, Any]:
        return {"path": path, "bytes": len(text), "tags": ["w", None, 1.5]}

    @tg.requires_approval
    def pay(amount: int) -> str:
        return f"paid {amount}"

    guard = tg.Guard(tools=[lookup, write, pay], store=store, approver=auto_approve,
                     clock=FakeClock(1_000.0))
    task = guard.task("scenario")
    plan: list[tuple[str, dict[str, Any]]] = [
        *[("lookup", {"q": "a"})] * 4,
        ("write", {"path": "x", "text": "1"}), ("write", {"path": "x", "text": "1"}),
        ("write", {"path": "y"}), ("write", {"path": "x", "text": "1"}),
        ("lookup", {"q": "a"}), ("pay", {"amount": 5}), ("pay", {"amount": 5}),
        *[("write", {"path": "x", "text": "1"})] * 4,
    ]
    seen: list[str] = []
    for name, args in plan:
        try:
            result = task.call(name, args)
        except tg.Halt as exc:
            seen.append(type(exc).__name__)
            task.resume()
            continue
        seen.append(f"{result.decision}:{result.value!r}")
    task.new_turn()
    seen.append(str(task.call("write", {"path": "x", "text": "1"}).decision))
    usage = task.usage
    seen.append(f"{usage.tool_calls} {sorted(usage.per_tool.items())} {task.halted}")
    return seen


def test_decisions_match_memory(redis_prefix: str) -> None:
    expected = _scenario(MemoryStore(clock=FakeClock(1_000.0)))
    store = _store(redis_prefix)
    assert _scenario(store) == expected
    store.close()
    assert [s.split(":")[0] for s in expected[:16]] == [
        "allow", "allow", "warn", "block", "allow", "cached", "allow", "allow", "allow",
        "allow", "cached", "allow", "cached", "cached", "RepeatedToolCalls", "allow"]


def test_policy_selects_redis(redis_prefix: str) -> None:
    policy = tg.Policy(store=StorePolicy(backend="redis", url=REDIS_URL, key_prefix=redis_prefix,
                                         timeout_s=0.75, state_ttl_s=60.0, on_error="fail_open"))
    guard = tg.Guard(policy)
    store = guard.store
    assert isinstance(store, RedisStore)
    assert store.on_error == "fail_open"
    assert isinstance(store.client, redis.Redis)
    kwargs = store.client.connection_pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (0.75, 0.75)
    store.new_turn("t")
    assert 0 < store.client.pttl(f"{redis_prefix}:{{t}}:meta") <= 60_000
    store.close()


def test_environment_selects_a_cluster(redis_prefix: str) -> None:
    url = require_cluster()
    guard = tg.Guard.from_env([_writer([])], env={
        "TOOLGUARD_STORE__BACKEND": "redis", "TOOLGUARD_STORE__URL": url,
        "TOOLGUARD_STORE__CLUSTER": "true", "TOOLGUARD_STORE__KEY_PREFIX": redis_prefix})
    store = guard.store
    assert isinstance(store, RedisStore)
    assert isinstance(store.client, redis.RedisCluster)
    assert guard.policy.store.cluster is True
    task = guard.task("on-the-cluster")
    assert [str(task.call("write", {"path": "a"}).decision) for _ in range(2)] == [
        "allow", "cached"]
    # every node is a startup node: the first one down, the cluster is still found
    first, rest = url.split(",", 1)
    dead = first.rsplit(":", 1)[0] + ":1"
    other = RedisStore(url=f"{dead},{rest}", cluster=True, key_prefix=redis_prefix)
    assert other.usage("on-the-cluster").tool_calls == 2
    other.close()
    client = redis.RedisCluster.from_url(rest.split(",")[0], socket_timeout=5.0)
    assert RedisStore(client, key_prefix=redis_prefix).usage("on-the-cluster").tool_calls == 2
    client.close()
    store.close()
    delete_cluster_prefix(url, redis_prefix)


# -- round trips ------------------------------------------------------------------------
@pytest.mark.parametrize("deployment", ["node", "cluster"])
def test_round_trips_per_call(redis_prefix: str, deployment: str) -> None:
    # A cached or blocked call is 1 round trip, an executed call 2,
    # on one node and on a cluster alike.
    ran: list[str] = []
    if deployment == "node":
        store = _store(redis_prefix)
    else:
        store = _store(redis_prefix, url=require_cluster(), cluster=True)
    policy = tg.Policy(ladder=LadderPolicy(readonly=LadderThresholds(warn_at=2, block_at=3,
                                                                      halt_at=9)))
    task = tg.Guard(policy, tools=write_and_lookup(ran), store=store).task("rt")
    task.call("write", {"path": "warm-up"})  # loads the scripts on a fresh server

    def trips(tool: str, args: dict[str, Any]) -> tuple[tg.Decision, int]:
        before = store.round_trips
        decision = task.call(tool, args).decision
        return decision, store.round_trips - before

    assert trips("write", {"path": "a"}) == (tg.Decision.ALLOW, 2)
    assert trips("write", {"path": "a"}) == (tg.Decision.CACHED, 1)
    assert trips("lookup", {"q": "a"}) == (tg.Decision.ALLOW, 2)
    assert trips("lookup", {"q": "a"}) == (tg.Decision.WARN, 2)
    assert trips("lookup", {"q": "a"}) == (tg.Decision.BLOCK, 1)
    assert ran == ["warm-up", "a"]
    store.close()
    if deployment == "cluster":
        delete_cluster_prefix(require_cluster(), redis_prefix)


# -- several processes, one task (on one node and on a 3-master cluster) -----------------
Where = tuple[str, bool]  # (url, cluster) of the store the workers share


@pytest.fixture(params=["node", "cluster"])
def where(request: pytest.FixtureRequest, redis_prefix: str) -> Iterator[Where]:
    """The deployment the workers share: the test server, or the test cluster (its keys
    under ``redis_prefix`` are deleted afterwards)."""
    if request.param == "node":
        yield REDIS_URL, False
        return
    url = require_cluster()
    yield url, True
    delete_cluster_prefix(url, redis_prefix)


def _maker(prefix: str, where: Where) -> Callable[[], RedisStore]:
    return functools.partial(_store, prefix, url=where[0], cluster=where[1])


def test_four_processes_same_call_execute_once(redis_prefix: str, where: Where,
                                               tmp_path: Path) -> None:
    log = str(tmp_path / "charges")
    out = run_processes(same_call_worker, [(_maker(redis_prefix, where), log, True)] * 4)
    check_same_call(out, log, ladder=True)


def test_four_processes_same_call_default_ladder(redis_prefix: str, where: Where,
                                                 tmp_path: Path) -> None:
    log = str(tmp_path / "charges")
    out = run_processes(same_call_worker, [(_maker(redis_prefix, where), log, False)] * 4)
    check_same_call(out, log, ladder=False)


def test_budget_shared_by_four_processes(redis_prefix: str, where: Where,
                                         tmp_path: Path) -> None:
    log = str(tmp_path / "writes")
    out = run_processes(budget_worker, [(_maker(redis_prefix, where), log, i)
                                        for i in range(4)])
    check_budget(out, log)


# -- faults -----------------------------------------------------------------------------
def _writer(ran: list[str], hook: Callable[[], None] = lambda: None) -> Tool:
    @tg.mutating
    def write(path: str) -> str:
        hook()
        ran.append(path)
        return f"wrote {path}"

    return write


def test_connection_killed_mid_call_keeps_state(redis_prefix: str) -> None:
    store = _store(redis_prefix)
    killer = redis.Redis.from_url(REDIS_URL)
    killed: list[int] = []

    def kill_store_connection() -> None:  # runs between begin and finish
        # this thread's connection: the one the store's begin used and its finish will use
        client_id = store._here().client_id()
        killer.client_kill_filter(_id=str(client_id))
        killed.append(client_id)

    ran: list[str] = []
    task = tg.Guard(tools=[_writer(ran, kill_store_connection)], store=store).task("kill")
    assert task.call("write", {"path": "a"}).decision is tg.Decision.ALLOW
    assert task.call("write", {"path": "a"}).decision is tg.Decision.CACHED
    assert task.call("write", {"path": "b"}).decision is tg.Decision.ALLOW
    assert ran == ["a", "b"]
    assert len(killed) == 2
    assert store._here().client_id() not in killed
    assert task.usage.tool_calls == 3
    killer.close()
    store.close()


def test_redis_down_mid_task_fails_closed_then_recovers(redis_prefix: str) -> None:
    ran: list[str] = []
    with FaultProxy() as proxy:
        store = _store(redis_prefix, url=proxy.url, timeout_s=0.5)
        task = tg.Guard(tools=[_writer(ran)], store=store).task("down")
        assert task.call("write", {"path": "a"}).decision is tg.Decision.ALLOW
        proxy.cut()
        with pytest.raises(tg.StoreError, match=r"Redis store at 127\.0\.0\.1:\d+/\d+ failed"):
            task.call("write", {"path": "b"})
        assert ran == ["a"]
        proxy.restore()
        assert task.call("write", {"path": "a"}).decision is tg.Decision.CACHED
        assert task.call("write", {"path": "b"}).decision is tg.Decision.ALLOW
        assert ran == ["a", "b"]
        assert task.usage.tool_calls == 3  # the refused call never reached Redis
        store.close()


def test_redis_hanging_times_out(redis_prefix: str) -> None:
    ran: list[str] = []
    with FaultProxy() as proxy:
        store = _store(redis_prefix, url=proxy.url, timeout_s=0.3)
        task = tg.Guard(tools=[_writer(ran)], store=store).task("hang")
        task.call("write", {"path": "a"})
        proxy.stall()
        start = time.monotonic()
        with pytest.raises(tg.StoreError, match="Timeout"):
            task.call("write", {"path": "b"})
        assert time.monotonic() - start < 1.5
        assert ran == ["a"]
        proxy.cut()  # drops what the stalled connection still held
        proxy.restore()
        assert task.call("write", {"path": "b"}).decision is tg.Decision.ALLOW
        assert ran == ["a", "b"]
        store.close()


def test_unreachable_redis_fails_closed() -> None:
    require_redis()
    ran: list[str] = []
    store = RedisStore(url="redis://127.0.0.1:1/0", timeout_s=0.2)
    task = tg.Guard(tools=[_writer(ran)], store=store).task("nowhere")
    start = time.monotonic()
    with pytest.raises(tg.StoreError, match=r"127\.0\.0\.1:1/0 failed \(begin, task 'nowhere'\)"):
        task.call("write", {"path": "a"})
    assert time.monotonic() - start < 2.0
    assert ran == []
    store.close()


def test_unreachable_redis_fails_open() -> None:
    ran: list[str] = []
    store = RedisStore(url="redis://127.0.0.1:1/0", timeout_s=0.2, on_error="fail_open")
    policy = tg.Policy(store=StorePolicy(on_error="fail_open"))
    guard = tg.Guard(policy, tools=[_writer(ran)], store=store)
    with capture_audit(guard) as events:
        result = guard.task("open").call("write", {"path": "a"})
    assert result.decision is tg.Decision.ALLOW
    assert ran == ["a"]
    assert any("fail_open" in e.reason for e in events)
    store.close()


def test_crashed_workers_claim_is_an_unknown_outcome(redis_prefix: str) -> None:
    check_crashed_claim_is_unknown(functools.partial(_store, redis_prefix))


# -- Redis specifics --------------------------------------------------------------------
def test_every_key_has_a_ttl(redis_prefix: str) -> None:
    store = _store(redis_prefix, state_ttl_s=600.0)
    guard = tg.Guard(tools=[_writer([])], store=store, approver=auto_approve)
    task = guard.task("ttl")
    task.call("write", {"path": "a"})
    task.call("write", {"path": "a"})
    task.record_usage(10, 2)
    store.set_approval("ttl", "ttl:write:x", ApprovalRecord("pending", 0.0), 60.0)
    store.finish("ttl", FinishRequest(
        tool="write", signature="s", idempotency_key="ttl:write:s", executed=True, success=True,
        unknown=False, mutating=True, result_digest="d", store_result=True, content=1,
        release=False, ttl_s=7200.0, now=time.time()))  # a record outliving the task state
    client = store.client
    ttls = {k.decode(): client.pttl(k) for k in client.scan_iter(match=f"{redis_prefix}:*")}
    base = f"{redis_prefix}:{{ttl}}:"
    assert set(ttls) == {base + s for s in ("meta", "sigs", "seen", "appr", "recs")} | {
        base + f"rec:ttl:write:{tg.args_hash({'path': 'a'})}", base + "rec:ttl:write:s"}
    assert all(0 < ms <= 7_200_000 for ms in ttls.values()), ttls
    assert 590_000 < ttls[base + "meta"] <= 600_000
    assert ttls[base + "recs"] > 7_100_000  # kept as long as the longest record
    assert 3_590_000 < ttls[base + f"rec:ttl:write:{tg.args_hash({'path': 'a'})}"] <= 3_600_000
    store.clear_task("ttl")
    assert list(client.scan_iter(match=f"{redis_prefix}:*")) == []
    store.close()


def test_claim_expires_in_redis(redis_prefix: str) -> None:
    store = _store(redis_prefix)
    req = BeginRequest(tool="t", signature="s", idempotency_key="k", claim=True,
                       task_scope=False, count=True, poll=False, now=time.time(),
                       claim_ttl_s=0.5)
    assert store.begin("x", req).claimed
    ttl_ms = store.client.pttl(f"{redis_prefix}:{{x}}:rec:k")
    assert 0 < ttl_ms <= 500  # kept, for the claim's TTL (a busy machine may eat some of it)
    time.sleep(0.6)
    assert store.client.exists(f"{redis_prefix}:{{x}}:rec:k") == 0
    store.close()


def test_client_with_decoded_responses(redis_prefix: str) -> None:
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True, socket_timeout=5.0)
    store = RedisStore(client, key_prefix=redis_prefix)
    assert _scenario(store) == _scenario(MemoryStore(clock=FakeClock(1_000.0)))
    store.close()  # a client passed in stays open
    assert client.ping()
    client.close()


@dataclasses.dataclass
class _Big:
    n: int


def _round_trip(store: RedisStore, content: Any) -> Any:
    """Store ``content`` as a completed record's result and read it back."""
    store.finish("t", FinishRequest(
        tool="w", signature="s", idempotency_key="k", executed=False, success=False,
        unknown=False, mutating=True, result_digest="", store_result=True, content=content,
        release=False, ttl_s=60.0, now=0.0))
    record = store.get_record("t", "k", 0.0)
    assert record is not None
    return record.content


def test_non_json_results_are_stored_as_repr(redis_prefix: str) -> None:
    store = _store(redis_prefix)
    content = {"when": (1, 2), 3: b"raw", "big": 2**70}
    stored = _round_trip(store, content)
    # value by value: the int beyond 64 bits and the bytes as their repr, the rest as JSON
    assert stored == {"when": [1, 2], "3": "b'raw'", "big": repr(2**70)}
    branching: list[Any] = ["x"]
    branching += [branching, branching]  # cycles: each cut at its first repeat, in linear time
    deep: list[Any] = []
    for _ in range(300):  # deeper than orjson's limit: cut at depth 200
        deep = [deep]
    content = {"graph": branching, "obj": _Big(n=2**70), (1, 2): "tuple key", "deep": deep}
    stored = _round_trip(store, content)
    cut = "['x', [...], [...]]"
    assert (stored["graph"], stored["obj"], stored["(1, 2)"]) == (
        ["x", cut, cut], {"n": repr(2**70)}, "tuple key")
    level, inner = 1, stored["deep"]
    while isinstance(inner, list):
        level, inner = level + 1, inner[0]
    assert level == 200 and isinstance(inner, str) and inner.startswith("[[[")
    store.finish("t", FinishRequest(
        tool="w", signature="s", idempotency_key="k", executed=False, success=False,
        unknown=False, mutating=True, result_digest="", store_result=True,
        content={"when": (1, 2), 3: b"raw"}, release=False, ttl_s=60.0, now=0.0))
    record = store.get_record("t", "k", 0.0)
    assert record is not None
    assert record.content == {"when": [1, 2], "3": "b'raw'"}
    store.close()


def test_redis_errors_become_store_errors(redis_prefix: str) -> None:
    store = _store(redis_prefix)
    store.client.set(f"{redis_prefix}:{{bad}}:meta", "not a hash")
    with pytest.raises(tg.StoreError, match=r"failed \(usage, task 'bad'\): ResponseError"):
        store.usage("bad")
    store.close()


def test_constructor_checks() -> None:
    with pytest.raises(ValueError, match="not both"):
        RedisStore(redis.Redis(), url=REDIS_URL)
    with pytest.raises(ValueError, match="must be > 0"):
        RedisStore(url=REDIS_URL, timeout_s=0)
    with pytest.raises(ValueError, match="on_error"):
        RedisStore(url=REDIS_URL, on_error="ignore")  # type: ignore[arg-type]
    assert repr(RedisStore(url="redis://10.0.0.9:6380/3", key_prefix="p")) == (
        "RedisStore('10.0.0.9:6380/3', key_prefix='p')")


def test_missing_redis_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)
    monkeypatch.delitem(sys.modules, "toolguard.stores.redis")
    with pytest.raises(ImportError, match=r"pip install 'agent-toolguard\[redis\]'"):
        import toolguard.stores.redis  # noqa: F401


class _Closed:
    def __repr__(self) -> str:
        raise RuntimeError("session closed")


def test_a_result_whose_repr_raises_is_stored_by_its_type(redis_prefix: str) -> None:
    """A receipt object whose repr fails must not leave the write's claim behind: the
    retry gets the stored result, not CallInProgress."""
    runs: list[str] = []

    @tg.mutating
    def charge(order: str) -> Any:
        runs.append(order)
        return {"receipt": _Closed()}

    guard = tg.Guard(tools=[charge], store=_store(redis_prefix))
    task = guard.task("t")
    assert task.call("charge", {"order": "o1"}).decision is tg.Decision.ALLOW
    again = task.call("charge", {"order": "o1"})
    assert again.decision is tg.Decision.CACHED
    assert again.value == {"receipt": "<_Closed>"} and runs == ["o1"]
