"""What :class:`~toolguard.stores.RedisStore` sends and reads: the client it builds from a URL
(timeouts, retries, cluster start-up nodes), times and TTLs as Redis takes them, the JSON of
stored results, records and approvals, the replies of the begin and usage scripts, and the
escaping of key parts.
"""

from __future__ import annotations

import math
from typing import Any, Final, Protocol
from urllib.parse import urlsplit

import orjson
import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from toolguard._types import RecordState

from ._base import IdempotencyRecord, RetryRequest, Snapshot, TaskUsage
from ._json import _approval, _approval_json
from ._redis_scripts import _RETRY_UNKNOWN_SCRIPT, _Script

_MAX_TTL_S: Final = 10 * 365 * 86_400.0  # clamp: PX must fit Redis' range, inf must not leak
_STATES: Final = {b"p": RecordState.IN_PROGRESS, b"c": RecordState.COMPLETED,
                  b"u": RecordState.UNKNOWN}



def unreachable(url: str, timeout_s: float = 1.0, *, cluster: bool = False) -> str | None:
    """Why the Redis server (or with ``cluster``, the Redis Cluster) at ``url`` cannot be
    used (a one-line reason), or None if it answers a PING within ``timeout_s`` seconds. For
    health checks, tests and benchmarks."""
    try:
        client = _client(url, timeout_s, cluster=cluster, retries=0)
    except (redis.RedisError, OSError, ValueError) as exc:
        return f"Redis not reachable at {url} ({type(exc).__name__}: {exc})"
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        return f"Redis not reachable at {url} ({type(exc).__name__}: {exc})"
    finally:
        client.close()
    return None


def startup_nodes(url: str) -> list[tuple[str, int]]:
    """The ``(host, port)`` pairs of a comma-separated list of Redis URLs (a later item may
    leave out the scheme: ``redis://a:7000,b:7001``).

    Raises:
        ValueError: an empty list, an item without a host, or a ``unix://`` socket (a
            cluster is reached over TCP).
    """
    items = [item.strip() for item in url.split(",")]
    if not items or not all(items):
        raise ValueError(f"empty startup node in {url!r}")
    scheme = items[0].split("://", 1)[0] if "://" in items[0] else "redis"
    nodes: list[tuple[str, int]] = []
    for item in items:
        parts = urlsplit(item if "://" in item else f"{scheme}://{item}")
        if parts.scheme == "unix" or not parts.hostname:
            raise ValueError(f"a cluster node needs a host and port, not {item!r}")
        nodes.append((parts.hostname, parts.port or 6379))
    return nodes


def _client(url: str, timeout_s: float, *, cluster: bool, retries: int = 3
            ) -> redis.Redis | RedisCluster:
    """A client with ``timeout_s`` socket timeouts: a ``Redis`` or, with ``cluster``, a
    ``RedisCluster`` whose startup nodes are the comma-separated ``url`` items (options such
    as the password come from the first). Never reads from replicas."""
    backoff = ExponentialBackoff(cap=min(timeout_s, 0.5), base=0.02)
    if not cluster:
        if "," in url:
            raise ValueError(f"several Redis URLs ({url!r}) need [store] cluster = true")
        return redis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
            retry=Retry(backoff, retries, supported_errors=(redis.ConnectionError,)),
            client_name="toolguard")
    first, *others = url.split(",")
    nodes = [ClusterNode(host, port)  # type: ignore[no-untyped-call]
             for host, port in startup_nodes(url)[1:]] if others else []
    try:
        return RedisCluster(
            url=first.strip(), startup_nodes=nodes, socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s, retry=Retry(backoff, retries),
            client_name="toolguard")  # no load_balancing_strategy: replicas are never read
    except RedisClusterException as exc:  # e.g. a db other than 0, nothing reachable
        raise redis.ConnectionError(str(exc)) from exc


def _ms(seconds: float) -> int:
    return max(1, math.ceil(min(seconds, _MAX_TTL_S) * 1000))


def _time(seconds: float) -> str:
    return repr(float(seconds))


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _record(raw: bytes | str, now: float | None = None) -> IdempotencyRecord:
    """The record stored as ``raw`` ("state|changes|expires_at|created_at|" + JSON; a claim
    has its TTL's end before the JSON). A claim whose TTL ended by ``now`` reads as an
    unknown outcome (the begin script turns it into one itself: ``now`` None)."""
    state, epoch, _expires_at, created_at, tail = _bytes(raw).split(b"|", 4)
    if state == b"p" and tail[:1] != b"[":  # (a claim written without its TTL's end: none)
        due, tail = tail.split(b"|", 1)
        if now is not None and float(due) <= now:
            state, created_at = b"u", due
    call_id, content = orjson.loads(tail)
    return IdempotencyRecord(_STATES[state], int(epoch), float(created_at), content, call_id)


def _snapshot(reply: list[Any]) -> Snapshot:
    """The :class:`Snapshot` of the begin script's reply (``_BEGIN_SCRIPT``)."""
    (epoch, calls, tool_calls, failures, tokens_in, tokens_out, started, count, polls,
     record, approval, claimed, halted, run, run_outcome, run_signature, transient) = reply
    return Snapshot(
        halted=None if halted is None else orjson.loads(halted),
        epoch=int(epoch),
        calls=int(calls),
        tool_calls=int(tool_calls),
        consecutive_failures=int(failures),
        tokens=int(tokens_in) + int(tokens_out),
        started_at=float(started),
        count=int(count),
        polls=int(polls),
        record=None if record is None else _record(record),
        approval=None if approval is None else _approval(approval),
        claimed=bool(claimed),
        stagnation=int(run),
        stagnation_outcome=_text(run_outcome),
        stagnation_signature=_text(run_signature),
        transient=int(transient),
    )


def _usage(raw: list[Any]) -> TaskUsage:
    """The :class:`TaskUsage` of the task's meta hash, as the read script returns it (field,
    value, field, value, ...)."""
    fields = {_text(k): v for k, v in zip(raw[::2], raw[1::2], strict=True)}
    halted = fields.get("halted")
    started = fields.get("started")
    return TaskUsage(
        tool_calls=int(fields.get("calls", 0)),
        per_tool={k[2:]: int(v) for k, v in fields.items() if k.startswith("t:")},
        input_tokens=int(fields.get("in", 0)),
        output_tokens=int(fields.get("out", 0)),
        started_at=None if started is None else float(started),
        epoch=int(fields.get("epoch", 0)),
        halted=None if halted is None else orjson.loads(halted),
        cost_nusd=int(fields.get("cost", 0)),
        cost_per_tool={k[2:]: int(v) for k, v in fields.items() if k.startswith("c:")},
        unpriced_tokens=int(fields.get("unpriced", 0)),
    )


def _escape(text: str) -> str:
    """``text`` without ``{`` and ``}`` (and so unambiguous around the ``{task}`` hash tag):
    ``%`` → ``%25``, ``{`` → ``%7B``, ``}`` → ``%7D``; anything else stays as it is."""
    if "%" in text or "{" in text or "}" in text:
        return text.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")
    return text


def _where(client: redis.Redis | RedisCluster) -> str:
    """Where ``client`` points, for messages: ``host:port/db``, ``unix:path`` or
    ``cluster host:port,...``."""
    if isinstance(client, RedisCluster):
        nodes = client.get_nodes()  # type: ignore[no-untyped-call]
        return "cluster " + ",".join(sorted(n.name for n in nodes if n.server_type == "primary"))
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"


class _Evaluates(Protocol):
    """What :func:`retry_unknown` uses of a :class:`~toolguard.stores.RedisStore`."""

    _state_ms_arg: str

    def _keys(self, task_id: str, record_key: str = "") -> list[str]: ...

    def _eval(self, op: str, task_id: str, script: _Script, keys: list[str],
              args: list[str | bytes | int]) -> Any: ...


def retry_unknown(store: _Evaluates, task_id: str, req: RetryRequest) -> bool:
    """``RedisStore.retry_unknown``: the unknown outcome of ``req.origin``'s call becomes the
    retry's claim and its approval is spent, in one Lua script (``_RETRY_UNKNOWN``), one
    round trip. A reply lost after the script ran leaves a claim whose retry will not run:
    it becomes the unknown outcome again once its TTL passes.

    Raises:
        StoreError: Redis failed or timed out, or the task's state was lost.
    """
    key = req.idempotency_key
    return bool(store._eval("retry_unknown", task_id, _RETRY_UNKNOWN_SCRIPT,
                            store._keys(task_id, key), [
        key, orjson.dumps([req.origin, None]), _time(req.now),
        orjson.dumps([req.call_id, None]),  # the claim's tail, as begin writes it
        _time(req.now + min(req.claim_ttl_s, _MAX_TTL_S)),
        # kept as an unknown outcome for ttl_s more, as begin's claim
        _time(req.now + min(req.claim_ttl_s + req.ttl_s, _MAX_TTL_S)),
        _ms(req.claim_ttl_s + req.ttl_s), _approval_json(req.approval), store._state_ms_arg,
    ]))
