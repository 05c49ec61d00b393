"""A scripted Gemini API on 127.0.0.1 for the real Gemini CLI: ``generateContent`` and
``streamGenerateContent`` (server-sent events) answer the next step of a script; a request
whose conversation has no tools (a routing or a summary request) gets a short JSON text.
The step of a request is the number of model function calls already in its conversation.
Every request is kept."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Step = tuple[str, dict[str, Any]] | str


class FakeGemini:
    """The fake API; ``url`` is the base URL for ``GOOGLE_GEMINI_BASE_URL``."""

    def __init__(self, script: Sequence[Step]) -> None:
        self.script = list(script)
        self.requests: list[tuple[str, dict[str, Any]]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.requests.append((self.path, body))
                if ":countTokens" in self.path:
                    self._send("application/json", json.dumps({"totalTokens": 10}))
                    return
                answer = fake.answer(body)
                if "streamGenerateContent" in self.path:
                    self._send("text/event-stream", f"data: {json.dumps(answer)}\r\n\r\n")
                else:
                    self._send("application/json", json.dumps(answer))

            def do_GET(self) -> None:
                self._send("application/json", "{}")

            def _send(self, kind: str, text: str) -> None:
                raw = text.encode()
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeGemini:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        usage = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}
        if not body.get("tools"):
            text = '{"reasoning": "the user", "next_speaker": "user", "model_choice": "flash"}'
            return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                                    "finishReason": "STOP", "index": 0}],
                    "usageMetadata": usage}
        done = sum(1 for c in body.get("contents", []) if c.get("role") == "model"
                   for p in c.get("parts", []) if "functionCall" in p)
        step = self.script[done] if done < len(self.script) else "done"
        part: dict[str, Any] = ({"text": step} if isinstance(step, str) else
                                {"functionCall": {"name": step[0], "args": step[1]}})
        return {"candidates": [{"content": {"role": "model", "parts": [part]},
                                "finishReason": "STOP", "index": 0}],
                "usageMetadata": usage}

    def told(self) -> str:
        """The last conversation the CLI sent, as text."""
        with_tools = [b for _, b in self.requests if b.get("tools")]
        return json.dumps(with_tools[-1].get("contents", [])) if with_tools else ""
