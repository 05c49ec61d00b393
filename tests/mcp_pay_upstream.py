"""A raw stdio MCP server with a payment tool, for the proxy's unknown-outcome tests: it takes
a payment first (a line ``paid ORDER`` in ``--log``), then may be slow, die, or answer with a
frame over a limit, as a real gateway behind a flaky server does. One request at a time, as a
hand-written server serves them; a cancellation is advisory (MCP): the payment stands.

Tools: ``pay(order)`` (no annotations: mutating, may act on the outside world) and
``refund(order)`` (the same; a policy may gate it behind approval). The log line of a call
that carries an idempotency key (``_meta["toolguard/idempotency-key"]``) ends ``key=KEY``.

Options: ``--log FILE`` (required), ``--delay S`` (seconds between taking a payment and
answering), ``--die`` (write a credential to stderr and exit 9 instead of answering),
``--answer-bytes N`` (answer with a text of N bytes), ``--run-notifications`` (execute a
``tools/call`` that comes without an id, as a careless server would).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

_TOOL = {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}
TOOLS = [{"name": "pay", "inputSchema": _TOOL}, {"name": "refund", "inputSchema": _TOOL}]
SECRET_LINE = "db error, dsn postgres://app:S3CRETPW@db/x key sk-live-STDERR4242abcd"


def _send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--die", action="store_true")
    parser.add_argument("--answer-bytes", type=int, default=0)
    parser.add_argument("--run-notifications", action="store_true")
    options = parser.parse_args()
    for line in sys.stdin:
        message = json.loads(line)
        rid, method = message.get("id"), message.get("method")
        if method == "initialize":
            _send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}}, "serverInfo": {"name": "pay", "version": "1"}}})
        elif method == "tools/list":
            _send({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})
        elif method == "tools/call" and (rid is not None or options.run_notifications):
            name, order = message["params"]["name"], message["params"]["arguments"]["order"]
            verb = "paid" if name == "pay" else "refunded"
            key = (message["params"].get("_meta") or {}).get("toolguard/idempotency-key")
            with Path(options.log).open("a") as log:  # with the key the proxy forwards, if any
                log.write(f"{verb} {order}" + (f" key={key}" if key else "") + "\n")
            time.sleep(options.delay)
            if options.die:
                sys.stderr.write(SECRET_LINE + "\n")
                sys.stderr.flush()
                os._exit(9)
            text = "x" * options.answer_bytes if options.answer_bytes else f"{verb} {order}"
            if rid is not None:
                _send({"jsonrpc": "2.0", "id": rid,
                       "result": {"content": [{"type": "text", "text": text}]}})
        elif rid is not None and method is not None:
            _send({"jsonrpc": "2.0", "id": rid, "result": {}})


if __name__ == "__main__":
    main()
