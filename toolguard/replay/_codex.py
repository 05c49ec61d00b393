"""Codex CLI rollout JSONL (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

Each line is ``{"timestamp", "type", "payload"}``. ``response_item`` payloads are Responses
items (read as in :mod:`._responses`: ``function_call`` / ``custom_tool_call`` /
``local_shell_call`` and their ``*_output`` by ``call_id``; calls before their outputs form a
batch). An ``event_msg`` ``user_message`` is a user turn (the ``response_item`` user messages
also carry instructions and environment context, so they are not); ``token_count`` events
report cumulative totals, repeated when nothing changed: each change is one usage step (the
difference; input tokens include cached ones, as OpenAI counts them). ``session_meta`` and
``turn_context`` become the run's metadata. Other events mirror items (agent messages,
reasoning) or the task's life cycle and are skipped. Timestamps give ``elapsed_s``.

Rollouts written by earlier Codex versions hold the items themselves, one per line, after a
first line of session metadata (``{"id", "timestamp", "instructions"}``), with
``{"record_type": "state"}`` lines between turns: read the same way, a user message being a
user turn unless it is the instructions or environment context Codex sends (text starting
with ``<``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from ._model import Reader, Run, Source, TokenUsage, UserTurn
from ._reading import head_objects, text_field
from ._responses import ItemSteps
from ._timeline import Clock

__all__ = ["READER"]

_KINDS: Final = frozenset({"session_meta", "response_item", "event_msg", "turn_context",
                           "compacted"})
_USAGE_KEYS: Final = ("input_tokens", "output_tokens")
_BARE_ITEMS: Final = frozenset({"function_call", "function_call_output", "custom_tool_call",
                                "custom_tool_call_output", "local_shell_call",
                                "local_shell_call_output", "reasoning"})


def _detect(path: Path, head: bytes) -> bool:
    kinds = [(text_field(obj, "type"), obj) for obj in head_objects(head)]
    return any((kind in _KINDS and isinstance(obj.get("payload"), dict))
               or kind in _BARE_ITEMS or "record_type" in obj for kind, obj in kinds)


def _bare(run: Run, items: ItemSteps, line: dict[str, Any], number: int, first: bool) -> bool:
    """Read a line of an earlier rollout (items not wrapped in ``payload``); ``False`` if it
    is not one."""
    kind = text_field(line, "type")
    if "record_type" in line:
        return True  # a state snapshot between turns
    if kind == "message" or kind in _BARE_ITEMS:
        if kind == "message" and line.get("role") == "user" and not _boilerplate(line):
            items.batch = None
            run.steps.append(UserTurn(number))
        else:
            items.item(line, number)
        return True
    if first and "id" in line and "timestamp" in line and kind is None:
        run.meta.update({k: line[k] for k in ("id",) if isinstance(line.get(k), str)})
        return True
    return False


def _boilerplate(message: dict[str, Any]) -> bool:
    content = message.get("content")
    texts = [b.get("text") for b in content if isinstance(b, dict)] if isinstance(
        content, list) else [content]
    return all(isinstance(t, str) and t.lstrip().startswith("<") for t in texts)


def _read(source: Source) -> Iterator[Run]:
    run = Run(source.stem, source.file, "codex", {})
    items = ItemSteps(source, run.steps, user_turns=False)
    clock = Clock()
    totals: tuple[int, int] | None = None
    first = True
    for number, line in source.json_lines():
        kind, payload = text_field(line, "type"), line.get("payload")
        elapsed = clock.elapsed(line.get("timestamp"))
        bare = payload is None and _bare(run, items, line, number, first)
        first = False
        if bare:
            continue
        if kind not in _KINDS or not isinstance(payload, dict):
            source.unrecognised(f"lines of type {kind!r}", number)
        elif kind == "response_item":
            items.item(payload, number, elapsed)
        elif kind == "event_msg" and text_field(payload, "type") == "user_message":
            items.batch = None
            run.steps.append(UserTurn(number))
        elif kind == "event_msg" and payload.get("type") == "token_count":
            totals = _usage(run, payload.get("info"), totals, number)
        elif kind == "session_meta":
            run.meta.update({k: payload[k] for k in ("id", "cli_version", "originator",
                                                     "model_provider")
                             if isinstance(payload.get(k), str)})
        elif kind == "turn_context" and isinstance(payload.get("model"), str):
            run.meta.setdefault("model", payload["model"])
    if isinstance(run.meta.get("id"), str):
        run.meta["session"] = run.meta.pop("id")  # the file name is the run's id
    yield run


def _usage(run: Run, info: Any, totals: tuple[int, int] | None, line: int
           ) -> tuple[int, int] | None:
    """Append the tokens spent since the last ``token_count`` (deduplicated: a repeated
    snapshot adds nothing); returns the new cumulative totals."""
    total = info.get("total_token_usage") if isinstance(info, dict) else None
    if not isinstance(total, dict):
        return totals
    counts = tuple(total.get(k) for k in _USAGE_KEYS)
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
        return totals
    now = (int(counts[0] or 0), int(counts[1] or 0))
    before = totals or (0, 0)
    if now[0] < before[0] or now[1] < before[1]:  # totals restarted (a resumed session)
        before = (0, 0)
    if now != before:
        run.steps.append(TokenUsage(now[0] - before[0], now[1] - before[1], line))
    return now


READER: Final = Reader(
    name="codex",
    description="Codex CLI rollout JSONL (~/.codex/sessions/**/rollout-*.jsonl)",
    suffixes=(".jsonl",),
    detect=_detect,
    read=_read,
)
