"""Redis store: per-task state shared by every worker process and host serving a task.

Needs the extra ``toolguard[redis]`` (redis-py). Semantics are exactly those of
:class:`~toolguard.stores.MemoryStore` (one contract suite, ``tests/test_store_contract.py``,
runs against both); only where the state lives differs.

Key layout, for task ``T`` under ``key_prefix`` ``P`` (``{T}`` is a Redis Cluster hash tag,
so all keys of one task share one slot; in ``P`` and ``T`` alike ``%``, ``{`` and ``}`` are
written ``%25``, ``%7B`` and ``%7D``, so no prefix or task id can reach into another's keys
or split a task over slots, and an empty task id is written ``%``)::

    P:{T}:meta        hash   epoch, changes, calls, in, out (tokens), started, halted (JSON),
                             t:<tool> (calls per tool), f:<tool> (consecutive failures),
                             last (signature of the last counted call), s:<tool> (the
                             stagnation run: "epoch length outcome last_signature"),
                             gen (the task's generation marker, below)
    P:{T}:sigs        hash   signature -> "epoch count polls last_result_digest resets"
    P:{T}:seen        set    (signature, result digest) pairs seen (progress detection)
    P:{T}:appr        hash   idempotency key -> approval record (JSON)
    P:{T}:recs        set    idempotency keys that have a record (for clear_task)
    P:{T}:rec:<key>   string idempotency record: "state|changes|expires_at|created_at|" + JSON

The five task keys expire ``state_ttl_s`` seconds after the task's last use (every
operation refreshes them); each record carries its own TTL (``PX``: the claim TTL for an
in-progress claim, the idempotency TTL for completed and unknown records). Nothing is kept
without a TTL. Records also store their expiry time on the guard's clock and are ignored
once ``now`` passes it, so expiry follows an injected clock exactly as in memory; ``PX``
removes them physically.

Atomicity and round trips: :meth:`RedisStore.begin` and :meth:`RedisStore.finish` are one
Lua script each (``EVALSHA``), so two workers racing on one signature see consecutive
counts and exactly one of them claims the idempotency key (a ``SET ... PX`` inside the
script: atomic with the read, and a claim left by a crashed worker expires after its TTL).
A call answered from the idempotency cache costs one round trip, an executed call two.
Every other method is one round trip.

Stored results are JSON (orjson): str, int, float, bool, None, list and dict round-trip;
tuples come back as lists, non-string dict keys as strings, and any other value (bytes, an
object, an int beyond 64 bits) as its ``repr()`` string.

Failures: every Redis error becomes :class:`toolguard.StoreError`. A client built here has
``socket_timeout`` and ``socket_connect_timeout`` of ``timeout_s`` and retries a command up
to three times after a connection error (reconnecting; the state is in Redis, so the task
continues intact), never after a timeout (a cluster client also retries timeouts, as
redis-py's ``RedisCluster`` does). A command whose reply was lost with its connection may
then apply twice (counts err high, never low). Three faults get more than an error:

- *A lost begin reply* (a stall or crash after Redis ran the script): the claim it may have
  taken carries the call's id, and this store remembers it, so the next identical call
  through this store (the retry) takes it over at once instead of waiting
  ``in_progress_ttl_s``; it was counted once. Other workers treat it as a call in progress.
- *A lost finish* (the tool ran, then Redis failed): the outcome is kept in this store and
  written before the task's next operation through it, so the retry finds the stored
  result rather than running again when the claim expires.
- *Lost state* (a restart without persistence, an eviction, a deletion): the first write of
  a task sets a random generation marker in its meta hash, which this store remembers; a
  task it knows whose marker is gone or changed raises :class:`toolguard.StoreError` on
  every operation (``fail_closed`` refuses the call) instead of counting budgets and the
  ladder from zero, until :meth:`RedisStore.clear_task` starts it over. Expiry by
  ``state_ttl_s`` is told apart by time; a worker that never saw the task cannot tell.

Cluster (``cluster=True``): redis-py's ``RedisCluster`` with the same scripts and keys (each
script names all its keys, which share the task's slot), following ``MOVED`` and ``ASK``;
replicas are never read, so every decision sees the master's state.

Threads: nothing in this store holds a lock across a round trip, so N threads wait on
Redis at the same time (``benchmarks/_redis_bench.py``, "threads"). A store that built its
own single-node client (``url=``, not ``client=``, not ``cluster``) gives each thread a
connection of its own (a single-connection ``redis.Redis`` on the store's pool, made on the
thread's first operation and returned to the pool when the thread ends), so a command
takes no lock shared between threads: redis-py's pool otherwise takes its lock twice per
command and polls the socket once. Up to 32 threads get one; the others share the pool as
before. A client passed in is used as it is for every command (its pool, its subclass).
Fork-safe: a forked child drops the parent's per-thread connections and redis-py's pool
reconnects there.
Signature history is not LRU-bounded per task as in memory: it lives until the task's TTL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import threading
import time
import weakref
from typing import Any, Final, Literal, NamedTuple
from urllib.parse import urlsplit

import orjson

try:
    import redis
    from redis.backoff import ExponentialBackoff
    from redis.cluster import ClusterNode, RedisCluster
    from redis.exceptions import NoScriptError, RedisClusterException
    from redis.retry import Retry
except ImportError as _exc:  # pragma: no cover - exercised by a test that hides redis
    raise ImportError(
        "toolguard.stores.RedisStore needs redis-py: pip install 'toolguard[redis]'"
    ) from _exc

from toolguard._errors import StoreError
from toolguard._policy import StorePolicy
from toolguard._types import RecordState

from ._base import (
    ApprovalRecord,
    ApprovalState,
    BeginRequest,
    FinishRequest,
    IdempotencyRecord,
    Snapshot,
    TaskUsage,
)

__all__ = ["RedisStore", "startup_nodes", "unreachable"]

OnError = Literal["fail_closed", "fail_open"]

DEFAULT_URL: Final = "redis://localhost:6379/0"
_MAX_TTL_S: Final = 10 * 365 * 86_400.0  # clamp: PX must fit Redis' range, inf must not leak
_STATES: Final = {b"p": RecordState.IN_PROGRESS, b"c": RecordState.COMPLETED,
                  b"u": RecordState.UNKNOWN}
_JSON_OPTS: Final = orjson.OPT_NON_STR_KEYS

# Shared by every script. KEYS[1..5] are always meta, sigs, seen, appr, recs; KEYS[6] the
# call's record. ``touch`` refreshes the task's TTL; ``recs`` only ever grows its TTL, since
# it must outlive records whose TTL exceeds the task's.
_PRELUDE: Final = """
local function extend(k, ms)
  if redis.call('PTTL', k) < ms then redis.call('PEXPIRE', k, ms) end
end
local function touch(ms)
  for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ms) end
  extend(KEYS[5], ms)
end
-- The task's generation marker (lost-state detection): ARGV[#ARGV - 1] is the generation
-- this worker last saw ('' for none), ARGV[#ARGV] a fresh one to start with. A task this
-- worker knows whose marker is gone, or was started over by another worker since, lost
-- its state: refuse (false) rather than count from zero.
local function generation(create)
  local known, fresh = ARGV[#ARGV - 1], ARGV[#ARGV]
  local have = redis.call('HGET', KEYS[1], 'gen')
  if have then
    if known ~= '' and known ~= have then return false end
    return have
  end
  if known ~= '' then return false end
  if create then
    redis.call('HSET', KEYS[1], 'gen', fresh)
    return fresh
  end
  return ''
end
local LOST = 'TOOLGUARD_STATE_LOST'
"""

# MemoryStore.begin, line for line. Times are passed as Python float reprs and only
# compared in Lua (tonumber is exact on them), never formatted (Lua's %.14g would round).
_BEGIN: Final = _PRELUDE + """
local tool, sig, key = ARGV[1], ARGV[2], ARGV[3]
local claim, task_scope = ARGV[4] == '1', ARGV[5] == '1'
local count, poll = ARGV[6] == '1', ARGV[7] == '1'
local now, claim_exp = ARGV[8], ARGV[9]
local claim_ms, state_ms = tonumber(ARGV[10]), tonumber(ARGV[11])
local claim_tail = ARGV[12]  -- the claiming call's id, as the record's JSON tail
-- the record tails of this worker's begins of this key whose replies were lost (one per
-- line), or '': a claim they left is this call's to take over
local orphan = ARGV[14]
local function owned(v, tails)
  for t in string.gmatch(tails, '[^\\n]+') do
    if string.sub(v, -#t) == t then return true end
  end
  return false
end
local gen = generation(true)
if not gen then return redis.error_reply(LOST) end
local m = redis.call('HMGET', KEYS[1], 'epoch', 'calls', 'in', 'out', 'started', 'halted',
                     't:' .. tool, 'f:' .. tool, 'changes', 'last', 's:' .. tool)
local changes = tonumber(m[9] or '0')
local epoch = tonumber(m[1] or '0')
local calls = tonumber(m[2] or '0')
local tool_calls = tonumber(m[7] or '0')
local started = m[5]
if not started then
  started = now
  redis.call('HSET', KEYS[1], 'started', now)
end
local n, polls, digest, resets = 0, 0, '', '0'
local raw = redis.call('HGET', KEYS[2], sig)
if raw then
  local e, c, p, d, r = string.match(raw, '^(%d+) (%d+) (%d+) (%S*) ?(%d*)$')
  digest = d
  if r ~= '' then resets = r end
  if tonumber(e) == epoch then n, polls = tonumber(c), tonumber(p) end
end
local run_n, run_outcome, run_sig = 0, '', ''
if m[11] then
  local e, c, o, g = string.match(m[11], '^(%d+) (%d+) (%S+) (.*)$')
  if tonumber(e) == epoch then run_n, run_outcome, run_sig = tonumber(c), o, g end
end
local record, approval, claimed, adopted = false, false, 0, false
if key ~= '' then
  local v = redis.call('GET', KEYS[6])
  if v then
    local st, e, x = string.match(v, '^(%a)|(%d+)|([^|]+)|')
    if tonumber(x) <= tonumber(now) then
      v = false  -- expired on the guard's clock
    elseif st == 'c' and not task_scope and count and tonumber(e) ~= changes then
      v = false  -- until_change: lapsed at a write or turn since (kept, as in memory);
                 -- never for a call that waited on it (count false): see MemoryStore
    end
  end
  local mine = false
  if v and claim and string.sub(v, 1, 2) == 'p|' then
    if ARGV[13] == '1' and string.sub(v, -#claim_tail) == claim_tail then
      mine = true  -- this call's own claim: a begin retried after its reply was lost
    elseif orphan ~= '' and owned(v, orphan) then
      -- the claim of this worker's identical call whose begin reply was lost (it never
      -- ran): its retry takes the claim over under its own call id
      redis.call('SET', KEYS[6],
                 'p|' .. changes .. '|' .. claim_exp .. '|' .. now .. '|' .. claim_tail,
                 'PX', claim_ms)
      extend(KEYS[5], claim_ms)
      mine, adopted = true, true
    end
  end
  if mine then
    claimed = 1
  elseif v then
    record = v
  elseif claim then
    redis.call('SET', KEYS[6],
               'p|' .. changes .. '|' .. claim_exp .. '|' .. now .. '|' .. claim_tail,
               'PX', claim_ms)
    redis.call('SADD', KEYS[5], key)
    extend(KEYS[5], claim_ms)
    claimed = 1
  end
  approval = redis.call('HGET', KEYS[4], key)
end
-- a duplicate of a call that is running right now is the same call, not a repeat
local concurrent = record and string.sub(record, 1, 2) == 'p|'
-- a refused call of a halted task is free; a retry that took over its lost twin's claim
-- was counted by that twin's begin
if count and not m[6] and not adopted then
  calls = redis.call('HINCRBY', KEYS[1], 'calls', 1)
  tool_calls = redis.call('HINCRBY', KEYS[1], 't:' .. tool, 1)
  if poll then polls = polls + 1 elseif not concurrent then n = n + 1 end
  if m[10] ~= sig then  -- another call came in between: its run of resets starts afresh
    resets = '0'
    redis.call('HSET', KEYS[1], 'last', sig)
  end
end
redis.call('HSET', KEYS[2], sig,
           epoch .. ' ' .. n .. ' ' .. polls .. ' ' .. digest .. ' ' .. resets)
touch(state_ms)
return {gen, {epoch, calls, tool_calls, tonumber(m[8] or '0'), tonumber(m[3] or '0'),
        tonumber(m[4] or '0'), started, math.max(n, 1), polls, record, approval, claimed, m[6],
        run_n, run_outcome, run_sig}}
"""

# MemoryStore.finish, line for line. The seen pair is length-prefixed: unambiguous for any
# signature and digest.
_FINISH: Final = _PRELUDE + """
local tool, sig, key = ARGV[1], ARGV[2], ARGV[3]
local executed, success, mutating = ARGV[4] == '1', ARGV[5] == '1', ARGV[6] == '1'
local digest, mode, tail = ARGV[7], ARGV[8], ARGV[9]
local rec_ms, now, rec_exp = tonumber(ARGV[10]), ARGV[11], ARGV[12]
local halt, state_ms = ARGV[13], tonumber(ARGV[14])
local outcome, max_resets = ARGV[15], tonumber(ARGV[16])
local gen = generation(true)
if not gen then return redis.error_reply(LOST) end
local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0')
local changes = tonumber(redis.call('HGET', KEYS[1], 'changes') or '0')
if executed and success and mutating then
  changes = redis.call('HINCRBY', KEYS[1], 'changes', 1)  -- any write lapses until_change
end
if executed then
  if success then
    redis.call('HSET', KEYS[1], 'f:' .. tool, 0)
  else
    redis.call('HINCRBY', KEYS[1], 'f:' .. tool, 1)
  end
  if success and digest ~= '' then
    local e, n, polls, last, resets = epoch, 0, 0, '', 0
    local raw = redis.call('HGET', KEYS[2], sig)
    if raw then
      local se, c, p, d, r = string.match(raw, '^(%d+) (%d+) (%d+) (%S*) ?(%d*)$')
      e, n, polls, last, resets = tonumber(se), tonumber(c), tonumber(p), d, tonumber(r) or 0
    end
    if mutating and redis.call('SADD', KEYS[3], #sig .. ':' .. sig .. digest) == 1 then
      -- progress (a): the world changed; this call is the first of the new epoch
      epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
      e, n, polls = epoch, 1, 0
    elseif last ~= '' and last ~= digest then
      -- progress (b): this signature's output moved, unless it moved on every one of the
      -- last max_resets back-to-back calls
      if max_resets == 0 or resets < max_resets then n = 1 end
      resets = resets + 1
    end
    redis.call('HSET', KEYS[2], sig,
               e .. ' ' .. n .. ' ' .. polls .. ' ' .. digest .. ' ' .. resets)
  end
end
if outcome ~= '' then  -- after progress: a call that made progress starts a new run
  local run = redis.call('HGET', KEYS[1], 's:' .. tool)
  local re, rn, ro, rs
  if run then re, rn, ro, rs = string.match(run, '^(%d+) (%d+) (%S+) (.*)$') end
  if not run or tonumber(re) ~= epoch or ro ~= outcome then
    redis.call('HSET', KEYS[1], 's:' .. tool, epoch .. ' 1 ' .. outcome .. ' ' .. sig)
  elseif rs ~= sig then
    redis.call('HSET', KEYS[1], 's:' .. tool,
               epoch .. ' ' .. (tonumber(rn) + 1) .. ' ' .. outcome .. ' ' .. sig)
  end
end
if key ~= '' then
  if mode == 'c' or mode == 'u' then
    redis.call('SET', KEYS[6],
               mode .. '|' .. changes .. '|' .. rec_exp .. '|' .. now .. '|' .. tail,
               'PX', rec_ms)
    redis.call('SADD', KEYS[5], key)
    extend(KEYS[5], rec_ms)
  elseif mode == 'r' then
    -- drop only this call's own claim (tail = its call id): an identical call may have
    -- re-claimed the key after this claim expired
    local v = redis.call('GET', KEYS[6])
    if v and string.sub(v, 1, 2) == 'p|' and string.sub(v, -#tail - 1) == '|' .. tail then
      redis.call('DEL', KEYS[6])
      redis.call('SREM', KEYS[5], key)
    end
  end
end
if halt ~= '' then redis.call('HSET', KEYS[1], 'halted', halt) end
touch(state_ms)
return {gen, 1}
"""

_SET_HALTED: Final = _PRELUDE + """
local gen = generation(true)
if not gen then return redis.error_reply(LOST) end
if ARGV[1] == '1' then
  redis.call('HSET', KEYS[1], 'halted', ARGV[2])
else
  redis.call('HDEL', KEYS[1], 'halted')
  for _, k in ipairs(redis.call('HKEYS', KEYS[1])) do  -- failure streaks restart
    if string.sub(k, 1, 2) == 'f:' then redis.call('HDEL', KEYS[1], k) end
  end
end
touch(tonumber(ARGV[3]))
return {gen, 1}
"""

_NEW_TURN: Final = _PRELUDE + """
local gen = generation(true)
if not gen then return redis.error_reply(LOST) end
redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HINCRBY', KEYS[1], 'changes', 1)
touch(tonumber(ARGV[1]))
return {gen, 1}
"""

_ADD_USAGE: Final = _PRELUDE + """
local gen = generation(true)
if not gen then return redis.error_reply(LOST) end
redis.call('HSETNX', KEYS[1], 'started', ARGV[1])
local total = redis.call('HINCRBY', KEYS[1], 'in', ARGV[2])
total = total + redis.call('HINCRBY', KEYS[1], 'out', ARGV[3])
touch(tonumber(ARGV[4]))
return {gen, total}
"""

# A read: it checks the generation but never starts one.
_READ_HASH: Final = _PRELUDE + """
local gen = generation(false)
if not gen then return redis.error_reply(LOST) end
local h = redis.call('HGETALL', KEYS[tonumber(ARGV[1])])
touch(tonumber(ARGV[2]))
return {gen, h}
"""

_SET_APPROVAL: Final = _PRELUDE + """
local gen = generation(true)
if not gen then return redis.error_reply(LOST) end
redis.call('HSET', KEYS[4], ARGV[1], ARGV[2])
touch(tonumber(ARGV[3]))
return {gen, 1}
"""

_CLEAR: Final = """
for _, key in ipairs(redis.call('SMEMBERS', KEYS[5])) do
  redis.call('DEL', ARGV[1] .. key)
end
return redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
"""


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


def _dumps(value: Any) -> bytes:
    """A stored result as JSON; what JSON cannot hold becomes its ``repr()``, value by value."""
    try:
        return orjson.dumps(value, default=_safe_repr, option=_JSON_OPTS)
    except TypeError:  # orjson.JSONEncodeError: an int beyond 64 bits, a cycle, too deep
        pass
    try:
        return orjson.dumps(_jsonable(value, 0), default=_safe_repr, option=_JSON_OPTS)
    except TypeError:
        return orjson.dumps(_safe_repr(value))


def _jsonable(value: Any, depth: int, active: frozenset[int] = frozenset()) -> Any:
    """``value`` as JSON can hold it, value by value: an int beyond 64 bits, a string that is
    not valid Unicode, a container met again inside itself (a cycle) or nested deeper than
    orjson's limit become their ``repr()``; a dataclass becomes its fields; a dict key that
    is not a string becomes ``str(key)``. Everything else stays as it is. Linear in the size
    of ``value``: a cycle stops at its first repeat."""
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**64 else repr(value)
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return repr(value)
        return value
    ident = id(value)
    if depth >= _MAX_DEPTH or ident in active:
        return _safe_repr(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, (dict, list, tuple)):
        inner = active | {ident}
        if isinstance(value, dict):
            return {k if isinstance(k, str) else str(k): _jsonable(v, depth + 1, inner)
                    for k, v in value.items()}
        return [_jsonable(v, depth + 1, inner) for v in value]
    return value  # orjson takes it natively or calls default=repr


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - a foreign __repr__ (or one nested too deep) failed
        return f"<{type(value).__qualname__}>"


_MAX_DEPTH: Final = 200  # below orjson's recursion limit of 255


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _record(raw: bytes | str) -> IdempotencyRecord:
    state, epoch, _expires_at, created_at, tail = _bytes(raw).split(b"|", 4)
    call_id, content = orjson.loads(tail)
    return IdempotencyRecord(_STATES[state], int(epoch), float(created_at), content, call_id)


def _approval(raw: bytes | str) -> ApprovalRecord:
    state, requested_at, reason, tool, args, *bound = orjson.loads(raw)
    return ApprovalRecord(state, float(requested_at), reason, tool, args, *bound[:1])


class RedisStore:
    """Per-task state in Redis, shared by every process that points at the same server or
    cluster (see the module docstring for the key layout, TTLs and failure behaviour).

    Args:
        client: a ready ``redis.Redis`` or ``redis.cluster.RedisCluster`` client (its own
            timeouts and retry apply; give it a ``socket_timeout``). Either this or ``url``.
        url: a Redis URL (``redis://host:6379/0``, ``rediss://`` for TLS, ``unix://``);
            default ``redis://localhost:6379/0`` when no client is given either. With
            ``cluster``, one or several comma-separated startup nodes
            (``redis://10.0.0.1:7000,10.0.0.2:7000``; options such as the password come
            from the first).
        cluster: talk to a Redis Cluster (redis-py's ``RedisCluster``, which follows
            ``MOVED``/``ASK`` redirections): same scripts, same key layout, every read and
            write on the master of the task's slot (replicas are never read).
        key_prefix: namespace of every key (``{key_prefix}:{task}:...``; ``%``, ``{`` and
            ``}`` are escaped in keys, in the prefix and the task id alike).
        state_ttl_s: per-task state expires this many seconds after the task's last use.
        timeout_s: socket connect and read timeout of every Redis command, in seconds
            (clients built here only).
        on_error: what the guard does when this store fails: ``fail_closed`` (the call is
            refused with :class:`toolguard.StoreError`) or ``fail_open`` (the call runs
            unguarded, with a warning audit event); ``None`` (default): the policy's
            ``[store] on_error``. Read by the engine.

    Attributes:
        on_error: as given (``None``: follow the policy).
        blocking: True: every operation waits on the network, so under ``acall`` the engine
            runs it in a worker thread instead of on the event loop.
        round_trips: Redis commands sent by this store so far, from every thread (a script
            call counts one; the one-time script load after a server restart one more;
            redis-py's reconnect retries are not counted). For tests and benchmarks.

    Raises:
        ValueError: both ``client`` and ``url``, a non-positive TTL or timeout, an unknown
            ``on_error``, or several URLs without ``cluster``.

    Every other method raises :class:`toolguard.StoreError` when Redis fails or times out,
    or when a task's state was lost (see the module docstring). Thread-safe.
    """

    blocking: Final = True

    def __init__(
        self,
        client: redis.Redis | RedisCluster | None = None,
        *,
        url: str | None = None,
        cluster: bool = False,
        key_prefix: str = "toolguard",
        state_ttl_s: float = 86_400.0,
        timeout_s: float = 1.0,
        on_error: OnError | None = None,
    ) -> None:
        if client is not None and url is not None:
            raise ValueError("RedisStore: pass a client or a url, not both")
        if not state_ttl_s > 0 or not timeout_s > 0:
            raise ValueError("RedisStore: state_ttl_s and timeout_s must be > 0 seconds")
        if on_error not in (None, "fail_closed", "fail_open"):
            raise ValueError(f"RedisStore: on_error must be fail_closed or fail_open, "
                             f"not {on_error!r}")
        self._owns_client = client is None
        if client is None:
            url = url or DEFAULT_URL
            try:
                client = _client(url, timeout_s, cluster=cluster)
            except redis.RedisError as exc:
                raise StoreError(f"Redis Cluster at {url} cannot be used: {exc}") from exc
        self._client = client
        self.on_error: OnError | None = on_error
        # round trips by thread id: each thread adds to its own entry, so no lock and no
        # lost update (a finished thread's entry stays, and a new thread may reuse its id)
        self._trips: dict[int, int] = {}
        self._lock = threading.Lock()  # the lost-claim and pending-outcome tables only
        # this thread's client (see the module doc: "Threads"), for a pool of our own
        self._pool = (client.connection_pool
                      if self._owns_client and type(client) is redis.Redis else None)
        self._local = threading.local()
        self._bound: weakref.WeakSet[redis.Redis] = weakref.WeakSet()
        if self._pool is not None:
            _STORES.add(self)
        self._prefix = key_prefix
        self._escaped_prefix = _escape(key_prefix)
        self._state_ttl_s = state_ttl_s
        self._state_ms = _ms(state_ttl_s)
        self._state_ms_arg = str(self._state_ms)
        # lost-state detection: task id -> (generation, monotonic time before its last use)
        self._gens: dict[str, tuple[str, float]] = {}
        # claims whose begin reply was lost: (task id, key) -> their record tails, one a line
        self._orphans: dict[tuple[str, str], bytes] = {}
        # outcomes Redis did not take: task id -> finishes to write before its next operation
        self._unrecorded: dict[str, list[FinishRequest]] = {}
        self._where = _where(client)

    @classmethod
    def from_policy(cls, store_policy: StorePolicy) -> RedisStore:
        """A store configured by the policy's ``[store]`` table (``url``, ``cluster``,
        ``key_prefix``, ``state_ttl_s``, ``timeout_s``, ``on_error``)."""
        return cls(url=store_policy.url, cluster=store_policy.cluster,
                   key_prefix=store_policy.key_prefix, state_ttl_s=store_policy.state_ttl_s,
                   timeout_s=store_policy.timeout_s, on_error=store_policy.on_error)

    @property
    def client(self) -> redis.Redis | RedisCluster:
        """The redis-py client (the one passed in, or the one this store built; its threads'
        own connections come from its pool)."""
        return self._client

    @property
    def round_trips(self) -> int:
        """Redis commands this store sent so far, from every thread (see the class doc)."""
        return sum(list(self._trips.values()))

    @round_trips.setter
    def round_trips(self, value: int) -> None:
        self._trips = {threading.get_ident(): value}

    def close(self) -> None:
        """Close the connection pool if this store created the client (a client passed in
        stays open)."""
        if self._owns_client:
            self._forget_threads()
            self._client.close()

    def __repr__(self) -> str:
        return f"RedisStore({self._where!r}, key_prefix={self._prefix!r})"

    # -- plumbing ------------------------------------------------------------------------
    def _here(self) -> redis.Redis | RedisCluster:
        """The client for this thread's commands: its own single-connection client on the
        store's pool when the store built a single-node client and fewer than
        ``_MAX_THREADS`` threads hold one, else the store's client.

        Raises:
            redis.RedisError: the thread's connection could not be made.
        """
        pool = self._pool
        if pool is None:
            return self._client
        try:
            here: redis.Redis = self._local.client
        except AttributeError:
            if len(self._bound) >= _MAX_THREADS:
                return self._client  # not kept: a later operation may find room
            here = redis.Redis(connection_pool=pool, single_connection_client=True)
            self._local.client = here
            self._bound.add(here)
        return here

    def _forget_threads(self) -> None:
        """Drop every thread's own client (after a fork: they hold the parent's sockets,
        which the child's pool disowns, so nothing is sent or shut down on them)."""
        self._local = threading.local()
        self._bound = weakref.WeakSet()

    def _count(self) -> None:
        trips, ident = self._trips, threading.get_ident()
        trips[ident] = trips.get(ident, 0) + 1

    def _keys(self, task_id: str, record_key: str = "") -> list[str]:
        base = f"{self._escaped_prefix}:{{{_escape(task_id) or '%'}}}:"
        return [base + "meta", base + "sigs", base + "seen", base + "appr", base + "recs",
                base + "rec:" + record_key]

    def _fail(self, op: str, task_id: str, exc: Exception) -> StoreError:
        if isinstance(exc, redis.ResponseError) and str(exc).startswith(_LOST):
            return StoreError(
                f"Redis store at {self._where}: the state of task {task_id!r} is gone ({op}): "
                "Redis restarted without persistence, or the task's keys were evicted or "
                "deleted. Its counts, halts and idempotency records are lost, so its calls "
                "are refused rather than counted from zero. Give Redis persistence "
                f"(appendonly yes), then start the task over with clear_task({task_id!r}).")
        return StoreError(f"Redis store at {self._where} failed ({op}, task {task_id!r}): "
                          f"{type(exc).__name__}: {exc}")

    def _eval(self, op: str, task_id: str, script: _Script, keys: list[str],
              args: list[str | bytes | int]) -> Any:
        """Run ``script`` (one round trip; two when the server lacks it) with the task's
        generation arguments appended; return its value after checking the generation."""
        if self._unrecorded and task_id in self._unrecorded:
            self._write_unrecorded(task_id)
        known = self._gens.get(task_id)
        started = time.monotonic()
        if known is not None and started - known[1] < self._state_ttl_s:
            args += [known[0], ""]
        else:  # new here, or idle long enough that its state may have expired: start over
            args += ["", os.urandom(8).hex()]
        self._count()
        try:
            client = self._here()
            try:
                gen, value = client.evalsha(script.sha, len(keys), *keys, *args)
            except NoScriptError:  # first use on this server (or after SCRIPT FLUSH)
                self._count()
                gen, value = client.eval(script.source, len(keys), *keys, *args)
        except redis.RedisError as exc:
            raise self._fail(op, task_id, exc) from exc
        if gen:
            gens = self._gens
            gens[task_id] = (_text(gen), started)
            if len(gens) > _MAX_TASKS:
                with contextlib.suppress(KeyError, RuntimeError, StopIteration):
                    del gens[next(iter(gens))]  # the oldest: it loses lost-state detection
        return value

    def _write_unrecorded(self, task_id: str) -> None:
        """Write the outcomes Redis did not take, oldest first (before anything else about
        the task, so an identical retry finds the completed record, not a stale claim)."""
        with self._lock:
            pending = self._unrecorded.pop(task_id, None)
        while pending:
            try:
                self._finish_now(task_id, pending[0])
            except StoreError:
                with self._lock:
                    pending += self._unrecorded.pop(task_id, [])
                    self._unrecorded[task_id] = pending
                raise
            pending.pop(0)

    # -- the Store protocol --------------------------------------------------------------
    def begin(self, task_id: str, req: BeginRequest) -> Snapshot:
        """Count the attempt, claim the key if asked, and return the state to decide on:
        one Lua script, one round trip (see :meth:`MemoryStore.begin
        <toolguard.stores.MemoryStore.begin>` for the semantics).

        A claiming begin whose reply was lost (a timeout, a dropped connection) may still
        have claimed the key; the next claiming begin of the same key through this store
        takes that claim over (it never ran), instead of waiting ``in_progress_ttl_s``.

        Raises:
            StoreError: Redis failed or timed out, or the task's state was lost.
        """
        now = _time(req.now)
        tail = orjson.dumps([req.call_id, None])
        key = req.idempotency_key
        orphan = self._orphans.pop((task_id, key), b"") if self._orphans and req.claim else b""
        try:
            r = self._eval("begin", task_id, _BEGIN_SCRIPT, self._keys(task_id, key), [
                req.tool, req.signature, key,
                "1" if req.claim else "0", "1" if req.task_scope else "0",
                "1" if req.count else "0", "1" if req.poll else "0",
                now, _time(req.now + min(req.claim_ttl_s, _MAX_TTL_S)),
                _ms(req.claim_ttl_s), self._state_ms_arg, tail,
                "1" if req.call_id else "0",  # a call id to recognise its claim by
                orphan,
            ])
        except StoreError:
            if req.claim and req.call_id:
                # the script may have run and claimed the key: remember the claim as ours
                with self._lock:  # this begin's claim, or an earlier lost one's
                    self._orphans[(task_id, key)] = b"\n".join(
                        [*orphan.split(b"\n")[-3:], tail] if orphan else [tail])
                    if len(self._orphans) > _MAX_TASKS:
                        del self._orphans[next(iter(self._orphans))]
            raise
        (epoch, calls, tool_calls, failures, tokens_in, tokens_out, started, count, polls,
         record, approval, claimed, halted, run, run_outcome, run_signature) = r
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
        )

    def finish(self, task_id: str, req: FinishRequest) -> None:
        """Record a call's outcome (progress, failures, idempotency record, halt): one Lua
        script, one round trip.

        An outcome Redis does not take is kept by this store and written before the task's
        next operation through it (``begin`` included), so an identical retry finds the
        completed record instead of running again once the claim expires.

        Raises:
            StoreError: Redis failed or timed out (the outcome is kept, as above), or the
                task's state was lost.
        """
        try:
            self._finish_now(task_id, req)
        except StoreError as exc:
            with self._lock:
                pending = self._unrecorded.setdefault(task_id, [])
                pending.append(req)
                del pending[:-_MAX_UNRECORDED]
                if len(self._unrecorded) > _MAX_TASKS:
                    del self._unrecorded[next(iter(self._unrecorded))]
            raise StoreError(f"{exc}; the outcome is kept by this worker and written before "
                             f"the task's next store operation") from exc

    def _finish_now(self, task_id: str, req: FinishRequest) -> None:
        if req.store_result:
            mode, tail = "c", b"[%s,%s]" % (orjson.dumps(req.call_id), _dumps(req.content))
        elif req.unknown:
            mode, tail = "u", orjson.dumps([req.call_id, None])
        else:
            mode, tail = ("r", orjson.dumps([req.call_id, None])) if req.release else ("", b"")
        self._eval("finish", task_id, _FINISH_SCRIPT,
                   self._keys(task_id, req.idempotency_key), [
                       req.tool, req.signature, req.idempotency_key,
                       "1" if req.executed else "0", "1" if req.success else "0",
                       "1" if req.mutating else "0", req.result_digest, mode, tail,
                       _ms(req.ttl_s), _time(req.now),
                       _time(req.now + min(req.ttl_s, _MAX_TTL_S)),
                       b"" if req.halt is None else _dumps(req.halt), self._state_ms_arg,
                       req.outcome, str(req.max_progress_resets),
                   ])

    def get_record(self, task_id: str, key: str, now: float) -> IdempotencyRecord | None:
        """The record under ``key`` unless it expired by ``now`` (one ``GET``). As in memory,
        an ``until_change`` record that lapsed at a progress is still returned here.

        Raises:
            StoreError: Redis failed or timed out.
        """
        if self._unrecorded and task_id in self._unrecorded:
            self._write_unrecorded(task_id)
        self._count()
        try:
            raw = self._here().get(self._keys(task_id, key)[5])
        except redis.RedisError as exc:
            raise self._fail("get_record", task_id, exc) from exc
        if raw is None:
            return None
        expires_at = float(_bytes(raw).split(b"|", 3)[2])
        return None if expires_at <= now else _record(raw)

    def set_halted(self, task_id: str, halt: dict[str, Any] | None) -> None:
        """Set (or with None clear) the task's halted flag; clearing it restarts every
        tool's run of consecutive failures.

        Raises:
            StoreError: Redis failed or timed out, or the task's state was lost.
        """
        flag, value = ("0", b"") if halt is None else ("1", _dumps(halt))
        self._eval("set_halted", task_id, _SET_HALTED_SCRIPT, self._keys(task_id)[:5],
                   [flag, value, self._state_ms_arg])

    def new_turn(self, task_id: str) -> None:
        """A new user turn: the epoch moves on (counts restart, until_change records lapse).

        Raises:
            StoreError: Redis failed or timed out, or the task's state was lost.
        """
        self._eval("new_turn", task_id, _NEW_TURN_SCRIPT, self._keys(task_id)[:5],
                   [self._state_ms_arg])

    def add_usage(self, task_id: str, input_tokens: int, output_tokens: int, now: float) -> int:
        """Add token usage (starting the task's clock at ``now`` if not started); return the
        task's total tokens.

        Raises:
            StoreError: Redis failed or timed out, or the task's state was lost.
        """
        total = self._eval("add_usage", task_id, _ADD_USAGE_SCRIPT, self._keys(task_id)[:5],
                           [_time(now), input_tokens, output_tokens, self._state_ms_arg])
        return int(total)

    def usage(self, task_id: str) -> TaskUsage:
        """The task's counters (zeros for a task never seen).

        Raises:
            StoreError: Redis failed or timed out, or the task's state was lost.
        """
        raw = self._eval("usage", task_id, _READ_HASH_SCRIPT, self._keys(task_id)[:5],
                         ["1", self._state_ms_arg])
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
        )

    def set_approval(self, task_id: str, key: str, record: ApprovalRecord, ttl_s: float) -> None:
        """Store a human decision (or a pending request) for ``key``. As in memory, approvals
        live as long as the task's state (``state_ttl_s``); ``ttl_s`` is not used.

        Raises:
            StoreError: Redis failed or timed out, or the task's state was lost.
        """
        value = _dumps([record.state, record.requested_at, record.reason, record.tool,
                        record.args, record.args_hash])
        self._eval("set_approval", task_id, _SET_APPROVAL_SCRIPT, self._keys(task_id)[:5],
                   [key, value, self._state_ms_arg])

    def pending_approvals(self, task_id: str) -> dict[str, ApprovalRecord]:
        """Pending approval requests of the task, by idempotency key.

        Raises:
            StoreError: Redis failed or timed out, or the task's state was lost.
        """
        raw = self._eval("pending_approvals", task_id, _READ_HASH_SCRIPT,
                         self._keys(task_id)[:5], ["4", self._state_ms_arg])
        records = {_text(k): _approval(v) for k, v in zip(raw[::2], raw[1::2], strict=True)}
        return {k: r for k, r in records.items() if r.state == ApprovalState.PENDING}

    def clear_task(self, task_id: str) -> None:
        """Delete every key of the task, its idempotency records included, and start it over
        (also after its state was lost: calls are accepted again, counted from zero).

        Raises:
            StoreError: Redis failed or timed out.
        """
        keys = self._keys(task_id)
        self._count()
        with self._lock:
            self._unrecorded.pop(task_id, None)
        try:
            client = self._here()
            try:
                client.evalsha(_CLEAR_SCRIPT.sha, 5, *keys[:5], keys[5])
            except NoScriptError:
                client.eval(_CLEAR_SCRIPT.source, 5, *keys[:5], keys[5])
        except redis.RedisError as exc:
            raise self._fail("clear_task", task_id, exc) from exc
        self._gens.pop(task_id, None)


class _Script(NamedTuple):
    source: str
    sha: str


def _script(source: str) -> _Script:
    return _Script(source, hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest())


_BEGIN_SCRIPT: Final = _script(_BEGIN)
_FINISH_SCRIPT: Final = _script(_FINISH)
_SET_HALTED_SCRIPT: Final = _script(_SET_HALTED)
_NEW_TURN_SCRIPT: Final = _script(_NEW_TURN)
_ADD_USAGE_SCRIPT: Final = _script(_ADD_USAGE)
_READ_HASH_SCRIPT: Final = _script(_READ_HASH)
_SET_APPROVAL_SCRIPT: Final = _script(_SET_APPROVAL)
_CLEAR_SCRIPT: Final = _script(_CLEAR)
_LOST: Final = "TOOLGUARD_STATE_LOST"
_MAX_TASKS: Final = 65_536  # tasks one store remembers a generation (and pending writes) of
_MAX_UNRECORDED: Final = 64  # outcomes kept per task while Redis does not take them
# Threads of one store with a connection of their own: well under redis-py's default pool
# size (100), so the threads beyond them still find connections in the shared pool.
_MAX_THREADS: Final = 32
# Stores with per-thread clients, so that a forked child drops the parent's connections.
_STORES: Final[weakref.WeakSet[RedisStore]] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for store in list(_STORES):
        store._forget_threads()


os.register_at_fork(after_in_child=_after_fork_in_child)


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
