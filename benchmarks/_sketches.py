"""The two pure-Python guard sketches the per-call targets are read by.

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

The bookkeeping sketch repeats the minimal one inline on purpose: a shared helper would add a
function call to the very cost being measured. Both are measured interleaved with toolguard in
the same rounds (``benchmarks/run.py``), on the same arguments, the same no-op tools and the
same schemas toolguard derives from their type hints.
"""

from __future__ import annotations

import contextvars
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import jsonschema_rs
import orjson
import xxhash

__all__ = ["BookkeepingSketch", "MinimalSketch", "SketchResult"]

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
