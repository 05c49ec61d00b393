"""Growth: does a call get slower, or a task bigger, the longer the task runs?

Time: per-call time around the 10th, 1,000th and 100,000th call of one task, measured
interleaved. One task per checkpoint is first run (untimed) to just before its checkpoint;
then each round times a short window of consecutive calls of every checkpoint's task, in a
shuffled order, so the three are compared at the same moments of the run. The 10th-call
checkpoint uses fresh tasks each round (nine untimed calls, then call #10 timed). Every
call has arguments the task never saw (the read-only tool stays on ``allow``; the mutating
tool executes and stores an idempotency record every time), so nothing is answered from a
cache and every bounded structure fills and evicts. The run-up of the longest task is timed
as well and summarised per decade of call numbers.

Memory: ``tracemalloc`` bytes held by one guard with one task after 1k, 10k, 50k and 100k
such calls (after ``gc.collect()``), for the default limits and for
``idempotency.max_entries = 1000``; with the sizes of the task's structures, read from the
in-memory store's internals where they exist.
"""

from __future__ import annotations

import gc
import itertools
import random
import time
import tracemalloc
import uuid
from array import array
from typing import Any

from _args import distinct, sized
from _harness import median, quartiles

from toolguard import Effect, Guard, Task, ToolSpec
from toolguard.policy._model import IdempotencyPolicy, LadderPolicy, Policy

__all__ = ["growth", "memory"]


def _task(effect: Effect, max_entries: int | None = None) -> tuple[Guard, Task, str]:
    tool = sized("small").tool
    # never-repeated arguments with one result: the stagnation rule stays on (its cost is
    # measured) but out of reach
    ladder = LadderPolicy(stagnation_warn_at=10**9, stagnation_block_at=10**9)
    policy = Policy(ladder=ladder) if max_entries is None else Policy(
        ladder=ladder, idempotency=IdempotencyPolicy(max_entries=max_entries))
    guard = Guard(policy, [ToolSpec(name=tool.__name__, func=tool, effect=effect)])
    return guard, guard.task(f"growth-{uuid.uuid4().hex[:12]}"), tool.__name__


class _Runner:
    """One task fed never-repeated small arguments."""

    def __init__(self, effect: Effect) -> None:
        self.guard, self.task, self.name = _task(effect)
        self.done = 0
        self._ids = itertools.count()

    def run(self, n: int, times: array[int] | None = None) -> int:
        """Make ``n`` calls; return their total time in ns (each timed alone into
        ``times`` when given)."""
        call, name, clock = self.task.call, self.name, time.perf_counter_ns
        total = 0
        for _ in range(n):
            args = distinct("small", next(self._ids))
            start = clock()
            result = call(name, args)
            elapsed = clock() - start
            total += elapsed
            if times is not None:
                times.append(elapsed)
            if not result.executed:
                raise AssertionError(f"growth call #{self.done + 1} was {result.decision}")
            self.done += 1
        return total


def _decades(times: array[int]) -> list[dict[str, Any]]:
    """Median per-call time for calls 1-10, 11-100, 101-1000, ..."""
    out = []
    lo, hi = 1, 10
    while lo <= len(times):
        top = min(hi, len(times))
        chunk = [t / 1000 for t in times[lo - 1:top]]
        out.append({"calls": f"{lo}-{top}", "median_us": round(median(chunk), 3)})
        lo, hi = hi + 1, hi * 10
    return out


def growth(checkpoints: tuple[int, ...], rounds: int, window: int,
           effects: tuple[Effect, ...] = (Effect.READONLY, Effect.MUTATING)) -> dict[str, Any]:
    """Per-call time around each checkpoint (see the module docstring)."""
    report: dict[str, Any] = {"checkpoints": list(checkpoints), "rounds": rounds,
                              "window": window, "scenarios": {}}
    first, *later = checkpoints
    for effect in effects:
        runners: dict[int, _Runner] = {}
        series: array[int] = array("q")
        for c in later:
            r = _Runner(effect)
            start_at = max(0, c - 1 - rounds * window // 2)
            r.run(start_at, series if c == later[-1] else None)
            runners[c] = r
        samples: dict[int, list[float]] = {c: [] for c in checkpoints}
        order = list(checkpoints)
        rng = random.Random(7)
        for _ in range(rounds):
            rng.shuffle(order)
            gc.collect()
            for c in order:
                if c == first:
                    total = 0
                    for _ in range(window):  # fresh tasks: call #first of each is timed
                        r = _Runner(effect)
                        r.run(first - 1)
                        total += r.run(1)
                    samples[c].append(total / window / 1000)
                else:
                    samples[c].append(runners[c].run(window) / window / 1000)
        report["scenarios"][str(effect)] = _summarise(samples, checkpoints, runners, series, window)
    return report


def _summarise(samples: dict[int, list[float]], checkpoints: tuple[int, ...],
               runners: dict[int, _Runner], series: array[int], window: int
               ) -> dict[str, Any]:
    first = checkpoints[0]
    out: dict[str, Any] = {"per_call_us": {}, "ratio_to_first": {}, "measured_calls": {},
                           "run_up_by_decade": _decades(series)}
    for c in checkpoints:
        q1, q3 = quartiles(samples[c])
        out["per_call_us"][str(c)] = {"median": round(median(samples[c]), 3),
                                      "p25": round(q1, 3), "p75": round(q3, 3)}
        ratios = [s / f for s, f in zip(samples[c], samples[first], strict=True)]
        out["ratio_to_first"][str(c)] = round(median(ratios), 3)
        if c in runners:
            end = runners[c].done
            out["measured_calls"][str(c)] = f"{end - len(samples[c]) * window + 1}-{end}"
        else:
            out["measured_calls"][str(c)] = f"call #{c} of {len(samples[c]) * window} fresh tasks"
    worst = max(out["ratio_to_first"].values())
    out["flat"] = worst <= 1.5
    return out


def _introspect(guard: Guard, task: Task) -> dict[str, Any]:
    """Sizes of the task's structures (the in-memory store's internals; ``None`` where a
    structure is not there, e.g. after an engine change)."""
    store: Any = guard.store
    state = getattr(store, "_tasks", {}).get(task.task_id)
    records = getattr(store, "_records", None)

    def size(obj: Any, attr: str) -> int | None:
        value = getattr(obj, attr, None)
        return None if value is None else len(value)

    return {
        "history": len(task.history),
        "last_content": size(task, "_last_content"),
        "signatures": size(state, "sigs"),
        "seen_pairs": size(state, "seen"),
        "approvals": size(state, "approvals"),
        "idempotency_records": None if records is None else len(records),
    }


def memory(calls: int, marks: tuple[int, ...],
           limits: tuple[int | None, ...] = (None, 1000),
           effects: tuple[Effect, ...] = (Effect.READONLY, Effect.MUTATING)
           ) -> dict[str, Any]:
    """``tracemalloc`` bytes held by one guard + task after ``marks`` calls (see the module
    docstring); ``bounded`` when the last mark holds under 5% more than the one before."""
    out: dict[str, Any] = {"calls": calls, "scenarios": []}
    for effect in effects:
        for limit in limits:
            gc.collect()
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                guard, task, name = _task(effect, limit)
                points = []
                for i in range(1, calls + 1):
                    task.call(name, distinct("small", i))
                    if i in marks:
                        gc.collect()
                        held = tracemalloc.get_traced_memory()[0] - base
                        points.append({"calls": i, "bytes": held,
                                       "bytes_per_call": round(held / i, 1),
                                       **_introspect(guard, task)})
            finally:
                tracemalloc.stop()
            last, before = points[-1]["bytes"], points[-2]["bytes"] if len(points) > 1 else 0
            out["scenarios"].append({
                "effect": str(effect),
                "max_entries": guard.policy.idempotency.max_entries,
                "points": points,
                "bytes_after_all": last,
                "bounded": bool(before) and last <= before * 1.05,
            })
            del guard, task
    return out
