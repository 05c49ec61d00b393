"""A scripted OpenAI Responses API on 127.0.0.1 for the real Codex CLI: ``POST
/v1/responses`` streams (server-sent events) the next step of a script, a function call or a
final message. The step of a request is the number of function calls already in its input.
Every request is kept."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Step = tuple[str, dict[str, Any]] | str


class FakeResponses:
    """The fake API; ``url`` is the ``base_url`` of a Codex model provider."""

    def __init__(self, script: Sequence[Step]) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.requests.append(body)
                self._send("text/event-stream", fake.events(body))

            def do_GET(self) -> None:
                self._send("application/json", '{"models": []}')

            def _send(self, kind: str, text: str) -> None:
                raw = text.encode()
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeResponses:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def events(self, body: dict[str, Any]) -> str:
        n = len(self.requests)
        done = sum(1 for item in body.get("input", [])
                   if isinstance(item, dict) and item.get("type") == "function_call")
        step = self.script[done] if done < len(self.script) else "done"
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
        events = [
            ("response.created", {"type": "response.created", "response": {"id": f"r{n}"}}),
            ("response.output_item.done", {"type": "response.output_item.done",
                                           "output_index": 0, "item": item}),
            ("response.completed", {"type": "response.completed",
                                    "response": {"id": f"r{n}", "usage": usage}})]
        return "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in events)

    def told(self) -> str:
        """The last input the CLI sent, as text."""
        return json.dumps(self.requests[-1].get("input", [])) if self.requests else ""
