"""Parallel tool calls of one model message: identical calls (same tool and signature)
execute once and the others get that result (``Task.call_batch``, ``run_tool_calls``,
replay)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from toolguard._errors import CanonicalizationError
from toolguard._results import ToolResult
from toolguard._types import CACHED
from toolguard.hashing._canonical import args_hash
from toolguard.hashing._json_text import ArgumentsError, parse_arguments

if TYPE_CHECKING:
    from ._call import TaskState


def batch(task: TaskState, calls: Sequence[tuple[str, Any]],
          run: Callable[[str, Any], ToolResult]) -> list[ToolResult]:
    order, unique = dedupe(task, calls)
    results = [run(t, a) for t, a in unique]
    return [copy_for(results[i], dup) for i, dup in order]


def dedupe(task: TaskState, calls: Sequence[tuple[str, Any]]
           ) -> tuple[list[tuple[int, bool]], list[tuple[str, Any]]]:
    seen: dict[tuple[str, str], int] = {}
    order: list[tuple[int, bool]] = []
    unique: list[tuple[str, Any]] = []
    entries = task.guard._config.entries
    per_tool = Counter(tool for tool, _ in calls)
    for tool, args in calls:
        if per_tool[tool] == 1:  # the only call of its tool: nothing to merge, no hash
            order.append((len(unique), False))
            unique.append((tool, args))
            continue
        try:
            parsed = (parse_arguments(args) if isinstance(args, (str, bytes))
                      else dict(args or {}))
            entry = entries.get(tool)
            ident = (tool, entry.signature_of(parsed) if entry else args_hash(parsed))
        except (ArgumentsError, CanonicalizationError, TypeError, ValueError):
            ident = (tool, f"#{len(unique)}")  # invalid: never merged
        if ident in seen:
            order.append((seen[ident], True))
        else:
            seen[ident] = len(unique)
            order.append((len(unique), False))
            unique.append((tool, args))
    return order, unique


def copy_for(result: ToolResult, duplicate: bool) -> ToolResult:
    if not duplicate:
        return result
    return replace(result, decision=CACHED if result.executed else result.decision,
                   reason="identical to another call in the same batch")
