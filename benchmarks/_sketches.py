"""The pure-Python guard sketches the per-call targets are read by.

Neither is a guard anyone should ship; each is the least code that does what a guard on this
path must do, written as plainly and as fast as Python allows, so that "toolguard costs N times the
sketch" says how much of toolguard's cost is structure rather than the checks themselves.

* :class:`MinimalSketch` — the same checks: the model's JSON text parsed by orjson (a dict is
  copied instead), the canonical dump (orjson, sorted keys) hashed by xxh3-128, jsonschema-rs
  validation, budget counters (task calls, per-tool calls) and the ladder count of the
  signature in dicts under one lock, the idempotency record of a mutating call in a dict, the
  warn/block thresholds, the call.
* :class:`BookkeepingSketch` — the minimal sketch plus what toolguard promises around every
  call: a call id, the idempotency key in a context variable while the tool runs, the tool's
  duration, a result object (slotted, 11 fields), and a bounded history.
* :class:`FeatureSketch` — what toolguard keeps per call, kept the plain way: the bookkeeping
  sketch's checks plus an injected clock, signatures in an LRU bounded by ``max_entries``
  (count, epoch, last result digest), a digest of every executed result (the progress
  check: an output that moved restarts the signature's count; a write with a result never
  seen before starts a new epoch, which restarts every count), the stagnation run of each
  tool (the same outcome from different arguments, warned at ``stagnation_warn_at`` and
  blocked at ``stagnation_block_at``), idempotency records with a TTL in an LRU bounded by
  ``max_entries`` (an in-progress claim while a mutating tool runs, the completed record
  after), a notice on warn / cached / block, a 15-field result object and a bounded history.

The sketches repeat each other inline on purpose: a shared helper would add a function call
to the very cost being measured. They are measured interleaved with toolguard in the same
rounds (``benchmarks/run.py``) and by instruction count (``benchmarks/callgrind.py``), on the
same arguments, the same no-op tools and the same schemas toolguard derives from their type
hints.
"""

from __future__ import annotations

import contextvars
import itertools
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any, Final

import jsonschema_rs
import orjson
import xxhash

__all__ = ["BookkeepingSketch", "FeatureResult", "FeatureSketch", "MinimalSketch",
           "SketchResult"]

_SORT: Final = orjson.OPT_SORT_KEYS
_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("sketch_key", default=None)


class SketchResult:
    """The bookkeeping sketch's result object."""

    __slots__ = ("args_hash", "call_id", "content", "count", "decision", "duration_s",
                 "idempotency_key", "is_error", "reason", "tool", "value")

    def __init__(self, tool: str, call_id: str, decision: str, content: Any, value: Any,
                 is_error: bool, reason: str, count: int, args_hash: str,
                 idempotency_key: str, duration_s: float) -> None:
        self.tool = tool
        self.call_id = call_id
        self.decision = decision
        self.content = content
        self.value = value
        self.is_error = is_error
        self.reason = reason
        self.count = count
        self.args_hash = args_hash
        self.idempotency_key = idempotency_key
        self.duration_s = duration_s


class MinimalSketch:
    """The same checks as toolguard on one call, nothing else (see the module docstring).

    Args:
        func: the tool. schema: its argument schema. mutating: keep idempotency records.
        warn_at / block_at: ladder thresholds of the signature's repeat count.
        max_tool_calls: the task's call budget.
    """

    def __init__(self, name: str, func: Callable[..., Any], schema: dict[str, Any], *,
                 mutating: bool, warn_at: int, block_at: int,
                 max_tool_calls: int = 10**9) -> None:
        self.task_id = "sketch"
        self._tools = {name: (func, jsonschema_rs.validator_for(schema), mutating)}
        self._warn_at, self._block_at, self._max_calls = warn_at, block_at, max_tool_calls
        self._lock = threading.Lock()
        self._calls = 0
        self._per_tool: dict[str, int] = {}
        self._counts: dict[str, int] = {}
        self._records: dict[str, Any] = {}

    def call(self, tool: str, args: dict[str, Any] | str) -> Any:
        """One guarded call; returns ``(decision, value, count)``."""
        args = orjson.loads(args) if isinstance(args, str) else args.copy()
        func, validator, mutating = self._tools[tool]
        sig = xxhash.xxh3_128_hexdigest(orjson.dumps(args, option=_SORT))
        if not validator.is_valid(args):
            return ("invalid", None, 0)
        key = f"{tool}:{sig}"
        with self._lock:
            self._calls += 1
            self._per_tool[tool] = self._per_tool.get(tool, 0) + 1
            n = self._counts[key] = self._counts.get(key, 0) + 1
            record = self._records.get(key) if mutating else None
        if self._calls > self._max_calls:
            return ("halt", None, n)
        if record is not None:
            return ("cached", record[0], n)
        if n >= self._block_at:
            return ("block", None, n)
        value = func(**args)
        if mutating:
            with self._lock:
                self._records[key] = (value,)
        return ("warn" if n >= self._warn_at else "allow", value, n)


class BookkeepingSketch(MinimalSketch):
    """:class:`MinimalSketch` plus a call id, the key in a context variable, timing, a result
    object and a bounded history."""

    def __init__(self, name: str, func: Callable[..., Any], schema: dict[str, Any], *,
                 mutating: bool, warn_at: int, block_at: int,
                 max_tool_calls: int = 10**9, max_history: int = 10_000) -> None:
        super().__init__(name, func, schema, mutating=mutating, warn_at=warn_at,
                         block_at=block_at, max_tool_calls=max_tool_calls)
        self._ids = itertools.count(1)
        self.history: deque[tuple[str, Any, SketchResult]] = deque(maxlen=max_history)

    def call(self, tool: str, args: dict[str, Any] | str) -> Any:
        """One guarded call; returns a :class:`SketchResult`."""
        raw = args
        call_id = f"{self.task_id}#{next(self._ids)}"
        args = orjson.loads(args) if isinstance(args, str) else args.copy()
        func, validator, mutating = self._tools[tool]
        sig = xxhash.xxh3_128_hexdigest(orjson.dumps(args, option=_SORT))
        key = f"{self.task_id}:{tool}:{sig}"
        if not validator.is_valid(args):
            result = SketchResult(tool, call_id, "invalid", "invalid arguments", None, True,
                                  "invalid", 0, sig, key, 0.0)
            self.history.append((tool, raw, result))
            return result
        with self._lock:
            self._calls += 1
            self._per_tool[tool] = self._per_tool.get(tool, 0) + 1
            n = self._counts[key] = self._counts.get(key, 0) + 1
            record = self._records.get(key) if mutating else None
        if self._calls > self._max_calls:
            result = SketchResult(tool, call_id, "halt", "halted", None, True, "budget", n,
                                  sig, key, 0.0)
        elif record is not None:
            result = SketchResult(tool, call_id, "cached", record[0], record[0], False,
                                  "cached", n, sig, key, 0.0)
        elif n >= self._block_at:
            result = SketchResult(tool, call_id, "block", "blocked", None, True, "repeated",
                                  n, sig, key, 0.0)
        else:
            token = _KEY.set(key)
            start = time.perf_counter()
            try:
                value = func(**args)
            finally:
                _KEY.reset(token)
            duration = time.perf_counter() - start
            if mutating:
                with self._lock:
                    self._records[key] = (value,)
            result = SketchResult(tool, call_id, "warn" if n >= self._warn_at else "allow",
                                  value, value, False, "", n, sig, key, duration)
        self.history.append((tool, raw, result))
        return result


class FeatureResult:
    """The feature-complete sketch's result object: the 15 fields of toolguard's result."""

    __slots__ = ("args_hash", "call_id", "content", "count", "decision", "duration_s",
                 "effect", "error_type", "idempotency_key", "is_error", "notice", "observed",
                 "reason", "tool", "value")

    def __init__(self, tool: str, call_id: str, decision: str, content: Any, value: Any,
                 is_error: bool, reason: str, notice: str | None, count: int, effect: str,
                 args_hash: str, idempotency_key: str, duration_s: float) -> None:
        self.tool = tool
        self.call_id = call_id
        self.decision = decision
        self.content = content
        self.value = value
        self.is_error = is_error
        self.error_type: str | None = None
        self.reason = reason
        self.notice = notice
        self.count = count
        self.effect = effect
        self.args_hash = args_hash
        self.idempotency_key = idempotency_key
        self.duration_s = duration_s
        self.observed: str | None = None


class _Sig:
    """One signature's ladder state: its count in its epoch and its last result's digest."""

    __slots__ = ("count", "digest", "epoch")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.count = 0
        self.digest = ""


_NONE_DIGEST: Final = xxhash.xxh3_128_hexdigest(b"null")
_RUNNING: Final = "in_progress"
_DONE: Final = "completed"


class FeatureSketch:
    """What toolguard keeps per call, in plain Python (see the module docstring).

    One task; per-process and thread-safe (one lock around each of the two bookkeeping
    steps, the tool runs outside it). Result digests are of the result's sorted orjson dump,
    so results must be JSON values (toolguard also normalizes volatile text first: ids,
    times; the benchmark's tools return None, whose digest both take as a constant).

    Args:
        name: the tool's name. func: the tool. schema: its argument schema.
        mutating: keep idempotency records of its completed calls.
        warn_at / block_at: ladder thresholds of a signature's repeat count.
        stagnation_warn_at / stagnation_block_at: thresholds of a tool's stagnation run
            (0: off).
        max_tool_calls: the task's call budget. max_entries: bound of the signature and
            record LRUs. max_history: bound of the history.
        ttl_s: seconds a completed record answers a repeat; claim_ttl_s: seconds a claim
            holds. clock: seconds, monotonic or wall.
    """

    def __init__(self, name: str, func: Callable[..., Any], schema: dict[str, Any], *,
                 mutating: bool, warn_at: int, block_at: int, stagnation_warn_at: int = 4,
                 stagnation_block_at: int = 6, max_tool_calls: int = 10**9,
                 max_entries: int = 10_000, max_history: int = 10_000, ttl_s: float = 3600.0,
                 claim_ttl_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.task_id = "sketch"
        self._tools = {name: (func, jsonschema_rs.validator_for(schema), mutating)}
        self._warn_at, self._block_at, self._max_calls = warn_at, block_at, max_tool_calls
        self._stag_warn, self._stag_block = stagnation_warn_at, stagnation_block_at
        self._max_entries, self._ttl_s, self._claim_ttl_s = max_entries, ttl_s, claim_ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._calls = 0
        self._epoch = 0
        self._per_tool: dict[str, int] = {}
        self._sigs: OrderedDict[str, _Sig] = OrderedDict()
        # key -> (state, value, expires_at), least recently used first
        self._records: OrderedDict[str, tuple[str, Any, float]] = OrderedDict()
        # (signature, result digest) of completed writes, oldest first
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        # tool -> (epoch, run length, outcome digest, last signature)
        self._runs: dict[str, tuple[int, int, str, str]] = {}
        self.history: deque[tuple[str, Any, FeatureResult]] = deque(maxlen=max_history)

    def call(self, tool: str, args: dict[str, Any] | str) -> FeatureResult:
        """One guarded call; returns a :class:`FeatureResult` (decision ``allow``, ``warn``,
        ``cached``, ``block``, ``wait``, ``invalid`` or ``halt``)."""
        raw = args
        call_id = f"{self.task_id}#{next(self._ids)}"
        args = orjson.loads(args) if isinstance(args, str) else args.copy()
        func, validator, mutating = self._tools[tool]
        effect = "mutating" if mutating else "readonly"
        sig = xxhash.xxh3_128_hexdigest(orjson.dumps(args, option=_SORT))
        signature = f"{tool}:{sig}"
        key = f"{self.task_id}:{signature}"
        if not validator.is_valid(args):
            result = FeatureResult(tool, call_id, "invalid", "invalid arguments", None, True,
                                   "invalid", None, 0, effect, sig, key, 0.0)
            self.history.append((tool, raw, result))
            return result
        now = self._clock()
        with self._lock:  # begin: count, look up the record, claim
            self._calls += 1
            self._per_tool[tool] = self._per_tool.get(tool, 0) + 1
            sigs = self._sigs
            entry = sigs.get(signature)
            if entry is None:
                entry = sigs[signature] = _Sig(self._epoch)
                if len(sigs) > self._max_entries:
                    sigs.popitem(last=False)
            else:
                sigs.move_to_end(signature)
            if entry.epoch != self._epoch:
                entry.epoch, entry.count = self._epoch, 0
            entry.count += 1
            n = entry.count
            halted = self._calls > self._max_calls
            run = self._runs.get(tool)
            stalled = (self._stag_block > 0 and run is not None and run[0] == self._epoch
                       and run[1] >= self._stag_block - 1)
            record = None
            if mutating:
                records = self._records
                record = records.get(key)
                if record is not None and record[2] <= now:
                    del records[key]
                    record = None
                if record is not None:
                    records.move_to_end(key)
                elif not (halted or stalled or n >= self._block_at):  # it will run: claim
                    records[key] = (_RUNNING, None, now + self._claim_ttl_s)
                    if len(records) > self._max_entries:
                        records.popitem(last=False)
        if halted:
            result = FeatureResult(tool, call_id, "halt", "halted: call budget spent", None,
                                   True, "budget", None, n, effect, sig, key, 0.0)
        elif record is not None and record[0] == _DONE:
            result = FeatureResult(tool, call_id, "cached", record[1], record[1], False,
                                   "cached", "already done: the stored result", n, effect,
                                   sig, key, 0.0)
        elif record is not None:
            result = FeatureResult(tool, call_id, "wait", "an identical call is running",
                                   None, True, "in_flight", None, n, effect, sig, key, 0.0)
        elif n >= self._block_at or stalled:
            reason = "repeated" if n >= self._block_at else "stagnation"
            result = FeatureResult(tool, call_id, "block", f"blocked: {reason}", None, True,
                                   reason, None, n, effect, sig, key, 0.0)
        else:
            result = self._execute(tool, call_id, func, args, mutating, effect, sig,
                                   signature, key, entry, n)
        self.history.append((tool, raw, result))
        return result

    def _execute(self, tool: str, call_id: str, func: Callable[..., Any],
                 args: dict[str, Any], mutating: bool, effect: str, sig: str, signature: str,
                 key: str, entry: _Sig, n: int) -> FeatureResult:
        token = _KEY.set(key)
        start = time.perf_counter()
        try:
            value = func(**args)
        except Exception:
            if mutating:
                with self._lock:
                    self._records.pop(key, None)  # release the claim: a retry may run
            raise
        finally:
            _KEY.reset(token)
        duration = time.perf_counter() - start
        digest = (_NONE_DIGEST if value is None
                  else xxhash.xxh3_128_hexdigest(orjson.dumps(value, option=_SORT)))
        now = self._clock()
        with self._lock:  # finish: progress, stagnation, the record
            if mutating and (signature, digest) not in self._seen:
                seen = self._seen  # a write with a new result: the world changed
                seen[signature, digest] = None
                if len(seen) > self._max_entries:
                    seen.popitem(last=False)
                self._epoch += 1
                entry.epoch, entry.count = self._epoch, 1
            elif entry.digest and entry.digest != digest:
                entry.count = 1  # its output moved: progress
            entry.digest = digest
            run = self._runs.get(tool)
            if run is None or run[0] != self._epoch or run[2] != digest:
                run = (self._epoch, 1, digest, signature)
            elif run[3] != signature:  # the same outcome from other arguments
                run = (self._epoch, run[1] + 1, digest, signature)
            self._runs[tool] = run
            if mutating:
                self._records[key] = (_DONE, value, now + self._ttl_s)
                self._records.move_to_end(key)
        notice = None
        if n >= self._warn_at:
            notice = f"repeated {n} times with the same arguments"
        elif self._stag_warn and run[1] >= self._stag_warn:
            notice = f"{run[1]} calls of {tool} returned the same result"
        return FeatureResult(tool, call_id, "warn" if notice else "allow", value, value, False,
                             "", notice, n, effect, sig, key, duration)
