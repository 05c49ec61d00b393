"""A scripted OpenAI Responses API on 127.0.0.1 for the real Codex CLI: ``POST
/v1/responses`` streams (server-sent events) the next step of a script, a function call or a
final message. The step of a request is the number of function calls already in its input.
Every request is kept."""

from __future__ import annotations

import json
from typing import Any

from .fake_model_api import Answer, ScriptedAPI, Step

__all__ = ["FakeResponses", "Step"]


class FakeResponses(ScriptedAPI):
    """The fake API; ``url`` is the ``base_url`` of a Codex model provider."""

    prefix = "/v1"

    def answer(self, path: str, body: dict[str, Any]) -> Answer:
        n = self.keep(path, body)
        done = sum(1 for item in body.get("input", [])
                   if isinstance(item, dict) and item.get("type") == "function_call")
        step = self.step(done)
        item: dict[str, Any]
        if isinstance(step, str):
            item = {"type": "message", "role": "assistant", "id": f"msg_{n}",
                    "content": [{"type": "output_text", "text": step}]}
        else:
            item = {"type": "function_call", "id": f"fc_{n}", "name": step[0],
                    "arguments": json.dumps(step[1]), "call_id": f"call_{n}"}
        usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": 15}
        return Answer(events=[
            ("response.created", {"type": "response.created", "response": {"id": f"r{n}"}}),
            ("response.output_item.done", {"type": "response.output_item.done",
                                           "output_index": 0, "item": item}),
            ("response.completed", {"type": "response.completed",
                                    "response": {"id": f"r{n}", "usage": usage}})])

    def answer_get(self, path: str) -> Answer:
        return Answer('{"models": []}')

    def told(self) -> str:
        """The last input the CLI sent, as text."""
        return json.dumps(self.requests[-1][1].get("input", [])) if self.requests else ""
