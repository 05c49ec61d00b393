"""The feature-complete sketch of ``benchmarks/_sketches.py`` does what it claims, so that
toolguard's cost read against it (``x_sketch_full``) compares equal work: the ladder's
thresholds, the progress and stagnation rules, TTL'd idempotency records, a bounded history."""

from __future__ import annotations

import importlib.util
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import ROOT

SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}


@pytest.fixture(scope="module")
def sketches() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_sketches", ROOT / "benchmarks" / "_sketches.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _sketch(sketches: ModuleType, func: Any, **options: Any) -> Any:
    options = {"mutating": False, "warn_at": 2, "block_at": 3, **options}
    return sketches.FeatureSketch("t", func, SCHEMA, **options)


def test_a_repeated_call_is_warned_then_blocked_at_the_thresholds(sketches: ModuleType) -> None:
    runs: list[int] = []

    def read(x: int) -> None:
        runs.append(x)

    sketch = _sketch(sketches, read)
    results = [sketch.call("t", {"x": 1}) for _ in range(4)]
    assert [r.decision for r in results] == ["allow", "warn", "block", "block"]
    assert [r.count for r in results] == [1, 2, 3, 4]
    assert results[1].notice and results[2].is_error
    assert runs == [1, 1]
    assert sketch.call("t", '{"x": 2}').decision == "allow"  # JSON text, other arguments
    assert sketch.call("t", {"x": "2"}).decision == "invalid"


def test_a_repeated_write_returns_the_stored_result_until_its_ttl(sketches: ModuleType) -> None:
    clock, runs = Clock(), []

    def write(x: int) -> int:
        runs.append(x)
        return len(runs)

    sketch = _sketch(sketches, write, mutating=True, warn_at=10, block_at=10, ttl_s=60.0,
                     clock=clock)
    first, again = sketch.call("t", {"x": 1}), sketch.call("t", {"x": 1})
    assert (first.decision, again.decision) == ("allow", "cached")
    assert again.value == first.value == 1 and runs == [1]
    clock.now += 61.0
    assert (sketch.call("t", {"x": 1}).decision, runs) == ("allow", [1, 1])


def test_an_output_that_moves_restarts_the_count(sketches: ModuleType) -> None:
    values = iter(range(100))
    sketch = _sketch(sketches, lambda x: next(values))
    # as toolguard's ladder: each repeat is warned, none reaches block_at while it moves
    results = [sketch.call("t", {"x": 1}) for _ in range(6)]
    assert [(r.decision, r.count) for r in results] == [("allow", 1)] + [("warn", 2)] * 5


def test_the_same_result_for_other_arguments_stagnates(sketches: ModuleType) -> None:
    sketch = _sketch(sketches, lambda x: "no match", stagnation_warn_at=2,
                     stagnation_block_at=4)
    decisions = [sketch.call("t", {"x": x}).decision for x in range(5)]
    assert decisions == ["allow", "warn", "warn", "block", "block"]


def test_the_history_and_the_records_are_bounded(sketches: ModuleType) -> None:
    sketch = _sketch(sketches, lambda x: x, mutating=True, max_history=3, max_entries=2)
    for x in range(5):
        sketch.call("t", {"x": x})
    assert [record[1] for record in sketch.history] == [{"x": 2}, {"x": 3}, {"x": 4}]
    assert sketch.call("t", {"x": 4}).decision == "cached"
    assert sketch.call("t", {"x": 0}).decision == "allow"  # its record was evicted
