"""A scripted Anthropic Messages API on 127.0.0.1 for the real Claude Code CLI (and the Claude
Agent SDK, which runs it): ``POST /v1/messages`` answers the next step of a script, as a
stream of server-sent events when the request asks for one (Claude Code does), else as one
JSON message. Every request is kept, so a test reads what the model was told.

A step is a tool call ``(name, input)`` or a final text ``str``; the step of a request is the
number of assistant tool calls already in its conversation (so a resumed session goes on
where it stopped). A request without tools (a title,
a summary) is answered with a short text and does not count.
"""

from __future__ import annotations

import json
from typing import Any

from .fake_model_api import Answer, ScriptedAPI, Step

__all__ = ["FakeAnthropic", "Step"]


class FakeAnthropic(ScriptedAPI):
    """The fake API; ``url`` is the base URL for ``ANTHROPIC_BASE_URL``."""

    def answer(self, path: str, body: dict[str, Any]) -> Answer:
        if not path.startswith("/v1/messages") or "count_tokens" in path:
            return Answer.json({"input_tokens": 10})
        self.keep(path, body)
        step = self.step_for(body)
        if body.get("stream"):
            return Answer(events=self.events(step, body))
        return Answer.json(self.message(step, body))

    # -- the script ------------------------------------------------------------------------
    def step_for(self, body: dict[str, Any]) -> Step:
        if not body.get("tools"):
            return "ok"
        done = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant"
                   for b in _blocks(m) if b.get("type") == "tool_use")
        return self.step(done)

    def message(self, step: Step, body: dict[str, Any]) -> dict[str, Any]:
        n = len(self.requests)
        content: list[dict[str, Any]]
        if isinstance(step, str):
            content, stop = [{"type": "text", "text": step}], "end_turn"
        else:
            content = [{"type": "tool_use", "id": f"toolu_{n:04d}", "name": step[0],
                        "input": step[1]}]
            stop = "tool_use"
        return {"id": f"msg_{n:04d}", "type": "message", "role": "assistant",
                "model": body.get("model", "claude-sonnet-4-5"), "content": content,
                "stop_reason": stop, "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 5}}

    def events(self, step: Step, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        message = self.message(step, body)
        block = message["content"][0]
        start = {**message, "content": [], "stop_reason": None}
        out: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": start})]
        if block["type"] == "text":
            out += [("content_block_start", {"type": "content_block_start", "index": 0,
                                             "content_block": {"type": "text", "text": ""}}),
                    ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                             "delta": {"type": "text_delta",
                                                       "text": block["text"]}})]
        else:
            out += [("content_block_start", {"type": "content_block_start", "index": 0,
                                             "content_block": {**block, "input": {}}}),
                    ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                             "delta": {"type": "input_json_delta",
                                                       "partial_json": json.dumps(
                                                           block["input"])}})]
        out += [("content_block_stop", {"type": "content_block_stop", "index": 0}),
                ("message_delta", {"type": "message_delta",
                                   "delta": {"stop_reason": message["stop_reason"],
                                             "stop_sequence": None},
                                   "usage": {"output_tokens": 5}}),
                ("message_stop", {"type": "message_stop"})]
        return out

    def texts_to_model(self) -> str:
        """Everything the last conversation holds as text (tool results, system reminders)."""
        longest = max((r for _, r in self.requests if r.get("tools")),
                      key=lambda r: len(r.get("messages", [])), default={})
        return json.dumps(longest.get("messages", []))


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]
