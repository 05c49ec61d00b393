"""OpenHands event streams (a JSON list of serialized events, as ``trajectory`` saves).

An agent action with ``tool_call_metadata`` is one call: the tool is its ``function_name``,
the arguments the model's own JSON text from ``model_response`` (the call with the same
``tool_call_id``), else the action's ``args``. Calls from one ``model_response`` (``id``) form a
batch and its ``usage`` is counted once. The observation whose ``cause`` is the action's ``id``
is the result; it is an error when the observation is ``error`` or its ``success`` is false. A
user ``message`` is a user turn, an agent ``message`` a model turn without a call; state
changes, recalls and the like carry no call and are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from ._model import Reader, RecordedCall, Run, Source, Step, UserTurn, arguments, usage_counts
from ._reading import field_list, text_field
from ._timeline import Clock, Pending

__all__ = ["READER"]

_SIGNATURE: Final = re.compile(rb'"source"\s*:\s*"(?:user|agent|environment)"')
_EVENT: Final = re.compile(rb'"(?:action|observation)"\s*:')
_QUIET_ACTIONS: Final = frozenset({"system", "recall", "change_agent_state", "null"})


def _detect(path: Path, head: bytes) -> bool:
    return (head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"["
            and bool(_SIGNATURE.search(head)) and bool(_EVENT.search(head)))


def _read(source: Source) -> Iterator[Run]:
    events = source.load_json()
    if isinstance(events, dict) and isinstance(events.get("trajectory"), list):
        events = events["trajectory"]
    if not isinstance(events, list):
        source.problem(None, "expected a JSON list of events")
        return
    steps: list[Step] = []
    calls = Pending(steps)  # by the action's id
    responses: set[str] = set()
    clock = Clock()
    for i, event in enumerate(events):
        if not isinstance(event, dict):
            source.unrecognised("events that are not objects")
            continue
        elapsed = clock.elapsed(event.get("timestamp"))
        action, observation = text_field(event, "action"), event.get("observation")
        metadata = event.get("tool_call_metadata")
        if action is not None and isinstance(metadata, dict):
            call = _call(source, steps, event, metadata, responses, elapsed, i)
            if call is not None:
                calls.add(event.get("id"), call)
        elif action == "message":
            if event.get("source") == "user":
                steps.append(UserTurn())
            else:
                source.model_turns += 1
        elif observation is not None:  # the result of the call that caused it, if any
            calls.answer(event.get("cause"), event.get("content"),
                         observation == "error" or event.get("success") is False)
        elif action is not None and action not in _QUIET_ACTIONS:
            source.unrecognised(f"{action!r} actions without tool_call_metadata")
    yield Run(source.stem, source.file, "openhands", {}, steps)


def _call(source: Source, steps: list[Step], event: Mapping[str, Any],
          metadata: Mapping[str, Any], responses: set[str], elapsed: float | None, i: int
          ) -> RecordedCall | None:
    """The call of an action (its usage, once per model response, goes to ``steps``)."""
    name = metadata.get("function_name")
    if not isinstance(name, str) or not name:
        source.problem(None, f"event {i}: tool_call_metadata without function_name; skipped")
        return None
    response = metadata.get("model_response")
    response = response if isinstance(response, dict) else {}
    response_id = str(response.get("id") or f"event {i}")
    if response_id not in responses:
        responses.add(response_id)
        source.model_turns += 1
        spent = usage_counts(response.get("usage"), ("prompt_tokens",), ("completion_tokens",))
        if spent is not None:
            steps.append(spent)
    raw = _model_arguments(response, metadata.get("tool_call_id"))
    if raw is not None:
        args, text = arguments(raw, None)
    else:
        given = event.get("args")
        args, text = arguments({k: v for k, v in given.items() if k != "thought"}
                               if isinstance(given, dict) else None, None)
    return RecordedCall(name, args, text, batch=response_id, elapsed_s=elapsed)


def _model_arguments(response: Mapping[str, Any], call_id: Any) -> Any:
    """The ``function.arguments`` the model emitted for ``call_id``, or ``None``."""
    for choice in field_list(response, "choices"):
        message = choice.get("message") if isinstance(choice, dict) else None
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for tc in calls if isinstance(calls, list) else []:
            if isinstance(tc, dict) and tc.get("id") == call_id:
                function = tc.get("function")
                if isinstance(function, dict):
                    return function.get("arguments")
    return None


READER: Final = Reader(
    name="openhands",
    description="OpenHands event stream JSON (actions with tool_call_metadata, observations "
                "by cause)",
    suffixes=(".json",),
    detect=_detect,
    read=_read,
)
