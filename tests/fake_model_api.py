"""The loopback HTTP scaffolding the scripted model APIs share (:mod:`tests.fake_anthropic`,
:mod:`tests.fake_openai_responses`, :mod:`tests.fake_gemini`): a threaded server on
127.0.0.1 with a free port, started and stopped as a context manager, that keeps every
request and hands each one to the subclass's :meth:`ScriptedAPI.answer`.

A script is a list of steps: a tool call ``(name, arguments)`` or a final text ``str``. Each
API counts the tool calls already in a request's conversation to pick its step, so the same
script replays for a resumed conversation; past the end of the script the model says "done".
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

Step = tuple[str, dict[str, Any]] | str
Api = TypeVar("Api", bound="ScriptedAPI")


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: ``body`` as one text (sent with its length), or ``events`` as
    server-sent events written one by one (the connection closes after them)."""

    body: str = ""
    kind: str = "application/json"
    events: Iterable[tuple[str, dict[str, Any]]] | None = None

    @staticmethod
    def json(data: Any) -> Answer:
        return Answer(json.dumps(data))


class ScriptedAPI:
    """The server; ``url`` is ``http://127.0.0.1:PORT`` plus the subclass's ``prefix``."""

    prefix = ""

    def __init__(self, script: Sequence[Step]) -> None:
        self.script = list(script)
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                self._send(api.answer(self.path, body))

            def do_GET(self) -> None:
                self._send(api.answer_get(self.path))

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.end_headers()

            def _send(self, answer: Answer) -> None:
                self.send_response(200)
                if answer.events is None:
                    raw = answer.body.encode()
                    self.send_header("content-type", answer.kind)
                    self.send_header("content-length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                    return
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.end_headers()
                for event, data in answer.events:
                    self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{self.prefix}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self: Api) -> Api:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def keep(self, path: str, body: dict[str, Any]) -> int:
        """Keep one request; returns how many are kept (an id for the answer)."""
        with self._lock:
            self.requests.append((path, body))
            return len(self.requests)

    def step(self, calls_so_far: int) -> Step:
        """The script's step after ``calls_so_far`` tool calls; "done" past its end."""
        return self.script[calls_so_far] if calls_so_far < len(self.script) else "done"

    def answer(self, path: str, body: dict[str, Any]) -> Answer:  # pragma: no cover
        raise NotImplementedError

    def answer_get(self, path: str) -> Answer:
        return Answer("{}")
