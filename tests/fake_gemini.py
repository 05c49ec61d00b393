"""A scripted Gemini API on 127.0.0.1 for the real Gemini CLI: ``generateContent`` and
``streamGenerateContent`` (server-sent events) answer the next step of a script; a request
whose conversation has no tools (a routing or a summary request) gets a short JSON text.
The step of a request is the number of model function calls already in its conversation.
Every request is kept."""

from __future__ import annotations

import json
from typing import Any

from .fake_model_api import Answer, ScriptedAPI, Step

__all__ = ["FakeGemini", "Step"]


class FakeGemini(ScriptedAPI):
    """The fake API; ``url`` is the base URL for ``GOOGLE_GEMINI_BASE_URL``."""

    def answer(self, path: str, body: dict[str, Any]) -> Answer:
        self.keep(path, body)
        if ":countTokens" in path:
            return Answer.json({"totalTokens": 10})
        text = json.dumps(self.content(body))
        if "streamGenerateContent" in path:
            return Answer(f"data: {text}\r\n\r\n", "text/event-stream")
        return Answer(text)

    def content(self, body: dict[str, Any]) -> dict[str, Any]:
        usage = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}
        if not body.get("tools"):
            text = '{"reasoning": "the user", "next_speaker": "user", "model_choice": "flash"}'
            return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                                    "finishReason": "STOP", "index": 0}],
                    "usageMetadata": usage}
        done = sum(1 for c in body.get("contents", []) if c.get("role") == "model"
                   for p in c.get("parts", []) if "functionCall" in p)
        step = self.step(done)
        part: dict[str, Any] = ({"text": step} if isinstance(step, str) else
                                {"functionCall": {"name": step[0], "args": step[1]}})
        return {"candidates": [{"content": {"role": "model", "parts": [part]},
                                "finishReason": "STOP", "index": 0}],
                "usageMetadata": usage}

    def told(self) -> str:
        """The last conversation the CLI sent, as text."""
        with_tools = [b for _, b in self.requests if b.get("tools")]
        return json.dumps(with_tools[-1].get("contents", [])) if with_tools else ""
