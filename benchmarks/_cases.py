"""The measured variants: the guard on each decision path, the baselines beside it, and the
building blocks (hashing, schema validators, caches).

Decision paths, each with its own guard and task (state never leaks between variants):

* ``allow``: a read-only tool called with the same arguments again and again, under a ladder
  raised so that repeats stay allowed (executes; ``begin`` + ``finish``);
* ``allow_new``: the same tool, fresh arguments on every call (never seen before: the
  argument-schema memo misses, the signature history grows to its bound and evicts);
* ``warn``: read-only, ``warn_at = 2`` (executes, the notice is appended);
* ``cached``: a mutating tool repeated with the same arguments; every call after the first
  is answered from the idempotency record (``begin`` only; the tool does not run);
* ``block``: read-only, ``warn_at = block_at = 2`` (not executed; ``begin`` only);
* ``executed``: a mutating tool with fresh arguments on every call (executes, claims and
  stores an idempotency record).

Argument schema: ``rs`` is the default guard (schema from the type hints, validated by
jsonschema-rs when it is importable, which it is here); ``py`` builds the guard with
``toolguard.tools._schema._rs = None`` (pure-Python jsonschema decides); ``off`` replaces the tool's
compiled entry with one whose validator is ``None`` (there is no public switch; the engine is
not edited). Fresh-argument batches build their arguments before the timer starts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Final

import cachetools
import jsonschema
import orjson
import tenacity
import xxhash
from _args import args_for, distinct, json_bytes, sized
from _harness import Runner, Variant
from _sketches import BookkeepingSketch, FeatureSketch, MinimalSketch

import toolguard
import toolguard.tools._schema as schema_module
from toolguard import Decision, Effect, Guard, Task, ToolSpec
from toolguard.policy._model import LadderPolicy, LadderThresholds, Policy
from toolguard.stores._base import Store

__all__ = [
    "PATHS",
    "block_variants",
    "guard_variant",
    "main_variants",
    "make_task",
]

BIG: Final = 10**9
PATHS: Final = ("allow", "allow_new", "warn", "cached", "block", "executed")
_EXPECTED: Final = {"allow": Decision.ALLOW, "allow_new": Decision.ALLOW,
                    "warn": Decision.WARN, "cached": Decision.CACHED,
                    "block": Decision.BLOCK, "executed": Decision.ALLOW}
_SORT: Final = orjson.OPT_SORT_KEYS


def _ladder(warn_at: int, block_at: int, halt_at: int) -> LadderThresholds:
    return LadderThresholds(warn_at=warn_at, block_at=block_at, halt_at=halt_at)


def policy_for(path: str, **kwargs: Any) -> Policy:
    """The policy that puts repeated calls on ``path``."""
    readonly = {"warn": _ladder(2, BIG, BIG), "block": _ladder(2, 2, BIG)}.get(
        path, _ladder(BIG, BIG, BIG))
    # the stagnation rule stays on (its cost is measured) but out of reach, like the ladder
    return Policy(ladder=LadderPolicy(readonly=readonly, mutating=_ladder(BIG, BIG, BIG),
                                      stagnation_warn_at=BIG, stagnation_block_at=BIG),
                  **kwargs)


def build_guard(policy: Policy, spec: ToolSpec, schema: str, store: Store | None = None
                ) -> Guard:
    """A guard with one tool, its argument schema validated by ``rs``/``py`` or ``off``."""
    if schema == "rs" and schema_module._rs is None:
        raise RuntimeError("jsonschema-rs is not installed: pip install 'agent-toolguard[fast]'")
    saved = schema_module._rs
    if schema == "py":
        schema_module._rs = None  # ArgsValidator reads it when it compiles the schema
    try:
        guard = Guard(policy, [spec], store=store)
    finally:
        schema_module._rs = saved
    if schema == "off":
        entries = guard._config.entries
        entries[spec.name] = dataclasses.replace(entries[spec.name], validator=None)
    return guard


TEXT_RESULT: Final = ("total 12\n-rw-r--r-- 1 user group 1234 Jan  5 12:34 report.csv\n"
                      "Done in 0.31s")
"""A shell-like text result with volatile parts (a clock time, a duration)."""


def make_task(size: str, path: str, schema: str, *, is_async: bool = False,
              store: Store | None = None, returns: Any = None) -> tuple[Task, str]:
    """A fresh guard and task whose next repeated call of the size's tool takes ``path``;
    the tool returns ``returns`` (sync tools only; default None, the no-op)."""
    sz = sized(size)
    func = sz.tool_async if is_async else sz.tool
    if returns is not None:
        func = functools.wraps(sz.tool)(lambda *_a, **_k: returns)
    name = sz.tool.__name__
    effect = Effect.MUTATING if path in ("cached", "executed") else Effect.READONLY
    guard = build_guard(policy_for(path), ToolSpec(name=name, func=func, effect=effect),
                        schema, store)
    return guard.task(f"bench-{path}-{uuid.uuid4().hex[:12]}"), name


class Fresh:
    """Never-repeated arguments of one size (a shared counter, so no batch repeats one)."""

    def __init__(self, size: str) -> None:
        self._size = size
        self._ids = itertools.count()

    def take(self, n: int) -> list[dict[str, Any]]:
        """``n`` argument sets never returned before."""
        return [distinct(self._size, i) for i in itertools.islice(self._ids, n)]


# -- runners --------------------------------------------------------------------------------
def sync_calls(call: Callable[[str, Any], Any], name: str, args: Any) -> Runner:
    """``call(name, args)`` ``n`` times."""
    def run(n: int) -> int:
        repeat = itertools.repeat
        start = time.perf_counter_ns()
        for _ in repeat(None, n):
            call(name, args)
        return time.perf_counter_ns() - start
    return run


def sync_fresh_calls(call: Callable[[str, Any], Any], name: str, fresh: Fresh) -> Runner:
    """``call(name, args)`` with ``n`` never-seen argument sets (built before timing)."""
    def run(n: int) -> int:
        batch = fresh.take(n)
        start = time.perf_counter_ns()
        for args in batch:
            call(name, args)
        return time.perf_counter_ns() - start
    return run


def async_calls(loop: asyncio.AbstractEventLoop,
                acall: Callable[[str, Any], Awaitable[Any]], name: str, args: Any) -> Runner:
    """``await acall(name, args)`` ``n`` times, timed inside the event loop."""
    async def batch(n: int) -> int:
        repeat = itertools.repeat
        start = time.perf_counter_ns()
        for _ in repeat(None, n):
            await acall(name, args)
        return time.perf_counter_ns() - start
    return lambda n: loop.run_until_complete(batch(n))


def async_fresh_calls(loop: asyncio.AbstractEventLoop,
                      acall: Callable[[str, Any], Awaitable[Any]], name: str,
                      fresh: Fresh) -> Runner:
    """:func:`async_calls` with never-seen argument sets."""
    async def batch(args_list: list[dict[str, Any]]) -> int:
        start = time.perf_counter_ns()
        for args in args_list:
            await acall(name, args)
        return time.perf_counter_ns() - start
    return lambda n: loop.run_until_complete(batch(fresh.take(n)))


def kw_calls(func: Callable[..., Any], args: dict[str, Any]) -> Runner:
    """``func(**args)`` ``n`` times: the bare call and the decorated baselines."""
    def run(n: int) -> int:
        repeat = itertools.repeat
        start = time.perf_counter_ns()
        for _ in repeat(None, n):
            func(**args)
        return time.perf_counter_ns() - start
    return run


def async_kw_calls(loop: asyncio.AbstractEventLoop, func: Callable[..., Awaitable[Any]],
                   args: dict[str, Any]) -> Runner:
    """``await func(**args)`` ``n`` times."""
    async def batch(n: int) -> int:
        repeat = itertools.repeat
        start = time.perf_counter_ns()
        for _ in repeat(None, n):
            await func(**args)
        return time.perf_counter_ns() - start
    return lambda n: loop.run_until_complete(batch(n))


def unary(func: Callable[[Any], Any], value: Any) -> Runner:
    """``func(value)`` ``n`` times."""
    def run(n: int) -> int:
        repeat = itertools.repeat
        start = time.perf_counter_ns()
        for _ in repeat(None, n):
            func(value)
        return time.perf_counter_ns() - start
    return run


def floor_runner(args: Any) -> Runner:
    """The canonicalize+hash floor: ``xxh3_128(orjson.dumps(args, OPT_SORT_KEYS))``."""
    def run(n: int) -> int:
        dumps, h, repeat = orjson.dumps, xxhash.xxh3_128_hexdigest, itertools.repeat
        start = time.perf_counter_ns()
        for _ in repeat(None, n):
            h(dumps(args, option=_SORT))
        return time.perf_counter_ns() - start
    return run


def dump_runner(args: Any) -> Runner:
    """``orjson.dumps(args, option=OPT_SORT_KEYS)`` alone."""
    def run(n: int) -> int:
        dumps, repeat = orjson.dumps, itertools.repeat
        start = time.perf_counter_ns()
        for _ in repeat(None, n):
            dumps(args, option=_SORT)
        return time.perf_counter_ns() - start
    return run


def get_set_runner(cache: Any, key: str) -> Runner:
    """``cache.get(key)`` then ``cache[key] = value``: one look-up and one update."""
    def run(n: int) -> int:
        repeat = itertools.repeat
        start = time.perf_counter_ns()
        for _ in repeat(None, n):
            cache.get(key)
            cache[key] = 1
        return time.perf_counter_ns() - start
    return run


def expiry_dict_runner(key: str, ttl_s: float) -> Runner:
    """A plain dict holding ``(value, expires_at)``: look up, check expiry, update."""
    table: dict[str, tuple[int, float]] = {}

    def run(n: int) -> int:
        repeat, clock = itertools.repeat, time.monotonic
        start = time.perf_counter_ns()
        for _ in repeat(None, n):
            now = clock()
            hit = table.get(key)
            if hit is not None and hit[1] < now:
                hit = None
            table[key] = (1, now + ttl_s)
        return time.perf_counter_ns() - start
    return run


def tlru_churn_runner(maxsize: int, ttl_s: float) -> Runner:
    """A full ``cachetools.TLRUCache`` (per-item TTL, as the in-memory store keeps
    idempotency records): insert a new key (evicting the oldest), then read it back."""
    cache: cachetools.TLRUCache[int, int] = cachetools.TLRUCache(
        maxsize=maxsize, ttu=lambda _k, _v, now: now + ttl_s, timer=time.monotonic)
    ids = itertools.count()
    for _ in range(maxsize):
        cache[next(ids)] = 1

    def run(n: int) -> int:
        start = time.perf_counter_ns()
        for key in itertools.islice(ids, n):
            cache[key] = 1
            cache.get(key)
        return time.perf_counter_ns() - start
    return run


def ordered_churn_runner(maxsize: int, ttl_s: float) -> Runner:
    """The same with an ``OrderedDict`` of ``(value, expires_at)``: lazy expiry on read,
    least recently inserted evicted by ``popitem(last=False)``."""
    table: OrderedDict[int, tuple[int, float]] = OrderedDict()
    ids = itertools.count()
    for _ in range(maxsize):
        table[next(ids)] = (1, time.monotonic() + ttl_s)

    def run(n: int) -> int:
        clock = time.monotonic
        start = time.perf_counter_ns()
        for key in itertools.islice(ids, n):
            now = clock()
            table[key] = (1, now + ttl_s)
            if len(table) > maxsize:
                table.popitem(last=False)
            hit = table.get(key)
            if hit is not None and hit[1] <= now:
                del table[key]
        return time.perf_counter_ns() - start
    return run


def json_kw_calls(func: Callable[..., Any], text: str) -> Runner:
    """``func(**orjson.loads(text))``: what an agent loop does without a guard when the model
    sends the arguments as JSON text (the baseline of the ``json`` guard variants)."""
    def run(n: int) -> int:
        loads, repeat = orjson.loads, itertools.repeat
        start = time.perf_counter_ns()
        for _ in repeat(None, n):
            func(**loads(text))
        return time.perf_counter_ns() - start
    return run


SKETCH_PATHS: Final = ("allow", "cached", "block")


def sketch_variants(size: str) -> list[Variant]:
    """The minimal, bookkeeping and feature-complete sketches (``_sketches.py``) on the allow,
    cached and block paths, with the same tool, arguments and schema as the guard variants;
    the allow path also from the model's JSON text."""
    sz = sized(size)
    args = args_for(size)
    schema = schema_module.schema_from_signature(sz.tool)
    out: list[Variant] = []
    kinds: tuple[tuple[str, type[MinimalSketch | FeatureSketch]], ...] = (
        ("min", MinimalSketch), ("book", BookkeepingSketch), ("full", FeatureSketch))
    for kind, cls in kinds:
        for path in SKETCH_PATHS:
            sketch = cls(sz.tool.__name__, sz.tool, schema, mutating=path == "cached",
                         warn_at=2 if path == "block" else BIG,
                         block_at=2 if path == "block" else BIG)
            inputs: list[tuple[str, Any]] = [("", args)]
            if path == "allow":
                inputs.append(("/json", orjson.dumps(args).decode()))
            for suffix, given in inputs:
                sketch.call(sz.tool.__name__, given)  # cached / block from the next call
                out.append(Variant(
                    f"sync/{size}/sketch_{kind}/{path}{suffix}",
                    {"suite": "memory", "mode": "sync", "size": size, "kind": "sketch",
                     "sketch": kind, "path": path,
                     "input": "json_text" if suffix else "dict"},
                    sync_calls(sketch.call, sz.tool.__name__, given),
                    payload_bytes=json_bytes(args)))
    return out


def first_call_variant(size: str = "small") -> Variant:
    """The first call of a fresh task (``guard.task(id)`` included) on a warm guard: the
    counterpart of the warm allow path (``first/allow`` / ``allow``)."""
    task, name = make_task(size, "allow", "rs")
    guard, args = task.guard, args_for(size)
    ids = itertools.count()
    guard.task("warm-up").call(name, args)

    def run(n: int) -> int:
        task_ids = [f"first-{next(ids)}" for _ in range(n)]
        start = time.perf_counter_ns()
        for task_id in task_ids:
            guard.task(task_id).call(name, args)
        return time.perf_counter_ns() - start

    return Variant(f"memory/sync/{size}/first/rs",
                   {"suite": "memory", "mode": "sync", "size": size, "kind": "guard",
                    "path": "first", "schema": "rs", "input": "dict"},
                   run, payload_bytes=json_bytes(args))


# -- baselines ------------------------------------------------------------------------------
def _wraps(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)
    return wrapper


def _wraps_async(func: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(func)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        return await func(*args, **kwargs)
    return wrapper


def _tenacity(func: Callable[..., Any]) -> Callable[..., Any]:
    return tenacity.retry(stop=tenacity.stop_after_attempt(3))(func)


def baseline_variants(size: str, mode: str, loop: asyncio.AbstractEventLoop
                      ) -> list[Variant]:
    """Bare call, ``functools.wraps`` decorator, tenacity retry; for sync also the
    canonicalize+hash floor, the sorted orjson dump and the bare call from JSON text."""
    sz = sized(size)
    args = args_for(size)
    tags = {"suite": "memory", "mode": mode, "size": size, "kind": "baseline"}
    out: list[Variant] = []
    if mode == "sync":
        runners = {"bare": kw_calls(sz.tool, args), "wraps": kw_calls(_wraps(sz.tool), args),
                   "tenacity": kw_calls(_tenacity(sz.tool), args),
                   "floor": floor_runner(args), "orjson": dump_runner(args),
                   "bare_json": json_kw_calls(sz.tool, orjson.dumps(args).decode())}
    else:
        runners = {"bare": async_kw_calls(loop, sz.tool_async, args),
                   "wraps": async_kw_calls(loop, _wraps_async(sz.tool_async), args),
                   "tenacity": async_kw_calls(loop, _tenacity(sz.tool_async), args)}
    for what, runner in runners.items():
        out.append(Variant(f"{mode}/{size}/{what}", {**tags, "path": what}, runner,
                           payload_bytes=json_bytes(args)))
    return out


# -- the guard ------------------------------------------------------------------------------
def _check(result: Any, path: str, name: str) -> None:
    decision = result.decision
    if decision is not _EXPECTED[path]:
        raise AssertionError(f"{name}: expected decision {_EXPECTED[path]}, got {decision} "
                             f"({result.reason})")


def prime(task: Task, name: str, size: str, path: str,
          loop: asyncio.AbstractEventLoop | None) -> None:
    """Bring the task to ``path`` and check that the next call takes it."""
    args: Any = args_for(size)
    warmups = {"warn": 1, "cached": 1, "block": 2}.get(path, 0)
    checks = [args] * (warmups + 1)
    if path in ("allow_new", "executed"):
        checks = [distinct(size, -1 - k) for k in range(2)]
    for k, a in enumerate(checks):
        if loop is not None:
            result = loop.run_until_complete(task.acall(name, a))
        else:
            result = task.call(name, a)
        if k == len(checks) - 1:
            _check(result, path, f"{size}/{path}")


def guard_variant(size: str, path: str, schema: str, mode: str,
                  loop: asyncio.AbstractEventLoop, *, store: Store | None = None,
                  suite: str = "memory", as_json: bool = False) -> Variant:
    """``task.call`` (or ``await task.acall``) of the size's no-op tool on ``path``."""
    is_async = mode == "async"
    task, name = make_task(size, path, schema, is_async=is_async, store=store)
    prime(task, name, size, path, loop if is_async else None)
    fresh = path in ("allow_new", "executed")
    runner: Runner
    if is_async:
        runner = (async_fresh_calls(loop, task.acall, name, Fresh(size)) if fresh
                  else async_calls(loop, task.acall, name, args_for(size)))
    elif fresh:
        runner = sync_fresh_calls(task.call, name, Fresh(size))
    else:
        args: Any = args_for(size)
        if as_json:
            args = orjson.dumps(args).decode()
        runner = sync_calls(task.call, name, args)
    tags = {"suite": suite, "mode": mode, "size": size, "kind": "guard", "path": path,
            "schema": schema, "input": "json_text" if as_json else "dict"}
    suffix = "/json" if as_json else ""
    return Variant(f"{suite}/{mode}/{size}/{path}/{schema}{suffix}", tags, runner,
                   payload_bytes=json_bytes(args_for(size)))


def main_variants(loop: asyncio.AbstractEventLoop) -> list[Variant]:
    """Every in-memory variant of the per-call table, with their baselines."""
    out: list[Variant] = []
    for size in ("small", "medium", "large"):
        out += baseline_variants(size, "sync", loop)
        out += baseline_variants(size, "async", loop)
        out += sketch_variants(size)
        for path in PATHS:
            for schema in ("rs", "py", "off"):
                out.append(guard_variant(size, path, schema, "sync", loop))
            for schema in ("rs", "off"):
                out.append(guard_variant(size, path, schema, "async", loop))
        out.append(guard_variant(size, "allow", "rs", "sync", loop, as_json=True))
    out.append(first_call_variant())
    out += baseline_variants("medium_nulls", "sync", loop)
    for schema in ("rs", "off"):
        out.append(guard_variant("medium_nulls", "allow", schema, "sync", loop))
    return out


# -- building blocks --------------------------------------------------------------------------
def _dash_medium() -> dict[str, Any]:
    # A hyphen after an "e" ("time-series") matches the canonical fast path's exponent guard
    # (``e[+-]``), which sends the call down the Python walk although nothing needs fixing.
    return {**args_for("medium"), "query": "time-series of revenue by region"}


def block_variants() -> list[Variant]:
    """Hashing throughput and the building blocks the issue names."""
    out: list[Variant] = []
    hashed: dict[str, dict[str, Any]] = {
        "small": args_for("small"), "medium": args_for("medium"),
        "medium_nulls": args_for("medium_nulls"), "medium_dash": _dash_medium(),
        "large": args_for("large"),
    }
    for size, args in hashed.items():
        out.append(Variant(f"blocks/hash/{size}",
                           {"suite": "blocks", "kind": "hash", "size": size},
                           unary(toolguard.args_hash, args), payload_bytes=json_bytes(args)))
    large_bytes = orjson.dumps(args_for("large"), option=_SORT)
    out.append(Variant("blocks/xxh3_128/large", {"suite": "blocks", "kind": "xxh3",
                                                 "size": "large"},
                       unary(lambda b: xxhash.xxh3_128_hexdigest(b, seed=1), large_bytes),
                       payload_bytes=len(large_bytes)))
    for size in ("small", "medium", "large"):
        args = args_for(size)
        schema = schema_module.schema_from_signature(sized(size).tool)
        py = jsonschema.Draft202012Validator(schema)
        tags = {"suite": "blocks", "kind": "validator", "size": size}
        out.append(Variant(f"blocks/jsonschema/{size}", {**tags, "impl": "jsonschema"},
                           unary(py.is_valid, args)))
        if schema_module._rs is not None:
            rs = schema_module._rs.validator_for(schema)
            out.append(Variant(f"blocks/jsonschema_rs/{size}", {**tags, "impl": "jsonschema_rs"},
                               unary(rs.is_valid, args)))
        memo = schema_module.ArgsValidator(schema)
        memo.validate(args)
        out.append(Variant(f"blocks/args_validator_memo_hit/{size}",
                           {**tags, "impl": "ArgsValidator (memo hit)"},
                           unary(memo.validate, args)))
    cache_tags = {"suite": "blocks", "kind": "cache"}
    out.append(Variant("blocks/cachetools.TTLCache", {**cache_tags, "impl": "TTLCache"},
                       get_set_runner(cachetools.TTLCache(maxsize=10_000, ttl=3600), "k")))
    out.append(Variant("blocks/cachetools.LRUCache", {**cache_tags, "impl": "LRUCache"},
                       get_set_runner(cachetools.LRUCache(maxsize=10_000), "k")))
    out.append(Variant("blocks/dict+expiry", {**cache_tags, "impl": "dict with expiry"},
                       expiry_dict_runner("k", 3600.0)))
    out.append(Variant("blocks/cachetools.TLRUCache churn (full, 10k)",
                       {**cache_tags, "impl": "TLRUCache churn"},
                       tlru_churn_runner(10_000, 3600.0)))
    out.append(Variant("blocks/OrderedDict+expiry churn (full, 10k)",
                       {**cache_tags, "impl": "OrderedDict churn"},
                       ordered_churn_runner(10_000, 3600.0)))
    return out

