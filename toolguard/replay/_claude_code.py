"""Claude Code session JSONL (``~/.claude/projects/<project>/<session>.jsonl``).

One line per content block: an assistant message with thinking, text and two ``tool_use``
blocks is four lines sharing ``message.id``. So the lines of one message id are one model turn,
its calls one batch, and its ``usage`` is counted once (the last line's; input tokens include
cache reads and writes, which Anthropic counts apart from ``input_tokens``). A ``tool_result``
block in a user line answers the call with its ``tool_use_id`` (``is_error`` as recorded).
A user turn is a user line with text of its own: not ``isMeta`` (caveats the CLI inserts), not
a compact summary (``isCompactSummary``), not a line of tool results only. Lines of a subagent
(``isSidechain``, ``agentId``) form a run of their own, as does a subagent's own file. Summary,
file-history snapshot and system lines carry no call and are skipped (a file of nothing else,
which Claude Code writes too, is a note, not a problem). Timestamps give each
call its ``elapsed_s``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ._model import (
    Reader,
    RecordedCall,
    Run,
    Source,
    Step,
    UserTurn,
    arguments,
    model_name,
    usage_counts,
)
from ._reading import head_objects, text_field
from ._timeline import Clock, Pending

__all__ = ["READER"]

_QUIET: Final = frozenset({"summary", "file-history-snapshot", "system", "queue-operation",
                           "progress", "custom-title", "tag", "pr-link"})
_INPUT_KEYS: Final = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")

def _detect(path: Path, head: bytes) -> bool:
    return any(obj.get("type") in ("user", "assistant", *_QUIET)
               and obj.keys() & {"sessionId", "uuid", "messageId", "leafUuid"}
               for obj in head_objects(head))

@dataclass
class _Thread:
    """The run being built for the main conversation or one subagent."""

    run: Run
    calls: Pending  # tool_use_id -> the call
    clock: Clock = field(default_factory=Clock)
    usage_at: dict[str, int] = field(default_factory=dict)  # message id -> step index

def _read(source: Source) -> Iterator[Run]:
    threads: dict[str, _Thread] = {}
    quiet = 0
    for number, line in source.json_lines():
        kind = text_field(line, "type")
        if kind in _QUIET:
            quiet += 1
            continue
        message = line.get("message")
        if kind not in ("user", "assistant") or not isinstance(message, dict):
            source.unrecognised(f"lines of type {kind!r}", number)
            continue
        agent = line.get("agentId")
        key = str(agent) if agent else ("sidechain" if line.get("isSidechain") else "")
        thread = threads.get(key)
        if thread is None:
            meta = {k: line[k] for k in ("sessionId", "version", "agentId")
                    if isinstance(line.get(k), str)}
            name = source.stem if not key else f"{source.stem}/{key}"
            run = Run(name, source.file, "claude-code", meta)
            thread = threads[key] = _Thread(run, Pending(run.steps))
        elapsed = thread.clock.elapsed(line.get("timestamp"))
        if kind == "assistant":
            _assistant(source, thread, message, number, elapsed)
        else:
            _user(source, thread, line, message, number)
    if not threads and quiet:  # Claude Code keeps files of summaries or snapshots alone
        source.no_calls_by_design = "only summary, snapshot or system lines"
    yield from (t.run for t in threads.values())

def _assistant(source: Source, thread: _Thread, message: dict[str, Any], number: int,
               elapsed: float | None) -> None:
    steps = thread.run.steps
    message_id = str(message.get("id") or f"line {number}")
    spent = usage_counts(message.get("usage"), _INPUT_KEYS, ("output_tokens",), number,
                         model_name(message))
    if message_id not in thread.usage_at:
        source.model_turns += 1
        if spent is not None:
            thread.usage_at[message_id] = len(steps)
            steps.append(spent)
    elif spent is not None:  # a later line of the same message: its usage supersedes
        steps[thread.usage_at[message_id]] = spent
    content = message.get("content")
    for block in content if isinstance(content, list) else []:
        if not (isinstance(block, dict) and block.get("type") == "tool_use"):
            continue
        if not isinstance(block.get("name"), str):
            source.problem(number, "a tool_use block without a name; block skipped")
            continue
        args, raw = arguments(block.get("input"), None)
        thread.calls.add(block.get("id"), RecordedCall(block["name"], args, raw,
                                                       batch=message_id, elapsed_s=elapsed,
                                                       line=number))

def _user(source: Source, thread: _Thread, line: dict[str, Any], message: dict[str, Any],
          number: int) -> None:
    steps: list[Step] = thread.run.steps
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
    for block in results:
        if not thread.calls.answer(block.get("tool_use_id"), block.get("content"),
                                   block.get("is_error") is True):
            source.unrecognised("tool_result blocks whose tool_use is not in the file", number)
    text = (isinstance(content, str) and bool(content.strip())) or len(results) < len(blocks)
    if text and not line.get("isMeta") and not line.get("isCompactSummary"):
        steps.append(UserTurn(number))

READER: Final = Reader(
    name="claude-code",
    description="Claude Code session JSONL (~/.claude/projects/*/*.jsonl), subagents as "
                "runs of their own",
    suffixes=(".jsonl",),
    detect=_detect,
    read=_read,
)
